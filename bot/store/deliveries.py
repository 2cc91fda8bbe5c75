"""Webhook deliveries: stored before GitHub gets its answer, processed afterwards in order.

`record` sits in the request path of the webhook intake, so it is one INSERT and nothing
else; a redelivery (the same X-GitHub-Delivery) is a no-op that returns False. The dispatcher
is the only consumer: it takes `claim_pending` rows in `seq` order and marks each processed or
failed, so rows still pending after a crash are simply taken again on start-up.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, update
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from bot.store.db import insert_ignoring_duplicates, session
from bot.store.models import Delivery, utc_now

_DELIVERIES = Delivery.__table__  # type: ignore[attr-defined]


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
    if not delivery_id:
        raise ValueError("a delivery needs its X-GitHub-Delivery id; got an empty one")
    statement = insert_ignoring_duplicates(engine, _DELIVERIES, ["delivery_id"]).values(
        delivery_id=delivery_id,
        event=event,
        action=action,
        installation_id=installation_id,
        repository=repository,
        body=body,
        received_at=received_at or utc_now(),
        status="pending",
    ).returning(_DELIVERIES.c.seq)
    # RETURNING, not rowcount: drivers disagree on rowcount for INSERT ... ON CONFLICT.
    with engine.begin() as connection:
        return connection.execute(statement).first() is not None


def claim_pending(engine: Engine, limit: int) -> list[Delivery]:
    """The oldest `limit` deliveries not yet processed, in arrival (`seq`) order."""
    _require_positive(limit)
    query = select(Delivery).where(Delivery.status == "pending").order_by(col(Delivery.seq)).limit(limit)
    with session(engine) as db:
        return list(db.exec(query).all())


def mark_processed(engine: Engine, seq: int, *, now: datetime | None = None) -> None:
    """The delivery's handlers all ran."""
    _finish(engine, seq, status="processed", error=None, now=now)


def mark_failed(engine: Engine, seq: int, error: str, *, now: datetime | None = None) -> None:
    """A handler raised; `error` says what went wrong (the body stays stored for a replay)."""
    _finish(engine, seq, status="failed", error=error, now=now)


def _finish(engine: Engine, seq: int, *, status: str, error: str | None, now: datetime | None) -> None:
    statement = (
        update(_DELIVERIES)
        .where(_DELIVERIES.c.seq == seq)
        .values(status=status, error=error, processed_at=now or utc_now())
    )
    with engine.begin() as connection:
        if connection.execute(statement).rowcount != 1:
            raise LookupError(f"no delivery with seq {seq} is stored")


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
