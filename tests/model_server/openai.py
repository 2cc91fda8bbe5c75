"""OpenAI's Responses API as the scripted server speaks it (`POST /v1/responses`), for Codex.

A streamed response is the documented event flow: `response.created`, `response.in_progress`,
then for each output item `response.output_item.added`, its content events
(`response.content_part.added`, `response.output_text.delta`, `response.output_text.done`,
`response.content_part.done` for a message; `response.function_call_arguments.delta/.done` for a
`function_call`; `response.custom_tool_call_input.delta/.done` for a `custom_tool_call`) and
`response.output_item.done`, and last `response.completed` with the response and its usage.

Every request to /v1/responses that offers tools is a main request (Codex sends no side requests
there in `codex exec`); one without tools is answered with a short text.

Actions become the tools Codex offers: `RunCommand` its shell tool (`shell_command` {command},
`exec_command` {cmd} or `shell` {command: argv}, whichever the request lists), `WriteFile` an
`apply_patch` that adds the file (a freeform `custom_tool_call`, or a `function_call` with
`{"input": patch}` when apply_patch is a function tool), or, without apply_patch, a shell command.
`function_call_output` and `custom_tool_call_output` input items become `ToolOutcome`s.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Mapping
from typing import Any

from tests.model_server.script import Action, Fault, ModelCall, Reply, RunCommand, ToolOutcome, ToolUse, WriteFile
from tests.model_server.wire import Event, Response, WireError, next_id, text_of, token_estimate

SIDE_TEXT = "OK"
DEFAULT_MODEL = "gpt-scripted"
ASSISTANT_ITEMS = ("function_call", "custom_tool_call", "reasoning", "local_shell_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
# Context Codex sends as user messages ahead of the prompt.
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>")
SHELL_TOOLS = ("shell_command", "exec_command", "shell")
EXIT_CODE = re.compile(r"(?:Exit code|Process exited with code):?\s*(-?\d+)")
HEADER_LINE = re.compile(r"^[A-Z][A-Za-z ]*(?::| with code| with session ID)\s*\S*.*$")
TEXT_KINDS = ("input_text", "output_text", "text")


def _items(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


def _kind(item: Mapping[str, Any]) -> str:
    return str(item.get("type") or ("message" if "role" in item else ""))


def _is_assistant(item: Mapping[str, Any]) -> bool:
    return _kind(item) in ASSISTANT_ITEMS or (_kind(item) == "message" and item.get("role") == "assistant")


def system_text(body: Mapping[str, Any]) -> str:
    """The instructions and every developer (or system) message, joined."""
    parts = [body.get("instructions") if isinstance(body.get("instructions"), str) else ""]
    for item in _items(body):
        if _kind(item) == "message" and item.get("role") in ("developer", "system"):
            parts.append(text_of(item.get("content"), kinds=TEXT_KINDS))
    return "\n".join(part for part in parts if part)


def prompt_text(body: Mapping[str, Any]) -> str:
    """The last user message before the first assistant item that is not Codex's own context."""
    prompt = ""
    for item in _items(body):
        if _is_assistant(item):
            break
        if _kind(item) == "message" and item.get("role") == "user":
            text = text_of(item.get("content"), kinds=TEXT_KINDS)
            if not text.lstrip().startswith(CONTEXT_PREFIXES):
                prompt = text
    return prompt


def turns(body: Mapping[str, Any]) -> int:
    """Runs of consecutive assistant items (messages, tool calls, reasoning): one per turn."""
    count, inside = 0, False
    for item in _items(body):
        assistant = _is_assistant(item)
        if assistant and not inside:
            count += 1
        inside = assistant
    return count


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping):
        return _output_text(output.get("content", output.get("output", "")))
    return text_of(output, kinds=TEXT_KINDS)


def split_output(text: str) -> tuple[str, int | None]:
    """A tool output without the header Codex puts above it (`Chunk ID`, `Wall time`, `Process
    exited with code N`, ..., then `Output:`), and the exit code the header reports."""
    header, found, rest = text.partition("Output:\n")
    if not found or not all(HEADER_LINE.match(line) for line in header.splitlines()):
        return text, None
    code = EXIT_CODE.search(header)
    return rest, int(code.group(1)) if code else None


def _outcome(name: str, output: Any) -> ToolOutcome:
    text, code = split_output(_output_text(output))
    failed = (isinstance(output, Mapping) and output.get("success") is False) or (code is not None and code != 0)
    return ToolOutcome(name, text, failed)


def outcomes(body: Mapping[str, Any]) -> tuple[ToolOutcome, ...]:
    """Every tool output so far, oldest first, named after the call it answers, without Codex's
    header; an output whose header reports a non-zero exit code is an error."""
    names: dict[str, str] = {}
    found: list[ToolOutcome] = []
    for item in _items(body):
        if _kind(item) in ASSISTANT_ITEMS and item.get("call_id"):
            names[str(item["call_id"])] = str(item.get("name") or _kind(item))
        elif _kind(item) in OUTPUT_ITEMS:
            found.append(_outcome(names.get(str(item.get("call_id")), ""), item.get("output")))
    return tuple(found)


def _tools(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return {}
    return {str(tool.get("name") or tool.get("type")): tool for tool in tools if isinstance(tool, Mapping)}


def tool_names(body: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(_tools(body))


def patch_adding(action: WriteFile) -> str:
    """An apply_patch patch that adds `action.path` with `action.content`."""
    lines = action.content.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    body = "".join(f"+{line}\n" for line in lines)
    return f"*** Begin Patch\n*** Add File: {action.path}\n{body}*** End Patch\n"


def shell_call(command: str, tools: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The offered shell tool's name and arguments for `command` (shell_command if nothing is offered)."""
    name = next((tool for tool in SHELL_TOOLS if tool in tools), "shell_command")
    if name == "exec_command":
        return name, {"cmd": command}
    if name == "shell":
        return name, {"command": ["bash", "-lc", command]}
    return name, {"command": command}


def write_command(action: WriteFile) -> str:
    folder = action.path.rpartition("/")[0]
    make = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
    return f"{make}printf '%s' {shlex.quote(action.content)} > {shlex.quote(action.path)}"


def output_item(action: Action, tools: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The `function_call` or `custom_tool_call` output item that carries out `action`."""
    call_id = next_id("call")
    if isinstance(action, WriteFile) and "apply_patch" in tools:
        patch = patch_adding(action)
        if tools["apply_patch"].get("type") == "custom":
            return _custom_call(call_id, "apply_patch", patch)
        return _function_call(call_id, "apply_patch", {"input": patch})
    if isinstance(action, ToolUse):
        if tools.get(action.name, {}).get("type") == "custom":
            return _custom_call(call_id, action.name, str(action.input.get("input", "")))
        return _function_call(call_id, action.name, dict(action.input))
    command = action.command if isinstance(action, RunCommand) else write_command(action)
    name, arguments = shell_call(command, tools)
    return _function_call(call_id, name, arguments)


def _function_call(call_id: str, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": next_id("fc"),
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
    }


def _custom_call(call_id: str, name: str, tool_input: str) -> dict[str, Any]:
    return {
        "type": "custom_tool_call",
        "id": next_id("ctc"),
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "input": tool_input,
    }


def _message_item(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": next_id("msg"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def output_items(body: Mapping[str, Any], reply: Reply) -> list[dict[str, Any]]:
    """The response's output: a message with the text (when there is any, or nothing else), then
    one call per action."""
    items = [_message_item(reply.text)] if reply.text or not reply.actions else []
    tools = _tools(body)
    return items + [output_item(action, tools) for action in reply.actions]


def _response(body: Mapping[str, Any], output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": next_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": str(body.get("model") or DEFAULT_MODEL),
        "output": output,
    }
    if status == "completed":
        input_tokens, output_tokens = token_estimate(body.get("input")), token_estimate(output)
        response["usage"] = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
    return response


def _item_events(index: int, item: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(type, fields) of one item's events, from output_item.added to output_item.done."""
    where = {"output_index": index, "item_id": item["id"]}
    added: dict[str, Any] = {**item, "status": "in_progress"}
    middle: list[tuple[str, dict[str, Any]]] = []
    if item["type"] == "message":
        text = item["content"][0]["text"]
        added["content"] = []
        part = {"type": "output_text", "text": "", "annotations": []}
        at = {**where, "content_index": 0}
        middle = [
            ("response.content_part.added", {**at, "part": part}),
            ("response.output_text.delta", {**at, "delta": text}),
            ("response.output_text.done", {**at, "text": text}),
            ("response.content_part.done", {**at, "part": {**part, "text": text}}),
        ]
    elif item["type"] == "function_call":
        added["arguments"] = ""
        middle = [
            ("response.function_call_arguments.delta", {**where, "delta": item["arguments"]}),
            ("response.function_call_arguments.done", {**where, "arguments": item["arguments"]}),
        ]
    else:
        added["input"] = ""
        middle = [
            ("response.custom_tool_call_input.delta", {**where, "delta": item["input"]}),
            ("response.custom_tool_call_input.done", {**where, "input": item["input"]}),
        ]
    return [
        ("response.output_item.added", {"output_index": index, "item": added}),
        *middle,
        ("response.output_item.done", {"output_index": index, "item": dict(item)}),
    ]


def _error(kind: str, code: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "code": code, "message": message, "param": None}}


class Responses:
    """`POST /v1/responses`."""

    cut_after = 5  # created, in_progress, output_item.added, content_part.added, the first delta
    hang_after = 2  # created, in_progress

    def is_main(self, body: Mapping[str, Any]) -> bool:
        return bool(tool_names(body))

    def streams(self, body: Mapping[str, Any]) -> bool:
        return body.get("stream") is True

    def parse(self, body: Mapping[str, Any]) -> ModelCall:
        return ModelCall(
            api="openai",
            system=system_text(body),
            prompt=prompt_text(body),
            turns=turns(body),
            outcomes=outcomes(body),
            tools=tool_names(body),
            model=str(body.get("model") or ""),
            raw=body,
        )

    def side_reply(self, body: Mapping[str, Any]) -> Reply:
        return Reply(text=SIDE_TEXT)

    def message(self, body: Mapping[str, Any], reply: Reply) -> Mapping[str, Any]:
        return _response(body, output_items(body, reply), "completed")

    def events(self, body: Mapping[str, Any], reply: Reply) -> list[Event]:
        output = output_items(body, reply)
        final = _response(body, output, "completed")
        started = {**final, "status": "in_progress", "output": []}
        started.pop("usage", None)
        steps: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"response": started}),
            ("response.in_progress", {"response": started}),
        ]
        for index, item in enumerate(output):
            steps += _item_events(index, item)
        steps.append(("response.completed", {"response": final}))
        return [Event(kind, {"type": kind, "sequence_number": n, **fields}) for n, (kind, fields) in enumerate(steps)]

    def fault_response(self, fault: Fault) -> Response:
        if fault.kind == "rate_limited":
            message = f"Scripted rate limit. Please try again in {fault.retry_after_s}s."
            headers = {"retry-after": str(fault.retry_after_s)}
            return 429, headers, _error("requests", "rate_limit_exceeded", message)
        return 503, {}, _error("server_error", "server_is_overloaded", "The server is overloaded (scripted).")

    def error(self, error: WireError) -> Response:
        return error.status, {}, _error("invalid_request_error", "scripted_responder_failed", error.message)


RESPONSES = Responses()
