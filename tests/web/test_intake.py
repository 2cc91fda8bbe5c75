"""The webhook intake: only GitHub-signed deliveries are stored, each once, and answered at once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import sqlite3
import threading
import time
import urllib.parse

import anyio
import pytest
import respx
from sqlalchemy import text
from sqlmodel import select

from bot.edges.store import db, deliveries
from bot.edges.store.models import Delivery, Installation
from bot.web import intake as webhooks
from tests.app_helpers import (
    SECRET,
    WEBHOOK_PATH,
    as_app_delivery,
    delivery_headers,
    event_of,
    make_settings,
    payload_files,
    post_delivery,
    running_lanebot,
    settle,
    sign,
)

pytestmark = pytest.mark.anyio

ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))


@pytest.fixture
def sqlite_engine(tmp_path):
    """For refusals, which never reach the database: one backend is enough."""
    engine = db.make_engine(f"sqlite:///{tmp_path / 'lanebot.db'}")
    db.migrate(engine)
    yield engine
    engine.dispose()


def stored(engine) -> list[Delivery]:
    with db.session(engine) as session:
        return list(session.exec(select(Delivery).order_by(Delivery.seq)).all())


async def test_every_real_github_payload_is_stored_and_routed(engine):
    files = payload_files()
    assert len(files) >= 50, "the shared payload examples are missing"
    sent = {}
    # Handlers may read a repository's .github/lanebot.yml (is `bug` its trigger label?): GitHub
    # answers with a token and "no such file", as it would for a repository without one.
    with respx.mock(base_url="https://api.github.com", assert_all_called=False) as github:
        github.post(url__regex=r"/app/installations/\d+/access_tokens").respond(
            201, json={"token": "ghs_test", "expires_at": "2099-01-01T00:00:00Z", "permissions": {}}
        )
        github.get(url__regex=r"/contents/").respond(
            404, json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
        )
        await _send_every_payload(engine, files, sent)
    _assert_stored_and_routed(engine, sent)


async def _send_every_payload(engine, files, sent) -> None:
    async with running_lanebot(engine) as (app, client):
        for number, path in enumerate(files):
            delivery_id = f"delivery-{number}"
            payload = as_app_delivery(path)
            response = await post_delivery(client, event_of(path), payload, delivery_id=delivery_id)
            assert (response.status_code, response.json()) == (202, {"delivery": delivery_id, "stored": True}), path
            sent[delivery_id] = (path, payload)
        await settle(app)


def _assert_stored_and_routed(engine, sent) -> None:
    rows = {row.delivery_id: row for row in stored(engine)}
    assert rows.keys() == sent.keys()
    for delivery_id, (path, payload) in sent.items():
        row = rows[delivery_id]
        assert row.event == event_of(path), path
        assert row.action == payload.get("action"), path
        assert row.installation_id == payload["installation"]["id"], path
        assert row.repository == (payload.get("repository") or {}).get("full_name"), path
        assert json.loads(row.body) == payload, path
        # Routed: every handler ran. Only the example ping fails, on purpose: it comes from a
        # repository webhook, not from the App's (see bot/web/handlers/ping.py).
        expected = ("failed", "ForeignHookError") if row.event == "ping" else ("processed", None)
        assert (row.status, (row.error or "").split(":")[0] or None) == expected, path
    with db.session(engine) as session:
        installations = {row.id: row for row in session.exec(select(Installation)).all()}
    assert {957387, 16598467, 2} <= installations.keys()


async def test_installation_events_keep_the_installation_rows_current(engine):
    by_name = {f"{event_of(path)}/{path.name.split('.')[0]}": as_app_delivery(path) for path in payload_files()}
    async with running_lanebot(engine) as (app, client):
        await post_delivery(client, "installation", by_name["installation/created"])
        await settle(app)
        with db.session(engine) as session:
            created = session.get(Installation, 957387)
        assert (created.account_login, created.account_type, created.repository_selection) == (
            "Codertocat",
            "User",
            "selected",
        )
        assert (created.suspended, created.deleted) == (False, False)

        await post_delivery(client, "installation", by_name["installation/suspend"])
        await settle(app)
        with db.session(engine) as session:
            assert session.get(Installation, 16598467).suspended is True
        await post_delivery(client, "installation", by_name["installation/unsuspend"])
        await settle(app)
        with db.session(engine) as session:
            assert session.get(Installation, 16598467).suspended is False

        await post_delivery(client, "installation", by_name["installation/deleted"])
        await settle(app)
        with db.session(engine) as session:
            assert session.get(Installation, 2).deleted is True

        await post_delivery(client, "installation_repositories", by_name["installation_repositories/added"])
        await settle(app)
        with db.session(engine) as session:
            assert session.get(Installation, 957387).repository_selection == "selected"


async def test_a_wrong_signature_is_refused_with_401_and_nothing_stored(sqlite_engine):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body, secret="not-the-secret")
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 401
    assert "signature does not match" in response.json()["message"]
    assert stored(sqlite_engine) == []


async def test_a_missing_signature_is_refused_with_401(sqlite_engine):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body)
    del headers["X-Hub-Signature-256"]
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 401
    assert "X-Hub-Signature-256 header is missing" in response.json()["message"]
    assert stored(sqlite_engine) == []


async def test_a_valid_sha1_signature_alone_is_not_enough(sqlite_engine):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body)
    del headers["X-Hub-Signature-256"]
    headers["X-Hub-Signature"] = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 401
    assert stored(sqlite_engine) == []


@pytest.mark.parametrize("header", ["X-GitHub-Event", "X-GitHub-Delivery"])
async def test_a_missing_event_or_delivery_header_is_a_400_naming_it(sqlite_engine, header):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body)
    del headers[header]
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 400
    assert f"the {header} header is missing" in response.json()["message"]
    assert stored(sqlite_engine) == []


@pytest.mark.parametrize(
    ("body", "content_type", "says"),
    [
        (json.dumps(ISSUE_OPENED).encode()[:-40], "application/json", "not valid JSON"),
        (b'[{"action": "opened"}]', "application/json", "not an object (got list)"),
        (b"", "application/json", "not an object (got NoneType)"),
        (b"payload=%7Bnope", "application/x-www-form-urlencoded", "not valid JSON"),
        (b"other=1", "application/x-www-form-urlencoded", "no 'payload' field"),
        (json.dumps(ISSUE_OPENED).encode(), "text/plain", "unsupported content type 'text/plain'"),
        (b'{"action": "opened"}', "application/json; charset=klingon", "not valid klingon text"),
    ],
    ids=["truncated-json", "json-array", "empty", "form-bad-json", "form-no-payload", "text-plain", "unknown-charset"],
)
async def test_a_signed_body_that_is_not_a_json_object_is_a_400_saying_why(sqlite_engine, body, content_type, says):
    headers = delivery_headers("issues", body, content_type=content_type)
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 400
    assert says in response.json()["message"]
    assert stored(sqlite_engine) == []


async def test_a_form_encoded_delivery_is_stored_as_its_json_payload(sqlite_engine):
    payload_text = json.dumps(ISSUE_OPENED)
    body = urllib.parse.urlencode({"payload": payload_text}).encode()
    headers = delivery_headers("issues", body, delivery_id="form-1", content_type="application/x-www-form-urlencoded")
    async with running_lanebot(sqlite_engine) as (app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
        await settle(app)
    assert response.status_code == 202
    [row] = stored(sqlite_engine)
    assert (row.delivery_id, row.event, row.action, row.status) == ("form-1", "issues", "opened", "processed")
    assert row.body == payload_text.encode()


async def test_a_body_declared_over_25_mb_is_refused_before_it_is_read(sqlite_engine):
    chunks_sent = 0

    async def body():
        nonlocal chunks_sent
        for _ in range(4):
            chunks_sent += 1
            yield b"x" * 1024

    headers = delivery_headers("issues", b"")
    headers["Content-Length"] = str(webhooks.MAX_BODY_BYTES + 1)
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body(), headers=headers)
    assert response.status_code == 413
    assert "larger than 25 MB" in response.json()["message"]
    assert chunks_sent == 0
    assert stored(sqlite_engine) == []


async def test_a_streamed_body_is_refused_once_it_passes_25_mb(sqlite_engine):
    megabyte = b" " * (1024 * 1024)
    chunks_sent = 0

    async def body():
        nonlocal chunks_sent
        for _ in range(40):
            chunks_sent += 1
            yield megabyte

    headers = delivery_headers("issues", b"")  # no Content-Length: the body is streamed
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body(), headers=headers)
    assert response.status_code == 413
    assert chunks_sent == 26  # 25 MB plus the chunk that went over, not all 40
    assert stored(sqlite_engine) == []


async def test_a_redelivery_answers_200_and_stores_nothing_more(engine):
    async with running_lanebot(engine) as (app, client):
        first = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="same-id")
        await settle(app)
        second = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="same-id")
    assert (first.status_code, first.json()["stored"]) == (202, True)
    assert (second.status_code, second.json()["stored"]) == (200, False)
    [row] = stored(engine)
    assert row.status == "processed"


async def test_twenty_concurrent_copies_of_one_delivery_store_one_row(engine):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body, delivery_id="raced")
    async with running_lanebot(engine) as (app, client):
        responses = await asyncio.gather(*(client.post(WEBHOOK_PATH, content=body, headers=headers) for _ in range(20)))
        await settle(app)
    assert sorted(response.status_code for response in responses) == [200] * 19 + [202]
    assert [row.delivery_id for row in stored(engine)] == ["raced"]


async def test_a_ping_is_answered_and_stored_like_any_event(sqlite_engine):
    ping = {"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {"type": "App", "id": 1, "app_id": 4711}}
    async with running_lanebot(sqlite_engine) as (app, client):
        response = await post_delivery(client, "ping", ping, delivery_id="ping-1")
        await settle(app)
    assert response.status_code == 202
    [row] = stored(sqlite_engine)
    assert (row.event, row.action, row.status) == ("ping", None, "processed")


def test_githubs_documented_signature_vector_passes_verification():
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
    body = b"Hello, World!"
    signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(body, "It's a Secret to Everybody") == signature
    headers = {
        "x-hub-signature-256": signature,
        "x-github-event": "ping",
        "x-github-delivery": "vector",
        "content-type": "application/json",
    }
    with pytest.raises(webhooks.IntakeError) as refused:
        webhooks.verify(headers, body, "It's a Secret to Everybody")
    # The signature is accepted: what is refused is the body, which is not JSON.
    assert (refused.value.status, "not valid JSON" in refused.value.message) == (400, True)
    with pytest.raises(webhooks.IntakeError) as wrong_secret:
        webhooks.verify(headers, body, "another secret")
    assert wrong_secret.value.status == 401


async def test_githubs_documented_signature_vector_is_accepted_by_the_intake(sqlite_engine):
    body = b"Hello, World!"
    headers = {
        "X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "vector",
        "Content-Type": "application/json",
    }
    settings = make_settings(webhook_secret="It's a Secret to Everybody")
    async with running_lanebot(sqlite_engine, settings=settings) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 400  # past the signature (not 401); "Hello, World!" is not a payload
    assert "not valid JSON" in response.json()["message"]


def test_the_stored_fields_come_from_the_payload():
    body = json.dumps(ISSUE_OPENED).encode()
    headers = {name.lower(): value for name, value in delivery_headers("issues", body, delivery_id="d-1").items()}
    delivery = webhooks.verify(headers, body, SECRET)
    assert (delivery.delivery_id, delivery.event, delivery.action) == ("d-1", "issues", "opened")
    assert (delivery.installation_id, delivery.repository) == (4242, "Codertocat/Hello-World")
    assert delivery.payload == body
    # The replay check's key: the signature verified, so the body is not hashed again.
    assert "sha256=" + delivery.body_mac.hex() == sign(body)


async def test_neither_the_body_nor_the_signature_reaches_the_log(sqlite_engine, caplog):
    caplog.set_level("DEBUG")
    marker = "hunter2-marker"
    for secret in ("wrong", SECRET):
        body = json.dumps({**ISSUE_OPENED, "comment": marker}).encode()
        headers = delivery_headers("issues", body, secret=secret)
        async with running_lanebot(sqlite_engine) as (app, client):
            response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
            await settle(app)
        assert marker not in caplog.text and headers["X-Hub-Signature-256"] not in caplog.text, response.status_code
        assert marker not in response.text and headers["X-Hub-Signature-256"] not in response.text


# -- limits: sha256 only, bodies read at once, the store's time ---------------------------------


@pytest.mark.parametrize(
    "signature",
    [
        "sha1={sha1}",  # gidgethub takes a SHA-1 HMAC in this header; lanebot does not
        "sha256={sha256_upper}",
        "sha256={sha256}00",
        "sha256= {sha256}",
    ],
    ids=["sha1-hmac", "uppercase-hex", "too-long", "space"],
)
async def test_only_sha256_and_64_hex_digits_pass_in_x_hub_signature_256(sqlite_engine, signature):
    body = json.dumps(ISSUE_OPENED).encode()
    headers = delivery_headers("issues", body)
    sha256 = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    sha1 = hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    headers["X-Hub-Signature-256"] = signature.format(sha1=sha1, sha256=sha256, sha256_upper=sha256.upper())
    async with running_lanebot(sqlite_engine) as (_app, client):
        response = await client.post(WEBHOOK_PATH, content=body, headers=headers)
    assert response.status_code == 401
    assert "lanebot accepts only sha256" in response.json()["message"]
    assert stored(sqlite_engine) == []


class SlowBody:
    """A request body sent in 64 KB chunks that stops after `before_pause` chunks until released."""

    def __init__(self, chunks: int, before_pause: int) -> None:
        self.chunks, self.before_pause = chunks, before_pause
        self.paused, self.release = asyncio.Event(), asyncio.Event()

    async def __aiter__(self):
        for number in range(self.chunks):
            if number == self.before_pause:
                self.paused.set()
                await self.release.wait()
            yield b" " * 65536


async def test_one_body_more_than_may_be_read_at_once_is_answered_503_and_the_others_go_on(sqlite_engine):
    settings = make_settings(str(sqlite_engine.url), intake_max_bodies=3)
    slow = [SlowBody(chunks=4, before_pause=2) for _ in range(3)]
    async with running_lanebot(sqlite_engine, settings=settings) as (app, client):
        posts = [
            asyncio.create_task(client.post(WEBHOOK_PATH, content=body, headers=delivery_headers("issues", b"")))
            for body in slow
        ]
        with anyio.fail_after(10):
            for body in slow:
                await body.paused.wait()
            refused = await client.post(WEBHOOK_PATH, content=b"{}", headers=delivery_headers("issues", b"{}"))
        assert refused.status_code == 503
        assert "reading 3 webhook bodies already" in refused.json()["message"]
        assert app.state.budget.reading == 3
        for body in slow:
            body.release.set()
        answers = await asyncio.gather(*posts)
        assert app.state.budget.reading == 0
    assert {answer.status_code for answer in answers} == {401}  # read, then refused for their signature


async def test_the_bodies_read_at_once_hold_no_more_than_the_byte_budget(sqlite_engine):
    budget = 1024 * 1024
    settings = make_settings(str(sqlite_engine.url), intake_max_buffered_bytes=budget)
    slow = [SlowBody(chunks=8, before_pause=4) for _ in range(2)]  # 512 KB each, 256 KB before the pause
    async with running_lanebot(sqlite_engine, settings=settings) as (app, client):
        posts = [
            asyncio.create_task(client.post(WEBHOOK_PATH, content=body, headers=delivery_headers("issues", b"")))
            for body in slow
        ]
        with anyio.fail_after(10):
            for body in slow:
                await body.paused.wait()
            too_much = b" " * (600 * 1024)  # 512 KB held + 600 KB declared > 1 MB: refused before it is read
            refused = await client.post(WEBHOOK_PATH, content=too_much, headers=delivery_headers("issues", too_much))
        assert refused.status_code == 503
        assert "holds 0.5 of its 1.0 MB for unverified bodies" in refused.json()["message"]
        for body in slow:
            body.release.set()
        answers = await asyncio.gather(*posts)
        peak = app.state.budget.peak_buffered
    assert [answer.status_code for answer in answers] == [401, 401]  # 1 MB in all fits: read, then refused
    assert peak <= budget


@contextlib.contextmanager
def write_lock_held(engine):
    """Another connection holds the database's write lock (SQLite) or the deliveries table (PostgreSQL)."""
    if engine.dialect.name == "sqlite":
        holder = sqlite3.connect(engine.url.database, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    with engine.connect() as connection:
        transaction = connection.begin()
        connection.execute(text("LOCK TABLE deliveries IN EXCLUSIVE MODE"))
        try:
            yield
        finally:
            transaction.rollback()


async def test_a_database_locked_longer_than_the_store_timeout_answers_503_in_time_and_a_redelivery_is_stored(engine):
    assert make_settings().intake_store_timeout < 10  # GitHub's wait; the test lowers it to stay fast
    settings = make_settings(str(engine.url), intake_store_timeout=1.0)
    async with running_lanebot(engine, settings=settings) as (app, client):
        await app.state.dispatcher.stop()
        with write_lock_held(engine):  # held as long as the test needs: a 12 s lock answers the same way
            started = time.monotonic()
            refused = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="locked-out")
            elapsed = time.monotonic() - started
        redelivered = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="locked-out")
    assert refused.status_code == 503, refused.text
    assert "did not store this delivery within 1 s" in refused.json()["message"]
    assert "lanebot deliveries recover" in refused.json()["message"]
    assert elapsed < 5
    assert redelivered.status_code == 202
    assert [row.delivery_id for row in stored(engine)] == ["locked-out"]


async def test_a_signed_body_replayed_under_a_new_delivery_id_is_answered_200_and_not_stored(sqlite_engine):
    async with running_lanebot(sqlite_engine) as (app, client):
        first = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="original")
        replayed = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="replayed")
        redelivered = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="original")
        await settle(app)
    assert first.status_code == 202
    assert (replayed.status_code, replayed.json()["stored"]) == (200, False)
    assert "stored as delivery original" in replayed.json()["message"]
    assert (redelivered.status_code, redelivered.json()["message"]) == (
        200,
        "already stored; a redelivery changes nothing",
    )
    assert [row.delivery_id for row in stored(sqlite_engine)] == ["original"]


def test_bodies_are_remembered_for_the_window_and_up_to_the_count():
    now = [0.0]
    recent = webhooks.RecentBodies(window_seconds=60, max_entries=2, clock=lambda: now[0])

    def delivery(delivery_id: str, body: bytes) -> webhooks.VerifiedDelivery:
        return webhooks.VerifiedDelivery(delivery_id, "issues", "opened", 1, "o/r", body, hashlib.sha256(body).digest())

    recent.remember(delivery("a", b"{1}"))
    assert recent.stored_as(delivery("b", b"{1}")) == "a"
    assert recent.stored_as(delivery("a", b"{1}")) is None  # its own redelivery: the unique id's business
    recent.remember(delivery("c", b"{2}"))
    recent.remember(delivery("d", b"{3}"))
    assert recent.stored_as(delivery("e", b"{1}")) is None  # pushed out by the count
    now[0] = 61.0
    assert recent.stored_as(delivery("f", b"{3}")) is None  # past the window


async def test_with_a_replay_window_of_0_the_same_body_under_a_new_id_is_stored(sqlite_engine):
    settings = make_settings(str(sqlite_engine.url), replay_window=0.0)
    async with running_lanebot(sqlite_engine, settings=settings) as (app, client):
        answers = [await post_delivery(client, "issues", ISSUE_OPENED, delivery_id=name) for name in ("one", "two")]
        await settle(app)
    assert [answer.status_code for answer in answers] == [202, 202]


async def test_a_delivery_behind_this_processs_own_stuck_writer_is_answered_503_in_time(sqlite_engine):
    settings = make_settings(str(sqlite_engine.url), intake_store_timeout=1.0)
    lock = deliveries._SQLITE_WRITE_LOCKS.setdefault(str(sqlite_engine.url), threading.Lock())
    async with running_lanebot(sqlite_engine, settings=settings) as (_app, client):
        with lock:  # as the dispatcher's write does while it waits out another process's lock
            started = time.monotonic()
            refused = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="behind")
            elapsed = time.monotonic() - started
        redelivered = await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="behind")
    assert (refused.status_code, elapsed < 5) == (503, True)
    assert redelivered.status_code == 202
