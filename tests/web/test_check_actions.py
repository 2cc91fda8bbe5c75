"""Check-run buttons and re-runs: which check runs offer `Retry lane` / `Re-run verify`, what a click
or GitHub's "Re-run" asks lanebot for, when the run can take it, and what the clicked check run
then says.

The pure rules are tested directly; the buttons on real check runs with the orchestrator driving
a run against the fake GitHub of tests/runner/test_orchestrator.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.checks import RERUN_VERIFY, RETRY_LANE, SUMMARY_LIMIT, CheckAction, CheckReport, external_id
from bot.edges.github.checks import acknowledge_rerun, finish_check
from bot.render.checks import lane_report, rerun_note, verify_report
from bot.runner import lanes
from bot.web.handlers.check_run import Rerun, rerun_asked, rerun_refusal
from tests.lanes_helpers import approved_run, unit
from tests.runner.test_orchestrator import WORKED_EXAMPLE, world

LANE = {"name": "lanebot / api", "external_id": external_id(7, "api")}
VERIFY = {"name": "lanebot / verify", "external_id": external_id(7)}


# --------------------------------------------------------------------------- the buttons (pure)


def test_the_two_buttons_fit_githubs_limits_on_label_description_and_identifier():
    for action in (RETRY_LANE, RERUN_VERIFY):
        api = action.to_api()
        assert len(api["label"]) <= 20 and len(api["description"]) <= 40 and len(api["identifier"]) <= 20
    assert RETRY_LANE.label == "Retry lane" and RERUN_VERIFY.label == "Re-run verify"


@pytest.mark.parametrize(
    "fields",
    [("A label longer than 20", "d", "i"), ("l", "d" * 41, "i"), ("l", "d", ""), ("l", "d", "an-identifier-too-long")],
)
def test_an_action_past_githubs_limits_is_refused_naming_the_field(fields):
    with pytest.raises(ValueError, match="must be 1 to"):
        CheckAction(*fields)


def test_a_check_report_carries_at_most_three_actions():
    with pytest.raises(ValueError, match="at most 3"):
        CheckReport("failure", "t", "s", (RETRY_LANE,) * 4)


def lane(passed: bool, offer: bool) -> CheckReport:
    return lane_report(
        unit_id="api",
        attempt=2,
        passed=passed,
        reason=None if passed else "its check exited with 1",
        changed_paths=[],
        check_output="",
        transcript="t",
        offer_retry=offer,
    )


def test_only_a_failed_lane_attempt_with_no_retry_left_offers_retry_lane():
    assert lane(passed=False, offer=True).actions == (RETRY_LANE,)
    assert "**Retry lane** (or `/retry api`" in lane(passed=False, offer=True).summary
    assert lane(passed=False, offer=False).actions == ()
    assert lane(passed=True, offer=True).actions == ()


def test_only_a_failed_verify_with_no_repair_left_offers_rerun_verify():
    def report(passed: bool, offer: bool) -> CheckReport:
        return verify_report(
            passed=passed, command="make test", output="", reason=None, transcript=None, offer_rerun=offer
        )

    assert report(False, True).actions == (RERUN_VERIFY,)
    assert report(False, False).actions == () and report(True, True).actions == ()


def test_the_note_on_a_rerun_check_names_who_asked_keeps_the_old_summary_and_fits_githubs_cap():
    title, summary = rerun_note(
        requested_by="maria", what="a retry of lane api", check_name="lanebot / api", summary="**Why it failed:** boom"
    )
    assert title == "a retry of lane api requested by @maria"
    assert summary.startswith("**@maria asked for a retry of lane api.**")
    assert "reported on the `lanebot / api` check run of the commit it ends on" in summary
    assert summary.endswith("**Why it failed:** boom")
    _, long = rerun_note(requested_by="maria", what="x", check_name="c", summary="y" * SUMMARY_LIMIT)
    assert len(long) <= SUMMARY_LIMIT


# --------------------------------------------------------------------------- what a click asks for (pure)


@pytest.mark.parametrize(
    ("check", "identifier", "expected"),
    [
        (LANE, None, Rerun(7, "api")),
        (LANE, "retry-lane", Rerun(7, "api")),
        (VERIFY, None, Rerun(7, None)),
        (VERIFY, "rerun-verify", Rerun(7, None)),
    ],
)
def test_a_rerun_or_a_button_asks_for_what_that_check_ran(check, identifier, expected):
    assert rerun_asked(check, identifier) == expected


@pytest.mark.parametrize(
    ("check", "identifier", "why"),
    [
        ({"name": "ci / tests", "external_id": "build-12"}, None, "not one of lanebot's"),
        (LANE, "rerun-verify", "not one lanebot offers"),
        (VERIFY, "retry-lane", "not one lanebot offers"),
        ({"name": "lanebot / other", "external_id": external_id(7, "api")}, None, "is not lane api's"),
        ({"name": "lanebot / review", "external_id": external_id(7)}, None, "not lanebot's verify check"),
    ],
)
def test_a_check_run_or_button_that_is_not_lanebots_asks_for_nothing(check, identifier, why):
    assert why in rerun_asked(check, identifier)


def test_a_lane_retry_needs_a_blocked_run_and_that_lane_failed():
    assert rerun_refusal(Rerun(7, "api"), "blocked", {"api": "failed", "cli": "merged"}) is None
    assert "cannot retry a run that is running" in rerun_refusal(Rerun(7, "api"), "running", {"api": "running"})
    assert (
        rerun_refusal(Rerun(7, "cli"), "blocked", {"api": "failed", "cli": "merged"})
        == "lane 'cli' is merged, not failed"
    )
    assert rerun_refusal(Rerun(7, "gone"), "blocked", {"api": "failed"}) == "the run has no lane 'gone'"


def test_a_verify_rerun_needs_a_run_that_verify_blocked_not_a_failed_lane():
    assert rerun_refusal(Rerun(7, None), "blocked", {"api": "merged"}) is None
    assert "its failed lanes did (api)" in rerun_refusal(Rerun(7, None), "blocked", {"api": "failed"})
    assert "cannot retry a run that is done" in rerun_refusal(Rerun(7, None), "done", {"api": "merged"})


# --------------------------------------------------------------------------- what lanebot sends GitHub


class RecordingClient:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def patch(self, url: str, url_vars: dict[str, Any], *, data: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((url, url_vars, data))
        return {}


@pytest.mark.anyio
async def test_finishing_a_check_sends_its_buttons_and_an_empty_list_clears_them():
    client = RecordingClient()
    await finish_check(client, "octo/app", 5, lane(passed=False, offer=True))
    await finish_check(client, "octo/app", 6, lane(passed=True, offer=False))
    assert client.patches[0][2]["actions"] == [RETRY_LANE.to_api()]
    assert client.patches[1][2]["actions"] == []


@pytest.mark.anyio
async def test_acknowledging_a_rerun_edits_only_the_output_and_takes_the_buttons_away():
    client = RecordingClient()
    title, summary = rerun_note(
        requested_by="maria", what="a retry of lane api", check_name="lanebot / api", summary="boom"
    )
    await acknowledge_rerun(client, "octo/app", 5, title=title, summary=summary)
    [(_, url_vars, data)] = client.patches
    assert url_vars == {"owner": "octo", "repo": "app", "check_run_id": 5}
    assert set(data) == {"output", "actions"} and data["actions"] == []  # GitHub keeps a conclusion once given
    assert data["output"]["title"] == "a retry of lane api requested by @maria" and "boom" in data["output"]["summary"]


# --------------------------------------------------------------------------- on real check runs


@pytest.mark.slow
@pytest.mark.anyio
async def test_only_the_lane_attempt_that_blocks_the_run_offers_retry_lane(tmp_path, monkeypatch, sqlite_url):
    writes = {attempt: {"write": {"app/api/status.py": f"broken = {attempt}\n"}} for attempt in ("1", "2")}
    plan = [unit("api", "^app/api/", "grep -q fixed app/api/status.py")]
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 1}, steps={"api": writes}
    ) as w:
        run_id = approved_run(w.context.engine, plan)
        assert await w.drive(run_id) == "blocked"
        failed = w.github.checks_named("lanebot / api")  # each attempt's on the commit it made
        assert [(c["conclusion"], c.get("actions")) for c in failed] == [
            ("failure", []),
            ("failure", [RETRY_LANE.to_api()]),
        ]
        assert failed[0]["head_sha"] != failed[1]["head_sha"]
        assert w.lane(run_id, "api").check_run_id == failed[1]["id"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_retry_that_ends_on_the_commit_an_earlier_attempt_reported_on_reports_on_its_check_run(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {"api": {"default": {"write": {"app/api/status.py": "broken = True\n"}}}}  # the same commit again
    plan = [unit("api", "^app/api/", "grep -q fixed app/api/status.py")]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 1}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)
        assert await w.drive(run_id) == "blocked"
        [failed] = w.github.checks_named("lanebot / api")
        assert (failed["conclusion"], failed.get("actions")) == ("failure", [RETRY_LANE.to_api()])
        assert failed["output"]["title"].startswith("attempt 2 failed")
        assert w.lane(run_id, "api").check_run_id == failed["id"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_last_attempt_lanebot_could_not_complete_reports_its_failure_with_retry_lane_on_its_start(
    tmp_path, monkeypatch, sqlite_url
):
    async def check_that_cannot_start(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no check today")

    monkeypatch.setattr(lanes, "run_script", check_that_cannot_start)
    steps = {"api": {"default": {"write": {"app/api/status.py": "fixed = True\n"}}}}
    plan = [unit("api", "^app/api/", "true")]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 0}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)
        assert await w.drive(run_id) == "blocked"
        [failed] = w.github.checks_named("lanebot / api")
        assert (failed["conclusion"], failed.get("actions")) == ("failure", [RETRY_LANE.to_api()])
        assert "lanebot could not complete the attempt" in failed["output"]["title"]
        lane = w.lane(run_id, "api")
        assert (failed["head_sha"], failed["id"]) == (lane.base_sha, lane.check_run_id)  # its commit was not pushed


@pytest.mark.slow
@pytest.mark.anyio
async def test_only_the_verify_that_blocks_the_run_offers_rerun_verify(tmp_path, monkeypatch, sqlite_url):
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}, integrate={"verify": "exit 3", "max_retries": 1}
    ) as w:
        assert await w.drive(approved_run(w.context.engine, WORKED_EXAMPLE[:1])) == "blocked"
        verifies = w.github.checks_named("lanebot / verify")
        assert [c["conclusion"] for c in verifies] == ["failure", "failure"]
        assert [c.get("actions") for c in verifies] == [[], [RERUN_VERIFY.to_api()]]
