"""The `command` adapter: any executable as an agent.

The argv comes from the settings (`agents.command.argv`, a list: it is never split or run through a
shell). The prompt arrives on stdin and, for tools that want a file, in a temporary file outside the
worktree named by `$LANEBOT_PROMPT_FILE` (removed afterwards; in a jail, in the jail's own temp). `$LANEBOT_READ_ONLY` is `1` when the
session must not change the tree (planning), else `0`. No variable of lanebot's environment passes
beyond the harmless few every agent gets, except those `agents.command.env` names (never lanebot's own).

The exit status decides success. The final message is the `result` of the last JSON line that
carries a string `result` (so a tool may speak Claude's result shape), else the last non-empty line
the tool printed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.edges.agents.base import (
    AgentConfigError,
    AgentRequest,
    AgentResult,
    Usage,
    read_settings,
    require_env_names,
    require_string_list,
)
from bot.edges.agents.process import DEFAULT_GRACE_S, Conclusion, run_cli_session

DEFAULTS: Mapping[str, Any] = {"argv": None, "env": []}
PROMPT_FILE_ENV = "LANEBOT_PROMPT_FILE"
READ_ONLY_ENV = "LANEBOT_READ_ONLY"


@dataclass(frozen=True)
class CommandSettings:
    argv: tuple[str, ...]
    env: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | object | None) -> CommandSettings:
        raw = read_settings(options, DEFAULTS, "agents.command")
        argv = require_string_list(raw["argv"], "agents.command.argv", example='["python", "tools/agent.py"]')
        if not argv or not argv[0].strip():
            raise AgentConfigError(
                "the command agent needs agents.command.argv, the program and its arguments as a list, "
                'e.g. ["python", "tools/agent.py"]'
            )
        return cls(argv=tuple(argv), env=tuple(require_env_names(raw["env"], "agents.command.env")))


class CommandOutputParser:
    """Keeps the last non-empty line and the last JSON `result`."""

    def __init__(self) -> None:
        self._last_line = ""
        self._result: str | None = None

    def feed(self, line: str, event: dict[str, Any] | None) -> None:
        if line.strip():
            self._last_line = line.strip()
        if event is not None and isinstance(event.get("result"), str):
            self._result = event["result"]

    def conclude(self, exit_status: int) -> Conclusion:
        final = self._result if self._result is not None else self._last_line
        error = None if exit_status == 0 else f"the command agent exited with status {exit_status}"
        return Conclusion(final, Usage(), error)


class CommandAgent:
    """An executable from the settings. `grace_s`: time between SIGTERM and SIGKILL when stopping it."""

    name = "command"

    def __init__(self, settings: CommandSettings, *, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.settings = settings
        self.grace_s = grace_s

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        prompt_file = _write_prompt_file(request.prompt, None if request.jail is None else request.jail.tmp)
        try:
            return await run_cli_session(
                agent=self.name,
                argv=list(self.settings.argv),
                request=request,
                parser=CommandOutputParser(),
                not_found=(
                    f"the command agent needs `{self.settings.argv[0]}` on PATH "
                    "(set agents.command.argv in the host's workflow, the folder LANEBOT_WORKFLOWS_DIR names)"
                ),
                on_start=on_start,
                extra_env={PROMPT_FILE_ENV: str(prompt_file), READ_ONLY_ENV: "1" if request.read_only else "0"},
                grace_s=self.grace_s,
                passthrough=self.settings.env,
            )
        finally:
            prompt_file.unlink(missing_ok=True)


def _write_prompt_file(prompt: str, folder: Path | None) -> Path:
    """The prompt in a private temporary file (mode 0600), in `folder` or the system's temp directory."""
    descriptor, name = tempfile.mkstemp(prefix="lanebot-prompt-", suffix=".md", dir=folder)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(prompt)
    return Path(name)
