"""State labels: which label each run state shows, and that an issue never holds two."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.labels import (
    STATE_LABELS,
    LabelChanges,
    LabelSpec,
    is_state_label,
    label_changes,
    label_for,
    restyle,
    trigger_label,
)
from bot.core.lifecycle import RunState

STATE_NAMES = [spec.name for spec in STATE_LABELS]


def apply(current: list[str], changes: LabelChanges) -> list[str]:
    """The issue's labels after removing then adding, as GitHub's API does."""
    kept = [name for name in dict.fromkeys(current) if name not in changes.remove]
    return kept + [name for name in changes.add if name not in kept]


def test_the_six_state_labels_exist_with_their_documented_names():
    assert STATE_NAMES == [
        "lanebot:planning",
        "lanebot:awaiting-approval",
        "lanebot:running",
        "lanebot:blocked",
        "lanebot:done",
        "lanebot:failed",
    ]


@pytest.mark.parametrize(
    "state, name",
    [
        (RunState.PLANNING, "lanebot:planning"),
        (RunState.AWAITING_APPROVAL, "lanebot:awaiting-approval"),
        (RunState.RUNNING, "lanebot:running"),
        (RunState.INTEGRATING, "lanebot:running"),
        (RunState.BLOCKED, "lanebot:blocked"),
        (RunState.DONE, "lanebot:done"),
        (RunState.FAILED, "lanebot:failed"),
        ("awaiting_approval", "lanebot:awaiting-approval"),
    ],
)
def test_each_working_state_has_its_label_and_integrating_shows_as_running(state, name):
    assert label_for(state).name == name


@pytest.mark.parametrize("state", [RunState.REJECTED, RunState.CANCELLED, None])
def test_a_run_a_human_ended_and_an_issue_without_a_run_show_no_state_label(state):
    assert label_for(state) is None


def test_every_state_has_a_decision():
    for state in RunState:
        label_for(state)  # raises KeyError if a new state was forgotten


def test_labels_are_valid_for_githubs_api():
    for spec in (*STATE_LABELS, trigger_label()):
        assert re.fullmatch(r"[0-9a-f]{6}", spec.color)
        assert 0 < len(spec.description) <= 100
        assert spec.to_api() == {"name": spec.name, "color": spec.color, "description": spec.description}
    assert len({spec.color for spec in STATE_LABELS}) == len(STATE_LABELS)


@pytest.mark.parametrize("color, description", [("#ffffff", "d"), ("fff", "d"), ("GGGGGG", "d"), ("ffffff", "x" * 101)])
def test_a_label_github_would_refuse_is_refused_here(color, description):
    with pytest.raises(ValueError):
        LabelSpec("lanebot:x", color, description)


def test_moving_from_one_state_to_the_next_swaps_the_labels():
    changes = label_changes(["bug", "lanebot", "lanebot:planning"], RunState.AWAITING_APPROVAL)
    assert changes == LabelChanges(add=("lanebot:awaiting-approval",), remove=("lanebot:planning",))


def test_nothing_changes_when_the_issue_already_shows_its_state():
    assert not label_changes(["lanebot:running", "bug"], RunState.INTEGRATING)


def test_the_wanted_label_in_another_case_is_kept_rather_than_added_again():
    assert label_changes(["Lanebot:Done"], "done") == LabelChanges(add=(), remove=())


def test_a_stray_second_state_label_is_removed_by_the_name_the_issue_has():
    changes = label_changes(["LANEBOT:BLOCKED", "lanebot:running"], RunState.RUNNING)
    assert changes == LabelChanges(add=(), remove=("LANEBOT:BLOCKED",))


def test_a_cancelled_run_removes_every_state_label_and_adds_none():
    changes = label_changes(["lanebot:running", "lanebot:blocked", "lanebot"], RunState.CANCELLED)
    assert changes == LabelChanges(add=(), remove=("lanebot:running", "lanebot:blocked"))


def test_the_trigger_label_and_look_alikes_are_not_state_labels():
    assert not is_state_label("lanebot")
    assert not is_state_label("lanebot:integrating")
    assert is_state_label("LANEBOT:Failed")


def test_the_trigger_label_is_configurable_but_cannot_be_a_state_label():
    assert trigger_label("plan-me").name == "plan-me"
    with pytest.raises(ValueError, match="state label"):
        trigger_label("lanebot:running")


def test_only_a_state_label_as_github_makes_it_grey_and_bare_is_given_lanebots_look():
    made = {"name": "LANEBOT:Running", "color": "EDEDED", "description": None}
    assert restyle(made) == label_for("running")
    assert restyle({**made, "description": "a person wrote this"}) is None
    assert restyle({**made, "color": "ff0000"}) is None
    assert restyle({"name": "lanebot", "color": "ededed", "description": None}) is None  # the trigger
    assert restyle({"name": "bug", "color": "ededed", "description": None}) is None


# State labels in any case, the trigger label, a look-alike, and anything at all.
label_names = (
    st.sampled_from(STATE_NAMES).flatmap(lambda name: st.sampled_from([name, name.upper(), name.title()]))
    | st.sampled_from(["bug", "lanebot", "lanebot:integrating", "Lanebot"])
    | st.text(max_size=12)
)
states = st.sampled_from([*RunState, None])


@settings(max_examples=150, deadline=None)
@given(st.lists(label_names, max_size=10), states)
def test_after_the_changes_exactly_the_states_label_remains_and_other_labels_are_untouched(current, state):
    after = apply(current, label_changes(current, state))
    state_labels = [name for name in after if is_state_label(name)]
    wanted = label_for(state)
    if wanted is None:
        assert state_labels == []
    else:
        assert [name.casefold() for name in state_labels] == [wanted.name.casefold()]
    others_before = [name for name in dict.fromkeys(current) if not is_state_label(name)]
    assert [name for name in after if not is_state_label(name)] == others_before


@settings(max_examples=100, deadline=None)
@given(st.lists(label_names, max_size=10), states)
def test_applying_the_changes_twice_changes_nothing_the_second_time(current, state):
    after = apply(current, label_changes(current, state))
    assert not label_changes(after, state)
