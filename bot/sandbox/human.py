"""The human side of the sandbox: a small JSON API under /_sandbox/ (a path GitHub does not use)
for doing what people do on github.com, and read-outs of what GitHub would show.

Every action names who does it (`as`) and may give them a role first (`role`: the collaborator
is created or changed, as a fact of the set-up that sends no event; to change a role as an admin
does, with GitHub's `member` event, use the collaborators routes). A person may only do what their role lets them on
GitHub: see a private repository (any role), label (triage and up), re-run checks, merge pull
requests and resolve review threads (write and up, or the pull request's author). Reviews and
their inline comments are checked as GitHub checks them (a comment on a line the diff does not
show is refused). Giving, changing or taking away a collaborator's role (`POST` and `DELETE
collaborators`) sends `member` added, edited or removed, as GitHub does to an
App subscribed to it; `POST /_sandbox/users` signs a person up (`{"login"}`), and `POST
/_sandbox/users/{login}/rename` renames one, whose old login is then free for someone else to
register. `GET /_sandbox/app` shows the App's OAuth client (`client_id`, `client_secret`) and
`POST /_sandbox/repos/{owner}/{repo}/pushes` is a person pushing a commit
(`{"as", "branch", "files": {path: text}, "message"}`). `POST /_sandbox/repos/{owner}/{repo}/ci-reports` is the repository's own CI (another App,
`github-actions`) reporting on a commit: `{"sha", "runs": [{"name", "conclusion", "output": {"title",
"summary", "text", "annotations": [{"path", "start_line", "end_line", "annotation_level", "message"}]}}]}`
makes its check suite there with those runs, finished, and sends what GitHub sends
(Sandbox.report_ci). `PATCH /_sandbox/app` sets its `callback_urls` for the web flow (bot.sandbox.routes_oauth),
`expiring_user_tokens` (true, GitHub's default) and, for tests, `user_token_seconds` (1 to 28800:
user access tokens issued from then on expire that soon; bot.sandbox.oauth). For tests, `/_sandbox/faults` sets faults: requests made to fail on purpose
(bot.sandbox.faults).
Served on loopback without authentication: it is the person at the keyboard.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from bot.sandbox.core import CiRun, CommentDraft, ReviewRefused, Sandbox
from bot.sandbox.errors import GitHubError
from bot.sandbox.faults import Fault, FaultError
from bot.sandbox.gitstore import GitError, MergeConflict, valid_name
from bot.sandbox.oauth import USER_TOKEN_SECONDS
from bot.sandbox.rest import owned_by
from bot.sandbox.routes_checks import RUNS, validated_fields
from bot.sandbox.shapes import timestamp
from bot.sandbox.state import (
    REVIEW_STATES,
    ROLES,
    SIDES,
    Account,
    CheckRun,
    Issue,
    NotOnIssue,
    Repository,
    ReviewComment,
)

PREFIX = "/_sandbox"
_RANK = {"read": 1, "triage": 2, "write": 3, "maintain": 4, "admin": 5}
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")


class HumanError(Exception):
    """A human API request that cannot be done; the message says why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def human_error_response(error: HumanError) -> Response:
    return JSONResponse({"message": error.message}, status_code=error.status)


async def _body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise HumanError(400, "the request body must be a JSON object") from None
    if not isinstance(data, dict):
        raise HumanError(400, "the request body must be a JSON object")
    return data


def _text(body: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise HumanError(422, f"'{name}' must be a non-empty string")
    return value


def _sandbox(request: Request) -> Sandbox:
    sandbox: Sandbox = request.app.state.sandbox
    return sandbox


def _repository(request: Request) -> Repository:
    owner, name = request.path_params["owner"], request.path_params["repo"]
    found = _sandbox(request).state.repository(owner, name)
    if found is None:
        raise HumanError(
            404,
            f"no repository {owner}/{name} in the sandbox; create it with "
            f"`lanebot sandbox repo create {owner}/{name} --from DIR`",
        )
    return found


def _issue(request: Request, repository: Repository) -> Issue:
    raw = str(request.path_params["number"])
    issue = repository.issues.get(int(raw)) if raw.isdigit() else None
    if issue is None:
        raise HumanError(404, f"{repository.full_name} has no issue or pull request #{raw}")
    return issue


def _pull(request: Request, repository: Repository) -> Issue:
    pull = _issue(request, repository)
    if pull.pull is None:
        raise HumanError(422, f"#{pull.number} is an issue, not a pull request")
    return pull


def _check_run(request: Request, repository: Repository) -> CheckRun:
    run = owned_by(_sandbox(request).state.check_runs, request.path_params["check_run_id"], repository)
    if run is None:
        raise HumanError(404, f"{repository.full_name} has no check run {request.path_params['check_run_id']}")
    return run


def _review_comment(request: Request, repository: Repository) -> ReviewComment:
    found = owned_by(_sandbox(request).state.review_comments, request.path_params["comment_id"], repository)
    if found is None:
        raise HumanError(404, f"{repository.full_name} has no review comment {request.path_params['comment_id']}")
    return found


def _person(request: Request, repository: Repository, body: dict[str, Any], needs: str) -> Account:
    """The acting person (`as`), given `role` first if asked, once their role allows `needs`."""
    state = _sandbox(request).state
    login = _text(body, "as") or ""
    if login.lower().endswith("[bot]"):
        raise HumanError(422, f"{login} is a bot; act as a person")
    role = body.get("role")
    if role is not None:
        if role not in ROLES:
            raise HumanError(422, f"role must be one of {', '.join(ROLES)}, not {role!r}")
        state.set_collaborator(repository, login, role)  # a set-up fact: no member event
    actual = state.role_of(repository, login)
    effective = actual or ("read" if not repository.private else None)
    if effective is None or _RANK[effective] < _RANK[needs]:
        has = f"has role {actual}" if actual else "is not a collaborator"
        raise HumanError(
            403,
            f"{login} {has} on {repository.full_name} and so cannot do this on GitHub "
            f"(it needs {needs} or higher); give them a role that allows it",
        )
    return state.account(login)


# repositories


async def create_repository(request: Request) -> Response:
    sandbox = _sandbox(request)
    body = await _body(request)
    full_name = _text(body, "full_name") or ""
    owner, slash, name = full_name.partition("/")
    if not slash or not valid_name(owner) or not valid_name(name):
        raise HumanError(422, f"full_name must be OWNER/NAME of letters, digits, '.', '-' or '_', not {full_name!r}")
    folder = Path(_text(body, "path") or "").expanduser()
    if not folder.is_dir():
        raise HumanError(422, f"{folder} is not a folder; give the folder whose files the repository should hold")
    if sandbox.state.repository(owner, name) is not None:
        raise HumanError(409, f"{full_name} already exists in the sandbox")
    try:
        repository = await sandbox.create_repository(
            full_name,
            folder.resolve(),
            private=bool(body.get("private", True)),
            owner_type="Organization" if body.get("organization") else "User",
            default_branch=_text(body, "default_branch", required=False) or "main",
            description=_text(body, "description", required=False),
        )
    except (ValueError, GitError) as error:
        raise HumanError(422, str(error)) from None
    return JSONResponse(_repository_summary(sandbox, repository), status_code=201)


async def add_collaborator(request: Request) -> Response:
    repository = _repository(request)
    body = await _body(request)
    role = body.get("role")
    if role not in ROLES:
        raise HumanError(422, f"role must be one of {', '.join(ROLES)}, not {role!r}")
    _sandbox(request).set_collaborator(repository, _text(body, "login") or "", role, _admin(request, repository, body))
    return JSONResponse({"collaborators": _collaborators(repository)}, status_code=201)


async def remove_collaborator(request: Request) -> Response:
    """An admin takes a collaborator's access away (`as`, optional, names the admin)."""
    repository = _repository(request)
    body = await _body(request) if await request.body() else {}
    login = request.path_params["login"]
    if _sandbox(request).remove_collaborator(repository, login, _admin(request, repository, body)) is None:
        raise HumanError(404, f"{login} is not a collaborator of {repository.full_name}")
    return JSONResponse({"collaborators": _collaborators(repository)})


def _admin(request: Request, repository: Repository, body: dict[str, Any]) -> Account | None:
    """The admin named by `as`, who must have admin on the repository; None: the sandbox picks one."""
    if body.get("as") is None:
        return None
    return _person(request, repository, {"as": body["as"]}, "admin")


async def create_user(request: Request) -> Response:
    """A person signs up (`{"login": NAME}`); they have no role anywhere until given one."""
    body = await _body(request)
    login = _text(body, "login") or ""
    if not _LOGIN.match(login):
        raise HumanError(422, f"'login' must be a GitHub login (letters, digits and '-'), not {login!r}")
    state = _sandbox(request).state
    existing = state.find_account(login)
    if existing is not None:
        raise HumanError(409, f"the login {existing.login} is already taken (a {existing.type})")
    account = state.account(login)
    return JSONResponse({"login": account.login, "id": account.id}, status_code=201)


async def rename_user(request: Request) -> Response:
    """A person renames their account (`{"login": NEW}`); the old login is then free to register."""
    body = await _body(request)
    new_login = _text(body, "login") or ""
    if not _LOGIN.match(new_login):
        raise HumanError(422, f"'login' must be a GitHub login (letters, digits and '-'), not {new_login!r}")
    try:
        account = _sandbox(request).state.rename_account(request.path_params["login"], new_login)
    except ValueError as error:
        raise HumanError(422, str(error)) from None
    return JSONResponse({"login": account.login, "id": account.id})


# issues, comments, labels


async def open_issue(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    body = await _body(request)
    person = _person(request, repository, body, "read")
    labels = body.get("labels") or []
    if not isinstance(labels, list) or not all(isinstance(name, str) for name in labels):
        raise HumanError(422, "'labels' must be a list of label names")
    if labels:
        _person(request, repository, {"as": person.login}, "triage")
    issue = sandbox.open_issue(
        repository, person, _text(body, "title") or "", _text(body, "body", required=False), labels
    )
    return JSONResponse(_issue_summary(sandbox, issue), status_code=201)


async def comment(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    issue = _issue(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "read")
    created = sandbox.comment(repository, issue, person, _text(body, "body") or "", by_app=False)
    return JSONResponse(_comment_summary(sandbox, created.id), status_code=201)


async def edit_comment(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    raw = str(request.path_params["comment_id"])
    found = sandbox.state.comments.get(int(raw)) if raw.isdigit() else None
    if found is None or found.repository_id != repository.id:
        raise HumanError(404, f"{repository.full_name} has no comment {raw}")
    body = await _body(request)
    person = _person(request, repository, body, "read")
    role = sandbox.state.role_of(repository, person.login)
    if person.id != found.user.id and _RANK.get(role or "", 0) < _RANK["write"]:
        raise HumanError(403, f"{person.login} may not edit {found.user.login}'s comment (that needs write or higher)")
    sandbox.edit_comment(repository, found, _text(body, "body") or "", person)
    return JSONResponse(_comment_summary(sandbox, found.id))


async def add_label(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    issue = _issue(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "triage")
    sandbox.add_labels(repository, issue, [_text(body, "name") or ""], person)
    return JSONResponse(_issue_summary(sandbox, issue))


async def remove_label(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    issue = _issue(request, repository)
    person = _person(request, repository, dict(request.query_params), "triage")
    try:
        sandbox.remove_label(repository, issue, request.path_params["name"], person)
    except NotOnIssue:
        raise HumanError(404, f"#{issue.number} has no label {request.path_params['name']!r}") from None
    return JSONResponse(_issue_summary(sandbox, issue))


# pull requests and checks


async def review(request: Request) -> Response:
    """Submit a review, with optional inline comments `[{path, line, body, side?, start_line?}]`."""
    sandbox, repository = _sandbox(request), _repository(request)
    pull = _pull(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "read")
    event = (_text(body, "event") or "").lower()
    if event not in REVIEW_STATES:
        raise HumanError(422, "'event' must be APPROVE, REQUEST_CHANGES or COMMENT")
    text = _text(body, "body", required=False)
    drafts = _drafts(body.get("comments"))
    try:
        await sandbox.submit_review(repository, pull, person, state=REVIEW_STATES[event], body=text, comments=drafts)
    except ReviewRefused as refused:
        raise HumanError(422, _refusal(refused)) from None
    return JSONResponse(_issue_summary(sandbox, pull), status_code=201)


def _drafts(raw: Any) -> list[CommentDraft]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise HumanError(422, "'comments' must be a list of {path, line, body, side?} objects")
    return [_draft(item) for item in raw]


def _draft(item: Any) -> CommentDraft:
    shape = "each inline comment is {path, line, body, side?, start_line?, start_side?}"
    if not isinstance(item, dict):
        raise HumanError(422, f"{shape}, not {item!r}")
    path, line, text = item.get("path"), item.get("line"), item.get("body")
    side, start_line, start_side = item.get("side", "RIGHT"), item.get("start_line"), item.get("start_side")
    numbers_ok = all(
        n is None or (isinstance(n, int) and not isinstance(n, bool) and n > 0) for n in (line, start_line)
    )
    if not (
        isinstance(path, str)
        and path
        and isinstance(text, str)
        and text.strip()
        and line is not None
        and numbers_ok
        and side in SIDES
        and start_side in (None, *SIDES)
    ):
        raise HumanError(422, f"{shape} (line a positive number, side LEFT or RIGHT), not {item!r}")
    return CommentDraft(path=path, body=text, line=line, side=side, start_line=start_line, start_side=start_side)


def _refusal(refused: ReviewRefused) -> str:
    hint = ""
    if refused.field in ("path", "line", "start_line", "position"):
        hint = (
            " - an inline comment must be on a line the pull request's diff shows: an added or unchanged "
            "line of a changed file on RIGHT, a removed or unchanged one on LEFT"
        )
    return f"GitHub would refuse this: {refused.message}{hint}"


async def reply_to_review_comment(request: Request) -> Response:
    """Reply in a review comment's thread (a reply to a reply joins the root's thread)."""
    sandbox, repository = _sandbox(request), _repository(request)
    to = _review_comment(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "read")
    pull = repository.issues[to.pull_number]
    reply = sandbox.reply(repository, pull, person, to, _text(body, "body") or "")
    return JSONResponse(_review_comment_summary(reply), status_code=201)


async def resolve_thread(request: Request) -> Response:
    """Resolve (or, with `resolved: false`, unresolve) the thread of a review comment, as its pull
    request's author or someone with write access does on GitHub."""
    sandbox, repository = _sandbox(request), _repository(request)
    comment = _review_comment(request, repository)
    body = await _body(request)
    resolved = body.get("resolved", True)
    if not isinstance(resolved, bool):
        raise HumanError(422, "'resolved' must be true or false")
    person = _person(request, repository, body, "read")
    pull = repository.issues[comment.pull_number]
    role = sandbox.state.role_of(repository, person.login)
    if person.id != pull.user.id and _RANK.get(role or "", 0) < _RANK["write"]:
        raise HumanError(
            403,
            f"{person.login} may not resolve review threads on {repository.full_name}: GitHub "
            "lets the pull request's author or someone with write access do that",
        )
    thread = sandbox.state.review_threads[comment.root_id]
    sandbox.resolve_thread(thread, person, resolved=resolved)
    return JSONResponse(_thread_summary(sandbox, thread.root_id))


async def edit_issue(request: Request) -> Response:
    """Edit an issue's title or body ({as, title?, body?}), as its author or someone with triage does."""
    sandbox, repository = _sandbox(request), _repository(request)
    issue = _issue(request, repository)
    body = await _body(request)
    author = (_text(body, "as") or "").lower() == issue.user.login.lower()
    person = _person(request, repository, body, "read" if author else "triage")
    title, text = _text(body, "title", required=False), _text(body, "body", required=False)
    sandbox.update_issue(repository, issue, person, title=title, body=text)
    return JSONResponse(_issue_summary(sandbox, issue))


async def close(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    issue = _issue(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "triage")
    sandbox.update_issue(repository, issue, person, state="closed")
    return JSONResponse(_issue_summary(sandbox, issue))


async def merge(request: Request) -> Response:
    """The "Merge pull request" button (a merge commit), as a person with write access presses it."""
    sandbox, repository = _sandbox(request), _repository(request)
    pull = _pull(request, repository)
    assert pull.pull is not None  # _pull refuses an issue
    person = _person(request, repository, await _body(request), "write")
    if pull.state != "open":
        done = "merged" if pull.pull.merged_at else "closed"
        raise HumanError(405, f"#{pull.number} is already {done}; only an open pull request can be merged")
    if pull.pull.draft:
        raise HumanError(
            405,
            f"#{pull.number} is a draft, and GitHub does not merge drafts; open it with "
            "draft: false (the sandbox has no 'ready for review' button)",
        )
    try:
        await sandbox.merge_pull(repository, pull, person)
    except MergeConflict:
        raise HumanError(
            405,
            f"#{pull.number} is not mergeable: {pull.pull.head_ref} conflicts with "
            f"{pull.pull.base_ref}; resolve the conflict on the branch first",
        ) from None
    return JSONResponse(_issue_summary(sandbox, pull))


async def rerequest(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    run = _check_run(request, repository)
    person = _person(request, repository, await _body(request), "write")
    sandbox.rerequest(repository, run, person)
    return JSONResponse(_check_run_summary(run), status_code=202)


async def requested_action(request: Request) -> Response:
    sandbox, repository = _sandbox(request), _repository(request)
    run = _check_run(request, repository)
    body = await _body(request)
    person = _person(request, repository, body, "write")
    identifier = _text(body, "identifier") or ""
    if identifier not in [action["identifier"] for action in run.actions]:
        offered = ", ".join(action["identifier"] for action in run.actions) or "none"
        raise HumanError(422, f"check run {run.id} offers no action {identifier!r} (it offers: {offered})")
    sandbox.request_action(repository, run, person, identifier)
    return JSONResponse(_check_run_summary(run), status_code=202)


async def push(request: Request) -> Response:
    """A person (write access and up) pushes one commit of `files` onto `branch`: pull requests from
    it move to the new head, with `pull_request.synchronize` sent by the person."""
    sandbox, repository = _sandbox(request), _repository(request)
    body = await _body(request)
    person = _person(request, repository, body, "write")
    branch = _text(body, "branch") or ""
    files = body.get("files")
    if not isinstance(files, dict) or not files or not all(isinstance(v, str) for v in files.values()):
        raise HumanError(422, "'files' must map paths to their new text")
    bad = [path for path in files if not _relative_path(str(path))]
    if bad:
        raise HumanError(422, f"{bad[0]!r} is not a path inside the repository")
    owner, name = repository.owner.login, repository.name
    before = await sandbox.in_thread(sandbox.git.refs, owner, name)
    try:
        sha = await sandbox.in_thread(
            sandbox.git.commit_files,
            owner,
            name,
            branch,
            files,
            message=_text(body, "message", required=False) or "A change",
            author=person.login,
            email=f"{person.id}+{person.login}@users.noreply.github.com",
        )
    except GitError as error:
        raise HumanError(422, f"{person.login} cannot push to {branch!r}: {error}") from None
    after = await sandbox.in_thread(sandbox.git.refs, owner, name)
    await sandbox.pushed(repository, before, after, person)
    return JSONResponse({"branch": branch, "sha": sha}, status_code=201)


def _relative_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and all(part not in ("", ".", "..", ".git") for part in parts)


async def ci_report(request: Request) -> Response:
    """The repository's CI finished on a commit: its suite with these runs, and GitHub's events."""
    sandbox, repository = _sandbox(request), _repository(request)
    body = await _body(request)
    ref = _text(body, "sha") or ""
    sha = await sandbox.in_thread(sandbox.git.resolve, repository.owner.login, repository.name, ref)
    if sha is None:
        raise HumanError(422, f"{repository.full_name} has no commit {ref!r}")
    raw = body.get("runs")
    if not isinstance(raw, list) or not raw or not all(isinstance(run, dict) for run in raw):
        raise HumanError(422, "'runs' must be a non-empty list of check runs: {name, conclusion, output}")
    runs = [_ci_run(run, sha) for run in raw]
    suite = await sandbox.report_ci(repository, sha, runs)
    shown = [_check_run_summary(run) for run in sandbox.state.suite_runs(suite)]
    return JSONResponse({"check_suite_id": suite.id, "app": sandbox.ci_app.slug, "check_runs": shown}, status_code=201)


def _ci_run(raw: dict[str, Any], sha: str) -> CiRun:
    if raw.get("conclusion") is None:
        raise HumanError(422, f"the check run {raw.get('name')!r} needs a conclusion: CI reports finished runs")
    try:
        fields = validated_fields(f"{RUNS}#create-a-check-run", {**raw, "head_sha": sha}, creating=True)
    except GitHubError as error:
        raise HumanError(422, f"the check run {raw.get('name')!r} is not one GitHub takes: {error}") from None
    fields.pop("head_sha")
    return CiRun(name=fields.pop("name"), fields=fields)


# the App, deliveries, read-outs


async def app_info(request: Request) -> Response:
    sandbox = _sandbox(request)
    app = sandbox.app
    return JSONResponse(
        {
            "id": app.id,
            "slug": app.slug,
            "client_id": app.client_id,
            "client_secret": app.client_secret,
            "callback_urls": list(app.callback_urls),
            "expiring_user_tokens": sandbox.oauth.expiring_user_tokens,
            "user_token_seconds": sandbox.oauth.user_token_seconds,
            "webhook_url": app.webhook_url,
            "events": app.events,
            "permissions": app.permissions,
            "installations": {i.account.login: i.id for i in sandbox.state.installations.values()},
        }
    )


async def update_app(request: Request) -> Response:
    sandbox = _sandbox(request)
    body = await _body(request)
    if "webhook_url" in body:
        sandbox.app.webhook_url = _text(body, "webhook_url", required=False) or None
    if "webhook_secret" in body:
        sandbox.app.webhook_secret = _text(body, "webhook_secret", required=False) or None
    if "callback_urls" in body:
        urls = body["callback_urls"]
        if not isinstance(urls, list) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls
        ):
            raise HumanError(422, "'callback_urls' must be a list of http:// or https:// URLs, the first the default")
        sandbox.app.callback_urls = list(urls)
    _oauth_settings(sandbox, body)
    return await app_info(request)


def _oauth_settings(sandbox: Sandbox, body: dict[str, Any]) -> None:
    if "expiring_user_tokens" in body:
        if not isinstance(body["expiring_user_tokens"], bool):
            raise HumanError(422, "'expiring_user_tokens' must be true or false")
        sandbox.oauth.expiring_user_tokens = body["expiring_user_tokens"]
    if "user_token_seconds" in body:
        seconds = body["user_token_seconds"]
        if not isinstance(seconds, int) or isinstance(seconds, bool) or not 1 <= seconds <= USER_TOKEN_SECONDS:
            raise HumanError(422, f"'user_token_seconds' must be a whole number of seconds, 1 to {USER_TOKEN_SECONDS}")
        sandbox.oauth.user_token_seconds = seconds


async def deliveries(request: Request) -> Response:
    sandbox = _sandbox(request)
    await sandbox.webhooks.drain()
    return JSONResponse([d.summary() for d in sandbox.webhooks.deliveries])


async def delivery(request: Request) -> Response:
    """One delivery as GET /app/hook/deliveries/{id} shows it, with the exact body and headers sent
    (`raw_body`), so a test can send the same signed request again."""
    sandbox = _sandbox(request)
    await sandbox.webhooks.drain()
    raw = str(request.path_params["delivery_id"])
    found = sandbox.webhooks.find(int(raw)) if raw.isdigit() else None
    if found is None:
        raise HumanError(404, f"no delivery {raw}")
    return JSONResponse({**found.detail(), "raw_body": found.body.decode()})


async def redeliver(request: Request) -> Response:
    sandbox = _sandbox(request)
    raw = str(request.path_params["delivery_id"])
    again = sandbox.webhooks.redeliver(int(raw)) if raw.isdigit() else None
    if again is None:
        raise HumanError(404, f"no delivery {raw} to redeliver (or the App has no webhook URL)")
    await sandbox.webhooks.drain()
    return JSONResponse(sandbox.webhooks.deliveries[-1].summary(), status_code=201)


async def drain(request: Request) -> Response:
    """Answers once every event so far has been delivered (or has failed)."""
    await _sandbox(request).webhooks.drain()
    return JSONResponse({"deliveries": len(_sandbox(request).webhooks.deliveries)})


async def requests_served(request: Request) -> Response:
    return JSONResponse([{"method": m, "path": p, "status": s} for m, p, s in _sandbox(request).served])


# faults (test-only; see bot.sandbox.faults)


def _whole_number(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise HumanError(422, f"'{name}' must be a whole number, not {value!r}")
    return value


def _share(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise HumanError(422, f"'{name}' must be a number, not {value!r}")
    return float(value) if value is not None else None


async def add_fault(request: Request) -> Response:
    """Make requests fail: {method (or "*"), path (a regular expression), status | drop_answer: true,
    body_contains?, times? (default 1; null: every matching request), rate? (the share of matching
    requests, drawn at random), seed?, retry_after? (seconds), message?, delay? (seconds to hold
    the request, then do it; instead of status or drop_answer)}."""
    sandbox = _sandbox(request)
    body = await _body(request)
    if not isinstance(body.get("drop_answer", False), bool):
        raise HumanError(422, f"'drop_answer' must be true or false, not {body['drop_answer']!r}")
    try:
        fault = Fault(
            method=_text(body, "method") or "",
            path=_text(body, "path") or "",
            status=_whole_number(body, "status"),
            drop_answer=body.get("drop_answer") is True,
            body_contains=_text(body, "body_contains", required=False),
            times=_whole_number(body, "times") if "times" in body else 1,
            rate=_share(body, "rate"),
            seed=_whole_number(body, "seed"),
            retry_after=_whole_number(body, "retry_after"),
            message=_text(body, "message", required=False),
            delay=_share(body, "delay"),
        )
    except FaultError as error:
        raise HumanError(422, str(error)) from None
    sandbox.faults.add(fault)
    return JSONResponse(_faults_summary(sandbox), status_code=201)


async def list_faults(request: Request) -> Response:
    return JSONResponse(_faults_summary(_sandbox(request)))


async def clear_faults(request: Request) -> Response:
    sandbox = _sandbox(request)
    sandbox.faults.clear()
    return JSONResponse(_faults_summary(sandbox))


def _faults_summary(sandbox: Sandbox) -> dict[str, Any]:
    return {
        "pending": [fault.describe() for fault in sandbox.faults.pending],
        "fired": [
            {"method": method, "path": path, "fault": fault.describe()} for method, path, fault in sandbox.faults.fired
        ],
    }


async def state(request: Request) -> Response:
    sandbox = _sandbox(request)
    return JSONResponse(
        {
            "repositories": [
                await _repository_readout(sandbox, repository) for repository in sandbox.state.repositories.values()
            ]
        }
    )


async def repository_state(request: Request) -> Response:
    sandbox = _sandbox(request)
    return JSONResponse(await _repository_readout(sandbox, _repository(request)))


def _repository_summary(sandbox: Sandbox, repository: Repository) -> dict[str, Any]:
    return {
        "full_name": repository.full_name,
        "id": repository.id,
        "private": repository.private,
        "default_branch": repository.default_branch,
        "clone_url": sandbox.renderer.clone_url(repository),
        "installation_id": repository.installation_id,
    }


def _collaborators(repository: Repository) -> dict[str, str]:
    return {account.login: role for account, role in repository.collaborators.values()}


def _comment_summary(sandbox: Sandbox, comment_id: int) -> dict[str, Any]:
    found = sandbox.state.comments[comment_id]
    return {
        "id": found.id,
        "user": found.user.login,
        "body": found.body,
        "by_app": found.by_app,
        "created_at": timestamp(found.created_at),
        "updated_at": timestamp(found.updated_at),
        "reactions": [{"user": r.user.login, "content": r.content} for r in found.reactions],
    }


def _issue_summary(sandbox: Sandbox, issue: Issue) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "state": issue.state,
        "user": issue.user.login,
        "labels": [label.name for label in issue.labels],
        "comments": [_comment_summary(sandbox, comment_id) for comment_id in issue.comment_ids],
        "reactions": [{"user": r.user.login, "content": r.content} for r in issue.reactions],
    }
    if issue.pull is not None:
        summary["pull_request"] = {
            "head": issue.pull.head_ref,
            "head_sha": issue.pull.head_sha,
            "base": issue.pull.base_ref,
            "draft": issue.pull.draft,
            "commits": issue.pull.commits,
            "changed_files": issue.pull.changed_files,
            "merged": issue.pull.merged_at is not None,
            "merge_commit_sha": issue.pull.merge_commit_sha,
            "requested_reviewers": [a.login for a in issue.pull.requested_reviewers],
        }
    return summary


def _review_comment_summary(comment: ReviewComment) -> dict[str, Any]:
    return {
        "id": comment.id,
        "pull": comment.pull_number,
        "review_id": comment.review_id,
        "path": comment.path,
        "line": comment.line,
        "side": comment.side,
        "body": comment.body,
        "user": comment.user.login,
        "in_reply_to_id": comment.in_reply_to_id,
        "commit_id": comment.commit_id,
    }


def _thread_summary(sandbox: Sandbox, root_id: int) -> dict[str, Any]:
    thread = sandbox.state.review_threads[root_id]
    root = sandbox.state.review_comments[root_id]
    return {
        "root_id": root_id,
        "pull": thread.pull_number,
        "path": root.path,
        "line": root.line,
        "outdated": root.outdated,
        "resolved": thread.resolved,
        "resolved_by": thread.resolved_by.login if thread.resolved_by else None,
        "comments": [c.id for c in sandbox.state.thread_comments(thread)],
    }


def _check_run_summary(run: CheckRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "name": run.name,
        "head_sha": run.head_sha,
        "status": run.status,
        "conclusion": run.conclusion,
        "started_at": timestamp(run.started_at),
        "completed_at": timestamp(run.completed_at),
        "output": dict(run.output),
        "annotations": [dict(annotation) for annotation in run.annotations],
        "app_id": run.app_id,
        "actions": list(run.actions),
        "details_url": run.details_url,
        "external_id": run.external_id,
    }


async def _repository_readout(sandbox: Sandbox, repository: Repository) -> dict[str, Any]:
    branches = await sandbox.in_thread(sandbox.git.branches, repository.owner.login, repository.name)
    issues = sorted(repository.issues.values(), key=lambda issue: issue.number)
    return {
        **_repository_summary(sandbox, repository),
        "collaborators": _collaborators(repository),
        "branches": branches,
        "labels": sorted(label.name for label in repository.labels.values()),
        "issues": [_issue_summary(sandbox, issue) for issue in issues if issue.pull is None],
        "pulls": [_issue_summary(sandbox, issue) for issue in issues if issue.pull is not None],
        "check_runs": [
            _check_run_summary(run) for run in sorted(sandbox.state.check_runs_of(repository), key=lambda run: run.id)
        ],
        "reviews": [
            {
                "id": r.id,
                "pull": r.pull_number,
                "user": r.user.login,
                "state": r.state,
                "body": r.body,
                "commit_id": r.commit_id,
            }
            for r in repository.reviews
        ],
        "review_comments": [
            _review_comment_summary(c)
            for c in sorted(
                (c for c in sandbox.state.review_comments.values() if c.repository_id == repository.id),
                key=lambda c: c.id,
            )
        ],
        "review_threads": [
            _thread_summary(sandbox, root_id)
            for root_id in sorted(
                t.root_id for t in sandbox.state.review_threads.values() if t.repository_id == repository.id
            )
        ],
    }


_REPO = PREFIX + "/repos/{owner}/{repo}"
ROUTES = [
    Route(f"{PREFIX}/state", state, methods=["GET"]),
    Route(f"{PREFIX}/app", app_info, methods=["GET"]),
    Route(f"{PREFIX}/app", update_app, methods=["PATCH"]),
    Route(f"{PREFIX}/deliveries", deliveries, methods=["GET"]),
    Route(f"{PREFIX}/deliveries/{{delivery_id}}", delivery, methods=["GET"]),
    Route(f"{PREFIX}/deliveries/{{delivery_id}}/redeliver", redeliver, methods=["POST"]),
    Route(f"{PREFIX}/drain", drain, methods=["POST"]),
    Route(f"{PREFIX}/requests", requests_served, methods=["GET"]),
    Route(f"{PREFIX}/faults", add_fault, methods=["POST"]),
    Route(f"{PREFIX}/faults", list_faults, methods=["GET"]),
    Route(f"{PREFIX}/faults", clear_faults, methods=["DELETE"]),
    Route(f"{PREFIX}/repos", create_repository, methods=["POST"]),
    Route(_REPO, repository_state, methods=["GET"]),
    Route(f"{_REPO}/collaborators", add_collaborator, methods=["POST"]),
    Route(f"{_REPO}/collaborators/{{login}}", remove_collaborator, methods=["DELETE"]),
    Route(f"{PREFIX}/users", create_user, methods=["POST"]),
    Route(f"{PREFIX}/users/{{login}}/rename", rename_user, methods=["POST"]),
    Route(f"{_REPO}/issues", open_issue, methods=["POST"]),
    Route(f"{_REPO}/issues/comments/{{comment_id}}", edit_comment, methods=["PATCH"]),
    Route(f"{_REPO}/issues/{{number}}/comments", comment, methods=["POST"]),
    Route(f"{_REPO}/issues/{{number}}/labels", add_label, methods=["POST"]),
    Route(f"{_REPO}/issues/{{number}}/labels/{{name:path}}", remove_label, methods=["DELETE"]),
    Route(f"{_REPO}/issues/{{number}}", edit_issue, methods=["PATCH"]),
    Route(f"{_REPO}/issues/{{number}}/close", close, methods=["POST"]),
    Route(f"{_REPO}/pulls/{{number}}/reviews", review, methods=["POST"]),
    Route(f"{_REPO}/pulls/{{number}}/merge", merge, methods=["POST"]),
    Route(f"{_REPO}/pulls/comments/{{comment_id}}/replies", reply_to_review_comment, methods=["POST"]),
    Route(f"{_REPO}/pulls/comments/{{comment_id}}/resolve", resolve_thread, methods=["POST"]),
    Route(f"{_REPO}/check-runs/{{check_run_id}}/rerequest", rerequest, methods=["POST"]),
    Route(f"{_REPO}/check-runs/{{check_run_id}}/requested-action", requested_action, methods=["POST"]),
    Route(f"{_REPO}/ci-reports", ci_report, methods=["POST"]),
    Route(f"{_REPO}/pushes", push, methods=["POST"]),
]
