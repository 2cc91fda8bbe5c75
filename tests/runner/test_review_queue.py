"""The review queue's worker: requests done one after another, failures recorded, restarts recovered.

The work of a request (a fix lane, lanebot's own review) is replaced here by a recording step; what
those steps do is tested through the sandbox in tests/e2e/test_end_to_end_fix.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from bot.edges.store import reviews, runs
from bot.runner.review import queue as review_queue
from tests.edges.test_store import new_run


@dataclass
class Context:
    engine: Any
    github: Any = None
    jobs: Any = None


def enqueue(engine, run_id: int, key: str, kind: str = "fix") -> Any:
    return reviews.enqueue(engine, run_id=run_id, pr_number=7, kind=kind, key=key, requested_by="octocat")[0]


@pytest.mark.anyio
async def test_work_does_the_queued_requests_in_order_never_two_at_once(engine):
    run = new_run(engine)
    for key, kind in (("review:1", "fix"), ("self:1:abc", "self"), ("comment:2", "fix")):
        enqueue(engine, run.id, key, kind)
    seen: list[tuple[str, list[str]]] = []

    async def step(context: Any, request: Any) -> None:
        seen.append((request.dedupe_key, [r.state for r in reviews.requests(engine, run.id)]))
        reviews.finish(engine, request.id, "done")

    await review_queue.work(Context(engine), run.id, {"fix": step, "self": step})

    assert seen == [
        ("review:1", ["running", "queued", "queued"]),
        ("self:1:abc", ["done", "running", "queued"]),
        ("comment:2", ["done", "done", "running"]),
    ]


@pytest.mark.anyio
async def test_a_request_whose_work_raises_is_failed_with_the_error_and_the_next_one_still_runs(engine):
    run = new_run(engine)
    broken, after = enqueue(engine, run.id, "review:1"), enqueue(engine, run.id, "review:2")

    async def step(context: Any, request: Any) -> None:
        if request.id == broken.id:
            raise RuntimeError("the mirror is gone")
        reviews.finish(engine, request.id, "done")

    await review_queue.work(Context(engine, github=None), run.id, {"fix": step})

    failed, done = reviews.get(engine, broken.id), reviews.get(engine, after.id)
    assert (failed.state, failed.error) == ("failed", "RuntimeError: the mirror is gone")
    assert done.state == "done"
    assert [e.payload()["request"] for e in runs.run_events(engine, run.id) if e.kind == "review_request_failed"] == [
        broken.id
    ]


@pytest.mark.anyio
async def test_resume_queues_interrupted_requests_again_and_marks_their_agents_lost(engine):
    run = new_run(engine)
    interrupted = enqueue(engine, run.id, "review:1")
    waiting = enqueue(engine, run.id, "review:2")
    reviews.claim_next(engine, run.id)
    fix = runs.start_session(engine, run_id=run.id, kind="fix")
    lane = runs.start_session(engine, run_id=run.id, kind="lane")

    assert await review_queue.resume(Context(engine)) == [run.id]

    assert [reviews.get(engine, r.id).state for r in (interrupted, waiting)] == ["queued", "queued"]
    statuses = {s.id: (s.status, s.counts_as_retry) for s in runs.sessions(engine, run.id)}
    assert statuses[fix.id] == ("lost", False)
    assert statuses[lane.id][0] == "running"  # the orchestrator's, not the review queue's


@pytest.mark.anyio
async def test_resume_with_nothing_interrupted_finds_the_runs_that_still_have_queued_work(engine):
    busy, idle = new_run(engine), new_run(engine, issue_number=99)
    enqueue(engine, busy.id, "review:1")
    reviews.finish(engine, reviews.claim_next(engine, busy.id).id, "done")
    enqueue(engine, busy.id, "review:2")
    enqueue(engine, idle.id, "review:3")
    reviews.finish(engine, reviews.claim_next(engine, idle.id).id, "failed")

    assert await review_queue.resume(Context(engine)) == [busy.id]
