"""Webhook relay channels, as smee.io serves them: for an App whose webhook URL is a channel.

`POST /channels/{id}` takes a webhook delivery (a JSON body, as smee.io requires) and relays it to
everyone reading the channel; `GET /channels/{id}` with `Accept: text/event-stream` reads it as
server-sent events in smee.io's format: a `ready` event on connecting, `ping` events while quiet,
and for each delivery a message whose data is one JSON object holding the request's headers
(lower-case names), `body` (the parsed JSON, written again compactly, as smee.io's
`JSON.stringify` does), `query` and `timestamp` (milliseconds). So the sandbox's own webhook sender,
given a channel as the App's webhook URL, delivers to it as GitHub delivers to smee.io.

Unlike smee.io, a channel keeps its messages, numbered from 1, and a reader that sends
`Last-Event-ID` gets those after it first, so a test can show that a reader that reconnects
loses nothing the channel replays. The human API shows a channel (`GET /_sandbox/channels/{id}`:
readers, messages) and takes it down and up (`POST /_sandbox/channels/{id}/outage` with
`{"down": true}`: open streams end, and connecting is answered 503 until `{"down": false}`;
deliveries posted meanwhile are kept).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

PREFIX = "/channels"
HUMAN_PREFIX = "/_sandbox/channels"
PING_SECONDS = 15.0  # smee.io pings every 30 s
_CHANNEL = re.compile(r"[A-Za-z0-9_-]{1,128}")  # smee.io's channel names


@dataclass
class Channel:
    messages: list[str] = field(default_factory=list)  # the data of message n is messages[n - 1]
    readers: list[asyncio.Queue[int | None]] = field(default_factory=list)  # message numbers; None: end
    down: bool = False

    def publish(self, data: str) -> int:
        self.messages.append(data)
        number = len(self.messages)
        for reader in self.readers:
            reader.put_nowait(number)
        return number

    def end_streams(self) -> None:
        for reader in self.readers:
            reader.put_nowait(None)


@dataclass
class Channels:
    """Every channel of one sandbox, made on first use."""

    by_name: dict[str, Channel] = field(default_factory=dict)

    def get(self, name: str) -> Channel:
        return self.by_name.setdefault(name, Channel())


def is_channel_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def relay_message(headers: dict[str, str], body: Any, query: dict[str, str], timestamp_ms: int) -> str:
    """A message's data as smee.io writes it: JSON.stringify({...headers, body, query, timestamp})."""
    payload = {**headers, "body": body, "query": query, "timestamp": timestamp_ms}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _frame(data: str, number: int | None = None, event: str | None = None) -> bytes:
    lines = [f"id: {number}"] if number is not None else []
    if event is not None:
        lines.append(f"event: {event}")
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def _channels(request: Request) -> Channels:
    channels: Channels = request.app.state.channels
    return channels


def _name(request: Request) -> str:
    name = str(request.path_params["channel"])
    if not _CHANNEL.fullmatch(name):
        raise _BadChannel(name)
    return name


class _BadChannel(Exception):
    pass


async def receive(request: Request) -> Response:
    try:
        name = _name(request)
    except _BadChannel:
        return PlainTextResponse("a channel name is 1 to 128 letters, digits, '-' or '_'", status_code=400)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return PlainTextResponse("the body must be JSON", status_code=400)
    if not isinstance(body, dict):
        return PlainTextResponse("the body must be a JSON object", status_code=400)
    sandbox = request.app.state.sandbox
    headers = {key.lower(): value for key, value in request.headers.items()}
    timestamp = int(sandbox.clock().timestamp() * 1000)
    _channels(request).get(name).publish(relay_message(headers, body, dict(request.query_params), timestamp))
    return Response(status_code=200)


async def read(request: Request) -> Response:
    try:
        name = _name(request)
    except _BadChannel:
        return PlainTextResponse("a channel name is 1 to 128 letters, digits, '-' or '_'", status_code=400)
    if "text/event-stream" not in request.headers.get("accept", ""):
        return PlainTextResponse(f"Webhook relay channel {name}: read it with Accept: text/event-stream\n")
    channel = _channels(request).get(name)
    if channel.down:
        return PlainTextResponse("the channel is down", status_code=503)
    after = request.headers.get("last-event-id", "").strip()
    first = int(after) + 1 if after.isdigit() else len(channel.messages) + 1
    # Joined and read in one step (no await between): nothing published can fall between the two.
    reader: asyncio.Queue[int | None] = asyncio.Queue()
    channel.readers.append(reader)
    backlog = list(range(first, len(channel.messages) + 1))
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(_stream(channel, reader, backlog), media_type="text/event-stream", headers=headers)


async def _stream(channel: Channel, reader: asyncio.Queue[int | None], backlog: list[int]) -> AsyncIterator[bytes]:
    try:
        yield _frame("{}", event="ready")
        for number in backlog:
            yield _frame(channel.messages[number - 1], number)
        while True:
            try:
                published = await asyncio.wait_for(reader.get(), PING_SECONDS)
            except TimeoutError:
                yield _frame("{}", event="ping")
                continue
            if published is None:
                return
            yield _frame(channel.messages[published - 1], published)
    finally:
        channel.readers.remove(reader)


async def show(request: Request) -> Response:
    channel = _channels(request).get(str(request.path_params["channel"]))
    return JSONResponse({"readers": len(channel.readers), "messages": len(channel.messages), "down": channel.down})


async def outage(request: Request) -> Response:
    try:
        down = json.loads(await request.body()).get("down")
    except (ValueError, AttributeError):
        down = None
    if not isinstance(down, bool):
        return JSONResponse({"message": 'give {"down": true} or {"down": false}'}, status_code=422)
    channel = _channels(request).get(str(request.path_params["channel"]))
    channel.down = down
    if down:
        channel.end_streams()
    return JSONResponse({"readers": len(channel.readers), "messages": len(channel.messages), "down": channel.down})


ROUTES = [
    Route(PREFIX + "/{channel}", read, methods=["GET"]),
    Route(PREFIX + "/{channel}", receive, methods=["POST"]),
    Route(HUMAN_PREFIX + "/{channel}", show, methods=["GET"]),
    Route(HUMAN_PREFIX + "/{channel}/outage", outage, methods=["POST"]),
]
