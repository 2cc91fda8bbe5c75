"""The `codex` adapter: OpenAI Codex CLI in non-interactive mode.

Runs `codex exec --json [--model M] --sandbox <agents.codex.sandbox | read-only> --output-last-message
<file> ... -` with the prompt on stdin (`-` as the prompt argument makes `codex exec` read the whole
prompt from stdin). Sessions that change the tree get the configured sandbox (`workspace-write` by
default); read-only ones (planning, review) always `read-only`. `codex exec` never asks for approvals.

`--output-last-message` makes Codex write its final message to a file (a private temporary one,
outside the worktree: in a jail, in the jail's own temp, the only place besides the worktree it
can write); when it holds text, that is the final message, so a message the JSON stream
dropped under load is still read. The credentials, endpoints and proxy variables Codex documents
pass from lanebot's environment (Codex 0.171 reads no OPENAI_BASE_URL: an endpoint of one's own
is a `model_providers` entry of `config.toml`, with `base_url` and `wire_api = "responses"`).

In a jail (the request's `jail`) its home is private: `codex_login_files` copies `auth.json` and
`config.toml` from lanebot's `$CODEX_HOME` (else `~/.codex`) into `<jail home>/.codex`, 0600, for
that session alone, and CODEX_HOME points there; the copies are removed when the session ends.
The npm package's `node_modules` is bound read-only (the `codex` script, `node` from /usr, and
the platform package with the native binary and Codex's own bubblewrap).

Codex's own sandbox works inside lanebot's jail, so it stays on (`--sandbox workspace-write`, or
`read-only`). Tried with Codex 0.171.0 in the jail (bwrap 0.8, Debian 12): in `codex exec`, a
shell command the model asked for wrote the worktree under workspace-write and was refused under
read-only (tests/edges/test_agents_jailed.py, against a scripted model server); `codex sandbox -P
:workspace` wrote the worktree and its TMPDIR but got "Read-only file system" for the jail's home,
with its seccomp filter in force (`Seccomp: 2`). Codex runs its own bubblewrap (from its platform
package, in the bound `node_modules`), nesting a user namespace inside the jail's, which the host
must allow as it must for the jail itself; where it cannot, `agents.codex.sandbox:
danger-full-access` leaves the confinement to lanebot's jail alone. (Workspace-write also lets
commands write /tmp and $TMPDIR: in the jail, its own empty /tmp and private temp.)

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

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.core.workflow import CODEX_ENV, CODEX_LOCKED_CONFIG, CODEX_LOCKED_OPTIONS, NETWORK_ENV
from bot.edges.agents.base import (
    AgentConfigError,
    AgentJail,
    AgentRequest,
    AgentResult,
    Usage,
    read_settings,
    refuse_locked_options,
    require_env_names,
    require_string_list,
    require_text,
    with_detail,
)
from bot.edges.agents.process import DEFAULT_GRACE_S, Conclusion, login_copies, run_cli_session

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
DEFAULTS: Mapping[str, Any] = {
    "binary": "codex",
    "sandbox": "workspace-write",
    "model": None,
    "extra_args": [],
    "env": [],
}
MESSAGE_ITEM_TYPES = ("agent_message", "assistant_message")
LAST_MESSAGE_FILE = "last-message.txt"
MAX_LAST_MESSAGE_BYTES = 4 * 1024 * 1024
HOME_ENV = "CODEX_HOME"
AUTH_FILE = "auth.json"  # rewritten by the CLI when it refreshes a ChatGPT login
LOGIN_FILES = (AUTH_FILE, "config.toml")


@dataclass(frozen=True)
class CodexSettings:
    binary: str = "codex"
    sandbox: str = "workspace-write"
    model: str | None = None
    extra_args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | object | None) -> CodexSettings:
        raw = read_settings(options, DEFAULTS, "agents.codex")
        sandbox = raw["sandbox"]
        if sandbox not in SANDBOXES:
            raise AgentConfigError(f"agents.codex.sandbox must be one of {', '.join(SANDBOXES)}, not {sandbox!r}")
        extra_args = require_string_list(
            raw["extra_args"], "agents.codex.extra_args", example='["--skip-git-repo-check"]'
        )
        refuse_locked_options(extra_args, "agents.codex.extra_args", "codex", CODEX_LOCKED_OPTIONS, CODEX_LOCKED_CONFIG)
        return cls(
            binary=require_text(raw["binary"], "agents.codex.binary"),
            sandbox=sandbox,
            model=require_text(raw["model"], "agents.codex.model", optional=True),
            extra_args=tuple(extra_args),
            env=tuple(require_env_names(raw["env"], "agents.codex.env")),
        )


def codex_argv(settings: CodexSettings, *, read_only: bool, last_message: Path | None = None) -> list[str]:
    """The command line of one session; `-` makes Codex read the prompt from stdin."""
    argv = [settings.binary, "exec", "--json"]
    if settings.model:
        argv += ["--model", settings.model]
    argv += ["--sandbox", "read-only" if read_only else settings.sandbox]
    if last_message is not None:
        argv += ["--output-last-message", str(last_message)]
    return argv + list(settings.extra_args) + ["-"]


def codex_login_files(jail: AgentJail, parent: Mapping[str, str] | None = None) -> list[tuple[Path, Path]]:
    """(where on the host, where in the jail's home) of Codex's login and configuration, for
    `parent` (lanebot's environment): `$CODEX_HOME/<file>`, else `~/.codex/<file>`; in the jail,
    `<home>/.codex/<file>` (its CODEX_HOME)."""
    source = os.environ if parent is None else parent
    named = source.get(HOME_ENV, "").strip()
    folder = Path(named) if named else Path(source.get("HOME") or Path.home()) / ".codex"
    return [(folder / name, jail.home / ".codex" / name) for name in LOGIN_FILES]


@contextlib.contextmanager
def _last_message_file(jail: AgentJail | None) -> Iterator[Path]:
    """Where Codex writes its final message: the jail's temp, else a private temporary folder."""
    if jail is not None:
        path = jail.tmp / LAST_MESSAGE_FILE
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
        return
    with tempfile.TemporaryDirectory(prefix="lanebot-codex-") as folder:
        yield Path(folder) / LAST_MESSAGE_FILE


class CodexStreamParser:
    """Keeps the last agent message, the last usage, and how the turn ended; with `last_message`,
    the file Codex wrote its final message to is the final message when it holds text."""

    def __init__(self, last_message: Path | None = None) -> None:
        self._last_message_file = last_message
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
        final = self._written_message() or self._message or ""
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

    def _written_message(self) -> str | None:
        path = self._last_message_file
        if path is None:
            return None
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_LAST_MESSAGE_BYTES)
        except OSError:
            return None
        text = data.decode("utf-8", errors="replace")
        return text if text.strip() else None

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
        extra_env: dict[str, str] = {}
        logins: list[tuple[Path, Path]] = []
        if request.jail is not None:
            (request.jail.home / ".codex").mkdir(mode=0o700, exist_ok=True)  # Codex refuses a missing CODEX_HOME
            logins = codex_login_files(request.jail)
            extra_env[HOME_ENV] = str(request.jail.home / ".codex")
        with login_copies(logins, refreshable=(AUTH_FILE,)):
            return await self._session(request, on_start, extra_env)

    async def _session(
        self, request: AgentRequest, on_start: Callable[[int], None] | None, extra_env: Mapping[str, str]
    ) -> AgentResult:
        with _last_message_file(request.jail) as last_message:
            return await run_cli_session(
                agent=self.name,
                argv=codex_argv(self.settings, read_only=request.read_only, last_message=last_message),
                request=request,
                parser=CodexStreamParser(last_message),
                not_found=(
                    f"the codex agent needs the `{self.settings.binary}` binary on PATH "
                    "(or set agents.codex.binary in the host's workflow, the folder LANEBOT_WORKFLOWS_DIR names)"
                ),
                on_start=on_start,
                extra_env=extra_env,
                grace_s=self.grace_s,
                passthrough=(*CODEX_ENV, *NETWORK_ENV, *self.settings.env),
            )
