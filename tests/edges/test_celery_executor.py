"""The Celery executor: jobs as messages of ids, results read back, caps and cancelling.

The cases with a broker run a Celery worker in a thread of the test, on a real Redis
(LANEBOT_TEST_REDIS_URL, default redis://127.0.0.1:6379) in a database number no other test holds,
with a stand-in task in place of lanebot's: what the executor sends and how it learns of ends is
what is tested here; tests/e2e/test_workers.py runs the real task on real worker processes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bot.demo.services import claimed_redis
from bot.edges.executor import Executor, Job, LeaseState, integrate_job, lane_job, merge_job
from bot.edges.executor.celery_executor import (
    TASK_NAME,
    CeleryExecutor,
    JobFailed,
    celery_app,
    job_from_message,
    job_message,
    result_backend_for,
)
from bot.edges.settings import Settings, SettingsError
from tests.services import borrowed

REDIS_URL = os.environ.get("LANEBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379")


def test_a_job_travels_as_its_ids_and_comes_back_the_same():
    for job in (lane_job(3, "api", 2), merge_job(3, ("api", "cli")), integrate_job(3)):
        assert job_from_message(job_message(job)) == job
    assert job_message(lane_job(3, "api", 2)) == {
        "kind": "lane",
        "run_id": 3,
        "unit_id": "api",
        "attempt": 2,
        "units": [],
    }
    for bad in ({"kind": "nap", "run_id": 1}, {"kind": "lane", "run_id": "1"}, {"kind": "merge", "run_id": 1}):
        with pytest.raises(ValueError):
            job_from_message(bad)


def test_results_go_to_the_brokers_redis_or_back_over_amqp():
    assert result_backend_for("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"
    assert result_backend_for("amqp://guest:guest@127.0.0.1:5672//") == "rpc://"
    conf = celery_app("redis://127.0.0.1:6379/3").conf
    assert conf.task_acks_late and conf.task_reject_on_worker_lost and conf.worker_prefetch_multiplier == 1


@pytest.fixture(scope="module")
def app_env() -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return {"APP_ID": "1", "PRIVATE_KEY": pem, "WEBHOOK_SECRET": "s"}


def test_the_broker_url_is_a_setting_checked_without_showing_it(app_env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def load(**extra: str) -> Settings:
        return Settings.load(environ={**app_env, **extra}, env_file=None)

    assert load().broker_url == ""
    for url in ("redis://127.0.0.1:6379/0", "amqp://guest:guest@127.0.0.1:5672//", "rediss://h:6380/1"):
        assert load(LANEBOT_BROKER_URL=url).broker_url == url
    with pytest.raises(SettingsError) as caught:
        load(LANEBOT_BROKER_URL="http://user:hunter2@host/")
    assert caught.value.names == ("LANEBOT_BROKER_URL",)
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(load(LANEBOT_BROKER_URL="redis://:hunter2@h/0"))


def test_lanebot_worker_says_what_it_needs(app_env, tmp_path, monkeypatch, capsys):
    from bot.cli import main

    monkeypatch.chdir(tmp_path)
    for name, value in app_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("LANEBOT_BROKER_URL", raising=False)
    assert main(["worker", "--env-file", str(tmp_path / "none.env")]) == 2
    assert "LANEBOT_BROKER_URL is not set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["worker", "--concurrency", "0"])
    assert "at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    assert "What a runner host needs" in capsys.readouterr().out


# -- with a broker ---------------------------------------------------------------------------------


@pytest.fixture
def redis_url() -> Iterator[str]:
    yield from borrowed(claimed_redis(REDIS_URL, user="the Celery executor's tests"))


class StandIn:
    """The worker's task for these tests: records each job, fails the unit `boom`, holds `slow`."""

    def __init__(self) -> None:
        self.done: list[dict[str, Any]] = []
        self.release = threading.Event()

    def __call__(self, job: dict[str, Any]) -> dict[str, Any]:
        if job.get("unit_id") == "slow" or "slow" in job.get("units", []):
            self.release.wait(30)
        self.done.append(job)
        if job.get("unit_id") == "boom" or "boom" in job.get("units", []):
            return {"ok": False, "error": "ValueError"}
        return {"ok": True}


@pytest.fixture
def worker(redis_url: str) -> Iterator[tuple[str, StandIn]]:
    from celery.contrib.testing.worker import start_worker

    app = celery_app(redis_url)
    task = StandIn()

    def perform_job(job: dict[str, Any]) -> dict[str, Any]:
        return task(job)

    app.task(name=TASK_NAME, shared=False)(perform_job)
    root_level = logging.getLogger().level  # Celery's test worker sets the root logger to ERROR
    try:
        with start_worker(app, pool="threads", concurrency=2, perform_ping_check=False, shutdown_timeout=10):
            yield redis_url, task
    finally:
        task.release.set()
        logging.getLogger().setLevel(root_level)


async def never_stopping(run_id: int) -> bool:
    return False


class Leases:
    """The workers' leases as the executor sees them (bot.runner.leases keeps them in the database):
    every job unclaimed, unless a test says one's holder has gone (`expired`)."""

    def __init__(self) -> None:
        self.expired: set[tuple[object, ...]] = set()
        self.taken_over: list[Job] = []

    async def state(self, job: Job) -> LeaseState:
        return LeaseState.EXPIRED if job.key in self.expired else LeaseState.UNCLAIMED

    async def take_over(self, job: Job) -> bool:
        if job.key not in self.expired:
            return False
        self.expired.discard(job.key)
        self.taken_over.append(job)
        return True


def executor(url: str, **options: Any) -> CeleryExecutor:
    options.setdefault("stopping", never_stopping)
    options.setdefault("leases", Leases())
    return CeleryExecutor(url, poll_s=0.05, lease_check_s=0.05, **options)


@pytest.mark.anyio
async def test_run_returns_when_the_worker_has_done_the_job_and_generation_grows(worker):
    url, task = worker
    ex = executor(url)
    assert isinstance(ex, Executor) and ex.local is False
    try:
        before = ex.generation(7)
        await asyncio.wait_for(ex.run(merge_job(7, ("api",))), 20)
        assert task.done == [job_message(merge_job(7, ("api",)))]
        assert ex.generation(7) == before + 1
        assert ex.active(7) == ()

        assert await ex.submit(lane_job(7, "cli", 1))
        assert not await ex.submit(lane_job(7, "cli", 1))  # the same job, already sent
        await asyncio.wait_for(ex.wait(7, before + 1, timeout=20), 25)
        assert ex.generation(7) == before + 2

        with pytest.raises(JobFailed, match="ValueError"):
            await asyncio.wait_for(ex.run(merge_job(7, ("boom",))), 20)
    finally:
        await ex.close()


@pytest.mark.anyio
async def test_cancel_run_waits_for_a_cancelled_runs_jobs_and_leaves_a_running_runs_alone(worker):
    url, task = worker
    cancelled: set[int] = set()

    async def stopping(run_id: int) -> bool:
        return run_id in cancelled

    ex = executor(url, stopping=stopping, cancel_wait_s=20)
    try:
        await ex.submit(lane_job(8, "slow", 1))
        await asyncio.sleep(0.5)
        await asyncio.wait_for(ex.cancel_run(8), 2)  # not cancelled: serve is stopping, the job goes on
        assert ex.active(8)
        cancelled.add(8)
        waiting = asyncio.ensure_future(ex.cancel_run(8))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # it waits for the worker's end of the job
        task.release.set()
        await asyncio.wait_for(waiting, 20)
        assert ex.active(8) == ()
    finally:
        await ex.close()


@pytest.mark.anyio
async def test_a_job_whose_workers_lease_ran_out_is_taken_over_a_lane_ends_here_a_merge_is_sent_again(worker):
    """The stand-in holds `slow` jobs; their lease 'expires' as if the host died while holding them."""
    url, task = worker
    leases = Leases()
    ex = executor(url, leases=leases)
    try:
        lane, merge = lane_job(9, "slow", 1), merge_job(9, ("slow",))
        running = asyncio.ensure_future(ex.run(lane))
        await asyncio.sleep(0.3)
        leases.expired.add(lane.key)
        await asyncio.wait_for(running, 10)  # ends here: the orchestrator runs the lane as its next attempt
        assert leases.taken_over == [lane]

        merging = asyncio.ensure_future(ex.run(merge))
        await asyncio.sleep(0.3)
        leases.expired.add(merge.key)
        await asyncio.sleep(0.5)
        assert not merging.done()  # sent again: it waits for the new task's end
        task.release.set()
        await asyncio.wait_for(merging, 20)
        assert leases.taken_over == [lane, merge]
        merges = [job for job in task.done if job["kind"] == "merge"]
        assert len(merges) == 2  # the first send (the stand-in finished it late) and the one after the take-over
    finally:
        await ex.close()
