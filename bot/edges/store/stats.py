"""Counts for the metrics (bot/runner/metrics.py): read at scrape time, so every process sees the same.

Each function is one or two queries returning plain data, bounded in size whatever the history:
  - `runs_by_state`: every run state with its number of runs (zeros included);
  - `lanes_by_host`: running lanes by the host of their latest lane session ("" before one started),
    and the pending lanes of running runs (queued, host "");
  - `session_durations` / `lane_durations`: cumulative histogram buckets of every finished agent
    session (by kind and status) and lane (by outcome), counted in SQL, so a scrape transfers one
    row per label set and not one per session. Rows are never deleted, so the counts only grow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, literal_column, select
from sqlalchemy.engine import Engine

from bot.edges.store.models import RUN_STATES, AgentSession, Lane, Run

_RUNS = Run.__table__  # type: ignore[attr-defined]
_LANES = Lane.__table__  # type: ignore[attr-defined]
_SESSIONS = AgentSession.__table__  # type: ignore[attr-defined]

# A lane that ended: `finished` and `merged` lanes succeeded, a `failed` one did not.
_LANE_OUTCOMES = {"finished": "succeeded", "merged": "succeeded", "failed": "failed"}


@dataclass(frozen=True)
class LaneCount:
    state: str  # "running" or "queued"
    host: str  # "" when no session of the lane has started (queued, or handed to a worker)
    count: int


@dataclass(frozen=True)
class Buckets:
    """A cumulative histogram: `counts[i]` durations at most `bounds[i]` seconds; `count` and `total` of all."""

    labels: tuple[str, ...]
    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    total: float


def runs_by_state(engine: Engine) -> dict[str, int]:
    """Every run state, with how many runs are in it."""
    query = select(_RUNS.c.state, func.count()).group_by(_RUNS.c.state)
    with engine.connect() as connection:
        found = {state: count for state, count in connection.execute(query)}
    return {state: int(found.get(state, 0)) for state in RUN_STATES}


def lanes_by_host(engine: Engine) -> list[LaneCount]:
    """Running lanes by the host of their latest lane session, and the queued lanes of running runs."""
    latest = (
        select(_SESSIONS.c.lane_id, func.max(_SESSIONS.c.id).label("session_id"))
        .where(_SESSIONS.c.kind == "lane", _SESSIONS.c.lane_id.is_not(None))
        .group_by(_SESSIONS.c.lane_id)
        .subquery()
    )
    host = func.coalesce(_SESSIONS.c.host, "")
    running = (
        select(host, func.count())
        .select_from(
            _LANES.outerjoin(latest, latest.c.lane_id == _LANES.c.id).outerjoin(
                _SESSIONS, _SESSIONS.c.id == latest.c.session_id
            )
        )
        .where(_LANES.c.state == "running")
        .group_by(host)
    )
    queued = (
        select(func.count())
        .select_from(_LANES.join(_RUNS, _RUNS.c.id == _LANES.c.run_id))
        .where(_LANES.c.state == "pending", _RUNS.c.state == "running")
    )
    with engine.connect() as connection:
        counts = [LaneCount("running", name, int(count)) for name, count in connection.execute(running)]
        waiting = int(connection.execute(queued).scalar_one())
    return [*sorted(counts, key=lambda each: each.host), LaneCount("queued", "", waiting)]


def session_durations(engine: Engine, bounds: Sequence[float]) -> list[Buckets]:
    """The durations of every finished agent session, by kind and status."""
    seconds = _seconds_between(engine, _SESSIONS.c.started_at, _SESSIONS.c.ended_at)
    finished = and_(_SESSIONS.c.ended_at.is_not(None), _SESSIONS.c.status != "running")
    return _buckets(engine, [_SESSIONS.c.kind, _SESSIONS.c.status], seconds, finished, bounds)


def lane_durations(engine: Engine, bounds: Sequence[float]) -> list[Buckets]:
    """The durations of every lane that ended (from its latest start), by outcome: succeeded or failed."""
    seconds = _seconds_between(engine, _LANES.c.started_at, _LANES.c.finished_at)
    ended = and_(
        _LANES.c.state.in_(tuple(_LANE_OUTCOMES)),
        _LANES.c.started_at.is_not(None),
        _LANES.c.finished_at.is_not(None),
        _LANES.c.finished_at >= _LANES.c.started_at,  # a lane failed and started again is not one that ended
    )
    by_state = _buckets(engine, [_LANES.c.state], seconds, ended, bounds)
    merged: dict[str, Buckets] = {}
    for each in by_state:
        outcome = _LANE_OUTCOMES[each.labels[0]]
        merged[outcome] = _add(merged[outcome], each, outcome) if outcome in merged else _relabel(each, outcome)
    return [merged[outcome] for outcome in sorted(merged)]


def _seconds_between(engine: Engine, start: Any, end: Any) -> ColumnElement[Any]:
    if engine.dialect.name == "sqlite":
        return (func.julianday(end) - func.julianday(start)) * literal_column("86400.0")
    return func.extract("epoch", end - start)


def _buckets(
    engine: Engine, labels: list[Any], seconds: ColumnElement[Any], where: ColumnElement[bool], bounds: Sequence[float]
) -> list[Buckets]:
    columns = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in bounds]
    query = (
        select(*labels, func.count(), func.coalesce(func.sum(seconds), 0.0), *columns).where(where).group_by(*labels)
    )
    width = len(labels)
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        Buckets(
            labels=tuple(str(value) for value in row[:width]),
            bounds=tuple(bounds),
            counts=tuple(int(value or 0) for value in row[width + 2 :]),
            count=int(row[width]),
            total=float(row[width + 1] or 0.0),
        )
        for row in sorted(rows, key=lambda row: tuple(str(value) for value in row[:width]))
    ]


def _relabel(buckets: Buckets, label: str) -> Buckets:
    return Buckets((label,), buckets.bounds, buckets.counts, buckets.count, buckets.total)


def _add(one: Buckets, other: Buckets, label: str) -> Buckets:
    counts = tuple(a + b for a, b in zip(one.counts, other.counts, strict=True))
    return Buckets((label,), one.bounds, counts, one.count + other.count, one.total + other.total)
