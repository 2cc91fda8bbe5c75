"""A repository's workflow: its `.github/lanebot.yml` chain from GitHub over this host's default workflow."""

from __future__ import annotations

from collections.abc import Collection

from gidgethub.abc import GitHubAPI

from bot.core.workflow import Workflow
from bot.edges.github.client import InstallationClient
from bot.edges.github.config import load_config_chain
from bot.edges.workflow_files import load_workflow
from bot.runner.context import GitHubAccess

__all__ = ["allowed_extends_owners", "installation_workflow", "load_repository_workflow"]


async def load_repository_workflow(
    client: GitHubAPI, owner: str, repo: str, ref: str | None = None, *, extends_owners: Collection[str] = ()
) -> Workflow:
    """The repository's workflow: its lanebot.yml chain (and what `_extends` pulls in) over the
    defaults, validated; WorkflowError lists every problem. `_extends` may reach another owner's
    repository only when `extends_owners` (the host's LANEBOT_ALLOW_EXTENDS_OWNERS) names that owner.
    The repository's own file is read with a token scoped to it (an installation-wide `client`
    gives one), so the wider token is minted only for the owner's fallback or an `_extends`."""
    own = client.for_repository(f"{owner}/{repo}") if isinstance(client, InstallationClient) else client
    chain = await load_config_chain(client, owner, repo, ref, extends_owners=extends_owners, own_client=own)
    return load_workflow(overrides=chain)


async def installation_workflow(
    github: GitHubAccess, installation_id: int, repository: str, ref: str | None = None
) -> Workflow:
    """`load_repository_workflow` for `repository` ("owner/name") as the App's installation sees it:
    with an installation-wide token (a token scoped to one repository cannot read the owner's
    `.github` repository) and the host's LANEBOT_ALLOW_EXTENDS_OWNERS."""
    owner, name = repository.split("/", 1)
    return await load_repository_workflow(
        github.installation_client(installation_id, None),
        owner,
        name,
        ref,
        extends_owners=allowed_extends_owners(github),
    )


def allowed_extends_owners(github: object) -> tuple[str, ...]:
    """The host's LANEBOT_ALLOW_EXTENDS_OWNERS, from the settings the GitHub App was made with; none
    when it was made without lanebot's settings (a test's stand-in): other owners are then refused."""
    owners = getattr(getattr(github, "settings", None), "allow_extends_owners", ())
    return tuple(owners) if isinstance(owners, (tuple, list)) else ()
