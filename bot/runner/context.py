"""What a step receives as its `context`: small interfaces, not the app's concrete objects.

A step (plan, build, a lane, a review request) needs the database, a way to reach GitHub as the App,
a few of the host's settings and, when it hands work on, the background jobs. Each part is declared
here as the narrow Protocol the steps use, and the contexts below combine only the parts a step
reads, so a test may pass any object with those members (a one-field dataclass is enough where a
step reads only `engine`), and the app passes its real ones (bot.web.dispatcher.HandlerContext,
bot.runner.jobs.Jobs, bot.edges.github.client.GitHubApp).

Who takes which context:

- `EngineContext` (engine): what only reads and writes rows (the review queue's `resume`, `lane_views`).
- `GitHubContext` (engine, github): what also talks to GitHub (`publish_gate`, `publish_progress`,
  a review request's comment).
- `JobsContext` (engine, jobs): what hands work on (`request_self_review`, the review queue's `cancel`).
- `IssueContext` (engine, github, jobs): what also sets an issue's state label, under the jobs'
  per-issue lock (`follow_labels`, `request_fix`).
- `RuntimeContext` (engine, github, settings): what loads a run's `Runtime` (a lane, a merge, a fix
  lane, lanebot's own review).
- `RunnerContext` (all four): what drives a run or plans it (the orchestrator, `plan_run`, the
  integrate step, `close_pull_request`, `Jobs`).

Two extras are read with getattr and a typed default, because a Protocol cannot declare a member
that may be absent: `context.executor` (bot.runner.orchestrator.executor_for) and
`context.progress_interval_s`; so is `settings.commit_author` (bot.runner.runtime.commit_identity).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine

from bot.edges.github.client import RateLimitWait

__all__ = [
    "BackgroundJobs",
    "EngineContext",
    "GitHubAccess",
    "GitHubContext",
    "InstallationTokens",
    "IssueContext",
    "JobsContext",
    "RunnerContext",
    "RunnerSettings",
    "RuntimeContext",
]


class InstallationTokens(Protocol):
    """Installation access tokens, scoped to one repository (git pushes with them)."""

    async def token(self, installation_id: int, repository: str | None) -> str: ...


class GitHubAccess(Protocol):
    """GitHub as the App: a client per installation (scoped to a repository, or to every one when None),
    and the App's own client (for `GET /app`, the slug of its bot account)."""

    @property
    def tokens(self) -> InstallationTokens: ...

    def installation_client(self, installation_id: int, repository: str | None) -> GitHubAPI: ...

    def app_client(self) -> GitHubAPI: ...

    def rate_limit_waits(self, installation_id: int | None) -> tuple[RateLimitWait, ...]: ...


class RunnerSettings(Protocol):
    """The host's settings a step reads."""

    @property
    def app_id(self) -> str: ...

    @property
    def workdir(self) -> Path: ...

    @property
    def max_lanes(self) -> int: ...

    @property
    def max_runs_per_repo(self) -> int: ...


class BackgroundJobs(Protocol):
    """Work a step or a handler hands on, to run after it returns (bot.runner.jobs.Jobs)."""

    def plan(self, run_id: int) -> None: ...

    def build(self, run_id: int) -> None: ...

    def publish_gate(self, run_id: int) -> None: ...

    def retry(self, run_id: int, unit: str | None) -> None: ...

    def review(self, run_id: int) -> None: ...

    async def stop_review(self, run_id: int) -> None: ...

    async def cancel(self, run_id: int, *, building: bool) -> None: ...

    def issue_lock(self, repository: str, issue_number: int) -> AbstractAsyncContextManager[object]: ...


class EngineContext(Protocol):
    """The database."""

    @property
    def engine(self) -> Engine: ...


class GitHubContext(EngineContext, Protocol):
    """The database and GitHub."""

    @property
    def github(self) -> GitHubAccess: ...


class JobsContext(EngineContext, Protocol):
    """The database and the background jobs (None in a process without them)."""

    @property
    def jobs(self) -> BackgroundJobs | None: ...


class IssueContext(GitHubContext, JobsContext, Protocol):
    """The database, GitHub and the background jobs."""


class RuntimeContext(GitHubContext, Protocol):
    """The database, GitHub and the host's settings: what a run's `Runtime` is loaded from."""

    @property
    def settings(self) -> RunnerSettings: ...


class RunnerContext(RuntimeContext, IssueContext, Protocol):
    """The database, GitHub, the host's settings, and the background jobs (None in a process without them)."""
