"""The Celery executor: lane, merge and integrate jobs go to `lanebot worker`s over a broker.

`lanebot serve` uses it when LANEBOT_BROKER_URL is set (Redis, `redis://127.0.0.1:6379/0`, or
RabbitMQ, `amqp://guest:guest@127.0.0.1:5672//`). A job travels as its ids only (the `Job`'s
fields, JSON), as one Celery task named `TASK_NAME` on the queue `QUEUE`; the worker reads
everything else from the database and the git remote, and writes its outcome back there.

How this side learns that a job ended: from Celery's result backend, the broker's own Redis for
a Redis broker and `rpc://` (results as messages back to this process) for RabbitMQ. One poller
looks at the states of the jobs sent and not yet ended, every `poll_s`; a ready one ends its job
here (`run` returns, `generation` grows, `wait` wakes), whichever host ran it. A result holds
nothing secret: `{"ok": true}`, or `{"ok": false, "error": <an exception's type name>}`; the
details stay in the worker's log.

Delivery: tasks are acknowledged late and rejected back to the queue when their worker process is
lost (`acks_late`, `reject_on_worker_lost`), and a worker takes one task per free process
(`worker_prefetch_multiplier=1`), so a queued lane waits for whichever worker frees up first.
A worker holds a lease on each job it does (bot.runner.leases) and renews it; when a whole host
dies, its lease runs out long before a broker would hand its task on (Redis waits for
`VISIBILITY_TIMEOUT_S`): the job waited for here is then taken over (`Leases.take_over`), a lane's
to run again as its next attempt, a merge or the integrate step sent again. A task a worker finds
another one doing (its lease held) answers `elsewhere`, and its end is waited for through the lease.

Cancelling (`cancel_run`) reaches the worker through the database: `/cancel` marks the run
cancelled before it calls `cancel_run`, and the worker's task, which looks at its run's state every
second, cancels the job's asyncio task, whose agent adapters kill the agent's process group as in
the embedded executor. `cancel_run` also revokes the run's tasks (a queued one is then dropped by the
worker that receives it) and waits until every one of them has ended. When the run is not cancelled
(`lanebot serve` itself is stopping), the jobs are left to finish on their workers: their outcomes
are in the database when lanebot starts again.

Caps: none in this process. The cap of lanes across all workers (LANEBOT_MAX_LANES) and of runs
building per repository (LANEBOT_MAX_RUNS_PER_REPO) are counted in the database by the
orchestrator before it starts anything (`reconcile`), so they hold for every host; each worker's
`--concurrency` caps what it runs at once.

Every call into Celery (sending, polling, revoking) goes through one thread of its own, so
Celery's connections, which are not safe to share between threads, are only ever used by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any, TypeVar

from celery import Celery
from celery.result import AsyncResult

from bot.edges.executor import Job, JobKind, Leases, LeaseState
from bot.edges.executor.tasks import JobTasks

log = logging.getLogger(__name__)

__all__ = [
    "QUEUE",
    "TASK_NAME",
    "CeleryExecutor",
    "JobFailed",
    "celery_app",
    "job_from_message",
    "job_message",
    "result_backend_for",
]

TASK_NAME = "lanebot.perform"
QUEUE = "lanebot"
POLL_S = 0.1  # how often the poller looks at the results of the jobs sent (each hop of a run waits for it)
INSTANCE_CHECK_S = 1.0  # how often the poller asks a Redis broker whether it restarted
LEASE_CHECK_S = 2.0  # how often a job waited for has its lease looked at
CANCEL_WAIT_S = 60.0  # the longest cancel_run waits for a cancelled run's jobs to end on their workers
# Redis hands an unacknowledged task to another worker after this long; a job must end before it
# (an agent session's own timeout is 30 minutes by default; leases in the database are to replace it).
VISIBILITY_TIMEOUT_S = 6 * 3600

T = TypeVar("T")
_SEND_AGAIN: dict[str, Any] = {"status": "SEND_AGAIN"}  # `_send_and_wait`: the task was lost with the broker

# The states after which a task does nothing more (celery.states.READY_STATES).
_SUCCESS, _FAILURE, _REVOKED = "SUCCESS", "FAILURE", "REVOKED"


class JobFailed(RuntimeError):
    """A job ended with an error on its worker; the worker's log has the details."""


def result_backend_for(broker_url: str) -> str:
    """Where results go: the broker's Redis for a Redis broker, else back over AMQP (`rpc://`)."""
    return broker_url if broker_url.lower().startswith(("redis://", "rediss://")) else "rpc://"


def celery_app(broker_url: str, *, main: str = "lanebot") -> Celery:
    """The Celery app both sides use: the broker, the result backend, late acknowledgement."""
    app = Celery(main, broker=broker_url, backend=result_backend_for(broker_url), set_as_current=False)
    app.conf.update(
        task_default_queue=QUEUE,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        result_expires=timedelta(days=1),
        result_extended=False,
        broker_connection_retry_on_startup=True,
        # A worker that cannot store a result keeps trying (the broker's Redis restarting, say).
        result_backend_always_retry=True,
        result_backend_max_retries=20,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        # Flower and `celery events` see the workers' tasks without -E.
        worker_send_task_events=True,
        task_send_sent_event=True,
    )
    return app


def job_message(job: Job) -> dict[str, Any]:
    """What a task carries: the job's fields, as JSON."""
    return {
        "kind": job.kind.value,
        "run_id": job.run_id,
        "unit_id": job.unit_id,
        "attempt": job.attempt,
        "units": list(job.units),
    }


def job_from_message(message: dict[str, Any]) -> Job:
    """The job a task carries (ValueError when it is not one)."""
    units = message.get("units") or ()
    if not isinstance(units, list | tuple) or not all(isinstance(unit, str) for unit in units):
        raise ValueError(f"a job's units are a list of unit ids, got {units!r}")
    run_id, attempt = message.get("run_id"), message.get("attempt", 0)
    if not isinstance(run_id, int) or not isinstance(attempt, int):
        raise ValueError(f"a job's run_id and attempt are whole numbers, got {message!r}")
    unit_id = message.get("unit_id")
    if unit_id is not None and not isinstance(unit_id, str):
        raise ValueError(f"a job's unit_id is a unit id, got {unit_id!r}")
    return Job(JobKind(str(message.get("kind"))), run_id, unit_id=unit_id, attempt=attempt, units=tuple(units))


class CeleryExecutor(JobTasks):
    """Sends jobs to `lanebot worker`s. `stopping(run_id)`: whether the run's jobs are to stop
    (the run is cancelled in the database), asked by `cancel_run`. `leases`: how a job whose
    worker died is noticed (its lease expires) and taken over."""

    local = False

    def __init__(
        self,
        broker_url: str,
        *,
        stopping: Callable[[int], Awaitable[bool]],
        leases: Leases,
        poll_s: float = POLL_S,
        lease_check_s: float = LEASE_CHECK_S,
        cancel_wait_s: float = CANCEL_WAIT_S,
        app: Celery | None = None,
    ) -> None:
        super().__init__()
        self._app = app if app is not None else celery_app(broker_url)
        self._stopping = stopping
        self._leases = leases
        self._poll_s = poll_s
        self._lease_check_s = lease_check_s
        self._cancel_wait_s = cancel_wait_s
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lanebot-celery")
        # task id -> (its job, its result, what the poller resolves with the result's meta)
        self._sent: dict[str, tuple[Job, AsyncResult, asyncio.Future[dict[str, Any]]]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._closed = False
        self._broker_down = False
        self._outages = 0  # times the broker came back after the poller lost it, or restarted
        self._redis_instance: str | None = None
        self._declared = 0  # the outage count when the queue was last declared by this process
        self._next_instance_check = 0.0

    def __repr__(self) -> str:
        return f"CeleryExecutor(jobs={len(self._tasks)}, sent={len(self._sent)})"

    # -- the Executor protocol ------------------------------------------------------------------

    async def submit(self, job: Job) -> bool:
        if self._closed:
            raise RuntimeError("the executor is closed")
        return await super().submit(job)

    async def cancel_run(self, run_id: int) -> None:
        entries = [(job, task) for job, task in self._tasks.values() if job.run_id == run_id]
        if not entries:
            return
        if not await self._stopping(run_id):
            # lanebot serve is stopping, not the run: its jobs go on on their workers.
            return
        sent = {job.key: task_id for task_id, (job, _, _) in self._sent.items() if job.run_id == run_id}
        for job, task in entries:
            if job.key not in sent:
                task.cancel()  # still waiting here for a lane slot: nothing was sent
        if sent:
            with contextlib.suppress(Exception):  # the workers look at the run's state anyway
                await self._call(self._app.control.revoke, list(sent.values()))
        _, late = await asyncio.wait([task for _, task in entries], timeout=self._cancel_wait_s)
        if late:
            log.warning("%d job(s) of cancelled run %d still run after %g s", len(late), run_id, self._cancel_wait_s)

    @contextlib.asynccontextmanager
    async def run_slot(self, repository: str) -> AsyncIterator[None]:
        """No slot in this process: the caps of runs per repository and of lanes across workers
        are the orchestrator's, counted in the database (bot.runner.orchestrator.reconcile), so
        that they hold across every `lanebot serve` and worker."""
        yield

    async def close(self) -> None:
        """Stop looking at results; the jobs sent go on on their workers."""
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        tasks = [task for _, task in self._tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._app.close)
        self._thread.shutdown(wait=False)

    # -- the jobs -----------------------------------------------------------------------------

    async def _do(self, job: Job) -> None:
        await self._remote(job)

    def _wake(self, run_id: int) -> None:
        """Every run's waiter wakes: the caps are shared by every run (counted in the database), so
        a run waiting for room may start lanes now."""
        for changed in self._changed.values():
            changed.set()

    async def _remote(self, job: Job) -> None:
        """Send the job and wait for its end. Its worker may die meanwhile: once its lease has
        expired, a lane's job ends here (the orchestrator runs the lane again as a new attempt) and
        a merge or the integrate step is sent again. A job another worker already does (sent twice,
        say after lanebot restarted) is waited for through its lease."""
        while True:
            meta = await self._send_and_wait(job)
            if meta is _SEND_AGAIN:
                continue
            if meta is None:  # its worker's lease expired: taken over
                if job.kind is JobKind.LANE:
                    return
                log.warning("%s: its worker is gone; sending it again", job.describe())
                continue
            outcome = meta.get("result")
            if isinstance(outcome, dict) and outcome.get("elsewhere"):
                if await self._wait_for_holder(job):
                    return
                continue
            break
        state = meta.get("status")
        if state == _REVOKED:
            log.info("%s was revoked", job.describe())
            return
        if state == _FAILURE or not (isinstance(outcome, dict) and outcome.get("ok")):
            error = outcome.get("error") if isinstance(outcome, dict) else type(outcome).__name__
            raise JobFailed(f"{job.describe()} failed on its worker ({error}); the worker's log has the details")

    async def _send_and_wait(self, job: Job) -> dict[str, Any] | None:
        """The task's result meta; None when its worker's lease expired first (taken over);
        `_SEND_AGAIN` when the broker went away with the task still queued."""
        task_id = f"lanebot-{job.kind.value}-{job.run_id}-{uuid.uuid4().hex}"
        done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        outages, claimed = self._outages, False
        if self._declared != outages:
            # A Redis that restarted lost the queue's binding too, and a task sent before a worker
            # declares it again would be dropped: declare it here first.
            await self._call(_declare_queue, self._app)
            self._declared = outages
        result = await self._call(
            self._app.send_task, TASK_NAME, kwargs={"job": job_message(job)}, task_id=task_id, queue=QUEUE
        )
        self._sent[task_id] = (job, result, done)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll(), name="lanebot-celery-results")
        try:
            while True:
                finished, _ = await asyncio.wait({done}, timeout=self._lease_check_s)
                if finished:
                    return done.result()
                state = await self._lease_state(job)
                if state is LeaseState.EXPIRED and await self._take_over(job):
                    return None
                if state is LeaseState.HELD:
                    claimed = True
                elif state is LeaseState.UNCLAIMED and claimed:
                    # Done and let go, though its result never reached us (a broker restarted meanwhile).
                    return {"status": _SUCCESS, "result": {"ok": True}}
                elif state is LeaseState.UNCLAIMED and self._outages != outages:
                    log.warning("%s: the broker went away while it was queued; sending it again", job.describe())
                    return _SEND_AGAIN
        finally:
            self._sent.pop(task_id, None)

    async def _wait_for_holder(self, job: Job) -> bool:
        """Another worker does the job: True once it let go (the job ended there), False once its
        lease expired and was taken over (the job is to be sent again)."""
        while True:
            if await self._lost(job):
                return False
            with contextlib.suppress(Exception):
                if await self._leases.state(job) is LeaseState.UNCLAIMED:
                    return True
            await asyncio.sleep(self._lease_check_s)

    async def _lost(self, job: Job) -> bool:
        return await self._lease_state(job) is LeaseState.EXPIRED and await self._take_over(job)

    async def _lease_state(self, job: Job) -> LeaseState | None:
        try:
            return await self._leases.state(job)
        except Exception:  # the database being away is no reason to give a job up
            log.warning("could not read the lease of %s", job.describe(), exc_info=True)
            return None

    async def _take_over(self, job: Job) -> bool:
        try:
            return await self._leases.take_over(job)
        except Exception:
            log.warning("could not take over %s", job.describe(), exc_info=True)
            return False

    async def _poll(self) -> None:
        while self._sent:
            pending = {task_id: result for task_id, (_, result, done) in self._sent.items() if not done.done()}
            try:
                states = await self._call(_ready_metas, pending)
                if time.monotonic() >= self._next_instance_check:
                    self._next_instance_check = time.monotonic() + INSTANCE_CHECK_S
                    self._note_broker(await self._call(_redis_instance, self._app))
            except Exception:
                if not self._broker_down:
                    log.warning("could not read the results of %d job(s); trying again", len(pending), exc_info=True)
                self._broker_down, states = True, {}
            else:
                if self._broker_down:  # back: what was queued when it went may be gone with it
                    self._broker_down, self._outages = False, self._outages + 1
            for task_id, meta in states.items():
                entry = self._sent.get(task_id)
                if entry is not None and not entry[2].done():
                    entry[2].set_result(meta)
            await asyncio.sleep(self._poll_s)

    def _note_broker(self, instance: str | None) -> None:
        """A Redis that restarted has a new run id, and kept nothing of what was queued on it."""
        if instance is not None and self._redis_instance not in (None, instance):
            self._outages += 1
        self._redis_instance = instance or self._redis_instance

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, lambda: function(*args, **kwargs))


def _declare_queue(app: Celery) -> None:
    """Declare lanebot's queue (and its binding) on the broker."""
    queue = app.amqp.queues[QUEUE]
    with app.connection_for_write() as connection:
        queue.bind(connection.default_channel).declare()


def _redis_instance(app: Celery) -> str | None:
    """The run id of the Redis that holds the results (and the queue), None for another backend."""
    client = getattr(app.backend, "client", None)
    if client is None or not hasattr(client, "info"):
        return None
    return str(client.info("server").get("run_id") or "") or None


def _ready_metas(results: dict[str, AsyncResult]) -> dict[str, dict[str, Any]]:
    """The metas (status, result) of the results that are ready, by task id."""
    ready = {}
    for task_id, result in results.items():
        state = result.state
        if state in (_SUCCESS, _FAILURE, _REVOKED):
            ready[task_id] = {"status": state, "result": result.result if state == _SUCCESS else None}
    return ready
