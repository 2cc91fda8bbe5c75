"""The ids `gate.approvers` logins were pinned to, kept in the database: a restart forgets none.

A "restart" is a new engine on the same database and a new App object (so a new permission cache),
as a new lanebot process would have. GitHub's answers are shaped like its documentation of
`GET /users/{username}` and the collaborator-permission endpoint.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
import respx

from bot.core.workflow import GateSettings
from bot.edges.github.client import LanebotAPI
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.store import approvers
from bot.edges.store.approvers import DatabasePins
from bot.edges.store.db import make_engine

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "octocat/hello-world"
WRITE = {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True}
OCTOCAT = 583231
IMPOSTOR = 999
GATE = GateSettings.model_validate({"approvers": ["OctoCat"]})


class App:
    """Stands in for the GitHub App object the permission cache belongs to (one per process)."""


def user(login: str, user_id: int) -> dict[str, Any]:
    return {"login": login, "id": user_id, "node_id": "MDQ6VXNlcjE=", "type": "User", "site_admin": False}


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as http:
        yield LanebotAPI(http, base_url=API)


def github_where_octocat_was_renamed(github: respx.MockRouter) -> respx.Route:
    """`/users/octocat` names OCTOCAT at first, then the account that took the login after a rename."""
    users = github.get(f"{API}/users/OctoCat")
    users.side_effect = [
        httpx.Response(200, json=user("octocat", OCTOCAT)),
        httpx.Response(200, json=user("octocat", IMPOSTOR)),
    ]
    github.get(url__regex=rf"{API}/repos/{REPO}/collaborators/[^/]+/permission").respond(
        200, json={"permission": "write", "role_name": "write", "user": {**user("x", 1), "permissions": WRITE}}
    )
    return users


async def test_a_pin_survives_a_restart_and_the_login_taken_over_since_is_refused(engine, database_url, client):
    with respx.mock() as github:
        users = github_where_octocat_was_renamed(github)
        before = cache_for(App(), pins=DatabasePins(engine))
        assert (await authorise(client, REPO, "octocat", GATE, before, user_id=OCTOCAT)).allowed
        engine.dispose()

        restarted = make_engine(database_url)
        try:
            after = cache_for(App(), pins=DatabasePins(restarted))
            impostor = await authorise(client, REPO, "octocat", GATE, after, user_id=IMPOSTOR)
            renamed = await authorise(client, REPO, "octo-renamed", GATE, after, user_id=OCTOCAT)
            assert approvers.pinned_id(restarted, "OCTOCAT") == OCTOCAT
        finally:
            restarted.dispose()
    assert not impostor.allowed and "not by login" in (impostor.reason or "")
    assert renamed.allowed  # the person the list named, under their new login
    assert users.call_count == 1  # pinned once, in the first process; never asked again


async def test_a_login_pinned_to_another_account_is_refused_with_a_log_line_naming_both_ids(engine, client, caplog):
    approvers.pin(engine, "octocat", OCTOCAT)
    with respx.mock(assert_all_called=False) as github:
        github_where_octocat_was_renamed(github)
        with caplog.at_level(logging.WARNING, logger="bot.edges.github.permissions"):
            decision = await authorise(
                client, REPO, "octocat", GATE, cache_for(App(), pins=DatabasePins(engine)), user_id=IMPOSTOR
            )
    assert not decision.allowed
    [line] = [record.getMessage() for record in caplog.records]
    assert f"pinned to GitHub user {OCTOCAT}" in line and f"user {IMPOSTOR}" in line
    assert "DELETE FROM approver_pins WHERE login = 'octocat'" in line


def test_the_first_pin_wins_and_logins_compare_without_case(engine):
    assert approvers.pinned_id(engine, "octocat") is None
    assert approvers.pin(engine, "OctoCat", OCTOCAT) == OCTOCAT
    assert approvers.pin(engine, "octocat", IMPOSTOR) == OCTOCAT  # another writer came second
    assert approvers.pinned_id(engine, "OCTOCAT") == OCTOCAT
