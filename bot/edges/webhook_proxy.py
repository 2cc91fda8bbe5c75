"""Receiving webhooks through a relay channel (LANEBOT_WEBHOOK_PROXY_URL, Probot's WEBHOOK_PROXY_URL):
for a lanebot GitHub cannot reach, such as one on a laptop.

GitHub delivers to the channel (a smee.io URL, say); the channel streams each delivery as a
server-sent event; `WebhookProxy` reads the stream and hands every relayed delivery, its headers
and its body's bytes as relayed, to lanebot's own webhook endpoint (`deliver`), so the signature
check and every limit of the intake apply unchanged: a relayed delivery whose signature does
not match is refused there and logged here, never processed. Nothing in a relay message is
trusted; anyone who knows a channel's URL can post to it.

When the stream fails or ends, the proxy connects again after a delay that doubles up to 30 s
(the stream's `retry` is the first delay when it sends one), sending `Last-Event-ID` so that a
channel that keeps its events sends those missed. smee.io numbers events per connection and
keeps none: what GitHub delivered while lanebot was disconnected is lost to the channel, and
`lanebot deliveries recover` asks GitHub to deliver it again (with a relay channel it asks for every
event lanebot has not stored, GitHub's 2xx being the channel's). `on_connected` is told each time a
stream opens (how many so far), so that `lanebot serve` runs that recovery once it can hear the
redeliveries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bot.core.sse import RelayedDelivery, RelayError, SSEEvent, SSEParser, reconnect_delay, relayed_delivery

log = logging.getLogger(__name__)

# A channel that says nothing this long is taken for dead (smee.io pings every 30 s).
READ_TIMEOUT_SECONDS = 90.0
# Deliver: hand one relayed delivery to the intake; the intake's status and its message.
Deliver = Callable[[RelayedDelivery], Awaitable[tuple[int, str]]]
Sleep = Callable[[float], Awaitable[Any]]


class WebhookProxy:
    """Reads one relay channel and delivers what it relays, until `stop`."""

    def __init__(
        self,
        channel_url: str,
        deliver: Deliver,
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        on_stop: Callable[[], Awaitable[None]] | None = None,
        on_connected: Callable[[int], None] | None = None,
    ) -> None:
        self.channel_url = channel_url
        self.deliver = deliver
        self.sleep = sleep
        self._on_stop = on_stop
        self._on_connected = on_connected
        self._client = client
        self._owns_client = client is None
        self._task: asyncio.Task[None] | None = None
        self._parser = SSEParser()
        self._heard = False
        self.connections = 0  # streams opened so far
        self.relayed = 0  # deliveries handed to the intake so far

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="webhook-proxy")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
            log.info("stopped reading the relay channel %s (%d deliveries relayed)", self.channel_url, self.relayed)
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None
        if self._on_stop is not None:
            await self._on_stop()
            self._on_stop = None

    async def run(self) -> None:
        log.info("receiving webhooks through the relay channel %s", self.channel_url)
        failures = 0
        while True:
            self._heard = False
            try:
                await self._read_stream()
                why = "the relay channel ended the stream"
            except httpx.HTTPError as error:
                why = f"the relay channel connection failed ({type(error).__name__}: {error})"
            except ChannelRefused as refused:
                why = str(refused)
            failures = 0 if self._heard else failures + 1
            delay = reconnect_delay(failures, self._parser.retry_ms)
            log.warning("%s; connecting again in %g s", why, delay)
            await self.sleep(delay)

    async def _read_stream(self) -> None:
        """Read one connection's events until it ends (`_heard`: whether it carried any)."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=READ_TIMEOUT_SECONDS))
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self._parser.last_event_id:
            headers["Last-Event-ID"] = self._parser.last_event_id
        async with self._client.stream("GET", self.channel_url, headers=headers) as response:
            _check_stream(response)
            self.connections += 1
            if self._on_connected is not None:
                self._on_connected(self.connections)
            self._parser = SSEParser(last_event_id=self._parser.last_event_id, retry_ms=self._parser.retry_ms)
            async for chunk in response.aiter_bytes():
                for event in self._parser.feed(chunk):
                    self._heard = True
                    await self._handle(event)

    async def _handle(self, event: SSEEvent) -> None:
        if event.type == "ready":
            log.info("connected to the relay channel %s", self.channel_url)
        elif event.type != "message":
            return  # smee.io's pings, and whatever else a channel sends
        elif event.oversized:
            log.warning(
                "the relay channel sent an event larger than lanebot reads (id %r); skipped", event.last_event_id
            )
        else:
            await self._relay(event)

    async def _relay(self, event: SSEEvent) -> None:
        try:
            delivery = relayed_delivery(event.data)
        except RelayError as error:
            log.warning(
                "the relay channel sent a message that is not a delivery (id %r): %s", event.last_event_id, error
            )
            return
        try:
            status, message = await self.deliver(delivery)
        except httpx.HTTPError as error:  # headers httpx will not send, say
            log.warning("relayed delivery %s could not be handed on: %s", delivery.delivery_id, error)
            return
        self.relayed += 1
        level = logging.INFO if 200 <= status < 300 else logging.WARNING
        outcome = "accepted" if 200 <= status < 300 else "refused"
        log.log(
            level, "relayed delivery %s (%s) %s: %d %s", delivery.delivery_id, delivery.event, outcome, status, message
        )


class ChannelRefused(Exception):
    """The channel answered, but not with an event stream."""


def _check_stream(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise ChannelRefused(f"the relay channel answered {response.status_code}, not an event stream")
    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "text/event-stream":
        raise ChannelRefused(
            f"the relay channel answered {kind or 'no content type'}, not text/event-stream: "
            "is LANEBOT_WEBHOOK_PROXY_URL a channel URL such as https://smee.io/AbC123?"
        )


def relay_to_app(
    channel_url: str, app: Any, webhook_path: str, *, on_connected: Callable[[int], None] | None = None
) -> WebhookProxy:
    """A proxy that delivers what `channel_url` relays to `webhook_path` of the ASGI `app`."""
    deliver, close = asgi_intake(app, webhook_path)
    return WebhookProxy(channel_url, deliver, on_stop=close, on_connected=on_connected)


def asgi_intake(app: Any, webhook_path: str) -> tuple[Deliver, Callable[[], Awaitable[None]]]:
    """A `Deliver` that POSTs to `webhook_path` of the ASGI `app` in this process (lanebot's own
    endpoint, through its whole stack), and the function that closes it."""
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://lanebot.invalid")

    async def deliver(delivery: RelayedDelivery) -> tuple[int, str]:
        headers = {**delivery.headers, "content-type": "application/json"}
        response = await client.post(webhook_path, content=delivery.body, headers=headers)
        return response.status_code, _message(response)

    return deliver, client.aclose


def _message(response: httpx.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return ""
    return str(answer.get("message", "")) if isinstance(answer, dict) else ""
