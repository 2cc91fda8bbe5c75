"""What a step receives as its `context`: small interfaces, not the app's concrete objects.

A step (plan, build, a lane, a review request) needs the database, a way to reach GitHub as the App,
a few of the host's settings and, when it hands work on, the background jobs. Each is declared here as
the narrow Protocol the steps use, so a test may pass any object with those members (a two-field
dataclass is enough where a step reads only `engine`), and the app passes its real ones
(bot.web.dispatcher.HandlerContext, bot.runner.jobs.Jobs, bot.edges.github.client.GitHubApp).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine

__all__ = ["BackgroundJobs", "GitHubAccess", "InstallationTokens", "RunnerContext", "RunnerSettings"]


class InstallationTokens(Protocol):
    """Installation access tokens, scoped to one repository (git pushes with them)."""

    async def token(self, installation_id: int, repository: str | None) -> str: ...


class GitHubAccess(Protocol):
    """GitHub as the App: a client per installation (scoped to a repository, or to every one when None)."""

    @property
    def tokens(self) -> InstallationTokens: ...

    def installation_client(self, installation_id: int, repository: str | None) -> GitHubAPI: ...


class RunnerSettings(Protocol):
    """The host's settings a step reads."""

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


class RunnerContext(Protocol):
    """The database, GitHub, the host's settings, and the background jobs (None in a process without them)."""

    @property
    def engine(self) -> Engine: ...

    @property
    def github(self) -> GitHubAccess: ...

    @property
    def settings(self) -> RunnerSettings: ...

    @property
    def jobs(self) -> BackgroundJobs | None: ...
