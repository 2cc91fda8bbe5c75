"""The dispatcher records outcomes in batches: what was handled while a write was under way is
recorded together, in one transaction and one log line, each delivery's own outcome kept, and a
delivery at fault, or a database that does not take the batch for now, loses none of the others."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from gidgethub import routing
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from bot.edges.store import deliveries
from bot.web.dispatcher import Dispatcher, HandlerContext, describe_error
from tests.app_helpers import WAIT_LIMIT_SECONDS

pytestmark = pytest.mark.anyio


def store(engine, *delivery_ids: str) -> None:
    for delivery_id in delivery_ids:
        assert deliveries.record(
            engine,
            delivery_id=delivery_id,
            event="issues",
            action="opened",
            installation_id=None,
            repository=None,
            body=json.dumps({"action": "opened"}).encode(),
        )


def statuses(engine) -> dict[str, tuple[str, str | None]]:
    return {row.delivery_id: (row.status, row.error) for row in deliveries.list_recent(engine, 100)}


class Handler:
    """An `issues` handler that notes each delivery it sees and fails the ones told to."""

    def __init__(self, fail: Sequence[str] = (), message: str = "cannot handle") -> None:
        self.seen: list[str] = []
        self.fail = set(fail)
        self.message = message
        self.router = routing.Router()
        self.router.add(self.handle, "issues")

    async def handle(self, event, *, context) -> None:
        self.seen.append(event.delivery_id)
        await asyncio.sleep(0)  # as a handler doing I/O would, it lets the writer run
        if event.delivery_id in self.fail:
            raise RuntimeError(f"{self.message} {event.delivery_id}")

    async def wait_for(self, count: int) -> None:
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            while len(self.seen) < count:
                await asyncio.sleep(0.005)


class WatchedRecords:
    """Stands in for `deliveries.finish_many`: notes each batch's delivery seqs, can hold the first
    write back until released, and can refuse the first `refusals` writes as a database that is down."""

    def __init__(self, engine, real: Any, *, hold_first: bool = False, refusals: int = 0) -> None:
        self.batches: list[list[int]] = []
        self._real = real
        self._engine = engine
        self._first = threading.Event()
        if not hold_first:
            self._first.set()
        self._refusals = refusals

    def release(self) -> None:
        self._first.set()

    def ids(self) -> list[list[str]]:
        by_seq = {row.seq: row.delivery_id for row in deliveries.list_recent(self._engine, 100)}
        return [[by_seq.get(seq, f"seq {seq}") for seq in batch] for batch in self.batches]

    def __call__(self, engine: Any, outcomes: Sequence[deliveries.Outcome], **options: Any) -> None:
        self.batches.append([outcome.seq for outcome in outcomes])
        self._first.wait(WAIT_LIMIT_SECONDS)  # a hang guard: a test that forgets to release still ends
        if self._refusals:
            self._refusals -= 1
            raise OperationalError("UPDATE deliveries", {}, Exception("the database is restarting"))
        self._real(engine, outcomes, **options)


@pytest.fixture
def watched(monkeypatch, engine):
    real = deliveries.finish_many

    def watch(**options: Any) -> WatchedRecords:
        records = WatchedRecords(engine, real, **options)
        monkeypatch.setattr(deliveries, "finish_many", records)
        return records

    return watch


def dispatcher_for(engine, handler: Handler) -> Dispatcher:
    return Dispatcher(engine, handler.router, HandlerContext(engine=engine, github=None, settings=None))


async def handle_all_behind_a_held_first_write(engine, handler: Handler, records: WatchedRecords, count: int) -> int:
    """Process what is pending while the first write is held until all `count` deliveries are handled."""
    processing = asyncio.create_task(dispatcher_for(engine, handler).process_pending())
    await handler.wait_for(count)
    records.release()
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        return await processing


async def test_what_is_handled_while_a_write_is_under_way_is_recorded_together(engine, watched):
    store(engine, "d-1", "d-2", "d-3", "d-4", "d-5")
    records = watched(hold_first=True)
    handler = Handler()
    handled = await handle_all_behind_a_held_first_write(engine, handler, records, 5)
    assert handled == 5
    assert handler.seen == ["d-1", "d-2", "d-3", "d-4", "d-5"]  # the lane went on while d-1's record waited
    assert records.ids() == [["d-1"], ["d-2", "d-3", "d-4", "d-5"]]
    assert set(statuses(engine).values()) == {("processed", None)}


async def test_a_failed_delivery_in_a_batch_keeps_its_error_and_the_others_are_processed(engine, watched):
    store(engine, "d-1", "d-2", "d-3", "d-4")
    records = watched(hold_first=True)
    handler = Handler(fail=["d-3"])
    await handle_all_behind_a_held_first_write(engine, handler, records, 4)
    assert records.ids() == [["d-1"], ["d-2", "d-3", "d-4"]]
    assert statuses(engine) == {
        "d-1": ("processed", None),
        "d-2": ("processed", None),
        "d-3": ("failed", "RuntimeError: cannot handle d-3"),
        "d-4": ("processed", None),
    }


async def test_a_delivery_gone_from_the_database_does_not_keep_the_rest_of_its_batch_from_being_recorded(
    engine, watched, caplog
):
    store(engine, "d-1", "d-2", "d-3", "d-4")
    records = watched(hold_first=True)
    handler = Handler()
    processing = asyncio.create_task(dispatcher_for(engine, handler).process_pending())
    await handler.wait_for(4)
    with engine.begin() as connection:  # removed behind the dispatcher's back, after it was handled
        connection.execute(text("DELETE FROM deliveries WHERE delivery_id = 'd-3'"))
    records.release()
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        assert await processing == 4
    assert statuses(engine) == {"d-1": ("processed", None), "d-2": ("processed", None), "d-4": ("processed", None)}
    assert "delivery d-3 (issues.opened) is no longer stored; what it came to is not recorded" in caplog.text


async def test_outcomes_the_database_refuses_for_now_are_recorded_later_and_nothing_is_handled_twice(engine, watched):
    store(engine, "d-1", "d-2", "d-3")
    records = watched(refusals=2)
    handler = Handler(fail=["d-2"])
    dispatcher = dispatcher_for(engine, handler)
    dispatcher.start()
    try:
        await handler.wait_for(3)
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            await dispatcher.wait_idle()
        # The loop claimed again once the lane was done: the deliveries in hand were not taken again.
        assert handler.seen == ["d-1", "d-2", "d-3"]
    finally:
        await dispatcher.stop()
    assert len(records.batches) >= 3  # two refused, then recorded
    assert statuses(engine) == {
        "d-1": ("processed", None),
        "d-2": ("failed", "RuntimeError: cannot handle d-2"),
        "d-3": ("processed", None),
    }


async def test_outcomes_still_refused_at_stop_leave_their_deliveries_pending_for_the_next_start(engine, watched):
    store(engine, "d-1", "d-2")
    watched(refusals=1_000)
    first = Handler()
    dispatcher = dispatcher_for(engine, first)
    dispatcher.start()
    await first.wait_for(2)
    await dispatcher.stop(grace_seconds=0)
    assert statuses(engine) == {"d-1": ("pending", None), "d-2": ("pending", None)}

    watched()  # the database takes writes again
    again = Handler()
    assert await dispatcher_for(engine, again).process_pending() == 2
    assert again.seen == ["d-1", "d-2"]
    assert set(statuses(engine).values()) == {("processed", None)}


async def test_a_batch_is_one_log_line_naming_each_delivery_and_a_failure_has_its_own(engine, watched, caplog):
    caplog.set_level(logging.INFO, logger="bot.web.dispatcher")
    store(engine, "d-1", "d-2", "d-3")
    records = watched(hold_first=True)
    await handle_all_behind_a_held_first_write(engine, Handler(fail=["d-3"]), records, 3)
    lines = [
        (record.levelname, record.getMessage()) for record in caplog.records if record.name == "bot.web.dispatcher"
    ]
    assert lines == [
        ("WARNING", "delivery d-3 (issues.opened) failed: RuntimeError: cannot handle d-3"),
        ("INFO", "handled 1 delivery: d-1 (issues.opened)"),
        ("INFO", "handled 2 deliveries (1 failed): d-2 (issues.opened), d-3 (issues.opened) failed"),
    ]


async def test_an_error_with_a_nul_character_is_still_recorded(engine):
    store(engine, "d-1")
    await dispatcher_for(engine, Handler(fail=["d-1"], message="bad\x00byte")).process_pending()
    assert statuses(engine) == {"d-1": ("failed", "RuntimeError: bad\\x00byte d-1")}
    assert describe_error(ValueError("a\x00b")) == "ValueError: a\\x00b"


def test_outcomes_naming_a_delivery_not_stored_record_nothing_and_name_it(engine):
    store(engine, "d-1", "d-2")
    first, second = deliveries.claim_pending(engine, 10)
    assert first.seq is not None and second.seq is not None
    with pytest.raises(LookupError, match="no delivery with seq 12345 is stored"):
        deliveries.finish_many(engine, [deliveries.Outcome(first.seq), deliveries.Outcome(12345, "boom")])
    assert set(statuses(engine).values()) == {("pending", None)}
    deliveries.finish_many(engine, [deliveries.Outcome(first.seq), deliveries.Outcome(second.seq, "KeyError: 'x'")])
    assert statuses(engine) == {"d-1": ("processed", None), "d-2": ("failed", "KeyError: 'x'")}
