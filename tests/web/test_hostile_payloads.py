"""1,000 hostile deliveries at the webhook intake, through Starlette's TestClient and lanebot's real app
(its lifespan: migrations, the intake's writer, the dispatcher): real GitHub payloads with parts
replaced by hostile values, arbitrary JSON, bodies that are not JSON, form-encoded bodies, odd event
names, content types and signatures.

The property: no answer is a 5xx; a refusal is a 4xx with a clear `message`; everything stored is
then handled by the dispatcher, processed or marked failed with a clear error, never a traceback in
the log, and the dispatcher keeps working (a valid delivery afterwards is still processed).
GitHub itself is respx: tokens are minted, every other request is answered 404.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.parse
import uuid

import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from starlette.testclient import TestClient

from bot.edges.store import db
from bot.web.app import create_app
from tests.app_helpers import WEBHOOK_PATH, as_app_delivery, event_of, make_settings, payload_files, sign

THOUSAND = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
EXAMPLES = [(event_of(path), as_app_delivery(path)) for path in payload_files()]
EVENTS = sorted({event for event, _ in EXAMPLES}) + ["", "ping", "meta", "x" * 300]
_PYTHON_NOISE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|<[a-zA-Z_.]+ object at 0x")
WAIT_LIMIT_S = 120  # a hang guard for the dispatcher to catch up, not a timing assertion

hostile_text = st.text(
    alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(["\x00", "\u202e", "\ufeff", "\n"])),
    max_size=80,
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63, max_value=2**70)
    | st.integers(min_value=-(2**70), max_value=-1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | hostile_text
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(hostile_text, children, max_size=4),
    max_leaves=8,
)
header_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


def paths_of(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            found += paths_of(item, (*prefix, index))
    return found


def replaced(document: object, path: tuple[object, ...], value: object, *, delete: bool) -> object:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        copy = dict(document)
        if not rest and delete:
            copy.pop(head, None)
        else:
            copy[head] = replaced(copy[head], rest, value, delete=delete)
        return copy
    if isinstance(document, list):
        items = list(document)
        items[head] = replaced(items[head], rest, value, delete=delete)  # type: ignore[index]
        return items
    return document


@st.composite
def mutated_example(draw: st.DrawFn) -> tuple[str, object]:
    event, payload = draw(st.sampled_from(EXAMPLES))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(paths_of(payload)[1:] or [()]))
        payload = replaced(payload, path, draw(json_values), delete=draw(st.booleans()))
    return event, payload


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[dict[str, str], bytes]:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "json", "bytes", "form"]))
    if kind in ("mutated", "form"):
        event, payload = draw(mutated_example())
    else:
        event, payload = draw(st.sampled_from(EVENTS) | header_text), draw(json_values)
    content_type = "application/json"
    if kind == "bytes":
        body = draw(st.binary(max_size=400))
        content_type = draw(
            st.sampled_from(["application/json", "text/plain", "", "application/json; charset=latin-1"])
        )
    elif kind == "form":
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        content_type = "application/x-www-form-urlencoded"
    else:
        body = json.dumps(payload, ensure_ascii=draw(st.booleans())).encode()
    signature = draw(st.sampled_from(["valid"] * 6 + ["sha1", "wrong", "none", "garbage"]))
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()), "User-Agent": "GitHub-Hookshot/fuzz"}
    if content_type:
        headers["Content-Type"] = content_type
    if signature == "valid":
        headers["X-Hub-Signature-256"] = sign(body)
    elif signature == "sha1":
        headers["X-Hub-Signature-256"] = "sha1=" + sign(body).removeprefix("sha256=")[:40]
    elif signature == "wrong":
        headers["X-Hub-Signature-256"] = sign(body + b"x")
    elif signature == "garbage":
        headers["X-Hub-Signature-256"] = draw(header_text)
    if draw(st.booleans()) is False and draw(st.integers(0, 9)) == 0:
        headers.pop("X-GitHub-Delivery")
    return headers, body


def github_answering_404() -> respx.MockRouter:
    router = respx.mock(base_url="https://api.github.com", assert_all_called=False)
    router.post(url__regex=r"/app/installations/\d+/access_tokens").respond(
        201, json={"token": "ghs_fuzz", "expires_at": "2099-01-01T00:00:00Z", "permissions": {}}
    )
    router.route().respond(404, json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
    return router


def test_hostile_deliveries_get_no_5xx_and_every_stored_one_is_handled_without_a_traceback(tmp_path, caplog):
    engine = db.make_engine(f"sqlite:///{tmp_path / 'lanebot.db'}")
    app = create_app(make_settings(str(engine.url)), engine=engine)
    answers: dict[int, int] = {}
    caplog.set_level(logging.INFO)
    with github_answering_404(), TestClient(app, base_url="http://lanebot.test") as client:

        @THOUSAND
        @given(deliveries())
        def one(delivery: tuple[dict[str, str], bytes]) -> None:
            headers, body = delivery
            response = client.post(WEBHOOK_PATH, content=body, headers=headers)
            answers[response.status_code] = answers.get(response.status_code, 0) + 1
            assert response.status_code < 500, (response.status_code, response.text, headers)
            if response.status_code >= 400:
                message = response.json()["message"]
                assert isinstance(message, str) and message.strip() and not _PYTHON_NOISE.search(message), message

        one()
        pending = wait_until_handled(engine)
        # The dispatcher still works: a valid delivery afterwards is processed.
        event, payload = (
            next((e, p) for e, p in EXAMPLES if e == "ping") if any(e == "ping" for e, _ in EXAMPLES) else EXAMPLES[0]
        )
        body = json.dumps(payload).encode()
        last = str(uuid.uuid4())
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": last, "X-Hub-Signature-256": sign(body)}
        assert (
            client.post(WEBHOOK_PATH, content=body, headers={**headers, "Content-Type": "application/json"}).status_code
            == 202
        )
        wait_until_handled(engine)
        rows = statuses(engine)
    engine.dispose()
    assert pending == 0, f"{pending} deliveries still pending after {WAIT_LIMIT_S} s"
    assert rows[last][0] in ("processed", "failed")
    for status, error in rows.values():
        assert status in ("processed", "failed")
        if status == "failed":
            assert error and not _PYTHON_NOISE.search(error), error
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.ERROR]
    assert not tracebacks, f"{len(tracebacks)} tracebacks logged, the first: {tracebacks[0].getMessage()}"
    assert sum(answers.values()) >= 1000 and 202 in answers, answers


def statuses(engine) -> dict[str, tuple[str, str | None]]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT delivery_id, status, error FROM deliveries")).all()
    return {row[0]: (row[1], row[2]) for row in rows}


def wait_until_handled(engine) -> int:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while True:
        pending = sum(1 for status, _ in statuses(engine).values() if status == "pending")
        if pending == 0 or time.monotonic() > deadline:
            return pending
        time.sleep(0.2)
