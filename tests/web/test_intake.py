"""The webhook intake: only GitHub-signed deliveries are stored, each once, and answered at once."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import urllib.parse

import pytest
import respx
from sqlmodel import select

from bot.edges.store import db
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
