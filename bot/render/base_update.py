"""What lanebot says when the default branch moved under its pull request. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from bot.core.text import code_span

__all__ = ["UPDATE_HINT", "conflicting_comment", "update_report"]

UPDATE_HINT = (  # plain text: the pull request's notes are escaped
    "This pull request conflicts with it: resolve the conflict on its branch, or comment /update "
    "and lanebot tries the merge again."
)


def conflicting_comment(*, base: str, branch: str, head: str, on_conflict: str) -> str:
    """The one comment that says the pull request conflicts with its base, and offers `/update`."""
    how = (
        "a resolver session concludes the merge, as for conflicting lanes"
        if on_conflict == "agent"
        else "a conflict stops it (`build.on_conflict: block`), naming the paths"
    )
    return (
        f"This pull request (at {code_span(head[:12])}) now conflicts with {code_span(base)}: what was "
        f"pushed to {code_span(base)} changes what {code_span(branch)} changes too.\n\n"
        f"Comment `/update` and lanebot merges {code_span(base)} into {code_span(branch)} ({how}), runs "
        "verify on the result and pushes it here only if it passes. You can also resolve it yourself."
    )


def update_report(
    *, to: str, done: str, pushed: str | None, verify: str | None, verify_passed: bool | None, problems: Sequence[str]
) -> str:
    """The answer to `/update`: what was done, what verify said, and the new head when one was pushed."""
    lines = [f"{to}{done}."]
    if verify is not None and verify_passed is not None:
        lines.append(f"Verify ({code_span(verify)}) {'passed' if verify_passed else 'failed'} on the merge.")
    if pushed is not None:
        lines.append(f"Pushed {code_span(pushed[:12])} to this pull request's branch.")
    else:
        lines.append("Nothing was pushed.")
    lines += [f"- {problem}" for problem in problems]
    return "\n\n".join(lines) + "\n"
