"""The agent interface every adapter implements, and the small helpers they share.

An agent session takes a prompt, a working directory, a timeout, an environment and, for a CLI,
the jail its process runs in (`AgentJail`), and gives back its exit status, its final message,
token usage and cost where the agent reports them, and the path of its transcript (JSONL).
Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeGuard, overload, runtime_checkable

from bot.core.workflow import agent_env_problem, locked_option


class AgentConfigError(RuntimeError):
    """An agent's settings are wrong or incomplete; running it again will not help until they change."""


class AgentNotFound(AgentConfigError):
    """The agent's executable is not on the PATH it would run with."""


@dataclass(frozen=True)
class Usage:
    """What a session consumed, as far as the agent reported it (`None` when it did not).

    `input_tokens` counts every input token the model read, cached ones included, so numbers from
    different agents compare (Claude reports cache reads and writes apart from `input_tokens`;
    Codex and OpenAI-style APIs count cached tokens inside it).
    """

    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


class AgentJail(Protocol):
    """Where a session's process runs: a jail the runner built (bot.runner.jailing.agent_jail on
    bot.edges.jail), so the adapters need not know bubblewrap. `home` and `tmp` are the session's
    own private, writable folders (its $HOME and $TMPDIR), the only places besides the working
    directory it can write; files an adapter gives its CLI go there."""

    @property
    def home(self) -> Path: ...

    @property
    def tmp(self) -> Path: ...

    def command(
        self, executable: str, arguments: Sequence[str], *, env: Mapping[str, str], cwd: Path
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and the environment to start so that `executable arguments` runs in the jail
        in `cwd` with exactly `env` (and the jail's HOME and TMPDIR) as its environment."""
        ...


@dataclass(frozen=True)
class AgentRequest:
    """One agent session to run; with a `jail`, a CLI's process runs in it (None: a plain process)."""

    prompt: str
    cwd: Path
    transcript: Path
    timeout: float
    env: Mapping[str, str] = field(default_factory=dict)
    brief: str | None = None
    read_only: bool = False
    jail: AgentJail | None = None

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"an agent timeout must be a positive number of seconds, not {self.timeout!r}")


@dataclass(frozen=True)
class AgentResult:
    """How a session ended.

    `exit_status` is the process's exit status (negative: killed by that signal), `None` for
    adapters that start no process (`recipe`, `http`) or when the process never exited by itself.
    `error` is a sentence for a human whenever the session did not succeed; `ok` is the only test
    callers need.
    """

    exit_status: int | None
    final_message: str
    usage: Usage
    transcript: Path
    timed_out: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.error is None


@runtime_checkable
class Agent(Protocol):
    """An agent adapter. `on_start(pid)` is called once the agent's process exists (process adapters only)."""

    name: str

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult: ...


def read_settings(
    options: Mapping[str, Any] | object | None, defaults: Mapping[str, Any], section: str
) -> dict[str, Any]:
    """The adapter settings named in `defaults`, taken from a mapping or from an object's attributes.

    A mapping with a key the adapter does not know is refused (a typo would otherwise be silently
    ignored); `section` names where the settings live, for the message.
    """
    if options is None:
        return dict(defaults)
    if isinstance(options, Mapping):
        unknown = sorted(str(key) for key in options if key not in defaults)
        if unknown:
            raise AgentConfigError(
                f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(f'{section}.{key}' for key in unknown)}"
                f" (known: {', '.join(defaults)})"
            )
        return {key: options.get(key, default) for key, default in defaults.items()}
    return {key: getattr(options, key, default) for key, default in defaults.items()}


@overload
def require_text(value: Any, setting: str, *, optional: Literal[False] = False) -> str: ...
@overload
def require_text(value: Any, setting: str, *, optional: bool) -> str | None: ...
def require_text(value: Any, setting: str, *, optional: bool = False) -> str | None:
    """`value` as a non-empty string (or `None` when `optional`), else a clear error naming `setting`."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise AgentConfigError(f"{setting} must be a non-empty string, not {value!r}")
    return value


def require_string_list(value: Any, setting: str, *, example: str) -> list[str]:
    """`value` as a list of strings, else a clear error naming `setting` with an example."""
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise AgentConfigError(f"{setting} must be a list of strings, e.g. {example}; got {value!r}")
    bad = [item for item in value if not isinstance(item, str)]
    if bad:
        raise AgentConfigError(f"{setting} must be a list of strings, e.g. {example}; {bad[0]!r} is not a string")
    return list(value)


def require_env_names(value: Any, setting: str) -> list[str]:
    """`agents.<name>.env`: names of variables to pass from lanebot's environment, none of them lanebot's own."""
    names = require_string_list(value, setting, example='["MY_PROXY_TOKEN"]')
    for index, name in enumerate(names):
        problem = agent_env_problem(name)
        if problem is not None:
            raise AgentConfigError(f"{setting}[{index}]: {problem}")
    return names


def refuse_locked_options(
    arguments: Sequence[str], setting: str, agent: str, locked: Collection[str], config_keys: Sequence[str] = ()
) -> None:
    """Refuse extra arguments that would change the session's permissions, sandbox, tools or settings."""
    found = locked_option(arguments, locked, config_keys)
    if found is not None:
        raise AgentConfigError(
            f"{setting}: {found!r} changes what the {agent} session may do (permissions, sandbox, tools or "
            "settings), which lanebot sets itself: read-only steps must stay read-only"
        )


def describe_seconds(seconds: float) -> str:
    """`5 s`, `0.5 s`, `90 s`: a timeout as the error sentences show it."""
    return f"{seconds:g} s"


DETAIL_CHARS = 500


def with_detail(sentence: str, detail: str) -> str:
    """`sentence: detail`, the detail folded to one line and cut to DETAIL_CHARS; the sentence alone when there is none."""
    detail = " ".join(detail.split())
    if not detail:
        return sentence
    return f"{sentence}: {detail if len(detail) <= DETAIL_CHARS else detail[:DETAIL_CHARS] + '…'}"


def is_count(value: Any) -> TypeGuard[int]:
    """A token count as agents report it: a non-negative int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
