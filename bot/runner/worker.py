"""A runner host's side of the Celery executor: the task that does one job, and its context.

`lanebot worker` (bot/cli/worker.py) starts Celery's worker with `worker_app(settings, name)`. Each
of its processes (`--concurrency` of them, Celery's prefork pool) keeps, for as long as it lives,
one asyncio loop and one context built from the environment as `lanebot serve` builds its own: the
same Settings, hence the same DATABASE_URL and App, and this host's own LANEBOT_WORKDIR (mirror cache,
worktrees, transcripts). The task (`TASK_NAME`, bot.edges.executor.celery_executor) turns its message
back into a `Job` and calls the orchestrator's `perform(context, job)` in that loop, exactly what the
embedded executor calls, so a lane, a merge or the integrate step does the same on either.

While a job runs, the task looks at its run's state every `CANCEL_POLL_S`: once `/cancel` has marked
the run cancelled, the job's asyncio task is cancelled, and the agent adapters kill the agent's
process group before the cancellation ends (what the embedded executor relies on). A job whose run
is already cancelled when it is taken off the queue is not started.

Every agent session this host starts records its `name` as the session's host (`--name`, default
the machine's host name), so the progress comment and `/status` can say which host ran which lane.

Tokens: in this increment a worker mints installation tokens itself, with the App's key from the
same settings as `lanebot serve`: a job needs the repository's contents and the API (check runs,
comments) for minutes to an hour, tokens are cached and renewed exactly as in `lanebot serve`, and
no token ever travels through the broker or the result backend. The price is that every runner host
holds the App's private key, and a host that is broken into can act as the App on every installation.
The alternative, for the maintainer to choose: `lanebot serve` mints a short-lived token scoped to
the job's one repository (and only the permissions a lane needs) per job and hands it over out of
band (never in the task's arguments or result, which the broker and Flower show: e.g. encrypted to
the worker's public key, or fetched once by the worker from `lanebot serve` over an authenticated
call), renewed by the worker through `lanebot serve` while the job runs; the key then stays on one
machine, at the cost of that channel and of `lanebot serve` being needed for a job to go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import Celery
from sqlalchemy.engine import Engine

from bot.edges.executor import Job
from bot.edges.executor.celery_executor import TASK_NAME, celery_app, job_from_message
from bot.edges.github.client import GitHubApp
from bot.edges.settings import Settings
from bot.edges.store import db as database
from bot.edges.store import leases
from bot.edges.store import runs as store
from bot.edges.store.leases import job_key
from bot.runner.context import BackgroundJobs
from bot.runner.leases import RENEWALS_PER_TTL, lease_ttl
from bot.runner.runtime import db
from bot.runner.sessions import host_name, name_this_host

log = logging.getLogger(__name__)

__all__ = ["CANCEL_POLL_S", "WorkerContext", "perform_job", "worker_app"]

CANCEL_POLL_S = 1.0  # how often a running job looks whether its run was cancelled


@dataclass
class WorkerContext:
    """The steps' `RunnerContext` on a runner host: no background jobs (`lanebot serve` has those)."""

    engine: Engine
    github: GitHubApp
    settings: Settings
    jobs: BackgroundJobs | None = None


@dataclass
class _Host:
    settings: Settings
    name: str


@dataclass
class _Process:
    pid: int
    loop: asyncio.AbstractEventLoop
    context: WorkerContext


_HOST: _Host | None = None
_PROCESS: _Process | None = None


def worker_app(settings: Settings, name: str) -> Celery:
    """The Celery app of a runner host named `name`, with lanebot's task registered."""
    global _HOST
    if not settings.broker_url:
        raise ValueError("LANEBOT_BROKER_URL is not set: a worker takes its jobs from that broker")
    _HOST = _Host(settings, name)
    name_this_host(name)
    app = celery_app(settings.broker_url)
    app.task(name=TASK_NAME, acks_late=True, reject_on_worker_lost=True, ignore_result=False)(perform_job)
    return app


def perform_job(job: dict[str, Any]) -> dict[str, Any]:
    """The task: do the job the message names, in this process's loop. What it returns is the
    result the serve side reads; nothing in it is secret (an error is named by its type only)."""
    parsed = job_from_message(job)
    process = _process()
    try:
        return process.loop.run_until_complete(_perform_watched(process.context, parsed))
    except Exception as error:
        log.exception("%s failed", parsed.describe())
        return {"ok": False, "error": type(error).__name__}


async def _perform_watched(context: WorkerContext, job: Job) -> dict[str, Any]:
    from bot.runner.orchestrator import perform

    if await _cancelled(context, job.run_id):
        log.info("not starting %s: its run is cancelled", job.describe())
        return {"ok": True, "cancelled": True}
    key, holder, ttl = job_key(job.key), _holder(), lease_ttl(context.settings)
    if not await db(leases.acquire, context.engine, key, job.run_id, holder, ttl):
        log.info("not starting %s: another host holds its lease", job.describe())
        return {"ok": True, "elsewhere": True}
    log.info("starting %s", job.describe())
    work = asyncio.create_task(perform(context, job), name=f"lanebot-{job.describe()}")
    renewed = time.monotonic()
    try:
        while not work.done():
            await asyncio.wait({work}, timeout=CANCEL_POLL_S)
            if work.done():
                break
            if await _cancelled(context, job.run_id):
                log.info("stopping %s: its run was cancelled", job.describe())
                return await _stop(work, {"ok": True, "cancelled": True})
            if time.monotonic() - renewed >= ttl.total_seconds() / RENEWALS_PER_TTL:
                if not await _renew(context, key, holder, ttl):
                    log.warning("stopping %s: its lease was taken over (this host was taken for gone)", job.describe())
                    return await _stop(work, {"ok": True, "superseded": True})
                renewed = time.monotonic()
        work.result()
    finally:
        with contextlib.suppress(Exception):
            await db(leases.release, context.engine, key, holder)
    log.info("%s ended", job.describe())
    return {"ok": True}


async def _stop(work: asyncio.Task[None], answer: dict[str, Any]) -> dict[str, Any]:
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    return answer


async def _renew(context: WorkerContext, key: str, holder: str, ttl: timedelta) -> bool:
    """Renew the lease; True also when the database could not be asked (the lease then runs out
    on its own if that lasts, and the next renewal finds it taken)."""
    try:
        return await db(leases.renew, context.engine, key, holder, ttl)
    except Exception:
        log.warning("could not renew the lease of %s", key, exc_info=True)
        return True


def _holder() -> str:
    """Who holds a lease: this host's name and process (a host runs `--concurrency` processes)."""
    return f"{host_name()}/{os.getpid()}"


async def _cancelled(context: WorkerContext, run_id: int) -> bool:
    try:
        run = await db(store.get_run, context.engine, run_id)
    except Exception:
        log.warning("could not read the state of run %d", run_id, exc_info=True)
        return False
    return run is not None and run.state == "cancelled"


def _process() -> _Process:
    """This process's loop and context, made on first use after the fork (and again in a child)."""
    global _PROCESS
    if _PROCESS is not None and _PROCESS.pid == os.getpid():
        return _PROCESS
    if _HOST is None:
        raise RuntimeError("worker_app() was not called in this process")
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    settings = _HOST.settings

    async def make() -> WorkerContext:
        return WorkerContext(
            engine=database.make_engine(settings.database_url), github=GitHubApp(settings), settings=settings
        )

    _PROCESS = _Process(os.getpid(), loop, loop.run_until_complete(make()))
    return _PROCESS
