"""The runs list's rows and the run page's numbers, from what the database holds. Pure.

`RunSummary` is what the store gives for one run (its row and the counts of its lanes and sessions);
`run_row` makes the row people read: repository, issue, state, when it started, how long it took (or
has taken so far), lanes merged of all, sessions, and tokens and cost where the agents reported them
(a session that reported nothing adds nothing; with none reported the cell says so, not "0").
`duration_between`, `when`, `tokens_text` and `cost_text` format the same values on the run and lane
attempt pages, so every page says them alike. `ticking` gives a duration still growing what the
page's script needs to advance it each second (bot/web/dashboard/static/live.js).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.core.lifecycle import RunState
from bot.core.text import format_duration

__all__ = [
    "ENDED_STATES",
    "RunRow",
    "RunSummary",
    "Ticking",
    "cost_text",
    "duration_between",
    "held_words",
    "run_row",
    "state_words",
    "ticking",
    "tokens_text",
    "when",
]

NOT_RECORDED = "—"
# Runs in these states have stopped moving: their duration ends at their last change.
ENDED_STATES = frozenset({RunState.DONE, RunState.REJECTED, RunState.CANCELLED, RunState.FAILED})


@dataclass(frozen=True)
class RunSummary:
    """One run as the runs list needs it."""

    run_id: int
    repository: str
    issue_number: int
    state: str
    created_at: datetime
    updated_at: datetime
    lanes_total: int = 0
    lanes_merged: int = 0
    sessions: int = 0
    input_tokens: int | None = None  # summed over the sessions that reported any; None: none did
    output_tokens: int | None = None
    cost_usd: float | None = None
    pr_number: int | None = None
    held_by: str | None = None  # `/hold`: who holds the run (it starts no new session), else None


@dataclass(frozen=True)
class RunRow:
    """One row of the runs list, every cell text (the template escapes it)."""

    run_id: int
    repository: str
    issue_number: int
    state: str  # the state's value, for a CSS class and the filter
    state_words: str
    started: str
    duration: str
    lanes: str
    sessions: str
    tokens: str
    cost: str
    pr_number: int | None
    ticking: Ticking | None = None  # the duration while the run moves


def state_words(state: str) -> str:
    return RunState(state).value.replace("_", " ")


def held_words(held_by: str | None, held_at: datetime | None, reason: str | None) -> str | None:
    """What the run page says of a `/hold`: who, since when and why; None when the run is not held."""
    if held_by is None:
        return None
    why = f": {reason}" if reason else ""
    return f"Held by @{held_by} since {when(held_at)}{why}. No new session starts until /unhold."


def when(moment: datetime | None) -> str:
    """`2025-03-01 12:00 UTC` (the database's times are UTC), or a dash."""
    return NOT_RECORDED if moment is None else f"{moment:%Y-%m-%d %H:%M} UTC"


def duration_between(start: datetime | None, end: datetime | None, now: datetime | None = None) -> str:
    """How long from `start` to `end`, or to `now` (with "so far") while it has not ended."""
    if start is None:
        return NOT_RECORDED
    if end is None:
        if now is None:
            return NOT_RECORDED
        return f"{format_duration(max(0.0, (now - start).total_seconds()))} so far"
    return str(format_duration(max(0.0, (end - start).total_seconds())))


@dataclass(frozen=True)
class Ticking:
    """A duration still growing: when it started (ISO 8601, UTC) and its whole seconds at `now`."""

    since: str
    seconds: int


def ticking(start: datetime | None, end: datetime | None, now: datetime | None) -> Ticking | None:
    """What a script needs to advance `duration_between(start, end, now)`; None once it has ended."""
    if start is None or end is not None or now is None:
        return None
    utc = start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)  # the database's are UTC
    current = now.replace(tzinfo=UTC) if now.tzinfo is None else now
    return Ticking(
        utc.isoformat(timespec="seconds").replace("+00:00", "Z"), max(0, round((current - utc).total_seconds()))
    )


def tokens_text(input_tokens: int | None, output_tokens: int | None) -> str:
    if input_tokens is None and output_tokens is None:
        return NOT_RECORDED
    return f"{input_tokens or 0:,} in · {output_tokens or 0:,} out"


def cost_text(cost_usd: float | None) -> str:
    if cost_usd is None or not math.isfinite(cost_usd):
        return NOT_RECORDED
    return f"${cost_usd:,.2f}" if cost_usd >= 0.01 or cost_usd == 0 else f"${cost_usd:.4f}"


def run_row(run: RunSummary, *, now: datetime) -> RunRow:
    state = RunState(run.state)
    end = run.updated_at if state in ENDED_STATES else None
    return RunRow(
        run_id=run.run_id,
        repository=run.repository,
        issue_number=run.issue_number,
        state=state.value,
        state_words=state_words(state) + (f", held by @{run.held_by}" if run.held_by else ""),
        started=when(run.created_at),
        duration=duration_between(run.created_at, end, now),
        lanes=f"{run.lanes_merged} / {run.lanes_total}" if run.lanes_total else NOT_RECORDED,
        sessions=str(run.sessions),
        tokens=tokens_text(run.input_tokens, run.output_tokens),
        cost=cost_text(run.cost_usd),
        pr_number=run.pr_number,
        ticking=ticking(run.created_at, end, now),
    )
