"""The webhook intake: prove a delivery came from GitHub, store it, answer at once.

GitHub waits 10 seconds for a 2xx and never redelivers by itself, so the intake does no work
beyond verifying and storing: the dispatcher (bot/dispatcher.py) handles the stored delivery
after the answer has gone. A delivery that got a 2xx is in the database.

Answers, each with a JSON body whose `message` says what was wrong:
  202 stored · 200 already stored (a redelivery) · 400 malformed · 401 unsigned or wrongly
  signed · 413 over GitHub's 25 MB payload cap.
The body and the signature are never logged.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from dataclasses import dataclass
from email.message import Message
from typing import Any, AsyncIterator, Callable

import gidgethub
from gidgethub import sansio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from bot.store import deliveries

log = logging.getLogger(__name__)

# GitHub caps webhook payloads at 25 MB and drops larger ones; anything bigger is not GitHub.
MAX_BODY_BYTES = 25 * 1024 * 1024

SUPPORTED_CONTENT_TYPES = ("application/json", "application/x-www-form-urlencoded")

# Only these reach gidgethub: it accepts the sha1 `X-Hub-Signature` when the sha256 one is
# absent, and lanebot requires sha256.
_VERIFIED_HEADERS = ("content-type", "x-hub-signature-256", "x-github-event", "x-github-delivery")


class IntakeError(Exception):
    """A delivery refused before storing: the HTTP status and what was wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class VerifiedDelivery:
    """A delivery whose signature checked out, with what the store keeps of it."""

    delivery_id: str
    event: str
    action: str | None
    installation_id: int | None
    repository: str | None
    payload: bytes


# -- pure: headers and body to a verified delivery ------------------------------------------


def verify(headers: Any, body: bytes, secret: str) -> VerifiedDelivery:
    """Check the signature and shape of a delivery; raise IntakeError saying what is wrong.

    `headers` is any mapping with case-insensitive `get` (Starlette's Headers).
    """
    for_gidgethub = {name: headers[name] for name in _VERIFIED_HEADERS if headers.get(name)}
    try:
        event = sansio.Event.from_http(for_gidgethub, body, secret=secret)
    except gidgethub.ValidationFailure:
        raise IntakeError(401, _signature_problem(for_gidgethub)) from None
    except KeyError as missing:
        header = _header_title(missing.args[0])
        raise IntakeError(400, f"the {header} header is missing; GitHub sends it with every delivery") from None
    except (gidgethub.BadRequest, LookupError):  # LookupError: a charset Python does not know
        raise IntakeError(400, describe_undecodable_body(for_gidgethub.get("content-type"), body)) from None
    if not isinstance(event.data, dict):
        raise IntakeError(400, f"the payload is JSON but not an object (got {type(event.data).__name__}); "
                               "GitHub sends a JSON object")
    return VerifiedDelivery(
        delivery_id=event.delivery_id,
        event=event.event,
        action=_text_or_none(event.data.get("action")),
        installation_id=_installation_id(event.data),
        repository=_repository_full_name(event.data),
        payload=payload_bytes(for_gidgethub["content-type"], body),
    )


def payload_bytes(content_type: str, body: bytes) -> bytes:
    """The JSON payload as stored: the body itself, or a form body's `payload` field."""
    media_type, charset = _media_type(content_type)
    if media_type == "application/x-www-form-urlencoded":
        fields = urllib.parse.parse_qs(body.decode(charset))
        return fields["payload"][0].encode("utf-8")
    return body


def describe_undecodable_body(content_type: str | None, body: bytes) -> str:
    """Say why a correctly signed body could not be read as a webhook payload."""
    if not content_type:
        return "the Content-Type header is missing; send application/json"
    media_type, charset = _media_type(content_type)
    if media_type not in SUPPORTED_CONTENT_TYPES:
        return (f"unsupported content type {media_type!r}; set the webhook's content type "
                "to application/json (or application/x-www-form-urlencoded)")
    if not body:
        return "the body is empty; a delivery carries a JSON object"
    try:
        text = body.decode(charset)
    except (UnicodeDecodeError, LookupError):
        return f"the body is not valid {charset} text"
    if media_type == "application/x-www-form-urlencoded":
        fields = urllib.parse.parse_qs(text)
        if "payload" not in fields:
            return "the form body has no 'payload' field"
        text = fields["payload"][0]
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return f"the payload is not valid JSON: {error}"
    return "the body could not be decoded as a webhook payload"


def _signature_problem(headers: dict[str, str]) -> str:
    if "x-hub-signature-256" not in headers:
        return "the X-Hub-Signature-256 header is missing; lanebot accepts only sha256-signed deliveries"
    if not headers["x-hub-signature-256"].startswith("sha256="):
        return "the X-Hub-Signature-256 header does not start with 'sha256='"
    return "the signature does not match the body; check that WEBHOOK_SECRET is the App's webhook secret"


def _header_title(name: str) -> str:
    titles = {"x-github-event": "X-GitHub-Event", "x-github-delivery": "X-GitHub-Delivery",
              "content-type": "Content-Type"}
    return titles.get(name, name)


def _media_type(content_type: str) -> tuple[str, str]:
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type(), str(message.get_param("charset") or "utf-8")


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _installation_id(payload: dict[str, Any]) -> int | None:
    installation = payload.get("installation")
    if isinstance(installation, dict) and isinstance(installation.get("id"), int):
        return installation["id"]
    return None


def _repository_full_name(payload: dict[str, Any]) -> str | None:
    repository = payload.get("repository")
    if isinstance(repository, dict):
        return _text_or_none(repository.get("full_name"))
    return None


# -- the edge: reading the request and storing ------------------------------------------------


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise IntakeError(400, f"the Content-Length header is not a number: {declared!r}")
        if int(declared) > limit:
            raise IntakeError(413, _too_large(limit))
    return await _read_at_most(request.stream(), limit)


async def _read_at_most(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    received = bytearray()
    async for chunk in chunks:
        received += chunk
        if len(received) > limit:
            raise IntakeError(413, _too_large(limit))
    return bytes(received)


def _too_large(limit: int) -> str:
    return f"the body is larger than {limit // (1024 * 1024)} MB, GitHub's cap on webhook payloads"


def make_endpoint(engine: Any, secret: str, wake: Callable[[], None], *,
                  max_body_bytes: int = MAX_BODY_BYTES) -> Callable[[Request], Any]:
    """The webhook endpoint: verify, store (off the event loop), wake the dispatcher."""

    async def receive_webhook(request: Request) -> JSONResponse:
        try:
            body = await read_body(request, max_body_bytes)
            delivery = verify(request.headers, body, secret)
        except IntakeError as refused:
            log.warning("webhook refused (%d): %s; delivery %s", refused.status, refused.message,
                        request.headers.get("x-github-delivery", "-"))
            return JSONResponse({"message": refused.message}, status_code=refused.status)
        stored = await run_in_threadpool(_store, engine, delivery)
        if not stored:
            log.info("delivery %s (%s) already stored; nothing to do", delivery.delivery_id, delivery.event)
            return JSONResponse({"delivery": delivery.delivery_id, "stored": False,
                                 "message": "already stored; a redelivery changes nothing"}, status_code=200)
        log.info("stored delivery %s: %s%s", delivery.delivery_id, delivery.event,
                 f".{delivery.action}" if delivery.action else "")
        wake()
        return JSONResponse({"delivery": delivery.delivery_id, "stored": True}, status_code=202)

    return receive_webhook


def _store(engine: Any, delivery: VerifiedDelivery) -> bool:
    return deliveries.record(
        engine,
        delivery_id=delivery.delivery_id,
        event=delivery.event,
        action=delivery.action,
        installation_id=delivery.installation_id,
        repository=delivery.repository,
        body=delivery.payload,
    )
