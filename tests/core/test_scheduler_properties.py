"""Properties of the scheduler and the simulator over random unit graphs (hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.graph import Graph, build_graph
from bot.core.scheduler import Decision, LaneState, Schedule, Simulation, decide, simulate

MAX_UNITS = 8
# Modest example counts keep the module to seconds; deadline=None because the machine is shared.
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)
WALK_SETTINGS = settings(max_examples=40, deadline=None)


@dataclass(frozen=True)
class RandomPlan:
    graph: Graph
    durations: dict[str, int]
    edges: dict[str, tuple[str, ...]]  # unit -> its needs, as generated


@st.composite
def random_plans(draw: st.DrawFn) -> RandomPlan:
    """1-8 units with edges only to earlier units (so acyclic), declared in shuffled order."""
    size = draw(st.integers(1, MAX_UNITS))
    ids = [f"u{index}" for index in range(size)]
    # bit j of unit i's mask: unit i needs unit j (< i); one draw per unit keeps generation cheap
    masks = draw(st.tuples(*(st.integers(0, 2**index - 1) for index in range(size))))
    edges = {unit_id: tuple(ids[j] for j in range(index) if masks[index] >> j & 1) for index, unit_id in enumerate(ids)}
    minutes = draw(st.lists(st.integers(1, 60), min_size=size, max_size=size))
    declared = draw(st.permutations(ids))
    raw = [_raw_unit(unit_id, edges[unit_id]) for unit_id in declared]
    return RandomPlan(build_graph(raw, max_units=MAX_UNITS), dict(zip(ids, minutes)), edges)


def _raw_unit(unit_id: str, needs: tuple[str, ...]) -> dict:
    return {
        "id": unit_id,
        "title": f"Do {unit_id}",
        "needs": list(needs),
        "files": f"^src/{unit_id}\\.py$",
        "check": f"test -f src/{unit_id}.py",
        "brief": f"Write {unit_id}.",
    }


schedules = st.sampled_from(["barrier", "eager", "sequential"])
lane_caps = st.one_of(st.none(), st.integers(1, MAX_UNITS))


def _run(plan: RandomPlan, schedule: str, max_lanes: int | None) -> Simulation:
    cap = None if schedule == "sequential" else max_lanes  # sequential is always one lane
    return simulate(plan.graph, plan.durations, schedule, cap)


def _critical_path_minutes(plan: RandomPlan) -> int:
    finish: dict[str, int] = {}
    for unit_id in sorted(plan.edges, key=lambda u: int(u[1:])):  # needs come earlier by index
        ready = max((finish[need] for need in plan.edges[unit_id]), default=0)
        finish[unit_id] = ready + plan.durations[unit_id]
    return max(finish.values())


# --- the simulator ---------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(random_plans(), schedules, lane_caps)
def test_simulator_never_starts_a_lane_before_all_its_needs_merged(plan, schedule, max_lanes):
    spans = {span.unit: span for span in _run(plan, schedule, max_lanes).spans}
    assert set(spans) == set(plan.graph.ids)
    for unit_id, span in spans.items():
        for need in plan.edges[unit_id]:
            assert spans[need].merged <= span.start


@PROPERTY_SETTINGS
@given(random_plans(), schedules, lane_caps)
def test_simulator_never_runs_more_lanes_than_the_cap(plan, schedule, max_lanes):
    result = _run(plan, schedule, max_lanes)
    cap = 1 if schedule == "sequential" else (max_lanes or len(plan.graph))
    for span in result.spans:
        running_then = [s for s in result.spans if s.start <= span.start < s.end]
        assert len(running_then) <= cap


@PROPERTY_SETTINGS
@given(random_plans(), lane_caps)
def test_barrier_gives_the_same_start_order_and_spans_on_every_run(plan, max_lanes):
    first = simulate(plan.graph, plan.durations, "barrier", max_lanes)
    again = simulate(plan.graph, dict(reversed(plan.durations.items())), "barrier", max_lanes)
    assert again == first


@PROPERTY_SETTINGS
@given(random_plans(), lane_caps)
def test_barrier_starts_a_round_only_after_the_previous_round_merged(plan, max_lanes):
    spans = simulate(plan.graph, plan.durations, "barrier", max_lanes).spans
    for span in spans:
        earlier = [s.merged for s in spans if s.round < span.round]
        assert all(merged <= span.start for merged in earlier)


@PROPERTY_SETTINGS
@given(random_plans(), lane_caps)
def test_barrier_merges_each_round_in_declared_order(plan, max_lanes):
    merged_at = {span.unit: span.merged for span in simulate(plan.graph, plan.durations, "barrier", max_lanes).spans}
    for round_ids in plan.graph.rounds():
        times = [merged_at[unit_id] for unit_id in round_ids]
        assert times == sorted(times)


@PROPERTY_SETTINGS
@given(random_plans())
def test_with_unlimited_lanes_eager_is_no_slower_than_barrier(plan):
    eager = simulate(plan.graph, plan.durations, "eager").makespan
    barrier = simulate(plan.graph, plan.durations, "barrier").makespan
    assert eager <= barrier


@PROPERTY_SETTINGS
@given(random_plans(), schedules, lane_caps)
def test_no_schedule_beats_the_critical_path(plan, schedule, max_lanes):
    assert _run(plan, schedule, max_lanes).makespan >= _critical_path_minutes(plan)


@PROPERTY_SETTINGS
@given(random_plans())
def test_with_unlimited_lanes_eager_takes_exactly_the_critical_path(plan):
    assert simulate(plan.graph, plan.durations, "eager").makespan == _critical_path_minutes(plan)


@PROPERTY_SETTINGS
@given(random_plans())
def test_sequential_takes_the_sum_of_all_durations(plan):
    assert simulate(plan.graph, plan.durations, "sequential").makespan == sum(plan.durations.values())


# --- decide from reachable states ------------------------------------------------------------


def _reachable_states(
    plan: RandomPlan, schedule: Schedule, max_lanes: int, data: st.DataObject
) -> Iterator[dict[str, LaneState]]:
    """Walk a run the way a caller might: merge a prefix of the merges, start some of the
    starts, finish or fail a running lane, or retry a failed one. Yields each state reached."""
    states = {unit_id: LaneState.PENDING for unit_id in plan.graph.ids}
    for _ in range(4 * len(plan.graph) + 4):
        yield dict(states)
        decision = decide(plan.graph, states, schedule, max_lanes)
        moves = _possible_moves(decision, states)
        if not moves:
            return
        move, lanes = data.draw(st.sampled_from(moves))
        if move in (LaneState.MERGED, LaneState.RUNNING):
            chosen = lanes[: data.draw(st.integers(1, len(lanes)))]
        else:
            chosen = (data.draw(st.sampled_from(lanes)),)
        for unit_id in chosen:
            states[unit_id] = move


def _possible_moves(decision: Decision, states: dict[str, LaneState]) -> list[tuple[LaneState, tuple[str, ...]]]:
    """(new state, lanes it may take); merges and starts take a prefix, the rest one lane."""
    failed = tuple(u for u, state in states.items() if state is LaneState.FAILED)
    candidates = [
        (LaneState.MERGED, decision.merge),
        (LaneState.RUNNING, decision.start),
        (LaneState.FINISHED, decision.running),
        (LaneState.FAILED, decision.running),
        (LaneState.PENDING, failed),  # a human's /retry
    ]
    return [(move, lanes) for move, lanes in candidates if lanes]


@WALK_SETTINGS
@given(random_plans(), st.sampled_from(list(Schedule)), st.integers(1, MAX_UNITS), st.data())
def test_decide_never_starts_lanes_beyond_the_cap_from_reachable_states(plan, schedule, max_lanes, data):
    for states in _reachable_states(plan, schedule, max_lanes, data):
        running = sum(state is LaneState.RUNNING for state in states.values())
        assert running + len(decide(plan.graph, states, schedule, max_lanes).start) <= max_lanes
        for changed_cap in range(1, MAX_UNITS + 1):  # the cap may change mid-run
            started = decide(plan.graph, states, schedule, changed_cap).start
            assert len(started) <= max(0, changed_cap - running)


@WALK_SETTINGS
@given(random_plans(), st.sampled_from(list(Schedule)), st.integers(1, MAX_UNITS), st.data())
def test_decide_starts_only_pending_lanes_whose_needs_merged_and_merges_only_finished_ones(
    plan, schedule, max_lanes, data
):
    for states in _reachable_states(plan, schedule, max_lanes, data):
        decision = decide(plan.graph, states, schedule, max_lanes)
        for unit_id in decision.start:
            assert states[unit_id] is LaneState.PENDING
            assert all(states[need] is LaneState.MERGED for need in plan.edges[unit_id])
        assert all(states[unit_id] is LaneState.FINISHED for unit_id in decision.merge)
        assert decision.blocked == tuple(u for u in plan.graph.ids if states[u] is LaneState.FAILED)


@WALK_SETTINGS
@given(random_plans(), st.sampled_from(list(Schedule)), st.integers(1, MAX_UNITS), st.data())
def test_decide_does_not_depend_on_the_order_of_the_states_mapping(plan, schedule, max_lanes, data):
    for states in _reachable_states(plan, schedule, max_lanes, data):
        reordered = {u: states[u] for u in data.draw(st.permutations(list(states)))}
        sparse = {u: state for u, state in reordered.items() if state is not LaneState.PENDING}
        expected = decide(plan.graph, states, schedule, max_lanes)
        assert decide(plan.graph, reordered, schedule, max_lanes) == expected
        assert decide(plan.graph, sparse, schedule, max_lanes) == expected
