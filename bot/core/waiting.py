"""Why a run that is building waits, decided from plain data. Pure, no I/O.

A run that starts nothing looks stuck from the issue unless it says why. `why_waiting` names each
reason that holds now, in the order a reader needs them:

- `Held`: a maintainer's `/hold` (who, since when, why); while it lasts no agent session starts, so
  lanes that would wait for a slot are the hold's to explain, not the cap's;
- `NoLaneSlot`: lanes ready to start (their needs merged) that `build.max_lanes` keeps waiting,
  because that many lanes run already;
- `RateLimited`: GitHub's rate limit, until when lanebot may call it again.

`lane_slot_wait` asks the scheduler which lanes the cap alone keeps waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from bot.core.graph import Graph
from bot.core.lifecycle import RunState, is_held
from bot.core.scheduler import LaneState, Schedule, decide

__all__ = ["Held", "NoLaneSlot", "RateLimited", "WaitReason", "lane_slot_wait", "why_waiting"]

_BUILDING = frozenset({RunState.RUNNING, RunState.INTEGRATING})


@dataclass(frozen=True)
class Held:
    """The run carries a `/hold`."""

    by: str
    since: datetime
    reason: str | None = None


@dataclass(frozen=True)
class NoLaneSlot:
    """`units` are ready to start, but `max_lanes` lanes run already."""

    units: tuple[str, ...]
    max_lanes: int


@dataclass(frozen=True)
class RateLimited:
    """GitHub's rate limit holds lanebot's calls until `until`."""

    until: datetime


WaitReason = Held | NoLaneSlot | RateLimited


def why_waiting(
    state: RunState | str,
    *,
    hold: Held | None = None,
    lane_slot: NoLaneSlot | None = None,
    rate_limited_until: datetime | None = None,
    now: datetime,
) -> tuple[WaitReason, ...]:
    """Every reason the run waits now; none for a run that is not building (a blocked run still
    shows its hold, which `/retry` would otherwise seem to ignore)."""
    state = RunState(state)
    reasons: list[WaitReason] = []
    if hold is not None and is_held(state, held=True):
        reasons.append(hold)
    if state not in _BUILDING:
        return tuple(reasons)
    if hold is None and lane_slot is not None and lane_slot.units:
        reasons.append(lane_slot)
    if rate_limited_until is not None and rate_limited_until > now:
        reasons.append(RateLimited(rate_limited_until))
    return tuple(reasons)


def lane_slot_wait(
    graph: Graph, states: Mapping[str, LaneState], schedule: Schedule | str, max_lanes: int
) -> NoLaneSlot | None:
    """The lanes the scheduler would start now but for `max_lanes`, in the order it would; None
    when the cap keeps none waiting."""
    capped = decide(graph, states, schedule, max_lanes).start
    uncapped = decide(graph, states, schedule, max(len(graph.ids), 1)).start
    waiting = tuple(unit for unit in uncapped if unit not in capped)
    return NoLaneSlot(waiting, max_lanes) if waiting else None
