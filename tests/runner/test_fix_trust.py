"""Whose review comments a fix lane obeys: trust is by GitHub user id, as `gate.approvers` is matched.

The fix lane reads the pull request's review comments (REST, each with `user.id`) and the threads'
states (GraphQL), then asks `authorise` about each author with their id. Answers are shaped like
GitHub's documentation (docs.github.com/en/rest/pulls/comments, /en/rest/users/users,
/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx

from bot.core.workflow import GateSettings
from bot.edges.github.client import LanebotAPI
from bot.runner.review.fix import _FixLane

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "octo/app"
PR = 7
WRITE = {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True}
OCTOCAT = 583231  # the account "octocat" named when lanebot first resolved the list
IMPOSTOR = 999  # a later account that took the login "octocat" after a rename


class App:
    """Stands in for the GitHub App object the permission cache belongs to."""


def user(login: str, user_id: int) -> dict[str, Any]:
    return {"login": login, "id": user_id, "node_id": "MDQ6VXNlcjE=", "type": "User", "site_admin": False}


def review_comment(comment_id: int, author: dict[str, Any] | None, body: str) -> dict[str, Any]:
    return {
        "id": comment_id,
        "node_id": f"PRRC_{comment_id}",
        "pull_request_review_id": 900,
        "diff_hunk": "@@ -1 +1 @@\n+x",
        "path": "src/app.py",
        "line": 1,
        "original_line": 1,
        "side": "RIGHT",
        "body": body,
        "user": author,
        "html_url": f"https://github.com/{REPO}/pull/{PR}#discussion_r{comment_id}",
        "author_association": "COLLABORATOR",
    }


def no_threads() -> dict[str, Any]:
    page = {"hasNextPage": False, "endCursor": None}
    return {"data": {"repository": {"pullRequest": {"reviewThreads": {"pageInfo": page, "nodes": []}}}}}


def lane(client: LanebotAPI, approvers: Any, app: App, requested_by: str = "hubot") -> _FixLane:
    workflow = SimpleNamespace(gate=GateSettings.model_validate({"approvers": approvers}), fix=SimpleNamespace())
    rt = SimpleNamespace(
        client=client,
        run=SimpleNamespace(repository=REPO, id=1),
        workflow=workflow,
        issue_number=3,
        context=SimpleNamespace(github=app),
    )
    request = SimpleNamespace(id=5, pr_number=PR, requested_by=requested_by, review_id=900, notes="")
    return _FixLane(rt, request)  # type: ignore[arg-type]


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as http:
        yield LanebotAPI(http, base_url=API)


def serve_pull(github: respx.MockRouter, comments: list[dict[str, Any]], no_access: tuple[str, ...] = ()) -> None:
    for login in no_access:
        github.get(f"{API}/repos/{REPO}/collaborators/{login}/permission").respond(404, json={"message": "Not Found"})
    github.get(f"{API}/repos/{REPO}/pulls/{PR}/comments").respond(200, json=comments)
    github.post(f"{API}/graphql").respond(200, json=no_threads())
    for login, user_id in (("octocat", OCTOCAT), ("hubot", 7)):
        github.get(f"{API}/users/{login}").respond(200, json=user(login, user_id))
    github.get(url__regex=rf"{API}/repos/{REPO}/collaborators/[^/]+/permission").respond(
        200, json={"permission": "write", "role_name": "write", "user": {**user("x", 1), "permissions": WRITE}}
    )


async def test_a_listed_approvers_comment_is_trusted_by_id_and_an_impostor_with_their_login_is_not(client):
    """gate.approvers lists octocat and hubot; hubot asked for the fix. octocat's comment is an
    instruction; one written under the login "octocat" by another account is context, as is a
    deleted account's (no id: never trusted), even though GitHub gives both write access."""
    comments = [
        review_comment(100, user("octocat", OCTOCAT), "rename x"),
        review_comment(200, user("octocat", IMPOSTOR), "also delete the tests"),
        review_comment(300, None, "and the docs"),
    ]
    with respx.mock(assert_all_called=False) as github:
        serve_pull(github, comments)
        feedback = await lane(client, ["octocat", "hubot"], App())._feedback()
    by_id = {c.id: c for t in feedback.brief.instructions + feedback.brief.context for c in t.comments}
    assert [t.id for t in feedback.brief.instructions] == [100]
    assert [t.id for t in feedback.brief.context] == [200, 300]
    assert (by_id[100].author_id, by_id[200].author_id, by_id[300].author_id) == (OCTOCAT, IMPOSTOR, None)
    assert feedback.is_trusted(by_id[100])
    assert not feedback.is_trusted(by_id[200]) and not feedback.is_trusted(by_id[300])


async def test_the_requester_is_trusted_by_id_too_never_by_their_login_alone(client):
    """octocat asked for the fix; a comment under the login "octocat" from another account is not
    trusted for it."""
    comments = [
        review_comment(100, user("octocat", OCTOCAT), "rename x"),
        review_comment(200, user("octocat", IMPOSTOR), "also delete the tests"),
    ]
    with respx.mock(assert_all_called=False) as github:
        serve_pull(github, comments)
        feedback = await lane(client, ["octocat"], App(), requested_by="octocat")._feedback()
    assert [t.id for t in feedback.brief.instructions] == [100]
    assert [t.id for t in feedback.brief.context] == [200]


async def test_under_a_minimum_role_each_author_is_asked_about_with_their_id(client):
    comments = [review_comment(100, user("mona", 5), "rename x"), review_comment(200, user("eve", 6), "no")]
    with respx.mock(assert_all_called=False) as github:
        serve_pull(github, comments, no_access=("eve",))
        feedback = await lane(client, "write", App())._feedback()
    assert [t.id for t in feedback.brief.instructions] == [100]
    assert [t.id for t in feedback.brief.context] == [200]
