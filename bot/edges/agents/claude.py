"""The `claude` adapter: Claude Code in headless mode.

Runs `claude -p --output-format stream-json --verbose --setting-sources user --permission-mode <mode>
[--allowedTools Bash] [--model M] ...` with the prompt on stdin (with no prompt argument, `claude -p` reads it from stdin). The stream is one
JSON object per line: `{"type":"system","subtype":"init",...}`, `assistant` and `user` messages,
other event types newer versions add (kept in the transcript, ignored here), and a final
`{"type":"result","subtype":"success"|"error_max_turns"|"error_during_execution"|...,"is_error",
"result","total_cost_usd","usage",...}`. The session succeeded when that result event says
`success`, `is_error` is false and the process exited 0; the final message is its `result`. Once the
result event is in, the session is over: a CLI that then does not exit (it happens) is given a short
grace and stopped, and the result stands; that is not a timeout.

`--setting-sources user` loads the user settings only (in a jail, the private home's: none of the
host's): a repository's own `.claude/settings.json` and `.claude/settings.local.json` (their hooks,
permission rules, MCP approvals) are not loaded in lanebot's sessions (the CLI always adds policy
settings and `--settings`).

Sessions that change the tree run in the configured mode (default `acceptEdits`, which accepts edits
inside the working directory but asks, so refuses headless, for most shell commands) with `Bash`
allowed by `--allowedTools`, so a lane can run its unit's check. `bypassPermissions` needs
`IS_SANDBOX=1` when run as root (the CLI exits otherwise), which lanebot sets in that mode. The
credentials, endpoints and proxy variables Claude Code documents pass from lanebot's environment.

In a jail (the request's `jail`) its home is private, so a CLI logged in on the host would lose
its login: `claude_login_files` copies the host's `.credentials.json` and `.claude.json` (from
lanebot's `$CLAUDE_CONFIG_DIR`, else `~/.claude/` and `~/`) into `<jail home>/.claude`, 0600,
for that session alone, and `CLAUDE_CONFIG_DIR` points there (Claude Code then keeps both files
in that folder). ANTHROPIC_API_KEY and the other variables pass as they do unjailed. The copies
are removed when the session ends; a token the CLI refreshed inside the jail is not written back.
Claude Code 2.1 needs nothing else bound than its npm package (a native binary).

Read-only sessions (planning) run in permission mode `plan` and, because deny rules hold in every
mode while a repository's own `.claude/settings.json` may carry allow rules, also name the tools
that change files or run commands in `--disallowedTools`. `ExitPlanMode` is disallowed too: with
no human to approve leaving plan mode, the answer must come back as the final message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core.workflow import (
    CLAUDE_ENV,
    CLAUDE_ENV_PREFIXES,
    CLAUDE_LOCKED_OPTIONS,
    CLAUDE_PERMISSION_MODES,
    CLAUDE_REFUSED_MODES,
    NETWORK_ENV,
)
from bot.edges.agents.base import (
    AgentConfigError,
    AgentJail,
    AgentRequest,
    AgentResult,
    Usage,
    is_count,
    read_settings,
    refuse_locked_options,
    require_env_names,
    require_string_list,
    require_text,
    with_detail,
)
from bot.edges.agents.process import (
    DEFAULT_GRACE_S,
    RESULT_EXIT_GRACE_S,
    Conclusion,
    login_copies,
    run_cli_session,
)

PERMISSION_MODES = CLAUDE_PERMISSION_MODES
READ_ONLY_DISALLOWED_TOOLS = ("Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "ExitPlanMode")
# What a session that changes the tree may use beyond what its mode allows: the shell, to run the
# unit's check (acceptEdits accepts edits in the worktree, not commands).
WRITE_ALLOWED_TOOLS = ("Bash",)
SETTING_SOURCES = "user"
DEFAULTS: Mapping[str, Any] = {
    "binary": "claude",
    "permission_mode": "acceptEdits",
    "model": None,
    "extra_args": [],
    "env": [],
}


@dataclass(frozen=True)
class ClaudeSettings:
    binary: str = "claude"
    permission_mode: str = "acceptEdits"
    model: str | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | object | None) -> ClaudeSettings:
        raw = read_settings(options, DEFAULTS, "agents.claude")
        mode = raw["permission_mode"]
        if mode in CLAUDE_REFUSED_MODES:
            raise AgentConfigError(
                f"agents.claude.permission_mode {mode!r} does not work headless: {CLAUDE_REFUSED_MODES[mode]}; "
                f"choose one of {', '.join(PERMISSION_MODES)}"
            )
        if mode not in PERMISSION_MODES:
            raise AgentConfigError(
                f"agents.claude.permission_mode must be one of {', '.join(PERMISSION_MODES)}, not {mode!r}"
            )
        extra_args = require_string_list(raw["extra_args"], "agents.claude.extra_args", example='["--max-turns", "40"]')
        refuse_locked_options(extra_args, "agents.claude.extra_args", "claude", CLAUDE_LOCKED_OPTIONS)
        return cls(
            binary=require_text(raw["binary"], "agents.claude.binary"),
            permission_mode=mode,
            model=require_text(raw["model"], "agents.claude.model", optional=True),
            extra_args=tuple(extra_args),
            env=tuple(require_env_names(raw["env"], "agents.claude.env")),
        )


def claude_argv(settings: ClaudeSettings, *, read_only: bool) -> list[str]:
    """The command line of one session; the prompt is never part of it."""
    mode = "plan" if read_only else settings.permission_mode
    argv = [
        settings.binary,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--setting-sources",
        SETTING_SOURCES,
        "--permission-mode",
        mode,
    ]
    if settings.model:
        argv += ["--model", settings.model]
    if read_only:
        argv += ["--disallowedTools", ",".join(READ_ONLY_DISALLOWED_TOOLS)]
    elif mode not in ("plan", "bypassPermissions"):
        argv += ["--allowedTools", ",".join(WRITE_ALLOWED_TOOLS)]
    return argv + list(settings.extra_args)


def claude_extra_env(settings: ClaudeSettings, *, read_only: bool) -> dict[str, str]:
    """What lanebot adds to the session's environment: IS_SANDBOX=1 for bypassPermissions, which
    Claude Code refuses to run as root without it."""
    if not read_only and settings.permission_mode == "bypassPermissions":
        return {"IS_SANDBOX": "1"}
    return {}


CONFIG_DIR_ENV = "CLAUDE_CONFIG_DIR"
CREDENTIALS_FILE = ".credentials.json"  # rewritten by the CLI when it refreshes its OAuth token
LOGIN_FILES = (CREDENTIALS_FILE, ".claude.json")


def claude_login_files(jail: AgentJail, parent: Mapping[str, str] | None = None) -> list[tuple[Path, Path]]:
    """(where on the host, where in the jail's home) of Claude Code's login files, for `parent`
    (lanebot's environment): `$CLAUDE_CONFIG_DIR/<file>`, else `~/.claude/.credentials.json` and
    `~/.claude.json`; in the jail, both in `<home>/.claude` (its CLAUDE_CONFIG_DIR)."""
    source = os.environ if parent is None else parent
    inside = jail.home / ".claude"
    if source.get(CONFIG_DIR_ENV, "").strip():
        folder = Path(source[CONFIG_DIR_ENV])
        return [(folder / name, inside / name) for name in LOGIN_FILES]
    home = Path(source.get("HOME") or Path.home())
    return [
        (home / ".claude" / LOGIN_FILES[0], inside / LOGIN_FILES[0]),
        (home / LOGIN_FILES[1], inside / LOGIN_FILES[1]),
    ]


class ClaudeStreamParser:
    """Keeps the last `result` event of a stream-json session; everything else is the transcript's."""

    def __init__(self) -> None:
        self._result: dict[str, Any] | None = None

    def feed(self, line: str, event: dict[str, Any] | None) -> None:
        if event is not None and event.get("type") == "result":
            self._result = event

    def session_over(self) -> bool:
        """The final `result` event is in: nothing the process prints later changes the session."""
        return self._result is not None

    def conclude(self, exit_status: int) -> Conclusion:
        result = self._result
        if result is None:
            return Conclusion("", Usage(), f"claude exited with status {exit_status} without a result event")
        final = result.get("result")
        text = final if isinstance(final, str) else ""
        usage = claude_usage(result)
        subtype = result.get("subtype")
        if subtype != "success":
            return Conclusion(
                text,
                usage,
                with_detail(f"claude ended with {subtype or 'an unnamed result'}", _failure_detail(result, text)),
            )
        if result.get("is_error") is True:
            return Conclusion(text, usage, with_detail("claude reported an error", _failure_detail(result, text)))
        if exit_status != 0:
            return Conclusion(text, usage, f"claude reported success but exited with status {exit_status}")
        return Conclusion(text, usage)


def claude_usage(result: Mapping[str, Any]) -> Usage:
    """Usage and cost from a `result` event (`total_cost_usd`; older versions said `cost_usd`).

    `usage` is the session's own count; after a broken stream Claude Code retries without
    streaming and that count comes back all zeros, while `modelUsage` (per model, camelCase) still
    has the real one, so an all-zero `usage` gives way to the sum over `modelUsage`."""
    reported = result.get("usage")
    usage: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
    input_keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    input_tokens, output_tokens = _counts(usage, input_keys, "output_tokens")
    if not input_tokens and not output_tokens:
        per_model = result.get("modelUsage")
        models = (
            [entry for entry in per_model.values() if isinstance(entry, Mapping)]
            if isinstance(per_model, Mapping)
            else []
        )
        model_keys = ("inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens")
        summed = [_counts(entry, model_keys, "outputTokens") for entry in models]
        if any(tokens for pair in summed for tokens in pair):
            input_tokens = sum(pair[0] or 0 for pair in summed)
            output_tokens = sum(pair[1] or 0 for pair in summed)
    cost = result.get("total_cost_usd", result.get("cost_usd"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
    )


def _counts(usage: Mapping[str, Any], input_keys: tuple[str, ...], output_key: str) -> tuple[int | None, int | None]:
    counted = [usage[key] for key in input_keys if is_count(usage.get(key))]
    output = usage.get(output_key)
    return (sum(counted) if counted else None), (output if is_count(output) else None)


def _failure_detail(result: Mapping[str, Any], text: str) -> str:
    errors = result.get("errors")
    if isinstance(errors, list) and errors:
        return "; ".join(str(error) for error in errors)
    return text


class ClaudeAgent:
    """Claude Code, headless. `grace_s`: how long a stopped session gets between SIGTERM and SIGKILL."""

    name = "claude"

    def __init__(
        self, settings: ClaudeSettings, *, grace_s: float = DEFAULT_GRACE_S, result_grace_s: float = RESULT_EXIT_GRACE_S
    ) -> None:
        self.settings = settings
        self.grace_s = grace_s
        self.result_grace_s = result_grace_s

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        extra_env = claude_extra_env(self.settings, read_only=request.read_only)
        logins = claude_login_files(request.jail) if request.jail is not None else []
        if request.jail is not None:
            extra_env[CONFIG_DIR_ENV] = str(request.jail.home / ".claude")
        with login_copies(logins, refreshable=(CREDENTIALS_FILE,)):
            return await run_cli_session(
                agent=self.name,
                argv=claude_argv(self.settings, read_only=request.read_only),
                request=request,
                parser=ClaudeStreamParser(),
                not_found=(
                    f"the claude agent needs the `{self.settings.binary}` binary on PATH "
                    "(or set agents.claude.binary in the host's workflow, the folder LANEBOT_WORKFLOWS_DIR names)"
                ),
                on_start=on_start,
                extra_env=extra_env,
                grace_s=self.grace_s,
                passthrough=(*CLAUDE_ENV, *NETWORK_ENV, *self.settings.env),
                passthrough_prefixes=CLAUDE_ENV_PREFIXES,
                result_grace_s=self.result_grace_s,
            )
