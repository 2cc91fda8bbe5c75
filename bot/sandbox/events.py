"""Webhook payloads: what GitHub sends for each event and action the sandbox can cause.

Pure: each builder renders the records as they are at the moment of the event (the payload is a
snapshot, as GitHub's are). Repository events carry `repository`, `sender`, `installation:
{id, node_id}` and, for a repository owned by an organization, `organization`; installation
events carry the whole installation instead. `EMITTED` lists every (event, action) pair
the sandbox sends (`push` has no action: None); the fidelity tests compare each with GitHub's example.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.sandbox.shapes import Json, Renderer, noreply_email
from bot.sandbox.state import (
    FOLDED_PERMISSION,
    Account,
    CheckRun,
    CheckSuite,
    Comment,
    Installation,
    Issue,
    Label,
    Repository,
    Review,
    ReviewComment,
)

EMITTED: tuple[tuple[str, str | None], ...] = (
    ("installation", "created"),
    ("installation_repositories", "added"),
    ("issues", "opened"),
    ("issues", "edited"),
    ("issues", "closed"),
    ("issues", "reopened"),
    ("issues", "labeled"),
    ("issues", "unlabeled"),
    ("issue_comment", "created"),
    ("issue_comment", "edited"),
    ("pull_request", "opened"),
    ("pull_request", "closed"),
    ("pull_request", "reopened"),
    ("pull_request", "synchronize"),
    ("pull_request", "labeled"),
    ("pull_request", "unlabeled"),
    ("pull_request", "review_requested"),
    ("pull_request_review", "submitted"),
    ("pull_request_review_comment", "created"),
    ("check_run", "created"),
    ("check_run", "completed"),
    ("check_run", "rerequested"),
    ("check_run", "requested_action"),
    ("check_suite", "completed"),
    ("member", "added"),
    ("member", "edited"),
    ("member", "removed"),
    ("push", None),
)
PUSH_COMMITS_SHOWN = 20  # the most GitHub long documented (2048 today): the newest, listed oldest first
NO_COMMIT = "0" * 40
_NOREPLY = re.compile(r"^[0-9]+\+(?P<login>[^@]+)@users\.noreply\.github\.com$")


@dataclass(frozen=True)
class Event:
    """One webhook event: its name (X-GitHub-Event), action, payload and what the delivery list shows."""

    name: str
    action: str | None
    payload: Json
    installation_id: int
    repository_id: int


def _envelope(renderer: Renderer, name: str, action: str, body: Json, repository: Repository, sender: Account) -> Event:
    payload: Json = {"action": action, **body, "repository": renderer.repository(repository)}
    if repository.owner.type == "Organization":
        payload["organization"] = renderer.organization(repository.owner)
    payload["sender"] = renderer.user(sender)
    payload["installation"] = renderer.installation_reference(repository.installation_id)
    return Event(name, action, payload, repository.installation_id, repository.id)


def _repository_reference(repository: Repository) -> Json:
    return {
        "id": repository.id,
        "node_id": repository.node_id,
        "name": repository.name,
        "full_name": repository.full_name,
        "private": repository.private,
    }


def installation_event(
    renderer: Renderer, installation: Installation, repository: Repository, sender: Account
) -> Event:
    """installation.created when the App is installed on an account (with its first repository),
    installation_repositories.added when a repository joins an existing installation."""
    shown = renderer.installation(installation, webhook=True)
    if installation.repository_ids == [repository.id]:
        payload: Json = {
            "action": "created",
            "installation": shown,
            "repositories": [_repository_reference(repository)],
            "sender": renderer.user(sender),
        }
        return Event("installation", "created", payload, installation.id, repository.id)
    payload = {
        "action": "added",
        "installation": shown,
        "repository_selection": "selected",
        "repositories_added": [_repository_reference(repository)],
        "repositories_removed": [],
        "requester": renderer.user(sender),
        "sender": renderer.user(sender),
    }
    return Event("installation_repositories", "added", payload, installation.id, repository.id)


def member_event(
    renderer: Renderer,
    action: str,
    repository: Repository,
    member: Account,
    sender: Account,
    *,
    old_role: str | None = None,
) -> Event:
    """member.added, .edited (`changes.old_permission.from`: the folded permission held before) or
    .removed: a collaborator given a role, their role changed, or their access taken away."""
    body: Json = {"member": renderer.user(member)}
    if action == "edited":
        body["changes"] = {"old_permission": {"from": FOLDED_PERMISSION.get(old_role or "", "none")}}
    return _envelope(renderer, "member", action, body, repository, sender)


def issues_event(
    renderer: Renderer,
    action: str,
    repository: Repository,
    issue: Issue,
    sender: Account,
    *,
    label: Label | None = None,
    changes: dict[str, Any] | None = None,
) -> Event:
    """issues.<action> for an issue, or pull_request.<action> when the issue is a pull request."""
    if issue.is_pull:
        return pull_request_event(renderer, action, repository, issue, sender, label=label)
    body: Json = {"issue": renderer.issue(repository, issue)}
    if label is not None:
        body["label"] = renderer.label(repository, label)
    if changes:
        body["changes"] = changes
    return _envelope(renderer, "issues", action, body, repository, sender)


def issue_comment_event(
    renderer: Renderer,
    action: str,
    repository: Repository,
    comment: Comment,
    sender: Account,
    *,
    changes: dict[str, Any] | None = None,
) -> Event:
    issue = repository.issues[comment.issue_number]
    body: Json = {}
    if changes is not None:
        body["changes"] = changes
    body.update({"issue": renderer.issue(repository, issue), "comment": renderer.comment(repository, comment)})
    return _envelope(renderer, "issue_comment", action, body, repository, sender)


def pull_request_event(
    renderer: Renderer,
    action: str,
    repository: Repository,
    pull: Issue,
    sender: Account,
    *,
    label: Label | None = None,
    before: str | None = None,
    after: str | None = None,
    mergeable: bool | None = None,
    requested_reviewer: Account | None = None,
) -> Event:
    body: Json = {"number": pull.number, "pull_request": renderer.pull_request(repository, pull, mergeable=mergeable)}
    if label is not None:
        body["label"] = renderer.label(repository, label)
    if requested_reviewer is not None:
        body["requested_reviewer"] = renderer.user(requested_reviewer)
    if before is not None and after is not None:
        body.update({"before": before, "after": after})
    return _envelope(renderer, "pull_request", action, body, repository, sender)


def pull_request_review_event(
    renderer: Renderer, action: str, repository: Repository, review: Review, sender: Account
) -> Event:
    pull = repository.issues[review.pull_number]
    body: Json = {
        "review": renderer.review(repository, review),
        "pull_request": renderer.pull_request(repository, pull, full=False),
    }
    return _envelope(renderer, "pull_request_review", action, body, repository, sender)


def pull_request_review_comment_event(
    renderer: Renderer, action: str, repository: Repository, comment: ReviewComment, sender: Account
) -> Event:
    pull = repository.issues[comment.pull_number]
    body: Json = {
        "comment": renderer.review_comment(repository, comment),
        "pull_request": renderer.pull_request(repository, pull, full=False),
    }
    return _envelope(renderer, "pull_request_review_comment", action, body, repository, sender)


def check_run_event(
    renderer: Renderer,
    action: str,
    repository: Repository,
    run: CheckRun,
    sender: Account,
    *,
    identifier: str | None = None,
) -> Event:
    body: Json = {"check_run": renderer.check_run(repository, run)}
    if identifier is not None:
        body["requested_action"] = {"identifier": identifier}
    return _envelope(renderer, "check_run", action, body, repository, sender)


def check_suite_event(
    renderer: Renderer, action: str, repository: Repository, suite: CheckSuite, sender: Account, head_commit: Json
) -> Event:
    """check_suite.completed: every run of one App's suite on a commit has finished. GitHub sends it
    to every App with checks permission that subscribes, not only to the suite's own; `check_suite.app`
    says whose suite it is, `pull_requests` the open pull requests whose head it is."""
    body: Json = {"check_suite": renderer.check_suite(repository, suite, head_commit=head_commit)}
    return _envelope(renderer, "check_suite", action, body, repository, sender)


@dataclass(frozen=True)
class RefUpdate:
    """One ref a push moved: what it held before and after (None: it did not exist), whether the
    move was not a fast-forward, the ref whose tip it was made at, and the commits it brought."""

    ref: str
    before: str | None
    after: str | None
    forced: bool = False
    base_ref: str | None = None
    commits: tuple[Json, ...] = ()  # as GitStore.pushed_commits gives them
    head: Json | None = None  # the new tip, as GitStore.commit_details gives it (with `distinct`)


def _git_person(person: Json) -> Json:
    """A commit's author or committer: `username` when the address is an account's (its noreply
    address, or GitHub's own for what it commits, `web-flow`)."""
    shown = {"name": person["name"], "email": person["email"]}
    found = _NOREPLY.match(person["email"])
    if found is not None:
        shown["username"] = found["login"]
    elif person["email"] == "noreply@github.com":
        shown["username"] = "web-flow"
    return shown


def _push_commit(html: str, commit: Json) -> Json:
    return {
        "id": commit["id"],
        "tree_id": commit["tree_id"],
        "distinct": commit["distinct"],
        "message": commit["message"],
        "timestamp": commit["timestamp"],
        "url": f"{html}/commit/{commit['id']}",
        "author": _git_person(commit["author"]),
        "committer": _git_person(commit["committer"]),
        "added": list(commit["added"]),
        "removed": list(commit["removed"]),
        "modified": list(commit["modified"]),
    }


def _compare(html: str, update: RefUpdate) -> str:
    """The page GitHub links for the push: the two tips compared, the one commit of a new ref, or
    the new ref itself (GitHub compares it with the default branch)."""
    before, after = update.before or NO_COMMIT, update.after or NO_COMMIT
    if update.before is not None:
        return f"{html}/compare/{before[:12]}...{after[:12]}"
    if len(update.commits) == 1:
        return f"{html}/commit/{after}"
    return f"{html}/compare/{update.ref.split('/', 2)[-1]}"


def push_event(renderer: Renderer, repository: Repository, update: RefUpdate, pusher: Account) -> Event:
    """push: a branch or tag was created, moved or deleted (git push, a merge, the REST API). There
    is no action; `pusher` is the account by name and address, `sender` the same account in full."""
    shown = renderer.push_repository(repository)
    html = shown["html_url"]
    payload: Json = {
        "ref": update.ref,
        "before": update.before or NO_COMMIT,
        "after": update.after or NO_COMMIT,
        "created": update.before is None,
        "deleted": update.after is None,
        "forced": update.forced,
        "base_ref": update.base_ref,
        "compare": _compare(html, update),
        "commits": [_push_commit(html, commit) for commit in update.commits],
        "head_commit": _push_commit(html, update.head) if update.head is not None else None,
        "repository": shown,
    }
    if repository.owner.type == "Organization":
        payload["organization"] = renderer.organization(repository.owner)
    payload["pusher"] = {"name": pusher.login, "email": noreply_email(pusher)}
    payload["sender"] = renderer.user(pusher)
    payload["installation"] = renderer.installation_reference(repository.installation_id)
    return Event("push", None, payload, repository.installation_id, repository.id)
