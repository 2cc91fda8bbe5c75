"""The embedded executor: jobs run as asyncio tasks inside `lanebot serve`.

Caps, as DESIGN.md sets them: at most `max_lanes` lane jobs run at once across every run of this
process (LANEBOT_MAX_LANES; further lane jobs wait for a slot), and at most `max_runs_per_repo`
runs of one repository build at once (LANEBOT_MAX_RUNS_PER_REPO, through `run_slot`). The cap of
lanes per run (`build.max_lanes`) is the scheduler's: it never starts more than that.

Cancelling a job cancels its task; the agent adapters then stop the agent's whole process group
before the cancellation finishes, so nothing the job started outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from bot.edges.executor import Job, JobKind, Perform
from bot.edges.executor.tasks import JobTasks

log = logging.getLogger(__name__)

__all__ = ["EmbeddedExecutor"]


class EmbeddedExecutor(JobTasks):
    """Runs jobs in this process. `perform` does one job (the orchestrator's `perform`)."""

    local = True

    def __init__(self, perform: Perform, *, max_lanes: int, max_runs_per_repo: int) -> None:
        for name, value in (("max_lanes", max_lanes), ("max_runs_per_repo", max_runs_per_repo)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        super().__init__()
        self._perform = perform
        self._lane_slots = asyncio.Semaphore(max_lanes)
        self._max_runs_per_repo = max_runs_per_repo
        self._repo_slots: dict[str, asyncio.Semaphore] = {}

    def __repr__(self) -> str:
        return f"EmbeddedExecutor(jobs={len(self._tasks)})"

    async def cancel_run(self, run_id: int) -> None:
        tasks = [task for job, task in self._tasks.values() if job.run_id == run_id]
        await _cancel_all(tasks)

    @contextlib.asynccontextmanager
    async def run_slot(self, repository: str) -> AsyncIterator[None]:
        slot = self._repo_slots.setdefault(repository.lower(), asyncio.Semaphore(self._max_runs_per_repo))
        async with slot:
            yield

    async def close(self) -> None:
        await _cancel_all([task for _, task in self._tasks.values()])

    async def _do(self, job: Job) -> None:
        if job.kind is JobKind.LANE:
            async with self._lane_slots:
                await self._perform(job)
        else:
            await self._perform(job)


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
