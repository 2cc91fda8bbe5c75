"""The dispatcher: stored deliveries reach their handlers in order, after the answer, whatever happens."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest
from gidgethub import routing

from bot.edges.store import deliveries
from bot.web.dispatcher import Dispatcher, HandlerContext, describe_error
from tests.app_helpers import as_app_delivery, payload_files, post_delivery, running_lanebot, settle

pytestmark = pytest.mark.anyio

ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))


def store(
    engine, delivery_id: str, event: str = "issues", payload: dict | None = None, body: bytes | None = None
) -> None:
    payload = payload if payload is not None else {"action": "opened", "number": int(delivery_id.split("-")[-1])}
    assert deliveries.record(
        engine,
        delivery_id=delivery_id,
        event=event,
        action=payload.get("action"),
        installation_id=None,
        repository=None,
        body=body if body is not None else json.dumps(payload).encode(),
    )


def statuses(engine) -> dict[str, tuple[str, str | None]]:
    return {row.delivery_id: (row.status, row.error) for row in deliveries.list_recent(engine, 100)}


class Recorder:
    """A router whose `issues` handler notes each delivery it sees, and fails the ones told to."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.seen: list[str] = []
        self.contexts: list[HandlerContext] = []
        self.router = routing.Router()
        self.router.add(self.handle, "issues")
        self.fail = fail

    async def handle(self, event, *, context: HandlerContext) -> None:
        self.seen.append(event.delivery_id)
        self.contexts.append(context)
        if event.delivery_id in self.fail:
            raise RuntimeError(f"cannot handle {event.delivery_id}")


def dispatcher_for(engine, router: routing.Router, **options) -> Dispatcher:
    return Dispatcher(engine, router, HandlerContext(engine=engine, github=None, settings=None), **options)


async def test_deliveries_are_handled_in_the_order_they_were_stored(engine):
    for number in (3, 1, 2):
        store(engine, f"d-{number}")
    recorder = Recorder()
    handled = await dispatcher_for(engine, recorder.router).process_pending()
    assert recorder.seen == ["d-3", "d-1", "d-2"]
    assert handled == 3
    assert statuses(engine) == {"d-3": ("processed", None), "d-1": ("processed", None), "d-2": ("processed", None)}


async def test_a_raising_handler_fails_its_delivery_and_the_next_one_is_still_handled(engine):
    for number in (1, 2, 3):
        store(engine, f"d-{number}")
    recorder = Recorder(fail={"d-2"})
    await dispatcher_for(engine, recorder.router).process_pending()
    assert recorder.seen == ["d-1", "d-2", "d-3"]
    assert statuses(engine) == {
        "d-1": ("processed", None),
        "d-2": ("failed", "RuntimeError: cannot handle d-2"),
        "d-3": ("processed", None),
    }


async def test_an_event_no_handler_wants_is_marked_processed(engine):
    store(engine, "d-1", event="watch", payload={"action": "started"})
    await dispatcher_for(engine, Recorder().router).process_pending()
    assert statuses(engine) == {"d-1": ("processed", None)}


async def test_a_stored_body_that_is_not_json_fails_that_delivery_only(engine):
    store(engine, "d-1", body=b"{not json")
    store(engine, "d-2")
    recorder = Recorder()
    await dispatcher_for(engine, recorder.router).process_pending()
    assert statuses(engine)["d-1"][0] == "failed"
    assert statuses(engine)["d-1"][1].startswith("JSONDecodeError: ")
    assert statuses(engine)["d-2"] == ("processed", None)


async def test_handlers_get_the_event_rebuilt_from_the_row_and_the_context(engine):
    store(engine, "d-1", payload=ISSUE_OPENED)
    seen = []

    async def handler(event, *, context):
        seen.append((event.event, event.delivery_id, event.data, context))

    router = routing.Router()
    router.add(handler, "issues", action="opened")
    dispatcher = dispatcher_for(engine, router)
    await dispatcher.process_pending()
    [(event, delivery_id, data, context)] = seen
    assert (event, delivery_id, data) == ("issues", "d-1", ISSUE_OPENED)
    assert context.engine is engine


async def test_the_running_loop_survives_a_failing_handler_and_goes_on(engine):
    recorder = Recorder(fail={"d-1"})
    dispatcher = dispatcher_for(engine, recorder.router)
    dispatcher.start()
    try:
        store(engine, "d-1")
        dispatcher.wake()
        with anyio.fail_after(10):
            await dispatcher.wait_idle()
        store(engine, "d-2")
        dispatcher.wake()
        with anyio.fail_after(10):
            await dispatcher.wait_idle()
    finally:
        await dispatcher.stop()
    assert recorder.seen == ["d-1", "d-2"]
    assert statuses(engine)["d-2"] == ("processed", None)


async def test_deliveries_stored_by_another_process_are_found_without_a_wake_up(engine):
    handled = asyncio.Event()

    async def handler(event, *, context):
        handled.set()

    router = routing.Router()
    router.add(handler, "issues")
    dispatcher = dispatcher_for(engine, router, poll_seconds=0.01)
    dispatcher.start()
    try:
        with anyio.fail_after(10):
            await dispatcher.wait_idle()
        store(engine, "d-1")  # no wake(): as if another web process had stored it
        with anyio.fail_after(10):
            await handled.wait()
    finally:
        await dispatcher.stop()


async def test_stopping_lets_the_delivery_in_hand_finish(engine):
    store(engine, "d-1")
    store(engine, "d-2")
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(event, *, context):
        started.set()
        await release.wait()

    router = routing.Router()
    router.add(slow, "issues")
    dispatcher = dispatcher_for(engine, router)
    dispatcher.start()
    with anyio.fail_after(10):
        await started.wait()
    stopping = asyncio.create_task(dispatcher.stop())
    release.set()
    with anyio.fail_after(10):
        await stopping
    assert statuses(engine) == {"d-1": ("processed", None), "d-2": ("pending", None)}


async def test_a_handler_that_outlives_the_grace_period_leaves_its_delivery_pending(engine):
    store(engine, "d-1")
    started = asyncio.Event()

    async def stuck(event, *, context):
        started.set()
        await asyncio.Event().wait()

    router = routing.Router()
    router.add(stuck, "issues")
    dispatcher = dispatcher_for(engine, router)
    dispatcher.start()
    with anyio.fail_after(10):
        await started.wait()
    await dispatcher.stop(grace_seconds=0)
    assert statuses(engine) == {"d-1": ("pending", None)}


async def test_after_a_restart_the_new_process_handles_what_the_old_one_stored(engine):
    async with running_lanebot(engine, router=Recorder().router) as (first, client):
        # The first process stores deliveries but dies before handling them.
        await first.state.dispatcher.stop()
        for number in (1, 2, 3):
            response = await post_delivery(client, "issues", {**ISSUE_OPENED, "n": number}, delivery_id=f"d-{number}")
            assert response.status_code == 202
    assert {status for status, _ in statuses(engine).values()} == {"pending"}

    recorder = Recorder()
    async with running_lanebot(engine, router=recorder.router) as (second, _client):
        await settle(second)
    assert recorder.seen == ["d-1", "d-2", "d-3"]
    assert {status for status, _ in statuses(engine).values()} == {"processed"}


def test_a_failure_is_recorded_as_its_type_and_message_bounded_in_length():
    assert describe_error(ValueError("bad value")) == "ValueError: bad value"
    long = describe_error(RuntimeError("x" * 10_000))
    assert len(long) == 2000 and long.startswith("RuntimeError: xxx") and long.endswith("…")
