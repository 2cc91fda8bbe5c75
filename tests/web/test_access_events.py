"""GitHub saying access changed drops lanebot's cached roles at once: the next command is judged afresh.

Each event goes through lanebot's whole router (bot.web.handlers), as the dispatcher hands it on;
payloads carry what GitHub's do for these events (docs.github.com/en/webhooks/webhook-events-and-payloads).
The cache's clock never moves: a refusal here comes from the event, not from the minute running out.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx
import yaml
from gidgethub import sansio

from bot.core.workflow import GateSettings
from bot.edges.github.client import LanebotAPI
from bot.edges.github.permissions import authorise, cache_for
from bot.web.handlers import router
from bot.web.registration import MANIFEST_PATH

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "acme/widgets"
WRITE = {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True}


class App:
    """Stands in for the GitHub App object the permission cache belongs to."""


def user(login: str, user_id: int) -> dict[str, Any]:
    return {"login": login, "id": user_id, "node_id": "MDQ6VXNlcjE=", "type": "User", "site_admin": False}


def repository(full_name: str = REPO) -> dict[str, Any]:
    owner, name = full_name.split("/")
    return {"id": 1296269, "name": name, "full_name": full_name, "private": True, "owner": user(owner, 9)}


def member_removed() -> dict[str, Any]:
    return {
        "action": "removed",
        "member": user("ana", 11),
        "repository": repository(),
        "organization": {"login": "acme", "id": 9},
        "installation": {"id": 77, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNzc="},
        "sender": user("boss", 12),
    }


@pytest.fixture
async def world():
    async with httpx.AsyncClient() as http:
        with respx.mock() as github:
            app = App()
            yield SimpleNamespace(
                client=LanebotAPI(http, base_url=API),
                github=github,
                context=SimpleNamespace(github=app, engine=None, settings=None),
                cache=cache_for(app),
            )


def ana_holds(world, *answers: httpx.Response) -> respx.Route:
    route = world.github.get(f"{API}/repos/{REPO}/collaborators/ana/permission")
    route.side_effect = list(answers)
    return route


def write_answer() -> httpx.Response:
    return httpx.Response(
        200, json={"permission": "write", "role_name": "write", "user": {**user("ana", 11), "permissions": WRITE}}
    )


def no_access() -> httpx.Response:
    return httpx.Response(404, json={"message": "Not Found"})


async def may_command(world, gate: GateSettings) -> bool:
    return (await authorise(world.client, REPO, "ana", gate, world.cache, user_id=11)).allowed


async def deliver(world, event: str, payload: dict[str, Any]) -> None:
    await router.dispatch(sansio.Event(payload, event=event, delivery_id="d-1"), context=world.context)


async def test_a_member_removed_event_refuses_the_next_command_at_once(world):
    route = ana_holds(world, write_answer(), no_access())
    gate = GateSettings.model_validate({"approvers": "write"})
    assert await may_command(world, gate)
    assert await may_command(world, gate)  # cached: one question so far
    await deliver(world, "member", member_removed())
    assert not await may_command(world, gate)
    assert route.call_count == 2


async def test_a_listed_approver_whose_access_was_removed_is_refused_at_once(world):
    world.github.get(f"{API}/users/ana").respond(200, json=user("ana", 11))
    ana_holds(world, write_answer(), no_access())
    gate = GateSettings.model_validate({"approvers": ["ana"]})
    assert await may_command(world, gate)
    await deliver(world, "member", member_removed())
    decision = await authorise(world.client, REPO, "ana", gate, world.cache, user_id=11)
    assert not decision.allowed
    assert "you are listed in gate.approvers, but commanding lanebot here also needs the write role" in decision.reason


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        (
            "membership",
            {"action": "removed", "scope": "team", "member": user("ana", 11), "team": {"id": 3, "slug": "devs"}},
        ),
        ("organization", {"action": "member_removed", "membership": {"user": user("ana", 11), "role": "member"}}),
        ("team", {"action": "removed_from_repository", "team": {"id": 3, "slug": "devs"}, "repository": repository()}),
    ],
)
async def test_organisation_events_drop_every_role_on_the_organisations_repositories(world, event, payload):
    route = ana_holds(world, write_answer(), no_access())
    gate = GateSettings.model_validate({"approvers": "write"})
    assert await may_command(world, gate)
    organisation = {"organization": {"login": "acme", "id": 9}, "sender": user("boss", 12)}
    await deliver(world, event, {**payload, **organisation, "installation": {"id": 77}})
    assert not await may_command(world, gate)
    assert route.call_count == 2


@pytest.mark.parametrize(
    ("event", "action"),
    [
        ("installation", "suspend"),
        ("installation", "new_permissions_accepted"),
        ("installation_repositories", "removed"),
    ],
)
async def test_installation_events_drop_every_role_on_the_accounts_repositories(world, event, action, monkeypatch):
    monkeypatch.setattr("bot.web.handlers.installation.save_installation", lambda engine, state: None)
    route = ana_holds(world, write_answer(), no_access())
    gate = GateSettings.model_validate({"approvers": "write"})
    assert await may_command(world, gate)
    installation = {"id": 77, "account": {"login": "acme", "id": 9, "type": "Organization"}, "suspended_at": None}
    await deliver(world, event, {"action": action, "installation": installation, "sender": user("boss", 12)})
    assert not await may_command(world, gate)
    assert route.call_count == 2


async def test_a_member_event_of_another_repository_leaves_this_ones_roles_cached(world):
    route = ana_holds(world, write_answer(), no_access())
    gate = GateSettings.model_validate({"approvers": "write"})
    assert await may_command(world, gate)
    await deliver(world, "member", {**member_removed(), "repository": repository("acme/other")})
    assert await may_command(world, gate)
    assert route.call_count == 1


def test_the_manifest_subscribes_to_the_access_events_with_the_permission_they_need():
    manifest = yaml.safe_load(MANIFEST_PATH.read_text())
    assert {"member", "membership", "organization", "team"} <= set(manifest["default_events"])
    assert manifest["default_permissions"]["members"] == "read"
