"""Who may command lanebot: GitHub's collaborator-permission answer, read as DESIGN.md says, cached.

Answers are shaped like GitHub's documentation of
`GET /repos/{owner}/{repo}/collaborators/{username}/permission` (with `role_name` and
`user.permissions`). The cache's clock is injected; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import respx
from gidgethub import BadRequest

from bot.core.workflow import GateSettings
from bot.edges.github.client import LanebotAPI
from bot.edges.github.permissions import CACHE_SECONDS, PermissionCache, authorise, role_from_answer

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "octocat/hello-world"

FLAGS = {
    "admin": {"admin": True, "maintain": True, "push": True, "triage": True, "pull": True},
    "maintain": {"admin": False, "maintain": True, "push": True, "triage": True, "pull": True},
    "write": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    "triage": {"admin": False, "maintain": False, "push": False, "triage": True, "pull": True},
    "read": {"admin": False, "maintain": False, "push": False, "triage": False, "pull": True},
}
# The bare `permission` field as GitHub folds it: maintain reads as write, triage as read.
FOLDED = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read", "read": "read"}


def permission_answer(login: str, role: str, role_name: str | None = None) -> dict[str, Any]:
    return {
        "permission": FOLDED[role],
        "role_name": role_name or role,
        "user": {
            "login": login,
            "id": 1,
            "node_id": "MDQ6VXNlcjE=",
            "type": "User",
            "site_admin": False,
            "permissions": FLAGS[role],
            "role_name": role_name or role,
        },
    }


def permission_url(login: str) -> str:
    return f"{API}/repos/{REPO}/collaborators/{login}/permission"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as http:
        yield LanebotAPI(http, base_url=API)


def gate(approvers: Any) -> GateSettings:
    return GateSettings.model_validate({"approvers": approvers})


# --------------------------------------------------------------------------- reading GitHub's answer


@pytest.mark.parametrize("role", ["admin", "maintain", "write", "triage", "read"])
def test_role_name_is_read_first(role):
    assert role_from_answer(permission_answer("octocat", role)) == role


def test_maintain_is_not_folded_into_write_as_the_bare_permission_field_would():
    answer = permission_answer("octocat", "maintain")
    assert answer["permission"] == "write"
    assert role_from_answer(answer) == "maintain"


def test_a_custom_role_is_read_from_the_permission_flags():
    assert role_from_answer(permission_answer("octocat", "write", role_name="security-reviewer")) == "write"
    assert role_from_answer(permission_answer("octocat", "triage", role_name="docs-writer")) == "triage"


def test_the_bare_permission_field_alone_grants_nothing():
    assert role_from_answer({"permission": "admin", "user": {"login": "octocat"}}) is None


# --------------------------------------------------------------------------- authorise


@respx.mock
@pytest.mark.parametrize("role", ["write", "maintain", "admin"])
async def test_write_maintain_and_admin_may_command_by_default(client, role):
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", role))
    decision = await authorise(client, REPO, "octocat", gate("write"), PermissionCache())
    assert decision.allowed and decision.role == role


@respx.mock
@pytest.mark.parametrize("role", ["read", "triage"])
async def test_read_and_triage_are_refused_with_the_role_named(client, role):
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", role))
    decision = await authorise(client, REPO, "octocat", gate("write"), PermissionCache())
    assert not decision.allowed
    assert decision.reason == f"commanding lanebot here needs the write role or higher, and your role is {role}"


@respx.mock
async def test_a_maintainer_passes_a_maintain_minimum_although_permission_says_write(client):
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "maintain"))
    assert (await authorise(client, REPO, "octocat", gate("maintain"), PermissionCache())).allowed


@respx.mock
async def test_a_writer_does_not_pass_a_maintain_minimum(client):
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "write"))
    assert not (await authorise(client, REPO, "octocat", gate("maintain"), PermissionCache())).allowed


@respx.mock
async def test_a_404_means_no_access(client):
    respx.get(permission_url("stranger")).respond(
        404, json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}
    )
    decision = await authorise(client, REPO, "stranger", gate("write"), PermissionCache())
    assert not decision.allowed and decision.role is None
    assert "GitHub reports no access to this repository for you" in decision.reason


def user_url(login: str) -> str:
    return f"{API}/users/{login}"


def user_answer(login: str, user_id: int) -> dict[str, Any]:
    return {"login": login, "id": user_id, "node_id": "MDQ6VXNlcjE=", "type": "User", "site_admin": False}


@respx.mock
async def test_a_listed_approver_is_matched_by_github_user_id_and_still_needs_write(client):
    respx.get(user_url("Octocat")).respond(200, json=user_answer("octocat", 583231))
    respx.get(user_url("hubot")).respond(200, json=user_answer("hubot", 7))
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "write"))
    approvers = gate(["Octocat", "hubot"])
    decision = await authorise(client, REPO, "octocat", approvers, PermissionCache(), user_id=583231)
    assert decision.allowed and decision.role == "write"


@respx.mock
async def test_a_listed_login_that_lost_write_access_is_refused(client):
    respx.get(user_url("octocat")).respond(200, json=user_answer("octocat", 583231))
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "read"))
    decision = await authorise(client, REPO, "octocat", gate(["octocat"]), PermissionCache(), user_id=583231)
    assert not decision.allowed
    assert decision.reason == (
        "you are listed in gate.approvers, but commanding lanebot here also needs the write role or higher, "
        "and your role is read"
    )


@respx.mock
async def test_a_listed_login_renamed_and_registered_by_someone_else_is_not_obeyed(client):
    """octocat (id 583231) was resolved when lanebot first read the list; then renamed, and a new
    account (id 999) took the login "octocat", with write access. The list still says octocat."""
    users = respx.get(user_url("octocat"))
    users.side_effect = [
        httpx.Response(200, json=user_answer("octocat", 583231)),
        httpx.Response(200, json=user_answer("octocat", 999)),
    ]
    respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "write"))
    cache = PermissionCache(clock=Clock())
    assert (await authorise(client, REPO, "octocat", gate(["octocat"]), cache, user_id=583231)).allowed
    impostor = await authorise(client, REPO, "octocat", gate(["octocat"]), cache, user_id=999)
    assert not impostor.allowed and "matched by GitHub account, not by login" in impostor.reason
    assert users.call_count == 1  # the first id stays pinned; the login is not asked again


async def test_a_listed_login_without_the_commenters_id_is_refused_without_asking_for_a_role(client):
    with respx.mock(assert_all_called=False) as github:
        github.get(user_url("octocat")).respond(200, json=user_answer("octocat", 583231))
        role = github.get(url__regex=rf"{API}/repos/.*/permission").respond(200, json=permission_answer("x", "admin"))
        refused = await authorise(client, REPO, "octocat", gate(["octocat"]), PermissionCache())
        mona = await authorise(client, REPO, "mona", gate(["octocat"]), PermissionCache(), user_id=5)
    assert not refused.allowed and not mona.allowed and "gate.approvers" in mona.reason
    assert role.call_count == 0


@respx.mock
async def test_a_listed_login_github_does_not_know_stands_for_nobody_and_is_asked_again_after_a_minute(client):
    users = respx.get(user_url("ghosted")).respond(404, json={"message": "Not Found"})
    clock = Clock()
    cache = PermissionCache(clock=clock)
    assert await cache.listed_ids(client, ("ghosted",)) == frozenset()
    assert await cache.listed_ids(client, ("ghosted",)) == frozenset()
    clock.now += CACHE_SECONDS
    await cache.listed_ids(client, ("ghosted",))
    assert users.call_count == 2


async def test_a_bot_account_is_refused_without_asking_github(client):
    with respx.mock(assert_all_called=False) as github:
        route = github.get(url__regex=rf"{API}/repos/.*/permission").respond(200, json=permission_answer("x", "admin"))
        decision = await authorise(client, REPO, "dependabot[bot]", gate("write"), PermissionCache())
    assert not decision.allowed and "bot accounts" in decision.reason
    assert route.call_count == 0


@respx.mock
async def test_the_app_lacking_a_permission_is_an_error_not_a_refused_user(client):
    respx.get(permission_url("octocat")).respond(
        403,
        json={"message": "Resource not accessible by integration", "documentation_url": "https://docs.github.com/rest"},
    )
    with pytest.raises(BadRequest) as raised:
        await authorise(client, REPO, "octocat", gate("write"), PermissionCache())
    assert raised.value.status_code == 403


# --------------------------------------------------------------------------- the cache


@respx.mock
async def test_an_answer_is_reused_for_a_minute_per_repository_and_login(client):
    route = respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "write"))
    other = respx.get(permission_url("mona")).respond(200, json=permission_answer("mona", "read"))
    clock = Clock()
    cache = PermissionCache(clock=clock)
    assert await cache.role(client, REPO, "octocat") == "write"
    clock.now += CACHE_SECONDS - 1
    assert await cache.role(client, REPO, "OctoCat") == "write"  # logins compare without case
    assert await cache.role(client, REPO, "mona") == "read"
    assert (route.call_count, other.call_count) == (1, 1)
    clock.now += 1
    await cache.role(client, REPO, "octocat")
    assert route.call_count == 2


@respx.mock
async def test_a_role_change_is_seen_once_the_cached_answer_expired(client):
    route = respx.get(permission_url("octocat"))
    route.side_effect = [
        httpx.Response(200, json=permission_answer("octocat", "write")),
        httpx.Response(200, json=permission_answer("octocat", "read")),
    ]
    clock = Clock()
    cache = PermissionCache(clock=clock)
    assert (await authorise(client, REPO, "octocat", gate("write"), cache)).allowed
    clock.now += CACHE_SECONDS
    assert not (await authorise(client, REPO, "octocat", gate("write"), cache)).allowed


@respx.mock
async def test_concurrent_questions_about_one_login_share_one_request(client):
    route = respx.get(permission_url("octocat")).respond(200, json=permission_answer("octocat", "admin"))
    cache = PermissionCache(clock=Clock())
    roles = await asyncio.gather(*(cache.role(client, REPO, "octocat") for _ in range(20)))
    assert set(roles) == {"admin"} and route.call_count == 1


@respx.mock
async def test_forgetting_a_repository_drops_its_roles_at_once_and_no_others(client):
    route = respx.get(permission_url("octocat"))
    route.side_effect = [
        httpx.Response(200, json=permission_answer("octocat", "write")),
        httpx.Response(404, json={"message": "Not Found"}),
    ]
    elsewhere = respx.get(f"{API}/repos/octocat/other/collaborators/octocat/permission").respond(
        200, json=permission_answer("octocat", "admin")
    )
    cache = PermissionCache(clock=Clock())
    assert (await authorise(client, REPO, "octocat", gate("write"), cache)).allowed
    assert await cache.role(client, "octocat/other", "octocat") == "admin"
    assert cache.forget_repository("OctoCat/Hello-World") == 1
    assert not (await authorise(client, REPO, "octocat", gate("write"), cache)).allowed  # no minute's wait
    assert await cache.role(client, "octocat/other", "octocat") == "admin"
    assert (route.call_count, elsewhere.call_count) == (2, 1)


@respx.mock
async def test_forgetting_an_owner_drops_the_roles_on_all_its_repositories(client):
    route = respx.get(url__regex=rf"{API}/repos/octocat/.*/permission").respond(
        200, json=permission_answer("octocat", "write")
    )
    cache = PermissionCache(clock=Clock())
    for repository in (REPO, "octocat/other"):
        await cache.role(client, repository, "octocat")
    assert cache.forget_owner("octocat") == 2 and cache.forget_owner("someone-else") == 0
    await cache.role(client, REPO, "octocat")
    assert route.call_count == 3


async def test_an_answer_asked_for_before_a_forget_is_not_kept(client):
    release = asyncio.Event()

    async def slow_answer(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200, json=permission_answer("octocat", "admin"))

    with respx.mock() as github:
        route = github.get(permission_url("octocat")).mock(side_effect=slow_answer)
        cache = PermissionCache(clock=Clock())
        asking = asyncio.create_task(cache.role(client, REPO, "octocat"))
        await asyncio.sleep(0.01)
        cache.forget_repository(REPO)
        release.set()
        assert await asking == "admin"
        await cache.role(client, REPO, "octocat")
    assert route.call_count == 2
