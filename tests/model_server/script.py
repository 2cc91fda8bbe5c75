"""What a scripted model says, independent of the wire: the interface between the server (which
speaks Anthropic's Messages API and OpenAI's Responses API) and the scenarios (which decide).

The server turns each request into a `ModelCall` (the conversation so far, in neutral terms) and
asks the scenario's responder for the next turn: a `Reply` (text and actions, which the server
writes as the calling CLI's own tool calls) or a `Fault` (which it answers as the API would).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Api = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class WriteFile:
    """Write `content` to `path`, relative to the session's working directory."""

    path: str
    content: str


@dataclass(frozen=True)
class RunCommand:
    """Run `command` with the shell, in the session's working directory."""

    command: str


@dataclass(frozen=True)
class ToolUse:
    """A tool call by the CLI's own name for it (`Bash`, `Write`, `shell`, ...), input as given."""

    name: str
    input: Mapping[str, Any]


Action = WriteFile | RunCommand | ToolUse


@dataclass(frozen=True)
class ToolOutcome:
    """What the CLI sent back for one earlier tool call."""

    name: str
    output: str
    is_error: bool = False


@dataclass(frozen=True)
class ModelCall:
    """One request from a CLI, in neutral terms."""

    api: Api
    system: str  # the system prompt / instructions, joined
    prompt: str  # the first user message's text: lanebot's prompt
    turns: int  # how many assistant turns came before this one
    outcomes: tuple[ToolOutcome, ...]  # every tool result so far, oldest first
    tools: tuple[str, ...]  # the names of the tools the CLI offers
    model: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """The next assistant turn: text, then actions. No actions ends the session's turn."""

    text: str = ""
    actions: tuple[Action, ...] = ()


FaultKind = Literal["overloaded", "rate_limited", "cut", "hang"]


@dataclass(frozen=True)
class Fault:
    """overloaded: HTTP 529 (Anthropic) / 503 (OpenAI); rate_limited: 429 with retry-after;
    cut: the stream starts and the connection closes mid-way; hang: the stream starts and never ends."""

    kind: FaultKind
    retry_after_s: int = 1


Responder = Callable[[ModelCall], Reply | Fault]
