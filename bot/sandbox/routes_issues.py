"""REST routes of issues: issues, their comments, reactions and labels (pull requests are issues
too, and share these routes)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.core import Sandbox
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
from bot.sandbox.state import REACTION_CONTENTS, Comment, Issue, LabelExists, NotOnIssue, Repository

ISSUES = "https://docs.github.com/rest/issues"
COMMENT_LIMIT = 65536
_COLOR = re.compile(r"^#?[0-9a-fA-F]{6}$")


def _issue(request: Request, repo: Repository) -> Issue:
    raw = str(request.path_params["issue_number"])
    issue = repo.issues.get(int(raw)) if raw.isdigit() else None
    if issue is None:
        raise not_found(docs_url(request))
    return issue


def _comment(request: Request, sandbox: Sandbox, repo: Repository) -> Comment:
    return owned_or_404(request, sandbox.state.comments, "comment_id", repo)


def _text(request: Request, body: dict[str, Any], name: str, *, required: bool) -> str | None:
    return text_field(request, body, name, required=required)


def _check_body_length(request: Request, resource: str, body: str | None) -> None:
    if body is not None and len(body) > COMMENT_LIMIT:
        message = f"Body is too long (maximum is {COMMENT_LIMIT} characters)"
        raise validation_failed(
            docs_url(request), {"resource": resource, "code": "unprocessable", "field": "data", "message": message}
        )


def _label_names(request: Request, body: Any) -> list[str]:
    """The label names of an add/set-labels body: ["a"], {"labels": ["a"]} or {"labels": [{"name": "a"}]}."""
    raw = body.get("labels", []) if isinstance(body, dict) else body
    names = []
    for item in raw if isinstance(raw, list) else [None]:
        name = item.get("name") if isinstance(item, dict) else item
        if not isinstance(name, str) or not name.strip():
            raise invalid_request(docs_url(request), f"For 'items', {item!r} is not a label name.")
        names.append(name)
    return names


# issues


async def list_issues(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    state = request.query_params.get("state", "open")
    issues = [i for i in repo.issues.values() if state == "all" or i.state == state]
    wanted = [name.strip().lower() for name in request.query_params.get("labels", "").split(",") if name.strip()]
    if wanted:
        issues = [i for i in issues if all(any(label.name.lower() == w for label in i.labels) for w in wanted)]
    since = request.query_params.get("since")
    if since:
        issues = [i for i in issues if i.updated_at >= _parse_time(request, since)]
    key: Callable[[Issue], datetime | int] = {
        "updated": lambda i: i.updated_at,
        "comments": lambda i: len(i.comment_ids),
    }.get(request.query_params.get("sort", "created"), lambda i: i.created_at)
    issues.sort(key=lambda i: (key(i), i.number), reverse=request.query_params.get("direction", "desc") != "asc")
    page, headers = paginate(request, issues)
    return json_response([sandbox.renderer.issue(repo, i, rest=True) for i in page], headers=headers)


def _parse_time(request: Request, text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid_request(docs_url(request), f"For 'since', {text!r} is not a timestamp.") from None


async def create_issue(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    body = await read_json(request)
    title = _text(request, body, "title", required=True)
    text = _text(request, body, "body", required=False)
    _check_body_length(request, "Issue", text)
    labels = _label_names(request, {"labels": body["labels"]}) if body.get("labels") else []
    issue = sandbox.open_issue(repo, sandbox.bot, title or "", text, labels)
    return json_response(sandbox.renderer.issue(repo, issue, rest=True), status=201)


async def get_issue(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    return json_response(sandbox.renderer.issue(repo, _issue(request, repo), rest=True))


async def update_issue(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    issue = _issue(request, repo)
    body = await read_json(request)
    title = _text(request, body, "title", required=False)
    text = _text(request, body, "body", required=False)
    _check_body_length(request, "Issue", text)
    state = _text(request, body, "state", required=False)
    if state is not None and state not in ("open", "closed"):
        raise validation_failed(docs_url(request), {"resource": "Issue", "code": "invalid", "field": "state"})
    reason = _text(request, body, "state_reason", required=False)
    sandbox.update_issue(repo, issue, sandbox.bot, title=title, body=text, state=state, state_reason=reason)
    if "labels" in body:
        sandbox.set_labels(repo, issue, _label_names(request, {"labels": body["labels"]}), sandbox.bot)
    return json_response(sandbox.renderer.issue(repo, issue, rest=True))


# comments


async def list_comments(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    comments = sandbox.state.comments_of(_issue(request, repo))
    since = request.query_params.get("since")
    if since:
        comments = [c for c in comments if c.updated_at >= _parse_time(request, since)]
    page, headers = paginate(request, comments)
    return json_response([sandbox.renderer.comment(repo, c) for c in page], headers=headers)


async def list_repository_comments(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    comments = sorted((c for c in sandbox.state.comments.values() if c.repository_id == repo.id), key=lambda c: c.id)
    if request.query_params.get("direction") == "desc":
        comments.reverse()
    page, headers = paginate(request, comments)
    return json_response([sandbox.renderer.comment(repo, c) for c in page], headers=headers)


async def create_comment(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    issue = _issue(request, repo)
    body = await read_json(request)
    text = _text(request, body, "body", required=True) or ""
    _check_body_length(request, "IssueComment", text)
    comment = sandbox.comment(repo, issue, sandbox.bot, text, by_app=True)
    location = sandbox.renderer.comment(repo, comment)
    return json_response(location, status=201, headers={"Location": location["url"]})


async def get_comment(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    return json_response(sandbox.renderer.comment(repo, _comment(request, sandbox, repo)))


async def update_comment(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    comment = _comment(request, sandbox, repo)
    body = await read_json(request)
    text = _text(request, body, "body", required=True) or ""
    _check_body_length(request, "IssueComment", text)
    sandbox.edit_comment(repo, comment, text, sandbox.bot)
    return json_response(sandbox.renderer.comment(repo, comment))


# reactions


async def _react(request: Request, reactions_of: Any) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    reactions = reactions_of(sandbox, repo)
    body = await read_json(request)
    content = _text(request, body, "content", required=True)
    if content not in REACTION_CONTENTS:
        raise invalid_request(
            docs_url(request), f"For 'properties/content', {content!r} is not one of {', '.join(REACTION_CONTENTS)}."
        )
    reaction, created = sandbox.state.react(reactions, sandbox.bot, content)
    return json_response(sandbox.renderer.reaction(reaction), status=201 if created else 200)


async def react_to_comment(request: Request) -> Response:
    return await _react(request, lambda sandbox, repo: _comment(request, sandbox, repo).reactions)


async def react_to_issue(request: Request) -> Response:
    return await _react(request, lambda sandbox, repo: _issue(request, repo).reactions)


async def list_comment_reactions(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    reactions = _comment(request, sandbox, repo).reactions
    content = request.query_params.get("content")
    chosen = [r for r in reactions if content is None or r.content == content]
    page, headers = paginate(request, chosen)
    return json_response([sandbox.renderer.reaction(r) for r in page], headers=headers)


# labels


async def list_labels(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    page, headers = paginate(request, sorted(repo.labels.values(), key=lambda label: label.name.lower()))
    return json_response([sandbox.renderer.label(repo, label) for label in page], headers=headers)


async def create_label(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    body = await read_json(request)
    name = _text(request, body, "name", required=True) or ""
    color = _text(request, body, "color", required=False) or "ededed"
    if not _COLOR.match(color):
        raise validation_failed(docs_url(request), {"resource": "Label", "code": "invalid", "field": "color"})
    description = _text(request, body, "description", required=False)
    try:
        label = sandbox.state.create_label(repo, name, color, description)
    except LabelExists:
        raise validation_failed(
            docs_url(request), {"resource": "Label", "code": "already_exists", "field": "name"}
        ) from None
    return json_response(sandbox.renderer.label(repo, label), status=201)


async def get_label(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    label = repo.label(request.path_params["name"])
    if label is None:
        raise not_found(docs_url(request))
    return json_response(sandbox.renderer.label(repo, label))


async def update_label(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    label = repo.label(request.path_params["name"])
    if label is None:
        raise not_found(docs_url(request))
    body = await read_json(request)
    color = _text(request, body, "color", required=False)
    if color is not None and not _COLOR.match(color):
        raise validation_failed(docs_url(request), {"resource": "Label", "code": "invalid", "field": "color"})
    try:
        sandbox.state.update_label(
            repo,
            label,
            new_name=_text(request, body, "new_name", required=False),
            color=color,
            description=_text(request, body, "description", required=False),
        )
    except LabelExists:
        raise validation_failed(
            docs_url(request), {"resource": "Label", "code": "already_exists", "field": "name"}
        ) from None
    return json_response(sandbox.renderer.label(repo, label))


async def list_issue_labels(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "read")
    page, headers = paginate(request, _issue(request, repo).labels)
    return json_response([sandbox.renderer.label(repo, label) for label in page], headers=headers)


async def add_issue_labels(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    issue = _issue(request, repo)
    sandbox.add_labels(repo, issue, _label_names(request, await read_json(request, allow_list=True)), sandbox.bot)
    return json_response([sandbox.renderer.label(repo, label) for label in issue.labels])


async def set_issue_labels(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    issue = _issue(request, repo)
    sandbox.set_labels(repo, issue, _label_names(request, await read_json(request, allow_list=True)), sandbox.bot)
    return json_response([sandbox.renderer.label(repo, label) for label in issue.labels])


async def remove_issue_label(request: Request) -> Response:
    sandbox, _, repo = repository(request, "issues", "write")
    issue = _issue(request, repo)
    try:
        sandbox.remove_label(repo, issue, request.path_params["name"], sandbox.bot)
    except NotOnIssue:
        raise GitHubError(404, "Label does not exist", documentation_url=docs_url(request)) from None
    return json_response([sandbox.renderer.label(repo, label) for label in issue.labels])


_REPO = "/repos/{owner}/{repo}"
ROUTES = (
    RestRoute("GET", f"{_REPO}/issues", list_issues, f"{ISSUES}/issues#list-repository-issues"),
    RestRoute("POST", f"{_REPO}/issues", create_issue, f"{ISSUES}/issues#create-an-issue"),
    RestRoute(
        "GET",
        f"{_REPO}/issues/comments",
        list_repository_comments,
        f"{ISSUES}/comments#list-issue-comments-for-a-repository",
    ),
    RestRoute("GET", f"{_REPO}/issues/comments/{{comment_id}}", get_comment, f"{ISSUES}/comments#get-an-issue-comment"),
    RestRoute(
        "PATCH", f"{_REPO}/issues/comments/{{comment_id}}", update_comment, f"{ISSUES}/comments#update-an-issue-comment"
    ),
    RestRoute(
        "GET",
        f"{_REPO}/issues/comments/{{comment_id}}/reactions",
        list_comment_reactions,
        "https://docs.github.com/rest/reactions/reactions#list-reactions-for-an-issue-comment",
    ),
    RestRoute(
        "POST",
        f"{_REPO}/issues/comments/{{comment_id}}/reactions",
        react_to_comment,
        "https://docs.github.com/rest/reactions/reactions#create-reaction-for-an-issue-comment",
    ),
    RestRoute("GET", f"{_REPO}/issues/{{issue_number}}", get_issue, f"{ISSUES}/issues#get-an-issue"),
    RestRoute("PATCH", f"{_REPO}/issues/{{issue_number}}", update_issue, f"{ISSUES}/issues#update-an-issue"),
    RestRoute(
        "GET", f"{_REPO}/issues/{{issue_number}}/comments", list_comments, f"{ISSUES}/comments#list-issue-comments"
    ),
    RestRoute(
        "POST",
        f"{_REPO}/issues/{{issue_number}}/comments",
        create_comment,
        f"{ISSUES}/comments#create-an-issue-comment",
    ),
    RestRoute(
        "POST",
        f"{_REPO}/issues/{{issue_number}}/reactions",
        react_to_issue,
        "https://docs.github.com/rest/reactions/reactions#create-reaction-for-an-issue",
    ),
    RestRoute(
        "GET", f"{_REPO}/issues/{{issue_number}}/labels", list_issue_labels, f"{ISSUES}/labels#list-labels-for-an-issue"
    ),
    RestRoute(
        "POST", f"{_REPO}/issues/{{issue_number}}/labels", add_issue_labels, f"{ISSUES}/labels#add-labels-to-an-issue"
    ),
    RestRoute(
        "PUT", f"{_REPO}/issues/{{issue_number}}/labels", set_issue_labels, f"{ISSUES}/labels#set-labels-for-an-issue"
    ),
    RestRoute(
        "DELETE",
        f"{_REPO}/issues/{{issue_number}}/labels/{{name:path}}",
        remove_issue_label,
        f"{ISSUES}/labels#remove-a-label-from-an-issue",
    ),
    RestRoute("GET", f"{_REPO}/labels", list_labels, f"{ISSUES}/labels#list-labels-for-a-repository"),
    RestRoute("POST", f"{_REPO}/labels", create_label, f"{ISSUES}/labels#create-a-label"),
    RestRoute("GET", f"{_REPO}/labels/{{name:path}}", get_label, f"{ISSUES}/labels#get-a-label"),
    RestRoute("PATCH", f"{_REPO}/labels/{{name:path}}", update_label, f"{ISSUES}/labels#update-a-label"),
)
