"""lanebot's short answers on an issue: a refused command, a plan that failed, `/status`. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from bot.core.budget import Spent
from bot.core.commands import COMMANDS
from bot.core.graph import Problem
from bot.core.lifecycle import RunState, available_actions, describe_state
from bot.core.text import (
    COMMENT_LIMIT,
    Escaped,
    code_block,
    code_span,
    defuse,
    markdown_text,
    plural,
    shorten,
    shorten_tail,
)
from bot.render.progress import LaneView, lane_checklist

_COMMAND_QUOTED = 200
_REASON_CHARS = 2_000
_PROBLEM_CHARS = 1_000


_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def _valid_now(state: RunState | str | None, *, held: bool = False) -> Escaped:
    return Escaped(", ".join(code_span(COMMANDS[name].usage) for name in available_actions(state, held=held)))


def render_refusal(
    login: str,
    command_line: str,
    reason: str,
    state: RunState | str | None,
    *,
    marker_text: str | None = None,
    held: bool = False,
) -> str:
    """`@login: `/approve`: reason. Valid now: ...`, the answer to a refused or invalid command
    (`held`: the run carries a hold, so `/unhold` is valid rather than `/hold`).

    `reason` is escaped unless it is `Escaped` already. `marker_text` (from `marker`) goes first
    when the caller needs to find this answer again.
    """
    if not _LOGIN.fullmatch(login):
        raise ValueError(f"{login!r} is not a GitHub login")
    quoted = code_span(shorten(command_line.strip(), _COMMAND_QUOTED))
    why = markdown_text(shorten(reason, _REASON_CHARS)) if not isinstance(reason, Escaped) else reason
    head = f"{marker_text}\n" if marker_text else ""
    valid = f"Valid now, for {describe_state(state)}: {_valid_now(state, held=held)}."
    return f"{head}@{login}: {quoted}: {why.rstrip('.')}. {valid}\n"


def render_plan_failed(problems: Iterable[Problem | str], attempts: int, *, marker_text: str | None = None) -> str:
    """The comment for a run whose planner gave no valid plan: every problem of the last plan."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    items = [f"- {markdown_text(shorten(str(problem), _PROBLEM_CHARS))}" for problem in problems]
    head = (
        (f"{marker_text}\n" if marker_text else "")
        + f"**lanebot could not get a valid plan** after {plural(attempts, 'attempt')}; the run has failed.\n\n"
        + ("The last plan was refused for:\n\n" if items else "The planner produced no plan at all.\n\n")
    )
    tail = (
        "\nComment `/plan [notes]` to try again, or write the plan yourself in a fenced"
        f" `lanebot-plan` block (JSONL). Valid now: {_valid_now(RunState.FAILED)}.\n"
    )
    return head + _list_within(items, COMMENT_LIMIT - len(head) - len(tail), "problems") + tail


def _list_within(items: Sequence[str], budget: int, noun: str) -> str:
    """As many `items` lines as fit in `budget` characters, then a line counting the rest."""
    shown: list[str] = []
    used = 0
    reserve = len(f"- … and {len(items)} more {noun}\n")
    for index, item in enumerate(items):
        cost = len(item) + 1
        room = budget - (reserve if index + 1 < len(items) else 0)
        if used + cost > room:
            shown.append(f"- … and {len(items) - index} more {noun}")
            break
        shown.append(item)
        used += cost
    return "".join(line + "\n" for line in shown)


def render_status(
    *,
    run_id: int | None,
    state: RunState | str | None,
    lanes: Sequence[LaneView] = (),
    plan_revision: int | None = None,
    approved_revision: int | None = None,
    pr_number: int | None = None,
    error: str | None = None,
    now: datetime | None = None,
    marker_text: str | None = None,
    held: bool = False,
    spent: Spent | None = None,
) -> str:
    """The answer to `/status`: the run's state, its plan revisions, its PR, what its sessions
    spent, and its lanes (`held`: the run carries a hold; the commands valid now say so)."""
    head = f"{marker_text}\n" if marker_text else ""
    if run_id is None or state is None:
        return f"{head}This issue has no lanebot run. Valid now: {_valid_now(None)}.\n"
    facts = [f"**Run {run_id}** is {Escaped(RunState(state).value.replace('_', ' '))}"]
    if plan_revision:
        facts.append(f"plan revision {plan_revision}")
    if approved_revision:
        facts.append(f"approved revision {approved_revision}")
    if pr_number:
        facts.append(f"pull request #{pr_number}")
    lines = [head + " · ".join(facts) + "."]
    if spent is not None:
        lines += ["", f"**Spent:** {markdown_text(spent.describe())} in all."]
    if error:
        lines += ["", defuse(code_block(shorten_tail(error, 2_000)))]
    tail = f"\nValid now: {_valid_now(state, held=held)}.\n"
    budget = COMMENT_LIMIT - sum(len(line) + 1 for line in lines) - len(tail) - 2
    if lanes:
        lines += ["", lane_checklist(lanes, now=now, budget=budget).rstrip("\n")]
    return "\n".join(lines) + "\n" + tail
