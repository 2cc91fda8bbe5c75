"""lanebot's answer to faults, through the real stack (the sandbox GitHub and `lanebot serve` as
processes; tests/e2e/chaos_cases.py): GitHub's errors and rate limits, SIGKILL at each point of a run,
the same delivery and `/approve` many times at once, PostgreSQL's connections cut, the work disk full,
SQLite locked during intake. Each case counts what GitHub shows afterwards (pull requests per issue,
duplicate comments, labels and check runs, lanes merged twice, deliveries lost) and wants it clean.

bench/chaos.py runs the same cases over more runs and prints the figures (docs/reliability.md).
A case lanebot fails today is `xfail(strict=True)` naming the cause, so fixing it turns the test red
until the mark is removed.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.e2e import chaos_cases as cases
from tests.process_helpers import kill_processes_under

pytestmark = pytest.mark.slow

STEP_TIMEOUT = 45.0  # each step of a run; a hang guard, never a timing assertion


@pytest.fixture(autouse=True)
def bounded_steps(monkeypatch, tmp_path):
    monkeypatch.setattr(cases, "STEP_TIMEOUT", STEP_TIMEOUT)
    yield
    kill_processes_under(tmp_path)


def assert_clean(tally: cases.Tally) -> None:
    assert tally.clean, f"{cases.table([tally])}\n" + "\n".join(tally.notes)


# -- 1. GitHub's errors ---------------------------------------------------------------------------


def test_server_errors_on_requests_lanebot_may_repeat_and_rate_limits_on_all_leave_every_run_clean(tmp_path):
    faults = cases.ten_percent(seed=7, server_errors_on="repeatable")
    tally = cases.github_errors(tmp_path, runs=2, faults=faults, case="10% errors, 5xx on repeatable requests only")
    assert tally.faults > 0, "no fault acted"
    assert_clean(tally)


# A 5xx on a POST that creates something: GitHub may or may not have made it. lanebot looks, and
# asks again only for what is not there. (A run started by its label creates no label: the state
# labels are made as the issue gets them, and restyled with a PATCH, which is repeated.)
CREATING_POSTS = {
    "issue-label": r"/repos/[^/]+/[^/]+/issues/\d+/labels",
    "gate-comment": r"/repos/[^/]+/[^/]+/issues/\d+/comments",
    "pull-request": r"/repos/[^/]+/[^/]+/pulls",
    "check-run": r"/repos/[^/]+/[^/]+/check-runs",
}


@pytest.mark.parametrize(
    "route",
    [pytest.param(path, id=name) for name, path in CREATING_POSTS.items()],
)
def test_one_502_on_a_creating_post_still_ends_in_one_pull_request(tmp_path, route):
    """The sandbox does not do the request it answers 502 (bot/sandbox/faults.py), so looking first
    (by marker, by head branch, by name) and then repeating it is always safe here."""
    faults = [{"method": "POST", "path": route, "status": 502, "times": 1}]
    tally = cases.github_errors(tmp_path, runs=1, faults=faults, case=f"one 502 on POST {route}")
    assert tally.faults == 1
    assert_clean(tally)


# -- 2. SIGKILL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("point", cases.KILL_POINTS)
def test_lanebot_sigkilled_and_restarted_still_ends_in_one_pull_request_each_lane_merged_once(tmp_path, point):
    tally = cases.sigkill(tmp_path, runs=1, seed=sum(map(ord, point)), points=(point,))
    assert tally.faults == 1, tally.notes  # the kill happened
    assert_clean(tally)


# -- 3. the same thing many times at once ----------------------------------------------------------


def test_the_same_delivery_and_approve_twenty_times_at_once_make_one_run(tmp_path):
    tally = cases.concurrent(tmp_path, copies=20)
    assert_clean(tally)
    assert list(tally.runs_started.values()) == [1, 1], tally.notes


# -- 4. the database and the disk ------------------------------------------------------------------


def test_postgres_connections_terminated_mid_run_still_end_in_one_pull_request(tmp_path):
    try:
        with cases.throwaway_postgres():
            pass
    except Exception as error:  # the server is shared: no server, no case
        pytest.skip(f"PostgreSQL at {cases.POSTGRES_SERVER} cannot make a database: {error}")
    tally = cases.postgres_cut(tmp_path, runs=1)
    assert tally.faults >= 1, "no connection was terminated"
    assert_clean(tally)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root")
def test_the_work_disk_full_mid_lane_ends_in_one_pull_request(tmp_path):
    tally = cases.disk_full(tmp_path)
    if tally.runs == 0:
        pytest.skip(tally.notes[0])
    assert_clean(tally)


def test_a_twelve_second_sqlite_lock_during_intake_is_answered_within_ten_seconds_and_nothing_is_lost(tmp_path):
    tally = cases.sqlite_lock(tmp_path, hold=12.0)
    assert_clean(tally)
    assert tally.slowest_answer < 10.0, tally.notes
