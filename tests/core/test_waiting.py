"""Why a building run waits, decided from plain data: the hold, a full lane cap, the rate limit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.core.lifecycle import RunState
from bot.core.scheduler import LaneState
from bot.core.waiting import Held, NoLaneSlot, RateLimited, lane_slot_wait, why_waiting
from tests.core.test_scheduler import plan, unit

NOW = datetime(2026, 12, 2, 18, 0, tzinfo=UTC)
HOLD = Held("maintainer", NOW - timedelta(minutes=5), "the CI is down")
SLOT = NoLaneSlot(("c",), 2)
P, R, M = LaneState.PENDING, LaneState.RUNNING, LaneState.MERGED


def test_a_running_run_with_nothing_in_its_way_waits_for_nothing():
    assert why_waiting(RunState.RUNNING, now=NOW) == ()


def test_a_held_run_says_who_held_it_and_the_hold_explains_the_lanes_that_wait_for_a_slot():
    assert why_waiting(RunState.RUNNING, hold=HOLD, lane_slot=SLOT, now=NOW) == (HOLD,)


def test_without_a_hold_ready_lanes_beyond_the_cap_wait_for_a_slot():
    assert why_waiting(RunState.RUNNING, lane_slot=SLOT, now=NOW) == (SLOT,)


def test_a_rate_limit_still_in_force_is_a_reason_and_one_that_ended_is_not():
    later, earlier = NOW + timedelta(minutes=3), NOW - timedelta(seconds=1)
    assert why_waiting(RunState.INTEGRATING, rate_limited_until=later, now=NOW) == (RateLimited(later),)
    assert why_waiting(RunState.INTEGRATING, rate_limited_until=earlier, now=NOW) == ()


def test_every_reason_that_holds_is_given_the_hold_first():
    later = NOW + timedelta(minutes=3)
    assert why_waiting(RunState.RUNNING, hold=HOLD, rate_limited_until=later, now=NOW) == (HOLD, RateLimited(later))


def test_a_blocked_run_shows_its_hold_alone_since_it_waits_for_a_human_anyway():
    later = NOW + timedelta(minutes=3)
    reasons = why_waiting(RunState.BLOCKED, hold=HOLD, lane_slot=SLOT, rate_limited_until=later, now=NOW)
    assert reasons == (HOLD,)


@pytest.mark.parametrize("state", [RunState.DONE, RunState.CANCELLED, RunState.AWAITING_APPROVAL])
def test_a_run_that_is_not_building_waits_for_nothing_even_with_a_hold_left_on_it(state):
    assert why_waiting(state, hold=HOLD, lane_slot=SLOT, rate_limited_until=NOW + timedelta(hours=1), now=NOW) == ()


def test_the_lanes_that_wait_for_a_slot_are_the_ready_ones_beyond_the_cap_in_start_order():
    graph = plan(unit("a"), unit("b"), unit("c"), unit("d"), unit("e", "a"))
    assert lane_slot_wait(graph, {"a": R}, "eager", 2) == NoLaneSlot(("c", "d"), 2)
    assert lane_slot_wait(graph, {}, "eager", 2) == NoLaneSlot(("c", "d"), 2)


def test_lanes_waiting_for_their_needs_do_not_wait_for_a_slot():
    graph = plan(unit("a"), unit("b", "a"), unit("c", "a"))
    assert lane_slot_wait(graph, {"a": R}, "eager", 1) is None
    assert lane_slot_wait(graph, {"a": M}, "eager", 1) == NoLaneSlot(("c",), 1)


def test_under_barrier_only_the_current_rounds_lanes_can_wait_for_a_slot():
    graph = plan(unit("a"), unit("b"), unit("c", "a"), unit("d", "a"))
    assert lane_slot_wait(graph, {"a": R, "b": P}, "barrier", 1) == NoLaneSlot(("b",), 1)
    assert lane_slot_wait(graph, {"a": M, "b": M}, "barrier", 4) is None
