"""What the server needs from an API's wire format (tests/model_server/anthropic.py, openai.py).

A `Wire` reads a request body into a `ModelCall`, tells main-conversation requests (answered by
the responder) from side requests (answered by the wire itself), and writes a `Reply` as a
streamed list of events or as one JSON body, and a `Fault` as the API's error response.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tests.model_server.script import Fault, ModelCall, Reply

_ids = itertools.count(1)


def next_id(prefix: str) -> str:
    """A fresh identifier (`toolu_scripted_7`): unique for the life of the test process."""
    return f"{prefix}_scripted_{next(_ids)}"


def token_estimate(value: Any) -> int:
    """A plausible token count for `value`: a quarter of its JSON's characters, at least 1."""
    return max(1, len(json.dumps(value, default=str)) // 4)


@dataclass(frozen=True)
class Event:
    """One server-sent event: `event: <name>` and `data: <json>`."""

    name: str
    data: Mapping[str, Any]


@dataclass(frozen=True)
class WireError:
    """An error the server itself answers with (a broken responder: 400)."""

    status: int
    message: str


Response = tuple[int, Mapping[str, str], Mapping[str, Any]]
"""status, extra headers, JSON body"""


class Wire(Protocol):
    cut_after: int  # how many of a reply's events a `cut` sends before closing the connection
    hang_after: int  # how many a `hang` sends before going silent

    def is_main(self, body: Mapping[str, Any]) -> bool: ...

    def streams(self, body: Mapping[str, Any]) -> bool: ...

    def parse(self, body: Mapping[str, Any]) -> ModelCall: ...

    def side_reply(self, body: Mapping[str, Any]) -> Reply: ...

    def events(self, body: Mapping[str, Any], reply: Reply) -> list[Event]: ...

    def message(self, body: Mapping[str, Any], reply: Reply) -> Mapping[str, Any]: ...

    def fault_response(self, fault: Fault) -> Response: ...

    def error(self, error: WireError) -> Response: ...


def text_of(content: Any, *, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of a message's `content`: a string, or the `text` of its blocks of `kinds`, joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [block.get("text", "") for block in content if isinstance(block, Mapping) and block.get("type") in kinds]
    return "\n".join(part for part in parts if isinstance(part, str))
