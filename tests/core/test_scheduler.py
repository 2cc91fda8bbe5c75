"""The scheduler's rules, one test each, and the simulator's worked example."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from bot.core.graph import Graph, build_graph
from bot.core.scheduler import Decision, LaneState, Schedule, Span, decide, simulate

PENDING, RUNNING, FINISHED, MERGED, FAILED = (
    LaneState.PENDING,
    LaneState.RUNNING,
    LaneState.FINISHED,
    LaneState.MERGED,
    LaneState.FAILED,
)
BARRIER, EAGER = Schedule.BARRIER, Schedule.EAGER


def unit(unit_id: str, *needs: str, estimate: float | None = None) -> dict:
    raw = {
        "id": unit_id,
        "title": f"Do {unit_id}",
        "needs": list(needs),
        "files": f"^src/{unit_id}/",
        "check": f"test -d src/{unit_id}",
        "brief": f"Write {unit_id}.",
    }
    if estimate is not None:
        raw["estimate"] = estimate
    return raw


def plan(*units: dict) -> Graph:
    return build_graph(list(units), max_units=8)


@pytest.fixture
def worked_example() -> Graph:
    """The field's example: api-endpoint needs migration; the others are independent."""
    return plan(
        unit("migration", estimate=10),
        unit("tui-rows", estimate=30),
        unit("api-endpoint", "migration", estimate=15),
        unit("cli-flag", estimate=5),
    )


@pytest.fixture
def two_rounds() -> Graph:
    """Round 0: a, b, c (declared order). Round 1: d needs a; e needs b and c."""
    return plan(unit("a"), unit("b"), unit("c"), unit("d", "a"), unit("e", "b", "c"))


# --- decide: starting ------------------------------------------------------------------------


def test_a_fresh_run_starts_every_ready_lane_in_declared_order(two_rounds):
    for schedule in (BARRIER, EAGER):
        decision = decide(two_rounds, {}, schedule, max_lanes=8)
        assert decision.start == ("a", "b", "c")
        assert decision.merge == ()


def test_a_unit_missing_from_states_is_pending(two_rounds):
    given = decide(two_rounds, {"a": PENDING, "b": PENDING, "c": PENDING}, EAGER, 8)
    omitted = decide(two_rounds, {}, EAGER, 8)
    assert given == omitted


def test_never_starts_a_lane_whose_needs_have_not_all_merged(two_rounds):
    states = {"a": FINISHED, "b": MERGED, "c": RUNNING}
    decision = decide(two_rounds, states, EAGER, max_lanes=8)
    assert "d" not in decision.start  # a finished but is not merged yet
    assert "e" not in decision.start  # b merged, c still running


def test_start_does_not_assume_this_decisions_merges_happened(two_rounds):
    decision = decide(two_rounds, {"a": FINISHED, "b": RUNNING, "c": RUNNING}, EAGER, 8)
    assert decision.merge == ("a",)
    assert decision.start == ()
    after_merge = decide(two_rounds, {"a": MERGED, "b": RUNNING, "c": RUNNING}, EAGER, 8)
    assert after_merge.start == ("d",)


def test_starts_stop_at_max_lanes_in_declared_order(two_rounds):
    decision = decide(two_rounds, {}, BARRIER, max_lanes=2)
    assert decision.start == ("a", "b")


def test_running_lanes_count_against_max_lanes(two_rounds):
    states = {"a": RUNNING, "b": MERGED}
    assert decide(two_rounds, states, EAGER, max_lanes=2).start == ("c",)
    assert decide(two_rounds, states, EAGER, max_lanes=1).start == ()


def test_finished_and_failed_lanes_do_not_hold_a_lane_slot(two_rounds):
    states = {"a": FINISHED, "b": FAILED}
    assert decide(two_rounds, states, BARRIER, max_lanes=1).start == ("c",)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None, "2"])
def test_max_lanes_must_be_a_whole_number_of_at_least_one(two_rounds, bad):
    with pytest.raises(ValueError, match="max_lanes must be a whole number of at least 1"):
        decide(two_rounds, {}, BARRIER, max_lanes=bad)


def test_an_unknown_unit_in_states_is_an_error_naming_it(two_rounds):
    with pytest.raises(ValueError, match="not in the plan: ghost"):
        decide(two_rounds, {"a": RUNNING, "ghost": RUNNING}, BARRIER, max_lanes=2)


def test_an_unknown_state_is_an_error_naming_the_lane(two_rounds):
    with pytest.raises(ValueError, match="lane 'a' has unknown state 'done'"):
        decide(two_rounds, {"a": "done"}, BARRIER, max_lanes=2)


def test_states_may_be_given_as_their_string_values(two_rounds):
    as_strings = decide(two_rounds, {"a": "merged", "b": "running"}, "eager", 3)
    as_enums = decide(two_rounds, {"a": MERGED, "b": RUNNING}, EAGER, 3)
    assert as_strings == as_enums
    assert as_strings.start == ("c", "d")


def test_an_unknown_schedule_is_an_error_listing_the_known_ones(two_rounds):
    expected = "unknown schedule 'sequential': expected barrier or eager"
    with pytest.raises(ValueError, match=expected):
        decide(two_rounds, {}, "sequential", max_lanes=2)


def test_decide_does_not_change_the_states_it_is_given(two_rounds):
    states = MappingProxyType({"a": FINISHED, "b": RUNNING})
    decide(two_rounds, states, EAGER, max_lanes=4)
    assert dict(states) == {"a": FINISHED, "b": RUNNING}


# --- decide: barrier -------------------------------------------------------------------------


def test_barrier_holds_a_finished_lane_behind_an_unfinished_earlier_sibling(two_rounds):
    decision = decide(two_rounds, {"a": RUNNING, "b": FINISHED, "c": FINISHED}, BARRIER, 8)
    assert decision.merge == ()


def test_barrier_merges_the_finished_prefix_of_the_round_in_declared_order(two_rounds):
    decision = decide(two_rounds, {"a": FINISHED, "b": FINISHED, "c": RUNNING}, BARRIER, 8)
    assert decision.merge == ("a", "b")


def test_barrier_skips_already_merged_lanes_in_the_prefix(two_rounds):
    decision = decide(two_rounds, {"a": MERGED, "b": FINISHED, "c": FINISHED}, BARRIER, 8)
    assert decision.merge == ("b", "c")


def test_barrier_holds_a_finished_lane_behind_a_failed_earlier_sibling(two_rounds):
    decision = decide(two_rounds, {"a": FAILED, "b": FINISHED, "c": FINISHED}, BARRIER, 8)
    assert decision.merge == ()
    assert decision.blocked == ("a",)


def test_barrier_does_not_start_the_next_round_until_this_one_has_fully_merged(two_rounds):
    all_finished = {"a": FINISHED, "b": FINISHED, "c": FINISHED}
    decision = decide(two_rounds, all_finished, BARRIER, 8)
    assert decision.merge == ("a", "b", "c")
    assert decision.start == ()
    one_left = decide(two_rounds, {"a": MERGED, "b": MERGED, "c": FINISHED}, BARRIER, 8)
    assert one_left.start == ()
    round_merged = decide(two_rounds, {"a": MERGED, "b": MERGED, "c": MERGED}, BARRIER, 8)
    assert round_merged.start == ("d", "e")


def test_barrier_starts_only_lanes_of_the_current_round(two_rounds):
    # d's need has merged, but its round waits for b and c.
    decision = decide(two_rounds, {"a": MERGED, "b": RUNNING}, BARRIER, max_lanes=8)
    assert decision.start == ("c",)


def test_barrier_failed_lane_stops_later_rounds_while_its_siblings_carry_on(two_rounds):
    decision = decide(two_rounds, {"a": MERGED, "b": FAILED}, BARRIER, max_lanes=8)
    assert decision.start == ("c",)
    after = decide(two_rounds, {"a": MERGED, "b": FAILED, "c": MERGED}, BARRIER, 8)
    assert after.start == ()  # d's need merged, but round 1 waits for b
    assert after.blocked == ("b",)
    assert after.stalled


# --- decide: eager ---------------------------------------------------------------------------


def test_eager_starts_a_dependent_once_its_need_merged_though_a_sibling_still_runs(two_rounds):
    decision = decide(two_rounds, {"a": MERGED, "b": RUNNING, "c": RUNNING}, EAGER, 8)
    assert decision.start == ("d",)


def test_eager_merges_every_finished_lane_in_declared_order(two_rounds):
    states = {"a": RUNNING, "b": FINISHED, "c": FINISHED, "d": PENDING}
    decision = decide(two_rounds, states, EAGER, max_lanes=8)
    assert decision.merge == ("b", "c")


def test_eager_failed_lane_blocks_only_its_dependents(two_rounds):
    states = {"a": FAILED, "b": MERGED, "c": MERGED}
    decision = decide(two_rounds, states, EAGER, max_lanes=8)
    assert decision.start == ("e",)
    assert decision.blocked == ("a",)
    assert not decision.stalled


# --- decide: failure and completion ----------------------------------------------------------


@pytest.mark.parametrize("schedule", [BARRIER, EAGER])
def test_a_failed_lane_is_never_started_or_merged_and_is_reported_blocked(two_rounds, schedule):
    decision = decide(two_rounds, {"a": FAILED, "b": FINISHED}, schedule, max_lanes=8)
    assert "a" not in decision.start + decision.merge
    assert "d" not in decision.start
    assert decision.blocked == ("a",)
    assert not decision.complete


def test_the_run_is_complete_when_every_lane_has_merged(two_rounds):
    done = {unit_id: MERGED for unit_id in two_rounds.ids}
    for schedule in (BARRIER, EAGER):
        decision = decide(two_rounds, done, schedule, max_lanes=2)
        assert decision.complete
        assert decision == Decision(merge=(), start=(), running=(), failed=(), unmerged=())


def test_the_run_is_not_complete_while_a_lane_is_finished_but_unmerged(two_rounds):
    states = {unit_id: MERGED for unit_id in two_rounds.ids} | {"e": FINISHED}
    decision = decide(two_rounds, states, BARRIER, max_lanes=2)
    assert not decision.complete
    assert decision.merge == ("e",)
    assert decision.unmerged == ("e",)


def test_the_run_is_not_complete_while_a_lane_has_failed(two_rounds):
    states = {unit_id: MERGED for unit_id in two_rounds.ids} | {"e": FAILED}
    for schedule in (BARRIER, EAGER):
        decision = decide(two_rounds, states, schedule, max_lanes=2)
        assert not decision.complete
        assert decision.blocked == ("e",)
        assert decision.stalled


def test_a_run_with_lanes_running_is_not_stalled(two_rounds):
    decision = decide(two_rounds, {"a": RUNNING, "b": FAILED, "c": MERGED}, BARRIER, 8)
    assert decision.blocked == ("b",)
    assert decision.running == ("a",)
    assert not decision.stalled


# --- simulate --------------------------------------------------------------------------------


def test_worked_example_sequential_barrier_eager_take_60_45_30(worked_example):
    assert simulate(worked_example, None, "sequential").makespan == 60
    assert simulate(worked_example, None, "barrier").makespan == 45
    assert simulate(worked_example, None, "eager").makespan == 30


def test_worked_example_eager_takes_the_critical_path_by_estimate(worked_example):
    critical = worked_example.critical_path()
    assert critical.units == ("tui-rows",)
    assert simulate(worked_example, None, EAGER).makespan == critical.minutes


def test_worked_example_eager_starts_api_endpoint_when_migration_merges(worked_example):
    spans = {span.unit: span for span in simulate(worked_example, None, EAGER).spans}
    assert spans["api-endpoint"].start == 10
    assert spans["api-endpoint"].merged == 25


def test_worked_example_barrier_merges_cli_flag_behind_tui_rows(worked_example):
    result = simulate(worked_example, None, BARRIER, max_lanes=2)
    round_of = worked_example.round_of
    assert result.spans == (
        Span("migration", round_of("migration"), start=0, end=10, merged=10),
        Span("tui-rows", round_of("tui-rows"), start=0, end=30, merged=30),
        Span("cli-flag", round_of("cli-flag"), start=10, end=15, merged=30),
        Span("api-endpoint", round_of("api-endpoint"), start=30, end=45, merged=45),
    )
    assert result.makespan == 45


def test_sequential_runs_lanes_one_at_a_time_round_by_round(worked_example):
    result = simulate(worked_example, None, "sequential")
    assert result.start_order == ("migration", "tui-rows", "cli-flag", "api-endpoint")
    assert [span.start for span in result.spans] == [0, 10, 40, 45]


def test_eager_with_one_lane_takes_ready_lanes_in_declared_order(worked_example):
    result = simulate(worked_example, None, EAGER, max_lanes=1)
    assert result.start_order == ("migration", "tui-rows", "api-endpoint", "cli-flag")
    assert result.makespan == 60


def test_given_durations_override_estimates(worked_example):
    result = simulate(worked_example, {"tui-rows": 1}, EAGER)
    assert result.makespan == 25  # migration then api-endpoint is now the longest chain


def test_durations_default_to_estimates_and_a_unit_without_either_is_named():
    graph = plan(unit("a", estimate=3), unit("b"), unit("c", "a"))
    with pytest.raises(ValueError, match=r"no duration for b, c"):
        simulate(graph, None, EAGER)
    assert simulate(graph, {"b": 2, "c": 4}, EAGER).makespan == 7


def test_durations_naming_an_unknown_unit_are_an_error(worked_example):
    with pytest.raises(ValueError, match="not in the plan: ghost"):
        simulate(worked_example, {"ghost": 3}, EAGER)


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "5", True])
def test_a_duration_must_be_a_non_negative_number(worked_example, bad):
    with pytest.raises(ValueError, match="duration of 'cli-flag'"):
        simulate(worked_example, {"cli-flag": bad}, EAGER)


def test_sequential_refuses_a_lane_cap_other_than_one(worked_example):
    with pytest.raises(ValueError, match="sequential schedule runs one lane at a time"):
        simulate(worked_example, None, "sequential", max_lanes=3)
    assert simulate(worked_example, None, "sequential", max_lanes=1).makespan == 60


def test_simulate_refuses_an_unknown_schedule(worked_example):
    with pytest.raises(ValueError, match="expected barrier, eager or sequential"):
        simulate(worked_example, None, "greedy")


def test_simulate_refuses_a_lane_cap_below_one(worked_example):
    with pytest.raises(ValueError, match="max_lanes"):
        simulate(worked_example, None, BARRIER, max_lanes=0)


def test_spans_record_each_lanes_round(worked_example):
    for span in simulate(worked_example, None, BARRIER).spans:
        assert span.unit in worked_example.rounds()[span.round]
