"""Webhook deliveries: stored before GitHub gets its answer, processed afterwards in order.

`record_many` sits in the request path of the webhook intake: the intake's writer
(bot/web/intake.py) hands it every delivery waiting, and it INSERTs them in one transaction with
one commit, so the batch shares one fsync. `record` does the same for one delivery. A
redelivery (the same X-GitHub-Delivery) is a no-op that reports False. The dispatcher is the
only consumer: it takes `claim_pending` rows in `seq` order and records what each came to,
processed or failed, a batch of them at a time (`finish_many`, one commit), so rows still pending
after a crash are simply taken again on start-up.

On SQLite the writes here (the intake's INSERT, the dispatcher's UPDATE) take turns on a lock
in this process: SQLite admits one writer at a time and makes the others retry with sleeps of
up to 100 ms (its busy handler), which under load put whole seconds on the intake's slowest
answers (bench/intake.py; docs/benchmarks.md). Another process still waits on the busy timeout.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, or_, text, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.dml import Insert
from sqlmodel import col, select

from bot.edges.store.db import SQLITE_BUSY_TIMEOUT_MS, insert_ignoring_duplicates, session
from bot.edges.store.models import Delivery, utc_now

_DELIVERIES = Delivery.__table__  # type: ignore[attr-defined]
_RECORD_STATEMENTS: dict[str, Insert] = {}
_SQLITE_WRITE_LOCKS: dict[str, threading.Lock] = {}


@dataclass(frozen=True)
class NewDelivery:
    """A delivery to store: what the intake read from the request and its payload."""

    delivery_id: str
    event: str
    action: str | None
    installation_id: int | None
    repository: str | None
    body: bytes
    received_at: datetime | None = None  # None: now


def record(
    engine: Engine,
    *,
    delivery_id: str,
    event: str,
    action: str | None,
    installation_id: int | None,
    repository: str | None,
    body: bytes,
    received_at: datetime | None = None,
) -> bool:
    """Store a delivery as pending; True if it is new, False if that id was already stored."""
    delivery = NewDelivery(delivery_id, event, action, installation_id, repository, body, received_at)
    [is_new] = record_many(engine, [delivery])
    return is_new


def record_many(engine: Engine, batch: Sequence[NewDelivery], *, lock_timeout: float | None = None) -> list[bool]:
    """Store deliveries as pending in one transaction (one commit), INSERTed in the order given.

    For each delivery, in order: True if it is new, False if its id was already stored, by an
    earlier delivery of `batch` too. If any INSERT fails, nothing of the batch is stored and the
    error is raised. `lock_timeout` (seconds) bounds how long the INSERT waits for another
    writer's lock (SQLite's busy timeout, PostgreSQL's lock_timeout); past it the database
    raises, and `is_lock_timeout` says so. None: the engine's own wait (30 s on SQLite).
    """
    rows = [_pending_row(delivery) for delivery in batch]
    if not rows:
        return []
    # One executemany: SQLAlchemy sends the rows as one multi-row INSERT, whose rows the database
    # inserts in the order listed (SQLite and PostgreSQL alike), so `seq` keeps the arrival order.
    with _one_writer(engine, lock_timeout), engine.begin() as connection, _lock_wait(connection, lock_timeout):
        inserted = set(connection.execute(_record_statement(engine), rows).scalars())
    return _first_copies_inserted([row["delivery_id"] for row in rows], inserted)


def _first_copies_inserted(delivery_ids: list[str], inserted: set[str]) -> list[bool]:
    """For each id in order: True only for the first copy of an id the INSERT stored."""
    seen: set[str] = set()
    answers = []
    for delivery_id in delivery_ids:
        answers.append(delivery_id in inserted and delivery_id not in seen)
        seen.add(delivery_id)
    return answers


def _pending_row(delivery: NewDelivery) -> dict[str, Any]:
    if not delivery.delivery_id:
        raise ValueError("a delivery needs its X-GitHub-Delivery id; got an empty one")
    return {
        "delivery_id": delivery.delivery_id,
        "event": delivery.event,
        "action": delivery.action,
        "installation_id": delivery.installation_id,
        "repository": delivery.repository,
        "body": delivery.body,
        "received_at": delivery.received_at or utc_now(),
        "status": "pending",
    }


def _record_statement(engine: Engine) -> Insert:
    """The INSERT `record_many` runs, built once per dialect: the values travel as parameters.

    Building it per call with `.values(...)` (and deriving its cache key from the values)
    cost as much CPU as the INSERT and its commit together (bench/intake.py measured it).
    """
    dialect = engine.dialect.name
    statement = _RECORD_STATEMENTS.get(dialect)
    if statement is None:
        # RETURNING, not rowcount: drivers disagree on rowcount for INSERT ... ON CONFLICT, and
        # only the rows inserted come back, so the ids say which of a batch were new.
        statement = insert_ignoring_duplicates(engine, _DELIVERIES, ["delivery_id"]).returning(
            _DELIVERIES.c.delivery_id
        )
        _RECORD_STATEMENTS[dialect] = statement
    return statement


def claim_pending(
    engine: Engine,
    limit: int,
    *,
    exclude: frozenset[int] = frozenset(),
    exclude_installations: frozenset[int | None] = frozenset(),
) -> list[Delivery]:
    """The oldest `limit` deliveries not yet processed, in arrival (`seq`) order, leaving out the
    seqs in `exclude` (those the dispatcher has in hand) and the installations in
    `exclude_installations` (None: deliveries without one)."""
    _require_positive(limit)
    query = select(Delivery).where(Delivery.status == "pending")
    if exclude:
        query = query.where(col(Delivery.seq).not_in(sorted(exclude)))
    installation = col(Delivery.installation_id)
    if None in exclude_installations:
        query = query.where(installation.is_not(None))
    if ids := sorted(each for each in exclude_installations if each is not None):
        query = query.where(or_(installation.is_(None), installation.not_in(ids)))
    query = query.order_by(col(Delivery.seq)).limit(limit)
    with session(engine) as db:
        return list(db.exec(query).all())


@dataclass(frozen=True)
class Outcome:
    """What handling a stored delivery came to: processed (`error` None), or failed with `error`."""

    seq: int
    error: str | None = None


def mark_processed(engine: Engine, seq: int, *, now: datetime | None = None) -> None:
    """The delivery's handlers all ran."""
    finish_many(engine, [Outcome(seq)], now=now)


def mark_failed(engine: Engine, seq: int, error: str, *, now: datetime | None = None) -> None:
    """A handler raised; `error` says what went wrong (the body stays stored for a replay)."""
    finish_many(engine, [Outcome(seq, error)], now=now)


def finish_many(engine: Engine, outcomes: Sequence[Outcome], *, now: datetime | None = None) -> None:
    """Record each outcome in one transaction (one commit): the processed deliveries with one
    UPDATE, each failed one with its own error.

    If a seq is not stored, nothing is recorded and LookupError names the missing seqs.
    """
    seqs = [outcome.seq for outcome in outcomes]
    if len(set(seqs)) != len(seqs):
        raise ValueError(f"each delivery has one outcome; seqs repeat in {seqs}")
    processed = [outcome.seq for outcome in outcomes if outcome.error is None]
    failed = [outcome for outcome in outcomes if outcome.error is not None]
    finished_at = now or utc_now()
    with _one_writer(engine), engine.begin() as connection:
        updated = 0
        if processed:
            updated += connection.execute(_MARK_PROCESSED, {"seqs": processed, "finished_at": finished_at}).rowcount
        for outcome in failed:
            parameters = {"target": outcome.seq, "error": outcome.error, "finished_at": finished_at}
            updated += connection.execute(_MARK_FAILED, parameters).rowcount
        if updated != len(seqs):
            stored = set(connection.execute(select(_DELIVERIES.c.seq).where(_DELIVERIES.c.seq.in_(seqs))).scalars())
            missing = ", ".join(str(seq) for seq in seqs if seq not in stored)
            raise LookupError(f"no delivery with seq {missing} is stored; no outcome of the batch was recorded")


# Built once: a batch's seqs travel as one expanding parameter, so the statement's compiled form is cached.
_MARK_PROCESSED = (
    update(_DELIVERIES)
    .where(_DELIVERIES.c.seq.in_(bindparam("seqs", expanding=True)))
    .values(status="processed", error=None, processed_at=bindparam("finished_at"))
)
_MARK_FAILED = (
    update(_DELIVERIES)
    .where(_DELIVERIES.c.seq == bindparam("target"))
    .values(status="failed", error=bindparam("error"), processed_at=bindparam("finished_at"))
)


class LockTimeout(Exception):
    """This process's other writer held the database longer than the caller would wait."""


@contextmanager
def _one_writer(engine: Engine, timeout: float | None = None) -> Iterator[None]:
    """On SQLite, hold this process's lock for the database file while writing (waiting at most
    `timeout` seconds for it; None: as long as it takes); elsewhere nothing."""
    if engine.dialect.name != "sqlite":
        yield
        return
    lock = _SQLITE_WRITE_LOCKS.setdefault(str(engine.url), threading.Lock())
    if not lock.acquire(timeout=-1 if timeout is None else timeout):
        raise LockTimeout(f"another writer of this process held the database for {timeout:g} s")
    try:
        yield
    finally:
        lock.release()


@contextmanager
def _lock_wait(connection: Connection, seconds: float | None) -> Iterator[None]:
    """Within the block, wait at most `seconds` for another writer's lock (None: the default wait)."""
    if seconds is None:
        yield
        return
    milliseconds = max(int(seconds * 1000), 1)
    if connection.dialect.name != "sqlite":
        connection.execute(text(f"SET LOCAL lock_timeout = {milliseconds}"))  # undone at the transaction's end
        yield
        return
    connection.exec_driver_sql(f"PRAGMA busy_timeout={milliseconds}")
    try:
        yield
    finally:
        connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def is_lock_timeout(error: BaseException) -> bool:
    """Whether `error` is the database giving up waiting for another writer's lock."""
    cause = getattr(error, "orig", None) or error
    if isinstance(cause, LockTimeout):
        return True
    if isinstance(cause, sqlite3.OperationalError):
        return "locked" in str(cause) or "busy" in str(cause)
    return getattr(cause, "sqlstate", None) == "55P03"  # PostgreSQL's lock_not_available


def probe_write(engine: Engine, *, lock_timeout: float) -> None:
    """Write to the database and commit, changing nothing: raises if it cannot be written now
    (read-only, disk full, locked for longer than `lock_timeout` seconds). Cheap: one row."""
    with _one_writer(engine, lock_timeout), engine.begin() as connection, _lock_wait(connection, lock_timeout):
        connection.execute(text("UPDATE alembic_version SET version_num = version_num"))


def waiting_count(engine: Engine) -> int:
    """How many stored deliveries have not been processed yet."""
    query = select(func.count()).select_from(Delivery).where(Delivery.status == "pending")
    with session(engine) as db:
        return db.exec(query).one()


def known_ids(engine: Engine, since: datetime) -> set[str]:
    """The delivery ids received at or after `since` (an aware datetime)."""
    query = select(Delivery.delivery_id).where(Delivery.received_at >= since)
    with session(engine) as db:
        return set(db.exec(query).all())


def list_recent(engine: Engine, limit: int) -> list[Delivery]:
    """The `limit` most recently received deliveries, newest first."""
    _require_positive(limit)
    query = select(Delivery).order_by(col(Delivery.seq).desc()).limit(limit)
    with session(engine) as db:
        return list(db.exec(query).all())


def _require_positive(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
