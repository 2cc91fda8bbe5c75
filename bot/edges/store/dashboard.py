"""What the dashboard reads: runs with the counts of their lanes and sessions, filtered to the
repositories a person may read. Read-only queries.

Repositories compare in lower case, as GitHub compares them (`Octo/One` and `octo/one` are one
repository). Tokens and cost are summed over the sessions that reported them: SQL's SUM skips NULL,
and is NULL when every session's is, which the dashboard shows as "not recorded", not 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Engine
from sqlmodel import col
from sqlmodel import select as model_select

from bot.edges.store.db import session
from bot.edges.store.models import AgentSession, Lane, Run, RunEvent

__all__ = ["DEFAULT_LIMIT", "RunListing", "list_runs", "repositories_with_runs", "run_version", "runs_version"]

DEFAULT_LIMIT = 200
_LANES = Lane.__table__  # type: ignore[attr-defined]
_SESSIONS = AgentSession.__table__  # type: ignore[attr-defined]
_RUNS = Run.__table__  # type: ignore[attr-defined]
_EVENTS = RunEvent.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RunListing:
    """A run and the totals of its lanes and agent sessions."""

    run: Run
    lanes_total: int = 0
    lanes_merged: int = 0
    sessions: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


def list_runs(
    engine: Engine,
    repositories: Collection[str],
    *,
    repository: str | None = None,
    state: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[RunListing]:
    """Runs of `repositories` (and of `repository` alone, and in `state`, when given), newest first."""
    allowed = sorted({name.lower() for name in repositories})
    if repository is not None:
        allowed = [name for name in allowed if name == repository.lower()]
    if not allowed:
        return []
    query = model_select(Run).where(func.lower(Run.repository).in_(allowed))
    if state is not None:
        query = query.where(Run.state == state)
    query = query.order_by(col(Run.created_at).desc(), col(Run.id).desc()).limit(limit)
    with session(engine) as db:
        found = list(db.exec(query).all())
    ids = [run.id for run in found if run.id is not None]
    if not ids:
        return []
    lanes = _lane_counts(engine, ids)
    sessions = _session_totals(engine, ids)
    listings = []
    for run in found:
        total, merged = lanes.get(run.id or 0, (0, 0))
        count, tokens_in, tokens_out, cost = sessions.get(run.id or 0, (0, None, None, None))
        listings.append(RunListing(run, total, merged, count, tokens_in, tokens_out, cost))
    return listings


def repositories_with_runs(engine: Engine, repositories: Collection[str]) -> list[str]:
    """The repositories among `repositories` that have a run, as the runs name them, sorted."""
    allowed = sorted({name.lower() for name in repositories})
    if not allowed:
        return []
    query = select(_RUNS.c.repository).where(func.lower(_RUNS.c.repository).in_(allowed)).distinct()
    with engine.connect() as connection:
        return sorted({row[0] for row in connection.execute(query)}, key=str.lower)


def _lane_counts(engine: Engine, run_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    merged = func.sum(case((_LANES.c.state == "merged", 1), else_=0))
    query = select(_LANES.c.run_id, func.count(), merged).where(_LANES.c.run_id.in_(run_ids)).group_by(_LANES.c.run_id)
    with engine.connect() as connection:
        return {row[0]: (int(row[1]), int(row[2] or 0)) for row in connection.execute(query)}


def _session_totals(
    engine: Engine, run_ids: Sequence[int]
) -> dict[int, tuple[int, int | None, int | None, float | None]]:
    query = (
        select(
            _SESSIONS.c.run_id,
            func.count(),
            func.sum(_SESSIONS.c.input_tokens),
            func.sum(_SESSIONS.c.output_tokens),
            func.sum(_SESSIONS.c.cost_usd),
        )
        .where(_SESSIONS.c.run_id.in_(run_ids))
        .group_by(_SESSIONS.c.run_id)
    )
    with engine.connect() as connection:
        return {
            row[0]: (
                int(row[1]),
                None if row[2] is None else int(row[2]),
                None if row[3] is None else int(row[3]),
                None if row[4] is None else float(row[4]),
            )
            for row in connection.execute(query)
        }


def _digest(rows: Any) -> str:
    return hashlib.sha256(repr(rows).encode("utf-8")).hexdigest()[:32]


def run_version(engine: Engine, run_id: int) -> str | None:
    """A digest of what a run's page shows (the run, its lanes, its sessions, how many events it
    has): it changes when the page would; None when there is no such run."""
    runs = _RUNS.c
    lanes = _LANES.c
    sessions = _SESSIONS.c
    with engine.connect() as connection:
        run = connection.execute(
            select(
                runs.state, runs.updated_at, runs.pr_number, runs.plan_revision, runs.approved_revision, runs.error
            ).where(runs.id == run_id)
        ).first()
        if run is None:
            return None
        lane_rows = connection.execute(
            select(
                lanes.id,
                lanes.state,
                lanes.attempts_used,
                lanes.check_run_id,
                lanes.started_at,
                lanes.finished_at,
                lanes.merged_at,
                lanes.failure,
            )
            .where(lanes.run_id == run_id)
            .order_by(lanes.id)
        ).all()
        session_rows = connection.execute(
            select(
                sessions.id,
                sessions.status,
                sessions.host,
                sessions.ended_at,
                sessions.check_started_at,
                sessions.input_tokens,
                sessions.output_tokens,
                sessions.cost_usd,
            )
            .where(sessions.run_id == run_id)
            .order_by(sessions.id)
        ).all()
        events = connection.execute(
            select(func.count(), func.max(_EVENTS.c.id)).where(_EVENTS.c.run_id == run_id)
        ).first()
    return _digest((tuple(run), [tuple(r) for r in lane_rows], [tuple(r) for r in session_rows], tuple(events or ())))


def runs_version(engine: Engine, repositories: Collection[str]) -> str:
    """A digest of the runs list of `repositories` (every run's state and counts): it changes when
    the list would."""
    return _digest(
        [
            (
                found.run.id,
                found.run.state,
                found.run.updated_at,
                found.run.pr_number,
                found.lanes_total,
                found.lanes_merged,
                found.sessions,
                found.input_tokens,
                found.output_tokens,
                found.cost_usd,
            )
            for found in list_runs(engine, repositories)
        ]
    )
