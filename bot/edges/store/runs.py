"""Runs and what hangs off them: plans, lanes, agent sessions and the run's event history.

Every state change is a compare-and-set UPDATE (`WHERE state = expected`), so when twenty
processes race to move the same row exactly one of them wins, on SQLite and PostgreSQL alike;
the loser gets False and re-reads. A state change and its `run_events` row are written in one
transaction, so the history is complete by construction.

One active run per issue is enforced by the database: `runs.active_key` is UNIQUE and holds
"owner/name#issue" until the run is rejected, cancelled or failed, or is done and `close_run`
has been called; NULL never collides.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import String, cast, exists, func, insert, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from bot.edges.store.db import insert_ignoring_duplicates, session
from bot.edges.store.models import (
    LANE_STATES,
    PLAN_SOURCES,
    RELEASED_RUN_STATES,
    RUN_STATES,
    SESSION_KINDS,
    SESSION_STATUSES,
    UNFINISHED_RUN_STATES,
    AgentSession,
    Lane,
    Plan,
    Run,
    RunEvent,
    utc_now,
)

_RUNS = Run.__table__  # type: ignore[attr-defined]
_PLANS = Plan.__table__  # type: ignore[attr-defined]
_LANES = Lane.__table__  # type: ignore[attr-defined]
_SESSIONS = AgentSession.__table__  # type: ignore[attr-defined]
_EVENTS = RunEvent.__table__  # type: ignore[attr-defined]

_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# Columns a caller may set through **fields; the others are owned by the helpers below.
_RUN_FIELDS = frozenset(_RUNS.c.keys()) - {
    "id",
    "state",
    "active_key",
    "repository",
    "issue_number",
    "created_at",
    "updated_at",
}
_LANE_FIELDS = frozenset(_LANES.c.keys()) - {"id", "run_id", "unit_id", "state"}
_SESSION_FIELDS = frozenset(_SESSIONS.c.keys()) - {"id", "run_id", "lane_id", "kind", "attempt", "status", "started_at"}
_LANE_TIMESTAMPS = {"running": "started_at", "finished": "finished_at", "failed": "finished_at", "merged": "merged_at"}


class ActiveRunExists(Exception):
    """The issue already has a run that is not finished; a second one would race the first."""

    def __init__(self, repository: str, issue_number: int, run: Run | None) -> None:
        self.repository = repository
        self.issue_number = issue_number
        self.run = run
        holder = f"run {run.id} ({run.state})" if run else "another run"
        super().__init__(
            f"{repository}#{issue_number} already has an active run: {holder}. "
            "Cancel or reject it, or let it finish, before starting another."
        )


def active_key(repository: str, issue_number: int) -> str:
    """The value that `runs.active_key` holds while a run owns this issue."""
    return f"{repository}#{issue_number}"


# --- runs -----------------------------------------------------------------------------------


def create_run(
    engine: Engine,
    *,
    installation_id: int,
    repository: str,
    issue_number: int,
    requested_by: str,
    now: datetime | None = None,
) -> Run:
    """A new run in `planning` for the issue; raises ActiveRunExists if one is already active."""
    if not _REPOSITORY.match(repository):
        raise ValueError(f"repository must be 'owner/name', got {repository!r}")
    if issue_number < 1:
        raise ValueError(f"issue numbers start at 1, got {issue_number}")
    now = now or utc_now()
    run = Run(
        installation_id=installation_id,
        repository=repository,
        issue_number=issue_number,
        requested_by=requested_by,
        state="planning",
        active_key=active_key(repository, issue_number),
        created_at=now,
        updated_at=now,
    )
    try:
        with session(engine) as db:
            db.add(run)
            db.flush()
            assert run.id is not None  # the flush assigned it
            db.add(RunEvent(run_id=run.id, at=now, kind="created", data=_json({"requested_by": requested_by})))
    except IntegrityError:
        raise _active_run_conflict(engine, repository, issue_number) from None
    return run


def get_run(engine: Engine, run_id: int) -> Run | None:
    with session(engine) as db:
        return db.get(Run, run_id)


def active_run(engine: Engine, repository: str, issue_number: int) -> Run | None:
    """The run that currently holds the issue, if any."""
    query = select(Run).where(Run.active_key == active_key(repository, issue_number))
    with session(engine) as db:
        return db.exec(query).first()


def run_for_pull(engine: Engine, repository: str, pr_number: int) -> Run | None:
    """The newest run that opened pull request `pr_number` of `repository`, if any."""
    query = (
        select(Run)
        .where(func.lower(Run.repository) == repository.lower(), Run.pr_number == pr_number)
        .order_by(col(Run.id).desc())
    )
    with session(engine) as db:
        return db.exec(query).first()


def run_for_integration_branch(engine: Engine, repository: str, branch: str) -> Run | None:
    """The newest run of `repository` whose integration branch is `branch`, if any."""
    query = (
        select(Run)
        .where(func.lower(Run.repository) == repository.lower(), Run.integration_branch == branch)
        .order_by(col(Run.id).desc())
    )
    with session(engine) as db:
        return db.exec(query).first()


def runs_with_open_pull(engine: Engine, repository: str) -> list[Run]:
    """The runs of `repository` whose pull request is open as far as lanebot knows (done, holding
    their issue: a merge releases it, a close unmerged cancels the run), oldest first."""
    query = (
        select(Run)
        .where(
            func.lower(Run.repository) == repository.lower(),
            Run.state == "done",
            col(Run.active_key).is_not(None),
            col(Run.pr_number).is_not(None),
        )
        .order_by(col(Run.id))
    )
    with session(engine) as db:
        return list(db.exec(query).all())


def unfinished_runs(engine: Engine) -> list[Run]:
    """Runs that still have work to do (what start-up reconciles), oldest first."""
    query = select(Run).where(col(Run.state).in_(UNFINISHED_RUN_STATES)).order_by(col(Run.id))
    with session(engine) as db:
        return list(db.exec(query).all())


def recently_finished_runs(engine: Engine, since: datetime, *, limit: int = 100) -> list[Run]:
    """Runs that ended (any state with no work left) and changed since `since`, newest first."""
    query = (
        select(Run)
        .where(col(Run.state).not_in(UNFINISHED_RUN_STATES), col(Run.updated_at) >= since)
        .order_by(col(Run.updated_at).desc())
        .limit(limit)
    )
    with session(engine) as db:
        return list(db.exec(query).all())


def transition(
    engine: Engine,
    run_id: int,
    expected_state: str,
    new_state: str,
    *,
    now: datetime | None = None,
    **fields: Any,
) -> bool:
    """Move the run from `expected_state` to `new_state` (and set `fields`) if it is still there.

    True for the one caller that moved it; False when the run was not in `expected_state`.
    Entering rejected/cancelled/failed releases the issue; entering any other state claims it
    again (raising ActiveRunExists if another run holds it meanwhile).
    """
    _require_member(new_state, RUN_STATES, "run state")
    _require_known_fields(fields, _RUN_FIELDS, "run")
    now = now or utc_now()
    claimed_key = _RUNS.c.repository + "#" + cast(_RUNS.c.issue_number, String)
    statement = (
        update(_RUNS)
        .where(_RUNS.c.id == run_id, _RUNS.c.state == expected_state)
        .values(
            **fields,
            state=new_state,
            updated_at=now,
            active_key=None if new_state in RELEASED_RUN_STATES else claimed_key,
        )
    )
    try:
        with engine.begin() as connection:
            if connection.execute(statement).rowcount != 1:
                return False
            _append(connection, run_id, "state", {"from": expected_state, "to": new_state}, now)
    except IntegrityError:
        run = get_run(engine, run_id)
        if run is None:
            raise
        raise _active_run_conflict(engine, run.repository, run.issue_number) from None
    return True


def update_run(engine: Engine, run_id: int, *, now: datetime | None = None, **fields: Any) -> None:
    """Set fields that are not the state (comment ids, the PR number, the base SHA, ...)."""
    _require_known_fields(fields, _RUN_FIELDS, "run")
    _update_row(engine, _RUNS, run_id, "run", {**fields, "updated_at": now or utc_now()})


def close_run(engine: Engine, run_id: int, *, now: datetime | None = None) -> bool:
    """A done run's pull request and issue are closed: release the issue for a new run.

    True if the run was done and held its issue; False otherwise (nothing changes).
    """
    now = now or utc_now()
    statement = (
        update(_RUNS)
        .where(_RUNS.c.id == run_id, _RUNS.c.state == "done", _RUNS.c.active_key.is_not(None))
        .values(active_key=None, updated_at=now)
    )
    with engine.begin() as connection:
        if connection.execute(statement).rowcount != 1:
            return False
        _append(connection, run_id, "closed", {}, now)
    return True


def _active_run_conflict(engine: Engine, repository: str, issue_number: int) -> ActiveRunExists:
    return ActiveRunExists(repository, issue_number, active_run(engine, repository, issue_number))


# --- events ---------------------------------------------------------------------------------


def append_event(
    engine: Engine,
    run_id: int,
    kind: str,
    data: Mapping[str, Any] | None = None,
    *,
    now: datetime | None = None,
) -> RunEvent:
    """Add what happened to the run's history; `data` must be JSON-serialisable."""
    now = now or utc_now()
    with engine.begin() as connection:
        event_id = _append(connection, run_id, kind, data or {}, now)
    return RunEvent(id=event_id, run_id=run_id, at=now, kind=kind, data=_json(data or {}))


def run_events(engine: Engine, run_id: int) -> list[RunEvent]:
    """The run's history, oldest first."""
    query = select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
    with session(engine) as db:
        return list(db.exec(query).all())


def _append(connection: Connection, run_id: int, kind: str, data: Mapping[str, Any], now: datetime) -> int:
    statement = insert(_EVENTS).values(run_id=run_id, at=now, kind=kind, data=_json(data)).returning(_EVENTS.c.id)
    event_id: int = connection.execute(statement).scalar_one()
    return event_id


def _json(data: Mapping[str, Any]) -> str:
    return json.dumps(dict(data), sort_keys=True, ensure_ascii=False)


# --- plans ----------------------------------------------------------------------------------


def add_plan(
    engine: Engine,
    run_id: int,
    *,
    units_jsonl: str,
    source: str,
    feedback: str | None = None,
    problems: str | None = None,
    now: datetime | None = None,
) -> Plan:
    """Store the run's next plan revision (1, 2, ...) and make it the run's latest."""
    _require_member(source, PLAN_SOURCES, "plan source")
    now = now or utc_now()
    # Bumping the run's counter first locks its row, so concurrent callers get distinct revisions.
    bump = (
        update(_RUNS)
        .where(_RUNS.c.id == run_id)
        .values(plan_revision=_RUNS.c.plan_revision + 1, updated_at=now)
        .returning(_RUNS.c.plan_revision)
    )
    with engine.begin() as connection:
        revision = connection.execute(bump).scalar_one_or_none()
        if revision is None:
            raise LookupError(f"no run with id {run_id}")
        values = dict(
            run_id=run_id,
            revision=revision,
            units_jsonl=units_jsonl,
            source=source,
            feedback=feedback,
            problems=problems,
            created_at=now,
        )
        plan_id = connection.execute(insert(_PLANS).values(**values).returning(_PLANS.c.id)).scalar_one()
        _append(connection, run_id, "plan", {"revision": revision, "source": source}, now)
    return Plan(id=plan_id, **values)


def latest_plan(engine: Engine, run_id: int) -> Plan | None:
    query = select(Plan).where(Plan.run_id == run_id).order_by(col(Plan.revision).desc()).limit(1)
    with session(engine) as db:
        return db.exec(query).first()


def get_plan(engine: Engine, run_id: int, revision: int) -> Plan | None:
    query = select(Plan).where(Plan.run_id == run_id, Plan.revision == revision)
    with session(engine) as db:
        return db.exec(query).first()


# --- lanes ----------------------------------------------------------------------------------


def create_lanes(engine: Engine, run_id: int, rounds: Sequence[Sequence[str]]) -> list[Lane]:
    """One pending lane per unit, `rounds[0]` being round 1; lanes that exist are kept as they are."""
    unit_rounds = [(unit_id, number) for number, units in enumerate(rounds, start=1) for unit_id in units]
    unit_ids = [unit_id for unit_id, _ in unit_rounds]
    if not unit_ids:
        raise ValueError("a run needs at least one unit to create lanes for")
    duplicates = sorted({unit_id for unit_id in unit_ids if unit_ids.count(unit_id) > 1})
    if duplicates:
        raise ValueError(f"each unit belongs to one round; repeated: {', '.join(duplicates)}")
    rows = [
        {"run_id": run_id, "unit_id": unit_id, "round": number, "state": "pending", "attempts_used": 0}
        for unit_id, number in unit_rounds
    ]
    with engine.begin() as connection:
        connection.execute(insert_ignoring_duplicates(connection, _LANES, ["run_id", "unit_id"]), rows)
    return lanes(engine, run_id)


def lanes(engine: Engine, run_id: int) -> list[Lane]:
    """The run's lanes, by round and then in the order they were declared."""
    query = select(Lane).where(Lane.run_id == run_id).order_by(col(Lane.round), col(Lane.id))
    with session(engine) as db:
        return list(db.exec(query).all())


def building_ahead(engine: Engine, run: Run) -> int:
    """How many runs of the run's repository, approved before it, are building (running or
    integrating): the cap of runs per repository, held in the database for every host to read."""
    query = select(func.count()).where(
        func.lower(_RUNS.c.repository) == run.repository.lower(),
        _RUNS.c.state.in_(("running", "integrating")),
        _RUNS.c.id < run.id,
    )
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def lanes_running(engine: Engine) -> int:
    """Lanes running now in every run: the cap of lanes across all workers reads it."""
    query = select(func.count()).where(_LANES.c.state == "running")
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def get_lane(engine: Engine, run_id: int, unit_id: str) -> Lane | None:
    query = select(Lane).where(Lane.run_id == run_id, Lane.unit_id == unit_id)
    with session(engine) as db:
        return db.exec(query).first()


def set_lane_state(
    engine: Engine,
    lane_id: int,
    expected_state: str,
    new_state: str,
    *,
    now: datetime | None = None,
    while_session_runs: int | None = None,
    **fields: Any,
) -> bool:
    """Compare-and-set a lane's state, stamping started/finished/merged_at unless given.

    True for the one caller that moved it; False when the lane was not in `expected_state`, or
    (with `while_session_runs`) when that session is no longer running: an attempt taken for lost
    (its host was gone) does not write its late outcome over the next attempt's.
    """
    _require_member(new_state, LANE_STATES, "lane state")
    _require_known_fields(fields, _LANE_FIELDS, "lane")
    now = now or utc_now()
    stamp = _LANE_TIMESTAMPS.get(new_state)
    values = {stamp: now, **fields} if stamp else dict(fields)
    conditions = [_LANES.c.id == lane_id, _LANES.c.state == expected_state]
    if while_session_runs is not None:
        running = select(_SESSIONS.c.id).where(_SESSIONS.c.id == while_session_runs, _SESSIONS.c.status == "running")
        conditions.append(exists(running))
    statement = (
        update(_LANES).where(*conditions).values(**values, state=new_state).returning(_LANES.c.run_id, _LANES.c.unit_id)
    )
    with engine.begin() as connection:
        moved = connection.execute(statement).one_or_none()
        if moved is None:
            return False
        change = {"unit": moved.unit_id, "from": expected_state, "to": new_state}
        _append(connection, moved.run_id, "lane", change, now)
    return True


def update_lane(engine: Engine, lane_id: int, **fields: Any) -> None:
    """Set fields that are not the state (head SHA, check run id, ...)."""
    _require_known_fields(fields, _LANE_FIELDS, "lane")
    _update_row(engine, _LANES, lane_id, "lane", fields)


# --- agent sessions -------------------------------------------------------------------------


def start_session(
    engine: Engine,
    *,
    run_id: int,
    kind: str,
    lane_id: int | None = None,
    counts_as_retry: bool = True,
    host: str | None = None,
    pid: int | None = None,
    transcript_path: str | None = None,
    now: datetime | None = None,
) -> AgentSession:
    """Record an agent session as running, numbered after the earlier ones of its lane and kind.

    Write it before starting the process. Two sessions of one lane never start at once (the
    lane's compare-and-set state decides who runs it), so counting earlier attempts is safe.
    """
    _require_member(kind, SESSION_KINDS, "session kind")
    same_lane = _SESSIONS.c.lane_id.is_(None) if lane_id is None else _SESSIONS.c.lane_id == lane_id
    previous = select(func.coalesce(func.max(_SESSIONS.c.attempt), 0)).where(
        _SESSIONS.c.run_id == run_id, _SESSIONS.c.kind == kind, same_lane
    )
    values: dict[str, Any] = dict(
        run_id=run_id,
        lane_id=lane_id,
        kind=kind,
        counts_as_retry=counts_as_retry,
        status="running",
        host=host,
        pid=pid,
        transcript_path=transcript_path,
        started_at=now or utc_now(),
    )
    with engine.begin() as connection:
        values["attempt"] = connection.execute(previous).scalar_one() + 1
        session_id = connection.execute(insert(_SESSIONS).values(**values).returning(_SESSIONS.c.id)).scalar_one()
    return AgentSession(id=session_id, **values)


def update_session(engine: Engine, session_id: int, **fields: Any) -> None:
    """Set what became known while it runs (pid once spawned, transcript path, ...)."""
    _require_known_fields(fields, _SESSION_FIELDS, "agent session")
    _update_row(engine, _SESSIONS, session_id, "agent session", fields)


def finish_session(
    engine: Engine,
    session_id: int,
    *,
    status: str,
    now: datetime | None = None,
    **fields: Any,
) -> bool:
    """End a running session (succeeded, failed, lost or cancelled) with its exit status,
    failure, tokens and cost in `fields`. False if it had already ended: the first word stands.
    """
    _require_member(status, SESSION_STATUSES[1:], "finished session status")
    _require_known_fields(fields, _SESSION_FIELDS, "agent session")
    statement = (
        update(_SESSIONS)
        .where(_SESSIONS.c.id == session_id, _SESSIONS.c.status == "running")
        .values({"ended_at": now or utc_now(), **fields, "status": status})
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount == 1


def running_sessions(engine: Engine, run_id: int | None = None) -> list[AgentSession]:
    """Sessions recorded as running (all runs, or one): start-up checks whether each is alive."""
    query = select(AgentSession).where(AgentSession.status == "running").order_by(col(AgentSession.id))
    if run_id is not None:
        query = query.where(AgentSession.run_id == run_id)
    with session(engine) as db:
        return list(db.exec(query).all())


def sessions(engine: Engine, run_id: int) -> list[AgentSession]:
    """Every session of the run, in the order they started."""
    query = select(AgentSession).where(AgentSession.run_id == run_id).order_by(col(AgentSession.id))
    with session(engine) as db:
        return list(db.exec(query).all())


def spent_usd(engine: Engine, run_id: int, *, repository: str, since: datetime) -> tuple[float, float]:
    """(what the run's sessions cost, what the repository's sessions started at or after `since`
    cost, every run's), in dollars as their CLIs reported; a session without a cost adds nothing."""
    cost = func.coalesce(func.sum(_SESSIONS.c.cost_usd), 0.0)
    of_run = select(cost).where(_SESSIONS.c.run_id == run_id)
    of_repository = (
        select(cost)
        .select_from(_SESSIONS.join(_RUNS, _RUNS.c.id == _SESSIONS.c.run_id))
        .where(_RUNS.c.repository == repository, _SESSIONS.c.started_at >= since)
    )
    with engine.connect() as connection:
        return float(connection.execute(of_run).scalar_one()), float(connection.execute(of_repository).scalar_one())


# --- checks ---------------------------------------------------------------------------------


def _update_row(engine: Engine, table: Any, row_id: int, what: str, values: Mapping[str, Any]) -> None:
    """Set `values` on the row `row_id` of `table`; LookupError naming `what` when there is none."""
    with engine.begin() as connection:
        if connection.execute(update(table).where(table.c.id == row_id).values(**values)).rowcount != 1:
            raise LookupError(f"no {what} with id {row_id}")


def _require_member(value: str, allowed: Sequence[str], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of: {', '.join(allowed)}")


def _require_known_fields(fields: Mapping[str, Any], allowed: frozenset[str], what: str) -> None:
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ValueError(f"cannot set {', '.join(unknown)} on a {what}; settable: {', '.join(sorted(allowed))}")
