"""Server-sent events, read as the WHATWG HTML standard's event-stream parser reads them, and the
messages of a webhook relay channel (smee.io and servers like it). Pure: bytes in, events out.

`SSEParser.feed(chunk)` takes the stream's bytes as they arrive (a chunk may end anywhere, even
inside a character or between CR and LF) and returns the events completed so far. Lines end in
CRLF, LF or CR; `:` lines are comments; `data` lines join with newlines; `id` sets the last event
id once its event ends (kept across events, ignored when it holds NUL), `retry` the reconnection time. A stream comes
from a server anyone can post to, so an event's data is capped (`max_event_bytes`): past it the
event's data is dropped and the event is returned marked `oversized`, so its id still counts.

`relayed_delivery(data)` turns a relay message into the delivery it carries: the original
request's headers and body. smee.io parses the body it was sent and writes it back with
`JSON.stringify`, which is what smee-client posts; the bytes of `body` are taken from the
message's own text, so they are exactly what JSON.stringify wrote, never written again here. A
channel that relays the bytes it was sent (gosmee's `bodyB`, base64) gives those instead, and
those are the bytes GitHub signed.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import re
from dataclasses import dataclass, field

DEFAULT_MAX_EVENT_BYTES = 40 * 1024 * 1024  # GitHub's 25 MB cap on a body, as base64, and its headers
# Keys of a relay message that are not request headers.
_NOT_HEADERS = frozenset({"body", "bodyB", "query", "timestamp"})
# Headers the relayed request gets afresh (its length and framing are the new request's).
_NOT_FORWARDED = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "expect"})
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type ("message" unless named), data, and the last event id then."""

    type: str = "message"
    data: str = ""
    last_event_id: str = ""
    oversized: bool = False


@dataclass
class SSEParser:
    """Incremental event-stream parser; `last_event_id` and `retry_ms` are the stream's, as read."""

    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    last_event_id: str = ""
    retry_ms: int | None = None
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )
    _pending: str = ""  # text of a line not yet ended
    _started: bool = False
    _type: str = ""
    _data: list[str] = field(default_factory=list)
    _data_size: int = 0
    _oversized: bool = False
    _id_buffer: str = ""

    def __post_init__(self) -> None:
        self._id_buffer = self.last_event_id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events that `chunk` completes, in order."""
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            text = text.removeprefix("\ufeff")
        return self._lines(text)

    def _lines(self, text: str) -> list[SSEEvent]:
        buffer = self._pending + text
        events: list[SSEEvent] = []
        start = 0
        for end in _LINE_END.finditer(buffer):
            if end.group() == "\r" and end.end() == len(buffer):
                break  # a CR at the chunk's end may be the first half of CRLF
            event = self._line(buffer[start : end.start()])
            if event is not None:
                events.append(event)
            start = end.end()
        self._pending = buffer[start:]
        if len(self._pending) > self.max_event_bytes:  # a line that never ends
            self._pending = ""
            self._drop_data()
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._append_data(value)
        elif name == "id" and "\0" not in value:
            self._id_buffer = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _append_data(self, value: str) -> None:
        if self._oversized:
            return
        self._data_size += len(value) + 1
        if self._data_size > self.max_event_bytes:
            self._drop_data()
            return
        self._data.append(value)

    def _drop_data(self) -> None:
        self._oversized = True
        self._data, self._data_size = [], 0

    def _dispatch(self) -> SSEEvent | None:
        self.last_event_id = self._id_buffer  # only a whole event moves it: a reader resumes after it
        kind, data, oversized = self._type or "message", "\n".join(self._data), self._oversized
        self._type, self._data, self._data_size, self._oversized = "", [], 0, False
        if not data and not oversized:
            return None
        return SSEEvent(kind, data, self.last_event_id, oversized)


class RelayError(ValueError):
    """A relay message that carries no delivery lanebot can hand on; the message says why."""


@dataclass(frozen=True)
class RelayedDelivery:
    """The request a relay channel was sent: its headers (lower-case names) and its body's bytes.

    `raw` is true when the channel relayed the bytes it was sent (they are what GitHub signed),
    false when the body is the channel's re-serialisation of the JSON it parsed."""

    headers: dict[str, str]
    body: bytes
    raw: bool

    @property
    def delivery_id(self) -> str:
        return self.headers.get("x-github-delivery", "-")

    @property
    def event(self) -> str:
        return self.headers.get("x-github-event", "-")


def relayed_delivery(data: str) -> RelayedDelivery:
    """The delivery a relay message's data carries; `RelayError` when it carries none."""
    members = _object_members(data)
    if "bodyB" in members:
        body, raw = _base64_body(members["bodyB"]), True
    elif "body" in members:
        body, raw = members["body"].encode(), False
    else:
        raise RelayError("the message has no body")
    headers: dict[str, str] = {}
    for name, text in members.items():
        key = name.lower()
        if name in _NOT_HEADERS or key in _NOT_FORWARDED or not _HEADER_NAME.fullmatch(name):
            continue
        value = json.loads(text)
        if isinstance(value, str) and value.isprintable() and value.isascii():
            headers[key] = value
    return RelayedDelivery(headers, body, raw)


def reconnect_delay(failures: int, retry_ms: int | None = None, *, ceiling: float = 30.0) -> float:
    """Seconds to wait before connecting again after `failures` failed attempts in a row: the
    stream's `retry` (else 1 s), doubled for each failure, at most `ceiling`."""
    base = 1.0 if retry_ms is None else min(max(retry_ms / 1000, 0.1), ceiling)
    return float(min(base * 2 ** min(failures, 16), ceiling))


def _base64_body(text: str) -> bytes:
    value = json.loads(text)
    if not isinstance(value, str):
        raise RelayError("bodyB is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise RelayError("bodyB is not valid base64") from None


def _object_members(data: str) -> dict[str, str]:
    """A JSON object's members, each value as the exact text it has in `data` (the last of a repeated key)."""
    decoder = json.JSONDecoder()
    index = _skip_space(data, 0)
    if data[index : index + 1] != "{":
        raise RelayError("the message is not a JSON object")
    members: dict[str, str] = {}
    index = _skip_space(data, index + 1)
    if data[index : index + 1] == "}":
        return members
    try:
        while True:
            if data[index : index + 1] != '"':
                raise RelayError("the message is not valid JSON (a key is not a string)")
            key, index = json.decoder.scanstring(data, index + 1)  # type: ignore[attr-defined]
            index = _skip_space(data, index)
            if data[index : index + 1] != ":":
                raise RelayError("the message is not valid JSON (no ':' after a key)")
            start = _skip_space(data, index + 1)
            _value, end = decoder.raw_decode(data, start)
            members[key] = data[start:end]
            index = _skip_space(data, end)
            separator = data[index : index + 1]
            index = _skip_space(data, index + 1)
            if separator == "}":
                break
            if separator != ",":
                raise RelayError("the message is not valid JSON (members not separated by ',')")
    except json.JSONDecodeError as error:
        raise RelayError(f"the message is not valid JSON ({error.msg} at {error.pos})") from None
    if _skip_space(data, index) != len(data):
        raise RelayError("the message is not valid JSON (text after the object)")
    return members


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\n\r":
        index += 1
    return index
