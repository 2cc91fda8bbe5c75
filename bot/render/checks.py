"""What a check run says when it ends: a lane attempt's report, verify's, and a re-run's note. Pure text.

The summaries (files changed, the tail of the check's output, where the transcript is) are cut to
GitHub's 65,535 characters (bot.core.checks). What the agent, the check or verify printed, and a
failure's reason, are untrusted: escaped and defused (bot.core.text.defuse). A lane's last failed attempt (the one that blocks the
run) offers a `Retry lane` button, and the last failed verify a `Re-run verify` button. GitHub never
lets a completed check run go back to in progress, so a retry reports on a new check run and
`rerun_note` is what the old one is edited to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.checks import RERUN_VERIFY, RETRY_LANE, TITLE_LIMIT, CheckReport, fit_summary
from bot.core.text import code_block, code_span, defuse, markdown_text, shorten

_PATHS_SHOWN = 200
_TAIL_CHARS = 20_000


def lane_report(
    *,
    unit_id: str,
    attempt: int,
    passed: bool,
    reason: str | None,
    changed_paths: Sequence[str],
    offending_paths: Sequence[str] = (),
    check_output: str | None,
    transcript: str,
    offer_retry: bool = False,
) -> CheckReport:
    """The summary of one lane attempt. Pure. A failed attempt after which no retry is left
    (`offer_retry`) offers the `Retry lane` button."""
    if passed:
        conclusion, title = "success", f"lane {unit_id} passed its check (attempt {attempt})"
    else:
        conclusion, title = "failure", f"attempt {attempt} failed: {_plain(reason)}"
    parts = [f"**Attempt {attempt}** of lane {code_span(unit_id)}."]
    if reason and not passed:
        parts.append(f"**Why it failed:** {markdown_text(shorten(reason, 2_000))}")
    if offending_paths:
        parts.append("**Changed outside the unit's `files`:**\n" + _path_list(offending_paths))
    parts.append(f"**Files changed ({len(changed_paths)}):**\n" + (_path_list(changed_paths) or "none"))
    if check_output is not None:
        parts.append("**The end of the check's output:**\n\n" + defuse(code_block(_tail(check_output))))
    parts.append(f"**Transcript:** {code_span(transcript)} on the runner host.")
    actions = (RETRY_LANE,) if offer_retry and not passed else ()
    if actions:
        parts.append(
            "No retries are left, so the run is blocked: **Retry lane** (or `/retry "
            f"{unit_id}` on the issue) runs it again, shown this failure."
        )
    return CheckReport(conclusion, title, "\n\n".join(parts), actions)


@dataclass(frozen=True)
class CulpritNote:
    """What a failed verify's bisection found (bot.core.bisect): `finding`, one sentence; verify's
    output on the first commit it fails on; the culprit lane's check run, and the lane to retry."""

    finding: str
    output: str
    check_url: str | None = None
    retry_unit: str | None = None


def verify_report(
    *,
    passed: bool,
    command: str,
    output: str,
    reason: str | None,
    transcript: str | None,
    offer_rerun: bool = False,
    culprit: CulpritNote | None = None,
) -> CheckReport:
    """The summary of one run of the repository's verify command. Pure. A failure after which no
    repair is left (`offer_rerun`) offers the `Re-run verify` button, unless its `culprit` names a
    lane: then `/retry <unit>` is what moves the run on."""
    title = "verify passed" if passed else f"verify failed: {_plain(reason)}"
    parts = [f"**Command:** {code_span(command)}"]
    parts.append(
        "**The end of its output:**\n\n" + defuse(code_block(_tail(output)))
        if output.strip()
        else "It printed nothing."
    )
    if culprit is not None and not passed:
        parts += _culprit_parts(culprit, blocked=offer_rerun)
    if transcript:
        parts.append(f"**Last session's transcript:** {code_span(transcript)} on the runner host.")
    actions = (RERUN_VERIFY,) if offer_rerun and not passed and not (culprit and culprit.retry_unit) else ()
    if actions:
        parts.append(
            "No repair is left, so the run is blocked: **Re-run verify** (or `/retry` on the issue) "
            "runs the integrate step and verify again."
        )
    return CheckReport("success" if passed else "failure", title, "\n\n".join(parts), actions)


def _culprit_parts(culprit: CulpritNote, *, blocked: bool) -> list[str]:
    finding = f"**What broke it:** {markdown_text(culprit.finding)}"
    if culprit.check_url:
        finding += f" ([its lane's check run]({culprit.check_url}))"
    parts = [finding]
    if culprit.output.strip():
        parts.append("**The end of verify's output there:**\n\n" + defuse(code_block(_tail(culprit.output))))
    if culprit.retry_unit and blocked:
        parts.append(
            f"No repair is left, so the run is blocked: {code_span(f'/retry {culprit.retry_unit}')} on the issue "
            "redoes that lane from the joined branch, shown this failure, and integrates again."
        )
    return parts


def rerun_note(*, requested_by: str, what: str, check_name: str, summary: str | None) -> tuple[str, str]:
    """(title, summary) of a completed check run someone asked to run again. Pure: the old summary
    stays below a line saying who asked and where the result will be."""
    title = shorten(f"{what} requested by @{requested_by}", TITLE_LIMIT)
    head = (
        f"**@{markdown_text(requested_by)} asked for {what}.** Its result is reported on the "
        f"{code_span(check_name)} check run of the commit it ends on: this one, completed again, for a "
        f"lane that ends on this commit; a new one otherwise (GitHub does not reopen a completed check run)."
    )
    return title, fit_summary(f"{head}\n\n---\n\n{summary}" if summary else head)


def _path_list(paths: Sequence[str]) -> str:
    shown = [f"- {code_span(path)}" for path in paths[:_PATHS_SHOWN]]
    if len(paths) > _PATHS_SHOWN:
        shown.append(f"- … and {len(paths) - _PATHS_SHOWN} more")
    return "\n".join(shown)


def _plain(reason: str | None) -> str:
    """A failure's reason (it may quote the agent or the check) for a check run's title, defused."""
    return defuse(shorten(reason, TITLE_LIMIT), context="plain") if reason else "see the summary"


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL_CHARS else "…" + text[-_TAIL_CHARS:]
