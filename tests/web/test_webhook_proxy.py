"""Receiving webhooks through a relay channel (LANEBOT_WEBHOOK_PROXY_URL): the sandbox serves the
channel in smee.io's format over real HTTP, lanebot's app reads it and hands every relayed
delivery to its own intake, whose signature check and limits apply unchanged."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio import to_thread
from gidgethub import routing
from sqlmodel import select

from bot.core.sse import RelayedDelivery
from bot.edges.store import db
from bot.edges.store.models import Delivery
from bot.edges.webhook_proxy import WebhookProxy
from bot.sandbox import SandboxServer
from bot.web.app import create_app
from tests.app_helpers import WAIT_LIMIT_SECONDS, delivery_headers, make_settings, running
from tests.sandbox_helpers import served_sandbox

pytestmark = pytest.mark.anyio

CHANNEL = "lanebot-test-channel"


def compact(payload: dict[str, Any]) -> bytes:
    """A body as GitHub writes one: compact JSON (what smee.io's JSON.stringify writes again)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


async def wait_until(what: str, probe: Callable[[], Any]) -> Any:
    with anyio.fail_after(WAIT_LIMIT_SECONDS):  # a hang guard, not a timing assertion
        while not (value := await to_thread.run_sync(probe)):
            await anyio.sleep(0.05)
    assert value, what
    return value


class Relay:
    """The channel's two sides as a test sees them: GitHub posting to it, and its human API."""

    def __init__(self, server: SandboxServer, database_url: str) -> None:
        self.server = server
        self.url = f"{server.url}/channels/{CHANNEL}"
        self.engine = db.make_engine(database_url)

    def post(self, event: str, body: bytes, *, secret: str | None = None) -> str:
        """POST a delivery to the channel as GitHub does; its delivery id."""
        delivery_id = str(uuid.uuid4())
        options = {"secret": secret} if secret else {}
        headers = delivery_headers(event, body, delivery_id=delivery_id, **options)
        assert httpx.post(self.url, content=body, headers=headers).status_code == 200
        return delivery_id

    def channel(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"{self.server.url}/_sandbox/channels/{CHANNEL}").json()
        return answer

    def outage(self, down: bool) -> None:
        httpx.post(f"{self.server.url}/_sandbox/channels/{CHANNEL}/outage", json={"down": down}).raise_for_status()

    def stored(self) -> dict[str, bytes]:
        with db.session(self.engine) as session:
            return {row.delivery_id: row.body for row in session.exec(select(Delivery)).all()}

    def refused_connections(self) -> int:
        path = f"/channels/{CHANNEL}"
        return sum(
            1 for method, p, status in list(self.server.sandbox.served) if (method, p, status) == ("GET", path, 503)
        )


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[Relay]:
    """lanebot's app reading the sandbox's channel, already connected to it."""
    database_url = f"sqlite:///{tmp_path / 'lanebot.db'}"
    with served_sandbox(tmp_path) as server:
        relay = Relay(server, database_url)
        settings = make_settings(
            database_url, webhook_proxy_url=relay.url, webhook_proxy_setting="LANEBOT_WEBHOOK_PROXY_URL"
        )
        app = create_app(settings, router=routing.Router())
        async with running(app):
            await wait_until("lanebot reads the channel", lambda: relay.channel()["readers"] == 1)
            relay.app = app  # type: ignore[attr-defined]
            yield relay
        relay.engine.dispose()


async def test_a_relayed_delivery_is_stored_with_the_bytes_github_signed(relay: Relay) -> None:
    body = compact({"action": "labeled", "issue": {"number": 7, "title": "Café ☕ <b>"}, "installation": {"id": 1}})
    delivery_id = relay.post("issues", body)
    stored = await wait_until("the delivery is stored", lambda: relay.stored().get(delivery_id))
    assert stored == body


async def test_a_relayed_delivery_with_a_wrong_signature_is_refused_and_logged(
    relay: Relay, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.edges.webhook_proxy")
    forged = relay.post("issues", compact({"action": "labeled", "installation": {"id": 1}}), secret="not-the-secret")
    genuine = relay.post("issues", compact({"action": "opened", "installation": {"id": 1}}))
    await wait_until("the genuine delivery, relayed after the forged one, is stored", lambda: genuine in relay.stored())
    assert forged not in relay.stored()
    refusal = f"relayed delivery {forged} (issues) refused: 401"
    assert any(refusal in record.getMessage() for record in caplog.records), caplog.text


async def test_a_body_the_channel_writes_differently_from_github_fails_its_signature(relay: Relay) -> None:
    """smee.io parses the body and writes it again: GitHub's signature covers the bytes GitHub sent,
    so a body written otherwise (spaces, here) no longer matches, and lanebot refuses it."""
    spaced = json.dumps({"action": "opened", "installation": {"id": 1}}, indent=2).encode()
    refused = relay.post("issues", spaced)
    after = relay.post("issues", compact({"action": "closed", "installation": {"id": 1}}))
    await wait_until("the delivery after it is stored", lambda: after in relay.stored())
    assert refused not in relay.stored()


async def test_a_dropped_channel_is_read_again_and_what_it_kept_meanwhile_arrives(relay: Relay) -> None:
    before = relay.post("issues", compact({"action": "opened", "installation": {"id": 1}}))
    await wait_until("the first delivery is stored", lambda: before in relay.stored())
    relay.outage(down=True)
    await wait_until("the stream has ended", lambda: relay.channel()["readers"] == 0)
    missed = [
        relay.post("issues", compact({"action": action, "installation": {"id": 1}})) for action in ("edited", "closed")
    ]
    await wait_until("lanebot tried again while the channel was down", lambda: relay.refused_connections() >= 1)
    relay.outage(down=False)
    await wait_until("both deliveries posted meanwhile are stored", lambda: set(missed) <= set(relay.stored()))
    proxy: WebhookProxy = relay.app.state.webhook_proxy  # type: ignore[attr-defined]
    assert proxy.connections == 2
    assert len(relay.stored()) == 3


class DroppedStream(httpx.AsyncByteStream):
    """A response body that sends `chunks` and then loses the connection."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


def message(delivery_id: str, number: int) -> bytes:
    data = json.dumps({"x-github-event": "ping", "x-github-delivery": delivery_id, "body": {"zen": "hi"}})
    return f"id: {number}\ndata: {data}\n\n".encode()


async def test_a_connection_lost_mid_event_is_reopened_with_the_last_event_id() -> None:
    asked: list[str | None] = []
    relayed: list[str] = []
    waits: list[float] = []
    connected: list[int] = []
    done = anyio.Event()

    def channel(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("last-event-id"))
        chunks = [message("d-1", 1), message("d-2", 2)[:20]] if len(asked) == 1 else [message("d-2", 2)]
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=DroppedStream(chunks))

    async def deliver(delivery: RelayedDelivery) -> tuple[int, str]:
        relayed.append(delivery.delivery_id)
        if len(relayed) == 2:
            done.set()
        return 202, ""

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if done.is_set():
            await anyio.sleep_forever()

    client = httpx.AsyncClient(transport=httpx.MockTransport(channel))
    proxy = WebhookProxy("https://smee.io/AbC123", deliver, client=client, sleep=sleep, on_connected=connected.append)
    proxy.start()
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        await done.wait()
    await proxy.stop()
    await client.aclose()
    assert relayed == ["d-1", "d-2"]  # the half-received event was not delivered half
    assert asked[:2] == [None, "1"]
    assert connected[:2] == [1, 2]  # told of each stream opened (serve then runs a recovery pass)
    assert waits[0] == 1.0  # the connection had carried events: the first delay again


async def test_a_url_that_is_not_a_channel_is_retried_later_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    waits: list[float] = []
    gave_up = anyio.Event()

    def page(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/html"}, text="<html>smee</html>")

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            gave_up.set()
            await anyio.sleep_forever()

    async def deliver(delivery: RelayedDelivery) -> tuple[int, str]:
        raise AssertionError("nothing is relayed from a page")

    client = httpx.AsyncClient(transport=httpx.MockTransport(page))
    proxy = WebhookProxy("https://smee.io/", deliver, client=client, sleep=sleep)
    with caplog.at_level(logging.WARNING, logger="bot.edges.webhook_proxy"):
        proxy.start()
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            await gave_up.wait()
        await proxy.stop()
    await client.aclose()
    assert waits == [2.0, 4.0, 8.0]
    assert "not text/event-stream: is LANEBOT_WEBHOOK_PROXY_URL a channel URL" in caplog.text
