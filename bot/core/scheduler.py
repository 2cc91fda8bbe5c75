"""The scheduler: which lanes of a run to merge and to start next, and a simulator of whole runs.

`decide` is the one place that decides. It is a pure function of the unit graph, each lane's
state, the schedule and the lane cap; everything that runs code (reconcile, the CLI's
`plan simulate`) asks it and acts on the answer. `simulate` drives a graph with given
durations through `decide` as a discrete-event simulation, to show the human at the gate what
a schedule buys in wall-clock.

Schedules:

- `barrier`: lanes run in rounds; a round starts only when every lane of the previous round
  has merged, and a round's lanes merge in declared order. Re-running a run gives the same trees.
- `eager`: a lane starts as soon as its own needs have merged. Faster, not reproducible.
- `sequential` (simulation only): the baseline of one agent session doing everything, i.e.
  `barrier` with one lane at a time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from bot.core.graph import Graph

__all__ = [
    "Decision",
    "LaneState",
    "Schedule",
    "Simulation",
    "Span",
    "decide",
    "simulate",
]

SEQUENTIAL = "sequential"


class LaneState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"  # its check passed; waiting to be merged
    MERGED = "merged"
    FAILED = "failed"  # out of retries; waits for a human


class Schedule(StrEnum):
    BARRIER = "barrier"
    EAGER = "eager"


@dataclass(frozen=True)
class Decision:
    """What to do next. The caller merges `merge` one at a time in order, starts `start`,
    writes the new states, and calls `decide` again."""

    merge: tuple[str, ...]  # finished lanes to merge now, one at a time, in this order
    start: tuple[str, ...]  # lanes to start now
    running: tuple[str, ...]  # lanes running when decided, declared order
    failed: tuple[str, ...]  # failed lanes, declared order
    unmerged: tuple[str, ...]  # lanes not merged when decided, declared order

    @property
    def complete(self) -> bool:
        """Every lane has merged."""
        return not self.unmerged

    @property
    def blocked(self) -> tuple[str, ...]:
        """Failed lanes: the run cannot complete until a human retries them."""
        return self.failed

    @property
    def stalled(self) -> bool:
        """Nothing runs and nothing can be merged or started, yet the run is not complete:
        only a human (`/retry`, `/cancel`) can move it on."""
        return not (self.complete or self.running or self.merge or self.start)


def decide(
    graph: Graph,
    states: Mapping[str, LaneState],
    schedule: Schedule | str,
    max_lanes: int,
) -> Decision:
    """The lanes to merge and to start next, from the given states alone.

    A unit missing from `states` is pending. `start` never includes a lane whose needs have
    not all merged, and running plus started lanes never exceed `max_lanes`. `start` does not
    assume this decision's merges happened; call again after merging to start what they free.
    Failed lanes are never merged or started here; they are reported in `blocked`.
    """
    chosen = _parse_schedule(schedule)
    _check_max_lanes(max_lanes)
    lane_states = _normalise_states(graph, states)
    if chosen is Schedule.BARRIER:
        merge, candidates = _barrier_choice(graph, lane_states)
    else:
        merge = _lanes_in(lane_states, LaneState.FINISHED)
        candidates = _lanes_in(lane_states, LaneState.PENDING)
    running = _lanes_in(lane_states, LaneState.RUNNING)
    startable = [unit for unit in candidates if _needs_merged(graph, lane_states, unit)]
    free_lanes = max(0, max_lanes - len(running))
    return Decision(
        merge=tuple(merge),
        start=tuple(startable[:free_lanes]),
        running=tuple(running),
        failed=tuple(_lanes_in(lane_states, LaneState.FAILED)),
        unmerged=tuple(u for u, state in lane_states.items() if state is not LaneState.MERGED),
    )


def _barrier_choice(graph: Graph, states: Mapping[str, LaneState]) -> tuple[list[str], list[str]]:
    """(lanes to merge, lanes that may start) in the first round not fully merged."""
    for round_ids in graph.rounds():
        if all(states[unit] is LaneState.MERGED for unit in round_ids):
            continue
        pending = [unit for unit in round_ids if states[unit] is LaneState.PENDING]
        return _finished_prefix(round_ids, states), pending
    return [], []


def _finished_prefix(round_ids: Iterable[str], states: Mapping[str, LaneState]) -> list[str]:
    """Finished lanes of a round up to its first lane that is neither finished nor merged:
    merging behind an unfinished or failed sibling would make the tree depend on timing."""
    prefix = []
    for unit in round_ids:
        state = states[unit]
        if state is LaneState.MERGED:
            continue
        if state is not LaneState.FINISHED:
            break
        prefix.append(unit)
    return prefix


def _needs_merged(graph: Graph, states: Mapping[str, LaneState], unit: str) -> bool:
    return all(states[need] is LaneState.MERGED for need in graph[unit].needs)


def _lanes_in(states: dict[str, LaneState], wanted: LaneState) -> list[str]:
    """Lanes in the wanted state, in the order of `states` (declared order, once normalised)."""
    return [unit for unit, state in states.items() if state is wanted]


def _parse_schedule(schedule: Schedule | str) -> Schedule:
    try:
        return Schedule(schedule)
    except ValueError:
        expected = " or ".join(s.value for s in Schedule)
        raise ValueError(f"unknown schedule {schedule!r}: expected {expected}") from None


def _check_max_lanes(max_lanes: int) -> None:
    if isinstance(max_lanes, bool) or not isinstance(max_lanes, int) or max_lanes < 1:
        raise ValueError(f"max_lanes must be a whole number of at least 1, got {max_lanes!r}")


def _normalise_states(graph: Graph, states: Mapping[str, LaneState]) -> dict[str, LaneState]:
    """Every unit's state in declared order, pending where none is given."""
    known = set(graph.ids)
    unknown = sorted(unit for unit in states if unit not in known)
    if unknown:
        raise ValueError(
            f"lane states name units that are not in the plan: {', '.join(unknown)}"
            f" (the plan has {', '.join(graph.ids) or 'no units'})"
        )
    normalised = {}
    for unit in graph.ids:
        value = states.get(unit, LaneState.PENDING)
        try:
            normalised[unit] = LaneState(value)
        except ValueError:
            expected = ", ".join(s.value for s in LaneState)
            raise ValueError(f"lane {unit!r} has unknown state {value!r}: expected one of {expected}") from None
    return normalised


# --- simulation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One lane in a simulated run: when it started, ended and merged, in minutes."""

    unit: str
    round: int
    start: float
    end: float
    merged: float


@dataclass(frozen=True)
class Simulation:
    makespan: float  # minutes from the first start to the last merge
    spans: tuple[Span, ...]  # in start order

    @property
    def start_order(self) -> tuple[str, ...]:
        return tuple(span.unit for span in self.spans)


def simulate(
    graph: Graph,
    durations: Mapping[str, float] | None,
    schedule: Schedule | str,
    max_lanes: int | None = None,
) -> Simulation:
    """Run `graph` through `decide` with each lane taking its duration in minutes.

    A unit's duration comes from `durations`, else from its estimate. `schedule` is `barrier`,
    `eager` or `sequential` (barrier with one lane at a time). `max_lanes=None` means no cap.
    Merging takes no time: at each moment the simulator merges until nothing is left to merge,
    then starts what the settled states allow, then advances to the next lane's end.
    """
    decided_schedule, cap = _simulation_settings(graph, schedule, max_lanes)
    minutes = _lane_minutes(graph, durations)
    run = _SimulatedRun(graph, decided_schedule, cap, minutes)
    return run.finish()


class _SimulatedRun:
    """The mutable state of one simulation; used only inside `simulate`."""

    def __init__(self, graph: Graph, schedule: Schedule, max_lanes: int, minutes: Mapping[str, float]) -> None:
        self.graph = graph
        self.schedule = schedule
        self.max_lanes = max_lanes
        self.minutes = minutes
        self.clock = 0.0
        self.states = {unit: LaneState.PENDING for unit in graph.ids}
        self.started: dict[str, float] = {}  # insertion order is start order
        self.ends: dict[str, float] = {}
        self.merged: dict[str, float] = {}

    def finish(self) -> Simulation:
        self._settle()
        while running := [u for u in self.graph.ids if self.states[u] is LaneState.RUNNING]:
            self.clock = min(self.ends[unit] for unit in running)
            for unit in running:
                if self.ends[unit] <= self.clock:
                    self.states[unit] = LaneState.FINISHED
            self._settle()
        return self._result()

    def _settle(self) -> None:
        while True:
            decision = decide(self.graph, self.states, self.schedule, self.max_lanes)
            if decision.merge:
                self._merge(decision.merge)
            elif decision.start:
                self._start(decision.start)
            else:
                return

    def _merge(self, units: Iterable[str]) -> None:
        for unit in units:
            self.states[unit] = LaneState.MERGED
            self.merged[unit] = self.clock

    def _start(self, units: Iterable[str]) -> None:
        for unit in units:
            self.states[unit] = LaneState.RUNNING
            self.started[unit] = self.clock
            self.ends[unit] = self.clock + self.minutes[unit]

    def _result(self) -> Simulation:
        unmerged = [unit for unit in self.graph.ids if unit not in self.merged]
        if unmerged:
            # decide() left lanes neither running nor startable: a scheduler bug, not bad input.
            raise RuntimeError(f"simulation stalled with unmerged lanes: {', '.join(unmerged)}")
        spans = tuple(
            Span(
                unit=unit,
                round=self.graph.round_of(unit),
                start=start,
                end=self.ends[unit],
                merged=self.merged[unit],
            )
            for unit, start in self.started.items()
        )
        return Simulation(makespan=max(self.merged.values(), default=0.0), spans=spans)


def _simulation_settings(graph: Graph, schedule: Schedule | str, max_lanes: int | None) -> tuple[Schedule, int]:
    if schedule == SEQUENTIAL:
        if max_lanes not in (None, 1):
            raise ValueError(
                f"the sequential schedule runs one lane at a time; got max_lanes={max_lanes!r}"
                " (leave it unset, or use barrier or eager)"
            )
        return Schedule.BARRIER, 1
    try:
        decided = Schedule(schedule)
    except ValueError:
        raise ValueError(f"unknown schedule {schedule!r}: expected barrier, eager or sequential") from None
    if max_lanes is None:
        return decided, max(1, len(graph))
    _check_max_lanes(max_lanes)
    return decided, max_lanes


def _lane_minutes(graph: Graph, durations: Mapping[str, float] | None) -> dict[str, float]:
    """Each unit's duration: the given one, else its estimate."""
    given = dict(durations or {})
    known = set(graph.ids)
    unknown = sorted(unit for unit in given if unit not in known)
    if unknown:
        raise ValueError(f"durations name units that are not in the plan: {', '.join(unknown)}")
    minutes = {}
    for unit in graph.ids:
        value = given.get(unit, graph[unit].estimate)
        if value is not None:
            minutes[unit] = _valid_minutes(unit, value)
    missing = [unit for unit in graph.ids if unit not in minutes]
    if missing:
        raise ValueError(f"no duration for {', '.join(missing)}: give a duration for each, or an estimate in the plan")
    return minutes


def _valid_minutes(unit: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"duration of {unit!r} must be a number of minutes, got {value!r}")
    if value < 0:
        raise ValueError(f"duration of {unit!r} must not be negative, got {value!r}")
    return float(value)
