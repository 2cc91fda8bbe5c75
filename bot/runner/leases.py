"""Job leases as the orchestrator uses them: noticing a runner host that died, and taking its job
over (the store's side is bot.edges.store.leases; the worker's, bot.runner.worker).

A worker holds a lease on each job it does and renews it `RENEWALS_PER_TTL` times per
`LANEBOT_LEASE_TTL` (60 s by default). When a lease has run out, the host is taken for gone:

- a lane's attempt is lost, without consuming a retry (its session `lost`, the lane back to
  `pending`; it has no check run open: a lane reports one when an attempt ends), and the
  scheduler starts the lane again as the next attempt, on whichever worker takes it; should the
  old host come back, its next renewal fails and it stops the agent, and the lane's
  compare-and-set on its session keeps its late result out;
- a merge or the integrate step is sent again (bot.edges.executor.celery_executor): a merge picks
  up from the integration branch as pushed, which is the fence (a lane is merged once: a push that
  does not start from the head it read is refused), and integrate from the run's recorded steps.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from bot.edges.executor import Job, JobKind, LeaseState
from bot.edges.store import leases
from bot.edges.store import runs as store
from bot.edges.store.leases import job_key
from bot.edges.store.models import JobLease, utc_now
from bot.runner.context import GitHubContext
from bot.runner.runtime import db

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LEASE_TTL_S", "RENEWALS_PER_TTL", "DatabaseLeases", "lease_ttl", "take_over_expired"]

DEFAULT_LEASE_TTL_S = 60.0
RENEWALS_PER_TTL = 4


def lease_ttl(settings: Any) -> timedelta:
    """How long a lease lasts unrenewed (LANEBOT_LEASE_TTL)."""
    return timedelta(seconds=float(getattr(settings, "lease_ttl", DEFAULT_LEASE_TTL_S)))


class DatabaseLeases:
    """bot.edges.executor.celery_executor.Leases on the database, for one running app."""

    def __init__(self, context: GitHubContext) -> None:
        self.context = context

    async def state(self, job: Job) -> LeaseState:
        lease = await db(leases.get, self.context.engine, job_key(job.key))
        if lease is None or lease.released_at is not None:
            return LeaseState.UNCLAIMED
        return LeaseState.EXPIRED if lease.expires_at < utc_now() else LeaseState.HELD

    async def take_over(self, job: Job) -> bool:
        lease = await db(leases.get, self.context.engine, job_key(job.key))
        return lease is not None and await _take_over(self.context, lease, job.kind, job.unit_id)


async def take_over_expired(context: GitHubContext, run_id: int) -> bool:
    """Take over every job of the run whose lease expired (no one in this process waits for them,
    say after lanebot restarted); whether any was."""
    changed = False
    for lease in await db(leases.expired, context.engine, run_id):
        kind, _, unit_id, *_ = lease.job_key.split("|")
        changed |= await _take_over(context, lease, JobKind(kind), unit_id or None)
    return changed


async def _take_over(context: GitHubContext, lease: JobLease, kind: JobKind, unit_id: str | None) -> bool:
    engine = context.engine
    if not await db(leases.take_over, engine, lease.job_key, lease.holder):
        return False
    log.warning("run %d: %s's lease on %s ran out: taking the job over", lease.run_id, lease.holder, lease.job_key)
    await db(store.append_event, engine, lease.run_id, "taken_over", {"job": lease.job_key, "holder": lease.holder})
    if kind is JobKind.LANE and unit_id is not None:
        await _lose_lane_attempt(context, lease, unit_id)
    return True


async def _lose_lane_attempt(context: GitHubContext, lease: JobLease, unit_id: str) -> None:
    engine = context.engine
    lane = await db(store.get_lane, engine, lease.run_id, unit_id)
    if lane is None:
        return
    reason = f"its host ({lease.holder}) stopped renewing its lease"
    for session in await db(store.running_sessions, engine, lease.run_id):
        if session.kind == "lane" and session.lane_id == lane.id:
            await db(store.finish_session, engine, session.id, status="lost", counts_as_retry=False, failure=reason)
    await db(store.set_lane_state, engine, lane.id, "running", "pending")
