"""The sandbox's world, in memory: accounts, the App and its installations, repositories and
everything inside them (issues, pull requests, comments, labels, reactions, check runs, reviews,
review comments and their threads, review requests).

Pure bookkeeping, no I/O: git facts (branch tips, commit counts) are handed in by the caller,
which has asked git for them. Every mutation takes the state's lock, so a caller on another
thread (a test, a git subprocess waiter) sees whole changes only. Names are matched without
regard to case, as GitHub does for logins, repository names and labels.
"""

from __future__ import annotations

import base64
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

AccountType = Literal["User", "Organization", "Bot"]
Role = Literal["admin", "maintain", "write", "triage", "read"]
ROLES: tuple[Role, ...] = ("admin", "maintain", "write", "triage", "read")
# The bare `permission` field of the collaborator-permission answer folds the two newer roles.
FOLDED_PERMISSION: dict[str, str] = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}
ROLE_FLAGS: dict[str, dict[str, bool]] = {
    "admin": {"admin": True, "maintain": True, "push": True, "triage": True, "pull": True},
    "maintain": {"admin": False, "maintain": True, "push": True, "triage": True, "pull": True},
    "write": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
    "triage": {"admin": False, "maintain": False, "push": False, "triage": True, "pull": True},
    "read": {"admin": False, "maintain": False, "push": False, "triage": False, "pull": True},
}
NO_ACCESS_FLAGS = {"admin": False, "maintain": False, "push": False, "triage": False, "pull": False}
REACTION_CONTENTS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
CHECK_STATUSES = ("queued", "in_progress", "completed")
CHECK_CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "stale", "timed_out")
REVIEW_STATES = {"approve": "approved", "request_changes": "changes_requested", "comment": "commented"}
SIDES = ("LEFT", "RIGHT")
# The labels GitHub gives every new repository.
DEFAULT_LABELS = (
    ("bug", "d73a4a", "Something isn't working"),
    ("documentation", "0075ca", "Improvements or additions to documentation"),
    ("duplicate", "cfd3d7", "This issue or pull request already exists"),
    ("enhancement", "a2eeef", "New feature or request"),
    ("good first issue", "7057ff", "Good for newcomers"),
    ("help wanted", "008672", "Extra attention is needed"),
    ("invalid", "e4e669", "This doesn't seem right"),
    ("question", "d876e3", "Further information is requested"),
    ("wontfix", "ffffff", "This will not be worked on"),
)
NEW_LABEL_COLOR = "ededed"


def utc_now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def node_id(kind: str, number: int) -> str:
    """GitHub's (legacy) global node ID: base64 of '<len(kind):02>:<Kind><id>'."""
    return base64.b64encode(f"{len(kind):02d}:{kind}{number}".encode()).decode()


@dataclass
class Account:
    login: str
    id: int
    node_id: str
    type: AccountType
    description: str | None = None


@dataclass
class AppRecord:
    id: int
    slug: str
    name: str
    client_id: str
    owner: Account
    bot: Account
    public_key_pem: str
    permissions: dict[str, str]
    events: list[str]
    hook_id: int
    created_at: datetime
    description: str = ""
    webhook_url: str | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    client_secret: str = field(default="", repr=False)  # the OAuth client's secret, for the web flow
    callback_urls: list[str] = field(default_factory=list)  # where the web flow may send a person back

    @property
    def node_id(self) -> str:
        return node_id("App", self.id)


@dataclass
class Installation:
    id: int
    account: Account
    app_id: int
    permissions: dict[str, str]
    events: list[str]
    created_at: datetime
    repository_ids: list[int] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("IntegrationInstallation", self.id)


@dataclass
class Label:
    id: int
    name: str
    color: str
    description: str | None
    default: bool

    @property
    def node_id(self) -> str:
        return node_id("Label", self.id)


@dataclass
class Reaction:
    id: int
    user: Account
    content: str
    created_at: datetime

    @property
    def node_id(self) -> str:
        return node_id("Reaction", self.id)


@dataclass
class Comment:
    id: int
    repository_id: int
    issue_number: int
    user: Account
    body: str
    created_at: datetime
    updated_at: datetime
    by_app: bool
    reactions: list[Reaction] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("IssueComment", self.id)


@dataclass
class PullFields:
    """What a pull request has beyond its issue: branches, tips and what git says of them."""

    id: int
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    draft: bool
    maintainer_can_modify: bool
    commits: int = 0
    additions: int = 0
    deletions: int = 0
    changed_files: int = 0
    merged_at: datetime | None = None
    merge_commit_sha: str | None = None
    merged_by: Account | None = None
    requested_reviewers: list[Account] = field(default_factory=list)
    # (base tip, head, whether head merges into it): GitHub's lazily computed mergeability.
    mergeability: tuple[str, str, bool] | None = None

    @property
    def node_id(self) -> str:
        return node_id("PullRequest", self.id)


@dataclass
class Issue:
    """An issue, or the issue half of a pull request (they share one number space)."""

    id: int
    number: int
    repository_id: int
    user: Account
    title: str
    body: str | None
    created_at: datetime
    updated_at: datetime
    state: Literal["open", "closed"] = "open"
    state_reason: str | None = None
    closed_at: datetime | None = None
    closed_by: Account | None = None
    labels: list[Label] = field(default_factory=list)
    comment_ids: list[int] = field(default_factory=list)
    reactions: list[Reaction] = field(default_factory=list)
    pull: PullFields | None = None

    @property
    def node_id(self) -> str:
        return node_id("Issue", self.id)

    @property
    def is_pull(self) -> bool:
        return self.pull is not None


@dataclass
class Review:
    id: int
    repository_id: int
    pull_number: int
    user: Account
    body: str | None
    state: str
    commit_id: str
    submitted_at: datetime

    @property
    def node_id(self) -> str:
        return node_id("PullRequestReview", self.id)


@dataclass(frozen=True)
class ReviewPlace:
    """Where a review comment sits in a pull request's diff at one commit, as git showed it."""

    path: str
    side: str
    line: int
    start_line: int | None
    start_side: str | None
    position: int
    diff_hunk: str
    commit_id: str


@dataclass
class ReviewComment:
    """A comment on a line of a pull request's diff: a thread's root, or a reply in the root's thread
    (which shares the root's place). `line` and `position` become None once the line is outdated."""

    id: int
    repository_id: int
    pull_number: int
    review_id: int
    user: Account
    body: str
    path: str
    side: str
    line: int | None
    original_line: int
    start_line: int | None
    original_start_line: int | None
    start_side: str | None
    position: int | None
    original_position: int
    diff_hunk: str
    commit_id: str
    original_commit_id: str
    created_at: datetime
    updated_at: datetime
    in_reply_to_id: int | None = None
    reactions: list[Reaction] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("PullRequestReviewComment", self.id)

    @property
    def outdated(self) -> bool:
        return self.line is None

    @property
    def root_id(self) -> int:
        return self.in_reply_to_id or self.id


@dataclass
class ReviewThread:
    """A root review comment and its replies; resolved by someone, or not."""

    root_id: int
    repository_id: int
    pull_number: int
    resolved_by: Account | None = None

    @property
    def node_id(self) -> str:
        return node_id("PullRequestReviewThread", self.root_id)

    @property
    def resolved(self) -> bool:
        return self.resolved_by is not None


@dataclass
class CheckSuite:
    id: int
    repository_id: int
    app_id: int
    head_sha: str
    head_branch: str | None
    before: str
    created_at: datetime
    updated_at: datetime

    @property
    def node_id(self) -> str:
        return node_id("CheckSuite", self.id)


@dataclass
class CheckRun:
    id: int
    repository_id: int
    suite_id: int
    app_id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    started_at: datetime
    completed_at: datetime | None
    external_id: str
    details_url: str | None
    output: dict[str, object]
    actions: list[dict[str, str]]
    annotations: list[dict[str, object]] = field(default_factory=list)  # every one given, in order

    @property
    def node_id(self) -> str:
        return node_id("CheckRun", self.id)


@dataclass
class Repository:
    id: int
    owner: Account
    name: str
    private: bool
    default_branch: str
    description: str | None
    created_at: datetime
    updated_at: datetime
    pushed_at: datetime
    installation_id: int
    collaborators: dict[str, tuple[Account, Role]] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    reviews: list[Review] = field(default_factory=list)

    @property
    def node_id(self) -> str:
        return node_id("Repository", self.id)

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    @property
    def open_issues_count(self) -> int:
        return sum(1 for issue in self.issues.values() if issue.state == "open")

    def label(self, name: str) -> Label | None:
        return self.labels.get(name.lower())


def role_in(repository: Repository, login: str) -> Role | None:
    """The person's explicit role on the repository: the owning user is admin; collaborators have
    theirs; anyone else none (a public repository is readable by them all the same)."""
    if repository.owner.type == "User" and repository.owner.login.lower() == login.lower():
        return "admin"
    entry = repository.collaborators.get(login.lower())
    return entry[1] if entry else None


class DuplicatePullRequest(Exception):
    """An open pull request already has this head; GitHub refuses a second one."""

    def __init__(self, existing: Issue) -> None:
        super().__init__(f"pull request #{existing.number} is already open for this head")
        self.existing = existing


class LabelExists(Exception):
    """A label of that name (in any case) is already in the repository."""


class NotOnIssue(Exception):
    """The label is not on the issue."""


@dataclass(frozen=True)
class Ids:
    """Separate counters per kind, started far apart so IDs of different kinds never look alike."""

    accounts: Iterator[int] = field(default_factory=lambda: itertools.count(1001))
    repositories: Iterator[int] = field(default_factory=lambda: itertools.count(500_001))
    installations: Iterator[int] = field(default_factory=lambda: itertools.count(70_001))
    issues: Iterator[int] = field(default_factory=lambda: itertools.count(2_000_001))
    pulls: Iterator[int] = field(default_factory=lambda: itertools.count(3_000_001))
    comments: Iterator[int] = field(default_factory=lambda: itertools.count(4_000_001))
    labels: Iterator[int] = field(default_factory=lambda: itertools.count(5_000_001))
    reactions: Iterator[int] = field(default_factory=lambda: itertools.count(6_000_001))
    check_suites: Iterator[int] = field(default_factory=lambda: itertools.count(7_000_001))
    check_runs: Iterator[int] = field(default_factory=lambda: itertools.count(8_000_001))
    reviews: Iterator[int] = field(default_factory=lambda: itertools.count(9_000_001))
    review_comments: Iterator[int] = field(default_factory=lambda: itertools.count(11_000_001))


class SandboxState:
    """Everything the sandbox knows, and the only code that changes it."""

    def __init__(self, app: AppRecord, *, clock: Callable[[], datetime] = utc_now, ids: Ids | None = None) -> None:
        self.app = app
        self.apps: dict[int, AppRecord] = {app.id: app}  # the App, and other Apps installed beside it (CI)
        self.clock = clock
        self.ids = ids or Ids()
        self.lock = threading.RLock()
        self.accounts: dict[str, Account] = {app.owner.login.lower(): app.owner, app.bot.login.lower(): app.bot}
        self.installations: dict[int, Installation] = {}
        self.repositories: dict[str, Repository] = {}
        self.comments: dict[int, Comment] = {}
        self.check_suites: dict[int, CheckSuite] = {}
        self.check_runs: dict[int, CheckRun] = {}
        self.review_comments: dict[int, ReviewComment] = {}
        self.review_threads: dict[int, ReviewThread] = {}

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self.lock:
            yield

    def now(self) -> datetime:
        return self.clock().replace(microsecond=0)

    # Apps

    def add_app(self, app: AppRecord) -> None:
        """Another App on every installation's repositories (a CI service), with its bot account."""
        with self.lock:
            self.apps[app.id] = app
            self.accounts.setdefault(app.owner.login.lower(), app.owner)
            self.accounts.setdefault(app.bot.login.lower(), app.bot)

    def app_of(self, app_id: int) -> AppRecord:
        return self.apps[app_id]

    # accounts and installations

    def account(self, login: str, kind: AccountType = "User") -> Account:
        """The account of that login, created on first mention (humans appear when they act)."""
        with self.lock:
            existing = self.accounts.get(login.lower())
            if existing is not None:
                return existing
            number = next(self.ids.accounts)
            account = Account(login=login, id=number, node_id=node_id(kind, number), type=kind)
            self.accounts[login.lower()] = account
            return account

    def find_account(self, login: str) -> Account | None:
        return self.accounts.get(login.lower())

    def rename_account(self, login: str, new_login: str) -> Account:
        """A person renames their account, as on github.com: the id stays, everything they did shows
        the new login, their collaborator roles follow them, and the old login is free for anyone to
        register (the next mention of it is a new account with a new id)."""
        with self.lock:
            account = self.accounts.get(login.lower())
            if account is None or account.type != "User":
                raise ValueError(f"the sandbox has no user {login}")
            if new_login.lower() in self.accounts:
                raise ValueError(f"the login {new_login} is already taken")
            if any(repository.owner.id == account.id for repository in self.repositories.values()):
                raise ValueError(f"{login} owns repositories; the sandbox renames only people who own none")
            del self.accounts[login.lower()]
            account.login = new_login
            self.accounts[new_login.lower()] = account
            for repository in self.repositories.values():
                entry = repository.collaborators.pop(login.lower(), None)
                if entry is not None:
                    repository.collaborators[new_login.lower()] = entry
            return account

    def installation_for(self, account: Account) -> Installation:
        """The App's installation on this account, made when the account's first repository is."""
        with self.lock:
            for installation in self.installations.values():
                if installation.account.id == account.id:
                    return installation
            installation = Installation(
                id=next(self.ids.installations),
                account=account,
                app_id=self.app.id,
                permissions=dict(self.app.permissions),
                events=list(self.app.events),
                created_at=self.now(),
            )
            self.installations[installation.id] = installation
            return installation

    # repositories

    def create_repository(
        self,
        owner_login: str,
        name: str,
        *,
        owner_type: AccountType,
        private: bool,
        default_branch: str,
        description: str | None = None,
    ) -> Repository:
        with self.lock:
            key = f"{owner_login}/{name}".lower()
            if key in self.repositories:
                raise ValueError(f"repository {owner_login}/{name} already exists")
            owner = self.account(owner_login, owner_type)
            if owner.type != owner_type:
                raise ValueError(f"{owner_login} is already a {owner.type}, not a {owner_type}")
            installation = self.installation_for(owner)
            now = self.now()
            repository = Repository(
                id=next(self.ids.repositories),
                owner=owner,
                name=name,
                private=private,
                default_branch=default_branch,
                description=description,
                created_at=now,
                updated_at=now,
                pushed_at=now,
                installation_id=installation.id,
            )
            for label_name, color, label_description in DEFAULT_LABELS:
                repository.labels[label_name] = Label(next(self.ids.labels), label_name, color, label_description, True)
            installation.repository_ids.append(repository.id)
            self.repositories[key] = repository
            return repository

    def repository(self, owner: str, name: str) -> Repository | None:
        return self.repositories.get(f"{owner}/{name}".lower())

    def repository_by_id(self, repository_id: int) -> Repository | None:
        return next((repo for repo in self.repositories.values() if repo.id == repository_id), None)

    def set_collaborator(self, repository: Repository, login: str, role: Role) -> Account:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        with self.lock:
            account = self.account(login)
            repository.collaborators[login.lower()] = (account, role)
            return account

    def remove_collaborator(self, repository: Repository, login: str) -> tuple[Account, Role] | None:
        """Take the person's collaborator role away; what they had, or None when they were none."""
        with self.lock:
            return repository.collaborators.pop(login.lower(), None)

    def collaborator_role(self, repository: Repository, login: str) -> Role | None:
        """The role the person was given as a collaborator (not the owner's implied admin)."""
        entry = repository.collaborators.get(login.lower())
        return entry[1] if entry else None

    def role_of(self, repository: Repository, login: str) -> Role | None:
        """The user's role: the owning user is admin; collaborators have theirs; others none."""
        return role_in(repository, login)

    def touch(self, repository: Repository, *, pushed: bool = False) -> None:
        now = self.now()
        repository.updated_at = now
        if pushed:
            repository.pushed_at = now

    # issues and pull requests

    def _next_number(self, repository: Repository) -> int:
        return max(repository.issues, default=0) + 1

    def open_issue(self, repository: Repository, user: Account, title: str, body: str | None) -> Issue:
        with self.lock:
            now = self.now()
            issue = Issue(
                id=next(self.ids.issues),
                number=self._next_number(repository),
                repository_id=repository.id,
                user=user,
                title=title,
                body=body,
                created_at=now,
                updated_at=now,
            )
            repository.issues[issue.number] = issue
            return issue

    def update_issue(
        self,
        issue: Issue,
        actor: Account,
        *,
        title: str | None = None,
        body: str | None = None,
        state: str | None = None,
        state_reason: str | None = None,
    ) -> dict[str, dict[str, object]]:
        """Apply the given fields; returns what changed as GitHub's `changes` ({field: {from: old}})."""
        with self.lock:
            changes: dict[str, dict[str, object]] = {}
            if title is not None and title != issue.title:
                changes["title"] = {"from": issue.title}
                issue.title = title
            if body is not None and body != issue.body:
                changes["body"] = {"from": issue.body}
                issue.body = body
            if state is not None and state != issue.state:
                changes["state"] = {"from": issue.state}
                issue.state = state  # type: ignore[assignment]
                closing = state == "closed"
                issue.closed_at = self.now() if closing else None
                issue.closed_by = actor if closing else None
                issue.state_reason = (state_reason or "completed") if closing else "reopened"
            if changes:
                issue.updated_at = self.now()
            return changes

    def open_pull(
        self,
        repository: Repository,
        user: Account,
        *,
        title: str,
        body: str | None,
        head_ref: str,
        head_sha: str,
        base_ref: str,
        base_sha: str,
        draft: bool,
        maintainer_can_modify: bool,
    ) -> Issue:
        """A new pull request; raises DuplicatePullRequest while another open one has this head."""
        with self.lock:
            for issue in repository.issues.values():
                if issue.pull and issue.state == "open" and issue.pull.head_ref == head_ref:
                    raise DuplicatePullRequest(issue)
            issue = self.open_issue(repository, user, title, body)
            issue.pull = PullFields(
                id=next(self.ids.pulls),
                head_ref=head_ref,
                head_sha=head_sha,
                base_ref=base_ref,
                base_sha=base_sha,
                draft=draft,
                maintainer_can_modify=maintainer_can_modify,
            )
            return issue

    def pulls(
        self, repository: Repository, *, state: str = "open", head_ref: str | None = None, base_ref: str | None = None
    ) -> list[Issue]:
        found = [issue for issue in repository.issues.values() if issue.pull is not None]
        if state != "all":
            found = [issue for issue in found if issue.state == state]
        if head_ref is not None:
            found = [issue for issue in found if issue.pull and issue.pull.head_ref == head_ref]
        if base_ref is not None:
            found = [issue for issue in found if issue.pull and issue.pull.base_ref == base_ref]
        return found

    def open_pulls_at(self, repository: Repository, sha: str) -> list[Issue]:
        return [issue for issue in self.pulls(repository) if issue.pull and issue.pull.head_sha == sha]

    def add_review(
        self,
        repository: Repository,
        pull: Issue,
        user: Account,
        *,
        state: str,
        body: str | None,
        commit_id: str | None = None,
    ) -> Review:
        """A submitted review (at the head unless `commit_id` says otherwise); it answers the
        user's review request, so they leave the pull request's requested reviewers."""
        assert pull.pull is not None
        with self.lock:
            review = Review(
                id=next(self.ids.reviews),
                repository_id=repository.id,
                pull_number=pull.number,
                user=user,
                body=body,
                state=state,
                commit_id=commit_id or pull.pull.head_sha,
                submitted_at=self.now(),
            )
            repository.reviews.append(review)
            pull.pull.requested_reviewers = [a for a in pull.pull.requested_reviewers if a.id != user.id]
            return review

    def reviews_of(self, repository: Repository, pull: Issue) -> list[Review]:
        return [review for review in repository.reviews if review.pull_number == pull.number]

    # review comments, threads and review requests

    def add_review_comment(
        self, repository: Repository, pull: Issue, review: Review, user: Account, body: str, place: ReviewPlace
    ) -> ReviewComment:
        """A new thread: its root comment, at `place`."""
        with self.lock:
            now = self.now()
            comment = ReviewComment(
                id=next(self.ids.review_comments),
                repository_id=repository.id,
                pull_number=pull.number,
                review_id=review.id,
                user=user,
                body=body,
                path=place.path,
                side=place.side,
                line=place.line,
                original_line=place.line,
                start_line=place.start_line,
                original_start_line=place.start_line,
                start_side=place.start_side,
                position=place.position,
                original_position=place.position,
                diff_hunk=place.diff_hunk,
                commit_id=place.commit_id,
                original_commit_id=place.commit_id,
                created_at=now,
                updated_at=now,
            )
            self.review_comments[comment.id] = comment
            self.review_threads[comment.id] = ReviewThread(comment.id, repository.id, pull.number)
            pull.updated_at = now
            return comment

    def add_reply(self, pull: Issue, review: Review, user: Account, body: str, to: ReviewComment) -> ReviewComment:
        """A reply in the thread of `to`: a reply to a reply joins the root's thread, as on GitHub."""
        with self.lock:
            root = self.review_comments[to.root_id]
            now = self.now()
            reply = ReviewComment(
                id=next(self.ids.review_comments),
                repository_id=root.repository_id,
                pull_number=root.pull_number,
                review_id=review.id,
                user=user,
                body=body,
                path=root.path,
                side=root.side,
                line=root.line,
                original_line=root.original_line,
                start_line=root.start_line,
                original_start_line=root.original_start_line,
                start_side=root.start_side,
                position=root.position,
                original_position=root.original_position,
                diff_hunk=root.diff_hunk,
                commit_id=root.commit_id,
                original_commit_id=root.original_commit_id,
                created_at=now,
                updated_at=now,
                in_reply_to_id=root.id,
            )
            self.review_comments[reply.id] = reply
            pull.updated_at = now
            return reply

    def review_comments_of(self, repository: Repository, pull: Issue) -> list[ReviewComment]:
        """The pull request's review comments, oldest first."""
        return sorted(
            (
                c
                for c in self.review_comments.values()
                if c.repository_id == repository.id and c.pull_number == pull.number
            ),
            key=lambda c: c.id,
        )

    def threads_of(self, repository: Repository, pull: Issue) -> list[ReviewThread]:
        return sorted(
            (
                t
                for t in self.review_threads.values()
                if t.repository_id == repository.id and t.pull_number == pull.number
            ),
            key=lambda t: t.root_id,
        )

    def thread_comments(self, thread: ReviewThread) -> list[ReviewComment]:
        return sorted((c for c in self.review_comments.values() if c.root_id == thread.root_id), key=lambda c: c.id)

    def resolve_thread(self, thread: ReviewThread, by: Account | None) -> None:
        """Mark the thread resolved by `by`, or unresolved (None)."""
        with self.lock:
            thread.resolved_by = by

    def move_thread(self, thread: ReviewThread, commit_id: str | None) -> None:
        """The head moved: the thread's comments now sit at `commit_id`, or are outdated (None),
        keeping the commit they last applied to."""
        with self.lock:
            for comment in self.thread_comments(thread):
                if commit_id is None:
                    comment.line = comment.start_line = comment.position = None
                else:
                    comment.commit_id = commit_id

    def request_reviewers(self, pull: Issue, accounts: list[Account]) -> list[Account]:
        """Add review requests; returns the accounts newly requested."""
        assert pull.pull is not None
        with self.lock:
            added: list[Account] = []
            for account in accounts:
                if all(requested.id != account.id for requested in pull.pull.requested_reviewers):
                    pull.pull.requested_reviewers.append(account)
                    added.append(account)
            if added:
                pull.updated_at = self.now()
            return added

    # labels

    def create_label(self, repository: Repository, name: str, color: str, description: str | None) -> Label:
        with self.lock:
            if repository.label(name) is not None:
                raise LabelExists(name)
            label = Label(next(self.ids.labels), name, color.lstrip("#").lower(), description, False)
            repository.labels[name.lower()] = label
            return label

    def update_label(
        self, repository: Repository, label: Label, *, new_name: str | None, color: str | None, description: str | None
    ) -> Label:
        """Rename or restyle a label; issues that hold it hold the changed label."""
        with self.lock:
            if new_name is not None and new_name.lower() != label.name.lower():
                if repository.label(new_name) is not None:
                    raise LabelExists(new_name)
                del repository.labels[label.name.lower()]
                repository.labels[new_name.lower()] = label
            if new_name is not None:
                label.name = new_name
            if color is not None:
                label.color = color.lstrip("#").lower()
            if description is not None:
                label.description = description
            return label

    def add_labels(self, repository: Repository, issue: Issue, names: list[str]) -> list[Label]:
        """Put labels on the issue, creating unknown ones as GitHub does; returns those newly added."""
        with self.lock:
            added: list[Label] = []
            for name in names:
                label = repository.label(name) or self.create_label(repository, name, NEW_LABEL_COLOR, None)
                if all(existing.id != label.id for existing in issue.labels):
                    issue.labels.append(label)
                    added.append(label)
            if added:
                issue.updated_at = self.now()
            return added

    def remove_label(self, issue: Issue, name: str) -> Label:
        with self.lock:
            for label in issue.labels:
                if label.name.lower() == name.lower():
                    issue.labels.remove(label)
                    issue.updated_at = self.now()
                    return label
            raise NotOnIssue(name)

    # comments and reactions

    def add_comment(self, repository: Repository, issue: Issue, user: Account, body: str, *, by_app: bool) -> Comment:
        with self.lock:
            now = self.now()
            comment = Comment(
                id=next(self.ids.comments),
                repository_id=repository.id,
                issue_number=issue.number,
                user=user,
                body=body,
                created_at=now,
                updated_at=now,
                by_app=by_app,
            )
            self.comments[comment.id] = comment
            issue.comment_ids.append(comment.id)
            issue.updated_at = now
            return comment

    def comments_of(self, issue: Issue) -> list[Comment]:
        return [self.comments[comment_id] for comment_id in issue.comment_ids]

    def edit_comment(self, comment: Comment, body: str) -> str:
        """Set the body; returns the old one."""
        with self.lock:
            old = comment.body
            comment.body = body
            comment.updated_at = self.now()
            return old

    def react(self, reactions: list[Reaction], user: Account, content: str) -> tuple[Reaction, bool]:
        """The user's reaction of this content, and whether it is new (GitHub keeps one of each)."""
        with self.lock:
            for reaction in reactions:
                if reaction.user.id == user.id and reaction.content == content:
                    return reaction, False
            reaction = Reaction(next(self.ids.reactions), user, content, self.now())
            reactions.append(reaction)
            return reaction, True

    # check runs

    def check_suite_for(
        self, repository: Repository, head_sha: str, head_branch: str | None, before: str, *, app_id: int | None = None
    ) -> CheckSuite:
        """The suite of the App (`app_id`, by default lanebot's) for this commit: one per (app,
        repository, head SHA)."""
        app_id = self.app.id if app_id is None else app_id
        with self.lock:
            for suite in self.check_suites.values():
                if suite.repository_id == repository.id and suite.head_sha == head_sha and suite.app_id == app_id:
                    return suite
            now = self.now()
            suite = CheckSuite(
                id=next(self.ids.check_suites),
                repository_id=repository.id,
                app_id=app_id,
                head_sha=head_sha,
                head_branch=head_branch,
                before=before,
                created_at=now,
                updated_at=now,
            )
            self.check_suites[suite.id] = suite
            return suite

    def create_check_run(
        self, repository: Repository, suite: CheckSuite, *, name: str, fields: dict[str, object]
    ) -> CheckRun:
        with self.lock:
            now = self.now()
            run = CheckRun(
                id=next(self.ids.check_runs),
                repository_id=repository.id,
                suite_id=suite.id,
                app_id=suite.app_id,
                name=name,
                head_sha=suite.head_sha,
                status="queued",
                conclusion=None,
                started_at=now,
                completed_at=None,
                external_id="",
                details_url=None,
                output={"title": None, "summary": None, "text": None, "annotations_count": 0},
                actions=[],
            )
            self.update_check_run(run, fields)
            self.check_runs[run.id] = run
            return run

    def update_check_run(self, run: CheckRun, fields: dict[str, object]) -> bool:
        """Apply validated fields; returns True when this update completed the run."""
        with self.lock:
            was_completed = run.status == "completed"
            for key in ("name", "external_id", "details_url"):
                if key in fields:
                    setattr(run, key, fields[key])
            if "started_at" in fields:
                run.started_at = fields["started_at"]  # type: ignore[assignment]
            if "status" in fields:
                run.status = str(fields["status"])
            if "conclusion" in fields:
                run.conclusion = fields["conclusion"]  # type: ignore[assignment]
                run.status = "completed"
            if run.status == "completed":
                run.completed_at = fields.get("completed_at") or run.completed_at or self.now()  # type: ignore[assignment]
            if "output" in fields:
                output = dict(fields["output"])  # type: ignore[call-overload]
                annotations = output.pop("annotations", None) or []
                run.annotations.extend(dict(annotation) for annotation in annotations)  # GitHub appends them
                count = len(run.annotations)
                run.output = {
                    "title": output.get("title"),
                    "summary": output.get("summary"),
                    "text": output.get("text"),
                    "annotations_count": count,
                }
            if "actions" in fields:
                run.actions = list(fields["actions"])  # type: ignore[call-overload]
            suite = self.check_suites[run.suite_id] if run.suite_id in self.check_suites else None
            if suite is not None:
                suite.updated_at = self.now()
            return run.status == "completed" and not was_completed

    def check_runs_of(self, repository: Repository, head_sha: str | None = None) -> list[CheckRun]:
        runs = [run for run in self.check_runs.values() if run.repository_id == repository.id]
        if head_sha is not None:
            runs = [run for run in runs if run.head_sha == head_sha]
        return runs

    def suite_runs(self, suite: CheckSuite) -> list[CheckRun]:
        return [run for run in self.check_runs.values() if run.suite_id == suite.id]
