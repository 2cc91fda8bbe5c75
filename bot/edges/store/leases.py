"""Job leases: a runner host's claim on one job of a run, renewed while the job runs.

The Celery executor's workers (bot.runner.worker) `acquire` a job's lease before doing it, `renew`
it every few seconds and `release` it at the end. A host that dies stops renewing: once the lease
has `expired`, `lanebot serve` takes the job over (bot.runner.orchestrator: a lane's attempt is
lost without consuming a retry and runs again; a merge or the integrate step is sent again), and
the host, should it come back, finds its lease gone at its next `renew` and stops the job.

Every change is a compare-and-set on one row, so two hosts never hold one job at once: `acquire`
takes a lease that is free (none, or released) and nothing else; `renew` and `release`
act only for the holder. Keys are `Job.key` written as text (`job_key`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, select, update
from sqlalchemy.engine import Engine

from bot.edges.store.db import insert_ignoring_duplicates
from bot.edges.store.models import JobLease, utc_now

__all__ = ["acquire", "all_of", "expired", "get", "job_key", "release", "renew", "take_over"]

_LEASES = JobLease.__table__  # type: ignore[attr-defined]


def job_key(key: tuple[object, ...]) -> str:
    """A job's key (`Job.key`) as the text the table keeps."""
    return "|".join(
        "" if part is None else ",".join(map(str, part)) if isinstance(part, tuple) else str(part) for part in key
    )


def acquire(engine: Engine, key: str, run_id: int, holder: str, ttl: timedelta, *, now: datetime | None = None) -> bool:
    """Take the job's lease for `holder` until `now + ttl`: True when it was free (none yet, or
    released), False when another host holds it. A lease that ran out is not free: it is
    `lanebot serve`'s to take over (`take_over`), which decides what becomes of the job (a lane's
    attempt is lost and the lane runs as its next attempt), not a worker's that got the task again."""
    now = now or utc_now()
    values = dict(holder=holder, acquired_at=now, expires_at=now + ttl, released_at=None)
    with engine.begin() as connection:
        # RETURNING, not the row count: psycopg reports -1 for an INSERT that ON CONFLICT skipped.
        statement = insert_ignoring_duplicates(engine, _LEASES, ["job_key"]).values(
            job_key=key, run_id=run_id, **values
        )
        if connection.execute(statement.returning(_LEASES.c.job_key)).first() is not None:
            return True
        free = _LEASES.c.released_at.is_not(None)
        return connection.execute(update(_LEASES).where(_LEASES.c.job_key == key, free).values(**values)).rowcount == 1


def renew(engine: Engine, key: str, holder: str, ttl: timedelta, *, now: datetime | None = None) -> bool:
    """Extend the holder's lease; False when it is not the holder's any more (taken over)."""
    now = now or utc_now()
    statement = (
        update(_LEASES)
        .where(_LEASES.c.job_key == key, _LEASES.c.holder == holder, _LEASES.c.released_at.is_(None))
        .values(expires_at=now + ttl)
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount == 1


def release(engine: Engine, key: str, holder: str, *, now: datetime | None = None) -> bool:
    """The holder's job ended: its lease is free. False when it was not the holder's."""
    statement = (
        update(_LEASES)
        .where(_LEASES.c.job_key == key, _LEASES.c.holder == holder, _LEASES.c.released_at.is_(None))
        .values(released_at=now or utc_now())
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount == 1


def expired(engine: Engine, run_id: int, *, now: datetime | None = None) -> list[JobLease]:
    """The run's leases whose holder stopped renewing them before they ran out (not released)."""
    now = now or utc_now()
    query = select(_LEASES).where(
        and_(_LEASES.c.run_id == run_id, _LEASES.c.released_at.is_(None), _LEASES.c.expires_at < now)
    )
    with engine.connect() as connection:
        return [JobLease(**row._mapping) for row in connection.execute(query)]


def take_over(engine: Engine, key: str, holder: str, *, now: datetime | None = None) -> bool:
    """End an expired lease of `holder` (its host is gone): True for the one caller that did."""
    now = now or utc_now()
    statement = (
        update(_LEASES)
        .where(
            _LEASES.c.job_key == key,
            _LEASES.c.holder == holder,
            _LEASES.c.released_at.is_(None),
            _LEASES.c.expires_at < now,
        )
        .values(released_at=now)
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount == 1


def get(engine: Engine, key: str) -> JobLease | None:
    """The job's lease, if one was ever taken."""
    with engine.connect() as connection:
        row = connection.execute(select(_LEASES).where(_LEASES.c.job_key == key)).one_or_none()
    return JobLease(**row._mapping) if row is not None else None


def all_of(engine: Engine, run_id: int) -> list[JobLease]:
    """Every lease the run's jobs took, held or let go."""
    with engine.connect() as connection:
        return [
            JobLease(**row._mapping) for row in connection.execute(select(_LEASES).where(_LEASES.c.run_id == run_id))
        ]
