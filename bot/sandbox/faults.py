"""Test-only fault injection: chosen requests fail the way GitHub and networks fail.

A `Fault` picks requests by method and path (a regular expression the whole path must match;
git's smart-HTTP paths and the human API's count too), and optionally by a piece of the request
body. It acts on the next `times` matching requests (on every one while `times` is None), then
is used up. It does one of three things:

- `status`: answer with that status and GitHub's error body, without doing the request, as
  GitHub's 5xx answers and refusals do;
- `delay`: hold the request that many seconds, then do it as usual, so a test can act (kill the
  client, say) at a known point between two of its requests;
- `drop_answer`: do the request, send the answer's status line, then cut the connection before
  its body, as an answer lost on the way is: the client sees the connection close and cannot
  know whether the request took effect. This needs a real HTTP server (`SandboxServer`,
  `lanebot sandbox serve`); in-process, through httpx's ASGI transport, there is no connection
  to cut and the client fails on an incomplete answer instead.

A fault may also act on a share of its matching requests instead of on each one (`rate`, from
0 to 1, drawn from a random generator seeded by `seed`, so a run can be repeated), and may name
the answer's `Retry-After` (seconds) and `message`, as GitHub's secondary rate limits answer
(403 or 429, "You have exceeded a secondary rate limit...", `Retry-After`). The method `*`
matches every method.

Faults are set with `sandbox.faults.add(...)` or the human API (`POST /_sandbox/faults`). Every
fault that acts is recorded in `fired`, so a test can check that its fault was reached.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from starlette.types import Message, Receive

METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")
ANY_METHOD = "*"
SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to "
    "GitHub Support for help, please include the request ID."
)


class FaultError(ValueError):
    """A fault that cannot be set; the message says what was wrong and what to give instead."""


@dataclass(frozen=True, eq=False)  # each fault is its own, however alike two are
class Fault:
    method: str
    path: str  # a regular expression the whole request path must match
    status: int | None = None
    drop_answer: bool = False
    body_contains: str | None = None
    times: int | None = 1  # None: every matching request, until cleared
    rate: float | None = None  # None: every matching request; else the share of them, drawn at random
    seed: int | None = None  # for `rate`: the same seed, the same requests picked
    retry_after: int | None = None  # seconds, sent as `Retry-After` with `status`
    message: str | None = None  # the error body's message; None: the status's phrase
    delay: float | None = None  # instead of failing: hold the request this many seconds, then do it
    _random: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.method.upper() not in (*METHODS, ANY_METHOD):
            raise FaultError(f"method must be one of {', '.join(METHODS)} or {ANY_METHOD}, not {self.method!r}")
        try:
            re.compile(self.path)
        except re.error as error:
            raise FaultError(f"path must be a regular expression for the request path: {error}") from None
        if self.delay is not None:
            if self.status is not None or self.drop_answer or not 0 < self.delay <= 600:
                raise FaultError(
                    "a delay is seconds (above 0, at most 600) to hold the request, without status or drop_answer"
                )
        elif (self.status is None) == (not self.drop_answer):
            raise FaultError("give either a status to answer with or drop_answer, and not both")
        if self.status is not None and not 400 <= self.status <= 599:
            raise FaultError(f"status must be an error status from 400 to 599, not {self.status}")
        if self.times is not None and self.times < 1:
            raise FaultError(f"times must be at least 1, or none at all for every matching request, not {self.times}")
        if self.rate is not None and not 0 < self.rate <= 1:
            raise FaultError(f"rate must be a share of the matching requests, above 0 and at most 1, not {self.rate}")
        if self.retry_after is not None and (self.status is None or self.retry_after < 0):
            raise FaultError("retry_after needs a status to answer with and is a number of seconds, 0 or more")
        if self.message is not None and self.status is None:
            raise FaultError("message needs a status to answer with")
        object.__setattr__(self, "_random", random.Random(self.seed))

    def matches_route(self, method: str, path: str) -> bool:
        if self.method != ANY_METHOD and method.upper() != self.method.upper():
            return False
        return re.fullmatch(self.path, path) is not None

    def draws(self) -> bool:
        """Whether this matching request is one the fault acts on (always, without a `rate`)."""
        return self.rate is None or self._random.random() < self.rate

    def matches(self, method: str, path: str, body: bytes) -> bool:
        return self.matches_route(method, path) and (self.body_contains is None or self.body_contains.encode() in body)

    def error_body(self) -> dict[str, Any]:
        """GitHub's error body for `status`."""
        assert self.status is not None
        return {
            "message": self.message if self.message is not None else HTTPStatus(self.status).phrase,
            "documentation_url": "https://docs.github.com/rest",
            "status": str(self.status),
        }

    def describe(self) -> dict[str, Any]:
        return {
            "method": self.method.upper(),
            "path": self.path,
            "status": self.status,
            "drop_answer": self.drop_answer,
            "body_contains": self.body_contains,
            "times": self.times,
            "rate": self.rate,
            "seed": self.seed,
            "retry_after": self.retry_after,
            "message": self.message,
            "delay": self.delay,
        }

    def headers(self) -> dict[str, str]:
        """The answer's extra headers (`Retry-After`)."""
        return {"retry-after": str(self.retry_after)} if self.retry_after is not None else {}


@dataclass
class FaultBook:
    """The faults set on a sandbox, and which of them acted. Safe to use from any thread."""

    pending: list[Fault] = field(default_factory=list)
    fired: list[tuple[str, str, Fault]] = field(default_factory=list)  # (method, path, fault), in order
    _uses: dict[int, int] = field(default_factory=dict)  # id(fault): requests it has acted on
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self.pending.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self.pending.clear()
            self._uses.clear()

    def watching(self, method: str, path: str) -> tuple[bool, bool]:
        """(whether a pending fault may match this request, whether deciding needs its body)."""
        with self._lock:
            candidates = [fault for fault in self.pending if fault.matches_route(method, path)]
        return bool(candidates), any(fault.body_contains is not None for fault in candidates)

    def take(self, method: str, path: str, body: bytes) -> Fault | None:
        """The first pending fault matching the request, counted as used once; None if none matches."""
        with self._lock:
            for fault in self.pending:
                if fault.matches(method, path, body) and fault.draws():
                    used = self._uses.get(id(fault), 0) + 1
                    self._uses[id(fault)] = used
                    if fault.times is not None and used >= fault.times:
                        self.pending.remove(fault)
                        self._uses.pop(id(fault), None)
                    self.fired.append((method.upper(), path, fault))
                    return fault
        return None


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The whole request body, and a `receive` that hands it to the app again as one message."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
