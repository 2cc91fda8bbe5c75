"""REST routes of the signed-in person, with a user access token from the web flow: who they are,
the App's installations they can reach, and the repositories of one they can reach.

As GitHub's docs say, a user access token reaches only what both the person and the App can, and
these two lists hold what the person has explicit permission to: repositories they own or are a
collaborator on (a public repository they have no role on is readable, but not listed). An
installation is listed when the person owns its account or has a role on one of its repositories.
Without credentials they answer 401 "Requires authentication"; with a user token that expired, was
replaced by a refresh or is unknown, 401 "Bad credentials" (bot.sandbox.auth, bot.sandbox.oauth);
with an installation token or the App's JWT, 403.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.auth import Principal
from bot.sandbox.core import Sandbox
from bot.sandbox.errors import NOT_ACCESSIBLE, REQUIRES_AUTHENTICATION, GitHubError, not_found
from bot.sandbox.rest import RestRoute, caller, docs_url, json_response, paginate, sandbox_of
from bot.sandbox.state import ROLE_FLAGS, Account, Installation, Repository, role_in

INSTALLATIONS = "https://docs.github.com/rest/apps/installations"
# GitHub's 403 for these two routes with a token that is not a person's (quoted in public code).
NOT_A_USER_TOKEN = "You must authenticate with an access token authorized to a GitHub App in order to {what}"


def _person(request: Request, what: str | None = None) -> tuple[Sandbox, Account]:
    """The signed-in person of a user access token, or GitHub's 401 or 403."""
    principal: Principal = caller(request)
    if principal.kind == "user" and principal.user is not None:
        return sandbox_of(request), principal.user
    if principal.kind == "anonymous":
        raise GitHubError(401, REQUIRES_AUTHENTICATION, documentation_url=docs_url(request))
    message = NOT_ACCESSIBLE if what is None else NOT_A_USER_TOKEN.format(what=what)
    raise GitHubError(403, message, documentation_url=docs_url(request))


def reachable_repositories(sandbox: Sandbox, installation: Installation, person: Account) -> list[Repository]:
    """The installation's repositories the person has a role on, by full name (as GitHub sorts them)."""
    found = [sandbox.state.repository_by_id(repository_id) for repository_id in installation.repository_ids]
    mine = [r for r in found if r is not None and role_in(r, person.login) is not None]
    return sorted(mine, key=lambda r: r.full_name.lower())


def reachable_installations(sandbox: Sandbox, person: Account) -> list[Installation]:
    return [
        installation
        for installation in sorted(sandbox.state.installations.values(), key=lambda i: i.id)
        if installation.account.id == person.id or reachable_repositories(sandbox, installation, person)
    ]


async def get_authenticated_user(request: Request) -> Response:
    sandbox, person = _person(request)
    return json_response(sandbox.renderer.profile(person))


async def list_installations(request: Request) -> Response:
    sandbox, person = _person(request, "list installations")
    installations = reachable_installations(sandbox, person)
    page, headers = paginate(request, installations)
    body = {"total_count": len(installations), "installations": [sandbox.renderer.installation(i) for i in page]}
    return json_response(body, headers=headers)


async def list_installation_repositories(request: Request) -> Response:
    sandbox, person = _person(request, "list repositories for an installation")
    raw = str(request.path_params["installation_id"])
    installation = sandbox.state.installations.get(int(raw)) if raw.isdigit() else None
    if installation is None or installation not in reachable_installations(sandbox, person):
        raise not_found(docs_url(request))
    repositories = reachable_repositories(sandbox, installation, person)
    page, headers = paginate(request, repositories)
    shown = []
    for repository in page:
        shape = sandbox.renderer.repository(repository, rest=True)
        role = role_in(repository, person.login)
        shape["permissions"] = dict(ROLE_FLAGS[role]) if role else {}
        shown.append(shape)
    return json_response({"total_count": len(repositories), "repositories": shown}, headers=headers)


ROUTES = (
    RestRoute(
        "GET", "/user", get_authenticated_user, "https://docs.github.com/rest/users/users#get-the-authenticated-user"
    ),
    RestRoute(
        "GET",
        "/user/installations",
        list_installations,
        f"{INSTALLATIONS}#list-app-installations-accessible-to-the-user-access-token",
    ),
    RestRoute(
        "GET",
        "/user/installations/{installation_id}/repositories",
        list_installation_repositories,
        f"{INSTALLATIONS}#list-repositories-accessible-to-the-user-access-token",
    ),
)
