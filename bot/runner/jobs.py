"""Background work the dispatcher must not wait for: planning a run, building it, and the review
work on its pull request (fix lanes, lanebot's own review; bot/runner/review/queue.py).

A handler answers a command at once (a reaction, a transition) and hands the long work to `Jobs`,
which runs it as an asyncio task in this process. There is at most one task per (kind, run) at a
time; requests that arrive while that task runs are coalesced into one more pass after it (the
latest request's), so nothing asked for is lost and nothing runs twice at once. Every job reads
the run from the database before acting, so an extra pass is harmless.

The build belongs to `bot.runner.orchestrator` (`drive`, `cancel`, `retry`, `refresh_progress`), imported when first needed;
while that module does not exist, a build request records a `build_unavailable` run event
instead of pretending to run anything.

At start-up `resume()` picks up what a previous life left: runs in `planning` are planned again,
runs awaiting approval get their gate comment checked, running or integrating runs go to the
orchestrator, review requests left running are queued again and worked through, and runs that
ended in the last RELABEL_WINDOW get their labels and progress comment checked. `stop()`
cancels what is running; those runs stay as they are for the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

from anyio import to_thread

from bot.edges.store import runs
from bot.runner import plan as planning
from bot.runner.context import RunnerContext
from bot.runner.pull_update import run_update
from bot.runner.review import queue as review_queue
from bot.runner.review.fix import run_fix
from bot.runner.review.own import self_review

log = logging.getLogger(__name__)

__all__ = ["BUILD_UNAVAILABLE", "ORCHESTRATOR_MODULE", "Jobs", "JobsOwnContext", "Orchestrator"]

ORCHESTRATOR_MODULE = "bot.runner.orchestrator"
BUILD_UNAVAILABLE = "build_unavailable"  # the run event written while there is no orchestrator
JOB_FAILED = "job_failed"
# How far back start-up shows finished runs' states on their issues again (see resume).
RELABEL_WINDOW = timedelta(hours=6)

# What does a review request of each kind: the one table of review steps (bot.runner.review.queue
# takes it as an argument, so that the steps, which use the queue, are not imported by it).
REVIEW_STEPS: dict[str, review_queue.ReviewStep] = {
    "fix": run_fix,
    "ci": run_fix,
    "self": self_review,
    "update": run_update,
}

JobKey = tuple[str, int]
Job = Callable[[], Awaitable[None]]


class JobsOwnContext(RunnerContext, Protocol):
    """A `RunnerContext` that is a dataclass (`HandlerContext`), so `Jobs` can copy it with `jobs` set."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


C = TypeVar("C", bound=JobsOwnContext)


class Orchestrator(Protocol):
    """What `Jobs` asks of the orchestrator (bot.runner.orchestrator, or a test's stand-in)."""

    async def drive(self, context: RunnerContext, run_id: int) -> str: ...

    async def cancel(self, context: RunnerContext, run_id: int) -> str: ...

    async def retry(self, context: RunnerContext, run_id: int, unit: str | None = None) -> str: ...

    async def refresh_progress(self, context: RunnerContext, run_id: int) -> None: ...


class Jobs(Generic[C]):
    """The background tasks of one running app. `context` is a `HandlerContext`; `self.context`
    is the same with `jobs` set to this object, for handlers and jobs to share.

    `orchestrator` is a module name imported on first use, or an object with the orchestrator's
    functions (`drive`, `cancel`, `retry`).
    """

    def __init__(self, context: C, *, orchestrator: str | Orchestrator = ORCHESTRATOR_MODULE) -> None:
        self.context: C = dataclasses.replace(context, jobs=self)
        self.orchestrator = orchestrator
        self._tasks: dict[JobKey, asyncio.Task[None]] = {}
        self._again: dict[JobKey, Job] = {}  # the latest request that came while its key's task ran
        self._issue_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._stopping = False

    # ----------------------------------------------------------------------- requests

    def plan(self, run_id: int) -> None:
        """Plan the run in the background (nothing happens unless it is in `planning`)."""
        self._schedule(("plan", run_id), lambda: planning.plan_run(self.context, run_id))

    def build(self, run_id: int) -> None:
        """Hand the run to the orchestrator in the background."""
        self._schedule(("build", run_id), lambda: self._orchestrate(run_id, "drive"))

    def publish_gate(self, run_id: int) -> None:
        """Make sure the gate comment of the run's latest plan is posted (after a restart)."""
        self._schedule(("gate", run_id), lambda: planning.publish_gate(self.context, run_id))

    def retry(self, run_id: int, unit: str | None) -> None:
        """Ask the orchestrator to retry a blocked run's lane `unit` (None: every failed lane)."""
        self._schedule(("build", run_id), lambda: self._orchestrate(run_id, "retry", unit))

    def review(self, run_id: int) -> None:
        """Work through the review requests queued on the run's pull request (bot.runner.review.queue)."""
        self._schedule(("review", run_id), lambda: review_queue.work(self.context, run_id, REVIEW_STEPS))

    async def stop_review(self, run_id: int) -> None:
        """Stop the run's review work now (its pull request closed); queued requests are the caller's."""
        self._again.pop(("review", run_id), None)
        task = self._tasks.get(("review", run_id))
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.wait({task})

    async def cancel(self, run_id: int, *, building: bool) -> None:
        """Stop the run's work: its planning task, and (when it was building) the orchestrator's."""
        task = self._tasks.get(("plan", run_id))
        if task is not None:
            self._again.pop(("plan", run_id), None)
            task.cancel()
            await asyncio.wait({task})  # unlike `await task`, never mistakes its end for our own cancellation
        if building:
            await self._orchestrate(run_id, "cancel")

    def issue_lock(self, repository: str, issue_number: int) -> asyncio.Lock:
        """The lock that serialises changes to one issue's labels."""
        return self._issue_locks.setdefault((repository.lower(), issue_number), asyncio.Lock())

    # ----------------------------------------------------------------------- life cycle

    async def resume(self) -> None:
        """Pick up the runs a previous life of the app left unfinished."""
        self._stopping = False
        for run in await to_thread.run_sync(runs.unfinished_runs, self.context.engine):
            assert run.id is not None
            if run.state == "planning":
                self.plan(run.id)
            elif run.state == "awaiting_approval":
                # Killed after the gate's state was written and before its label followed.
                self.publish_gate(run.id)
                self._schedule(("labels", run.id), self._relabel(run.repository, run.issue_number))
            elif run.state in ("running", "integrating"):
                self.build(run.id)
        for run_id in await review_queue.resume(self.context):
            self.review(run_id)
        # A run that ended just before a crash may have ended before its labels and its progress
        # comment followed (the state is written first): show each recent one's state again.
        # Idempotent: a read of each when right.
        since = datetime.now(UTC) - RELABEL_WINDOW
        for run in await to_thread.run_sync(runs.recently_finished_runs, self.context.engine, since):
            assert run.id is not None
            self._schedule(("labels", run.id), self._show_end(run.id, run.repository, run.issue_number))

    def _show_end(self, run_id: int, repository: str, issue_number: int) -> Callable[[], Awaitable[None]]:
        async def show() -> None:
            orchestrator = self._load_orchestrator()
            if orchestrator is not None:
                await orchestrator.refresh_progress(self.context, run_id)
            await planning.follow_labels(self.context, repository, issue_number)

        return show

    def _relabel(self, repository: str, issue_number: int) -> Callable[[], Awaitable[None]]:
        return lambda: planning.follow_labels(self.context, repository, issue_number)

    async def stop(self) -> None:
        """Cancel every running job and wait for them; their runs stay for the next start."""
        self._stopping = True
        self._again.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self) -> None:
        """Return once no job is running (jobs started meanwhile are waited for too)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    def running(self) -> list[JobKey]:
        """The (kind, run id) of every job running now."""
        return [key for key, task in self._tasks.items() if not task.done()]

    # ----------------------------------------------------------------------- internals

    def _schedule(self, key: JobKey, job: Job) -> None:
        if self._stopping:
            log.warning("not starting the %s job of run %d: lanebot is stopping; it resumes at the next start", *key)
            return
        if key in self._tasks:
            self._again[key] = job
            return
        self._tasks[key] = asyncio.create_task(self._run(key, job), name=f"lanebot-{key[0]}-{key[1]}")

    async def _run(self, key: JobKey, job: Job | None) -> None:
        try:
            while job is not None and not self._stopping:
                await self._guarded(key, job)
                job = self._again.pop(key, None)
        finally:
            self._tasks.pop(key, None)

    async def _guarded(self, key: JobKey, job: Job) -> None:
        kind, run_id = key
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.exception("%s job of run %d failed", kind, run_id)
            detail = f"{type(error).__name__}: {error}"[:2_000]
            with contextlib.suppress(Exception):
                await to_thread.run_sync(
                    runs.append_event, self.context.engine, run_id, JOB_FAILED, {"job": kind, "error": detail}
                )

    async def _orchestrate(self, run_id: int, function: str, *args: str | None) -> None:
        orchestrator = self._load_orchestrator()
        if orchestrator is None:
            message = (
                f"build not available: {ORCHESTRATOR_MODULE} is not installed, so `{function}` was not run;"
                " the run stays as it is until an orchestrator picks it up"
            )
            log.warning("run %d: %s", run_id, message)
            await to_thread.run_sync(
                runs.append_event,
                self.context.engine,
                run_id,
                BUILD_UNAVAILABLE,
                {"wanted": function, "message": message},
            )
            return
        await getattr(orchestrator, function)(self.context, run_id, *args)

    def _load_orchestrator(self) -> Orchestrator | None:
        if not isinstance(self.orchestrator, str):
            return self.orchestrator
        try:
            return cast(Orchestrator, importlib.import_module(self.orchestrator))  # a module has no static type
        except ModuleNotFoundError as error:
            if error.name != self.orchestrator:
                raise  # the orchestrator exists but something it imports does not: a real error
            return None
