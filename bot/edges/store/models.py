"""The database tables: what lanebot knows, as SQLModel classes.

The database is the single source of truth (DESIGN.md, "Durability and recovery"); comments,
labels and check runs are projections of these rows. Every timestamp is timezone-aware UTC,
on SQLite as on PostgreSQL. GitHub's own ids (installations, comments, reviews, check runs)
exceed 32 bits, so they are BIGINT. States are plain strings; the tuples below name the valid
ones and the store's helpers refuse anything else.

A change to these classes needs a new Alembic revision in `bot/edges/store/migrations/versions/`;
`tests/edges/test_store.py` fails while the models and the migrations disagree.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Index, LargeBinary, Text, UniqueConstraint
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator
from sqlmodel import Field, SQLModel

# Named constraints keep later SQLite batch migrations (which rebuild tables) able to find them.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = SQLModel.metadata

DELIVERY_STATUSES = ("pending", "processed", "failed")
RUN_STATES = (
    "planning",
    "awaiting_approval",
    "running",
    "integrating",
    "done",
    "blocked",
    "rejected",
    "cancelled",
    "failed",
)
# A run in one of these states no longer holds its issue; a `done` run holds it until closed.
RELEASED_RUN_STATES = ("rejected", "cancelled", "failed")
UNFINISHED_RUN_STATES = ("planning", "awaiting_approval", "running", "integrating", "blocked")
PLAN_SOURCES = ("agent", "hand")
LANE_STATES = ("pending", "running", "finished", "merged", "failed")
SESSION_KINDS = ("plan", "lane", "resolve", "integrate", "verify", "fix", "review")
SESSION_STATUSES = ("running", "succeeded", "failed", "lost", "cancelled")
# ci: a fix lane for the repository's failing CI; update: `/update` (bot.runner.pull_update)
REVIEW_REQUEST_KINDS = ("fix", "ci", "self", "update")
REVIEW_REQUEST_STATES = ("queued", "running", "done", "failed", "cancelled")


def utc_now() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as aware UTC on every dialect.

    SQLite has no time zones: values are stored as naive UTC text and given UTC back on read.
    A naive datetime is refused, because nothing could say which zone it meant.
    """

    impl = DateTime
    cache_ok = True

    def __init__(self) -> None:
        super().__init__(timezone=True)

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: pass an aware one, e.g. datetime.now(UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _timestamp(*, nullable: bool = False) -> Any:
    if nullable:
        return Field(default=None, sa_type=UTCDateTime, nullable=True)
    return Field(default_factory=utc_now, sa_type=UTCDateTime, nullable=False)


def _github_id(*, nullable: bool = True, index: bool = False) -> Any:
    return Field(default=None, sa_type=BigInteger, nullable=nullable, index=index)


def _text(*, nullable: bool = True) -> Any:
    return Field(default=None, sa_type=Text, nullable=nullable)


class Delivery(SQLModel, table=True):
    """One webhook delivery from GitHub, stored before lanebot answers it."""

    __tablename__ = "deliveries"
    # AUTOINCREMENT on SQLite: a seq is never reused, so seq order stays the arrival order.
    __table_args__ = (
        Index("ix_deliveries_status_seq", "status", "seq"),
        {"sqlite_autoincrement": True},
    )

    seq: int | None = Field(default=None, primary_key=True)
    delivery_id: str = Field(unique=True, nullable=False)
    event: str = Field(nullable=False)
    action: str | None = Field(default=None)
    installation_id: int | None = _github_id()
    repository: str | None = Field(default=None)
    body: bytes = Field(sa_type=LargeBinary, nullable=False)
    received_at: datetime = _timestamp()
    status: str = Field(default="pending", nullable=False)
    error: str | None = _text()
    processed_at: datetime | None = _timestamp(nullable=True)


class Installation(SQLModel, table=True):
    """An installation of the App on an account, as the installation events last described it."""

    __tablename__ = "installations"

    id: int = Field(sa_type=BigInteger, primary_key=True, sa_column_kwargs={"autoincrement": False})
    account_login: str = Field(nullable=False)
    account_type: str = Field(nullable=False)
    repository_selection: str = Field(nullable=False)
    suspended: bool = Field(default=False, nullable=False)
    deleted: bool = Field(default=False, nullable=False)
    updated_at: datetime = _timestamp()


class Run(SQLModel, table=True):
    """One issue's way from plan to pull request."""

    __tablename__ = "runs"

    id: int | None = Field(default=None, primary_key=True)
    installation_id: int = Field(sa_type=BigInteger, nullable=False)
    repository: str = Field(nullable=False)
    issue_number: int = Field(nullable=False)
    state: str = Field(default="planning", nullable=False)
    requested_by: str = Field(nullable=False)
    plan_revision: int = Field(default=0, nullable=False)
    approved_revision: int | None = Field(default=None)
    # The issue as it was when the plan was approved (the `/approve` comment's delivery): what every
    # later step (lanes, integrate, the pull request) reads, never the issue as edited since.
    approved_issue_title: str | None = _text()
    approved_issue_body: str | None = _text()
    integration_branch: str | None = Field(default=None)
    pr_number: int | None = Field(default=None)
    gate_comment_id: int | None = _github_id()
    progress_comment_id: int | None = _github_id()
    base_sha: str | None = Field(default=None)
    error: str | None = _text()
    # `/hold`: who held the run, why and since when; all NULL when it is not held. A flag beside
    # `state`, not a state (bot/core/lifecycle.py): a held run keeps building what is running.
    held_by: str | None = Field(default=None)
    held_reason: str | None = _text()
    held_at: datetime | None = _timestamp(nullable=True)
    # The state whose label lanebot last set on the issue (a hint: a label a person changed since
    # is put right at the next state change, as it always was).
    labelled_state: str | None = Field(default=None)
    created_at: datetime = _timestamp()
    updated_at: datetime = _timestamp()
    # "owner/name#issue" while the run holds its issue, NULL after: a UNIQUE column allows many
    # NULLs on both SQLite and PostgreSQL, so this is "one active run per issue" in the database.
    active_key: str | None = Field(default=None, unique=True)


class Plan(SQLModel, table=True):
    """One revision of a run's unit graph, as JSONL."""

    __tablename__ = "plans"
    __table_args__ = (UniqueConstraint("run_id", "revision"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False)
    revision: int = Field(nullable=False)
    units_jsonl: str = Field(sa_type=Text, nullable=False)
    source: str = Field(nullable=False)
    feedback: str | None = _text()
    problems: str | None = _text()
    created_at: datetime = _timestamp()


class Lane(SQLModel, table=True):
    """One unit of an approved plan, run as its own agent session on its own branch."""

    __tablename__ = "lanes"
    __table_args__ = (UniqueConstraint("run_id", "unit_id"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False)
    unit_id: str = Field(nullable=False)
    round: int = Field(nullable=False)
    state: str = Field(default="pending", nullable=False)
    attempts_used: int = Field(default=0, nullable=False)
    branch: str | None = Field(default=None)
    base_sha: str | None = Field(default=None)
    head_sha: str | None = Field(default=None)
    failure: str | None = _text()
    check_run_id: int | None = _github_id()
    started_at: datetime | None = _timestamp(nullable=True)
    finished_at: datetime | None = _timestamp(nullable=True)
    merged_at: datetime | None = _timestamp(nullable=True)


class AgentSession(SQLModel, table=True):
    """One agent process: a planner, a lane attempt, a resolver, the integrator, a repair, a review."""

    __tablename__ = "agent_sessions"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False, index=True)
    lane_id: int | None = Field(default=None, foreign_key="lanes.id", index=True)
    kind: str = Field(nullable=False)
    attempt: int = Field(nullable=False)
    counts_as_retry: bool = Field(default=True, nullable=False)
    status: str = Field(default="running", nullable=False)
    host: str | None = Field(default=None)
    pid: int | None = Field(default=None)
    transcript_path: str | None = Field(default=None)
    exit_status: int | None = Field(default=None)
    failure: str | None = _text()
    input_tokens: int | None = Field(default=None)
    output_tokens: int | None = Field(default=None)
    cost_usd: float | None = Field(default=None)
    started_at: datetime = _timestamp()
    ended_at: datetime | None = _timestamp(nullable=True)
    # A lane attempt's check: when it began (the agent's part ends there), the end of its output
    # whether it passed or not, and the attempt's committed diff as `git diff --numstat` lines.
    check_started_at: datetime | None = _timestamp(nullable=True)
    check_output: str | None = _text()
    diff_stat: str | None = _text()


class ReviewRequest(SQLModel, table=True):
    """One piece of review work on a run's pull request: a fix lane (for a review or `/fix`, or for
    failing CI), or lanebot's own review.

    A run does one at a time, oldest first. `dedupe_key` (`review:<id>`, `comment:<id>`,
    `ci:<check suite id>`, `self:<run>:<head sha>`) is UNIQUE, so a redelivered webhook never queues the same work twice.
    """

    __tablename__ = "review_requests"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False, index=True)
    pr_number: int = Field(nullable=False)
    kind: str = Field(nullable=False)
    dedupe_key: str = Field(unique=True, nullable=False)
    requested_by: str = Field(nullable=False)
    review_id: int | None = _github_id()
    comment_id: int | None = _github_id()
    notes: str | None = _text()
    state: str = Field(default="queued", nullable=False)
    head_sha: str | None = Field(default=None)
    result: str | None = _text()
    error: str | None = _text()
    created_at: datetime = _timestamp()
    started_at: datetime | None = _timestamp(nullable=True)
    finished_at: datetime | None = _timestamp(nullable=True)

    def outcome(self) -> dict[str, Any] | None:
        """What came of the request, decoded from `result`'s JSON text (None until it is set)."""
        return None if self.result is None else json.loads(self.result)


class RunEvent(SQLModel, table=True):
    """What happened to a run, in order. Rows are only ever appended."""

    __tablename__ = "run_events"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False, index=True)
    at: datetime = _timestamp()
    kind: str = Field(nullable=False)
    data: str = Field(default="{}", sa_type=Text, nullable=False)

    def payload(self) -> dict[str, Any]:
        """The event's data, decoded from its JSON text."""
        payload: dict[str, Any] = json.loads(self.data)
        return payload


class ApproverPin(SQLModel, table=True):
    """The GitHub user id a login listed in `gate.approvers` first resolved to (`GET /users/{login}`).

    A login can be renamed and registered by someone else; the pin keeps it standing for the account
    it named when lanebot first read it, across restarts (bot.edges.github.permissions). `login` is in
    lower case, as GitHub compares logins. Removing a row lets the login be resolved afresh.
    """

    __tablename__ = "approver_pins"

    login: str = Field(primary_key=True)
    user_id: int = Field(sa_type=BigInteger, nullable=False)
    pinned_at: datetime = _timestamp()


class JobLease(SQLModel, table=True):
    """A job of a run (`Job.key` as text) held by one runner host until `expires_at`, which that host
    renews while the job runs (bot.runner.worker). A lease that ran out means its host is gone: the
    job is taken over (bot.runner.orchestrator). `released_at` is set when the job ended there."""

    __tablename__ = "job_leases"

    job_key: str = Field(primary_key=True)
    run_id: int = Field(foreign_key="runs.id", nullable=False, index=True)
    holder: str = Field(nullable=False)
    acquired_at: datetime = _timestamp()
    expires_at: datetime = _timestamp()
    released_at: datetime | None = _timestamp(nullable=True)
