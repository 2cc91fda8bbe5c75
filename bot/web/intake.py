"""The webhook intake: prove a delivery came from GitHub, store it, answer at once.

GitHub waits 10 seconds for a 2xx and never redelivers by itself, so the intake does no work
beyond verifying and storing: the dispatcher (bot/web/dispatcher.py) handles the stored delivery
after the answer has gone. A delivery that got a 2xx is in the database.

Storing is a group commit. Each request hands its verified delivery to the app's one
`DeliveryWriter` and waits. The writer takes every delivery waiting, INSERTs them in arrival
order in one transaction, in one hop to a worker thread, and commits once: the batch shares
the thread hop and the commit's fsync (SQLite stays at synchronous=FULL). Each request is
answered after the batch holding it committed. A delivery that arrives while nothing is being
written is written at once; the ones that arrive during a write make the next batch. If a
batch fails, its deliveries are written one by one, so a bad one fails only its own request.

Limits, so that a stranger's requests cannot hold lanebot's memory or GitHub's answers:
  - only `X-Hub-Signature-256: sha256=<64 hex digits>` is accepted (gidgethub also takes `sha1=`
    in that header; lanebot does not);
  - bodies are read before their signature can be checked, so `BodyBudget` caps how many are
    read at once and their bytes in all (503 beyond either), each body at GitHub's 25 MB (413);
  - the store gets `store_timeout` seconds (under GitHub's 10 s): the INSERT waits that long at
    most for another writer's lock, and a delivery not stored by then is answered 503, which
    GitHub shows as failed, so `lanebot deliveries recover` redelivers it (and, with
    LANEBOT_RECOVER_DELIVERIES=1, lanebot itself soon after: `on_failed`, bot/web/recovery.py).
A write whose database connection turned out to be dead (PostgreSQL restarted or cut it:
SQLAlchemy invalidates the connection) is tried once more on a new connection, if the store's
deadline leaves time for it, before the delivery is answered 500.
GitHub signs the body only, not the X-GitHub-Delivery id, so a captured body can be replayed
under a new id: `RecentBodies` remembers the signature (the body's HMAC-SHA256, verified) of each
body stored in the last 24 hours (LANEBOT_REPLAY_WINDOW; at most 100,000 bodies, in this process)
and answers such a replay 200 without storing it. A redelivery
keeps its id and is the unique index's business. What this does not cover (another process,
a restart, older bodies) is in README's intake section.

Answers, each with a JSON body whose `message` says what was wrong:
  202 stored · 200 already stored (a redelivery) · 400 malformed · 401 unsigned or wrongly
  signed · 413 over GitHub's 25 MB payload cap · 500 not stored (the cause is in the log) ·
  503 not stored for now: lanebot is shutting down, reading too many bodies, or its database
  did not take the delivery in time.
The body and the signature are never logged. A batch that committed is one info line naming each
delivery's id and event; what each request was answered is logged at debug (refusals and failures
at warning and error).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
import urllib.parse
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.message import Message
from typing import Any

import gidgethub
from anyio import to_thread
from gidgethub import sansio
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from starlette.requests import Request
from starlette.responses import JSONResponse

from bot.edges.store import deliveries

log = logging.getLogger(__name__)

# GitHub caps webhook payloads at 25 MB and drops larger ones; anything bigger is not GitHub.
MAX_BODY_BYTES = 25 * 1024 * 1024

SUPPORTED_CONTENT_TYPES = ("application/json", "application/x-www-form-urlencoded")

# The most deliveries one transaction takes: it bounds how long a batch holds SQLite's write
# lock, which the dispatcher also needs. At 64 connections flat out a batch held a median of
# about 30; a cap of 16 made more commits and was slower (docs/benchmarks.md, table 9).
MAX_BATCH_SIZE = 64
# How long stopping waits for the deliveries already handed to the writer to be stored.
STOP_GRACE_SECONDS = 10.0
# How long a request waits for its delivery to be stored before it is answered 503: under GitHub's 10 s.
STORE_TIMEOUT_SECONDS = 8.0
# Bodies read at once before their signature is checked, and their bytes in all.
MAX_BODIES_READ_AT_ONCE = 16
MAX_BUFFERED_BYTES = 64 * 1024 * 1024
# The INSERT's wait for another writer's lock, as a share of the store timeout: the database gives
# up first, so a delivery answered 503 for a lock is not stored behind the answer's back.
LOCK_SHARE_OF_STORE_TIMEOUT = 0.75
# A write on a connection the database cut is tried again only with at least this long left of the store's deadline.
MIN_SECONDS_FOR_A_RETRY = 0.5
# A body stored within this window (and this process) is not stored again under another delivery id.
REPLAY_WINDOW_SECONDS = 24 * 3600.0
REPLAY_MEMORY = 100_000
_SHA256_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")

# Only these reach gidgethub: it accepts the sha1 `X-Hub-Signature` when the sha256 one is
# absent, and lanebot requires sha256.
_VERIFIED_HEADERS = ("content-type", "x-hub-signature-256", "x-github-event", "x-github-delivery")


class IntakeError(Exception):
    """A delivery refused or not stored: the HTTP status and what was wrong."""

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
    # The body's HMAC-SHA256 under the webhook secret, as the signature carried it and `verify`
    # checked it: one value per body, so the replay check need not hash the body a second time.
    body_mac: bytes


# -- pure: headers and body to a verified delivery ------------------------------------------


def verify(headers: Mapping[str, str], body: bytes, secret: str) -> VerifiedDelivery:
    """Check the signature and shape of a delivery; raise IntakeError saying what is wrong.

    `headers` is any mapping with case-insensitive `get` (Starlette's Headers).
    """
    for_gidgethub = {name: headers[name] for name in _VERIFIED_HEADERS if headers.get(name)}
    signature = for_gidgethub.get("x-hub-signature-256")
    if signature is not None and not _SHA256_SIGNATURE.fullmatch(signature):
        raise IntakeError(401, _signature_problem(for_gidgethub))
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
        raise IntakeError(
            400, f"the payload is JSON but not an object (got {type(event.data).__name__}); GitHub sends a JSON object"
        )
    return VerifiedDelivery(
        delivery_id=event.delivery_id,
        event=event.event,
        action=_text_or_none(event.data.get("action")),
        installation_id=_installation_id(event.data),
        repository=_repository_full_name(event.data),
        payload=payload_bytes(for_gidgethub["content-type"], body),
        body_mac=bytes.fromhex(for_gidgethub["x-hub-signature-256"].removeprefix("sha256=")),
    )


def payload_bytes(content_type: str, body: bytes) -> bytes:
    """The JSON payload as stored: the body itself, or a form body's `payload` field."""
    if content_type == "application/json":  # what GitHub sends: no need to parse the header
        return body
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
        return (
            f"unsupported content type {media_type!r}; set the webhook's content type "
            "to application/json (or application/x-www-form-urlencoded)"
        )
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
    if not _SHA256_SIGNATURE.fullmatch(headers["x-hub-signature-256"]):
        return "the X-Hub-Signature-256 header is not 'sha256=' and 64 hex digits; lanebot accepts only sha256"
    return "the signature does not match the body; check that WEBHOOK_SECRET is the App's webhook secret"


def _header_title(name: str) -> str:
    titles = {
        "x-github-event": "X-GitHub-Event",
        "x-github-delivery": "X-GitHub-Delivery",
        "content-type": "Content-Type",
    }
    return titles.get(name, name)


def _media_type(content_type: str) -> tuple[str, str]:
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type(), str(message.get_param("charset") or "utf-8")


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _installation_id(payload: dict[str, Any]) -> int | None:
    installation = payload.get("installation")
    installation_id = installation.get("id") if isinstance(installation, dict) else None
    return installation_id if isinstance(installation_id, int) else None


def _repository_full_name(payload: dict[str, Any]) -> str | None:
    repository = payload.get("repository")
    if isinstance(repository, dict):
        return _text_or_none(repository.get("full_name"))
    return None


# -- the edge: reading the request ------------------------------------------------------------


class BodyBudget:
    """Caps the bodies being read before their signature is checked: how many at once, and their bytes.

    `admit()` gives a request a `Reservation` (503 when `max_bodies` are being read); the
    reservation grows with the body (503 when all bodies together would pass `max_bytes`) and
    is given back when the request leaves the `with` block. Event-loop only: no locking.
    """

    def __init__(self, max_bodies: int = MAX_BODIES_READ_AT_ONCE, max_bytes: int = MAX_BUFFERED_BYTES) -> None:
        if max_bodies < 1 or max_bytes < 1:
            raise ValueError("a body budget needs room for at least one body and one byte")
        self.max_bodies = max_bodies
        self.max_bytes = max_bytes
        self.reading = 0
        self.buffered = 0
        self.peak_buffered = 0

    @contextlib.contextmanager
    def admit(self) -> Iterator[Reservation]:
        if self.reading >= self.max_bodies:
            raise IntakeError(503, _busy(f"is reading {self.reading} webhook bodies already"))
        self.reading += 1
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            self.reading -= 1
            self.buffered -= reservation.size

    def grow(self, reservation: Reservation, size: int) -> None:
        """Let `reservation` hold `size` bytes, or refuse with 503 when the budget has no room."""
        more = size - reservation.size
        if self.buffered + more > self.max_bytes:
            raise IntakeError(
                503,
                _busy(
                    f"holds {self.buffered / 2**20:.1f} of its {self.max_bytes / 2**20:.1f} MB for unverified bodies"
                ),
            )
        self.buffered += more
        self.peak_buffered = max(self.peak_buffered, self.buffered)
        reservation.size = size


class Reservation:
    """The bytes of one body a `BodyBudget` holds for it."""

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.size = 0

    def hold(self, size: int) -> None:
        """Hold `size` bytes in all for this body (never less than already held)."""
        if size > self.size:
            self._budget.grow(self, size)


def _busy(what: str) -> str:
    return (
        f"lanebot {what}, so it did not read this one; GitHub shows it failed: "
        "redeliver it, or run `lanebot deliveries recover`"
    )


class RecentBodies:
    """The bodies stored lately, by their verified HMAC (`body_mac`): a signed body replayed under
    a new delivery id carries the same one, and is seen again."""

    def __init__(
        self,
        window_seconds: float = REPLAY_WINDOW_SECONDS,
        max_entries: int = REPLAY_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window_seconds
        self._max_entries = max_entries
        self._clock = clock
        self._stored: OrderedDict[bytes, tuple[str, float]] = OrderedDict()  # oldest first

    def stored_as(self, delivery: VerifiedDelivery) -> str | None:
        """The other delivery id this body was stored under within the window, if any (a window of 0: never)."""
        if self._window <= 0:
            return None
        self._forget_old()
        earlier = self._stored.get(delivery.body_mac)
        return earlier[0] if earlier is not None and earlier[0] != delivery.delivery_id else None

    def remember(self, delivery: VerifiedDelivery) -> None:
        if self._window <= 0:
            return
        self._stored[delivery.body_mac] = (delivery.delivery_id, self._clock())
        self._forget_old()

    def _forget_old(self) -> None:
        horizon = self._clock() - self._window
        while self._stored and (
            len(self._stored) > self._max_entries or next(iter(self._stored.values()))[1] < horizon
        ):
            self._stored.popitem(last=False)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES, reservation: Reservation | None = None) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed `limit`.

    With a `reservation`, its bytes are held against the budget as they arrive (the declared
    Content-Length at once), and a body the budget has no room for is refused with 503.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise IntakeError(400, f"the Content-Length header is not a number: {declared!r}")
        if int(declared) > limit:
            raise IntakeError(413, _too_large(limit))
        if reservation is not None:
            reservation.hold(int(declared))
    return await _read_at_most(request.stream(), limit, reservation)


async def _read_at_most(chunks: AsyncIterator[bytes], limit: int, reservation: Reservation | None) -> bytes:
    received: list[bytes] = []
    size = 0
    async for chunk in chunks:
        received.append(chunk)
        size += len(chunk)
        if size > limit:
            raise IntakeError(413, _too_large(limit))
        if reservation is not None:
            reservation.hold(size)
    return b"".join(received)


def _too_large(limit: int) -> str:
    return f"the body is larger than {limit // (1024 * 1024)} MB, GitHub's cap on webhook payloads"


# -- the edge: storing, a batch per commit ----------------------------------------------------


@dataclass(frozen=True)
class _Waiting:
    """A delivery handed to the writer, and the future its request awaits."""

    delivery: VerifiedDelivery
    answer: asyncio.Future[bool]
    deadline: float  # time.monotonic() by which its request is answered 503 if it is not stored


class DeliveryWriter:
    """Stores verified deliveries for the intake: every delivery waiting, one commit per batch.

    Only one batch is written at a time. `store` queues a delivery and returns once the batch
    holding it committed. `stop` refuses new deliveries and answers or fails every one
    already queued; `start` takes deliveries again after a `stop`.
    """

    def __init__(
        self,
        engine: Engine,
        wake: Callable[[], None],
        *,
        max_batch_size: int = MAX_BATCH_SIZE,
        store_timeout: float = STORE_TIMEOUT_SECONDS,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self._engine = engine
        self._wake = wake
        self._max_batch_size = max_batch_size
        self._store_timeout = store_timeout
        self._queue: deque[_Waiting] = deque()
        self._in_hand: list[_Waiting] = []
        self._task: asyncio.Task[None] | None = None
        self._accepting = True

    @property
    def waiting(self) -> int:
        """How many deliveries wait for the next batch (not counting the batch being written)."""
        return len(self._queue)

    @property
    def writing(self) -> int:
        """How many deliveries are in the batch being written now."""
        return len(self._in_hand)

    @property
    def accepting(self) -> bool:
        """False from `stop` until `start`: new deliveries are then answered 503."""
        return self._accepting

    def start(self) -> None:
        """Take deliveries again after `stop` (a new writer takes them from the start)."""
        self._accepting = True

    async def store(self, delivery: VerifiedDelivery) -> bool:
        """Store `delivery` with the next batch: True once stored, False if its id already was.

        Raises IntakeError: 500 when it could not be stored; 503 when the writer is stopping,
        or when the database did not store it within `store_timeout` seconds (then it may still
        be stored later, and a redelivery answers "already stored").
        """
        if not self._accepting:
            raise IntakeError(
                503,
                "lanebot is shutting down and did not store this delivery; "
                "redeliver it once lanebot is back (or run `lanebot deliveries recover`)",
            )
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(delivery, answer, time.monotonic() + self._store_timeout))
        if self._task is None:
            # No timer: a delivery arriving while nothing is being written goes to the database at once.
            self._task = asyncio.create_task(self._write_while_waiting(), name="lanebot-intake-writer")
        try:
            # Awaited bare: a timeout or the request going away cancels `answer`, and the writer
            # then leaves a delivery still queued out of its batch.
            async with asyncio.timeout(self._store_timeout):
                return await answer
        except TimeoutError:
            log.error("delivery %s was not stored within %g s", delivery.delivery_id, self._store_timeout)
            raise IntakeError(503, _not_stored_in_time(self._store_timeout)) from None

    async def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Refuse new deliveries, and let those already queued be stored for up to `grace_seconds`.

        After that, every request still waiting is answered 503: none is left hanging. A batch
        already in the database may still commit; a redelivery of it then answers "already stored".
        """
        self._accepting = False
        task = self._task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_seconds)
        except TimeoutError:
            self._give_up(task)
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._task is task:  # a task cancelled before its first step never reached its `finally`
            self._task = None

    def _give_up(self, task: asyncio.Task[None]) -> None:
        in_hand, queued = list(self._in_hand), list(self._queue)
        self._queue.clear()
        log.warning(
            "the intake stopped with %d deliveries being stored and %d waiting; each is answered 503",
            len(in_hand),
            len(queued),
        )
        task.cancel()
        _fail(
            in_hand,
            503,
            "lanebot stopped while storing this delivery, so it may or may not be "
            "stored; redeliver it (a stored copy answers 'already stored')",
        )
        _fail(
            queued,
            503,
            "lanebot stopped before storing this delivery; "
            "redeliver it once lanebot is back (or run `lanebot deliveries recover`)",
        )

    async def _write_while_waiting(self) -> None:
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._max_batch_size))]
                batch = [waiting for waiting in batch if not waiting.answer.done()]  # answered 503 meanwhile
                if batch:
                    self._answer(batch, await self._write(batch))
        finally:
            self._task = None

    async def _write(self, batch: list[_Waiting]) -> list[bool | Exception]:
        self._in_hand = batch
        try:
            # abandon_on_cancel: a `stop` that gives up must not wait for the database.
            return await to_thread.run_sync(
                functools.partial(
                    write_batch,
                    lock_timeout=self._store_timeout * LOCK_SHARE_OF_STORE_TIMEOUT,
                    deadline=min(waiting.deadline for waiting in batch),
                ),
                self._engine,
                [waiting.delivery for waiting in batch],
                abandon_on_cancel=True,
            )
        except Exception as error:  # write_batch answers for each delivery; this is the hop itself failing
            log.error(
                "the intake's writer failed (%s); its %d deliveries are answered 500",
                describe_store_error(error),
                len(batch),
            )
            return [error] * len(batch)
        finally:
            self._in_hand = []

    def _answer(self, batch: list[_Waiting], outcomes: list[bool | Exception]) -> None:
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if waiting.answer.done():  # its request was cancelled while waiting
                continue
            if isinstance(outcome, Exception) and deliveries.is_lock_timeout(outcome):
                waiting.answer.set_exception(IntakeError(503, _not_stored_in_time(self._store_timeout)))
            elif isinstance(outcome, Exception):
                waiting.answer.set_exception(IntakeError(500, _not_stored(outcome)))
            else:
                waiting.answer.set_result(outcome)
        stored = [waiting.delivery for waiting, outcome in zip(batch, outcomes, strict=True) if outcome is True]
        if stored:
            _log_stored(stored)
            self._wake()


def _log_stored(stored: list[VerifiedDelivery]) -> None:
    # One line per batch: under load a line per delivery cost about a tenth of the intake's CPU.
    if log.isEnabledFor(logging.INFO):
        count = f"{len(stored)} deliver{'y' if len(stored) == 1 else 'ies'}"
        log.info("stored %s: %s", count, ", ".join(_id_and_event(delivery) for delivery in stored))


def _id_and_event(delivery: VerifiedDelivery) -> str:
    return f"{delivery.delivery_id} ({delivery.event}{f'.{delivery.action}' if delivery.action else ''})"


def _fail(waiting: list[_Waiting], status: int, message: str) -> None:
    for each in waiting:
        if not each.answer.done():
            each.answer.set_exception(IntakeError(status, message))


def _not_stored_in_time(seconds: float) -> str:
    return (
        f"lanebot's database did not store this delivery within {seconds:g} s (another writer holds it); "
        "GitHub shows it failed: redeliver it, or run `lanebot deliveries recover`"
    )


def _not_stored(error: Exception) -> str:
    return (
        f"lanebot could not store this delivery ({type(error).__name__}) and stored nothing of it; "
        "the cause is in lanebot's log. Once it is fixed, redeliver it or run `lanebot deliveries recover`"
    )


def write_batch(
    engine: Engine,
    batch: Sequence[VerifiedDelivery],
    *,
    lock_timeout: float | None = None,
    deadline: float | None = None,
) -> list[bool | Exception]:
    """Store `batch` with one commit, or, if that fails, each delivery with its own commit.

    For each delivery, in order: True if stored now, False if its id was already stored, or
    the exception that kept it out. A lock not granted within `lock_timeout` seconds fails the
    whole batch (trying each again would wait as long again). A write on a connection the
    database cut is written once more on a new one, if `deadline` (time.monotonic(); None: no
    deadline) leaves time for it. Runs in a worker thread.
    """
    new = [_new_delivery(delivery) for delivery in batch]
    try:
        stored: list[bool | Exception] = list(_record(engine, new, lock_timeout, deadline))
        return stored
    except Exception as error:
        if len(new) == 1 or deliveries.is_lock_timeout(error):
            for delivery in batch:
                _log_not_stored(delivery, error)
            return [error] * len(new)
        log.warning(
            "a batch of %d deliveries could not be stored together (%s); storing each on its own",
            len(new),
            describe_store_error(error),
        )
    return [_write_alone(engine, delivery, lock_timeout, deadline) for delivery in batch]


def _write_alone(
    engine: Engine, delivery: VerifiedDelivery, lock_timeout: float | None, deadline: float | None
) -> bool | Exception:
    try:
        [is_new] = _record(engine, [_new_delivery(delivery)], lock_timeout, deadline)
    except Exception as error:
        _log_not_stored(delivery, error)
        return error
    return is_new


def _record(
    engine: Engine, new: list[deliveries.NewDelivery], lock_timeout: float | None, deadline: float | None
) -> list[bool]:
    """`deliveries.record_many`, once more on a new connection if the database cut the one it had.

    The transaction that failed committed nothing (a commit whose answer was lost is the one case
    where it did: the INSERT again then finds the ids stored and reports them already stored).
    """
    try:
        return deliveries.record_many(engine, new, lock_timeout=lock_timeout)
    except DBAPIError as error:
        left = None if deadline is None else deadline - time.monotonic()
        if not error.connection_invalidated or (left is not None and left < MIN_SECONDS_FOR_A_RETRY):
            raise
        log.warning(
            "the database cut the connection while %d deliveries were being stored (%s); "
            "storing again on a new connection",
            len(new),
            describe_store_error(error),
        )
        if left is not None:
            share = left * LOCK_SHARE_OF_STORE_TIMEOUT
            lock_timeout = share if lock_timeout is None else min(lock_timeout, share)
    return deliveries.record_many(engine, new, lock_timeout=lock_timeout)


def _log_not_stored(delivery: VerifiedDelivery, error: Exception) -> None:
    log.error(
        "delivery %s (%s) could not be stored: %s", delivery.delivery_id, delivery.event, describe_store_error(error)
    )


def describe_store_error(error: BaseException) -> str:
    """What a failed store logs: the error's type and the database's first line about it.

    Never SQLAlchemy's whole message, which repeats the statement's parameters (the body).
    """
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    first_line = lines[0][:200] if lines else ""
    return f"{type(cause).__name__}: {first_line}" if first_line else type(cause).__name__


def _new_delivery(delivery: VerifiedDelivery) -> deliveries.NewDelivery:
    return deliveries.NewDelivery(
        delivery_id=delivery.delivery_id,
        event=delivery.event,
        action=delivery.action,
        installation_id=delivery.installation_id,
        repository=delivery.repository,
        body=delivery.payload,
    )


def make_endpoint(
    writer: DeliveryWriter,
    secret: str,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    budget: BodyBudget | None = None,
    recent: RecentBodies | None = None,
    on_failed: Callable[[], None] | None = None,
    on_outcome: Callable[[str], None] | None = None,
) -> Callable[[Request], Awaitable[JSONResponse]]:
    """The webhook endpoint: read within `budget`, verify, leave out replays `recent` has seen, then
    store with `writer` (which wakes the dispatcher). `on_failed` is called for each delivery
    answered 5xx (not stored: GitHub shows it failed), e.g. to have it redelivered soon; `on_outcome`
    with each answer's outcome (stored, duplicate, replayed, unsigned, refused or failed: the metrics)."""
    budget = budget if budget is not None else BodyBudget()
    recent = recent if recent is not None else RecentBodies()
    count = on_outcome if on_outcome is not None else _count_nothing

    async def receive_webhook(request: Request) -> JSONResponse:
        try:
            with budget.admit() as reservation:
                body = await read_body(request, max_body_bytes, reservation)
                delivery = verify(request.headers, body, secret)
            if (earlier := recent.stored_as(delivery)) is not None:
                count("replayed")
                return _replayed(delivery, earlier)
            stored = await writer.store(delivery)
        except IntakeError as refused:
            not_stored = refused.status >= 500
            log.log(
                logging.ERROR if not_stored else logging.WARNING,
                "webhook %s (%d): %s; delivery %s",
                "not stored" if not_stored else "refused",
                refused.status,
                refused.message,
                request.headers.get("x-github-delivery", "-"),
            )
            count("failed" if not_stored else "unsigned" if refused.status == 401 else "refused")
            if not_stored and on_failed is not None:
                on_failed()
            return JSONResponse({"message": refused.message}, status_code=refused.status)
        if not stored:
            count("duplicate")
            log.info("delivery %s (%s) already stored; nothing to do", delivery.delivery_id, delivery.event)
            return JSONResponse(
                {
                    "delivery": delivery.delivery_id,
                    "stored": False,
                    "message": "already stored; a redelivery changes nothing",
                },
                status_code=200,
            )
        recent.remember(delivery)
        count("stored")
        log.debug("delivery %s answered 202: stored with its batch", delivery.delivery_id)
        return JSONResponse({"delivery": delivery.delivery_id, "stored": True}, status_code=202)

    return receive_webhook


def _count_nothing(_outcome: str) -> None:
    pass


def _replayed(delivery: VerifiedDelivery, earlier: str) -> JSONResponse:
    log.warning("delivery %s carries the body of delivery %s; not stored again", delivery.delivery_id, earlier)
    return JSONResponse(
        {
            "delivery": delivery.delivery_id,
            "stored": False,
            "message": f"this body was stored as delivery {earlier}; a body replayed under a new id changes nothing",
        },
        status_code=200,
    )
