"""lanebot's client for pull request reviews (bot/edges/github/reviews.py), run against the sandbox GitHub.

The client is lanebot's own installation client (tokens minted with the App's JWT), talking to the
in-process sandbox as it talks to GitHub; the pull request, opened by the App, changes line 10 of
`src/long.py` and adds `docs/notes.md`. Which requests went out is read from the sandbox's log of
served requests, so paging is seen to happen, not assumed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from gidgethub import QueryError, ValidationError

from bot.edges.github.client import GitHubApp, InstallationClient, LanebotAPI
from bot.edges.github.reviews import (
    ThreadState,
    create_review,
    get_pull,
    get_review,
    graphql_endpoint,
    list_reviews,
    reply_to_comment,
    request_reviewers,
    review_comments,
    thread_states,
)
from bot.edges.settings import Settings
from tests.sandbox.test_sandbox import APP_ID, BASE, Harness, app_key, harness
from tests.sandbox.test_sandbox_reviews import (
    CHANGED,
    REPO,
    inline,
    push,
    review_project,
)

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("api", "endpoint"),
    [
        ("https://api.github.com", "https://api.github.com/graphql"),
        ("https://api.github.com/", "https://api.github.com/graphql"),
        ("https://ghe.example/api/v3", "https://ghe.example/api/graphql"),
        ("https://ghe.example/api/v3/", "https://ghe.example/api/graphql"),
        ("http://127.0.0.1:3100", "http://127.0.0.1:3100/graphql"),
    ],
    ids=["github.com", "github.com-trailing-slash", "ghes", "ghes-trailing-slash", "sandbox"],
)
def test_the_graphql_endpoint_belongs_to_the_rest_base_url(api: str, endpoint: str) -> None:
    assert graphql_endpoint(api) == endpoint


async def test_thread_states_asks_a_ghes_host_at_its_api_graphql_endpoint() -> None:
    asked: list[httpx.Request] = []

    async def ghes(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        threads = {"pageInfo": {"hasNextPage": False, "endCursor": None}, "nodes": []}
        return httpx.Response(200, json={"data": {"repository": {"pullRequest": {"reviewThreads": threads}}}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(ghes)) as http:
        client = LanebotAPI(http, base_url="https://ghe.example/api/v3")
        assert await thread_states(client, "octo/app", 3) == {}
    [request] = asked
    assert str(request.url) == "https://ghe.example/api/graphql"
    assert json.loads(request.content)["variables"] == {
        "owner": "octo",
        "name": "app",
        "number": 3,
        "first": 100,
        "after": None,
    }


@dataclass
class World:
    h: Harness
    client: InstallationClient
    head: str
    work: Path

    def served(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.h.sandbox.served if (m, p) == (method, path))

    def reply_in_sandbox(self, comment_id: int, body: str) -> int:
        """A person's reply, straight through the sandbox (quicker than one HTTP request each)."""
        state = self.h.sandbox.state
        repository = state.repository("alice", "demo")
        comment = state.review_comments[comment_id]
        return self.h.sandbox.reply(repository, repository.issues[1], state.account("bob"), comment, body).id


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with harness(tmp_path, review_project(tmp_path)) as h:
        repo = await h.repository(REPO)
        await h.http.post(f"/_sandbox/repos/{REPO}/collaborators", json={"login": "bob", "role": "write"})
        work = tmp_path / "work"
        head = await push(h, work, {"src/long.py": CHANGED, "docs/notes.md": "one\ntwo\n"})
        settings = Settings(app_id=str(APP_ID), private_key=app_key()[0], webhook_secret="secret", github_api_url=BASE)
        async with GitHubApp(settings, http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], REPO)
            await client.post(
                "/repos/{owner}/{repo}/pulls",
                {"owner": "alice", "repo": "demo"},
                data={"title": "Change line 10", "head": "lanebot/1", "base": "main"},
            )
            yield World(h, client, head, work)


async def test_the_pull_request_is_read_with_its_head(world):
    pull = await get_pull(world.client, REPO, 1)
    assert (pull["number"], pull["head"]["sha"], pull["head"]["ref"]) == (1, world.head, "lanebot/1")


async def test_a_review_is_posted_as_a_comment_of_the_commit_and_read_back(world):
    posted = await create_review(
        world.client, REPO, 1, commit_id=world.head, body="Checked.", comments=[inline(body="Finding.")]
    )
    assert (posted["state"], posted["commit_id"], posted["body"]) == ("COMMENTED", world.head, "Checked.")
    assert (await get_review(world.client, REPO, 1, posted["id"]))["id"] == posted["id"]
    assert [r["id"] for r in await list_reviews(world.client, REPO, 1)] == [posted["id"]]
    [comment] = await review_comments(world.client, REPO, 1)
    assert (comment["path"], comment["line"], comment["side"], comment["body"]) == (
        "src/long.py",
        10,
        "RIGHT",
        "Finding.",
    )


async def test_a_review_with_a_comment_off_the_diff_is_refused_whole(world):
    with pytest.raises(ValidationError, match="must be part of the diff"):
        await create_review(
            world.client,
            REPO,
            1,
            commit_id=world.head,
            body="Checked.",
            comments=[inline(body="Kept?"), inline(line=1, body="Off the diff.")],
        )
    assert await list_reviews(world.client, REPO, 1) == []


async def test_every_page_of_review_comments_is_read(world):
    await create_review(
        world.client, REPO, 1, commit_id=world.head, body="Many.", comments=[inline(body=f"c{n}") for n in range(101)]
    )
    comments = await review_comments(world.client, REPO, 1)
    assert [c["body"] for c in comments] == [f"c{n}" for n in range(101)]
    assert world.served("GET", "/repos/alice/demo/pulls/1/comments") == 2


async def test_a_reply_lands_in_the_thread_and_review_is_asked_for_again(world):
    await create_review(world.client, REPO, 1, commit_id=world.head, body="One.", comments=[inline()])
    [root] = await review_comments(world.client, REPO, 1)
    reply = await reply_to_comment(world.client, REPO, 1, root["id"], "Changed in abc123.")
    assert (reply["in_reply_to_id"], reply["user"]["login"]) == (root["id"], "lanebot[bot]")
    pull = await request_reviewers(world.client, REPO, 1, ["bob"])
    assert [u["login"] for u in pull["requested_reviewers"]] == ["bob"]


async def test_thread_states_reads_every_thread_and_every_comment_and_finds_a_thread_by_any_of_its_comments(world):
    await create_review(
        world.client,
        REPO,
        1,
        commit_id=world.head,
        body="Many.",
        comments=[*(inline(body=f"t{n}") for n in range(100)), inline(path="docs/notes.md", line=1)],
    )
    roots = await review_comments(world.client, REPO, 1)
    first, notes = roots[0], roots[-1]
    replies = [world.reply_in_sandbox(first["id"], f"r{n}") for n in range(100)]
    resolved = await world.h.http.post(
        f"/_sandbox/repos/{REPO}/pulls/comments/{replies[-1]}/resolve", json={"as": "bob"}
    )
    assert resolved.status_code == 200
    await push(world.h, world.work, {"docs/notes.md": "one, again\ntwo\n"})

    states = await thread_states(world.client, REPO, 1)

    assert set(states) == {c["id"] for c in roots} | set(replies)
    assert states[replies[-1]] == states[first["id"]]
    assert (states[first["id"]].resolved, states[first["id"]].outdated) == (True, False)
    assert (states[notes["id"]].resolved, states[notes["id"]].outdated) == (False, True)
    assert states[roots[1]["id"]] == ThreadState(resolved=False, outdated=False, node_id=states[roots[1]["id"]].node_id)
    assert len({state.node_id for state in states.values()}) == 101
    assert world.served("POST", "/graphql") == 3  # two pages of threads, a second page of the first thread's comments


async def test_thread_states_of_a_pull_request_that_is_not_there_raises_githubs_message(world):
    with pytest.raises(QueryError, match="Could not resolve to a PullRequest with the number of 9"):
        await thread_states(world.client, REPO, 9)
