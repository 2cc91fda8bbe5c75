"""The run state machine, as a specification: every transition, every refusal, every action list."""

from __future__ import annotations

import itertools

import pytest

from bot.core.lifecycle import (
    ALL_COMMANDS,
    HOLD_COMMANDS,
    QUERY_COMMANDS,
    TERMINAL,
    Event,
    InvalidTransition,
    RunState,
    available_actions,
    command_event,
    is_held,
    states_allowing,
    transition,
)

S = RunState
E = Event
NO_RUN = None

# The whole machine, written out independently of the module: (state, event) -> next state.
# Every pair not listed here must be refused.
EXPECTED: dict[tuple[RunState | None, Event], RunState] = {
    (NO_RUN, E.PLAN): S.PLANNING,
    (S.REJECTED, E.PLAN): S.PLANNING,
    (S.CANCELLED, E.PLAN): S.PLANNING,
    (S.FAILED, E.PLAN): S.PLANNING,
    (S.PLANNING, E.PLAN_READY): S.AWAITING_APPROVAL,
    (S.PLANNING, E.PLAN_FAILED): S.FAILED,
    (S.PLANNING, E.CANCEL): S.CANCELLED,
    (S.AWAITING_APPROVAL, E.APPROVE): S.RUNNING,
    (S.AWAITING_APPROVAL, E.REJECT): S.REJECTED,
    (S.AWAITING_APPROVAL, E.REPLAN): S.PLANNING,
    (S.AWAITING_APPROVAL, E.CANCEL): S.CANCELLED,
    (S.RUNNING, E.LANES_MERGED): S.INTEGRATING,
    (S.RUNNING, E.LANE_BLOCKED): S.BLOCKED,
    (S.RUNNING, E.CANCEL): S.CANCELLED,
    (S.INTEGRATING, E.PR_OPENED): S.DONE,
    (S.INTEGRATING, E.INTEGRATE_FAILED): S.BLOCKED,
    (S.INTEGRATING, E.CANCEL): S.CANCELLED,
    (S.BLOCKED, E.RETRY): S.RUNNING,
    (S.BLOCKED, E.CANCEL): S.CANCELLED,
    (S.DONE, E.FIX): S.DONE,
    (S.DONE, E.UPDATE): S.DONE,
    (S.DONE, E.PR_MERGED): S.DONE,
    (S.DONE, E.PR_CLOSED): S.CANCELLED,
}

EXPECTED_ACTIONS: dict[RunState | None, tuple[str, ...]] = {
    NO_RUN: ("plan", "status", "help"),
    S.PLANNING: ("cancel", "status", "help"),
    S.AWAITING_APPROVAL: ("approve", "reject", "replan", "cancel", "status", "help"),
    S.RUNNING: ("cancel", "hold", "status", "help"),
    S.INTEGRATING: ("cancel", "hold", "status", "help"),
    S.DONE: ("fix", "update", "status", "help"),
    S.BLOCKED: ("retry", "cancel", "status", "help"),
    S.REJECTED: ("plan", "status", "help"),
    S.CANCELLED: ("plan", "status", "help"),
    S.FAILED: ("plan", "status", "help"),
}

ALL_STATES: tuple[RunState | None, ...] = (NO_RUN, *RunState)
STATE_EVENT_PAIRS = list(itertools.product(ALL_STATES, Event))


def _id(pair: tuple[RunState | None, Event]) -> str:
    state, event = pair
    return f"{state or 'no-run'}-{event}"


@pytest.mark.parametrize("state_event", STATE_EVENT_PAIRS, ids=map(_id, STATE_EVENT_PAIRS))
def test_every_state_and_event_pair_follows_the_table(state_event):
    state, event = state_event
    if state_event in EXPECTED:
        assert transition(state, event) is EXPECTED[state_event]
    else:
        with pytest.raises(InvalidTransition) as refused:
            transition(state, event)
        assert refused.value.state == state
        assert refused.value.event is event


def test_the_happy_path_runs_from_no_run_to_done():
    state = None
    for event in (E.PLAN, E.PLAN_READY, E.APPROVE, E.LANES_MERGED, E.PR_OPENED):
        state = transition(state, event)
    assert state is S.DONE


def test_closing_the_pr_unmerged_cancels_the_run_and_merging_keeps_it_done():
    assert transition(S.DONE, E.PR_CLOSED) is S.CANCELLED
    assert transition(S.DONE, E.PR_MERGED) is S.DONE


def test_retry_after_a_blocked_integrate_resumes_running_so_reconcile_reenters_integrating():
    blocked = transition(S.INTEGRATING, E.INTEGRATE_FAILED)
    resumed = transition(blocked, E.RETRY)
    assert (blocked, resumed) == (S.BLOCKED, S.RUNNING)
    assert transition(resumed, E.LANES_MERGED) is S.INTEGRATING


def test_a_blocked_run_cannot_be_replanned_only_retried_or_cancelled():
    with pytest.raises(InvalidTransition, match="valid now: /retry, /cancel, /status, /help"):
        transition(S.BLOCKED, E.REPLAN)


@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_a_new_plan_may_start_after_a_terminal_state(state):
    assert transition(state, E.PLAN) is S.PLANNING


@pytest.mark.parametrize("state", [s for s in RunState if s not in TERMINAL])
def test_plan_is_refused_while_a_run_is_live_or_its_pr_is_open(state):
    with pytest.raises(InvalidTransition):
        transition(state, E.PLAN)


def test_terminal_states_are_rejected_cancelled_and_failed():
    assert TERMINAL == {S.REJECTED, S.CANCELLED, S.FAILED}


def test_refusing_a_command_names_the_action_the_state_and_what_is_valid_now():
    with pytest.raises(InvalidTransition) as refused:
        transition(S.RUNNING, E.APPROVE)
    assert str(refused.value) == ("cannot approve a run that is running; valid now: /cancel, /hold, /status, /help")
    assert refused.value.valid_now == ("cancel", "hold", "status", "help")


def test_refusing_a_command_on_an_issue_without_a_run_says_so():
    with pytest.raises(InvalidTransition) as refused:
        transition(None, E.APPROVE)
    assert str(refused.value) == ("cannot approve an issue with no run yet; valid now: /plan, /status, /help")


def test_state_names_read_as_words_in_messages():
    with pytest.raises(InvalidTransition, match="a run that is awaiting approval"):
        transition(S.AWAITING_APPROVAL, E.RETRY)


@pytest.mark.parametrize(
    "state_event",
    [pair for pair in STATE_EVENT_PAIRS if pair not in EXPECTED],
    ids=_id,
)
def test_every_refusal_names_the_state_and_the_action(state_event):
    state, event = state_event
    with pytest.raises(InvalidTransition) as refused:
        transition(state, event)
    message = str(refused.value)
    assert event.value in message
    assert (state.value.replace("_", " ") if state else "no run yet") in message


def test_refusing_a_reported_event_names_the_states_it_is_valid_in():
    with pytest.raises(InvalidTransition) as refused:
        transition(S.PLANNING, E.LANES_MERGED)
    assert str(refused.value) == (
        "cannot apply lanes_merged to a run that is planning; lanes_merged is valid only when the run is running"
    )


def test_invalid_transition_is_a_value_error():
    assert issubclass(InvalidTransition, ValueError)


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_available_actions_per_state(state):
    assert available_actions(state) == EXPECTED_ACTIONS[state]


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_status_and_help_are_available_in_every_state_and_last(state):
    assert available_actions(state)[-2:] == ("status", "help")


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_every_available_command_has_a_transition_and_no_other_command_does(state):
    available = set(available_actions(state)) - set(QUERY_COMMANDS) - set(HOLD_COMMANDS)
    for name in set(ALL_COMMANDS) - set(QUERY_COMMANDS) - set(HOLD_COMMANDS):
        has_transition = (state, Event(name)) in EXPECTED
        assert (name in available) == has_transition, name
        if has_transition:
            transition(state, Event(name))  # must not raise


def test_status_and_help_never_change_state_so_they_are_no_events():
    assert {e.value for e in Event}.isdisjoint(QUERY_COMMANDS)
    assert command_event("status") is None
    assert command_event("help") is None


def test_every_state_changing_command_is_an_event_and_reported_events_are_not_commands():
    commands = [name for name in ALL_COMMANDS if name not in QUERY_COMMANDS + HOLD_COMMANDS]
    assert [command_event(name) for name in commands] == [Event(name) for name in commands]
    assert {e for e in Event if e.is_command} == {Event(name) for name in commands}


def test_an_unknown_command_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown command 'aprove'; known: plan, approve"):
        command_event("aprove")


# A hold is a flag beside the state: which of /hold and /unhold is valid depends on both.
EXPECTED_HELD_ACTIONS: dict[RunState | None, tuple[str, ...]] = {
    S.RUNNING: ("cancel", "unhold", "status", "help"),
    S.INTEGRATING: ("cancel", "unhold", "status", "help"),
    S.BLOCKED: ("retry", "cancel", "unhold", "status", "help"),
}


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_a_held_run_offers_unhold_instead_of_hold_while_it_builds_or_is_blocked(state):
    expected = EXPECTED_HELD_ACTIONS.get(state, tuple(a for a in EXPECTED_ACTIONS[state] if a != "hold"))
    assert available_actions(state, held=True) == expected
    assert is_held(state, True) == (state in EXPECTED_HELD_ACTIONS)
    assert not is_held(state, False)


def test_hold_is_valid_only_while_the_run_builds_and_no_hold_moves_the_state():
    assert states_allowing("hold") == (S.RUNNING, S.INTEGRATING)
    assert states_allowing("unhold") == ()
    assert states_allowing("unhold", held=True) == (S.RUNNING, S.INTEGRATING, S.BLOCKED)
    assert command_event("hold") is None and command_event("unhold") is None
    assert {e.value for e in Event}.isdisjoint(HOLD_COMMANDS)


def test_states_allowing_lists_where_a_command_is_valid():
    assert states_allowing("plan") == (None, S.REJECTED, S.CANCELLED, S.FAILED)
    assert states_allowing("retry") == (S.BLOCKED,)
    assert states_allowing("help") == ALL_STATES


def _reachable_from(start: RunState | None) -> set[RunState]:
    seen: set[RunState] = set()
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for event in Event:
            try:
                target = transition(state, event)
            except InvalidTransition:
                continue
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_every_state_is_reachable_from_an_issue_without_a_run():
    assert _reachable_from(None) == set(RunState)


@pytest.mark.parametrize("state", list(RunState))
def test_no_state_is_a_dead_end_every_run_can_reach_done_or_a_terminal_state(state):
    reachable = _reachable_from(state) | {state}
    assert reachable & (TERMINAL | {S.DONE})
    assert available_actions(state) != QUERY_COMMANDS or state in TERMINAL


def test_plain_strings_from_the_database_are_accepted_as_states_and_events():
    assert transition("awaiting_approval", "approve") is S.RUNNING
    with pytest.raises(InvalidTransition, match="cannot approve a run that is running"):
        transition("running", "approve")


def test_an_unknown_state_or_event_name_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="'paused'"):
        transition("paused", E.CANCEL)
    with pytest.raises(ValueError, match="'launch'"):
        transition(S.RUNNING, "launch")
