"""The dispatcher: stored deliveries reach their handlers in order, after the answer, whatever happens."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest
import respx
from gidgethub import routing

from bot.edges.github.client import GitHubApp
from bot.edges.store import deliveries
from bot.web.dispatcher import Dispatcher, HandlerContext, describe_error
from tests.app_helpers import as_app_delivery, make_settings, payload_files, post_delivery, running_lanebot, settle
from tests.held_sleep import HeldSleep

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


# -- fairness: installations side by side, each in order ---------------------------------------


def store_for(engine, delivery_id: str, installation_id: int | None, repository: str = "octo/a") -> None:
    payload = {"action": "opened", "installation": {"id": installation_id}, "repository": {"full_name": repository}}
    assert deliveries.record(
        engine,
        delivery_id=delivery_id,
        event="issues",
        action="opened",
        installation_id=installation_id,
        repository=repository,
        body=json.dumps(payload).encode(),
    )


class Gated:
    """A router whose handler waits, for the deliveries named, until the test opens their gate."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.started: dict[str, asyncio.Event] = {}
        self.gate = asyncio.Event()
        self.order: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self.router = routing.Router()
        self.router.add(self.handle, "issues")

    async def handle(self, event, *, context) -> None:
        self.started.setdefault(event.delivery_id, asyncio.Event()).set()
        self.order.append(f"start {event.delivery_id}")
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if event.delivery_id in self.held:
                await self.gate.wait()
            await asyncio.sleep(0.01)
        finally:
            self.running -= 1
        self.order.append(f"end {event.delivery_id}")

    async def wait_started(self, delivery_id: str) -> None:
        with anyio.fail_after(10):
            await self.started.setdefault(delivery_id, asyncio.Event()).wait()


async def test_a_held_delivery_of_one_installation_does_not_hold_back_another_installations(engine):
    store_for(engine, "a-1", 1)
    store_for(engine, "a-2", 1)
    store_for(engine, "b-1", 2, "octo/b")
    gated = Gated(held={"a-1"})
    dispatcher = dispatcher_for(engine, gated.router, poll_seconds=0.05)
    dispatcher.start()
    try:
        await gated.wait_started("b-1")
        with anyio.fail_after(10):
            while statuses(engine)["b-1"][0] != "processed":
                await asyncio.sleep(0.01)
        assert statuses(engine)["a-1"][0] == "pending"
        assert "start a-2" not in gated.order  # one installation's deliveries stay in order
        gated.gate.set()
        with anyio.fail_after(10):
            await dispatcher.wait_idle()
    finally:
        await dispatcher.stop()
    assert gated.order.index("end a-1") < gated.order.index("start a-2")
    assert {status for status, _ in statuses(engine).values()} == {"processed"}


async def test_at_most_the_configured_number_of_deliveries_run_at_once(engine):
    for installation in range(1, 6):
        store_for(engine, f"d-{installation}", installation)
    gated = Gated(held=set())
    handled = await dispatcher_for(engine, gated.router, workers=2).process_pending()
    assert handled == 5
    assert gated.most_at_once == 2


async def test_one_installations_429_does_not_delay_anothers_delivery_and_a_wait_past_the_cap_fails_it(engine):
    store_for(engine, "limited-1", 1, "octo/limited")
    store_for(engine, "free-1", 2, "octo/free")
    sleep = HeldSleep()
    router = routing.Router()

    async def read_issue(event, *, context):
        repository = event.data["repository"]["full_name"]
        client = context.github.installation_client(event.data["installation"]["id"], repository)
        await client.getitem(f"/repos/{repository}/issues/1")

    router.add(read_issue, "issues")
    with respx.mock(base_url="https://api.github.com") as github:
        github.post(url__regex=r"/app/installations/\d+/access_tokens").respond(
            201, json={"token": "ghs_test", "expires_at": "2099-01-01T00:00:00Z", "permissions": {}}
        )
        github.get("/repos/octo/limited/issues/1").respond(
            429, json={"message": "You have exceeded a secondary rate limit."}, headers={"retry-after": "60"}
        )
        github.get("/repos/octo/free/issues/1").respond(200, json={"number": 1})
        async with GitHubApp(make_settings(max_rate_limit_wait=100.0), sleep=sleep) as app:
            dispatcher = Dispatcher(engine, router, HandlerContext(engine=engine, github=app, settings=None))
            dispatcher.start()
            try:
                with anyio.fail_after(10):
                    await sleep.started.wait()  # installation 1 waits out its limit...
                    while statuses(engine)["free-1"][0] != "processed":  # ...and installation 2 is answered
                        await asyncio.sleep(0.01)
                assert statuses(engine)["limited-1"][0] == "pending"
                sleep.release.set()  # the second 429 would make 120 s in all, past the cap of 100 s
                with anyio.fail_after(10):
                    await dispatcher.wait_idle()
            finally:
                await dispatcher.stop()
    status, error = statuses(engine)["limited-1"]
    assert status == "failed"
    assert error.startswith("RateLimitTooLong: GitHub rate-limited installation 1 until ")
    assert sleep.waits == [60.0]
