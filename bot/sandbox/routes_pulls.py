"""REST routes of pull requests: open one (from a pushed branch), list, get, update."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox import events
from bot.sandbox.core import Sandbox
from bot.sandbox.errors import invalid_request, not_found, validation_failed
from bot.sandbox.rest import RestRoute, docs_url, json_response, paginate, read_json, repository
from bot.sandbox.routes_issues import COMMENT_LIMIT
from bot.sandbox.state import DuplicatePullRequest, Issue, Repository

PULLS = "https://docs.github.com/rest/pulls/pulls"


def find_pull(request: Request, repo: Repository) -> Issue:
    """The pull request named in the path (404 when there is none of that number)."""
    raw = str(request.path_params["pull_number"])
    issue = repo.issues.get(int(raw)) if raw.isdigit() else None
    if issue is None or issue.pull is None:
        raise not_found(docs_url(request))
    return issue


def _error(field: str, code: str) -> dict[str, Any]:
    return {"resource": "PullRequest", "field": field, "code": code}


def _custom(message: str) -> dict[str, Any]:
    return {"resource": "PullRequest", "code": "custom", "message": message}


def _head_branch(repo: Repository, head: str) -> str | None:
    """The branch of `head` ('branch' or 'owner:branch'); None for another owner's (forks are not served)."""
    owner, sep, branch = head.rpartition(":")
    if sep and owner.lower() != repo.owner.login.lower():
        return None
    return branch


def _strings(request: Request, body: dict[str, Any], *names: str) -> None:
    for name in names:
        if name in body and body[name] is not None and not isinstance(body[name], str):
            raise invalid_request(docs_url(request), f"For 'properties/{name}', {body[name]!r} is not a string.")


async def _mergeable(sandbox: Sandbox, repo: Repository, pull: Issue) -> bool | None:
    """As GitHub answers it: computed in the background after the base branch or the head moved, so
    the first answer after a move is null ("not computed yet") and a later one says (docs.github.com/
    en/rest/guides/using-the-rest-api-to-interact-with-your-git-database#checking-mergeability-of-pull-requests)."""
    assert pull.pull is not None
    if pull.state != "open":
        return None
    owner, name = repo.owner.login, repo.name
    base_tip = await sandbox.in_thread(sandbox.git.resolve, owner, name, f"refs/heads/{pull.pull.base_ref}")
    if base_tip is None:
        return None
    head = pull.pull.head_sha
    known = pull.pull.mergeability
    if known is not None and known[:2] == (base_tip, head):
        return known[2]
    clean = await sandbox.in_thread(sandbox.git.mergeable, owner, name, base_tip, head)
    with sandbox.state.locked():
        pull.pull.mergeability = (base_tip, head, clean)
    return None


async def create_pull(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "write")
    body = await read_json(request)
    _strings(request, body, "title", "head", "base", "body")
    for name in ("title", "head", "base"):
        if not body.get(name):
            raise validation_failed(docs_url(request), _error(name, "missing_field"))
    text = body.get("body")
    if text is not None and len(text) > COMMENT_LIMIT:
        raise validation_failed(docs_url(request), _custom(f"body is too long (maximum is {COMMENT_LIMIT} characters)"))
    owner, name = repo.owner.login, repo.name
    base, head_branch = body["base"], _head_branch(repo, body["head"])
    base_sha = await sandbox.in_thread(sandbox.git.resolve, owner, name, f"refs/heads/{base}")
    if base_sha is None:
        raise validation_failed(docs_url(request), _error("base", "invalid"))
    head_sha = (
        None
        if head_branch is None
        else await sandbox.in_thread(sandbox.git.resolve, owner, name, f"refs/heads/{head_branch}")
    )
    if head_branch is None or head_sha is None:
        raise validation_failed(docs_url(request), _error("head", "invalid"))
    if await sandbox.in_thread(sandbox.git.commits_between, owner, name, base_sha, head_sha) == 0:
        raise validation_failed(docs_url(request), _custom(f"No commits between {base} and {head_branch}"))
    try:
        pull = sandbox.state.open_pull(
            repo,
            sandbox.bot,
            title=body["title"],
            body=text,
            head_ref=head_branch,
            head_sha=head_sha,
            base_ref=base,
            base_sha=base_sha,
            draft=bool(body.get("draft", False)),
            maintainer_can_modify=bool(body.get("maintainer_can_modify", False)),
        )
    except DuplicatePullRequest:
        raise validation_failed(
            docs_url(request), _custom(f"A pull request already exists for {repo.owner.login}:{head_branch}.")
        ) from None
    await sandbox.refresh_pull(repo, pull)
    sandbox.pull_opened(repo, pull, sandbox.bot)
    shape = sandbox.renderer.pull_request(repo, pull)
    return json_response(shape, status=201, headers={"Location": shape["url"]})


async def list_pulls(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    state = request.query_params.get("state", "open")
    if state not in ("open", "closed", "all"):
        raise validation_failed(docs_url(request), _error("state", "invalid"))
    head = request.query_params.get("head")
    head_branch = _head_branch(repo, head) if head else None
    if head and head_branch is None:
        return json_response([])
    pulls = sandbox.state.pulls(repo, state=state, head_ref=head_branch, base_ref=request.query_params.get("base"))
    sort = request.query_params.get("sort", "created")
    key: Callable[[Issue], datetime] = (lambda p: p.updated_at) if sort == "updated" else (lambda p: p.created_at)
    pulls.sort(key=lambda p: (key(p), p.number), reverse=request.query_params.get("direction", "desc") != "asc")
    page, headers = paginate(request, pulls)
    return json_response([sandbox.renderer.pull_request(repo, p) for p in page], headers=headers)


async def get_pull(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "read")
    pull = find_pull(request, repo)
    return json_response(sandbox.renderer.pull_request(repo, pull, mergeable=await _mergeable(sandbox, repo, pull)))


async def update_pull(request: Request) -> Response:
    sandbox, _, repo = repository(request, "pull_requests", "write")
    pull = find_pull(request, repo)
    assert pull.pull is not None
    body = await read_json(request)
    _strings(request, body, "title", "body", "state", "base")
    state = body.get("state")
    if state is not None and state not in ("open", "closed"):
        raise validation_failed(docs_url(request), _error("state", "invalid"))
    if state == "open" and pull.state == "closed" and sandbox.state.pulls(repo, head_ref=pull.pull.head_ref):
        raise validation_failed(
            docs_url(request), _custom(f"A pull request already exists for {repo.owner.login}:{pull.pull.head_ref}.")
        )
    if body.get("base"):
        base_sha = await sandbox.in_thread(
            sandbox.git.resolve, repo.owner.login, repo.name, f"refs/heads/{body['base']}"
        )
        if base_sha is None:
            raise validation_failed(docs_url(request), _error("base", "invalid"))
        pull.pull.base_ref = body["base"]
        await sandbox.refresh_pull(repo, pull)
    changes = sandbox.state.update_issue(pull, sandbox.bot, title=body.get("title"), body=body.get("body"), state=state)
    if "state" in changes:
        action = "closed" if pull.state == "closed" else "reopened"
        sandbox.emit(events.pull_request_event(sandbox.renderer, action, repo, pull, sandbox.bot))
    return json_response(sandbox.renderer.pull_request(repo, pull, mergeable=await _mergeable(sandbox, repo, pull)))


_REPO = "/repos/{owner}/{repo}"
ROUTES = (
    RestRoute("GET", f"{_REPO}/pulls", list_pulls, f"{PULLS}#list-pull-requests"),
    RestRoute("POST", f"{_REPO}/pulls", create_pull, f"{PULLS}#create-a-pull-request"),
    RestRoute("GET", f"{_REPO}/pulls/{{pull_number}}", get_pull, f"{PULLS}#get-a-pull-request"),
    RestRoute("PATCH", f"{_REPO}/pulls/{{pull_number}}", update_pull, f"{PULLS}#update-a-pull-request"),
)
