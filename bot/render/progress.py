"""The progress comment: one comment per run, edited in place, listing the lanes. Pure, no I/O.

`render_progress` writes the comment (marker `<!-- lanebot:progress run=N -->`, a checklist of
lanes ticked when merged, the run's wall-clock against the sum of its lanes, and, when the run
is blocked, which lane failed and the tail of why). `Throttle` decides when the comment may be
edited, so a burst of lane changes costs one edit, not one per change; the caller owns the clock.
Unit titles and failures are untrusted: escaped and defused (bot.core.text), so a line mentions no
one and references no issue.

Which host ran a lane (`LaneView.host`, its latest session's) is shown by `shows_hosts`: on every
lane that has one, once the run's lanes ran on more than one host or on a host that is not the
machine writing the comment (`lanebot serve`'s); never when every lane ran there (the embedded
executor), where it would say nothing. The same rule holds for the comment and for `/status`. A
host name is the operator's, shown as a code span all the same.

A run that waits says why (`wait_line`, one line per `bot.core.waiting` reason): held by whom,
since when and why; lanes waiting for a slot; GitHub's rate limit until when.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.core.budget import Spent
from bot.core.commands import COMMANDS
from bot.core.lifecycle import RunState, available_actions
from bot.core.scheduler import LaneState
from bot.core.text import (
    COMMENT_LIMIT,
    Escaped,
    code_block,
    code_span,
    defuse,
    format_duration,
    markdown_text,
    marker,
    shorten,
    shorten_tail,
)
from bot.core.waiting import Held, NoLaneSlot, RateLimited, WaitReason
from bot.render.templates import render_template

__all__ = [
    "LaneView",
    "RateLimitNote",
    "Throttle",
    "failure_tail",
    "lane_checklist",
    "render_progress",
    "shows_hosts",
    "shows_state",
    "wait_line",
]

FAILURE_LINES = 40  # lines of a failure shown under a blocked lane
FAILURE_CHARS = 4_000
_TITLE_CHARS = 200
_HOST_CHARS = 64
_HOLD_REASON_CHARS = 300

_STATE_WORDS = {
    LaneState.PENDING: "waiting",
    LaneState.RUNNING: "running",
    LaneState.FINISHED: "passed its check, waiting to merge",
    LaneState.MERGED: "merged",
    LaneState.FAILED: "failed",
}


@dataclass(frozen=True)
class LaneView:
    """What the comments show of one lane (built from its database row)."""

    unit_id: str
    title: str
    state: LaneState | str
    round: int  # 0-based, as the graph counts; shown 1-based
    attempts: int  # attempts started so far
    started_at: datetime | None
    finished_at: datetime | None
    branch: str  # lanebot/<issue>/<unit>
    failure: str | None = None  # the last attempt's failure, as the lane recorded it
    host: str | None = None  # the host of the lane's latest session (AgentSession.host); None before one
    host_is_here: bool = False  # that host is the machine that writes the comment (lanebot serve's)
    spent: Spent | None = None  # what the lane's sessions (attempts, resolver) used; None before one

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", LaneState(self.state))
        if self.round < 0 or self.attempts < 0:
            raise ValueError(f"lane {self.unit_id!r}: round and attempts must be >= 0")


@dataclass(frozen=True)
class RateLimitNote:
    """The run's waits for GitHub's rate limit: how many, how long in all, until when the last."""

    waits: int
    seconds: float
    until: datetime
    waiting: bool  # the last wait has not ended yet

    def line(self) -> Escaped:
        until = f"{self.until:%H:%M} UTC"
        if self.waiting:
            return Escaped(f"**Waiting** for GitHub's rate limit until {until}.")
        times = "once" if self.waits == 1 else f"{self.waits} times"
        return Escaped(
            f"GitHub's rate limit held this run up {times}, {format_duration(self.seconds)} in all (last until {until})."
        )


def wait_line(reason: WaitReason) -> Escaped:
    """One line saying why the run waits. The holder is named without a mention (no one is pinged
    by an edit of the comment) and the reason they gave is untrusted text."""
    if isinstance(reason, Held):
        why = f": {markdown_text(shorten(reason.reason, _HOLD_REASON_CHARS))}" if reason.reason else ""
        return Escaped(
            f"**Held** by {markdown_text('@' + reason.by)} since {reason.since:%Y-%m-%d %H:%M} UTC{why}. "
            f"No new agent session starts until {code_span('/unhold')}; the running ones finish."
        )
    if isinstance(reason, NoLaneSlot):
        names = ", ".join(code_span(unit) for unit in reason.units)
        lanes = "lane runs" if reason.max_lanes == 1 else "lanes run"
        return Escaped(
            f"**Waiting** for a lane slot: {names} may start, but {reason.max_lanes} {lanes} already "
            f"({code_span('build.max_lanes')})."
        )
    assert isinstance(reason, RateLimited)
    return Escaped(f"**Waiting** for GitHub's rate limit until {reason.until:%H:%M} UTC.")


def shows_state(body: str, run_id: int, state: RunState | str) -> bool:
    """Whether a progress comment's body (as GitHub holds it) shows the run in `state`."""
    return f"· run {run_id}: {_state_words(RunState(state))}\n" in body


def _state_words(state: RunState) -> str:
    return state.value.replace("_", " ")


def failure_tail(text: str, lines: int = FAILURE_LINES, chars: int = FAILURE_CHARS) -> str:
    """The end of a failure: its last `lines` lines, at most `chars` characters."""
    kept = text.rstrip("\n").split("\n")
    cut = len(kept) > lines
    tail = "\n".join(kept[-lines:])
    if cut:
        tail = f"… ({len(kept) - lines} earlier lines not shown)\n{tail}"
    return shorten_tail(tail, chars)


def _duration(lane: LaneView, now: datetime | None) -> Escaped | None:
    if lane.started_at is None:
        return None
    end = lane.finished_at or now
    if end is None:
        return Escaped(f"started {lane.started_at:%H:%M} UTC")
    seconds = max(0.0, (end - lane.started_at).total_seconds())
    return format_duration(seconds) if lane.finished_at else Escaped(f"{format_duration(seconds)} so far")


def shows_hosts(lanes: Sequence[LaneView]) -> bool:
    """Whether the lanes' hosts are worth a reader's eye: the lanes ran on more than one host, or
    on one that is not the machine writing the comment. Not when all ran there (or none started)."""
    hosts = {lane.host for lane in lanes if lane.host}
    return len(hosts) > 1 or any(lane.host and not lane.host_is_here for lane in lanes)


def _lane_line(lane: LaneView, now: datetime | None, *, host: bool = False) -> str:
    state = LaneState(lane.state)
    attempts = f"{lane.attempts} attempt{'' if lane.attempts == 1 else 's'}"
    parts = [Escaped(_STATE_WORDS[state]), Escaped(f"round {lane.round + 1}"), Escaped(attempts)]
    duration = _duration(lane, now)
    if duration:
        parts.append(duration)
    if host and lane.host:
        parts.append(Escaped(f"on {code_span(shorten(lane.host, _HOST_CHARS))}"))
    if lane.spent is not None:
        parts.append(markdown_text(lane.spent.describe()))
    parts.append(Escaped(f"branch {code_span(lane.branch)}"))
    tick = "x" if state is LaneState.MERGED else " "
    title = markdown_text(shorten(lane.title, _TITLE_CHARS))
    return f"- [{tick}] {code_span(lane.unit_id)} {title}: {' · '.join(parts)}"


def lane_checklist(lanes: Sequence[LaneView], *, now: datetime | None = None, budget: int = COMMENT_LIMIT) -> str:
    """A Markdown checklist of `lanes`, one line each, cut with a count to fit `budget` characters;
    each line names its lane's host when `shows_hosts(lanes)`."""
    host = shows_hosts(lanes)
    lines = [_lane_line(lane, now, host=host) for lane in lanes]
    shown: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        rest = len(lines) - index - 1
        reserve = len(f"- … and {len(lines)} more lanes\n") if rest else 0
        if used + len(line) + 1 + reserve > budget:
            shown.append(f"- … and {len(lines) - index} more lanes not shown")
            break
        shown.append(line)
        used += len(line) + 1
    return "".join(line + "\n" for line in shown)


def render_progress(
    run_id: int,
    state: RunState | str,
    lanes: Sequence[LaneView],
    wall_clock_s: float | None,
    sum_of_lanes_s: float | None,
    blocked_reason: str | None = None,
    *,
    now: datetime | None = None,
    rate_limit: RateLimitNote | None = None,
    spent: Spent | None = None,
    waits: Sequence[WaitReason] = (),
    held: bool = False,
) -> str:
    """The progress comment for a run, under GitHub's 65,536-character limit.

    `wall_clock_s` is the time since the first lane started; `sum_of_lanes_s` the time all
    lanes took together. `now` lets running lanes show how long they have run; `rate_limit` what
    GitHub's rate limit cost the run; `spent` what all its sessions used (tokens, cost); `waits`
    why it waits now (`held`: it carries a hold, so the commands offer `/unhold`). When the run
    is blocked, every failed lane shows the tail of its failure, and `blocked_reason` (a
    conflict, an integrate failure) says the rest.
    """
    run_state = RunState(state)
    for value in (wall_clock_s, sum_of_lanes_s):
        if value is not None and (not math.isfinite(value) or value < 0):
            raise ValueError(f"durations must be finite numbers of seconds >= 0, got {value!r}")
    merged = sum(1 for lane in lanes if LaneState(lane.state) is LaneState.MERGED)
    context: dict[str, object] = {
        "marker": marker("progress", run_id),
        "run_id": run_id,
        "state": Escaped(_state_words(run_state)),
        "merged": merged,
        "total": len(lanes),
        "wall_clock": None if wall_clock_s is None else format_duration(wall_clock_s),
        "sum_of_lanes": None if sum_of_lanes_s is None else format_duration(sum_of_lanes_s),
        "speedup": _speedup(wall_clock_s, sum_of_lanes_s),
        "spent": markdown_text(spent.describe()) if spent is not None else None,
        "blocked": run_state is RunState.BLOCKED,
        "commands": [code_span(COMMANDS[name].usage) for name in available_actions(run_state, held=held)],
        "hidden_failures": 0,
        "rate_limit": rate_limit.line() if rate_limit and not _says_rate_limit(waits) else None,
        "waits": [wait_line(reason) for reason in waits],
    }
    failed = [lane for lane in lanes if LaneState(lane.state) is LaneState.FAILED]
    for tail_chars in (FAILURE_CHARS, 1_000, 0):
        context["failures"] = [_failure(lane, tail_chars) for lane in failed] if context["blocked"] else []
        context["reason"] = _reason(blocked_reason, tail_chars) if context["blocked"] else None
        frame = render_template("progress.md.j2", **context, checklist=Escaped(""))
        checklist = lane_checklist(lanes, now=now, budget=COMMENT_LIMIT - len(frame))
        body = render_template("progress.md.j2", **context, checklist=Escaped(checklist))
        if len(body) <= COMMENT_LIMIT:
            return body
    # Only a failure list longer than the whole comment gets here: count the lanes instead.
    context["failures"] = [{**_failure(lane, 0), "tail": None} for lane in failed[:50]]
    context["hidden_failures"] = max(0, len(failed) - 50)
    return render_template("progress.md.j2", **context, checklist=Escaped(""))


def _says_rate_limit(waits: Sequence[WaitReason]) -> bool:
    """A wait for the rate limit is said among the waits; the note would say it twice."""
    return any(isinstance(reason, RateLimited) for reason in waits)


def _speedup(wall_clock_s: float | None, sum_of_lanes_s: float | None) -> Escaped | None:
    if not wall_clock_s or not sum_of_lanes_s:
        return None
    return Escaped(f"{sum_of_lanes_s / wall_clock_s:.1f}×")


def _failure(lane: LaneView, tail_chars: int) -> dict[str, object]:
    tail = failure_tail(lane.failure, chars=tail_chars) if lane.failure and tail_chars else None
    return {
        "id": code_span(lane.unit_id),
        "attempts": lane.attempts,
        "tail": defuse(code_block(tail)) if tail else None,
        "retry": code_span(f"/retry {lane.unit_id}"),
    }


def _reason(blocked_reason: str | None, tail_chars: int) -> Escaped | None:
    if not blocked_reason:
        return None
    if "\n" not in blocked_reason.strip() and len(blocked_reason) <= 300:
        return markdown_text(blocked_reason)
    return defuse(code_block(failure_tail(blocked_reason, chars=max(tail_chars, 300))))


class Throttle:
    """At most one edit every `interval_s` seconds, however many changes ask for one.

    Call `should_edit(now)` whenever something changed: True means edit now (the edit is
    recorded); False means a later edit is owed, no earlier than `next_allowed(now)`, and
    `pending` stays True until a call returns True. The caller owns the clock (monotonic
    seconds) and the timer that calls again.
    """

    def __init__(self, interval_s: float) -> None:
        if not (isinstance(interval_s, (int, float)) and math.isfinite(interval_s) and interval_s > 0):
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s!r}")
        self.interval_s = float(interval_s)
        self._last_edit: float | None = None
        self._pending = False

    @property
    def pending(self) -> bool:
        """A change asked for an edit that has not been allowed yet."""
        return self._pending

    def next_allowed(self, now: float) -> float:
        """The earliest moment, not before `now`, at which an edit is allowed."""
        if self._last_edit is None:
            return now
        return max(now, self._last_edit + self.interval_s)

    def should_edit(self, now: float) -> bool:
        """A change at `now` asks for an edit: whether to edit now (True) or defer (False)."""
        if self.next_allowed(now) > now:
            self._pending = True
            return False
        self._last_edit = now
        self._pending = False
        return True
