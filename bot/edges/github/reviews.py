"""Pull request reviews on GitHub: the pull request, its reviews and review comments, which review
threads are resolved or outdated, and lanebot's own writes (replies, a review, review requests).

Every function takes a gidgethub client (an installation client scoped to the repository) and
does one thing, as bot/edges/github/issues.py does for issues. Lists are read to the end (every page).
Whether a thread is resolved or outdated is only in GitHub's GraphQL API, so `thread_states`
asks it, at the GraphQL endpoint that belongs to the client's REST base URL (`graphql_endpoint`:
github.com and GitHub Enterprise Server differ).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gidgethub.abc import GitHubAPI

from bot.edges.github.issues import split_repository

__all__ = [
    "ThreadState",
    "create_review",
    "get_pull",
    "get_review",
    "graphql_endpoint",
    "list_reviews",
    "reply_to_comment",
    "request_reviewers",
    "review_comments",
    "thread_states",
]

_PER_PAGE = 100  # GitHub's largest page, for REST lists and GraphQL connections alike
_GHES_REST_SUFFIX = "/api/v3"


@dataclass(frozen=True)
class ThreadState:
    """What GitHub says of a review thread: resolved, outdated, and its GraphQL node ID."""

    resolved: bool
    outdated: bool
    node_id: str


def graphql_endpoint(api_base_url: str) -> str:
    """The GraphQL endpoint beside a REST base URL.

    https://api.github.com -> https://api.github.com/graphql; GitHub Enterprise Server's
    https://ghe.example/api/v3 -> https://ghe.example/api/graphql
    (docs.github.com/en/enterprise-server@latest/graphql/guides/forming-calls-with-graphql#the-graphql-endpoint).
    """
    base = api_base_url.rstrip("/")
    if base.endswith(_GHES_REST_SUFFIX):
        return base.removesuffix(_GHES_REST_SUFFIX) + "/api/graphql"
    return base + "/graphql"


def _pull_vars(repository: str, number: int) -> dict[str, Any]:
    owner, name = split_repository(repository)
    return {"owner": owner, "repo": name, "pull_number": number}


async def get_pull(client: GitHubAPI, repository: str, number: int) -> dict[str, Any]:
    """The pull request (its head and base among the rest).

    https://docs.github.com/en/rest/pulls/pulls#get-a-pull-request
    """
    pull: dict[str, Any] = await client.getitem(
        "/repos/{owner}/{repo}/pulls/{pull_number}", _pull_vars(repository, number)
    )
    return pull


async def get_review(client: GitHubAPI, repository: str, number: int, review_id: int) -> dict[str, Any]:
    """One review of the pull request.

    https://docs.github.com/en/rest/pulls/reviews#get-a-review-for-a-pull-request
    """
    review: dict[str, Any] = await client.getitem(
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews/{review_id}",
        {**_pull_vars(repository, number), "review_id": review_id},
    )
    return review


async def list_reviews(client: GitHubAPI, repository: str, number: int) -> list[dict[str, Any]]:
    """Every review of the pull request, oldest first (all pages).

    https://docs.github.com/en/rest/pulls/reviews#list-reviews-for-a-pull-request
    """
    url = "/repos/{owner}/{repo}/pulls/{pull_number}/reviews{?per_page}"
    return [review async for review in client.getiter(url, {**_pull_vars(repository, number), "per_page": _PER_PAGE})]


async def review_comments(client: GitHubAPI, repository: str, number: int) -> list[dict[str, Any]]:
    """Every review comment of the pull request, oldest first (all pages); a reply names its
    thread's root comment in `in_reply_to_id`.

    https://docs.github.com/en/rest/pulls/comments#list-review-comments-on-a-pull-request
    """
    url = "/repos/{owner}/{repo}/pulls/{pull_number}/comments{?per_page}"
    return [comment async for comment in client.getiter(url, {**_pull_vars(repository, number), "per_page": _PER_PAGE})]


_THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $first: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: $first, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes {
          id isResolved isOutdated
          comments(first: $first) { pageInfo { hasNextPage endCursor } nodes { databaseId } }
        }
      }
    }
  }
}
"""

_THREAD_COMMENTS_QUERY = """
query($id: ID!, $first: Int!, $after: String) {
  node(id: $id) {
    ... on PullRequestReviewThread {
      comments(first: $first, after: $after) { pageInfo { hasNextPage endCursor } nodes { databaseId } }
    }
  }
}
"""


async def thread_states(client: GitHubAPI, repository: str, number: int) -> dict[int, ThreadState]:
    """The state of every review thread of the pull request, under the database ID of each of its
    comments (the root's and every reply's), so any comment finds its thread's state.

    Pages through the pull request's `reviewThreads`, and through a thread's `comments` when it
    has more than one page of them. An answer with errors (no such pull request, a token that may
    not read pull requests) raises gidgethub's QueryError, which carries GitHub's message.
    https://docs.github.com/en/graphql/reference/objects#pullrequestreviewthread
    """
    owner, name = split_repository(repository)
    endpoint = graphql_endpoint(client.base_url)
    states: dict[int, ThreadState] = {}
    after: str | None = None
    while True:
        data = await client.graphql(
            _THREADS_QUERY, endpoint=endpoint, owner=owner, name=name, number=number, first=_PER_PAGE, after=after
        )
        threads = _pull_request(data, repository, number)["reviewThreads"]
        for thread in threads["nodes"]:
            state = ThreadState(resolved=thread["isResolved"], outdated=thread["isOutdated"], node_id=thread["id"])
            for comment_id in await _thread_comment_ids(client, endpoint, thread):
                states[comment_id] = state
        if not threads["pageInfo"]["hasNextPage"]:
            return states
        after = threads["pageInfo"]["endCursor"]


def _pull_request(data: Mapping[str, Any], repository: str, number: int) -> Mapping[str, Any]:
    pull: Mapping[str, Any] | None = (data.get("repository") or {}).get("pullRequest")
    if pull is None:
        raise LookupError(f"GitHub's GraphQL API has no pull request #{number} in {repository} for this installation")
    return pull


async def _thread_comment_ids(client: GitHubAPI, endpoint: str, thread: Mapping[str, Any]) -> list[int]:
    """The database IDs of all the thread's comments: the first page came with the thread."""
    page = thread["comments"]
    ids = [comment["databaseId"] for comment in page["nodes"]]
    while page["pageInfo"]["hasNextPage"]:
        data = await client.graphql(
            _THREAD_COMMENTS_QUERY,
            endpoint=endpoint,
            id=thread["id"],
            first=_PER_PAGE,
            after=page["pageInfo"]["endCursor"],
        )
        page = data["node"]["comments"]
        ids += [comment["databaseId"] for comment in page["nodes"]]
    return ids


async def reply_to_comment(
    client: GitHubAPI, repository: str, number: int, comment_id: int, body: str
) -> dict[str, Any]:
    """Reply in the thread of review comment `comment_id` (give the thread's root comment).

    https://docs.github.com/en/rest/pulls/comments#create-a-reply-for-a-review-comment
    """
    reply: dict[str, Any] = await client.post(
        "/repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies",
        {**_pull_vars(repository, number), "comment_id": comment_id},
        data={"body": body},
    )
    return reply


async def create_review(
    client: GitHubAPI, repository: str, number: int, *, commit_id: str, body: str, comments: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Post a review of `commit_id` with event COMMENT (never an approval), with inline `comments`
    (each `{path, line, side, body}`, on a line the diff shows at that commit, or GitHub refuses the
    whole review with 422).

    https://docs.github.com/en/rest/pulls/reviews#create-a-review-for-a-pull-request
    """
    data = {"commit_id": commit_id, "body": body, "event": "COMMENT", "comments": [dict(c) for c in comments]}
    review: dict[str, Any] = await client.post(
        "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", _pull_vars(repository, number), data=data
    )
    return review


async def request_reviewers(client: GitHubAPI, repository: str, number: int, logins: Sequence[str]) -> dict[str, Any]:
    """Ask these users to review the pull request (again); the pull request, as GitHub answers.

    https://docs.github.com/en/rest/pulls/review-requests#request-reviewers-for-a-pull-request
    """
    pull: dict[str, Any] = await client.post(
        "/repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
        _pull_vars(repository, number),
        data={"reviewers": list(logins)},
    )
    return pull
