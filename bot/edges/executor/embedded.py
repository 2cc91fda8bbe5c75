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
from collections import defaultdict
from collections.abc import AsyncIterator

from bot.edges.executor import Job, JobKind, Perform

log = logging.getLogger(__name__)

__all__ = ["EmbeddedExecutor"]


class EmbeddedExecutor:
    """Runs jobs in this process. `perform` does one job (the orchestrator's `perform`)."""

    local = True

    def __init__(self, perform: Perform, *, max_lanes: int, max_runs_per_repo: int) -> None:
        for name, value in (("max_lanes", max_lanes), ("max_runs_per_repo", max_runs_per_repo)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        self._perform = perform
        self._lane_slots = asyncio.Semaphore(max_lanes)
        self._max_runs_per_repo = max_runs_per_repo
        self._repo_slots: dict[str, asyncio.Semaphore] = {}
        self._tasks: dict[tuple[object, ...], tuple[Job, asyncio.Task[None]]] = {}
        self._generations: defaultdict[int, int] = defaultdict(int)
        self._changed: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)

    def __repr__(self) -> str:
        return f"EmbeddedExecutor(jobs={len(self._tasks)})"

    async def submit(self, job: Job) -> bool:
        if job.key in self._tasks:
            return False
        task = asyncio.create_task(self._execute(job), name=f"lanebot-{job.describe()}")
        self._tasks[job.key] = (job, task)
        return True

    async def run(self, job: Job) -> None:
        entry = self._tasks.get(job.key)
        if entry is None:
            await self.submit(job)
            entry = self._tasks[job.key]
        task = entry[1]
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller itself is being cancelled
            # The job was cancelled by cancel_run: its end is in the database, like any other end.

    def generation(self, run_id: int) -> int:
        return self._generations[run_id]

    async def wait(self, run_id: int, after: int, timeout: float) -> None:
        event = self._changed[run_id]
        while self._generations[run_id] <= after:
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except TimeoutError:
                return

    def active(self, run_id: int) -> tuple[Job, ...]:
        return tuple(job for job, task in self._tasks.values() if job.run_id == run_id and not task.done())

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

    async def _execute(self, job: Job) -> None:
        try:
            if job.kind is JobKind.LANE:
                async with self._lane_slots:
                    await self._perform(job)
            else:
                await self._perform(job)
        except asyncio.CancelledError:
            raise
        except Exception:
            # perform records what it can; this is the last line so a task never dies unseen.
            log.exception("%s failed", job.describe())
            if job.kind is JobKind.LANE:
                return
            raise
        finally:
            self._tasks.pop(job.key, None)
            self._generations[job.run_id] += 1
            self._changed[job.run_id].set()


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
