"""The pure parts of a base that moves: reading GitHub's mergeability, naming a base update's merge
(and finding it again on the integration branch), and what lanebot says about it."""

from __future__ import annotations

import pytest

from bot.core.base_moves import Mergeability, mergeability, moves_default_branch
from bot.core.bisect import Merge, Suspect, Verdict
from bot.core.names import base_update_message, merge_message, parse_base_update_message
from bot.render.base_update import conflicting_comment, update_report
from bot.runner.culprit import Culprit
from bot.runner.lanes import ScriptResult


@pytest.mark.parametrize(
    ("pull", "expected"),
    [
        ({"state": "open", "mergeable": None, "mergeable_state": "unknown"}, Mergeability.UNKNOWN),
        ({"state": "open", "mergeable": False, "mergeable_state": "dirty"}, Mergeability.CONFLICTING),
        ({"state": "open", "mergeable": None, "mergeable_state": "dirty"}, Mergeability.CONFLICTING),
        ({"state": "open", "mergeable": True, "mergeable_state": "clean"}, Mergeability.CLEAN),
        ({"state": "open", "mergeable": True, "mergeable_state": "behind"}, Mergeability.CLEAN),
        ({"state": "closed", "mergeable": False, "mergeable_state": "dirty"}, Mergeability.UNKNOWN),
    ],
)
def test_a_null_mergeable_is_not_known_yet_and_never_read_as_clean_or_conflicting(pull, expected):
    assert mergeability(pull) is expected


def test_a_base_updates_merge_names_its_base_and_is_told_apart_from_a_lanes():
    message = base_update_message("main", "lanebot/7")
    assert message == "Merge main into lanebot/7 (the update from main)"
    assert parse_base_update_message(message) == "main"
    assert parse_base_update_message(merge_message("api", 7)) is None
    assert parse_base_update_message("Merge main into lanebot/7 (the update from develop)") is None
    assert Merge("c" * 40, message).base_update == "main" and Merge("c" * 40, message).unit is None


def test_a_culprit_that_is_the_update_from_the_base_is_named_so():
    merge = Merge("b" * 40, base_update_message("main", "lanebot/7"))
    verdict = Verdict(Suspect.MERGE, merge.sha, merge=merge, passed_on="a" * 40)
    failed = ScriptResult(exit_status=1, output="boom", timed_out=False, timeout=60.0)
    culprit = Culprit(verdict=verdict, failed=failed, lane=None, check_url=None, verify_runs=1)
    assert (
        culprit.finding
        == f"verify first fails on {'b' * 12}, where the update from main merged; it passes on {'a' * 12} before it"
    )
    assert culprit.note().retry_unit is None  # no lane to /retry: the base brought it


def test_the_conflict_comment_offers_update_and_says_how_the_merge_would_be_resolved():
    text = conflicting_comment(base="main", branch="lanebot/7", head="f" * 40, on_conflict="agent")
    assert "conflicts with `main`" in text and "Comment `/update`" in text and "resolver session" in text
    blocked = conflicting_comment(base="main", branch="lanebot/7", head="f" * 40, on_conflict="block")
    assert "build.on_conflict: block" in blocked


def test_the_update_report_says_what_was_done_what_verify_said_and_what_was_pushed():
    pushed = update_report(
        to="@ann: ",
        done="main (abc) was merged into lanebot/7",
        pushed="e" * 40,
        verify="make test",
        verify_passed=True,
        problems=(),
    )
    assert pushed.startswith("@ann: main (abc) was merged into lanebot/7.")
    assert "Verify (`make test`) passed" in pushed and f"Pushed `{'e' * 12}`" in pushed
    refused = update_report(
        to="@ann: ", done="merging main conflicted in a.txt", pushed=None, verify=None, verify_passed=None, problems=()
    )
    assert "Nothing was pushed." in refused and "Verify" not in refused


def test_a_push_moves_the_default_branch_only_when_it_moved_that_branch_to_a_commit():
    def push(ref: str, *, deleted: bool = False, default: str = "main") -> dict:
        return {"ref": ref, "deleted": deleted, "repository": {"default_branch": default}}

    assert moves_default_branch(push("refs/heads/main"))
    assert moves_default_branch(push("refs/heads/trunk", default="trunk"))
    assert not moves_default_branch(push("refs/heads/main", deleted=True))
    assert not moves_default_branch(push("refs/heads/lanebot/7"))
    assert not moves_default_branch(push("refs/tags/main"))
    assert not moves_default_branch(push("refs/heads/main", default=""))
    assert not moves_default_branch({"ref": "refs/heads/main"})
