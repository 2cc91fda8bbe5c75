"""Agent adapters: one interface to run an agent session, whatever the agent.

    agent = make_agent("claude", settings["agents"]["claude"])
    result = await agent.run(AgentRequest(prompt=..., cwd=worktree, transcript=path, timeout=1800),
                             on_start=record_pid)
    if not result.ok: ...  # result.error says why, in a sentence

Adapters: `claude` (Claude Code headless), `codex` (`codex exec --json`), `command` (any executable),
`recipe` (applies files written in the brief; for hand-written plans, the demo and tests) and, for
planning only, `http` (an LLM API answering with structured output). A CLI adapter whose binary is
missing raises `AgentNotFound` from `run`; bad settings raise `AgentConfigError` from `make_agent`.
A request's `jail` (an `AgentJail`, built by bot.runner.jailing.agent_jail) confines the CLI
adapters' process; `recipe` and `http` start none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bot.edges.agents.base import Agent, AgentConfigError, AgentJail, AgentNotFound, AgentRequest, AgentResult, Usage
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings
from bot.edges.agents.codex import CodexAgent, CodexSettings
from bot.edges.agents.command import CommandAgent, CommandSettings
from bot.edges.agents.http import HttpAgent, HttpSettings
from bot.edges.agents.recipe import RecipeAgent

__all__ = [
    "AGENT_NAMES",
    "Agent",
    "AgentConfigError",
    "AgentJail",
    "AgentNotFound",
    "AgentRequest",
    "AgentResult",
    "Usage",
    "make_agent",
]

_FACTORIES: dict[str, Callable[[Mapping[str, Any] | object | None], Agent]] = {
    "claude": lambda options: ClaudeAgent(ClaudeSettings.from_options(options)),
    "codex": lambda options: CodexAgent(CodexSettings.from_options(options)),
    "command": lambda options: CommandAgent(CommandSettings.from_options(options)),
    "recipe": lambda options: _recipe(options),
    "http": lambda options: HttpAgent(HttpSettings.from_options(options)),
}
AGENT_NAMES = tuple(_FACTORIES)


def make_agent(name: str, options: Mapping[str, Any] | object | None = None) -> Agent:
    """The adapter `name` configured by `options` (its settings: a mapping or an object with attributes)."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise AgentConfigError(f"unknown agent {name!r}; lanebot knows {', '.join(AGENT_NAMES)}")
    return factory(options)


def _recipe(options: Mapping[str, Any] | object | None) -> RecipeAgent:
    if isinstance(options, Mapping) and options:
        raise AgentConfigError(
            f"the recipe agent takes no settings; remove agents.recipe.{', agents.recipe.'.join(map(str, options))}"
        )
    return RecipeAgent()
