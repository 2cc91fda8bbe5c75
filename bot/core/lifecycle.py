"""The run state machine: the states of a run, what moves it, and which commands are valid where.

Pure code, no I/O. One table (`_TRANSITIONS`) is the whole machine: `transition` reads it to move a
run, and `available_actions` reads it to say which slash commands are valid in a state, so the
command handler, the gate comment and `/help` can never disagree with what the machine accepts.

    planning -> awaiting_approval -> running -> integrating -> done
    (and blocked, rejected, cancelled, failed)

A run belongs to one issue. `None` stands for "this issue has no run yet".

A hold (`/hold`, `/unhold`) is a flag beside the state, not a state of its own: a held run is
still `running` or `integrating`, and every transition above applies to it as before (it may
merge, block, be cancelled); the hold only stops new agent sessions from starting. So the
machine stays one table, and `available_actions` takes the flag to offer `/hold` or `/unhold`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class RunState(StrEnum):
    PLANNING = "planning"  # the planner agent is writing (or re-writing) the unit graph
    AWAITING_APPROVAL = "awaiting_approval"  # the gate comment is posted; a human decides
    RUNNING = "running"  # lanes run and merge in rounds
    INTEGRATING = "integrating"  # every lane merged; integrate + verify, then the PR
    DONE = "done"  # the PR is open; it stays `done` when merged, closing it unmerged cancels
    BLOCKED = "blocked"  # a lane, a merge or the integrate step ran out of retries; a human acts
    REJECTED = "rejected"  # a human refused the plan
    CANCELLED = "cancelled"  # a human stopped the run, or its PR was closed unmerged
    FAILED = "failed"  # the planner gave no valid plan after its retries


# A run in one of these is over: a new `/plan` may start a new run on the issue.
TERMINAL: frozenset[RunState] = frozenset({RunState.REJECTED, RunState.CANCELLED, RunState.FAILED})


class Event(StrEnum):
    """Everything that may move a run. Command events carry the slash command's name as value."""

    # Commands a human gives (in a comment; `fix` on the pull request).
    PLAN = "plan"  # start a new run on an issue that has none, or whose run is over
    APPROVE = "approve"  # accept the plan shown in the gate comment: start the lanes
    REJECT = "reject"  # refuse the plan: the run ends
    REPLAN = "replan"  # ask the planner for another plan, with feedback
    RETRY = "retry"  # resume a blocked run (retry its failed lanes, or the integrate step)
    CANCEL = "cancel"  # stop the run, keeping branches and transcripts
    FIX = "fix"  # on the open PR: start a review lane; the run stays `done`
    UPDATE = "update"  # on the open PR: merge the default branch into its branch; the run stays `done`

    # Things lanebot reports about its own work.
    PLAN_READY = "plan_ready"  # the planner produced a valid plan; the gate comment is up
    PLAN_FAILED = "plan_failed"  # the planner gave no valid plan after its retries
    LANES_MERGED = "lanes_merged"  # every lane merged into the integration branch
    LANE_BLOCKED = "lane_blocked"  # a lane or its merge failed past its retries (or conflicted)
    INTEGRATE_FAILED = "integrate_failed"  # integrate or verify failed past its retries
    PR_OPENED = "pr_opened"  # the pull request is open
    PR_MERGED = "pr_merged"  # the pull request was merged
    PR_CLOSED = "pr_closed"  # the pull request was closed without merging

    @property
    def is_command(self) -> bool:
        return self.value in _STATE_CHANGING_COMMANDS


# Commands that only read the run; valid in every state and never change it.
QUERY_COMMANDS: tuple[str, ...] = ("status", "help")

# Commands that set or clear the hold flag beside the state; they are no events.
HOLD_COMMANDS: tuple[str, ...] = ("hold", "unhold")

# Every slash command lanebot knows, in the order help text and "valid now" lists show them.
_STATE_CHANGING_COMMANDS: tuple[str, ...] = (
    "plan",
    "approve",
    "reject",
    "replan",
    "retry",
    "cancel",
    "fix",
    "update",
)
ALL_COMMANDS: tuple[str, ...] = _STATE_CHANGING_COMMANDS + HOLD_COMMANDS + QUERY_COMMANDS

_S = RunState
_STOPPABLE = (_S.PLANNING, _S.AWAITING_APPROVAL, _S.RUNNING, _S.INTEGRATING, _S.BLOCKED)
# `/hold` is valid while the run builds; a hold lasts through a block (and `/retry`) until `/unhold`.
HOLDABLE: frozenset[RunState] = frozenset({_S.RUNNING, _S.INTEGRATING})
_HOLD_LASTS: frozenset[RunState] = HOLDABLE | {_S.BLOCKED}

# The machine: event -> {state it is valid in -> state it leads to}. Nothing else decides.
_TRANSITIONS: dict[Event, dict[RunState | None, RunState]] = {
    Event.PLAN: {None: _S.PLANNING, **{s: _S.PLANNING for s in TERMINAL}},
    Event.APPROVE: {_S.AWAITING_APPROVAL: _S.RUNNING},
    Event.REJECT: {_S.AWAITING_APPROVAL: _S.REJECTED},
    Event.REPLAN: {_S.AWAITING_APPROVAL: _S.PLANNING},
    # Back to `running` even when integrate was what blocked: reconcile finds every lane merged
    # and reports LANES_MERGED again, which re-enters `integrating`.
    Event.RETRY: {_S.BLOCKED: _S.RUNNING},
    Event.CANCEL: {s: _S.CANCELLED for s in _STOPPABLE},
    Event.FIX: {_S.DONE: _S.DONE},
    Event.UPDATE: {_S.DONE: _S.DONE},
    Event.PLAN_READY: {_S.PLANNING: _S.AWAITING_APPROVAL},
    Event.PLAN_FAILED: {_S.PLANNING: _S.FAILED},
    Event.LANES_MERGED: {_S.RUNNING: _S.INTEGRATING},
    Event.LANE_BLOCKED: {_S.RUNNING: _S.BLOCKED},
    Event.INTEGRATE_FAILED: {_S.INTEGRATING: _S.BLOCKED},
    Event.PR_OPENED: {_S.INTEGRATING: _S.DONE},
    Event.PR_MERGED: {_S.DONE: _S.DONE},
    Event.PR_CLOSED: {_S.DONE: _S.CANCELLED},
}


def describe_state(state: RunState | str | None) -> str:
    """`a run that is awaiting approval`, or `an issue with no run yet`, for messages."""
    state = _as_state(state)
    if state is None:
        return "an issue with no run yet"
    return f"a run that is {_words(state)}"


def available_actions(state: RunState | str | None, *, held: bool = False) -> tuple[str, ...]:
    """The slash commands (names without `/`) valid in `state` (`held`: the run carries a hold);
    the one definition of it."""
    state = _as_state(state)
    changing = tuple(name for name in _STATE_CHANGING_COMMANDS if state in _TRANSITIONS[Event(name)])
    hold = tuple(name for name in HOLD_COMMANDS if _hold_command_valid(name, state, held))
    return changing + hold + QUERY_COMMANDS


def is_held(state: RunState | str | None, held: bool) -> bool:
    """Whether a run's hold flag stops it starting agent sessions: only while it builds or is
    blocked (a flag left on a run that ended says nothing)."""
    return held and _as_state(state) in _HOLD_LASTS


def _hold_command_valid(name: str, state: RunState | None, held: bool) -> bool:
    if name == "hold":
        return not held and state in HOLDABLE
    return is_held(state, held)


def states_allowing(command: str, *, held: bool = False) -> tuple[RunState | None, ...]:
    """Every state (None = no run yet) in which `command` is valid, in declaration order."""
    candidates: tuple[RunState | None, ...] = (None, *RunState)
    return tuple(state for state in candidates if command in available_actions(state, held=held))


def command_event(command: str) -> Event | None:
    """The event a slash command sends, or None for a query (`status`, `help`) and for `/hold`
    and `/unhold`, which set a flag beside the state and move nothing.

    Raises ValueError for a name lanebot does not know.
    """
    if command in QUERY_COMMANDS or command in HOLD_COMMANDS:
        return None
    if command not in _STATE_CHANGING_COMMANDS:
        raise ValueError(f"unknown command {command!r}; known: {', '.join(ALL_COMMANDS)}")
    return Event(command)


class InvalidTransition(ValueError):
    """`event` is not valid while a run is in `state`; the message says what is valid instead."""

    def __init__(self, state: RunState | None, event: Event) -> None:
        self.state = state
        self.event = event
        self.valid_now = available_actions(state)
        super().__init__(_refusal(state, event, self.valid_now))


def transition(state: RunState | str | None, event: Event | str) -> RunState:
    """The state a run in `state` moves to on `event`; raises InvalidTransition if not allowed."""
    state, event = _as_state(state), Event(event)  # rows from the database hold plain strings
    targets = _TRANSITIONS[event]
    if state not in targets:
        raise InvalidTransition(state, event)
    return targets[state]


def _refusal(state: RunState | None, event: Event, valid_now: tuple[str, ...]) -> str:
    if event.is_command:
        commands = ", ".join(f"/{name}" for name in valid_now)
        return f"cannot {event.value} {describe_state(state)}; valid now: {commands}"
    expected = _or_list(_words(s) for s in _TRANSITIONS[event] if s is not None)
    return (
        f"cannot apply {event.value} to {describe_state(state)}; {event.value} is valid only when the run is {expected}"
    )


def _as_state(state: RunState | str | None) -> RunState | None:
    return None if state is None else RunState(state)


def _words(state: RunState) -> str:
    return state.value.replace("_", " ")


def _or_list(items: Iterable[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"
