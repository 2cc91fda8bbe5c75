"""Approver pins: the GitHub user id each login of a `gate.approvers` list first resolved to.

bot.edges.github.permissions resolves a listed login once (`GET /users/{login}`) and pins the id
it got, so that a login renamed and registered again by someone else keeps standing for the
account it first named, after a restart too. `DatabasePins` is the `PinStore` it takes, on the
`approver_pins` table. Logins are kept in lower case (GitHub compares them without case).

`pin` inserts with ON CONFLICT DO NOTHING and reads the row back, so when two processes resolve a
login at once the first pin wins and both use it. Nothing here removes a pin: a maintainer does,
when the account behind a listed login really changed (see bot.edges.github.permissions):
`DELETE FROM approver_pins WHERE login = '<login, lower case>';`
"""

from __future__ import annotations

from datetime import datetime

from anyio import to_thread
from sqlalchemy import select
from sqlalchemy.engine import Engine

from bot.edges.store.db import insert_ignoring_duplicates
from bot.edges.store.models import ApproverPin, utc_now

__all__ = ["DatabasePins", "pin", "pinned_id"]

_PINS = ApproverPin.__table__  # type: ignore[attr-defined]


def pinned_id(engine: Engine, login: str) -> int | None:
    """The GitHub user id `login` is pinned to, or None when it never was."""
    with engine.connect() as connection:
        found = connection.execute(select(_PINS.c.user_id).where(_PINS.c.login == login.lower())).scalar_one_or_none()
    return None if found is None else int(found)


def pin(engine: Engine, login: str, user_id: int, *, now: datetime | None = None) -> int:
    """Pin `login` to `user_id` unless it is pinned already; the id it is pinned to now."""
    values = dict(login=login.lower(), user_id=user_id, pinned_at=now or utc_now())
    statement = insert_ignoring_duplicates(engine, _PINS, ["login"]).values(**values)
    with engine.begin() as connection:
        connection.execute(statement)
        pinned = connection.execute(select(_PINS.c.user_id).where(_PINS.c.login == login.lower())).scalar_one()
    return int(pinned)


class DatabasePins:
    """bot.edges.github.permissions.PinStore on the database: pins that outlive the process."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def get(self, login: str) -> int | None:
        return await to_thread.run_sync(pinned_id, self._engine, login)

    async def put(self, login: str, user_id: int) -> int:
        return await to_thread.run_sync(pin, self._engine, login, user_id)
