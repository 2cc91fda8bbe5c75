"""What both executors keep the same way: each job as an asyncio task of this process (the job
itself on the embedded executor, the wait for a worker's end of it on the Celery one), at most one
task per job, and a counter per run that grows each time one of its jobs ends, which the
orchestrator's drive loop waits on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

from bot.edges.executor import Job, JobKind

log = logging.getLogger(__name__)

__all__ = ["JobTasks"]


class JobTasks:
    """The Executor protocol's bookkeeping; a subclass says how a job is done (`_do`)."""

    def __init__(self) -> None:
        self._tasks: dict[tuple[object, ...], tuple[Job, asyncio.Task[None]]] = {}
        self._generations: defaultdict[int, int] = defaultdict(int)
        self._changed: defaultdict[int, asyncio.Event] = defaultdict(asyncio.Event)

    async def _do(self, job: Job) -> None:
        raise NotImplementedError

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
        try:
            await asyncio.shield(entry[1])
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller itself is being cancelled
            # The job was cancelled by cancel_run: its end is in the database, like any other end.

    def generation(self, run_id: int) -> int:
        return self._generations[run_id]

    async def wait(self, run_id: int, after: int, timeout: float) -> None:
        event = self._changed[run_id]
        event.clear()
        if self._generations[run_id] > after:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def active(self, run_id: int) -> tuple[Job, ...]:
        return tuple(job for job, task in self._tasks.values() if job.run_id == run_id and not task.done())

    async def _execute(self, job: Job) -> None:
        try:
            await self._do(job)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The job records what it can; this is the last line so a task never dies unseen.
            log.exception("%s failed", job.describe())
            if job.kind is JobKind.LANE:
                return
            raise
        finally:
            self._tasks.pop(job.key, None)
            self._generations[job.run_id] += 1
            self._wake(job.run_id)

    def _wake(self, run_id: int) -> None:
        """A job of `run_id` ended: its waiter wakes."""
        self._changed[run_id].set()
