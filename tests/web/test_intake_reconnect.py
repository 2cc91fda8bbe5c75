"""The intake on PostgreSQL when the server cuts lanebot's connection (a restart, a failover,
pg_terminate_backend): the delivery is still stored and answered 2xx, not 500."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine
from sqlmodel import select

from bot.edges.store import db
from bot.edges.store.models import Delivery
from bot.web.app import create_app
from tests.app_helpers import as_app_delivery, make_settings, payload_files, post_delivery, running, settle

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))
RETRY_LOGGED = "storing again on a new connection"


@pytest.fixture
def postgres_url(postgres_schemas) -> Iterator[str]:
    """A migrated PostgreSQL schema of this test's own (the app builds its own engine on it)."""
    schema = postgres_schemas.take(migrated=True)
    try:
        yield postgres_schemas.url(schema)
    finally:
        postgres_schemas.give_back(schema)


def terminate(server: Engine, pids: set[int]) -> None:
    """pg_terminate_backend each of `pids`, and wait until the server has let them go."""
    with server.connect() as connection:
        for pid in pids:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        connection.commit()
        deadline = time.monotonic() + 10
        while True:
            remaining = connection.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"), {"pids": list(pids)}
            ).scalar()
            connection.commit()  # pg_stat_activity is read once per transaction
            if not remaining:
                return
            assert time.monotonic() < deadline, "the terminated backends did not go away"
            time.sleep(0.02)


def stored_ids(engine: Engine) -> list[str]:
    with db.session(engine) as session:
        return list(session.exec(select(Delivery.delivery_id).order_by(Delivery.seq)).all())


async def test_pooled_connections_terminated_while_idle_are_replaced_before_the_write(
    postgres_url, postgres_server, caplog
):
    app = create_app(make_settings(postgres_url))
    engine = app.state.engine
    backends: set[int] = set()
    event.listen(engine, "connect", lambda dbapi_connection, _record: backends.add(dbapi_connection.info.backend_pid))
    async with running(app) as client:
        first = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="before-the-cut")
        await settle(app)
        terminate(postgres_server, set(backends))  # every connection in the pool is now dead
        with caplog.at_level(logging.WARNING):
            after = await post_delivery(client, "issues", {**ISSUE_OPENED, "n": 2}, delivery_id="after-the-cut")
        await settle(app)
        assert (first.status_code, after.status_code) == (202, 202), after.text
        assert stored_ids(engine) == ["before-the-cut", "after-the-cut"]
    # The pool pinged the dead connection and took a new one: the write itself never failed.
    assert RETRY_LOGGED not in caplog.text


async def test_a_connection_terminated_just_before_the_write_is_written_again_on_a_new_one(
    postgres_url, postgres_server, caplog
):
    app = create_app(make_settings(postgres_url))
    engine = app.state.engine
    cut: list[int] = []

    def cut_before_the_first_write(connection: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # The intake's transaction sets its lock timeout, then INSERTs: cut before whichever comes first.
        if not cut and ("lock_timeout" in statement or "INSERT INTO deliveries" in statement):
            pid = connection.connection.dbapi_connection.info.backend_pid
            cut.append(pid)
            terminate(postgres_server, {pid})

    event.listen(engine, "before_cursor_execute", cut_before_the_first_write)
    async with running(app) as client:
        with caplog.at_level(logging.WARNING):
            answer = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="cut-mid-write")
        await settle(app)
        assert answer.status_code == 202, answer.text
        assert stored_ids(engine) == ["cut-mid-write"]
    assert len(cut) == 1
    assert RETRY_LOGGED in caplog.text
