"""Review requests: the queue of review work on each run's pull request, one request at a time.

A request is a fix lane (`fix`: a changes-requested review or `/fix` from an approver; `ci`: the
repository's CI failed on lanebot's head) or lanebot's own review (`self`). Its `dedupe_key` is UNIQUE, and `enqueue` inserts with ON CONFLICT
DO NOTHING, so a redelivered webhook, or two deliveries racing, queue the work once; the loser
gets the winner's row.

A run runs at most one request at a time, because two agents must never push to one pull
request's branch at once. `claim_next` moves the run's oldest queued request to `running` in a
single UPDATE whose WHERE also says "none of this run's requests is running". SQLite runs one
writing statement at a time, so that is enough there. On PostgreSQL two such UPDATEs may read
snapshots taken before the other committed, so the claim first locks the run's row: claimers of
one run take turns, and each sees what the one before it did. Every other state change is a
compare-and-set on the state, as in `runs`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import exists, func, select
from sqlalchemy import update as sql_update
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import IntegrityError
from sqlmodel import col
from sqlmodel import select as select_model

from bot.edges.store.db import insert_ignoring_duplicates, session
from bot.edges.store.models import REVIEW_REQUEST_KINDS, REVIEW_REQUEST_STATES, ReviewRequest, Run, utc_now

__all__ = [
    "cancel_open",
    "claim_next",
    "enqueue",
    "finish",
    "get",
    "queued_ahead",
    "requests",
    "requeue_running",
    "runs_with_work",
    "update",
]

_REQUESTS = ReviewRequest.__table__  # type: ignore[attr-defined]
_RUNS = Run.__table__  # type: ignore[attr-defined]

OPEN_STATES = ("queued", "running")
FINISHED_STATES = tuple(state for state in REVIEW_REQUEST_STATES if state not in OPEN_STATES)
# What a caller may set through **fields; the rest is fixed at enqueue or owned by the helpers.
_SETTABLE = frozenset({"head_sha", "result", "error"})


def enqueue(
    engine: Engine,
    *,
    run_id: int,
    pr_number: int,
    kind: str,
    key: str,
    requested_by: str,
    review_id: int | None = None,
    comment_id: int | None = None,
    notes: str | None = None,
    now: datetime | None = None,
) -> tuple[ReviewRequest, bool]:
    """Queue a request; (the row, True) when new, (the row already queued under `key`, False) when not."""
    _require_member(kind, REVIEW_REQUEST_KINDS, "review request kind")
    if not key.strip():
        raise ValueError("a review request needs a dedupe key, e.g. review:<review id> or comment:<comment id>")
    if not requested_by.strip():
        raise ValueError("a review request needs the login of who asked for it")
    values = dict(
        run_id=run_id,
        pr_number=pr_number,
        kind=kind,
        dedupe_key=key,
        requested_by=requested_by,
        review_id=review_id,
        comment_id=comment_id,
        notes=notes,
        state="queued",
        created_at=now or utc_now(),
    )
    insert_once = insert_ignoring_duplicates(engine, _REQUESTS, ["dedupe_key"])
    statement = insert_once.values(**values).returning(*_REQUESTS.c)
    try:
        with engine.begin() as connection:
            inserted = connection.execute(statement).one_or_none()
            if inserted is not None:
                return _request(inserted), True
            existing = connection.execute(select(_REQUESTS).where(_REQUESTS.c.dedupe_key == key)).one()
            return _request(existing), False
    except IntegrityError:
        # The dedupe key cannot collide any more (ON CONFLICT); what is left is the run's foreign key.
        raise LookupError(f"no run with id {run_id} to queue a review request on") from None


def get(engine: Engine, request_id: int) -> ReviewRequest | None:
    with session(engine) as db:
        return db.get(ReviewRequest, request_id)


def requests(engine: Engine, run_id: int) -> list[ReviewRequest]:
    """Every request of the run, oldest first."""
    query = select_model(ReviewRequest).where(ReviewRequest.run_id == run_id).order_by(col(ReviewRequest.id))
    with session(engine) as db:
        return list(db.exec(query).all())


def queued_ahead(engine: Engine, request: ReviewRequest) -> int:
    """How many of the run's requests go before this one: the running one and older queued ones."""
    query = select(func.count()).where(
        _REQUESTS.c.run_id == request.run_id,
        _REQUESTS.c.state.in_(OPEN_STATES),
        _REQUESTS.c.id < request.id,
    )
    with engine.connect() as connection:
        return connection.execute(query).scalar_one()


def claim_next(engine: Engine, run_id: int, *, now: datetime | None = None) -> ReviewRequest | None:
    """Start the run's oldest queued request, unless one of its requests is running; None if nothing moved."""
    same_run = _REQUESTS.alias("same_run")
    oldest_queued = (
        select(func.min(same_run.c.id))
        .where(same_run.c.run_id == run_id, same_run.c.state == "queued")
        .scalar_subquery()
    )
    one_running = exists().where(same_run.c.run_id == run_id, same_run.c.state == "running")
    statement = (
        sql_update(_REQUESTS)
        .where(_REQUESTS.c.id == oldest_queued, _REQUESTS.c.state == "queued", ~one_running)
        .values(state="running", started_at=now or utc_now())
        .returning(*_REQUESTS.c)
    )
    with engine.begin() as connection:
        _take_turns_on_run(connection, run_id)
        claimed = connection.execute(statement).one_or_none()
    return None if claimed is None else _request(claimed)


def finish(engine: Engine, request_id: int, state: str, *, now: datetime | None = None, **fields: Any) -> bool:
    """End a running request as done, failed or cancelled, with `fields` (result, head_sha, error).

    False when it was not running (cancelled meanwhile, or finished already): the first word stands.
    """
    _require_member(state, FINISHED_STATES, "finished review request state")
    values = _settable(fields)
    statement = (
        sql_update(_REQUESTS)
        .where(_REQUESTS.c.id == request_id, _REQUESTS.c.state == "running")
        .values(**values, state=state, finished_at=now or utc_now())
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount == 1


def update(engine: Engine, request_id: int, **fields: Any) -> None:
    """Set what became known while it runs (head_sha, result, error), whatever its state."""
    values = _settable(fields)
    statement = sql_update(_REQUESTS).where(_REQUESTS.c.id == request_id).values(**values)
    with engine.begin() as connection:
        if connection.execute(statement).rowcount != 1:
            raise LookupError(f"no review request with id {request_id}")


def requeue_running(engine: Engine) -> list[int]:
    """Start-up: requests a previous process left running go back to the queue; their runs' ids."""
    statement = (
        sql_update(_REQUESTS)
        .where(_REQUESTS.c.state == "running")
        .values(state="queued", started_at=None)
        .returning(_REQUESTS.c.run_id)
    )
    with engine.begin() as connection:
        return sorted(set(connection.execute(statement).scalars()))


def runs_with_work(engine: Engine) -> list[int]:
    """The ids of runs with a queued or running request."""
    run_id = _REQUESTS.c.run_id
    query = select(run_id).where(_REQUESTS.c.state.in_(OPEN_STATES)).distinct().order_by(run_id)
    with engine.connect() as connection:
        return list(connection.execute(query).scalars())


def cancel_open(engine: Engine, run_id: int, why: str, *, now: datetime | None = None) -> int:
    """Cancel the run's queued and running requests (its pull request closed), saying why; how many."""
    statement = (
        sql_update(_REQUESTS)
        .where(_REQUESTS.c.run_id == run_id, _REQUESTS.c.state.in_(OPEN_STATES))
        .values(state="cancelled", error=why, finished_at=now or utc_now())
    )
    with engine.begin() as connection:
        return connection.execute(statement).rowcount


# --- helpers ----------------------------------------------------------------------------------


def _take_turns_on_run(connection: Connection, run_id: int) -> None:
    """On PostgreSQL, hold the run's row until the claim commits, so claimers of one run go one by one.

    Not on SQLite: a write there already waits for every other writer, and a read before it would
    only risk a stale-snapshot error when the UPDATE follows.
    """
    if connection.dialect.name == "postgresql":
        # FOR NO KEY UPDATE: enough to make claimers queue, without blocking rows that reference the run.
        connection.execute(select(_RUNS.c.id).where(_RUNS.c.id == run_id).with_for_update(key_share=True))


def _request(row: Row[*tuple[Any, ...]]) -> ReviewRequest:
    return ReviewRequest(**row._mapping)


def _settable(fields: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(fields) - _SETTABLE)
    if unknown:
        raise ValueError(
            f"cannot set {', '.join(unknown)} on a review request; settable: {', '.join(sorted(_SETTABLE))}"
        )
    values = dict(fields)
    if "result" in values and values["result"] is not None:
        values["result"] = _result_json(values["result"])
    return values


def _result_json(result: Mapping[str, Any] | str) -> str:
    """`result` as JSON text: a mapping is encoded; text must already be a JSON object."""
    if isinstance(result, Mapping):
        return json.dumps(dict(result), sort_keys=True, ensure_ascii=False)
    try:
        decoded = json.loads(result)
    except (TypeError, json.JSONDecodeError):
        decoded = None
    if not isinstance(decoded, dict):
        raise ValueError("a review request's result must be a mapping, or JSON text of an object")
    return result


def _require_member(value: str, allowed: Sequence[str], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {what} {value!r}; expected one of: {', '.join(allowed)}")
