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


async def test_a_list_of_approvers_is_matched_without_asking_github(client):
    with respx.mock(assert_all_called=False) as github:
        route = github.get(url__regex=rf"{API}/repos/.*/permission").respond(200, json=permission_answer("x", "admin"))
        approvers = gate(["Octocat", "hubot"])
        assert (await authorise(client, REPO, "octocat", approvers, PermissionCache())).allowed
        refused = await authorise(client, REPO, "mona", approvers, PermissionCache())
    assert not refused.allowed and "gate.approvers" in refused.reason
    assert route.call_count == 0


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
