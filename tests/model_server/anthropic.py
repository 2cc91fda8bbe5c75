"""Anthropic's Messages API as the scripted server speaks it (`POST /v1/messages`, and
`/v1/messages/count_tokens`), for Claude Code.

Streaming (`"stream": true`) follows Anthropic's documented event flow: `message_start` (the
message with empty content and the input usage), for each content block `content_block_start`,
`content_block_delta` (`text_delta`, or `input_json_delta` for a `tool_use` block's input) and
`content_block_stop`, then `message_delta` (`stop_reason` `tool_use` or `end_turn`, output usage)
and `message_stop`. A non-streamed request gets the same message as one JSON body.

Main or side request: Claude Code sends, besides the conversation, small requests of its own
(a session title, a topic check, a quota probe with `max_tokens` 1). The rule: a request is part
of the main conversation when it offers tools and asks for more than one token; every other
request is a side request, answered with a short text without asking the responder.

Actions become Claude Code's tools: `WriteFile` the `Write` tool with an absolute `file_path`
(the working directory is read from the system prompt's environment section, `Working
directory: /path`; without one, a `Bash` command that writes the file), `RunCommand` the `Bash`
tool. Tool results of later requests (`tool_result` blocks) become `ToolOutcome`s, named after the
`tool_use` block whose id they answer.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping
from typing import Any

from tests.model_server.script import Action, Fault, ModelCall, Reply, RunCommand, ToolOutcome, ToolUse, WriteFile
from tests.model_server.wire import Event, Response, WireError, next_id, text_of, token_estimate

SIDE_TEXT = "OK"
DEFAULT_MODEL = "claude-scripted"
REMINDER = "<system-reminder>"
WORKING_DIRECTORY = re.compile(r"^\s*(?:[-*]\s*)?(?:Primary )?[Ww]orking directory:\s*(/\S.*?)\s*$", re.MULTILINE)


def system_text(body: Mapping[str, Any]) -> str:
    """The system prompt: a string, or its text blocks joined."""
    return text_of(body.get("system"))


def working_directory(body: Mapping[str, Any]) -> str | None:
    """The session's working directory as the system prompt names it."""
    found = WORKING_DIRECTORY.search(system_text(body))
    return found.group(1) if found else None


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []


def _blocks(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content if isinstance(block, Mapping)] if isinstance(content, list) else []


def prompt_text(body: Mapping[str, Any]) -> str:
    """The first user message's text without the `<system-reminder>` blocks Claude Code adds."""
    for message in _messages(body):
        if message.get("role") == "user":
            texts = [block.get("text", "") for block in _blocks(message) if block.get("type") == "text"]
            return "\n".join(text for text in texts if isinstance(text, str) and not text.lstrip().startswith(REMINDER))
    return ""


def outcomes(body: Mapping[str, Any]) -> tuple[ToolOutcome, ...]:
    """Every `tool_result` so far, oldest first, named after the `tool_use` it answers."""
    names: dict[str, str] = {}
    found: list[ToolOutcome] = []
    for message in _messages(body):
        for block in _blocks(message):
            if block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name"))
            elif block.get("type") == "tool_result":
                name = names.get(str(block.get("tool_use_id")), "")
                found.append(ToolOutcome(name, text_of(block.get("content")), block.get("is_error") is True))
    return tuple(found)


def tool_names(body: Mapping[str, Any]) -> tuple[str, ...]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return ()
    return tuple(str(tool.get("name")) for tool in tools if isinstance(tool, Mapping) and tool.get("name"))


def tool_use(action: Action, cwd: str | None) -> tuple[str, Mapping[str, Any]]:
    """The Claude Code tool call (name, input) that carries out `action`."""
    if isinstance(action, ToolUse):
        return action.name, dict(action.input)
    if isinstance(action, RunCommand):
        return "Bash", {"command": action.command, "description": "Run the scripted command"}
    if cwd is not None:
        return "Write", {"file_path": posixpath.join(cwd, action.path), "content": action.content}
    return "Bash", {"command": write_command(action), "description": "Write the scripted file"}


def write_command(action: WriteFile) -> str:
    """A shell command that writes the file exactly (no heredoc: the content may hold anything)."""
    folder = posixpath.dirname(action.path)
    make = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
    return f"{make}printf '%s' {shlex.quote(action.content)} > {shlex.quote(action.path)}"


def content_blocks(body: Mapping[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """The assistant message's content: the text (when there is any, or nothing else), then one
    `tool_use` block per action."""
    blocks: list[dict[str, Any]] = []
    if reply.text or not reply.actions:
        blocks.append({"type": "text", "text": reply.text})
    cwd = working_directory(body)
    for action in reply.actions:
        name, tool_input = tool_use(action, cwd)
        blocks.append({"type": "tool_use", "id": next_id("toolu"), "name": name, "input": tool_input})
    return blocks


def _usage(body: Mapping[str, Any], blocks: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "input_tokens": token_estimate([body.get("system"), body.get("messages")]),
        "output_tokens": token_estimate(blocks),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _message(body: Mapping[str, Any], blocks: list[dict[str, Any]], stop_reason: str | None) -> dict[str, Any]:
    return {
        "id": next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model") or DEFAULT_MODEL),
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": _usage(body, blocks),
    }


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.actions else "end_turn"


def _block_events(index: int, block: Mapping[str, Any]) -> list[Event]:
    if block["type"] == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    return [
        Event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
        Event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
        Event("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


class Messages:
    """`POST /v1/messages`."""

    cut_after = 3  # message_start, content_block_start, the first delta
    hang_after = 2  # message_start, content_block_start

    def is_main(self, body: Mapping[str, Any]) -> bool:
        max_tokens = body.get("max_tokens")
        return bool(tool_names(body)) and not (isinstance(max_tokens, int) and max_tokens <= 1)

    def streams(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def parse(self, body: Mapping[str, Any]) -> ModelCall:
        return ModelCall(
            api="anthropic",
            system=system_text(body),
            prompt=prompt_text(body),
            turns=sum(1 for message in _messages(body) if message.get("role") == "assistant"),
            outcomes=outcomes(body),
            tools=tool_names(body),
            model=str(body.get("model") or ""),
            raw=body,
        )

    def side_reply(self, body: Mapping[str, Any]) -> Reply:
        return Reply(text=SIDE_TEXT)

    def message(self, body: Mapping[str, Any], reply: Reply) -> Mapping[str, Any]:
        return _message(body, content_blocks(body, reply), _stop_reason(reply))

    def events(self, body: Mapping[str, Any], reply: Reply) -> list[Event]:
        blocks = content_blocks(body, reply)
        start = _message(body, [], None)
        start["usage"] = {**start["usage"], "output_tokens": 1}
        events = [Event("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(blocks):
            events += _block_events(index, block)
        delta = {"stop_reason": _stop_reason(reply), "stop_sequence": None}
        usage = {"output_tokens": token_estimate(blocks)}
        events.append(Event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
        events.append(Event("message_stop", {"type": "message_stop"}))
        return events

    def fault_response(self, fault: Fault) -> Response:
        if fault.kind == "rate_limited":
            headers = {"retry-after": str(fault.retry_after_s)}
            return 429, headers, _error("rate_limit_error", "Scripted rate limit: retry after the retry-after header")
        return 529, {}, _error("overloaded_error", "Overloaded")

    def error(self, error: WireError) -> Response:
        return error.status, {}, _error("invalid_request_error", error.message)


class CountTokens(Messages):
    """`POST /v1/messages/count_tokens`: always a side request, answered with an estimate."""

    def is_main(self, body: Mapping[str, Any]) -> bool:
        return False

    def streams(self, body: Mapping[str, Any]) -> bool:
        return False

    def message(self, body: Mapping[str, Any], reply: Reply) -> Mapping[str, Any]:
        return {"input_tokens": token_estimate([body.get("system"), body.get("messages"), body.get("tools")])}


MESSAGES = Messages()
COUNT_TOKENS = CountTokens()
