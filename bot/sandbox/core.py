"""The sandbox itself: its configuration, its parts, and the actions both REST and the human API
perform (each changes the state and sends the webhooks GitHub would send for it).

An action taken with an installation token is the App's bot acting; GitHub delivers the App the
events its own actions cause too (a bot must ignore its own comments), and so does the sandbox.

Reviews: a comment on a line is checked against the pull request's diff at the reviewed commit
(`place_comment`, with GitHub's 422 wording), a review is all or nothing, and every review comment
outside a review (a reply, a single comment) comes with the review GitHub makes for it. When the
head moves, a thread whose file changed becomes outdated (no `line`, no `position`); GitHub looks
closer, at the lines around the comment, so the sandbox outdates a thread at least as often.
"""

from __future__ import annotations

import functools
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx

from bot.sandbox import events
from bot.sandbox.auth import RateLimiter, TokenBook
from bot.sandbox.faults import FaultBook
from bot.sandbox.gitstore import FileDiff, GitError, GitStore
from bot.sandbox.oauth import OAuthBook
from bot.sandbox.shapes import Renderer
from bot.sandbox.state import (
    Account,
    AccountType,
    AppRecord,
    CheckRun,
    CheckSuite,
    Comment,
    Issue,
    Label,
    Repository,
    Review,
    ReviewComment,
    ReviewPlace,
    ReviewThread,
    Role,
    SandboxState,
    node_id,
    utc_now,
)
from bot.sandbox.webhooks import WebhookSender

T = TypeVar("T")
DEFAULT_EVENTS = (
    "push",
    "issues",
    "issue_comment",
    "pull_request",
    "pull_request_review",
    "pull_request_review_comment",
    "check_run",
    "check_suite",
    "member",
    "membership",
    "organization",
    "team",
)
DEFAULT_PERMISSIONS = {
    "checks": "write",
    "contents": "write",
    "issues": "write",
    "members": "read",
    "metadata": "read",
    "pull_requests": "write",
}
DEFAULT_PORT = 3100
# The repository's own CI, an App of its own beside lanebot's: GitHub Actions' id, slug and bot.
CI_APP_ID, CI_APP_SLUG, CI_APP_NAME = 15368, "github-actions", "GitHub Actions"
CI_OWNER, CI_OWNER_ID, CI_BOT_ID = "github", 9919, 41898282
# GitHub's closing keywords: "Closes #1", "fixes: #2", "RESOLVED #3" in a pull request's body close
# those issues when it is merged into the default branch.
_CLOSING_KEYWORD = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+#(\d+)\b", re.IGNORECASE)
_SHA = re.compile(r"^[0-9a-f]{40}$")
# GitHub's words for a review comment it cannot place (from its 422 answers quoted in public bug
# reports); the two marked "sandbox" are the sandbox's own, GitHub's wording being unknown.
PATH_UNRESOLVED = "Path could not be resolved"
LINE_UNRESOLVED = "Line could not be resolved"
LINE_NOT_IN_DIFF = (
    "Pull request review thread line must be part of the diff and Pull request review thread diff hunk can't be blank"
)
START_LINE_OUTSIDE_HUNK = "Pull request review thread start line must be part of the same hunk as the line."
START_LINE_AFTER_LINE = "Pull request review thread start line must precede the line (sandbox)"
NOT_IN_PULL = "Commit {sha} is not part of the pull request (sandbox)"
NO_COMMIT = "No commit found for SHA: {sha}"
BODY_REQUIRED = "Body is required for a review with event {event} and no comments (sandbox)"
OWN_APPROVAL = "Can not approve your own pull request"
OWN_CHANGES_REQUEST = "Can not request changes on your own pull request"


def closing_references(text: str | None) -> list[int]:
    """The issue numbers a pull request's body closes with GitHub's keywords, in order, once each."""
    return list(dict.fromkeys(int(number) for number in _CLOSING_KEYWORD.findall(text or "")))


class ReviewRefused(Exception):
    """GitHub refuses this review or review comment: `message` in its words, `field` the one at fault."""

    def __init__(self, message: str, field: str = "pull_request_review_thread") -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class CommentDraft:
    """A review comment as asked for: on `line` of `side` (or GitHub's older `position`), optionally
    starting at `start_line` of `start_side` for a comment on several lines."""

    path: str
    body: str
    line: int | None = None
    side: str = "RIGHT"
    start_line: int | None = None
    start_side: str | None = None
    position: int | None = None


def place_comment(diff: Mapping[str, FileDiff], draft: CommentDraft, commit_id: str) -> ReviewPlace:
    """Where the draft goes in the diff at `commit_id`; ReviewRefused when GitHub would not place it."""
    file = diff.get(draft.path)
    if file is None or not file.hunks:
        raise ReviewRefused(PATH_UNRESOLVED, "path")
    side, line = draft.side, draft.line
    if line is None:
        if draft.position is None:
            raise ReviewRefused(LINE_UNRESOLVED, "line")
        found = file.at_position(draft.position)
        if found is None:
            raise ReviewRefused(LINE_NOT_IN_DIFF, "position")
        side, line = found
    where = file.find(line, side)
    if where is None:
        raise ReviewRefused(LINE_NOT_IN_DIFF, "line")
    start_side = None
    if draft.start_line is not None:
        start_side = draft.start_side or side
        start = file.find(draft.start_line, start_side)
        if start is None or start.hunk is not where.hunk:
            raise ReviewRefused(START_LINE_OUTSIDE_HUNK, "start_line")
        if start.index >= where.index:
            raise ReviewRefused(START_LINE_AFTER_LINE, "start_line")
    return ReviewPlace(
        path=draft.path,
        side=side,
        line=line,
        start_line=draft.start_line,
        start_side=start_side,
        position=where.position,
        diff_hunk=where.diff_hunk,
        commit_id=commit_id,
    )


@dataclass
class SandboxConfig:
    """How a sandbox is set up: the App it has registered, where it keeps things, where it is."""

    public_key_pem: str
    app_id: int = 1
    app_slug: str = "lanebot"
    app_name: str = "lanebot"
    app_owner: str = "lanebot-dev"
    webhook_url: str | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    events: tuple[str, ...] = DEFAULT_EVENTS
    permissions: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PERMISSIONS))
    public_url: str = f"http://127.0.0.1:{DEFAULT_PORT}"
    state_dir: Path | None = None
    request_log: Path | None = None
    delivery_log: Path | None = None
    webhook_timeout: float = 10.0
    rate_limit: int = 5000
    # The App's OAuth client, for the web flow: made up when not given (as GitHub makes them up).
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    callback_urls: tuple[str, ...] = ()
    # The CI App that reports on commits when a test says so (`Sandbox.report_ci`).
    ci_app_id: int = CI_APP_ID
    ci_app_slug: str = CI_APP_SLUG


def make_app_record(config: SandboxConfig, now: datetime) -> AppRecord:
    owner = Account(config.app_owner, 901, node_id("Organization", 901), "Organization")
    bot = Account(f"{config.app_slug}[bot]", 902, node_id("Bot", 902), "Bot")
    return AppRecord(
        id=config.app_id,
        slug=config.app_slug,
        name=config.app_name,
        client_id=config.client_id or f"Iv1.{secrets.token_hex(8)}",
        owner=owner,
        bot=bot,
        public_key_pem=config.public_key_pem,
        permissions=dict(config.permissions),
        events=list(config.events),
        hook_id=400_000 + config.app_id,
        created_at=now,
        webhook_url=config.webhook_url,
        webhook_secret=config.webhook_secret,
        client_secret=config.client_secret or secrets.token_hex(20),  # GitHub's are 40 hexadecimal characters
        callback_urls=list(config.callback_urls),
    )


def make_ci_app_record(config: SandboxConfig, now: datetime) -> AppRecord:
    """The repository's CI as GitHub knows it: another App, with checks permission, and no webhook
    of its own in the sandbox (nothing listens for it)."""
    owner = Account(CI_OWNER, CI_OWNER_ID, node_id("Organization", CI_OWNER_ID), "Organization")
    bot = Account(f"{config.ci_app_slug}[bot]", CI_BOT_ID, node_id("Bot", CI_BOT_ID), "Bot")
    return AppRecord(
        id=config.ci_app_id,
        slug=config.ci_app_slug,
        name=CI_APP_NAME if config.ci_app_slug == CI_APP_SLUG else config.ci_app_slug,
        client_id=f"Iv1.{secrets.token_hex(8)}",
        owner=owner,
        bot=bot,
        public_key_pem="",
        permissions={"checks": "write", "contents": "read", "metadata": "read", "pull_requests": "read"},
        events=["check_suite", "pull_request", "push"],
        hook_id=400_000 + config.ci_app_id,
        created_at=now,
    )


@dataclass(frozen=True)
class CiRun:
    """One check run a CI report holds: its name, how it ended, and its output (title, summary,
    text, annotations), already checked against GitHub's limits (routes_checks.validated_fields)."""

    name: str
    fields: dict[str, Any]


class Sandbox:
    """The whole stand-in for GitHub: state, git, tokens (the App's and people's), rate limits, webhooks."""

    def __init__(
        self,
        config: SandboxConfig,
        *,
        clock: Callable[[], datetime] = utc_now,
        webhook_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.state = SandboxState(make_app_record(config, clock()), clock=clock)
        self.ci_app = make_ci_app_record(config, clock())
        self.state.add_app(self.ci_app)
        self._scratch: Path | None = None
        if config.state_dir is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="lanebot-sandbox-"))
        self.git = GitStore((config.state_dir or self._scratch or Path(".")) / "git")
        self.tokens = TokenBook(clock=clock)
        self.oauth = OAuthBook(clock=clock)
        self.limiter = RateLimiter(clock=clock, installation_limit=config.rate_limit)
        self.webhooks = WebhookSender(
            self.state.app,
            clock=clock,
            delivery_log=config.delivery_log,
            client=webhook_client,
            timeout=config.webhook_timeout,
        )
        self.renderer = Renderer(self.state, config.public_url.rstrip("/"))
        self.served: list[tuple[str, str, int]] = []
        self.faults = FaultBook()  # test-only: requests made to fail on purpose

    @property
    def app(self) -> AppRecord:
        return self.state.app

    @property
    def bot(self) -> Account:
        return self.state.app.bot

    async def close(self) -> None:
        await self.webhooks.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    async def in_thread(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (git) off the event loop."""
        return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))

    def emit(self, event: events.Event) -> None:
        self.webhooks.publish(event)

    # collaborators: an admin gives, changes or takes away a person's role, and GitHub says so

    def set_collaborator(self, repository: Repository, login: str, role: Role, by: Account | None = None) -> Account:
        """Give `login` `role` on the repository; `member` added or edited when that changed anything."""
        before = self.state.collaborator_role(repository, login)
        account = self.state.set_collaborator(repository, login, role)
        if before != role:
            action = "added" if before is None else "edited"
            sender = by or self.repository_admin(repository)
            self.emit(events.member_event(self.renderer, action, repository, account, sender, old_role=before))
        return account

    def remove_collaborator(self, repository: Repository, login: str, by: Account | None = None) -> Account | None:
        """Take `login`'s role away (`member` removed); None when they were no collaborator."""
        removed = self.state.remove_collaborator(repository, login)
        if removed is None:
            return None
        sender = by or self.repository_admin(repository)
        self.emit(events.member_event(self.renderer, "removed", repository, removed[0], sender))
        return removed[0]

    def repository_admin(self, repository: Repository) -> Account:
        """Who changes collaborators when no one is named: the owning user, or for an organisation
        its first admin collaborator, else a person `<org>-admin` (the sandbox has no org members)."""
        if repository.owner.type == "User":
            return repository.owner
        admins = [account for account, role in repository.collaborators.values() if role == "admin"]
        return admins[0] if admins else self.state.account(f"{repository.owner.login}-admin")

    # repositories

    async def create_repository(
        self,
        full_name: str,
        folder: Path,
        *,
        private: bool,
        owner_type: AccountType,
        default_branch: str = "main",
        description: str | None = None,
    ) -> Repository:
        owner, _, name = full_name.partition("/")
        repository = self.state.create_repository(
            owner, name, owner_type=owner_type, private=private, default_branch=default_branch, description=description
        )
        try:
            await self.in_thread(
                self.git.create_from_folder,
                owner,
                name,
                folder,
                branch=default_branch,
                author=owner,
                email=f"{repository.owner.id}+{owner}@users.noreply.github.com",
            )
        except Exception:
            with self.state.locked():
                del self.state.repositories[full_name.lower()]
                self.state.installations[repository.installation_id].repository_ids.remove(repository.id)
            raise
        installation = self.state.installations[repository.installation_id]
        self.emit(events.installation_event(self.renderer, installation, repository, repository.owner))
        return repository

    # issues, labels, comments

    def open_issue(
        self, repository: Repository, user: Account, title: str, body: str | None, labels: list[str] | None = None
    ) -> Issue:
        issue = self.state.open_issue(repository, user, title, body)
        added = self.state.add_labels(repository, issue, labels) if labels else []
        self.emit(events.issues_event(self.renderer, "opened", repository, issue, user))
        for label in added:
            self.emit(events.issues_event(self.renderer, "labeled", repository, issue, user, label=label))
        return issue

    def add_labels(self, repository: Repository, issue: Issue, names: list[str], actor: Account) -> list[Label]:
        added = self.state.add_labels(repository, issue, names)
        for label in added:
            self.emit(events.issues_event(self.renderer, "labeled", repository, issue, actor, label=label))
        return added

    def remove_label(self, repository: Repository, issue: Issue, name: str, actor: Account) -> Label:
        label = self.state.remove_label(issue, name)
        self.emit(events.issues_event(self.renderer, "unlabeled", repository, issue, actor, label=label))
        return label

    def set_labels(self, repository: Repository, issue: Issue, names: list[str], actor: Account) -> None:
        wanted = {name.lower() for name in names}
        for label in list(issue.labels):
            if label.name.lower() not in wanted:
                self.remove_label(repository, issue, label.name, actor)
        self.add_labels(repository, issue, names, actor)

    def update_issue(self, repository: Repository, issue: Issue, actor: Account, **fields: Any) -> None:
        changes = self.state.update_issue(issue, actor, **fields)
        edits = {key: value for key, value in changes.items() if key in ("title", "body")}
        # pull_request.edited is left out: there is no example of it to hold its payload to.
        if edits and not issue.is_pull:
            self.emit(events.issues_event(self.renderer, "edited", repository, issue, actor, changes=edits))
        if "state" in changes:
            action = "closed" if issue.state == "closed" else "reopened"
            self.emit(events.issues_event(self.renderer, action, repository, issue, actor))

    def comment(self, repository: Repository, issue: Issue, user: Account, body: str, *, by_app: bool) -> Comment:
        comment = self.state.add_comment(repository, issue, user, body, by_app=by_app)
        self.emit(events.issue_comment_event(self.renderer, "created", repository, comment, user))
        return comment

    def edit_comment(self, repository: Repository, comment: Comment, body: str, actor: Account) -> None:
        old = self.state.edit_comment(comment, body)
        if old != body:
            self.emit(
                events.issue_comment_event(
                    self.renderer, "edited", repository, comment, actor, changes={"body": {"from": old}}
                )
            )

    # pull requests

    async def refresh_pull(self, repository: Repository, pull: Issue) -> None:
        """Ask git for the pull request's base tip and what head adds to it."""
        assert pull.pull is not None
        owner, name = repository.owner.login, repository.name
        base_sha = await self.in_thread(self.git.resolve, owner, name, pull.pull.base_ref)
        if base_sha is None:
            return
        commits = await self.in_thread(self.git.commits_between, owner, name, base_sha, pull.pull.head_sha)
        additions, deletions, files = await self.in_thread(
            self.git.diff_stats, owner, name, base_sha, pull.pull.head_sha
        )
        with self.state.locked():
            pull.pull.base_sha = base_sha
            pull.pull.commits, pull.pull.additions, pull.pull.deletions, pull.pull.changed_files = (
                commits,
                additions,
                deletions,
                files,
            )

    def pull_opened(self, repository: Repository, pull: Issue, actor: Account) -> None:
        self.emit(events.pull_request_event(self.renderer, "opened", repository, pull, actor))

    # reviews

    async def review_commit(self, repository: Repository, pull: Issue, commit_id: str | None) -> str:
        """The commit a review is of: `commit_id`, once it is a commit of the pull request, else the head."""
        assert pull.pull is not None
        if commit_id is None:
            return pull.pull.head_sha
        owner, name = repository.owner.login, repository.name
        found = await self.in_thread(self.git.resolve, owner, name, commit_id) if _SHA.match(commit_id) else None
        if found is None:
            raise ReviewRefused(NO_COMMIT.format(sha=commit_id), "commit_id")
        if not await self.in_thread(self.git.is_ancestor, owner, name, found, pull.pull.head_sha):
            raise ReviewRefused(NOT_IN_PULL.format(sha=commit_id), "commit_id")
        return found

    async def place(
        self, repository: Repository, pull: Issue, drafts: Sequence[CommentDraft], commit_id: str
    ) -> list[ReviewPlace]:
        """Each draft's place in the pull request's diff at `commit_id` (ReviewRefused for the first that has none)."""
        assert pull.pull is not None
        if not drafts:
            return []
        diff = await self.in_thread(
            self.git.diff, repository.owner.login, repository.name, pull.pull.base_sha, commit_id
        )
        return [place_comment(diff, draft, commit_id) for draft in drafts]

    async def submit_review(
        self,
        repository: Repository,
        pull: Issue,
        user: Account,
        *,
        state: str,
        body: str | None,
        commit_id: str | None = None,
        comments: Sequence[CommentDraft] = (),
    ) -> tuple[Review, list[ReviewComment]]:
        """A submitted review with its inline comments, all or nothing: `pull_request_review_comment.created`
        for each comment, then `pull_request_review.submitted`. Its body may be left out only when
        approving or when it has inline comments (GitHub's docs ask for one with REQUEST_CHANGES and
        COMMENT; GitHub accepts a review of inline comments alone)."""
        if pull.user.id == user.id and state in ("approved", "changes_requested"):
            raise ReviewRefused(OWN_APPROVAL if state == "approved" else OWN_CHANGES_REQUEST)
        if state != "approved" and not (body or "").strip() and not comments:
            event = "REQUEST_CHANGES" if state == "changes_requested" else "COMMENT"
            raise ReviewRefused(BODY_REQUIRED.format(event=event), "body")
        commit = await self.review_commit(repository, pull, commit_id)
        places = await self.place(repository, pull, comments, commit)
        review = self.state.add_review(repository, pull, user, state=state, body=body, commit_id=commit)
        created = [
            self.state.add_review_comment(repository, pull, review, user, draft.body, place)
            for draft, place in zip(comments, places)
        ]
        for comment in created:
            self.emit(events.pull_request_review_comment_event(self.renderer, "created", repository, comment, user))
        self.emit(events.pull_request_review_event(self.renderer, "submitted", repository, review, user))
        return review, created

    async def comment_on_diff(
        self, repository: Repository, pull: Issue, user: Account, draft: CommentDraft, commit_id: str | None
    ) -> ReviewComment:
        """A single comment on a line: a new thread, in the review GitHub makes for it."""
        commit = await self.review_commit(repository, pull, commit_id)
        [place] = await self.place(repository, pull, [draft], commit)
        review = self.state.add_review(repository, pull, user, state="commented", body=None, commit_id=commit)
        comment = self.state.add_review_comment(repository, pull, review, user, draft.body, place)
        self._comment_events(repository, comment, review, user)
        return comment

    def reply(self, repository: Repository, pull: Issue, user: Account, to: ReviewComment, body: str) -> ReviewComment:
        """A reply in the thread of `to` (a reply to a reply joins the root's), in a review of its own."""
        review = self.state.add_review(repository, pull, user, state="commented", body=None)
        reply = self.state.add_reply(pull, review, user, body, to)
        self._comment_events(repository, reply, review, user)
        return reply

    def _comment_events(self, repository: Repository, comment: ReviewComment, review: Review, user: Account) -> None:
        self.emit(events.pull_request_review_comment_event(self.renderer, "created", repository, comment, user))
        self.emit(events.pull_request_review_event(self.renderer, "submitted", repository, review, user))

    def request_reviewers(
        self, repository: Repository, pull: Issue, reviewers: list[Account], actor: Account
    ) -> list[Account]:
        """Ask for reviews; `pull_request.review_requested` for each reviewer newly asked."""
        added = self.state.request_reviewers(pull, reviewers)
        for reviewer in added:
            self.emit(
                events.pull_request_event(
                    self.renderer, "review_requested", repository, pull, actor, requested_reviewer=reviewer
                )
            )
        return added

    def resolve_thread(self, thread: ReviewThread, by: Account, *, resolved: bool) -> None:
        """Resolve or unresolve a thread. GitHub's `pull_request_review_thread` event is not sent: the
        App does not subscribe to it, and there is no example payload to hold it to."""
        self.state.resolve_thread(thread, by if resolved else None)

    async def _follow_threads(self, repository: Repository, pull: Issue) -> None:
        """The head moved: threads on a file the new head changed are outdated, the others move to it."""
        assert pull.pull is not None
        head, owner, name = pull.pull.head_sha, repository.owner.login, repository.name
        changed: dict[str, set[str] | None] = {}
        for thread in self.state.threads_of(repository, pull):
            root = self.state.review_comments[thread.root_id]
            if root.outdated or root.commit_id == head:
                continue
            if root.commit_id not in changed:
                try:
                    changed[root.commit_id] = await self.in_thread(
                        self.git.changed_paths, owner, name, root.commit_id, head
                    )
                except GitError:
                    changed[root.commit_id] = None  # the old commit is gone: nothing can be followed
            paths = changed[root.commit_id]
            self.state.move_thread(thread, head if paths is not None and root.path not in paths else None)

    async def pushed(
        self, repository: Repository, before: dict[str, str], after: dict[str, str], pusher: Account
    ) -> None:
        """After a push: tell the App of each branch and tag it moved (`push`), then move open pull
        requests' heads and tell the App of those (pull_request.synchronize)."""
        self.state.touch(repository, pushed=True)
        for ref in sorted(before.keys() | after.keys()):
            if before.get(ref) != after.get(ref) and ref.startswith(("refs/heads/", "refs/tags/")):
                update = await self._ref_update(repository, ref, before, after)
                self.emit(events.push_event(self.renderer, repository, update, pusher))
        for ref, new_sha in after.items():
            old_sha = before.get(ref)
            if old_sha == new_sha or not ref.startswith("refs/heads/"):
                continue
            branch = ref.removeprefix("refs/heads/")
            for pull in self.state.pulls(repository, head_ref=branch):
                assert pull.pull is not None
                previous = pull.pull.head_sha
                with self.state.locked():
                    pull.pull.head_sha = new_sha
                    pull.updated_at = self.state.now()
                await self.refresh_pull(repository, pull)
                await self._follow_threads(repository, pull)
                self.emit(
                    events.pull_request_event(
                        self.renderer, "synchronize", repository, pull, pusher, before=previous, after=new_sha
                    )
                )

    async def _ref_update(
        self, repository: Repository, ref: str, before: dict[str, str], after: dict[str, str]
    ) -> events.RefUpdate:
        """What a push did to `ref`, from every ref's commit before and after it."""
        old, new = before.get(ref), after.get(ref)
        if new is None:
            return events.RefUpdate(ref, old, None)
        owner, name = repository.owner.login, repository.name
        commits = await self.in_thread(
            self.git.pushed_commits, owner, name, old, new, list(before.values()), limit=events.PUSH_COMMITS_SHOWN
        )
        head = next((commit for commit in commits if commit["id"] == new), None)
        if head is None:  # a ref made at, or moved back to, a commit the repository held
            head = {**await self.in_thread(self.git.commit_details, owner, name, new), "distinct": False}
        forced = old is not None and not await self.in_thread(self.git.is_ancestor, owner, name, old, new)
        base_ref = None
        if old is None:
            made_at = [other for other, sha in after.items() if other != ref and sha == new]
            base_ref = min((other for other in made_at if other.startswith("refs/heads/")), default=None)
        return events.RefUpdate(ref, old, new, forced, base_ref, tuple(commits), head)

    def ref_deleted(self, repository: Repository, ref: str, held: str, actor: Account) -> None:
        """After a branch or tag is deleted through the API: `push` (deleted), and for a branch, GitHub
        closes the open pull requests from or into it."""
        self.state.touch(repository, pushed=True)
        self.emit(events.push_event(self.renderer, repository, events.RefUpdate(ref, held, None), actor))
        if ref.startswith("refs/heads/"):
            self.branch_deleted(repository, ref.removeprefix("refs/heads/"), actor)

    async def merge_pull(self, repository: Repository, pull: Issue, actor: Account) -> str:
        """Merge an open pull request as GitHub's "Create a merge commit" button does: a merge commit
        on the base branch, the pull request merged and closed, `pull_request.closed` with `merged:
        true`, and the issues its body closes closed (when it targets the default branch). The
        merge commit's SHA; raises gitstore.MergeConflict when it does not merge cleanly."""
        assert pull.pull is not None
        owner, name = repository.owner.login, repository.name
        message = f"Merge pull request #{pull.number} from {owner}/{pull.pull.head_ref}\n\n{pull.title}"
        before = await self.in_thread(self.git.refs, owner, name)
        sha = await self.in_thread(
            self.git.merge,
            owner,
            name,
            pull.pull.base_ref,
            pull.pull.head_sha,
            message=message,
            author=actor.login,
            email=f"{actor.id}+{actor.login}@users.noreply.github.com",
        )
        after = await self.in_thread(self.git.refs, owner, name)
        with self.state.locked():
            pull.pull.merged_at = self.state.now()
            pull.pull.merge_commit_sha = sha
            pull.pull.merged_by = actor
        self.state.update_issue(pull, actor, state="closed")
        await self.pushed(repository, before, after, actor)
        self.emit(events.pull_request_event(self.renderer, "closed", repository, pull, actor))
        if pull.pull.base_ref == repository.default_branch:
            for number in closing_references(pull.body):
                closed = repository.issues.get(number)
                if closed is not None and closed.pull is None and closed.state == "open":
                    self.update_issue(repository, closed, actor, state="closed")
        return sha

    def branch_deleted(self, repository: Repository, branch: str, actor: Account) -> None:
        """After a branch is deleted: GitHub closes the open pull requests from or into it."""
        for pull in self.state.pulls(repository):
            assert pull.pull is not None
            if branch in (pull.pull.head_ref, pull.pull.base_ref):
                self.state.update_issue(pull, actor, state="closed")
                self.emit(events.pull_request_event(self.renderer, "closed", repository, pull, actor))

    # check runs

    async def check_run_created(self, repository: Repository, run: CheckRun, actor: Account, completed: bool) -> None:
        self.emit(events.check_run_event(self.renderer, "created", repository, run, actor))
        if completed:
            self.emit(events.check_run_event(self.renderer, "completed", repository, run, actor))
            await self._suite_completed(repository, run, actor)

    async def check_run_updated(self, repository: Repository, run: CheckRun, actor: Account, completed: bool) -> None:
        if completed:
            self.emit(events.check_run_event(self.renderer, "completed", repository, run, actor))
            await self._suite_completed(repository, run, actor)

    async def _suite_completed(self, repository: Repository, run: CheckRun, actor: Account) -> None:
        """`check_suite.completed` once the run's suite has no run left unfinished (again, when a run
        added to a finished suite finishes)."""
        suite = self.state.check_suites[run.suite_id]
        if all(other.status == "completed" for other in self.state.suite_runs(suite)):
            head = await self.in_thread(self.git.head_commit, repository.owner.login, repository.name, suite.head_sha)
            self.emit(events.check_suite_event(self.renderer, "completed", repository, suite, actor, head))

    async def report_ci(self, repository: Repository, sha: str, runs: Sequence[CiRun]) -> CheckSuite:
        """The repository's CI (`ci_app`) reports on commit `sha`: its suite there gets `runs`, each
        finished, then GitHub says so: `check_run` created and completed for each, and one
        `check_suite.completed` (sent to every App subscribed, lanebot's too)."""
        owner, name = repository.owner.login, repository.name
        branch = await self.in_thread(self.git.branch_at, owner, name, sha)
        before = await self.in_thread(self.git.parent, owner, name, sha)
        suite = self.state.check_suite_for(repository, sha, branch, before, app_id=self.ci_app.id)
        created = [self.state.create_check_run(repository, suite, name=run.name, fields=run.fields) for run in runs]
        actor = self.ci_app.bot
        for run in created:
            self.emit(events.check_run_event(self.renderer, "created", repository, run, actor))
            self.emit(events.check_run_event(self.renderer, "completed", repository, run, actor))
        head = await self.in_thread(self.git.head_commit, owner, name, sha)
        self.emit(events.check_suite_event(self.renderer, "completed", repository, suite, actor, head))
        return suite

    def rerequest(self, repository: Repository, run: CheckRun, user: Account) -> None:
        self.emit(events.check_run_event(self.renderer, "rerequested", repository, run, user))

    def request_action(self, repository: Repository, run: CheckRun, user: Account, identifier: str) -> None:
        self.emit(
            events.check_run_event(self.renderer, "requested_action", repository, run, user, identifier=identifier)
        )
