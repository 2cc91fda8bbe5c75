"""The sandbox GitHub's pull request reviews behave as GitHub's: reviews with inline comments placed
in the real diff, review comments and their threads, review requests, the webhooks each sends, the
GraphQL view of review threads, and the human API that reviews, replies and resolves as people do.

Every test drives the Starlette app in-process (as tests/sandbox/test_sandbox.py does) on one pull request
from `lanebot/1`, opened by the App: it changes line 10 of a 20-line `src/long.py` (so the diff
shows lines 7 to 13 of each side) and adds `docs/notes.md`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.sandbox import SandboxConfig, SandboxServer
from bot.sandbox.cli import HumanClient, SandboxUnavailable
from bot.sandbox.core import LINE_NOT_IN_DIFF, PATH_UNRESOLVED, START_LINE_OUTSIDE_HUNK
from bot.sandbox.gitstore import parse_diff
from tests.sandbox.test_sandbox import APP_ID, BASE, Harness, app_key, git, harness, mint, push_branch

pytestmark = pytest.mark.anyio

REPO = "alice/demo"
BRANCH = "lanebot/1"
LONG = "".join(f"line {n}\n" for n in range(1, 21))
CHANGED = LONG.replace("line 10\n", "line 10 changed\n")
HUNK_HEADER = "@@ -7,7 +7,7 @@ line 6"
REVIEWS_DOCS = "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request"


def review_project(tmp_path: Path) -> Path:
    """A project with a long file to comment on."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "README.md").write_text("# demo\n")
    (folder / "src" / "long.py").write_text(LONG)
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return review_project(tmp_path)


@dataclass
class World:
    """The sandbox with the pull request open (#1), the App's token, and a clone to push from."""

    h: Harness
    token: dict[str, str]
    head: str
    work: Path

    @property
    def http(self) -> httpx.AsyncClient:
        return self.h.http

    async def push(self, files: dict[str, str]) -> str:
        """Commit files on the pull request's branch, push, and let the sandbox see the push."""
        self.head = await push(self.h, self.work, files)
        return self.head

    async def review(
        self, *comments: dict[str, Any], event: str = "COMMENT", body: str | None = "Notes.", **extra: Any
    ) -> httpx.Response:
        payload = {"event": event, "body": body, "comments": list(comments), **extra}
        return await self.http.post(f"/repos/{REPO}/pulls/1/reviews", headers=self.token, json=payload)

    async def get(self, path: str, **params: Any) -> Any:
        response = await self.http.get(f"/repos/{REPO}{path}", headers=self.token, params=params)
        assert response.status_code == 200, response.text
        return response.json()

    async def reply(self, comment_id: int, body: str) -> httpx.Response:
        return await self.http.post(
            f"/repos/{REPO}/pulls/1/comments/{comment_id}/replies", headers=self.token, json={"body": body}
        )

    async def human(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return await self.http.post(f"/_sandbox/repos/{REPO}{path}", json=body)

    async def graphql(self, query: str, token: dict[str, str] | None = None, **variables: Any) -> httpx.Response:
        return await self.http.post(
            "/graphql", headers=self.token if token is None else token, json={"query": query, "variables": variables}
        )

    async def delivered(self) -> list[tuple[str, str]]:
        return await self.h.delivered()

    def payloads(self, event: str) -> list[dict[str, Any]]:
        return [json.loads(r.content) for r in self.h.receiver.requests if r.headers["X-GitHub-Event"] == event]


async def push(h: Harness, work: Path, files: dict[str, str]) -> str:
    owner, name = REPO.split("/")
    if not work.exists():
        git("clone", "--quiet", str(h.sandbox.git.path(owner, name)), str(work))
        git("checkout", "--quiet", "-b", BRANCH, cwd=work)
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "-m", "change", cwd=work)
    before = h.sandbox.git.refs(owner, name)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{BRANCH}", cwd=work)
    after = h.sandbox.git.refs(owner, name)
    await h.sandbox.pushed(h.sandbox.state.repository(owner, name), before, after, h.sandbox.bot)
    return after[f"refs/heads/{BRANCH}"]


@pytest.fixture
async def world(tmp_path: Path, project: Path) -> AsyncIterator[World]:
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO)
        for login, role in (("bob", "write"), ("rita", "read")):
            await h.http.post(f"/_sandbox/repos/{REPO}/collaborators", json={"login": login, "role": role})
        work = tmp_path / "work"
        head = await push(h, work, {"src/long.py": CHANGED, "docs/notes.md": "one\ntwo\n"})
        token = await h.token(repo["installation_id"])
        opened = await h.http.post(
            f"/repos/{REPO}/pulls", headers=token, json={"title": "Change line 10", "head": BRANCH, "base": "main"}
        )
        assert opened.status_code == 201, opened.text
        await h.sandbox.webhooks.drain()
        h.receiver.requests.clear()
        yield World(h, token, head, work)


def inline(path: str = "src/long.py", line: int = 10, side: str = "RIGHT", body: str = "Why?", **extra: Any) -> dict:
    return {"path": path, "line": line, "side": side, "body": body, **extra}


# the diff a review comment is placed in

TWO_HUNKS = """diff --git a/app.py b/app.py
index 1111111..2222222 100644
--- a/app.py
+++ b/app.py
@@ -1,3 +1,3 @@
 first
-second
+second, changed
 third
@@ -20,2 +20,3 @@ def tail():
 twenty
 twenty-one
+twenty-two
\\ No newline at end of file
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 3333333..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/logo.png b/logo.png
index 4444444..5555555 100644
Binary files a/logo.png and b/logo.png differ
"""


def test_a_diff_is_read_into_the_lines_each_side_shows_and_githubs_positions() -> None:
    files = parse_diff(TWO_HUNKS)
    assert set(files) == {"app.py", "gone.txt"}  # a binary file has no lines to comment on
    app = files["app.py"]
    assert [
        (side, line, app.find(line, side).position)
        for side, line in (("LEFT", 2), ("RIGHT", 2), ("RIGHT", 3), ("RIGHT", 20), ("RIGHT", 22))
    ] == [("LEFT", 2, 2), ("RIGHT", 2, 3), ("RIGHT", 3, 4), ("RIGHT", 20, 6), ("RIGHT", 22, 8)]
    assert app.find(2, "RIGHT").diff_hunk == "@@ -1,3 +1,3 @@\n first\n-second\n+second, changed"
    assert app.find(22, "RIGHT").diff_hunk.startswith("@@ -20,2 +20,3 @@ def tail():\n twenty")
    assert app.find(10, "RIGHT") is None and app.find(22, "LEFT") is None
    assert [app.at_position(n) for n in (1, 2, 5, 8, 9)] == [
        ("RIGHT", 1),
        ("LEFT", 2),
        None,
        ("RIGHT", 22),
        None,
    ]  # 5 is the second hunk's header
    assert files["gone.txt"].find(1, "LEFT").diff_hunk == "@@ -1 +0,0 @@\n-bye"


# reviews


async def test_a_review_with_inline_comments_is_200_and_each_comment_sits_where_the_diff_shows_its_line(world):
    response = await world.review(inline(), inline(side="LEFT", body="Was fine."))
    assert response.status_code == 200
    review = response.json()
    assert (review["state"], review["body"], review["commit_id"], review["user"]["login"]) == (
        "COMMENTED",
        "Notes.",
        world.head,
        "lanebot[bot]",
    )
    right, left = await world.get("/pulls/1/comments")
    assert right["diff_hunk"] == f"{HUNK_HEADER}\n line 7\n line 8\n line 9\n-line 10\n+line 10 changed"
    assert left["diff_hunk"] == f"{HUNK_HEADER}\n line 7\n line 8\n line 9\n-line 10"
    assert [(c["side"], c["line"], c["original_line"], c["position"]) for c in (right, left)] == [
        ("RIGHT", 10, 10, 5),
        ("LEFT", 10, 10, 4),
    ]
    for comment in (right, left):
        assert comment["pull_request_review_id"] == review["id"]
        assert comment["commit_id"] == comment["original_commit_id"] == world.head
        assert "in_reply_to_id" not in comment
        assert comment["url"] == f"{BASE}/repos/{REPO}/pulls/comments/{comment['id']}"
        assert comment["html_url"] == f"{BASE}/{REPO}/pull/1#discussion_r{comment['id']}"
        assert (comment["user"]["login"], comment["subject_type"], comment["start_line"]) == (
            "lanebot[bot]",
            "line",
            None,
        )


@pytest.mark.parametrize(
    ("comment", "reason"),
    [
        (inline(line=2), LINE_NOT_IN_DIFF),
        (inline(line=10, side="LEFT", path="docs/notes.md"), LINE_NOT_IN_DIFF),
        (inline(path="README.md", line=1), PATH_UNRESOLVED),
        (inline(line=10, start_line=2), START_LINE_OUTSIDE_HUNK),
    ],
    ids=["line-outside-the-hunks", "left-side-of-an-added-file", "file-not-in-the-diff", "start-in-another-hunk"],
)
async def test_a_review_with_a_comment_github_cannot_place_is_422_and_creates_nothing(world, comment, reason) -> None:
    response = await world.review(inline(line=9), comment)
    assert response.status_code == 422
    assert response.json() == {
        "message": "Unprocessable Entity",
        "errors": [reason],
        "documentation_url": REVIEWS_DOCS,
        "status": "422",
    }
    assert await world.get("/pulls/1/reviews") == []
    assert await world.get("/pulls/1/comments") == []
    assert await world.delivered() == []


async def test_the_pull_requests_author_may_comment_but_not_approve_or_request_changes(world):
    approving = await world.review(event="APPROVE", body=None)
    assert (approving.status_code, approving.json()["errors"]) == (422, ["Can not approve your own pull request"])
    requesting = await world.review(event="REQUEST_CHANGES", body="Fix it.")
    assert requesting.json()["errors"] == ["Can not request changes on your own pull request"]
    assert (await world.review(event="COMMENT", body="A note.")).status_code == 200


async def test_a_person_may_approve_and_request_changes(world):
    for event in ("APPROVE", "REQUEST_CHANGES"):
        response = await world.human("/pulls/1/reviews", {"as": "bob", "event": event, "body": "Seen."})
        assert response.status_code == 201, response.text
    reviews = await world.get("/pulls/1/reviews")
    assert [(r["user"]["login"], r["state"]) for r in reviews] == [("bob", "APPROVED"), ("bob", "CHANGES_REQUESTED")]


async def test_a_review_without_an_event_is_refused_as_the_sandbox_keeps_no_pending_reviews(world):
    response = await world.review(event=None)
    assert response.status_code == 422
    [reason] = response.json()["errors"]
    assert "does not keep pending reviews" in reason and "APPROVE, REQUEST_CHANGES or COMMENT" in reason


async def test_a_comment_review_needs_a_body_unless_it_has_inline_comments(world):
    bare = await world.review(body=None)
    assert bare.status_code == 422 and "Body is required" in bare.json()["errors"][0]
    assert (await world.review(inline(), body=None)).status_code == 200
    refused = await world.human("/pulls/1/reviews", {"as": "bob", "event": "REQUEST_CHANGES"})
    assert refused.status_code == 422 and "Body is required" in refused.json()["message"]
    assert (await world.human("/pulls/1/reviews", {"as": "bob", "event": "APPROVE"})).status_code == 201


async def test_the_older_position_is_taken_and_becomes_the_line_and_side_it_names(world):
    response = await world.review(
        {"path": "src/long.py", "position": 4, "body": "old"}, {"path": "src/long.py", "position": 5, "body": "new"}
    )
    assert response.status_code == 200
    comments = await world.get("/pulls/1/comments")
    assert [(c["side"], c["line"], c["position"]) for c in comments] == [("LEFT", 10, 4), ("RIGHT", 10, 5)]
    past_the_end = await world.review({"path": "src/long.py", "position": 99, "body": "?"})
    assert past_the_end.json()["errors"] == [LINE_NOT_IN_DIFF]


async def test_a_comment_on_several_lines_starts_in_the_same_hunk(world):
    assert (await world.review(inline(start_line=8))).status_code == 200
    [comment] = await world.get("/pulls/1/comments")
    assert (comment["start_line"], comment["start_side"], comment["line"]) == (8, "RIGHT", 10)
    assert comment["diff_hunk"].endswith("+line 10 changed")


async def test_a_review_of_an_earlier_commit_places_its_comments_in_that_commits_diff(world):
    first = world.head
    await world.push({"src/long.py": CHANGED.replace("line 3\n", "line 3 changed\n")})
    assert (await world.review(inline(line=3))).status_code == 200  # line 3 is in the new head's diff
    assert (await world.review(inline(line=3), commit_id=first)).json()["errors"] == [LINE_NOT_IN_DIFF]
    response = await world.review(inline(), commit_id=first)
    assert response.json()["commit_id"] == first
    unknown = await world.review(inline(), commit_id="f" * 40)
    assert unknown.json()["errors"] == [f"No commit found for SHA: {'f' * 40}"]


async def test_reviews_are_listed_in_order_and_each_is_got_with_its_comments(world):
    first = (await world.review(inline(), body="First.")).json()
    second = (await world.review(body="Second.")).json()
    assert [r["id"] for r in await world.get("/pulls/1/reviews")] == [first["id"], second["id"]]
    assert (await world.get(f"/pulls/1/reviews/{second['id']}"))["body"] == "Second."
    assert [c["body"] for c in await world.get(f"/pulls/1/reviews/{first['id']}/comments")] == ["Why?"]
    assert await world.get(f"/pulls/1/reviews/{second['id']}/comments") == []
    missing = await world.http.get(f"/repos/{REPO}/pulls/1/reviews/1", headers=world.token)
    assert missing.status_code == 404


# review comments and replies


async def test_a_single_review_comment_is_201_in_a_review_of_its_own(world):
    response = await world.http.post(
        f"/repos/{REPO}/pulls/1/comments",
        headers=world.token,
        json={"body": "Single.", "commit_id": world.head, "path": "docs/notes.md", "line": 2, "side": "RIGHT"},
    )
    assert response.status_code == 201
    comment = response.json()
    assert response.headers["location"] == comment["url"]
    assert (comment["path"], comment["line"]) == ("docs/notes.md", 2)
    assert comment["diff_hunk"] == "@@ -0,0 +1,2 @@\n+one\n+two"
    [review] = await world.get("/pulls/1/reviews")
    assert (review["id"], review["state"], review["body"]) == (comment["pull_request_review_id"], "COMMENTED", "")
    assert await world.get(f"/pulls/comments/{comment['id']}") == comment


async def test_a_single_review_comment_off_the_diff_is_422_validation_failed(world):
    response = await world.http.post(
        f"/repos/{REPO}/pulls/1/comments",
        headers=world.token,
        json={"body": "Off.", "commit_id": world.head, "path": "src/long.py", "line": 1, "side": "RIGHT"},
    )
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "resource": "PullRequestReviewComment",
            "code": "custom",
            "field": "pull_request_review_thread.line",
            "message": LINE_NOT_IN_DIFF,
        }
    ]
    assert await world.get("/pulls/1/comments") == []


async def test_a_reply_to_a_reply_joins_the_roots_thread(world):
    await world.review(inline())
    [root] = await world.get("/pulls/1/comments")
    reply = (await world.reply(root["id"], "First answer.")).json()
    again = await world.reply(reply["id"], "Second answer.")
    assert again.status_code == 201
    by_field = await world.http.post(
        f"/repos/{REPO}/pulls/1/comments",
        headers=world.token,
        json={"body": "Third answer.", "in_reply_to": again.json()["id"]},
    )
    assert by_field.status_code == 201
    thread = await world.get("/pulls/1/comments")
    assert [c.get("in_reply_to_id") for c in thread] == [None, root["id"], root["id"], root["id"]]
    assert {(c["path"], c["line"], c["side"], c["diff_hunk"]) for c in thread} == {
        (root["path"], root["line"], root["side"], root["diff_hunk"])
    }
    assert len({c["pull_request_review_id"] for c in thread}) == 4  # each reply comes in a review of its own


async def test_a_reply_needs_a_comment_of_that_pull_request(world):
    await world.review(inline())
    [root] = await world.get("/pulls/1/comments")
    elsewhere = await world.http.post(
        f"/repos/{REPO}/pulls/2/comments/{root['id']}/replies", headers=world.token, json={"body": "?"}
    )
    assert elsewhere.status_code == 404
    assert (await world.reply(999, "?")).status_code == 404


async def test_review_comments_are_listed_oldest_first_a_page_at_a_time(world):
    await world.review(*(inline(body=f"c{n}") for n in range(5)))
    first = await world.http.get(f"/repos/{REPO}/pulls/1/comments", headers=world.token, params={"per_page": 2})
    assert [c["body"] for c in first.json()] == ["c0", "c1"]
    assert 'rel="next"' in first.headers["link"] and "page=3" in first.headers["link"]
    assert [c["body"] for c in await world.get("/pulls/1/comments", per_page=2, page=3)] == ["c4"]


# webhooks


async def test_a_review_sends_each_inline_comment_then_the_review(world):
    review = (await world.review(inline(), inline(line=11, body="And here."))).json()
    assert await world.delivered() == [
        ("pull_request_review_comment", "created"),
        ("pull_request_review_comment", "created"),
        ("pull_request_review", "submitted"),
    ]
    comments = [p["comment"] for p in world.payloads("pull_request_review_comment")]
    assert [(c["body"], c["pull_request_review_id"], c["line"]) for c in comments] == [
        ("Why?", review["id"], 10),
        ("And here.", review["id"], 11),
    ]
    [submitted] = world.payloads("pull_request_review")
    assert (submitted["review"]["id"], submitted["review"]["state"]) == (review["id"], "commented")
    assert submitted["pull_request"]["number"] == 1


async def test_a_reply_sends_its_comment_and_the_review_github_makes_for_it(world):
    await world.review(inline())
    [root] = await world.get("/pulls/1/comments")
    await world.delivered()
    world.h.receiver.requests.clear()
    reply = (await world.human(f"/pulls/comments/{root['id']}/replies", {"as": "bob", "body": "Agreed."})).json()
    assert await world.delivered() == [("pull_request_review_comment", "created"), ("pull_request_review", "submitted")]
    [created] = world.payloads("pull_request_review_comment")
    assert (created["comment"]["id"], created["comment"]["in_reply_to_id"]) == (reply["id"], root["id"])
    assert created["sender"]["login"] == "bob"
    [submitted] = world.payloads("pull_request_review")
    assert (submitted["review"]["body"], submitted["review"]["state"]) == (None, "commented")


# review requests


async def test_requesting_reviewers_answers_201_with_the_pull_request_and_tells_the_app_of_each(world):
    await world.h.http.post(f"/_sandbox/repos/{REPO}/collaborators", json={"login": "carol", "role": "maintain"})
    response = await world.http.post(
        f"/repos/{REPO}/pulls/1/requested_reviewers", headers=world.token, json={"reviewers": ["bob", "carol"]}
    )
    assert response.status_code == 201
    assert [u["login"] for u in response.json()["requested_reviewers"]] == ["bob", "carol"]
    listed = await world.get("/pulls/1/requested_reviewers")
    assert ([u["login"] for u in listed["users"]], listed["teams"]) == (["bob", "carol"], [])
    assert await world.delivered() == [("member", "added")] + [("pull_request", "review_requested")] * 2
    assert [p["requested_reviewer"]["login"] for p in world.payloads("pull_request")] == ["bob", "carol"]
    again = await world.http.post(
        f"/repos/{REPO}/pulls/1/requested_reviewers", headers=world.token, json={"reviewers": ["bob"]}
    )
    assert again.status_code == 201 and len(await world.delivered()) == 3  # already requested: no new event


@pytest.mark.parametrize(
    ("login", "message"),
    [
        ("lanebot[bot]", "Review cannot be requested from pull request author."),
        (
            "stranger",
            "Reviews may only be requested from collaborators. One or more of the users or teams you "
            f"specified is not a collaborator of the {REPO} repository.",
        ),
    ],
    ids=["the-author", "not-a-collaborator"],
)
async def test_a_review_cannot_be_requested_from_the_author_or_a_stranger(world, login: str, message: str) -> None:
    response = await world.http.post(
        f"/repos/{REPO}/pulls/1/requested_reviewers", headers=world.token, json={"reviewers": ["bob", login]}
    )
    assert (response.status_code, response.json()["message"]) == (422, message)
    assert (await world.get("/pulls/1/requested_reviewers"))["users"] == []


async def test_a_requested_reviewers_review_takes_them_off_the_list(world):
    await world.http.post(
        f"/repos/{REPO}/pulls/1/requested_reviewers", headers=world.token, json={"reviewers": ["bob", "rita"]}
    )
    await world.human("/pulls/1/reviews", {"as": "bob", "event": "REQUEST_CHANGES", "body": "Not yet."})
    pull = await world.get("/pulls/1")
    assert [u["login"] for u in pull["requested_reviewers"]] == ["rita"]


# a push after the review


async def test_a_thread_on_a_file_the_next_push_changes_becomes_outdated_and_the_others_follow_the_head(world):
    first = world.head
    await world.review(inline(), inline(path="docs/notes.md", line=1))
    new_head = await world.push({"docs/notes.md": "one, again\ntwo\n"})
    on_long, on_notes = await world.get("/pulls/1/comments")
    assert (on_long["line"], on_long["position"], on_long["commit_id"]) == (10, 5, new_head)
    assert (on_notes["line"], on_notes["position"], on_notes["original_line"]) == (None, None, 1)
    assert on_notes["commit_id"] == on_notes["original_commit_id"] == first
    data = (await world.graphql(THREADS, owner="alice", name="demo", number=1, first=10)).json()["data"]
    threads = data["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    assert [(t["path"], t["isOutdated"], t["line"], t["originalLine"]) for t in threads] == [
        ("src/long.py", False, 10, 10),
        ("docs/notes.md", True, None, 1),
    ]


# GraphQL

THREADS = """
query($owner: String!, $name: String!, $number: Int!, $first: Int, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: $first, after: $after) {
        totalCount
        pageInfo { hasNextPage endCursor }
        nodes {
          id isResolved isOutdated path line originalLine diffSide
          resolvedBy { login }
          comments(first: 2) { totalCount nodes { id databaseId body author { login } } }
        }
      }
    }
  }
}
"""


async def test_graphql_shows_each_thread_with_its_comments_and_who_resolved_it(world):
    await world.review(inline(), inline(side="LEFT", body="Old line."))
    root, _ = await world.get("/pulls/1/comments")
    reply = (await world.human(f"/pulls/comments/{root['id']}/replies", {"as": "bob", "body": "Done."})).json()
    resolved = await world.human(f"/pulls/comments/{reply['id']}/resolve", {"as": "bob"})
    assert resolved.status_code == 200 and resolved.json()["resolved_by"] == "bob"
    response = await world.graphql(THREADS, owner="alice", name="demo", number=1, first=10)
    assert response.status_code == 200 and "errors" not in response.json()
    connection = response.json()["data"]["repository"]["pullRequest"]["reviewThreads"]
    assert (connection["totalCount"], connection["pageInfo"]["hasNextPage"]) == (2, False)
    first, second = connection["nodes"]
    assert (first["isResolved"], first["resolvedBy"], first["diffSide"]) == (True, {"login": "bob"}, "RIGHT")
    assert (second["isResolved"], second["resolvedBy"], second["diffSide"]) == (False, None, "LEFT")
    assert [(c["databaseId"], c["author"]["login"]) for c in first["comments"]["nodes"]] == [
        (root["id"], "lanebot"),
        (reply["id"], "bob"),
    ]  # GraphQL names a bot without REST's "[bot]"
    await world.human(f"/pulls/comments/{root['id']}/resolve", {"as": "alice", "resolved": False})
    again = (await world.graphql(THREADS, owner="alice", name="demo", number=1, first=10)).json()
    assert again["data"]["repository"]["pullRequest"]["reviewThreads"]["nodes"][0]["isResolved"] is False


async def test_graphql_pages_threads_and_comments_with_cursors(world):
    await world.review(*(inline(body=f"t{n}") for n in range(3)))
    roots = await world.get("/pulls/1/comments")
    for n in range(2):
        await world.reply(roots[0]["id"], f"r{n}")
    pages, after = [], None
    while True:
        data = (await world.graphql(THREADS, owner="alice", name="demo", number=1, first=2, after=after)).json()["data"]
        connection = data["repository"]["pullRequest"]["reviewThreads"]
        pages.append([t["comments"]["nodes"][0]["body"] for t in connection["nodes"]])
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert pages == [["t0", "t1"], ["t2"]]
    comments = (await world.graphql(THREADS, owner="alice", name="demo", number=1, first=1)).json()["data"]
    [thread] = comments["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    assert (thread["comments"]["totalCount"], len(thread["comments"]["nodes"])) == (3, 2)


@pytest.mark.parametrize(
    ("first", "kind", "message"),
    [
        (
            None,
            "MISSING_PAGINATION_BOUNDARIES",
            "You must provide a `first` or `last` value to properly paginate the `reviewThreads` connection.",
        ),
        (
            101,
            "EXCESSIVE_PAGINATION",
            "Requesting 101 records on the `reviewThreads` connection exceeds the `first` limit of 100 records.",
        ),
    ],
    ids=["missing", "over-100"],
)
async def test_graphql_refuses_a_connection_without_a_proper_first_as_github_does(world, first, kind, message):
    response = await world.graphql(THREADS, owner="alice", name="demo", number=1, first=first)
    assert response.status_code == 200
    body = response.json()
    assert body["data"] == {"repository": {"pullRequest": None}}
    [error] = body["errors"]
    assert (error["type"], error["message"], error["path"]) == (
        kind,
        message,
        ["repository", "pullRequest", "reviewThreads"],
    )


async def test_graphql_answers_a_bad_query_with_200_and_errors(world):
    unknown = await world.graphql('{ repository(owner: "alice", name: "demo") { stars } }')
    assert unknown.status_code == 200
    assert "data" not in unknown.json() and "stars" in unknown.json()["errors"][0]["message"]
    broken = await world.graphql("{ repository(")
    assert broken.status_code == 200 and broken.json()["errors"][0]["locations"]
    cursor = await world.graphql(THREADS, owner="alice", name="demo", number=1, first=1, after="nonsense")
    assert cursor.json()["errors"][0]["type"] == "INVALID_CURSOR_ARGUMENTS"


async def test_graphql_says_what_it_cannot_find(world):
    no_pull = (await world.graphql(THREADS, owner="alice", name="demo", number=7, first=1)).json()
    assert no_pull["errors"][0]["message"] == "Could not resolve to a PullRequest with the number of 7."
    no_repo = (await world.graphql(THREADS, owner="alice", name="nope", number=1, first=1)).json()
    assert (no_repo["data"], no_repo["errors"][0]["type"]) == ({"repository": None}, "NOT_FOUND")


async def test_graphql_takes_an_installation_token_that_may_read_pull_requests(world):
    query = '{ repository(owner: "alice", name: "demo") { id } }'
    anonymous = await world.http.post("/graphql", json={"query": query})
    assert anonymous.status_code == 401
    assert anonymous.json()["message"] == "This endpoint requires you to be authenticated."
    installation = world.h.sandbox.state.repository("alice", "demo").installation_id
    issues_only = await world.h.token(installation, permissions={"issues": "read"})
    refused = (await world.graphql(THREADS, token=issues_only, owner="alice", name="demo", number=1, first=1)).json()
    assert (refused["errors"][0]["type"], refused["errors"][0]["message"]) == (
        "FORBIDDEN",
        "Resource not accessible by integration",
    )


async def test_graphql_finds_a_thread_by_its_node_id(world):
    await world.review(inline())
    data = (await world.graphql(THREADS, owner="alice", name="demo", number=1, first=1)).json()["data"]
    thread_id = data["repository"]["pullRequest"]["reviewThreads"]["nodes"][0]["id"]
    query = (
        "query($id: ID!) { node(id: $id) { __typename "
        "... on PullRequestReviewThread { path comments(first: 1) { totalCount } } } }"
    )
    node = (await world.graphql(query, id=thread_id)).json()["data"]["node"]
    assert node == {"__typename": "PullRequestReviewThread", "path": "src/long.py", "comments": {"totalCount": 1}}


# the human API


async def test_a_persons_inline_comment_off_the_diff_is_refused_saying_where_comments_may_go(world):
    response = await world.human(
        "/pulls/1/reviews", {"as": "bob", "event": "COMMENT", "body": "x", "comments": [inline(line=1)]}
    )
    assert response.status_code == 422
    assert LINE_NOT_IN_DIFF in response.json()["message"]
    assert "a line the pull request's diff shows" in response.json()["message"]


async def test_only_the_author_or_someone_with_write_access_may_resolve_a_thread(world):
    await world.review(inline())
    [root] = await world.get("/pulls/1/comments")
    refused = await world.human(f"/pulls/comments/{root['id']}/resolve", {"as": "rita"})
    assert refused.status_code == 403 and "write access" in refused.json()["message"]
    allowed = await world.human(f"/pulls/comments/{root['id']}/resolve", {"as": "rita", "role": "write"})
    assert allowed.json()["resolved"] is True


async def test_the_state_dump_lists_review_comments_threads_and_requested_reviewers(world):
    await world.http.post(
        f"/repos/{REPO}/pulls/1/requested_reviewers", headers=world.token, json={"reviewers": ["rita"]}
    )
    await world.human(
        "/pulls/1/reviews",
        {"as": "bob", "event": "REQUEST_CHANGES", "body": "Please.", "comments": [inline(body="This one.")]},
    )
    [root] = await world.get("/pulls/1/comments")
    await world.human(f"/pulls/comments/{root['id']}/replies", {"as": "rita", "body": "Seen."})
    state = (await world.http.get(f"/_sandbox/repos/{REPO}")).json()
    reply = state["review_comments"][1]
    assert state["review_comments"][0] == {
        "id": root["id"],
        "pull": 1,
        "review_id": root["pull_request_review_id"],
        "path": "src/long.py",
        "line": 10,
        "side": "RIGHT",
        "body": "This one.",
        "user": "bob",
        "in_reply_to_id": None,
        "commit_id": world.head,
    }
    assert (reply["user"], reply["in_reply_to_id"]) == ("rita", root["id"])
    assert state["review_threads"] == [
        {
            "root_id": root["id"],
            "pull": 1,
            "path": "src/long.py",
            "line": 10,
            "outdated": False,
            "resolved": False,
            "resolved_by": None,
            "comments": [root["id"], reply["id"]],
        }
    ]
    assert state["pulls"][0]["pull_request"]["requested_reviewers"] == []  # rita's reply was her review
    assert [r["state"] for r in state["reviews"]] == ["changes_requested", "commented"]


@pytest.mark.slow
def test_the_human_client_reviews_replies_and_resolves_in_a_running_sandbox(tmp_path: Path, project: Path) -> None:
    config = SandboxConfig(public_key_pem=app_key()[1], app_id=APP_ID, state_dir=tmp_path / "state")
    with SandboxServer(config) as server, HumanClient(server.url) as client:
        client.create_repository(REPO, project)
        client.add_collaborator(REPO, "bob", "write")
        push_branch(server.sandbox, REPO, BRANCH, tmp_path / "work", {"src/long.py": CHANGED})
        opened = httpx.post(
            f"{server.url}/repos/{REPO}/pulls",
            headers={"Authorization": f"token {mint(server)}"},
            json={"title": "Change", "head": BRANCH, "base": "main"},
        )
        assert opened.status_code == 201, opened.text
        client.review(
            REPO,
            1,
            login="bob",
            event="REQUEST_CHANGES",
            body="Two things.",
            comments=[inline(body="First."), inline(side="LEFT", body="Second.")],
        )
        with pytest.raises(SandboxUnavailable, match="must be part of the diff"):
            client.review(REPO, 1, login="bob", event="COMMENT", body="x", comments=[inline(line=1)])
        first, second = client.state(REPO)["review_comments"]
        reply = client.reply_to_review_comment(REPO, first["id"], login="bob", body="Also this.")
        assert reply["in_reply_to_id"] == first["id"]
        assert client.resolve_thread(REPO, reply["id"], login="bob")["resolved_by"] == "bob"
        assert client.resolve_thread(REPO, second["id"], login="bob", resolved=False)["resolved"] is False
        threads = client.state(REPO)["review_threads"]
    assert [(t["root_id"], t["resolved"]) for t in threads] == [(first["id"], True), (second["id"], False)]
