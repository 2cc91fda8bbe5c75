"""The labels lanebot puts on an issue: the trigger label and one state label per run state.

Pure code, no I/O. A state label shows where the issue's run stands; an issue never holds two.
`label_changes` says what to add and remove to get there from the labels an issue has now.

A state label is not created ahead: GitHub makes a label that "add labels to an issue" names and
the repository lacks, grey and without a description, and `restyle` then says which of lanebot's
looks to give it (one request, the first time a repository meets that state). A repository never
holds the state labels its runs have not reached.

How run states map to labels (`label_for`):

    planning           -> lanebot:planning
    awaiting_approval  -> lanebot:awaiting-approval
    running            -> lanebot:running
    integrating        -> lanebot:running    (lanes merged; integrate and verify still run:
                                              from outside, the run is still working)
    blocked            -> lanebot:blocked
    done               -> lanebot:done
    failed             -> lanebot:failed     (the planner gave no valid plan)
    rejected, cancelled -> no state label    (a human ended the run; the issue goes back to
                                              how it was, and a new /plan starts afresh)

GitHub compares label names without regard to case, so this module does too. The trigger label
(default `lanebot`, configurable) asks for a plan; it is not a state label and is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.core.lifecycle import RunState

__all__ = [
    "DEFAULT_TRIGGER",
    "STATE_LABELS",
    "LabelChanges",
    "LabelSpec",
    "is_state_label",
    "label_changes",
    "label_for",
    "restyle",
    "trigger_label",
]

DEFAULT_TRIGGER = "lanebot"
GITHUB_NEW_LABEL_COLOR = "ededed"  # the colour GitHub gives a label an issue's labels made
_COLOR = re.compile(r"[0-9a-f]{6}")
_MAX_NAME = 50  # GitHub's limit on a label's name
_MAX_DESCRIPTION = 100  # GitHub's limit on a label's description


@dataclass(frozen=True)
class LabelSpec:
    """A label as GitHub's API creates it: `color` is six hex digits without `#`."""

    name: str
    color: str
    description: str

    def __post_init__(self) -> None:
        if not self.name.strip() or len(self.name) > _MAX_NAME:
            raise ValueError(f"label name {self.name!r} must be 1 to {_MAX_NAME} characters")
        if not _COLOR.fullmatch(self.color):
            raise ValueError(
                f"label {self.name!r}: color must be six lower-case hex digits without '#', got {self.color!r}"
            )
        if len(self.description) > _MAX_DESCRIPTION:
            raise ValueError(
                f"label {self.name!r}: GitHub allows {_MAX_DESCRIPTION} characters of description,"
                f" got {len(self.description)}"
            )

    def to_api(self) -> dict[str, str]:
        """The body of `POST /repos/{owner}/{repo}/labels`."""
        return {"name": self.name, "color": self.color, "description": self.description}


_PLANNING = LabelSpec("lanebot:planning", "c5def5", "lanebot is splitting this issue into units of work")
_AWAITING = LabelSpec(
    "lanebot:awaiting-approval", "fbca04", "lanebot's plan waits for a maintainer: /approve, /reject or /replan"
)
_RUNNING = LabelSpec("lanebot:running", "1d76db", "lanebot's agent lanes are working on this issue")
_BLOCKED = LabelSpec("lanebot:blocked", "d93f0b", "A lanebot lane ran out of retries: /retry or /cancel")
_DONE = LabelSpec("lanebot:done", "0e8a16", "lanebot opened a pull request for this issue")
_FAILED = LabelSpec("lanebot:failed", "b60205", "lanebot's planner gave no valid plan: see its comment, then /plan")

# Every state label, in the order a run meets them.
STATE_LABELS: tuple[LabelSpec, ...] = (_PLANNING, _AWAITING, _RUNNING, _BLOCKED, _DONE, _FAILED)

_BY_STATE: dict[RunState, LabelSpec | None] = {
    RunState.PLANNING: _PLANNING,
    RunState.AWAITING_APPROVAL: _AWAITING,
    RunState.RUNNING: _RUNNING,
    RunState.INTEGRATING: _RUNNING,
    RunState.BLOCKED: _BLOCKED,
    RunState.DONE: _DONE,
    RunState.FAILED: _FAILED,
    RunState.REJECTED: None,
    RunState.CANCELLED: None,
}
_BY_NAME = {spec.name.casefold(): spec for spec in STATE_LABELS}
_STATE_NAMES = frozenset(_BY_NAME)


@dataclass(frozen=True)
class LabelChanges:
    """Labels to add to an issue and labels to remove from it, by name."""

    add: tuple[str, ...]
    remove: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


def label_for(state: RunState | str | None) -> LabelSpec | None:
    """The state label for a run in `state`; None for rejected, cancelled, or no run."""
    return None if state is None else _BY_STATE[RunState(state)]


def is_state_label(name: str) -> bool:
    """Whether `name` is one of lanebot's state labels (in any case)."""
    return name.casefold() in _STATE_NAMES


def label_changes(current_labels: Iterable[str], state: RunState | str | None) -> LabelChanges:
    """What to add and remove so the issue holds exactly `state`'s label and no other state label.

    Labels that are not state labels stay as they are. A state label is removed by the name the
    issue has it under; the wanted one is kept if present in any case, and added otherwise.
    """
    wanted = label_for(state)
    wanted_key = wanted.name.casefold() if wanted else None
    keep: str | None = None
    remove: list[str] = []
    for name in dict.fromkeys(current_labels):
        if not is_state_label(name):
            continue
        if name.casefold() == wanted_key and keep is None:
            keep = name
        else:
            remove.append(name)
    add = (wanted.name,) if wanted and keep is None else ()
    return LabelChanges(add=add, remove=tuple(remove))


def trigger_label(name: str = DEFAULT_TRIGGER) -> LabelSpec:
    """The label that asks lanebot to plan an issue (as `/plan` does)."""
    if is_state_label(name):
        raise ValueError(f"the trigger label cannot be the state label {name!r}; pick another name, such as 'lanebot'")
    return LabelSpec(name, "5319e7", "Ask lanebot to plan this issue as parallel agent lanes")


def restyle(label: Mapping[str, Any]) -> LabelSpec | None:
    """lanebot's look for `label` (as GitHub's API shows it) when it is one of lanebot's state labels
    as GitHub made it (grey, no description); None for any other label and for one a person styled."""
    spec = _BY_NAME.get(str(label.get("name", "")).casefold())
    if spec is None or label.get("description") or str(label.get("color", "")).lower() != GITHUB_NEW_LABEL_COLOR:
        return None
    return spec
