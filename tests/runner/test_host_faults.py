"""Faults of the host are interruptions, not failures of the work (bot.runner.faults): a database
that dropped its connections or a work disk that filled up makes the step run again, a lane's
attempt without consuming a retry, and only a fault that keeps coming back blocks the run.

The runner side in process, as in test_orchestrator.py: real git, the recipe agent, the sandbox
GitHub; the fault is raised where it would be met (a database call, a check's output)."""

from __future__ import annotations

import errno
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.exc import OperationalError

from bot.edges.git import GitError
from bot.edges.github.client import RateLimitTooLong, RateLimitWait
from bot.edges.github.issues import update_comment
from bot.edges.store import runs as store
from bot.runner import faults, integrate, lanes, orchestrator
from bot.runner.faults import host_fault
from bot.sandbox.faults import SECONDARY_RATE_LIMIT, Fault
from tests.lanes_helpers import INSTALLATION, ISSUE, OWNER, REPO, approved_run, recipe, unit
from tests.runner.test_orchestrator import eventually, progress_comments, world

DISK_FULL_ON_FIRST_ATTEMPT = (
    "if [ \"$LANEBOT_ATTEMPT\" = 1 ]; then echo 'write error: No space left on device' >&2; exit 1; fi; "
    "test -f app/api/status.py"
)


def dropped_connection() -> OperationalError:
    """What SQLAlchemy raises when PostgreSQL terminated the connection a query was on."""
    return OperationalError(
        "SELECT 1", None, Exception("terminating connection due to administrator command"), connection_invalidated=True
    )


def api_unit(check: str = "test -f app/api/status.py") -> dict:
    return unit("api", "^app/api/", check, brief=recipe("app/api/status.py", "def status(task): ...\n"))


@pytest.fixture(autouse=True)
def no_pauses(monkeypatch):
    monkeypatch.setattr(faults, "PAUSES_S", (0.0,))


# --------------------------------------------------------------------------- which faults are the host's


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(dropped_connection(), id="a dropped database connection"),
        pytest.param(OperationalError("BEGIN", None, Exception("database is locked")), id="sqlite locked too long"),
        pytest.param(OSError(errno.ENOSPC, "No space left on device"), id="ENOSPC"),
        pytest.param(GitError(["git", "commit"], 128, "fatal: unable to write: No space left on device"), id="git"),
    ],
)
def test_a_lost_database_connection_or_a_full_disk_is_the_hosts_fault(error):
    assert host_fault(error) in ("the database connection was lost", "the work disk is full")


def test_a_fault_raised_while_handling_a_host_fault_is_still_the_hosts():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as disk:
            raise RuntimeError("could not write the transcript") from disk
    except RuntimeError as error:
        assert host_fault(error) == "the work disk is full"


@pytest.mark.parametrize(
    "error",
    [ValueError("bad plan"), GitError(["git", "merge"], 1, "CONFLICT (content)"), OSError(errno.EACCES, "denied")],
)
def test_errors_of_the_work_are_not_the_hosts(error):
    assert host_fault(error) is None


def test_the_pause_grows_with_each_interruption_and_stops_growing(monkeypatch):
    monkeypatch.setattr(faults, "PAUSES_S", (2.0, 5.0, 15.0))
    assert [faults.interruption_pause(n) for n in (1, 2, 3, 4, 9)] == [2.0, 5.0, 15.0, 15.0, 15.0]


# --------------------------------------------------------------------------- lanes


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_check_that_meets_a_full_disk_runs_again_without_consuming_a_retry(tmp_path, monkeypatch, sqlite_url):
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe", "max_retries": 0}) as w:
        run_id = approved_run(w.context.engine, [api_unit(DISK_FULL_ON_FIRST_ATTEMPT)])

        assert await w.drive(run_id) == "done"

        lane_sessions = [s for s in store.sessions(w.context.engine, run_id) if s.kind == "lane"]
        assert [(s.attempt, s.status, s.counts_as_retry) for s in lane_sessions] == [
            (1, "lost", False),
            (2, "succeeded", True),
        ]
        assert lane_sessions[0].failure == "interrupted: the work disk is full"
        # The interrupted attempt reports nothing: the lane's one check run is the second attempt's.
        [check] = w.github.readout().checks_named("lanebot / api")
        assert (check["status"], check["conclusion"]) == ("completed", "success")
        assert check["id"] == w.lane(run_id, "api").check_run_id
        assert len(w.github.pulls()) == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_disk_that_stays_full_blocks_the_lane_after_three_interruptions(tmp_path, monkeypatch, sqlite_url):
    always_full = "echo 'No space left on device' >&2; exit 1"
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe", "max_retries": 0}) as w:
        run_id = approved_run(w.context.engine, [api_unit(always_full)])

        assert await w.drive(run_id) == "blocked"

        statuses = [s.status for s in store.sessions(w.context.engine, run_id) if s.kind == "lane"]
        assert statuses == ["lost", "lost", "lost", "failed"]
        assert "its check exited with status 1" in w.run(run_id).error
        assert "No space left on device" in w.lane(run_id, "api").failure


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_lane_whose_database_connection_drops_runs_again_without_consuming_a_retry(
    tmp_path, monkeypatch, sqlite_url
):
    judge = lanes._Attempt._judge
    dropped: list[int] = []

    async def drops_once(self, *args):
        if not dropped:
            dropped.append(self.attempt)
            raise dropped_connection()
        return await judge(self, *args)

    monkeypatch.setattr(lanes._Attempt, "_judge", drops_once)
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe", "max_retries": 0}) as w:
        run_id = approved_run(w.context.engine, [api_unit()])

        assert await w.drive(run_id) == "done"

        assert dropped == [1]
        lane = w.lane(run_id, "api")
        assert (lane.state, lane.attempts_used) == ("merged", 1)


# --------------------------------------------------------------------------- merge and integrate


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_merge_round_whose_database_connection_drops_is_merged_again_not_blocked(
    tmp_path, monkeypatch, sqlite_url
):
    merge = orchestrator.merge_lanes
    calls: list[tuple[str, ...]] = []

    async def drops_once(context, job):
        calls.append(job.units)
        if len(calls) == 1:
            raise dropped_connection()
        await merge(context, job)

    monkeypatch.setattr(orchestrator, "merge_lanes", drops_once)
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        run_id = approved_run(w.context.engine, [api_unit()])

        assert await w.drive(run_id) == "done"

        assert calls == [("api",), ("api",)]
        assert [e.kind for e in store.run_events(w.context.engine, run_id)].count("interrupted") == 1
        assert len(w.github.pulls()) == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_integrate_step_interrupted_after_verify_passed_reports_verify_once(tmp_path, monkeypatch, sqlite_url):
    open_pull_request = integrate._Integration._open_pull_request
    interrupted: list[bool] = []

    async def drops_once(self):
        if not interrupted:
            interrupted.append(True)
            raise dropped_connection()
        await open_pull_request(self)

    monkeypatch.setattr(integrate._Integration, "_open_pull_request", drops_once)
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        run_id = approved_run(w.context.engine, [api_unit()])

        assert await w.drive(run_id) == "done"

        assert interrupted == [True]
        [verify] = w.github.readout().checks_named("lanebot / verify")
        assert verify["conclusion"] == "success"
        assert len(w.github.pulls()) == 1
        assert w.github.labels(ISSUE) == ["lanebot:done"]


# --------------------------------------------------------------------------- GitHub's rate limit


def rate_limit_too_long(lifts_in_s: float) -> RateLimitTooLong:
    until = datetime.now(UTC).timestamp() + lifts_in_s
    return RateLimitTooLong("installation 7", "POST /repos/o/r/check-runs", lifts_in_s, until, cap=300.0)


def test_a_rate_limit_longer_than_a_call_waits_interrupts_the_step_until_it_lifts_and_never_counts():
    error = rate_limit_too_long(600.0)

    reason = host_fault(error)

    assert reason is not None and reason.startswith("GitHub rate-limited installation 7 until ")
    assert 590.0 < faults.interruption_pause(1, error) <= 601.0
    assert not faults.counts_against_the_cap(reason)
    assert faults.counts_against_the_cap("the work disk is full")


def test_the_progress_note_counts_only_the_waits_since_the_run_began_and_says_when_one_is_on():
    began = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    before = RateLimitWait(began - timedelta(minutes=30), began - timedelta(minutes=29))
    first = RateLimitWait(began + timedelta(minutes=1), began + timedelta(minutes=3))
    on_now = RateLimitWait(datetime.now(UTC), datetime.now(UTC) + timedelta(minutes=10))

    past = orchestrator.rate_limit_note([before, first], since=began)
    assert past is not None and (past.waits, past.seconds, past.waiting) == (1, 120.0, False)
    until = f"{began + timedelta(minutes=3):%H:%M}"
    assert past.line() == f"GitHub's rate limit held this run up once, 2 min in all (last until {until} UTC)."
    assert orchestrator.rate_limit_note([before], since=began) is None

    current = orchestrator.rate_limit_note([first, on_now], since=began)
    assert current is not None and current.waiting
    assert current.line().startswith("**Waiting** for GitHub's rate limit until ")


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_run_that_waited_for_githubs_rate_limit_says_so_in_its_progress_comment(
    tmp_path, monkeypatch, sqlite_url
):
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        limit = Fault("POST", r"/repos/[^/]+/[^/]+/check-runs", status=403, retry_after=1, message=SECONDARY_RATE_LIMIT)
        w.github.server.sandbox.faults.add(limit)
        run_id = approved_run(w.context.engine, [api_unit()])

        assert await w.drive(run_id) == "done"

        assert [fault for _, _, fault in w.github.server.sandbox.faults.fired] == [limit]
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "GitHub's rate limit held this run up once" in comment["body"]


# --------------------------------------------------------------------------- after a crash


@pytest.mark.slow
@pytest.mark.anyio
async def test_at_start_up_a_progress_comment_left_a_step_behind_is_brought_to_the_runs_end(
    tmp_path, monkeypatch, sqlite_url
):
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        run_id = approved_run(w.context.engine, [api_unit()])
        assert await w.drive(run_id) == "done"
        [comment] = progress_comments(w.github.readout(), run_id)
        # Killed after the run's last transition, before its last edit: the comment shows the step before.
        behind = comment["body"].replace(f"run {run_id}: done", f"run {run_id}: integrating")
        client = w.context.github.installation_client(INSTALLATION, f"{OWNER}/{REPO}")
        await update_comment(client, f"{OWNER}/{REPO}", comment["id"], behind)

        await orchestrator.refresh_progress(w.context, run_id)

        [comment] = progress_comments(w.github.readout(), run_id)
        assert f"run {run_id}: done" in comment["body"]
        served = len(w.github.server.sandbox.served)
        await orchestrator.refresh_progress(w.context, run_id)  # right already: one read, no edit

        def asked() -> list[str]:  # the sandbox records a request once its answer has gone out
            return [method for method, path, _ in w.github.server.sandbox.served[served:] if path.startswith("/repos/")]

        await eventually(lambda: asked(), "the comment was read")
        assert asked() == ["GET"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_the_last_label_edit_that_github_refused_is_tried_again(tmp_path, monkeypatch, sqlite_url):
    monkeypatch.setattr(orchestrator, "FINAL_EDIT_PAUSES_S", (0.05, 0.05), raising=False)
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        # A state label is swapped in one PUT of the issue's labels (bot.edges.github.issues.set_state_label).
        refused = Fault("PUT", r"/repos/[^/]+/[^/]+/issues/\d+/labels", status=422, times=1)
        w.github.server.sandbox.faults.add(refused)
        run_id = approved_run(w.context.engine, [api_unit()])

        assert await w.drive(run_id) == "done"

        assert [fault for _, _, fault in w.github.server.sandbox.faults.fired] == [refused]
        assert w.github.labels(ISSUE) == ["lanebot:done"]
