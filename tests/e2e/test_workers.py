"""Lanes on `lanebot worker`s: `lanebot serve` hands its jobs to Celery over Redis or RabbitMQ.

The sandbox GitHub, `lanebot serve` with LANEBOT_BROKER_URL, and two `lanebot worker` processes,
each with a work folder and a name of its own as two hosts would have, on a throwaway PostgreSQL
database. Real Redis, RabbitMQ and PostgreSQL at their default ports (LANEBOT_TEST_REDIS_URL,
LANEBOT_TEST_AMQP_URL, LANEBOT_TEST_POSTGRES_URL); when one cannot be reached its cases skip with
the reason, except under CI=true, where they fail.

Tests running side by side do not take each other's jobs: each Redis case claims a database number
of its own, each RabbitMQ case a virtual host of its own (when `rabbitmqctl` works here).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.plan import UNITS
from bot.demo.runner import repository_config
from bot.demo.services import claimed_redis, throwaway_postgres
from bot.demo.stack import Stack
from bot.edges.store import db, runs
from bot.edges.store.models import AgentSession
from tests.e2e.conftest import shared_folder
from tests.e2e.test_end_to_end import (
    MAINTAINER,
    REPO,
    STEP_TIMEOUT,
    config,
    merge_commits,
    open_and_label,
    plan_body,
    recipe_unit,
    state_labels,
    wait_for_comment,
    wait_for_pull,
)
from tests.process_helpers import gone, processes_with
from tests.services import borrowed, unavailable

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("LANEBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379")
AMQP_URL = os.environ.get("LANEBOT_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672")
POSTGRES_URL = os.environ.get("LANEBOT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
WORKERS = ("host-a", "host-b")


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A database of its own on the test PostgreSQL server, dropped after."""
    yield from borrowed(throwaway_postgres(POSTGRES_URL, user="the workers' tests", prefix="lanebot_workers"))


def redis_broker() -> Iterator[str]:
    """A Redis database number no other test holds: the broker's URL on it."""
    yield from borrowed(claimed_redis(REDIS_URL, user="the workers' tests"))


def amqp_broker() -> Iterator[str]:
    """A RabbitMQ virtual host of the test's own when `rabbitmqctl` works here, else the default one."""
    from kombu import Connection

    try:
        with Connection(f"{AMQP_URL}//", connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as error:
        unavailable(f"RabbitMQ at {AMQP_URL} is unreachable ({error}); set LANEBOT_TEST_AMQP_URL")
    vhost = f"lanebot-test-{uuid.uuid4().hex[:10]}"
    ctl = shutil.which("rabbitmqctl")
    made = False
    if ctl is not None:
        made = subprocess.run([ctl, "add_vhost", vhost], capture_output=True).returncode == 0
        made = made and subprocess.run(
            [ctl, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"], capture_output=True
        ).returncode == 0  # fmt: skip
    try:
        yield f"{AMQP_URL}/{vhost}" if made else f"{AMQP_URL}//"
    finally:
        if made:
            subprocess.run([ctl, "delete_vhost", vhost], capture_output=True)  # type: ignore[list-item]


@pytest.fixture(params=["redis", "amqp"])
def broker_url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from (redis_broker() if request.param == "redis" else amqp_broker())


@pytest.fixture
def worker_stack(tmp_path: Path, broker_url: str, postgres_database: str) -> Iterator[Stack]:
    env = {"LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)), "LANEBOT_BROKER_URL": broker_url}
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        for name in WORKERS:
            stack.start_worker(name, concurrency=1)
        yield stack


def run_id_of(stack: Stack, number: int) -> int:
    engine = db.make_engine(stack.database_url)
    try:
        run = runs.active_run(engine, REPO, number)
        assert run is not None and run.id is not None
        return run.id
    finally:
        engine.dispose()


def session_hosts(stack: Stack, run_id: int) -> dict[str, set[str]]:
    """Which hosts ran the run's sessions, by kind."""
    engine = db.make_engine(stack.database_url)
    try:
        hosts: dict[str, set[str]] = {}
        for session in runs.sessions(engine, run_id):
            hosts.setdefault(session.kind, set()).add(session.host or "")
        return hosts
    finally:
        engine.dispose()


def test_lanes_spread_over_two_workers_into_one_pull_request(worker_stack: Stack):
    stack = worker_stack
    started = time.monotonic()
    # Checks that take a moment, so that both workers (one job at a time each) have a lane to run.
    units = [dict(unit, check=f"sleep 2 && {unit['check']}") for unit in UNITS]
    number = open_and_label(stack, plan_body(units), cfg=repository_config("recipe"))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")

    wait_for_pull(stack, number)
    stack.human.drain()
    assert len(stack.repository(REPO)["pulls"]) == 1
    merges = merge_commits(stack, f"lanebot/{number}")
    assert sorted(merges) == sorted(f"Merge lane '{unit['id']}' of #{number}" for unit in UNITS)
    hosts = session_hosts(stack, run_id_of(stack, number))
    assert hosts["lane"] == set(WORKERS), hosts
    assert hosts["integrate"] <= set(WORKERS), hosts
    for name in WORKERS:
        assert stack.worker_workdir(name).is_dir()
        assert stack.worker(name).poll() is None, f"worker {name} exited; see worker-{name}.log"
    print(f"two workers, four lanes, one pull request in {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_cancel_stops_the_lanes_on_both_workers(worker_stack: Stack):
    stack = worker_stack
    seconds = f"{90 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a sleep no other test's check runs
    units = [
        recipe_unit(unit, rf"^{unit}\.txt$", {f"{unit}.txt": "zzz\n"}, check=f"sleep {seconds}")
        for unit in ("slow-a", "slow-b")
    ]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    stack.wait_for(
        "both lanes' checks running",
        lambda: len(processes_with(seconds)) == 2,
        timeout=STEP_TIMEOUT,
        seen=lambda: f"{len(processes_with(seconds))} running",
    )
    run_id = run_id_of(stack, number)
    assert session_hosts(stack, run_id)["lane"] == set(WORKERS)

    stack.human.comment(REPO, number, login=MAINTAINER, body="/cancel")
    stack.wait_for(
        "no state label (cancelled)",
        lambda: state_labels(stack, number) == [],
        timeout=STEP_TIMEOUT,
        seen=lambda: str(state_labels(stack, number)),
    )
    assert gone(seconds), "a lane's check outlived /cancel"
    engine = db.make_engine(stack.database_url)
    try:
        run = runs.get_run(engine, run_id)
        assert run is not None and run.state == "cancelled"
        assert {lane.state for lane in runs.lanes(engine, run_id)} == {"failed"}
        assert {s.status for s in runs.sessions(engine, run_id) if s.kind == "lane"} == {"cancelled"}
    finally:
        engine.dispose()
    assert not stack.repository(REPO)["pulls"]
    for name in WORKERS:
        assert stack.worker(name).poll() is None, f"worker {name} exited; see worker-{name}.log"


@pytest.mark.parametrize("broker_url", ["redis", "amqp"], indirect=True)
def test_a_worker_killed_mid_lane_is_taken_over_and_its_lost_attempt_is_no_retry(
    tmp_path: Path, broker_url: str, postgres_database: str
):
    """SIGKILL of the host that runs a lane: its lease runs out (LANEBOT_LEASE_TTL=4 s here), the
    other worker runs the lane as its next attempt, and with `max_retries: 0` the run still ends in
    one pull request, each lane merged once."""
    seconds = f"{3 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a sleep no other test's check runs
    units = [
        recipe_unit(unit, rf"^{unit}\.txt$", {f"{unit}.txt": "zzz\n"}, check=f"sleep {seconds}")
        for unit in ("lane-a", "lane-b")
    ]
    env = {
        "LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)),
        "LANEBOT_BROKER_URL": broker_url,
        "LANEBOT_LEASE_TTL": "4",
    }
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        for name in WORKERS:
            stack.start_worker(name, concurrency=1)
        number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
        stack.wait_for(
            "a lane's check running on each worker",
            lambda: len(processes_with(seconds)) == 2,
            timeout=STEP_TIMEOUT,
            seen=lambda: f"{len(processes_with(seconds))} running",
        )
        run_id = run_id_of(stack, number)
        [killed] = [s for s in lane_sessions(stack, run_id) if s.host == "host-a"]

        os.killpg(stack.worker("host-a").pid, signal.SIGKILL)

        wait_for_pull(stack, number)
        stack.human.drain()
        assert len(stack.repository(REPO)["pulls"]) == 1
        merges = merge_commits(stack, f"lanebot/{number}")
        assert sorted(merges) == sorted(f"Merge lane '{unit['id']}' of #{number}" for unit in units)
        sessions = {s.id: s for s in lane_sessions(stack, run_id)}
        lost = sessions[killed.id]
        assert (lost.status, lost.counts_as_retry) == ("lost", False), lost
        assert "stopped renewing its lease" in (lost.failure or "")
        again = [s for s in sessions.values() if s.lane_id == killed.lane_id and s.id != killed.id]
        assert [(s.attempt, s.status, s.host) for s in again] == [(2, "succeeded", "host-b")]


def lane_sessions(stack: Stack, run_id: int) -> list[AgentSession]:
    engine = db.make_engine(stack.database_url)
    try:
        return [s for s in runs.sessions(engine, run_id) if s.kind == "lane"]
    finally:
        engine.dispose()


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_a_worker_started_after_the_run_began_picks_up_its_queued_lanes(
    tmp_path: Path, broker_url: str, postgres_database: str
):
    env = {"LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)), "LANEBOT_BROKER_URL": broker_url}
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        number = open_and_label(stack, plan_body(UNITS), cfg=repository_config("recipe"))
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
        run_id = run_id_of(stack, number)
        stack.wait_for(
            "lanes queued with no worker to take them",
            lambda: lane_states(stack, run_id).count("running") >= 2,
            timeout=STEP_TIMEOUT,
            seen=lambda: str(lane_states(stack, run_id)),
        )
        assert lane_sessions(stack, run_id) == []  # queued: no host has started one

        stack.start_worker("late", concurrency=2)

        wait_for_pull(stack, number)
        assert len(stack.repository(REPO)["pulls"]) == 1
        assert {s.host for s in lane_sessions(stack, run_id)} == {"late"}


def lane_states(stack: Stack, run_id: int) -> list[str]:
    engine = db.make_engine(stack.database_url)
    try:
        return [lane.state for lane in runs.lanes(engine, run_id)]
    finally:
        engine.dispose()


class PrivateRedis:
    """A redis-server of the test's own on a free port, keeping nothing on disk (as the machine's
    own Redis here), so that the test can kill it and start it again without touching others."""

    def __init__(self, root: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server is not installed: the Redis restart case needs one of its own")
        self.binary = str(binary)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(argv, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_connect_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.kill()


def test_redis_restarted_mid_run_loses_no_lane(tmp_path: Path, private_redis: PrivateRedis, postgres_database: str):
    """Redis killed while one lane runs and the others wait in its queue, then started again empty:
    the queued lanes are sent again, the running one's end is learnt from its lease, one PR."""
    seconds = f"{2 + uuid.uuid4().int % 1000 / 1000:.3f}"
    units = [
        recipe_unit(unit, rf"^{unit}\.txt$", {f"{unit}.txt": "zzz\n"}, check=f"sleep {seconds}")
        for unit in ("one", "two", "three")
    ]
    env = {"LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)), "LANEBOT_BROKER_URL": private_redis.url}
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        stack.start_worker("only", concurrency=1)
        number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
        run_id = run_id_of(stack, number)
        stack.wait_for(
            "one lane's check running, the others queued",
            lambda: len(processes_with(seconds)) == 1 and lane_states(stack, run_id).count("running") == 3,
            timeout=STEP_TIMEOUT,
            seen=lambda: str(lane_states(stack, run_id)),
        )

        private_redis.kill()
        time.sleep(1.0)
        private_redis.start()

        wait_for_pull(stack, number)
        assert len(stack.repository(REPO)["pulls"]) == 1
        merges = merge_commits(stack, f"lanebot/{number}")
        assert sorted(merges) == sorted(f"Merge lane '{unit['id']}' of #{number}" for unit in units)
        assert all(s.status == "succeeded" for s in lane_sessions(stack, run_id))


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_the_caps_hold_across_workers_one_lane_at_a_time_and_one_run_per_repository(
    tmp_path: Path, broker_url: str, postgres_database: str
):
    """LANEBOT_MAX_LANES=1 and LANEBOT_MAX_RUNS_PER_REPO=1 with two workers free: counted in the
    database, so no two lane sessions overlap, and the second run's lanes start after the first run."""
    units = [recipe_unit(unit, rf"^{unit}\.txt$", {f"{unit}.txt": "zzz\n"}, check="sleep 1") for unit in ("one", "two")]
    env = {
        "LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)),
        "LANEBOT_BROKER_URL": broker_url,
        "LANEBOT_MAX_LANES": "1",
        "LANEBOT_MAX_RUNS_PER_REPO": "1",
    }
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        for name in WORKERS:
            stack.start_worker(name, concurrency=1)
        first = open_and_label(stack, plan_body(units), cfg=config())
        second = stack.human.open_issue(REPO, login=MAINTAINER, title="And this", body=plan_body(units))["number"]
        stack.human.add_label(REPO, second, "lanebot", login=MAINTAINER)
        wait_for_comment(stack, second, "<!-- lanebot:gate")
        run_ids = [run_id_of(stack, number) for number in (first, second)]
        for number in (first, second):
            stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")

        for number in (first, second):
            wait_for_pull(stack, number)
        first_run, second_run = (lane_sessions(stack, run_id) for run_id in run_ids)
        spans = sorted((s.started_at, s.ended_at) for s in first_run + second_run)
        assert len(spans) == 4 and all(end is not None for _, end in spans)
        assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:])), spans
        assert min(s.started_at for s in second_run) >= max(s.ended_at for s in first_run)  # type: ignore[type-var]


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_flower_shows_the_workers_and_their_jobs_unchanged(tmp_path: Path, broker_url: str, postgres_database: str):
    """Celery's monitor, pointed at the broker as its README says: it sees both runner hosts and
    every job lanebot sent (task events are on), with no lanebot code of its own."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)), "LANEBOT_BROKER_URL": broker_url}
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", f"--broker={broker_url}", "flower", f"--port={port}", "--address=127.0.0.1"],
        env={**os.environ, "FLOWER_UNAUTHENTICATED_API": "true"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        api = f"http://127.0.0.1:{port}/api"
        with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
            stack.wait_for("flower answers", lambda: _get(f"{api}/workers") is not None, timeout=STEP_TIMEOUT)
            for name in WORKERS:
                stack.start_worker(name, concurrency=1)
            number = open_and_label(stack, plan_body(UNITS), cfg=repository_config("recipe"))
            stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
            wait_for_pull(stack, number)

            workers = stack.wait_for(
                "flower lists both workers",
                lambda: (found := _get(f"{api}/workers?refresh=1")) and len(found) >= 2 and found,
                timeout=STEP_TIMEOUT,
            )
            assert {name.split("@", 1)[0] for name in workers} == set(WORKERS)
            tasks = _get(f"{api}/tasks") or {}
            kinds = [task["kwargs"] for task in tasks.values() if task.get("name") == "lanebot.perform"]
            assert sum("'lane'" in kwargs for kwargs in kinds) >= len(UNITS), kinds
            assert {task["state"] for task in tasks.values()} == {"SUCCESS"}
    finally:
        flower.terminate()
        flower.wait(timeout=10)


def _get(url: str) -> Any:
    import httpx

    try:
        answer = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code == 200 else None


@pytest.mark.parametrize("broker_url", ["redis"], indirect=True)
def test_a_worker_killed_mid_merge_is_taken_over_and_each_lane_is_merged_once(
    tmp_path: Path, broker_url: str, postgres_database: str
):
    """The merge round's push held at GitHub (the sandbox), its worker SIGKILLed meanwhile; the push
    lands after all, as a sent request may. The merge is sent again to the other worker, which finds
    the lane already on the pushed integration branch (the fence): one merge commit per lane."""
    env = {
        "LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path)),
        "LANEBOT_BROKER_URL": broker_url,
        "LANEBOT_LEASE_TTL": "4",
    }
    units = [recipe_unit("solo", r"^solo\.txt$", {"solo.txt": "zzz\n"}, check="sleep 1")]
    with Stack(tmp_path / "stack", lanebot_env=env, database=postgres_database) as stack:
        for name in WORKERS:
            stack.start_worker(name, concurrency=1)
        number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
        run_id = run_id_of(stack, number)
        stack.wait_for("the lane running", lambda: lane_sessions(stack, run_id), timeout=STEP_TIMEOUT)
        # Only the merge round pushes the integration branch from now on.
        stack.human.add_fault(
            method="POST", path=r"/.*/git-receive-pack", body_contains=f"refs/heads/lanebot/{number}", delay=6
        )
        stack.wait_for("the merge's push held", lambda: stack.human.faults()["fired"], timeout=STEP_TIMEOUT, poll=0.05)
        [holder] = [lease.holder for lease in held_leases(stack, run_id) if lease.job_key.startswith("merge|")]
        os.killpg(stack.worker(holder.split("/", 1)[0]).pid, signal.SIGKILL)

        wait_for_pull(stack, number)
        assert len(stack.repository(REPO)["pulls"]) == 1
        assert merge_commits(stack, f"lanebot/{number}").count(f"Merge lane 'solo' of #{number}") == 1
        assert "taken_over" in [event.kind for event in run_events(stack, run_id)]


def held_leases(stack: Stack, run_id: int) -> list[Any]:
    from bot.edges.store import leases

    engine = db.make_engine(stack.database_url)
    try:
        return [lease for lease in leases.all_of(engine, run_id) if lease.released_at is None]
    finally:
        engine.dispose()


def run_events(stack: Stack, run_id: int) -> list[Any]:
    engine = db.make_engine(stack.database_url)
    try:
        return runs.run_events(engine, run_id)
    finally:
        engine.dispose()
