"""Where lanes, merges and the integrate step run: the executor interface.

Everything above this interface (the orchestrator) hands work over as a `Job` and learns what
became of it from the database only. A job carries ids, nothing else: the job reads the run,
its lanes and the plan from the database and the code from the git remote, and writes its
result back to the database. So an executor may run a job in this process (`embedded`), or on
another host through a task queue, without the orchestrator noticing: the two share only the
database and the git remote (which is why the integration branch is pushed after every merge
round and lanes are cut from what was pushed).

Three kinds of job:

- `lane` (run_id, unit_id, attempt): one attempt of one lane; submitted, not awaited;
- `merge` (run_id, units): merge these finished lanes, in this order, into the integration
  branch and push it; awaited;
- `integrate` (run_id): the integrate session, verify, repairs and the pull request; awaited.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Executor", "Job", "JobKind", "LeaseState", "Leases", "Perform", "integrate_job", "lane_job", "merge_job"]


class JobKind(enum.StrEnum):
    LANE = "lane"
    MERGE = "merge"
    INTEGRATE = "integrate"


@dataclass(frozen=True)
class Job:
    """One piece of work, identified by its fields alone.

    `attempt` is the number the lane's next agent session will carry (1 for the first); two jobs
    with equal fields are the same job, and an executor runs it at most once at a time.
    """

    kind: JobKind
    run_id: int
    unit_id: str | None = None
    attempt: int = 0
    units: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", JobKind(self.kind))
        if self.kind is JobKind.LANE and (not self.unit_id or self.attempt < 1):
            raise ValueError(f"a lane job names its unit and an attempt >= 1, got {self!r}")
        if self.kind is JobKind.MERGE and not self.units:
            raise ValueError(f"a merge job names the lanes to merge, got {self!r}")

    @property
    def key(self) -> tuple[object, ...]:
        return (self.kind.value, self.run_id, self.unit_id, self.attempt, self.units)

    def describe(self) -> str:
        if self.kind is JobKind.LANE:
            return f"lane {self.unit_id!r} attempt {self.attempt} of run {self.run_id}"
        if self.kind is JobKind.MERGE:
            return f"merge of {', '.join(self.units)} in run {self.run_id}"
        return f"integrate step of run {self.run_id}"


def lane_job(run_id: int, unit_id: str, attempt: int) -> Job:
    return Job(JobKind.LANE, run_id, unit_id=unit_id, attempt=attempt)


def merge_job(run_id: int, units: tuple[str, ...]) -> Job:
    return Job(JobKind.MERGE, run_id, units=tuple(units))


def integrate_job(run_id: int) -> Job:
    return Job(JobKind.INTEGRATE, run_id)


class LeaseState(enum.StrEnum):
    """Where a job sent to the workers stands, as its lease in the database says."""

    UNCLAIMED = "unclaimed"  # no worker has started it (still queued), or it has ended and let go
    HELD = "held"  # a worker does it and renews its lease
    EXPIRED = "expired"  # its worker stopped renewing: the host is gone


class Leases(Protocol):
    """The job leases the workers hold (bot.runner.leases), as the executor needs them."""

    async def state(self, job: Job) -> LeaseState: ...

    async def take_over(self, job: Job) -> bool:
        """End the job's expired lease (a lane's attempt is then lost and the lane pending); True
        for the one caller that did."""


# What an executor calls to do a job; the orchestrator provides it (`bot.runner.orchestrator.perform`).
Perform = Callable[[Job], Awaitable[None]]


@runtime_checkable
class Executor(Protocol):
    """Runs jobs, within the host's caps. Nothing here returns a job's result: that is in the database."""

    # True when every job of this deployment runs inside this process: then a lane the database
    # calls running, for which this executor holds no job, was lost with a previous process.
    local: bool

    async def submit(self, job: Job) -> bool:
        """Start `job` in the background; False when the same job is already queued or running."""

    async def run(self, job: Job) -> None:
        """Run `job` and return when it has ended (its outcome is in the database).

        Returns normally if the job was cancelled by `cancel_run`; raises what the job raised.
        """

    def generation(self, run_id: int) -> int:
        """A counter that grows each time a job of the run ends."""

    async def wait(self, run_id: int, after: int, timeout: float) -> None:
        """Return once `generation(run_id)` exceeds `after`, or after `timeout` seconds; an executor
        whose caps every run shares (the Celery one) also returns when a job of another run ends."""

    def active(self, run_id: int) -> tuple[Job, ...]:
        """The run's jobs queued or running in this executor."""

    async def cancel_run(self, run_id: int) -> None:
        """Stop every job of the run (agents' process groups included) and wait until they are gone."""

    def run_slot(self, repository: str) -> AbstractAsyncContextManager[None]:
        """Held while a run of `repository` builds: caps the runs building per repository."""

    async def close(self) -> None:
        """Stop every job (lanebot is shutting down); their runs resume at the next start."""
