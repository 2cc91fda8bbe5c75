"""The workflow: lanebot's settings for every step of a run, loaded, merged and validated.

`workflows/resolve-issue.yaml` holds the defaults. The lanebot host may layer its own settings
over it (`host_overrides`), and then a repository's `.github/lanebot.yml` (and whatever its
`_extends` pulled in, resolved by the caller) is deep-merged over that. The merged result is
validated as a whole: every problem is reported at once, each naming the key path and the file
that supplied the offending value, so a maintainer fixes them in one go.

A repository's settings are trusted less than the host's: they may not choose which programs run
on the runner host (`agents.<name>.binary`, `argv`, `extra_args`, ...), only which adapter each
step uses and its `model`.

Pure: the caller reads the files (bot.edges.workflow_files) and passes their mappings and the names
of the prompt templates there; the prompts are rendered by bot.render.prompts. The pull request's
title template is rendered here (a string template, sandboxed).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import jinja2
import yaml
from jinja2.sandbox import SandboxedEnvironment
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from bot.core.budget import BudgetCaps
from bot.core.graph import SessionBudget

__all__ = [
    "PROMPT_STEPS",
    "REVIEW_LENSES",
    "WORKFLOW_FILE_NAME",
    "IssueFacts",
    "Workflow",
    "WorkflowError",
    "build_workflow",
    "deep_merge",
    "parse_duration",
    "parse_yaml",
]

WORKFLOW_FILE_NAME = "resolve-issue.yaml"
EXTENDS_KEY = "_extends"
MAX_DURATION_SECONDS = 24 * 3600
PR_TITLE_LIMIT = 256  # GitHub refuses longer pull request titles.

# The prompt each step renders: step name -> (section, key) naming the template file.
PROMPT_STEPS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "prompt"),
    "lane": ("build", "prompt"),
    "resolve": ("build", "resolver_prompt"),
    "integrate": ("integrate", "prompt"),
    "fix": ("fix", "prompt"),
    "review": ("review", "prompt"),
    "refute": ("review", "refute_prompt"),
}
# What each of lanebot's own reviewers looks for; `review.lenses` picks from these names, and the
# review prompt shows the lens's description to its verifier.
REVIEW_LENSES: dict[str, str] = {
    "correctness": (
        "Does the change do what it claims, and do it right? Look for logic errors, mishandled edge"
        " cases (empty input, None, off-by-one, error paths, concurrency), callers the change breaks,"
        " and behaviour that contradicts the code's own documentation. Report only defects you can"
        " point to on a line of the diff, with the evidence that shows them."
    ),
    "security": (
        "Can the change be abused, or does it leak? Look for injection (shell, SQL, paths, templates,"
        " HTML), untrusted input reaching files, processes or the network unchecked, secrets in code,"
        " logs, argv or URLs, missing authorisation checks, unsafe deserialisation, and weakened"
        " defaults. Report only risks the diff introduces or exposes, with the evidence that shows them."
    ),
    "checks": (
        "Do the tests and checks prove the change? Look for new behaviour no test exercises, tests"
        " that cannot fail or assert nothing, hard-coded expected results, skipped or loosened"
        " checks, and CI or lint settings weakened to pass. Report only gaps you can point to on a"
        " line of the diff, with the evidence that shows them."
    ),
}


class WorkflowError(ValueError):
    """The workflow could not be loaded; `problems` lists every reason, one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems))


# --------------------------------------------------------------------------- YAML and merging


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key written twice in one mapping.

    PyYAML keeps the last of two equal keys, so a second `build:` section would silently drop
    the first one's settings.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str):
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"the key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """Parse one settings document; an empty document is an empty mapping.

    Raises WorkflowError naming the source and line for a syntax error, a duplicated key, or a
    top level that is not a mapping.
    """
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as error:
        raise WorkflowError([_yaml_problem(error, source)]) from None
    except yaml.YAMLError as error:
        raise WorkflowError([f"{source}: not valid YAML: {error}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise WorkflowError(
            [f"{source}: the top level must be a mapping of settings (like `build:`), not {_kind(data)}"]
        )
    problem = _alias_problem(data)
    if problem:
        raise WorkflowError([f"{source}: {problem}"])
    return data


# Aliases share one object: a document of a few lines can stand for a tree of millions of nodes
# (an alias of an alias of ...), or contain itself. Settings are small; past this, it is refused.
MAX_SETTINGS_NODES = 20_000


def _alias_problem(data: object) -> str | None:
    """Why the document's aliases cannot be settings (a cycle, or too large once expanded), or None."""
    visited = 0
    stack: list[tuple[object, frozenset[int]]] = [(data, frozenset())]
    while stack:
        node, path = stack.pop()
        visited += 1
        if visited > MAX_SETTINGS_NODES:
            return f"with its aliases expanded it holds more than {MAX_SETTINGS_NODES:,} values; write it out plainly"
        children = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else []
        if not children:
            continue
        if id(node) in path:
            return "an alias refers to a mapping or list that contains it, so it never ends"
        inner = path | {id(node)}
        stack.extend((child, inner) for child in children)
    return None


def _yaml_problem(error: yaml.MarkedYAMLError, source: str) -> str:
    mark = error.problem_mark or error.context_mark
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = error.problem or error.context or "not valid YAML"
    return f"{source}:{where}: {what}"


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `override` into a copy of `base`: mappings merge recursively; lists and scalars replace."""
    merged = {key: _copy(value) for key, value in base.items()}
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = _copy(value)
    return merged


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


KeyPath = tuple[str, ...]


def _record_origins(mapping: Mapping[str, Any], source: str, origins: dict[KeyPath, str], prefix: KeyPath = ()) -> None:
    """Note, for every key path in `mapping`, that `source` supplied its current value."""
    for key, value in mapping.items():
        path = (*prefix, str(key))
        origins[path] = source
        if isinstance(value, Mapping):
            _record_origins(value, source, origins, path)


def _origin_of(path: Sequence[str | int], origins: Mapping[KeyPath, str], fallback: str) -> str:
    keys = tuple(str(part) for part in path if not isinstance(part, int))
    for length in range(len(keys), 0, -1):
        if keys[:length] in origins:
            return origins[keys[:length]]
    return fallback


# --------------------------------------------------------------------------- value parsers


_DURATION = re.compile(r"(?:(?P<h>\d+)h)?\s*(?:(?P<m>\d+)m)?\s*(?:(?P<s>\d+)s)?", re.ASCII)


def parse_duration(value: object) -> int:
    """Seconds in a duration: "90s", "30m", "2h", "1h30m", "120" or 120 (at most 24h)."""
    seconds = _duration_seconds(value)
    if seconds is None:
        raise ValueError(f"{_shown(value)} is not a duration: write e.g. 90s, 30m, 2h, 1h30m or a number of seconds")
    if seconds <= 0:
        raise ValueError(f"a duration must be longer than zero (got {_shown(value)})")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"{_shown(value)} is longer than the 24h limit")
    return seconds


def _duration_seconds(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text.isascii() and text.isdigit():
        return int(text)
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        return None
    hours, minutes, seconds = (int(match.group(part) or 0) for part in "hms")
    return hours * 3600 + minutes * 60 + seconds


Role = Literal["write", "maintain", "admin"]
_ROLE_RANK = {"read": 0, "triage": 1, "write": 2, "maintain": 3, "admin": 4}
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


def _parse_approvers(value: object) -> object:
    if isinstance(value, str):
        if value in ("write", "maintain", "admin"):
            return value
        raise ValueError(
            f"{_shown(value)} is not a role: write a minimum role (write, maintain or admin) or a list of GitHub logins"
        )
    if not isinstance(value, list):
        raise ValueError(
            f"must be a minimum role (write, maintain or admin) or a list of GitHub logins, not {_kind(value)}"
        )
    if not value:
        raise ValueError("an empty list would let nobody approve: name at least one login, or a role")
    bots = [login for login in value if isinstance(login, str) and login.lower().endswith("[bot]")]
    if bots:
        raise ValueError(f"bot accounts may never approve: {', '.join(bots)}")
    malformed = [_shown(login) for login in value if not (isinstance(login, str) and _LOGIN.match(login))]
    if malformed:
        raise ValueError(f"not GitHub logins: {', '.join(malformed)}")
    return tuple(value)


_TEMPLATE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def _check_template_name(value: str) -> str:
    if not _TEMPLATE_NAME.match(value) or ".." in value:
        raise ValueError(
            f"{_shown(value)} is not a template file name: name a file inside workflows/prompts "
            "(like lane.md.j2), not a path"
        )
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _check_env_name(value: str) -> str:
    # The value is deliberately not echoed: someone may have pasted the key itself here.
    if not _ENV_NAME.match(value):
        raise ValueError("must be the NAME of an environment variable (letters, digits and _), never the key itself")
    return value


def _check_url(value: str) -> str:
    # The value is not echoed: a pasted URL may carry a key in its user part or its query.
    if not re.match(r"^https?://[^\s/@]+(/\S*)?$", value):
        raise ValueError(
            "must be an http(s) URL without credentials in it (the key goes in the variable named by api_key_env)"
        )
    return value


def _check_command(value: str) -> str:
    if not value.strip():
        raise ValueError("must be the repository's full test command, e.g. `make test` (`true` to skip)")
    return value


def _refuse_http_outside_planning(value: object) -> object:
    if value == "http":
        raise ValueError(
            "the http adapter can only plan (it cannot edit files): choose claude, codex, command or recipe"
        )
    return value


MAX_LANE_PORTS = 100


def _parse_cache_key(value: object) -> object:
    """A list of repository paths: relative, without `..`, each named once."""
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        return value  # strict validation says what is wrong
    for path in value:
        parts = path.split("/")
        if not path or path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"{path!r} is not a path in the repository: write it relative, e.g. package-lock.json")
    if len(set(value)) != len(value):
        raise ValueError("each file keys the cache once")
    return tuple(value)


def _parse_dollars(value: object) -> object:
    """A cap in US dollars: a number above zero (null, or leaving the key out, is no cap)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number of US dollars, e.g. 5 or 2.50, or null for no cap (got {_shown(value)})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be more than 0 dollars, or null for no cap (got {_shown(value)})")
    return float(value)


def _parse_lenses(value: object) -> object:
    choices = ", ".join(REVIEW_LENSES)
    if not isinstance(value, list):
        raise ValueError(f"must be a list of lenses, from {choices} (got {_shown(value)})")
    if not value:
        raise ValueError(f"name at least one lens ({choices}), or set review.enabled: false")
    unknown = [_shown(lens) for lens in value if lens not in REVIEW_LENSES]
    if unknown:
        raise ValueError(
            f"unknown lens{'es' if len(unknown) > 1 else ''} {', '.join(unknown)}: the lenses are {choices}"
        )
    repeated = sorted({lens for lens in value if value.count(lens) > 1}, key=list(REVIEW_LENSES).index)
    if repeated:
        raise ValueError(f"each lens reviews once; repeated: {', '.join(repeated)}")
    return tuple(value)


_SAMPLE_TITLE_CONTEXT = {"issue": {"number": 1, "title": "Sample issue"}, "proposed": ""}


def _check_title_template(value: str) -> str:
    try:
        _string_environment().from_string(value).render(_SAMPLE_TITLE_CONTEXT)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"not a valid template: {error.message} (line {error.lineno})") from None
    except jinja2.UndefinedError as error:
        raise ValueError(f"{error.message}; the title may use issue.number, issue.title and proposed") from None
    except jinja2.TemplateError as error:
        raise ValueError(f"the template fails: {error}") from None
    return value


# --------------------------------------------------------------------------- the settings models

Count = Annotated[int, Field(ge=1)]
Retries = Annotated[int, Field(ge=0)]
Duration = Annotated[int, BeforeValidator(parse_duration)]
TemplateName = Annotated[str, AfterValidator(_check_template_name)]
DollarCap = Annotated[float | None, BeforeValidator(_parse_dollars)]
NonEmpty = Annotated[str, Field(min_length=1)]
AgentName = Literal["claude", "codex", "command", "recipe", "http"]
SessionAgentName = Annotated[
    Literal["claude", "codex", "command", "recipe"], BeforeValidator(_refuse_http_outside_planning)
]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TriggerSettings(_Settings):
    label: Annotated[str, Field(min_length=1, max_length=50)]


class PlanSettings(_Settings):
    agent: AgentName
    prompt: TemplateName
    max_units: Count
    max_retries: Retries
    timeout: Duration


# A login listed in `gate.approvers` must still hold this role on the repository: the list narrows who
# may command lanebot, it never admits someone GitHub gives less than write.
LISTED_APPROVER_ROLE: Role = "write"


class GateSettings(_Settings):
    approvers: Annotated[Role | tuple[str, ...], BeforeValidator(_parse_approvers)]

    @property
    def minimum_role(self) -> Role:
        """The least repository role that may command lanebot: the role written, or write for a list."""
        return LISTED_APPROVER_ROLE if isinstance(self.approvers, tuple) else self.approvers

    def may_approve(self, login: str, role: str | None, *, listed: bool = False) -> bool:
        """Whether `login`, holding repository `role` (read…admin, or None), may command lanebot.

        `listed`: whether the commenter's GitHub user id is one of those the logins of a list in
        `gate.approvers` stand for (the caller resolves them; a login can be renamed and taken by
        someone else, an id cannot). Under a list, a listed person needs `minimum_role` too."""
        if login.lower().endswith("[bot]"):
            return False
        if isinstance(self.approvers, tuple) and not listed:
            return False
        return _ROLE_RANK.get(role or "", -1) >= _ROLE_RANK[self.minimum_role]


class BuildSettings(_Settings):
    schedule: Literal["barrier", "eager"]
    max_lanes: Count
    agent: SessionAgentName
    prompt: TemplateName
    max_retries: Retries
    timeout: Duration
    on_conflict: Literal["block", "agent"]
    resolver_prompt: TemplateName
    network: bool  # whether checks and verify (in their jail) may reach the network
    setup: str  # a script run in each new lane worktree before its agent; "" for none
    teardown: str  # a script run after each attempt, before its worktree is removed
    setup_timeout: Duration
    cache_key: Annotated[tuple[str, ...], BeforeValidator(_parse_cache_key)]
    ports: Annotated[int, Field(ge=0, le=MAX_LANE_PORTS)]


class IntegrateSettings(_Settings):
    agent: SessionAgentName
    prompt: TemplateName
    verify: Annotated[str, AfterValidator(_check_command)]
    max_retries: Retries
    timeout: Duration
    verify_timeout: Duration
    find_culprit: bool = True  # a failed verify bisects the lanes' merges for the one that broke it


class FixSettings(_Settings):
    """A fix lane: acts on an approver's changes-requested review or `/fix` on lanebot's pull request."""

    agent: SessionAgentName
    prompt: TemplateName
    max_retries: Retries
    timeout: Duration


class ReviewSettings(_Settings):
    """lanebot's own review of its pull request: one verifier per lens, then each refutes the others."""

    enabled: bool
    agent: SessionAgentName
    prompt: TemplateName
    refute_prompt: TemplateName
    lenses: Annotated[tuple[str, ...], BeforeValidator(_parse_lenses)]
    max_findings: Count
    timeout: Duration

    def sessions(self) -> int:
        """The most verifier sessions one review starts (none when it is off).

        Each lens finds; with two or more lenses, each also judges the other lenses' findings.
        """
        if not self.enabled:
            return 0
        lenses = len(self.lenses)
        return lenses + (lenses if lenses > 1 else 0)


class CiSettings(_Settings):
    """What lanebot does when the repository's own CI fails on its pull request (bot/core/ci_failures.py)."""

    max_fix_rounds: Retries  # fix lanes per pull request for failing CI; 0: never one


class PullRequestSettings(_Settings):
    draft: bool
    title: Annotated[str, Field(min_length=1), AfterValidator(_check_title_template)]


class CleanupSettings(_Settings):
    """What lanebot tidies when the pull request is merged or closed (the run's worktrees always go)."""

    delete_lane_branches: bool


class BudgetSettings(_Settings):
    """Caps on what agent sessions cost (as their CLIs report it); None: no cap (bot.core.budget)."""

    max_cost_usd: DollarCap = None  # per run
    daily_cost_usd: DollarCap = None  # per repository, per UTC day

    def caps(self) -> BudgetCaps:
        return BudgetCaps(max_cost_usd=self.max_cost_usd, daily_cost_usd=self.daily_cost_usd)


# --------------------------------------------------------------------------- what agent CLIs are given
# Shared with bot.edges.agents, which applies the same rules to the settings it is handed.

# The variables each CLI documents for credentials, endpoints and proxies. They pass from lanebot's
# environment to that CLI's process (and to no other) when set; `agents.<name>.env` names more.
# Claude Code: code.claude.com/docs/en/env-vars, /amazon-bedrock, /google-vertex-ai, /network-config.
CLAUDE_ENV: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "CLAUDE_CODE_SKIP_BEDROCK_AUTH",
    "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_VERTEX_BASE_URL",
    "CLOUD_ML_REGION",
    "CLAUDE_CODE_SKIP_VERTEX_AUTH",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "CLAUDE_CODE_USE_FOUNDRY",
    "ANTHROPIC_FOUNDRY_API_KEY",
    "ANTHROPIC_FOUNDRY_BASE_URL",
    "ANTHROPIC_FOUNDRY_RESOURCE",
    "CLAUDE_CODE_CLIENT_CERT",
    "CLAUDE_CODE_CLIENT_KEY",
    "CLAUDE_CODE_CLIENT_KEY_PASSPHRASE",
    # Its switches for traffic other than the model's (telemetry, error reports, update checks, feature
    # flags, surveys) and its retry count: an operator who sets them in lanebot's environment means them.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER",
    "DISABLE_UPDATES",
    "DISABLE_GROWTHBOOK",
    "DISABLE_INSTALLATION_CHECKS",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
    "CLAUDE_CODE_MAX_RETRIES",
)
# Every AWS_* variable (Bedrock's credentials, profile and region) and Vertex's per-model regions.
CLAUDE_ENV_PREFIXES: tuple[str, ...] = ("AWS_", "VERTEX_REGION_")
# Codex: OPENAI_API_KEY / CODEX_API_KEY (`codex exec` reads CODEX_API_KEY), OPENAI_BASE_URL, and
# CODEX_CA_CERTIFICATE for a custom CA (developers.openai.com/codex; codex-rs/login, codex-rs/core).
CODEX_ENV: tuple[str, ...] = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "CODEX_CA_CERTIFICATE")
# Proxies and certificate authorities, which both CLIs honour.
NETWORK_ENV: tuple[str, ...] = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
# lanebot's own secrets and settings: never given to an agent, even when named in agents.<name>.env.
LANEBOT_SECRET_ENV = frozenset(
    {
        "APP_ID",
        "PRIVATE_KEY",
        "PRIVATE_KEY_PATH",
        "WEBHOOK_SECRET",
        "DATABASE_URL",
        "CLIENT_ID",
        "CLIENT_SECRET",
        "GH_TOKEN",
        "GH_ENTERPRISE_TOKEN",
    }
)
LANEBOT_SECRET_PREFIXES = ("LANEBOT_", "GITHUB_", "WEBHOOK_")
_GITHUB_CREDENTIAL = re.compile(r"(GITHUB|(^|_)GH_).*(TOKEN|KEY|SECRET|PAT|PASSWORD)")


def is_lanebot_secret(name: str) -> bool:
    """Whether `name` is one of lanebot's own settings or a GitHub credential (never given to an agent)."""
    upper = name.upper()
    return (
        upper in LANEBOT_SECRET_ENV
        or upper.startswith(LANEBOT_SECRET_PREFIXES)
        or _GITHUB_CREDENTIAL.search(upper) is not None
    )


def agent_env_problem(name: object) -> str | None:
    """Why `name` may not be listed in agents.<name>.env, or None."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        return "must be the NAME of an environment variable (letters, digits and _), never its value"
    if is_lanebot_secret(name):
        return (
            f"{name} is lanebot's own (its App key, webhook secret, database or a GitHub token) "
            "and is never given to an agent"
        )
    return None


def _check_agent_env(value: str) -> str:
    problem = agent_env_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# Permission modes of Claude Code 2.1.x that work with nobody to answer. `manual` is not a mode the
# CLI accepts (it exits: "argument 'manual' is invalid"); `auto` needs an interactive opt-in, a plan
# and a model that allow it, and fails headless sessions otherwise.
CLAUDE_PERMISSION_MODES = ("acceptEdits", "bypassPermissions", "default", "dontAsk", "plan")
CLAUDE_REFUSED_MODES = {
    "auto": "auto mode needs an interactive opt-in and a plan and model that allow it; headless sessions fail",
    "manual": "Claude Code has no mode `manual` (its modes: " + ", ".join(CLAUDE_PERMISSION_MODES) + ")",
}

# Options lanebot sets itself to hold a session to its permissions (read-only planning and review,
# the lane's tools, the repository's own settings ignored); extra_args may not change them.
CLAUDE_LOCKED_OPTIONS = frozenset(
    {
        "--permission-mode",
        "--dangerously-skip-permissions",
        "--allow-dangerously-skip-permissions",
        "--allowedTools",
        "--allowed-tools",
        "--disallowedTools",
        "--disallowed-tools",
        "--tools",
        "--permission-prompt-tool",
        "--settings",
        "--setting-sources",
        "--add-dir",
        "--mcp-config",
        "--plugin-dir",
        "--plugin-url",
        "--agents",
    }
)
CODEX_LOCKED_OPTIONS = frozenset(
    {
        "-s",
        "--sandbox",
        "--full-auto",
        "--approve-for-me",
        "--dangerously-bypass-approvals-and-sandbox",
        "--dangerously-bypass-hook-trust",
        "--add-dir",
        "-C",
        "--cd",
        "-o",
        "--output-last-message",
    }
)
# `codex -c key=value` overrides of these config keys (and their tables) change the sandbox, the
# approvals or the environment its commands get; other `-c` overrides (a model provider) are fine.
CODEX_LOCKED_CONFIG = (
    "sandbox_mode",
    "sandbox_workspace_write",
    "sandbox_permissions",
    "approval_policy",
    "permissions",
    "default_permissions",
    "shell_environment_policy",
)
_CONFIG_OPTIONS = ("-c", "--config")


def locked_option(arguments: Sequence[str], locked: Collection[str], config_keys: Sequence[str] = ()) -> str | None:
    """The first of `arguments` that is (or abbreviates, as `--opt=value` or `-sVALUE`) a locked option,
    or a `-c key=value` override of one of `config_keys`."""
    for index, argument in enumerate(arguments):
        name = argument.split("=", 1)[0] if argument.startswith("--") else argument
        short = argument[:2] if len(argument) > 2 and argument[0] == "-" and argument[1] != "-" else None
        if name in locked or short in locked:
            return argument
        if not config_keys:
            continue
        shown = argument
        if argument in _CONFIG_OPTIONS:
            value = arguments[index + 1] if index + 1 < len(arguments) else ""
            shown = f"{argument} {value}"
        elif name in _CONFIG_OPTIONS:
            value = argument.split("=", 1)[1]
        elif short in _CONFIG_OPTIONS:
            value = argument[2:]
        else:
            continue
        key = value.split("=", 1)[0].strip().strip("'\"")
        if any(key == locked_key or key.startswith(locked_key + ".") for locked_key in config_keys):
            return shown
    return None


def _locked_problem(agent: str, locked: Collection[str], config_keys: Sequence[str] = ()) -> Any:
    def check(value: list[str]) -> list[str]:
        found = locked_option(value, locked, config_keys)
        if found is not None:
            raise ValueError(
                f"{_shown(found)} changes what the {agent} session may do (permissions, sandbox, tools or "
                "settings), which lanebot sets itself: read-only steps must stay read-only; "
                f"use agents.{agent}'s own keys instead"
            )
        return value

    return check


def _refuse_headless_failing_modes(value: object) -> object:
    if isinstance(value, str) and value in CLAUDE_REFUSED_MODES:
        raise ValueError(
            f"{value!r} does not work headless: {CLAUDE_REFUSED_MODES[value]}; "
            f"choose one of {', '.join(CLAUDE_PERMISSION_MODES)}"
        )
    return value


AgentEnv = list[Annotated[str, AfterValidator(_check_agent_env)]]


class ClaudeSettings(_Settings):
    binary: NonEmpty
    permission_mode: Annotated[
        Literal["acceptEdits", "bypassPermissions", "default", "dontAsk", "plan"],
        BeforeValidator(_refuse_headless_failing_modes),
    ]
    model: NonEmpty | None
    extra_args: Annotated[list[str], AfterValidator(_locked_problem("claude", CLAUDE_LOCKED_OPTIONS))]
    env: AgentEnv


class CodexSettings(_Settings):
    binary: NonEmpty
    sandbox: Literal["read-only", "workspace-write", "danger-full-access"]
    model: NonEmpty | None
    extra_args: Annotated[
        list[str], AfterValidator(_locked_problem("codex", CODEX_LOCKED_OPTIONS, CODEX_LOCKED_CONFIG))
    ]
    env: AgentEnv


class CommandSettings(_Settings):
    argv: list[NonEmpty]
    env: AgentEnv


class RecipeSettings(_Settings):
    """The recipe adapter takes no options; any key here is a mistake."""


_PROVIDER_DEFAULTS = {
    "anthropic": ("https://api.anthropic.com/v1/messages", "ANTHROPIC_API_KEY"),
    "openai": ("https://api.openai.com/v1/chat/completions", "OPENAI_API_KEY"),
}


class HttpSettings(_Settings):
    provider: Literal["anthropic", "openai"]
    url: Annotated[str, AfterValidator(_check_url)] | None
    model: NonEmpty | None
    api_key_env: Annotated[str, AfterValidator(_check_env_name)] | None
    max_tokens: Count

    @property
    def endpoint(self) -> str:
        """The URL to POST to: `url`, or the provider's own endpoint."""
        return self.url or _PROVIDER_DEFAULTS[self.provider][0]

    @property
    def key_variable(self) -> str:
        """The name of the environment variable that holds the API key."""
        return self.api_key_env or _PROVIDER_DEFAULTS[self.provider][1]


class AgentsSettings(_Settings):
    claude: ClaudeSettings
    codex: CodexSettings
    command: CommandSettings
    recipe: RecipeSettings
    http: HttpSettings


SECTIONS: dict[str, type[_Settings]] = {
    "trigger": TriggerSettings,
    "plan": PlanSettings,
    "gate": GateSettings,
    "build": BuildSettings,
    "integrate": IntegrateSettings,
    "pull_request": PullRequestSettings,
    "fix": FixSettings,
    "review": ReviewSettings,
    "ci": CiSettings,
    "cleanup": CleanupSettings,
    "budget": BudgetSettings,
    "agents": AgentsSettings,
}

# The only keys under `agents.<name>` a repository may set; the rest decide what runs on the host.
REPOSITORY_AGENT_KEYS = frozenset({"model"})


# --------------------------------------------------------------------------- the workflow


class IssueFacts(Protocol):
    """What the pull request's title template may read of the issue."""

    @property
    def number(self) -> int: ...
    @property
    def title(self) -> str: ...


@dataclass(frozen=True)
class Workflow:
    """The validated settings of every step, and the prompt templates they name."""

    trigger: TriggerSettings
    plan: PlanSettings
    gate: GateSettings
    build: BuildSettings
    integrate: IntegrateSettings
    pull_request: PullRequestSettings
    fix: FixSettings
    review: ReviewSettings
    ci: CiSettings
    cleanup: CleanupSettings
    budget: BudgetSettings
    agents: AgentsSettings
    prompts_dir: Path
    sources: tuple[str, ...] = ()

    def session_budget(self) -> SessionBudget:
        """The per-step session counts the graph's session bound multiplies out."""
        return SessionBudget(
            planner_attempts=1 + self.plan.max_retries,
            lane_attempts=1 + self.build.max_retries,
            resolver_per_merge=1 if self.build.on_conflict == "agent" else 0,
            integrate_sessions=1,
            verify_repairs=self.integrate.max_retries,
            review_sessions=self.review.sessions(),
        )

    def template_name(self, name: str) -> str:
        """The template file for a step (a key of PROMPT_STEPS, e.g. "lane" or "refute") or a file name."""
        if name in PROMPT_STEPS:
            section, key = PROMPT_STEPS[name]
            template: str = getattr(getattr(self, section), key)
            return template
        try:
            return _check_template_name(name)
        except ValueError as error:
            raise WorkflowError([f"prompt {name!r}: {error}"]) from None

    def render_pr_title(self, issue: Mapping[str, object] | IssueFacts, proposed: str = "") -> str:
        """The pull request title: pull_request.title rendered, folded to one line, at most 256 characters."""
        try:
            text = (
                _string_environment().from_string(self.pull_request.title).render(issue=issue, proposed=proposed or "")
            )
        except jinja2.TemplateError as error:
            raise WorkflowError([f"pull_request.title: {error}"]) from None
        title = " ".join(text.split()) or " ".join(str(_field(issue, "title")).split())
        return title if len(title) <= PR_TITLE_LIMIT else title[: PR_TITLE_LIMIT - 1].rstrip() + "…"


def _field(obj: Mapping[str, object] | IssueFacts, name: str) -> object:
    return obj[name] if isinstance(obj, Mapping) else getattr(obj, name)


# --------------------------------------------------------------------------- loading


def build_workflow(
    default: tuple[str, Mapping[str, Any]],
    overrides: Sequence[tuple[str, Mapping[str, Any]]] = (),
    *,
    prompts_dir: Path,
    available_prompts: Collection[str],
    host_overrides: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> Workflow:
    """The default workflow, then the host's overrides, then the repository's, validated together.

    `default` is the default workflow file as (source, mapping); `prompts_dir` is the folder of its
    prompt templates and `available_prompts` the file names there. `overrides` are a repository's
    settings (e.g. `.github/lanebot.yml`), each as (source, mapping), deep-merged in order; their
    top-level `_extends` is dropped (the caller has resolved it). They may not set the host-only keys
    under `agents`. `host_overrides` (the lanebot operator's own settings) may set anything. Raises
    WorkflowError listing every problem.
    """
    fallback = default[0]
    layers = [default, *host_overrides]
    problems: list[str] = []
    for source, mapping in overrides:
        if not isinstance(mapping, Mapping):
            problems.append(f"{source}: the top level must be a mapping of settings, not {_kind(mapping)}")
            continue
        mapping = {key: value for key, value in mapping.items() if key != EXTENDS_KEY}
        problems += _repository_may_not_set(mapping, source)
        layers.append((source, mapping))

    merged: dict[str, Any] = {}
    origins: dict[KeyPath, str] = {}
    for source, mapping in layers:
        merged = deep_merge(merged, mapping)
        _record_origins(mapping, source, origins)

    sections, section_problems = _validate_sections(merged, origins, fallback=fallback)
    problems += section_problems
    problems += _cross_problems(merged, sections, origins, fallback=fallback)
    problems += _template_problems(sections, origins, prompts_dir, frozenset(available_prompts), fallback=fallback)
    if problems:
        raise WorkflowError(problems)
    # Every section validated against its model in SECTIONS, so each has its field's type.
    # Every section is there and valid by now, each of its field's model (SECTIONS names them).
    fields: dict[str, Any] = dict(sections)
    return Workflow(**fields, prompts_dir=prompts_dir, sources=tuple(source for source, _ in layers))


def _repository_may_not_set(mapping: Mapping[str, Any], source: str) -> list[str]:
    agents = mapping.get("agents")
    if not isinstance(agents, Mapping):
        return []
    problems = []
    for adapter, options in agents.items():
        model = _field_model(AgentsSettings, str(adapter))
        if model is None or not isinstance(options, Mapping):
            continue  # unknown adapters and wrong types are reported by validation
        for key in options:
            if key in model.model_fields and key not in REPOSITORY_AGENT_KEYS:
                problems.append(
                    f"{source}: agents.{adapter}.{key}: set by the lanebot host, not by a repository "
                    "(a repository may choose each step's agent and agents.<name>.model)"
                )
    return problems


def _validate_sections(
    merged: Mapping[str, Any], origins: Mapping[KeyPath, str], *, fallback: str
) -> tuple[dict[str, _Settings], list[str]]:
    sections: dict[str, _Settings] = {}
    problems: list[str] = []
    for key in merged:
        if key not in SECTIONS:
            source = _origin_of([key], origins, fallback)
            problems.append(f"{source}: {key}: unknown key{_suggestion(str(key), SECTIONS)}")
    for name, model in SECTIONS.items():
        if name not in merged:
            problems.append(f"{fallback}: {name}: missing (required)")
            continue
        try:
            sections[name] = model.model_validate(merged[name])
        except ValidationError as error:
            for detail in error.errors(include_url=False):
                location = (name, *detail["loc"])
                source = _origin_of(location, origins, fallback)
                problems.append(f"{source}: {_dotted(location)}: {_message(detail, model)}")
    return sections, problems


def _cross_problems(
    merged: Mapping[str, Any], sections: Mapping[str, _Settings], origins: Mapping[KeyPath, str], *, fallback: str
) -> list[str]:
    """Rules joining a step's choice of agent to that agent's options (when `agents` itself is valid)."""
    agents = sections.get("agents")
    if not isinstance(agents, AgentsSettings):
        return []
    problems = []
    for step in ("plan", "build", "integrate", "fix", "review"):
        settings = merged.get(step)
        chosen = settings.get("agent") if isinstance(settings, Mapping) else None
        if step == "review" and isinstance(settings, Mapping) and settings.get("enabled") is False:
            continue  # a review that never runs needs no program
        source = _origin_of((step, "agent"), origins, fallback)
        if chosen == "command" and not agents.command.argv:
            problems.append(
                f"{source}: {step}.agent: 'command' needs agents.command.argv, the program to run and its arguments"
            )
        if chosen == "http" and step == "plan" and agents.http.model is None:
            problems.append(f"{source}: {step}.agent: 'http' needs agents.http.model, the model name to ask for")
    return problems


def _template_problems(
    sections: Mapping[str, _Settings],
    origins: Mapping[KeyPath, str],
    prompts_dir: Path,
    available: frozenset[str],
    *,
    fallback: str,
) -> list[str]:
    problems = []
    for section, key in PROMPT_STEPS.values():
        settings = sections.get(section)
        if settings is None:
            continue
        file_name = getattr(settings, key)
        if file_name not in available:
            source = _origin_of((section, key), origins, fallback)
            shown = ", ".join(sorted(name for name in available if name.endswith(".j2"))) or "none"
            problems.append(f"{source}: {section}.{key}: no template {file_name} in {prompts_dir} (available: {shown})")
    return problems


# --------------------------------------------------------------------------- human messages


def _message(detail: ErrorDetails, model: type[BaseModel]) -> str:
    kind, value, ctx = detail["type"], detail.get("input"), detail.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _known_keys(model, detail["loc"][:-1])
        return f"unknown key{_suggestion(str(detail['loc'][-1]), known)}"
    if kind == "missing":
        return "missing (required)"
    if kind == "value_error":
        return str(ctx.get("error", detail["msg"]))
    if kind == "literal_error":
        return f"must be {ctx['expected']} (got {_shown(value)})"
    simple = {
        "string_type": "must be text",
        "int_type": "must be a whole number",
        "bool_type": "must be true or false",
        "list_type": "must be a list",
        "model_type": "must be a mapping of settings",
        "model_attributes_type": "must be a mapping of settings",
        "dict_type": "must be a mapping of settings",
    }
    if kind in simple:
        return f"{simple[kind]} (got {_shown(value)})"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']} (got {_shown(value)})"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']} (got {_shown(value)})"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    message = str(detail["msg"])
    return f"{message[:1].lower()}{message[1:]} (got {_shown(value)})"


def _known_keys(model: type[BaseModel], location: Sequence[str | int]) -> list[str]:
    for part in location:
        inner = _field_model(model, str(part))
        if inner is None:
            return []
        model = inner
    return list(model.model_fields)


def _field_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The settings model of `model`'s field `name`, None when it has no such field or it is no model."""
    field = model.model_fields.get(name)
    annotation = field.annotation if field is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _suggestion(key: str, known: Iterable[str]) -> str:
    names = list(known)
    if not names:
        return " (this mapping takes no keys)"
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"{hint} (known: {', '.join(names)})"


def _dotted(location: Sequence[str | int]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _shown(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kind(value: object) -> str:
    if value is None:
        return "empty (null)"
    return {list: "a list", str: "text", int: "a number", float: "a number", bool: "true/false"}.get(
        type(value), type(value).__name__
    )


# --------------------------------------------------------------------------- Jinja2


@lru_cache(maxsize=1)
def _string_environment() -> SandboxedEnvironment:
    # Sandboxed: the title template comes from a repository's settings and runs inside the app.
    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)
