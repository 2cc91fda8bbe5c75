"""The sandbox's webhook relay channels (bot/sandbox/channels.py), read over real HTTP as smee.io's
are: a `ready` event on connecting, `ping` events while quiet, and for each delivery posted to the
channel an unnamed event (so `message`, what smee-client listens for) whose data is the request's
headers, `body`, `query` and `timestamp` in one compact JSON object."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from bot.core.sse import SSEEvent, SSEParser, relayed_delivery
from bot.sandbox import SandboxServer, channels
from bot.sandbox.cli import HumanClient
from tests.app_helpers import WAIT_LIMIT_SECONDS, delivery_headers
from tests.sandbox_helpers import served_sandbox

pytestmark = pytest.mark.anyio

SECRET = "channel-test-secret"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SandboxServer]:
    with served_sandbox(tmp_path, webhook_secret=SECRET) as running:
        yield running


def channel_url(server: SandboxServer, name: str = "AbC123") -> str:
    return f"{server.url}/channels/{name}"


def compact(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class Listener:
    """One reader of a channel: the events it has been sent, parsed as a browser's EventSource would."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.parser = SSEParser()
        self._chunks = response.aiter_bytes()
        self._events: deque[SSEEvent] = deque()

    async def next(self) -> SSEEvent:
        with anyio.fail_after(WAIT_LIMIT_SECONDS):  # a hang guard, not a timing assertion
            while not self._events:
                self._events.extend(self.parser.feed(await anext(self._chunks)))
        return self._events.popleft()

    async def next_message(self) -> SSEEvent:
        """The next delivery relayed, past any ping."""
        while (event := await self.next()).type == "ping":
            pass
        return event

    async def ended(self) -> bool:
        """Whether the channel ends the stream (after nothing but pings)."""
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            try:
                while True:
                    self._events.extend(self.parser.feed(await anext(self._chunks)))
                    if any(event.type != "ping" for event in self._events):
                        return False
            except StopAsyncIteration:
                return True


@contextlib.asynccontextmanager
async def listening(url: str, *, last_event_id: str | None = None) -> AsyncIterator[Listener]:
    """A reader connected to the channel at `url`, its `ready` event already read."""
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    async with (
        httpx.AsyncClient(timeout=WAIT_LIMIT_SECONDS) as client,
        client.stream("GET", url, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        listener = Listener(response)
        ready = await listener.next()
        assert (ready.type, ready.data) == ("ready", "{}")
        yield listener


def post(url: str, body: bytes, *, event: str = "issues", delivery_id: str = "d-1", **params: str) -> httpx.Response:
    """POST a delivery to the channel as GitHub does."""
    headers = delivery_headers(event, body, delivery_id=delivery_id, secret=SECRET)
    return httpx.post(url, content=body, headers=headers, params=params)


def channel_view(server: SandboxServer, name: str = "AbC123") -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{server.url}/_sandbox/channels/{name}").json()
    return answer


def set_outage(server: SandboxServer, *, down: object) -> httpx.Response:
    return httpx.post(f"{server.url}/_sandbox/channels/AbC123/outage", json={"down": down})


def connect(url: str) -> httpx.Response:
    """A reader's first request, its answer read whole (for a channel that refuses it)."""
    return httpx.get(url, headers={"Accept": "text/event-stream"})


async def test_a_delivery_is_relayed_as_smee_io_writes_it(server: SandboxServer) -> None:
    body = compact({"action": "opened", "issue": {"number": 7, "title": 'Café ☕ <b> & "quotes"'}})
    async with listening(channel_url(server)) as listener:
        assert post(channel_url(server), body, delivery_id="d-7", source="github").status_code == 200
        event = await listener.next_message()
    assert event.type == "message"  # no event name: smee-client's `message` listener takes it
    assert event.last_event_id == "1"
    message = json.loads(event.data)
    assert message["x-github-event"] == "issues"
    assert message["x-github-delivery"] == "d-7"
    assert message["x-hub-signature-256"] == delivery_headers("issues", body, secret=SECRET)["X-Hub-Signature-256"]
    assert message["content-type"] == "application/json"
    assert message["body"] == json.loads(body)
    assert message["query"] == {"source": "github"}
    assert isinstance(message["timestamp"], int)
    assert event.data == json.dumps(message, separators=(",", ":"), ensure_ascii=False)  # JSON.stringify's form


async def test_what_lanebot_reads_back_is_the_request_github_made(server: SandboxServer) -> None:
    body = compact({"action": "opened", "issue": {"title": "naïve – ☃"}})
    async with listening(channel_url(server)) as listener:
        post(channel_url(server), body, delivery_id="d-8")
        delivery = relayed_delivery((await listener.next_message()).data)
    assert delivery.body == body  # a compact body comes back byte for byte: its signature still holds
    assert not delivery.raw
    assert (delivery.delivery_id, delivery.event) == ("d-8", "issues")
    assert "host" not in delivery.headers and "content-length" not in delivery.headers


async def test_every_reader_of_a_channel_gets_every_delivery_and_other_channels_none(server: SandboxServer) -> None:
    async with (
        listening(channel_url(server)) as first,
        listening(channel_url(server)) as second,
        listening(channel_url(server, "Other")) as elsewhere,
    ):
        assert channel_view(server)["readers"] == 2
        post(channel_url(server), compact({"n": 1}), delivery_id="d-1")
        post(channel_url(server), compact({"n": 2}), delivery_id="d-2")
        post(channel_url(server, "Other"), compact({"n": 3}), delivery_id="d-3")
        for listener in (first, second):
            received = [json.loads((await listener.next_message()).data) for _ in range(2)]
            assert [(m["x-github-delivery"], m["body"]) for m in received] == [("d-1", {"n": 1}), ("d-2", {"n": 2})]
        assert json.loads((await elsewhere.next_message()).data)["x-github-delivery"] == "d-3"
    assert channel_view(server)["readers"] == 0  # a reader that hangs up leaves the channel


async def test_a_new_reader_gets_only_what_is_posted_after_it_connects(server: SandboxServer) -> None:
    post(channel_url(server), compact({"n": 1}), delivery_id="before")
    async with listening(channel_url(server)) as listener:
        post(channel_url(server), compact({"n": 2}), delivery_id="after")
        event = await listener.next_message()
    assert json.loads(event.data)["x-github-delivery"] == "after"
    assert event.last_event_id == "2"


async def test_a_reader_that_reconnects_with_its_last_event_id_gets_what_it_missed(server: SandboxServer) -> None:
    url = channel_url(server)
    async with listening(url) as listener:
        post(url, compact({"n": 1}), delivery_id="d-1")
        last_id = (await listener.next_message()).last_event_id
    post(url, compact({"n": 2}), delivery_id="d-2")
    post(url, compact({"n": 3}), delivery_id="d-3")
    async with listening(url, last_event_id=last_id) as listener:
        post(url, compact({"n": 4}), delivery_id="d-4")
        received = [await listener.next_message() for _ in range(3)]
    assert [json.loads(event.data)["x-github-delivery"] for event in received] == ["d-2", "d-3", "d-4"]
    assert [event.last_event_id for event in received] == ["2", "3", "4"]


async def test_a_channel_that_goes_down_ends_its_streams_refuses_readers_and_keeps_what_is_posted(
    server: SandboxServer,
) -> None:
    url = channel_url(server)
    async with listening(url) as listener:
        post(url, compact({"n": 1}), delivery_id="d-1")
        await listener.next_message()
        assert set_outage(server, down=True).json()["down"] is True
        assert await listener.ended()
    assert connect(url).status_code == 503
    assert post(url, compact({"n": 2}), delivery_id="d-2").status_code == 200
    assert channel_view(server) == {"readers": 0, "messages": 2, "down": True}
    set_outage(server, down=False).raise_for_status()
    async with listening(url, last_event_id="1") as listener:
        assert json.loads((await listener.next_message()).data)["x-github-delivery"] == "d-2"
    assert set_outage(server, down="yes").status_code == 422


async def test_a_quiet_channel_pings_its_readers(server: SandboxServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(channels, "PING_SECONDS", 0.05)
    async with listening(channel_url(server)) as listener:
        ping = await listener.next()
        post(channel_url(server), compact({"n": 1}), delivery_id="d-1")
        message = await listener.next_message()
    assert (ping.type, ping.data) == ("ping", "{}")
    assert json.loads(message.data)["x-github-delivery"] == "d-1"


def test_a_channel_takes_only_json_objects_under_a_smee_io_name(server: SandboxServer) -> None:
    url = channel_url(server)
    assert httpx.post(url, content=b"action=opened", headers={"content-type": "text/plain"}).status_code == 400
    assert httpx.post(url, content=b"[1, 2]").status_code == 400
    assert httpx.post(channel_url(server, "not.a.name"), content=b"{}").status_code == 400
    assert connect(channel_url(server, "not.a.name")).status_code == 400
    assert channel_view(server)["messages"] == 0


def test_a_channel_opened_in_a_browser_says_how_to_read_it(server: SandboxServer) -> None:
    page = httpx.get(channel_url(server), headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert "text/event-stream" in page.text


async def test_the_sandbox_delivers_to_a_channel_set_as_the_apps_webhook_url_as_github_delivers_to_smee_io(
    server: SandboxServer, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("# demo\n")
    with HumanClient(server.url) as human:
        human.set_webhook(channel_url(server), SECRET)
        human.create_repository("octo-org/relayed", project)
        human.add_collaborator("octo-org/relayed", "octocat", "write")
        async with listening(channel_url(server)) as listener:
            human.open_issue("octo-org/relayed", login="octocat", title="Through the channel ☃")
            # Deliveries of the set-up (the collaborator added) may still be on their way: past them.
            while (delivery := relayed_delivery((await listener.next_message()).data)).event != "issues":
                pass
    assert json.loads(delivery.body)["issue"]["title"] == "Through the channel ☃"
    expected = "sha256=" + hmac.new(SECRET.encode(), delivery.body, hashlib.sha256).hexdigest()
    assert delivery.headers["x-hub-signature-256"] == expected  # the channel's body is the body GitHub signed
