"""A repository's workflow: its `.github/lanebot.yml` chain from GitHub over this host's default workflow."""

from __future__ import annotations

from gidgethub.abc import GitHubAPI

from bot.core.workflow import Workflow
from bot.edges.github.config import load_config_chain
from bot.edges.workflow_files import load_workflow

__all__ = ["load_repository_workflow"]


async def load_repository_workflow(client: GitHubAPI, owner: str, repo: str, ref: str | None = None) -> Workflow:
    """The repository's workflow: its lanebot.yml chain (and what `_extends` pulls in) over the
    defaults, validated; WorkflowError lists every problem."""
    return load_workflow(overrides=await load_config_chain(client, owner, repo, ref))
