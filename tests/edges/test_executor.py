"""The embedded executor: jobs as asyncio tasks, within the host's caps, cancellable per run."""

from __future__ import annotations

import asyncio

import pytest

from bot.edges.executor import Job, JobKind, integrate_job, lane_job, merge_job
from bot.edges.executor.embedded import EmbeddedExecutor

pytestmark = pytest.mark.anyio


class Gate:
    """A perform() whose jobs start, then wait until released."""

    def __init__(self) -> None:
        self.started: list[Job] = []
        self.released: dict[tuple[object, ...], asyncio.Event] = {}

    async def perform(self, job: Job) -> None:
        self.started.append(job)
        await self.released.setdefault(job.key, asyncio.Event()).wait()

    def release(self, job: Job) -> None:
        self.released.setdefault(job.key, asyncio.Event()).set()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_jobs_are_identified_by_their_fields_and_refuse_what_they_cannot_be():
    assert lane_job(1, "api", 2).key == lane_job(1, "api", 2).key != lane_job(1, "api", 3).key
    with pytest.raises(ValueError, match="names its unit and an attempt"):
        Job(JobKind.LANE, 1, unit_id="api", attempt=0)
    with pytest.raises(ValueError, match="names the lanes to merge"):
        merge_job(1, ())


async def test_no_more_lanes_run_at_once_than_the_hosts_cap_across_runs():
    gate = Gate()
    executor = EmbeddedExecutor(gate.perform, max_lanes=2, max_runs_per_repo=1)
    jobs = [lane_job(1, "a", 1), lane_job(2, "b", 1), lane_job(1, "c", 1)]
    for job in jobs:
        assert await executor.submit(job)
    await settle()
    assert gate.started == jobs[:2]
    assert len(executor.active(1)) == 2  # a runs, c waits for a slot: both are the run's
    gate.release(jobs[0])
    await settle()
    assert gate.started == jobs
    await executor.close()


async def test_the_same_job_is_not_started_twice_while_it_runs():
    gate = Gate()
    executor = EmbeddedExecutor(gate.perform, max_lanes=4, max_runs_per_repo=1)
    assert await executor.submit(lane_job(1, "a", 1))
    assert not await executor.submit(lane_job(1, "a", 1))
    await settle()
    assert len(gate.started) == 1
    await executor.close()


async def test_a_finished_job_moves_the_runs_generation_and_wakes_a_waiter():
    gate = Gate()
    executor = EmbeddedExecutor(gate.perform, max_lanes=4, max_runs_per_repo=1)
    job = lane_job(3, "a", 1)
    before = executor.generation(3)
    await executor.submit(job)
    waiter = asyncio.ensure_future(executor.wait(3, before, timeout=30))
    await settle()
    assert not waiter.done()
    gate.release(job)
    await asyncio.wait_for(waiter, 30)
    assert executor.generation(3) == before + 1
    await executor.wait(3, before, timeout=30)  # already past: returns at once


async def test_cancelling_a_run_stops_its_jobs_and_not_other_runs_and_run_returns_normally():
    gate = Gate()
    executor = EmbeddedExecutor(gate.perform, max_lanes=4, max_runs_per_repo=1)
    await executor.submit(lane_job(1, "a", 1))
    await executor.submit(lane_job(2, "b", 1))
    awaited = asyncio.ensure_future(executor.run(integrate_job(1)))
    await settle()
    await executor.cancel_run(1)
    await asyncio.wait_for(awaited, 30)
    assert executor.active(1) == () and len(executor.active(2)) == 1
    await executor.close()
    assert executor.active(2) == ()


async def test_a_failing_merge_or_integrate_job_raises_to_the_one_awaiting_it():
    async def perform(job: Job) -> None:
        raise RuntimeError("the remote refused the push")

    executor = EmbeddedExecutor(perform, max_lanes=1, max_runs_per_repo=1)
    with pytest.raises(RuntimeError, match="refused the push"):
        await executor.run(merge_job(1, ("a",)))


async def test_runs_of_one_repository_build_no_more_than_the_cap_at_once():
    executor = EmbeddedExecutor(Gate().perform, max_lanes=1, max_runs_per_repo=1)
    order: list[str] = []
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def build(name: str, repository: str) -> None:
        async with executor.run_slot(repository):
            order.append(f"{name} in")
            if name == "first":
                first_in.set()
                await release_first.wait()
            order.append(f"{name} out")

    first = asyncio.ensure_future(build("first", "o/r"))
    await first_in.wait()
    second = asyncio.ensure_future(build("second", "O/R"))  # GitHub names ignore case
    other = asyncio.ensure_future(build("other", "o/elsewhere"))
    await settle()
    assert order == ["first in", "other in", "other out"]
    release_first.set()
    await asyncio.gather(first, second, other)
    assert order[-2:] == ["second in", "second out"]


def test_caps_must_be_whole_numbers_of_at_least_one():
    with pytest.raises(ValueError, match="max_lanes must be a whole number of at least 1, got 0"):
        EmbeddedExecutor(Gate().perform, max_lanes=0, max_runs_per_repo=1)
