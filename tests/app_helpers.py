"""Helpers shared by the web-app tests: settings, signed deliveries, a running app, real payloads."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.applications import Starlette

from bot.edges.settings import Settings
from bot.web.app import create_app

SECRET = "test-webhook-secret"
WEBHOOK_PATH = "/api/github/webhooks"
PAYLOADS = Path("/work/shared/github/webhooks")
# Deliveries to a GitHub App carry the installation; octokit's examples mostly do not.
TEST_INSTALLATION = {"id": 4242, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="}
WAIT_LIMIT_SECONDS = 20  # a hang guard, not a timing assertion


@functools.cache
def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def make_settings(database_url: str = "sqlite://", **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        app_id="4711",
        private_key=private_key_pem(),
        webhook_secret=SECRET,
        webhook_path=WEBHOOK_PATH,
        database_url=database_url,
    )
    values.update(overrides)
    return Settings(**values)


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def delivery_headers(
    event: str,
    body: bytes,
    *,
    delivery_id: str | None = None,
    secret: str = SECRET,
    content_type: str = "application/json",
) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": content_type,
        "User-Agent": "GitHub-Hookshot/test",
    }


def payload_files() -> list[Path]:
    return sorted(PAYLOADS.glob("**/*.json"))


def event_of(path: Path) -> str:
    """The X-GitHub-Event of an example payload: its folder's name."""
    return path.parent.name


def as_app_delivery(path: Path) -> dict[str, Any]:
    """An example payload as a GitHub App receives it: with an `installation`."""
    payload = json.loads(path.read_text())
    payload.setdefault("installation", TEST_INSTALLATION)
    return payload


@contextlib.asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan started (migrations, dispatcher), and a client talking to it."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lanebot.test") as client:
            yield client


@contextlib.asynccontextmanager
async def running_lanebot(engine: Any, **create_options: Any) -> AsyncIterator[tuple[Starlette, httpx.AsyncClient]]:
    settings = create_options.pop("settings", None) or make_settings(str(engine.url))
    app = create_app(settings, engine=engine, **create_options)
    async with running(app) as client:
        yield app, client


async def settle(app: Starlette) -> None:
    """Wait until the dispatcher has handled everything stored so far."""
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        await app.state.dispatcher.wait_idle()


async def post_delivery(client: httpx.AsyncClient, event: str, payload: Any, **header_options: Any) -> httpx.Response:
    body = json.dumps(payload).encode()
    return await client.post(WEBHOOK_PATH, content=body, headers=delivery_headers(event, body, **header_options))
