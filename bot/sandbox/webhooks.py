"""Webhook deliveries: sign, POST to the App's webhook URL in order, record, redeliver.

As GitHub does: events the App is not subscribed to are not sent; with no webhook URL nothing
is sent; the body is compact JSON signed with HMAC-SHA256 (and SHA-1) of the webhook secret;
every attempt is recorded with its request and response, listed newest first; a failure
(connection refused, timeout, non-2xx) is recorded and never retried by itself; a redelivery
sends the same body under the same GUID and is recorded as a new delivery with
`redelivery: true`. Sending happens on one background task, so the request that caused an event
never waits for the App, and deliveries leave in the order their events happened.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bot.sandbox.events import Event
from bot.sandbox.shapes import timestamp
from bot.sandbox.state import AppRecord

log = logging.getLogger(__name__)
HOOKSHOT_VERSION = "7d1f3a2"  # the hex build tag GitHub puts after GitHub-Hookshot/
ALWAYS_DELIVERED = frozenset({"installation", "installation_repositories", "github_app_authorization", "ping"})


@dataclass
class Delivery:
    """One attempt to deliver one event, as GET /app/hook/deliveries/{id} shows it."""

    id: int
    guid: str
    event: str
    action: str | None
    installation_id: int | None
    repository_id: int | None
    url: str
    redelivery: bool
    request_headers: dict[str, str]
    body: bytes = field(repr=False)
    delivered_at: datetime | None = None
    duration: float = 0.0
    status: str = "pending"
    status_code: int = 0
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": timestamp(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": self.duration,
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": None,
        }

    def detail(self) -> dict[str, Any]:
        shape = self.summary()
        shape["url"] = self.url
        shape["request"] = {"headers": dict(self.request_headers), "payload": json.loads(self.body)}
        shape["response"] = {"headers": dict(self.response_headers), "payload": self.response_body}
        return shape

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 300


def signature_headers(body: bytes, secret: str | None) -> dict[str, str]:
    if not secret:
        return {}
    return {
        "X-Hub-Signature": "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }


def encode_payload(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookSender:
    """Queues events for the App's webhook and sends them one after another."""

    def __init__(
        self,
        app: AppRecord,
        *,
        clock: Callable[[], datetime],
        delivery_log: Path | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.app = app
        self.clock = clock
        self.delivery_log = delivery_log
        self.timeout = timeout
        self._client = client
        self._owns_client = client is None
        self._queue: asyncio.Queue[Delivery] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._next_id = 10_000_001
        self.deliveries: list[Delivery] = []  # attempted, oldest first
        if delivery_log is not None:
            delivery_log.mkdir(parents=True, exist_ok=True)

    def subscribed(self, event: str) -> bool:
        return event in ALWAYS_DELIVERED or event in self.app.events

    def publish(self, event: Event) -> Delivery | None:
        """Queue the event for delivery (call from the event loop); None when GitHub would not send it."""
        if not self.app.webhook_url or not self.subscribed(event.name):
            return None
        body = encode_payload(event.payload)
        delivery = self._delivery(
            str(uuid.uuid4()),
            event.name,
            event.action,
            event.installation_id,
            event.repository_id,
            body,
            redelivery=False,
        )
        self._enqueue(delivery)
        return delivery

    def redeliver(self, delivery_id: int) -> Delivery | None:
        """Send a recorded delivery again: same GUID and body, freshly signed; None if unknown."""
        original = self.find(delivery_id)
        if original is None or not self.app.webhook_url:
            return None
        again = self._delivery(
            original.guid,
            original.event,
            original.action,
            original.installation_id,
            original.repository_id,
            original.body,
            redelivery=True,
        )
        self._enqueue(again)
        return again

    def find(self, delivery_id: int) -> Delivery | None:
        return next((d for d in self.deliveries if d.id == delivery_id), None)

    def newest_first(self) -> list[Delivery]:
        return list(reversed(self.deliveries))

    async def drain(self) -> None:
        """Wait until every queued delivery has been attempted."""
        if self._queue is not None:
            await self._queue.join()

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    def _delivery(
        self,
        guid: str,
        event: str,
        action: str | None,
        installation_id: int | None,
        repository_id: int | None,
        body: bytes,
        *,
        redelivery: bool,
    ) -> Delivery:
        delivery_id = self._next_id
        self._next_id += 1
        headers = {
            "Accept": "*/*",
            "Content-Type": "application/json",
            "User-Agent": f"GitHub-Hookshot/{HOOKSHOT_VERSION}",
            "X-GitHub-Delivery": guid,
            "X-GitHub-Event": event,
            "X-GitHub-Hook-ID": str(self.app.hook_id),
            "X-GitHub-Hook-Installation-Target-ID": str(self.app.id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            **signature_headers(body, self.app.webhook_secret),
        }
        return Delivery(
            delivery_id,
            guid,
            event,
            action,
            installation_id,
            repository_id,
            self.app.webhook_url or "",
            redelivery,
            headers,
            body,
        )

    def _enqueue(self, delivery: Delivery) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._work(self._queue), name="sandbox-webhooks")
        self._queue.put_nowait(delivery)

    async def _work(self, queue: asyncio.Queue[Delivery]) -> None:
        while True:
            delivery = await queue.get()
            try:
                await self._send(delivery)
            except Exception:  # a bug here must not stop later deliveries
                log.exception("delivering %s %s failed unexpectedly", delivery.event, delivery.guid)
            finally:
                queue.task_done()

    async def _send(self, delivery: Delivery) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient()
        delivery.delivered_at = self.clock()
        started = time.perf_counter()
        try:
            response = await self._client.post(
                delivery.url, content=delivery.body, headers=delivery.request_headers, timeout=self.timeout
            )
        except httpx.TimeoutException:
            delivery.status, delivery.status_code = "timed out", 504
        except httpx.HTTPError as error:
            delivery.status, delivery.status_code = "failed to connect to host", 502
            log.info("webhook %s to %s failed: %s", delivery.guid, delivery.url, type(error).__name__)
        else:
            delivery.status_code = response.status_code
            delivery.status = (
                "OK" if 200 <= response.status_code < 300 else f"Invalid HTTP Response: {response.status_code}"
            )
            delivery.response_headers = dict(response.headers)
            delivery.response_body = response.text
        delivery.duration = round(time.perf_counter() - started, 2)
        self.deliveries.append(delivery)
        self._write_log(delivery)

    def _write_log(self, delivery: Delivery) -> None:
        if self.delivery_log is None:
            return
        name = f"{delivery.id}-{delivery.event}{'.' + delivery.action if delivery.action else ''}.json"
        (self.delivery_log / name).write_text(json.dumps(delivery.detail(), indent=2, ensure_ascii=False) + "\n")
