"""Group commit in the intake: deliveries waiting are stored together, each answered only after
its batch committed, in arrival order, a bad one failing alone, none left hanging at shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from anyio import to_thread
from sqlalchemy.exc import DataError
from sqlmodel import select

from bot.edges.store import db, deliveries
from bot.edges.store.models import Delivery
from bot.web import intake as webhooks
from tests.app_helpers import WAIT_LIMIT_SECONDS, WEBHOOK_PATH, delivery_headers, running_lanebot

pytestmark = pytest.mark.anyio

# A correctly signed payload whose installation id no BIGINT column holds: its INSERT fails on
# SQLite and on PostgreSQL alike.
OUT_OF_RANGE_INSTALLATION_ID = 2**64
BODY_MARKER = "body-marker-never-logged"
APP_PING = {"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {"type": "App", "id": 1, "app_id": 4711}}


class WatchedWrites:
    """Stands in for `deliveries.record_many`: notes each batch's ids, and can hold writes back.

    Held, a batch waits in its worker thread (before touching the database) until released.
    """

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self._real = deliveries.record_many
        self._open = threading.Event()
        self._open.set()
        self._entered = threading.Semaphore(0)
        self._finished = threading.Semaphore(0)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def __call__(self, engine: Any, batch: list[deliveries.NewDelivery], **options: Any) -> list[bool]:
        self.batches.append([delivery.delivery_id for delivery in batch])
        self._entered.release()
        self._open.wait(WAIT_LIMIT_SECONDS)  # a hang guard: a test that forgets to release still ends
        try:
            return self._real(engine, batch, **options)
        finally:
            self._finished.release()

    async def a_batch_entered(self) -> None:
        assert await to_thread.run_sync(self._entered.acquire, True, WAIT_LIMIT_SECONDS), "no batch was written"

    async def a_batch_finished(self) -> None:
        assert await to_thread.run_sync(self._finished.acquire, True, WAIT_LIMIT_SECONDS), "no batch finished"


@pytest.fixture
def writes(monkeypatch) -> WatchedWrites:
    watched = WatchedWrites()
    monkeypatch.setattr(deliveries, "record_many", watched)
    return watched


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def verified(delivery_id: str, *, installation_id: int | None = 4242) -> webhooks.VerifiedDelivery:
    payload = json.dumps({"action": "opened", "comment": BODY_MARKER, "installation": {"id": installation_id}})
    return webhooks.VerifiedDelivery(
        delivery_id=delivery_id,
        event="issues",
        action="opened",
        installation_id=installation_id,
        repository="octo/repo",
        payload=payload.encode(),
        body_mac=hashlib.sha256(payload.encode()).digest(),  # stands in for the signature: one per body
    )


def offer(writer: webhooks.DeliveryWriter, *batch: webhooks.VerifiedDelivery) -> list[asyncio.Task[bool]]:
    """Hand each delivery to the writer, in this order (tasks run in the order they are created)."""
    return [asyncio.create_task(writer.store(delivery)) for delivery in batch]


async def answers(tasks: list[asyncio.Task[Any]]) -> list[Any]:
    """Each task's result, or the IntakeError's (status, message) it raised."""
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    return [
        (outcome.status, outcome.message) if isinstance(outcome, webhooks.IntakeError) else outcome
        for outcome in outcomes
    ]


async def after_loop_turns(condition: Callable[[], bool], turns: int = 50) -> None:
    """Let the event loop run other tasks until `condition` holds; counted in turns, not time."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"still not true after {turns} turns of the event loop")


def intake_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The intake's log lines at exactly `level`, in order."""
    return [
        record.getMessage() for record in caplog.records if record.name == webhooks.__name__ and record.levelno == level
    ]


def stored_ids(engine) -> list[str]:
    with db.session(engine) as session:
        return list(session.exec(select(Delivery.delivery_id).order_by(Delivery.seq)).all())


# -- the store's batch insert ------------------------------------------------------------------


def new(delivery_id: str, installation_id: int = 42) -> deliveries.NewDelivery:
    return deliveries.NewDelivery(delivery_id, "issues", "opened", installation_id, "octo/repo", b"{}")


def test_a_batch_is_inserted_in_order_and_a_repeated_id_is_already_stored_for_its_second_copy(engine):
    assert deliveries.record_many(engine, [new("b"), new("a"), new("b"), new("c")]) == [True, True, False, True]
    assert deliveries.record_many(engine, [new("c"), new("d")]) == [False, True]
    assert stored_ids(engine) == ["b", "a", "c", "d"]


def test_a_full_batch_keeps_its_order_in_seq(engine):
    shuffled = [f"d-{(number * 17) % webhooks.MAX_BATCH_SIZE:02}" for number in range(webhooks.MAX_BATCH_SIZE)]
    assert deliveries.record_many(engine, [new(delivery_id) for delivery_id in shuffled]) == [True] * len(shuffled)
    assert stored_ids(engine) == shuffled


def test_one_failing_insert_stores_nothing_of_its_batch(engine):
    with pytest.raises((OverflowError, DataError)):  # SQLite's driver, and PostgreSQL's "bigint out of range"
        deliveries.record_many(engine, [new("a"), new("bad", OUT_OF_RANGE_INSTALLATION_ID), new("c")])
    assert stored_ids(engine) == []


def test_an_empty_batch_stores_nothing(engine):
    assert deliveries.record_many(engine, []) == []


# -- the writer ----------------------------------------------------------------------------------


async def test_a_lone_delivery_is_written_at_once_in_a_batch_of_its_own(engine, writes):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    [alone] = offer(writer, verified("alone"))
    # No timer waits for company: within a few turns of the event loop it has left the queue.
    await after_loop_turns(lambda: writer.waiting == 0 and writer.writing == 1)
    assert await answers([alone]) == [True]
    assert writes.batches == [["alone"]]
    assert stored_ids(engine) == ["alone"]


async def test_deliveries_arriving_during_a_write_are_stored_together_in_arrival_order(engine, writes):
    wakes = Wakes()
    writer = webhooks.DeliveryWriter(engine, wakes)
    writes.hold()
    first = offer(writer, verified("first"))
    await writes.a_batch_entered()
    later = offer(writer, verified("c"), verified("a"), verified("b"))
    await after_loop_turns(lambda: writer.waiting == 3)
    assert not any(task.done() for task in first + later)  # nothing is answered before its commit
    writes.release()
    assert await answers(first + later) == [True, True, True, True]
    assert writes.batches == [["first"], ["c", "a", "b"]]
    assert stored_ids(engine) == ["first", "c", "a", "b"]
    assert wakes.count == 2  # the dispatcher is woken once per batch that stored something


async def test_a_batch_holds_at_most_max_batch_size_deliveries(engine, writes):
    writer = webhooks.DeliveryWriter(engine, Wakes(), max_batch_size=2)
    writes.hold()
    first = offer(writer, verified("d-1"))
    await writes.a_batch_entered()
    later = offer(writer, *(verified(f"d-{number}") for number in range(2, 7)))
    await after_loop_turns(lambda: writer.waiting == 5)
    writes.release()
    assert await answers(first + later) == [True] * 6
    assert writes.batches == [["d-1"], ["d-2", "d-3"], ["d-4", "d-5"], ["d-6"]]
    assert stored_ids(engine) == [f"d-{number}" for number in range(1, 7)]


async def test_a_duplicate_is_already_stored_within_a_batch_and_across_batches(engine, writes):
    wakes = Wakes()
    writer = webhooks.DeliveryWriter(engine, wakes)
    writes.hold()
    first = offer(writer, verified("x"))
    await writes.a_batch_entered()
    later = offer(writer, verified("y"), verified("x"), verified("z"), verified("y"))
    await after_loop_turns(lambda: writer.waiting == 4)
    writes.release()
    assert await answers(first + later) == [True, True, False, True, False]
    assert writes.batches == [["x"], ["y", "x", "z", "y"]]
    assert stored_ids(engine) == ["x", "y", "z"]

    wakes_before = wakes.count
    assert await answers(offer(writer, verified("z"))) == [False]
    assert wakes.count == wakes_before  # a batch that stored nothing new does not wake the dispatcher


async def test_each_batch_is_logged_in_one_line_naming_the_deliveries_it_stored(engine, writes, caplog):
    caplog.set_level(logging.INFO, logger="bot.web.intake")
    writer = webhooks.DeliveryWriter(engine, Wakes())
    writes.hold()
    first = offer(writer, verified("first"))
    await writes.a_batch_entered()
    later = offer(writer, verified("b-1"), verified("first"), verified("b-2"))
    await after_loop_turns(lambda: writer.waiting == 3)
    writes.release()
    assert await answers(first + later) == [True, True, False, True]
    assert intake_lines(caplog, logging.INFO) == [
        "stored 1 delivery: first (issues.opened)",
        "stored 2 deliveries: b-1 (issues.opened), b-2 (issues.opened)",  # the second "first" stored nothing
    ]


async def test_one_bad_delivery_in_a_batch_fails_alone_and_the_others_are_stored(engine, writes, caplog):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    writes.hold()
    first = offer(writer, verified("first"))
    await writes.a_batch_entered()
    later = offer(
        writer, verified("good-1"), verified("bad", installation_id=OUT_OF_RANGE_INSTALLATION_ID), verified("good-2")
    )
    await after_loop_turns(lambda: writer.waiting == 3)
    writes.release()
    first_answer, good_1, bad, good_2 = await answers(first + later)

    assert (first_answer, good_1, good_2) == (True, True, True)
    status, message = bad
    assert status == 500 and "could not store this delivery" in message and "lanebot's log" in message
    # The batch failed as a whole, then each of its deliveries was written on its own.
    assert writes.batches == [["first"], ["good-1", "bad", "good-2"], ["good-1"], ["bad"], ["good-2"]]
    assert stored_ids(engine) == ["first", "good-1", "good-2"]
    assert "delivery bad (issues) could not be stored" in caplog.text
    assert BODY_MARKER not in caplog.text  # the database's error repeats the parameters; the log does not


async def test_a_lone_bad_delivery_is_not_written_twice(engine, writes):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    [(status, _message)] = await answers(offer(writer, verified("bad", installation_id=OUT_OF_RANGE_INSTALLATION_ID)))
    assert status == 500
    assert writes.batches == [["bad"]]
    assert stored_ids(engine) == []


async def test_stopping_with_a_batch_in_flight_stores_and_answers_everything_handed_over(engine, writes):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    writes.hold()
    in_flight = offer(writer, verified("in-flight"))
    await writes.a_batch_entered()
    queued = offer(writer, verified("queued-1"), verified("queued-2"))
    await after_loop_turns(lambda: writer.waiting == 2)

    stopping = asyncio.create_task(writer.stop())
    await after_loop_turns(lambda: not writer.accepting)
    assert (writer.writing, writer.waiting, stopping.done()) == (1, 2, False)
    with pytest.raises(webhooks.IntakeError) as refused:
        await writer.store(verified("too-late"))
    assert refused.value.status == 503 and "shutting down" in refused.value.message
    writes.release()
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        await stopping

    assert [task.done() for task in in_flight + queued] == [True, True, True]
    assert await answers(in_flight + queued) == [True, True, True]
    assert stored_ids(engine) == ["in-flight", "queued-1", "queued-2"]


async def test_stopping_that_gives_up_answers_every_waiting_request_503(engine, writes):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    writes.hold()
    in_flight = offer(writer, verified("in-flight"))
    await writes.a_batch_entered()
    queued = offer(writer, verified("queued"))
    await after_loop_turns(lambda: writer.waiting == 1)

    await writer.stop(grace_seconds=0)  # the batch is still held in its worker thread

    [(in_flight_status, in_flight_message), (queued_status, queued_message)] = await answers(in_flight + queued)
    assert (in_flight_status, queued_status) == (503, 503)
    assert "may or may not be stored" in in_flight_message
    assert "before storing this delivery" in queued_message
    writes.release()
    await writes.a_batch_finished()
    # The abandoned batch still committed: a redelivery of it is "already stored", never lost.
    assert stored_ids(engine) == ["in-flight"]

    writer.start()
    assert await answers(offer(writer, verified("in-flight"), verified("queued"))) == [False, True]


async def test_stopping_an_idle_writer_returns_at_once_and_refuses_new_deliveries(engine):
    writer = webhooks.DeliveryWriter(engine, Wakes())
    await writer.stop(grace_seconds=0)
    [(status, _message)] = await answers(offer(writer, verified("late")))
    assert status == 503
    assert stored_ids(engine) == []


def test_a_batch_size_below_one_is_refused(engine):
    with pytest.raises(ValueError, match="max_batch_size must be at least 1, got 0"):
        webhooks.DeliveryWriter(engine, Wakes(), max_batch_size=0)


# -- through the app: HTTP answers and the lifespan --------------------------------------------


async def post(client: httpx.AsyncClient, delivery_id: str, payload: dict[str, Any] = APP_PING) -> httpx.Response:
    # Each delivery its own body, as GitHub's are: one body under two ids is a replay (bot/web/intake.py).
    body = json.dumps({**payload, "test_delivery": delivery_id}).encode()
    headers = delivery_headers("ping", body, delivery_id=delivery_id)
    return await client.post(WEBHOOK_PATH, content=body, headers=headers)


async def test_a_lone_request_is_answered_202_from_a_batch_of_its_own(engine, writes, caplog):
    caplog.set_level(logging.DEBUG, logger="bot.web.intake")
    async with running_lanebot(engine) as (_app, client):
        response = await post(client, "alone")
    assert (response.status_code, response.json()) == (202, {"delivery": "alone", "stored": True})
    assert writes.batches == [["alone"]]
    # The batch's line at info; the request's own at debug, for whoever needs each answer.
    assert intake_lines(caplog, logging.INFO) == ["stored 1 delivery: alone (ping)"]
    assert intake_lines(caplog, logging.DEBUG) == ["delivery alone answered 202: stored with its batch"]


async def test_two_copies_in_one_batch_answer_202_then_200(engine, writes):
    async with running_lanebot(engine) as (app, client):
        writes.hold()
        first = asyncio.create_task(post(client, "first"))
        await writes.a_batch_entered()
        copies = [asyncio.create_task(post(client, "twice")) for _ in range(2)]
        await after_loop_turns(lambda: app.state.writer.waiting == 2, turns=500)
        writes.release()
        responses = await answers([first, *copies])
    assert writes.batches == [["first"], ["twice", "twice"]]
    first_response, *copies = responses
    assert first_response.status_code == 202
    answered = sorted((response.status_code, response.json()["stored"]) for response in copies)
    assert answered == [(200, False), (202, True)]
    assert stored_ids(engine) == ["first", "twice"]


async def test_a_bad_delivery_in_a_batch_costs_only_its_own_request_a_500(engine, writes):
    bad_payload = {**APP_PING, "installation": {"id": OUT_OF_RANGE_INSTALLATION_ID}}
    async with running_lanebot(engine) as (app, client):
        writes.hold()
        first = asyncio.create_task(post(client, "first"))
        await writes.a_batch_entered()
        batch = [
            asyncio.create_task(post(client, "good-1")),
            asyncio.create_task(post(client, "bad", bad_payload)),
            asyncio.create_task(post(client, "good-2")),
        ]
        await after_loop_turns(lambda: app.state.writer.waiting == 3, turns=500)
        writes.release()
        first_response, good_1, bad, good_2 = await answers([first, *batch])
    assert [response.status_code for response in (first_response, good_1, bad, good_2)] == [202, 202, 500, 202]
    assert "could not store this delivery" in bad.json()["message"]
    assert sorted(stored_ids(engine)) == ["first", "good-1", "good-2"]


async def test_shutdown_with_a_batch_in_flight_answers_its_requests_and_then_refuses_with_503(
    engine, writes, monkeypatch
):
    async with running_lanebot(engine) as (app, client):
        writer = app.state.writer
        stop = writer.stop

        async def stop_while_a_batch_is_in_flight(*args: Any, **kwargs: Any) -> None:
            stopping = asyncio.create_task(stop(*args, **kwargs))
            await after_loop_turns(lambda: not writer.accepting)
            assert (writer.writing, writer.waiting, stopping.done()) == (1, 1, False)
            writes.release()
            await stopping

        monkeypatch.setattr(writer, "stop", stop_while_a_batch_is_in_flight)
        writes.hold()
        in_flight = asyncio.create_task(post(client, "in-flight"))
        await writes.a_batch_entered()
        queued = asyncio.create_task(post(client, "queued"))
        await after_loop_turns(lambda: writer.waiting == 1, turns=500)
    # The lifespan has ended: it stopped the writer while "in-flight" was in the database.
    responses = await answers([in_flight, queued])
    assert [response.status_code for response in responses] == [202, 202]
    assert stored_ids(engine) == ["in-flight", "queued"]

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lanebot.test") as late_client:
        late = await post(late_client, "after-shutdown")
    assert late.status_code == 503 and "shutting down" in late.json()["message"]
    assert stored_ids(engine) == ["in-flight", "queued"]
