"""The `codex` adapter: OpenAI Codex CLI in non-interactive mode.

Runs `codex exec --json [--model M] --sandbox workspace-write|read-only ... -` with the prompt on
stdin (`-` as the prompt argument makes `codex exec` read the whole prompt from stdin). `--sandbox
workspace-write` is what the removed `--full-auto` flag used to set; `codex exec` never asks for
approvals.

`--json` prints one event per line: `thread.started`, `turn.started`, `item.started` /
`item.updated` / `item.completed` (items of type `agent_message`, `reasoning`,
`command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list`, `error`, ...),
`turn.completed` with `usage` {input_tokens, cached_input_tokens, output_tokens, ...},
`turn.failed` with `error.message`, and top-level `error`. Older releases printed
`{"id":..,"msg":{"type":"agent_message"|"task_complete"|"token_count"|"error",...}}` instead;
both are read.

Rules drawn from real recordings: the final message is the last `agent_message` item's text;
`turn.failed` fails the session; a top-level `error` fails it unless a `turn.completed` follows
(Codex prints transient "Reconnecting... n/5" errors and then finishes normally); an `error`
*item* is a non-fatal notice. `turn.completed` usage is the thread's running total, so the last
one counts (a sum would count a resumed turn twice). A session with no `turn.completed` failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.edges.agents.base import (
    AgentRequest,
    AgentResult,
    Usage,
    read_settings,
    require_string_list,
    require_text,
    with_detail,
)
from bot.edges.agents.process import DEFAULT_GRACE_S, Conclusion, run_cli_session

DEFAULTS: Mapping[str, Any] = {"binary": "codex", "model": None, "extra_args": []}
MESSAGE_ITEM_TYPES = ("agent_message", "assistant_message")


@dataclass(frozen=True)
class CodexSettings:
    binary: str = "codex"
    model: str | None = None
    extra_args: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | object | None) -> CodexSettings:
        raw = read_settings(options, DEFAULTS, "agents.codex")
        return cls(
            binary=require_text(raw["binary"], "agents.codex.binary"),
            model=require_text(raw["model"], "agents.codex.model", optional=True),
            extra_args=tuple(
                require_string_list(raw["extra_args"], "agents.codex.extra_args", example='["--skip-git-repo-check"]')
            ),
        )


def codex_argv(settings: CodexSettings, *, read_only: bool) -> list[str]:
    """The command line of one session; `-` makes Codex read the prompt from stdin."""
    argv = [settings.binary, "exec", "--json"]
    if settings.model:
        argv += ["--model", settings.model]
    argv += ["--sandbox", "read-only" if read_only else "workspace-write"]
    return argv + list(settings.extra_args) + ["-"]


class CodexStreamParser:
    """Keeps the last agent message, the last usage, and how the turn ended."""

    def __init__(self) -> None:
        self._message: str | None = None
        self._usage = Usage()
        self._completed = False
        self._failure: str | None = None
        self._unresolved_error: str | None = None

    def feed(self, line: str, event: dict[str, Any] | None) -> None:
        if event is None:
            return
        kind = event.get("type")
        if kind == "item.completed":
            self._item(event.get("item"))
        elif kind == "turn.completed":
            self._turn_completed(event.get("usage"))
        elif kind == "turn.failed":
            self._failure = _message_of(event.get("error")) or "the turn failed"
        elif kind == "error":
            self._unresolved_error = _text(event.get("message")) or "an error without a message"
        elif isinstance(event.get("msg"), Mapping):
            self._legacy(event["msg"])

    def conclude(self, exit_status: int) -> Conclusion:
        final = self._message or ""
        if self._failure is not None:
            return Conclusion(final, self._usage, with_detail("codex's turn failed", self._failure))
        if self._unresolved_error is not None:
            return Conclusion(final, self._usage, with_detail("codex reported an error", self._unresolved_error))
        if not self._completed:
            return Conclusion(
                final, self._usage, f"codex exited with status {exit_status} without a turn.completed event"
            )
        if exit_status != 0:
            return Conclusion(final, self._usage, f"codex completed its turn but exited with status {exit_status}")
        return Conclusion(final, self._usage)

    def _item(self, item: Any) -> None:
        if not isinstance(item, Mapping):
            return
        item_type = item.get("type", item.get("item_type"))
        if item_type in MESSAGE_ITEM_TYPES and isinstance(item.get("text"), str):
            self._message = item["text"]

    def _turn_completed(self, usage: Any) -> None:
        self._completed = True
        self._unresolved_error = None
        if isinstance(usage, Mapping):
            self._usage = _usage(usage)

    def _legacy(self, msg: Mapping[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "agent_message" and isinstance(msg.get("message"), str):
            self._message = msg["message"]
        elif kind == "task_complete":
            if isinstance(msg.get("last_agent_message"), str):
                self._message = msg["last_agent_message"]
            self._turn_completed(None)
        elif kind == "token_count":
            info = msg.get("info")
            total = info.get("total_token_usage") if isinstance(info, Mapping) else None
            self._usage = _usage(total if isinstance(total, Mapping) else msg)
        elif kind == "error":
            self._unresolved_error = _text(msg.get("message")) or "an error without a message"


def _usage(usage: Mapping[str, Any]) -> Usage:
    # Codex counts cached tokens inside input_tokens (OpenAI's convention).
    def count(key: str) -> int | None:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    return Usage(input_tokens=count("input_tokens"), output_tokens=count("output_tokens"))


def _message_of(error: Any) -> str | None:
    if isinstance(error, Mapping):
        return _text(error.get("message"))
    return _text(error)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


class CodexAgent:
    """Codex CLI, `codex exec --json`. `grace_s`: time between SIGTERM and SIGKILL when stopping it."""

    name = "codex"

    def __init__(self, settings: CodexSettings, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.settings = settings
        self.grace_s = grace_s

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        return await run_cli_session(
            agent=self.name,
            argv=codex_argv(self.settings, read_only=request.read_only),
            request=request,
            parser=CodexStreamParser(),
            not_found=(
                f"the codex agent needs the `{self.settings.binary}` binary on PATH "
                "(set agents.codex.binary in .github/lanebot.yml or the workflow)"
            ),
            on_start=on_start,
            grace_s=self.grace_s,
        )
