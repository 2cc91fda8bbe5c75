"""REST routes of pull request reviews: reviews, review comments (and replies), review requests.

What GitHub refuses is refused with GitHub's answer: a review GitHub cannot take is `422
Unprocessable Entity` with its reasons as strings ("Path could not be resolved", "Can not approve
your own pull request"); a single review comment is `422 Validation Failed` with
`PullRequestReviewComment` errors; a review request for the author or for someone who is not a
collaborator is a 422 with GitHub's message. One departure, said in the answer: a review without
`event` would be a PENDING review on GitHub, which the sandbox does not keep.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.core import CommentDraft, ReviewRefused, Sandbox
from bot.sandbox.errors import GitHubError, invalid_request, not_found, validation_failed
from bot.sandbox.rest import (
    RestRoute,
    docs_url,
    json_response,
    owned_or_404,
    paginate,
    read_json,
    repository,
    text_field,
)
from bot.sandbox.routes_issues import COMMENT_LIMIT
from bot.sandbox.routes_pulls import find_pull
from bot.sandbox.state import REVIEW_STATES, SIDES, Account, Issue, Repository, Review, ReviewComment

REVIEWS = "https://docs.github.com/rest/pulls/reviews"
COMMENTS = "https://docs.github.com/rest/pulls/comments"
REVIEW_REQUESTS = "https://docs.github.com/rest/pulls/review-requests"
EVENTS = ("APPROVE", "REQUEST_CHANGES", "COMMENT")
PENDING_NOT_KEPT = (
    "The sandbox does not keep pending reviews: give `event` (APPROVE, REQUEST_CHANGES or COMMENT). "
    "Without it GitHub would create a PENDING review that no one else sees until it is submitted."
)
AUTHOR_AS_REVIEWER = "Review cannot be requested from pull request author."
NOT_A_COLLABORATOR = (
    "Reviews may only be requested from collaborators. One or more of the users or teams you "
    "specified is not a collaborator of the {repository} repository."
)


def _unprocessable(request: Request, *reasons: str) -> GitHubError:
    """GitHub's answer to a review it cannot take: its reasons as plain strings."""
    return GitHubError(
        422,
        "Unprocessable Entity",
        documentation_url=docs_url(request),
        errors=cast(list[dict[str, Any]], list(reasons)),
    )


def _comment_refused(request: Request, refused: ReviewRefused) -> GitHubError:
    field = refused.field if refused.field in ("commit_id", "body") else f"pull_request_review_thread.{refused.field}"
    return validation_failed(
        docs_url(request),
        {"resource": "PullRequestReviewComment", "code": "custom", "field": field, "message": refused.message},
    )


def _text(
    request: Request, body: dict[str, Any], name: str, *, required: bool, where: str = "properties"
) -> str | None:
    return text_field(request, body, name, required=required, where=where, limit=COMMENT_LIMIT)


def _number(request: Request, body: dict[str, Any], name: str, where: str = "properties") -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise invalid_request(docs_url(request), f"For '{where}/{name}', {value!r} is not a positive integer.")
    return value


def _side(request: Request, body: dict[str, Any], name: str, where: str = "properties") -> str | None:
    value = body.get(name)
    if value is not None and value not in SIDES:
        raise invalid_request(docs_url(request), f"For '{where}/{name}', {value!r} is not one of LEFT, RIGHT.")
    return value


def _draft(request: Request, item: Any, *, commit_route: bool = False) -> CommentDraft:
    """A review comment from its JSON (an item of a review's `comments`, or a single comment's body)."""
    where = "properties" if commit_route else "items"
    if not isinstance(item, dict):
        raise invalid_request(docs_url(request), f"For 'items', {item!r} is not an object.")
    if item.get("subject_type", "line") != "line":
        raise invalid_request(
            docs_url(request),
            "The sandbox serves comments on lines only (subject_type 'line'); a comment on a whole file is not served.",
        )
    return CommentDraft(
        path=_text(request, item, "path", required=True, where=where) or "",
        body=_text(request, item, "body", required=True, where=where) or "",
        line=_number(request, item, "line", where),
        side=_side(request, item, "side", where) or "RIGHT",
        start_line=_number(request, item, "start_line", where),
        start_side=_side(request, item, "start_side", where),
        position=_number(request, item, "position", where),
    )


def _review(request: Request, repo: Repository, pull: Issue) -> Review:
    raw = str(request.path_params["review_id"])
    found = next((r for r in repo.reviews if str(r.id) == raw and r.pull_number == pull.number), None)
    if found is None:
        raise not_found(docs_url(request))
    return found


def _review_comment(request: Request, sandbox: Sandbox, repo: Repository) -> ReviewComment:
    return owned_or_404(request, sandbox.state.review_comments, "comment_id", repo)


def _created(sandbox: Sandbox, repo: Repository, comment: ReviewComment) -> Response:
    shape = sandbox.renderer.review_comment(repo, comment, rest=True)
    return json_response(shape, status=201, headers={"Location": shape["url"]})


# reviews


async def list_reviews(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    pull = find_pull(request, repo)
    page, headers = paginate(request, sandbox.state.reviews_of(repo, pull))
    return json_response([sandbox.renderer.review(repo, review, rest=True) for review in page], headers=headers)


async def create_review(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "write")
    pull = find_pull(request, repo)
    body = await read_json(request)
    text = _text(request, body, "body", required=False)
    commit_id = _text(request, body, "commit_id", required=False)
    event = body.get("event")
    if not event:
        raise _unprocessable(request, PENDING_NOT_KEPT)
    if event not in EVENTS:
        raise invalid_request(
            docs_url(request), f"For 'properties/event', {event!r} is not one of {', '.join(EVENTS)}."
        )
    raw_comments = body.get("comments") or []
    if not isinstance(raw_comments, list):
        raise invalid_request(docs_url(request), f"For 'properties/comments', {raw_comments!r} is not an array.")
    drafts = [_draft(request, item) for item in raw_comments]
    try:
        review, _ = await sandbox.submit_review(
            repo, pull, sandbox.bot, state=REVIEW_STATES[event.lower()], body=text, commit_id=commit_id, comments=drafts
        )
    except ReviewRefused as refused:
        raise _unprocessable(request, refused.message) from None
    return json_response(sandbox.renderer.review(repo, review, rest=True))


async def get_review(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    review = _review(request, repo, find_pull(request, repo))
    return json_response(sandbox.renderer.review(repo, review, rest=True))


async def list_review_comments_of_review(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    pull = find_pull(request, repo)
    review = _review(request, repo, pull)
    comments = [c for c in sandbox.state.review_comments_of(repo, pull) if c.review_id == review.id]
    page, headers = paginate(request, comments)
    return json_response([sandbox.renderer.review_comment(repo, c, rest=True) for c in page], headers=headers)


# review comments


async def list_review_comments(request: Request) -> Response:
    """Oldest first; `sort` (created, updated) with `direction` orders them otherwise."""
    sandbox, _, repo = repository(request, "pull_requests", "read")
    comments = sandbox.state.review_comments_of(repo, find_pull(request, repo))
    sort = request.query_params.get("sort")
    if sort is not None:
        if sort not in ("created", "updated"):
            raise validation_failed(
                docs_url(request), {"resource": "PullRequestReviewComment", "field": "sort", "code": "invalid"}
            )
        key = (lambda c: (c.updated_at, c.id)) if sort == "updated" else (lambda c: (c.created_at, c.id))
        comments.sort(key=key, reverse=request.query_params.get("direction", "desc") != "asc")
    page, headers = paginate(request, comments)
    return json_response([sandbox.renderer.review_comment(repo, c, rest=True) for c in page], headers=headers)


async def get_review_comment(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    return json_response(sandbox.renderer.review_comment(repo, _review_comment(request, sandbox, repo), rest=True))


async def create_review_comment(request: Request) -> Response:
    """A single comment on a line (commit_id, path, line, side), or with `in_reply_to` a reply,
    which takes only the body (GitHub ignores the rest)."""
    sandbox, _, repo = repository(request, "pull_requests", "write")
    pull = find_pull(request, repo)
    body = await read_json(request)
    text = _text(request, body, "body", required=True) or ""
    replying_to = body.get("in_reply_to")
    if replying_to is not None:
        if isinstance(replying_to, bool) or not isinstance(replying_to, int):
            raise invalid_request(
                docs_url(request), f"For 'properties/in_reply_to', {replying_to!r} is not an integer."
            )
        root = sandbox.state.review_comments.get(replying_to)
        if root is None or root.repository_id != repo.id or root.pull_number != pull.number:
            raise not_found(docs_url(request))
        return _created(sandbox, repo, sandbox.reply(repo, pull, sandbox.bot, root, text))
    commit_id = _text(request, body, "commit_id", required=True)
    draft = _draft(request, body, commit_route=True)
    try:
        comment = await sandbox.comment_on_diff(repo, pull, sandbox.bot, draft, commit_id)
    except ReviewRefused as refused:
        raise _comment_refused(request, refused) from None
    return _created(sandbox, repo, comment)


async def create_reply(request: Request) -> Response:
    """A reply in the comment's thread; replying to a reply joins the root's thread, as GitHub does."""
    sandbox, _, repo = repository(request, "pull_requests", "write")
    pull = find_pull(request, repo)
    to = _review_comment(request, sandbox, repo)
    if to.pull_number != pull.number:
        raise not_found(docs_url(request))
    text = _text(request, await read_json(request), "body", required=True) or ""
    return _created(sandbox, repo, sandbox.reply(repo, pull, sandbox.bot, to, text))


# review requests


async def list_requested_reviewers(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    pull = find_pull(request, repo)
    assert pull.pull is not None
    return json_response({"users": [sandbox.renderer.user(a) for a in pull.pull.requested_reviewers], "teams": []})


async def request_reviewers(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "write")
    pull = find_pull(request, repo)
    body = await read_json(request)
    logins = body.get("reviewers") or []
    if not isinstance(logins, list) or not all(isinstance(login, str) for login in logins):
        raise invalid_request(docs_url(request), f"For 'properties/reviewers', {logins!r} is not an array of logins.")
    if body.get("team_reviewers"):
        raise GitHubError(
            422,
            "The sandbox has no teams: request reviews from users (`reviewers`) only.",
            documentation_url=docs_url(request),
        )
    reviewers = [_reviewer(request, sandbox, repo, pull, login) for login in logins]
    sandbox.request_reviewers(repo, pull, reviewers, sandbox.bot)
    return json_response(sandbox.renderer.pull_request(repo, pull, full=False), status=201)


def _reviewer(request: Request, sandbox: Sandbox, repo: Repository, pull: Issue, login: str) -> Account:
    if login.lower() == pull.user.login.lower():
        raise GitHubError(422, AUTHOR_AS_REVIEWER, documentation_url=docs_url(request))
    if sandbox.state.role_of(repo, login) is None:
        raise GitHubError(
            422, NOT_A_COLLABORATOR.format(repository=repo.full_name), documentation_url=docs_url(request)
        )
    return sandbox.state.account(login)


_PULL = "/repos/{owner}/{repo}/pulls/{pull_number}"
ROUTES = (
    RestRoute("GET", f"{_PULL}/reviews", list_reviews, f"{REVIEWS}#list-reviews-for-a-pull-request"),
    RestRoute("POST", f"{_PULL}/reviews", create_review, f"{REVIEWS}#create-a-review-for-a-pull-request"),
    RestRoute("GET", f"{_PULL}/reviews/{{review_id}}", get_review, f"{REVIEWS}#get-a-review-for-a-pull-request"),
    RestRoute(
        "GET",
        f"{_PULL}/reviews/{{review_id}}/comments",
        list_review_comments_of_review,
        f"{REVIEWS}#list-comments-for-a-pull-request-review",
    ),
    RestRoute("GET", f"{_PULL}/comments", list_review_comments, f"{COMMENTS}#list-review-comments-on-a-pull-request"),
    RestRoute(
        "POST", f"{_PULL}/comments", create_review_comment, f"{COMMENTS}#create-a-review-comment-for-a-pull-request"
    ),
    RestRoute(
        "GET",
        "/repos/{owner}/{repo}/pulls/comments/{comment_id}",
        get_review_comment,
        f"{COMMENTS}#get-a-review-comment-for-a-pull-request",
    ),
    RestRoute(
        "POST",
        f"{_PULL}/comments/{{comment_id}}/replies",
        create_reply,
        f"{COMMENTS}#create-a-reply-for-a-review-comment",
    ),
    RestRoute(
        "GET",
        f"{_PULL}/requested_reviewers",
        list_requested_reviewers,
        f"{REVIEW_REQUESTS}#get-all-requested-reviewers-for-a-pull-request",
    ),
    RestRoute(
        "POST",
        f"{_PULL}/requested_reviewers",
        request_reviewers,
        f"{REVIEW_REQUESTS}#request-reviewers-for-a-pull-request",
    ),
)
