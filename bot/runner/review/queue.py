"""Review work on lanebot's pull request, one piece at a time: fix lanes and lanebot's own review.

A *review request* (bot/edges/store/reviews.py) is a row before it is work: a handler enqueues it (a
redelivered webhook finds its row by its dedupe key and queues nothing twice), answers on the pull
request, and asks the background jobs for `work(context, run_id)`. `work` claims the run's oldest
queued request only while none of the run's requests is running, so a pull request never has two
agents pushing to its branch at once; a request that arrives meanwhile waits, and its answer says
how many are ahead of it.

Each request has one comment on the pull request (found by its marker and edited in place): queued,
working, then what came of it. At start-up `resume` puts requests a previous life left `running`
back in the queue (their worktree is cut again from the pull request's head, so nothing half-done
is pushed), and when the pull request closes `cancel` drops what is still queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from bot.core.text import marker
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.store import reviews
from bot.edges.store import runs as store
from bot.edges.store.models import ReviewRequest, Run
from bot.runner.context import (
    BackgroundJobs,
    EngineContext,
    GitHubContext,
    IssueContext,
    JobsContext,
    RuntimeContext,
)
from bot.runner.runtime import db
from bot.runner.sessions import abandon_running

log = logging.getLogger(__name__)

_REVIEW_SESSIONS = ("fix", "review")

ReviewStep = Callable[[RuntimeContext, ReviewRequest], Awaitable[None]]

__all__ = ["cancel", "request_comment", "request_fix", "request_self_review", "resume", "work"]


def request_marker(request: ReviewRequest) -> str:
    return marker("review-request", request.run_id, request=request.id)


async def request_comment(context: GitHubContext, run: Run, request: ReviewRequest, body: str) -> None:
    """Write the request's one comment on the pull request (posted once, then edited); `body` may
    start with the request's marker already."""
    client = context.github.installation_client(run.installation_id, run.repository)
    head = request_marker(request)
    text = body if body.startswith(head) else f"{head}\n{body}"
    await post_or_update_marked_comment(client, run.repository, request.pr_number, text, marker=head)


async def request_fix(
    context: IssueContext,
    run: Run,
    *,
    by: str,
    key: str,
    review_id: int | None = None,
    comment_id: int | None = None,
    notes: str | None = None,
    asked: str,
    kind: str = "fix",
) -> ReviewRequest | None:
    """Queue a fix lane on the run's pull request and say so there; None when `key` was queued before.

    `asked` names what asked, for the answer (`your review`, "`/fix`"). `kind` "ci" is a fix lane
    for the repository's failing CI: `by` is the CI's bot, not a person to address.
    """
    assert run.id is not None and run.pr_number is not None
    request, created = await db(
        reviews.enqueue,
        context.engine,
        run_id=run.id,
        pr_number=run.pr_number,
        kind=kind,
        key=key,
        requested_by=by,
        review_id=review_id,
        comment_id=comment_id,
        notes=notes,
    )
    if not created:
        log.info("review request %s of run %d was queued before (%s)", key, run.id, request.state)
        return None
    await db(store.append_event, context.engine, run.id, "fix_requested", {"request": request.id, "by": by, "key": key})
    ahead = await db(reviews.queued_ahead, context.engine, request)
    to = "" if kind == "ci" else f"@{by}: "
    if ahead:
        earlier = f"{ahead} earlier request{'s' * (ahead != 1)} on this pull request"
        waiting = f"{earlier} {'go' if ahead != 1 else 'goes'} first"
        body = (
            f"{to}{asked} is queued: {waiting} (one review lane at a time, so two never push to this "
            "branch at once). This comment says when it starts and what came of it."
        )
    else:
        work = "merges the base branch into" if kind == "update" else "starts a fix lane on"
        body = f"{to}{asked} {work} this pull request's branch. This comment says what came of it."
    await request_comment(context, run, request, body)
    _jobs(context).review(run.id)
    return request


async def request_self_review(context: JobsContext, run_id: int, head_sha: str) -> ReviewRequest | None:
    """Queue lanebot's own review of the pull request at `head_sha` (once per head)."""
    run = await db(store.get_run, context.engine, run_id)
    if run is None or run.pr_number is None:
        return None
    request, created = await db(
        reviews.enqueue,
        context.engine,
        run_id=run_id,
        pr_number=run.pr_number,
        kind="self",
        key=f"self:{run_id}:{head_sha}",
        requested_by="lanebot",
    )
    if created:
        jobs = context.jobs
        if jobs is not None:
            jobs.review(run_id)
        else:  # resume() finds it at the next start
            log.warning("run %d: self-review queued, but this process has no background jobs", run_id)
    return request


async def work(context: RuntimeContext, run_id: int, steps: Mapping[str, ReviewStep]) -> None:
    """Do the run's queued review requests, one after another, until none is left; `steps` maps a
    request's kind to the step that does it (composed in bot.runner.jobs)."""
    while True:
        request = await db(reviews.claim_next, context.engine, run_id)
        if request is None:
            return
        await _perform(context, request, steps[request.kind])


async def _perform(context: RuntimeContext, request: ReviewRequest, step: ReviewStep) -> None:
    try:
        await step(context, request)
    except asyncio.CancelledError:
        raise  # lanebot stopping (it runs again from the queue) or the pull request closed (cancelled)
    except Exception as error:
        log.exception("review request %d of run %d failed", request.id, request.run_id)
        detail = f"{type(error).__name__}: {error}"[:2_000]
        await db(reviews.finish, context.engine, request.id, "failed", error=detail)
        await db(
            store.append_event,
            context.engine,
            request.run_id,
            "review_request_failed",
            {"request": request.id, "error": detail},
        )
        await _say_failed(context, request, error)


async def _say_failed(context: GitHubContext, request: ReviewRequest, error: Exception) -> None:
    run = await db(store.get_run, context.engine, request.run_id)
    if run is None:
        return
    fixing = request.kind in ("fix", "ci")
    what = "the fix lane" if fixing else "the update" if request.kind == "update" else "lanebot's own review"
    again = (
        " Comment `/fix` to try again."
        if fixing
        else " Comment `/update` to try again."
        if request.kind == "update"
        else ""
    )
    body = (
        f"{what.capitalize()} stopped: lanebot hit an error of its own ({type(error).__name__}); the runner's "
        f"log has the details. Nothing was pushed.{again}"
    )
    try:
        await request_comment(context, run, request, body)
    except Exception:
        log.warning("could not say on #%d that review request %d failed", request.pr_number, request.id, exc_info=True)


async def resume(context: EngineContext) -> list[int]:
    """Start-up: requests left running go back to the queue, the agents a previous life of lanebot
    left running for them are stopped; the runs with review work to do."""
    for run_id in await db(reviews.requeue_running, context.engine):
        await abandon_running(
            context.engine, run_id, _REVIEW_SESSIONS, "lanebot was not running it any more (restarted)"
        )
    return await db(reviews.runs_with_work, context.engine)


async def cancel(context: JobsContext, run_id: int, why: str) -> int:
    """The pull request closed: drop the run's open requests (a running one stops); how many."""
    count = await db(reviews.cancel_open, context.engine, run_id, why)
    jobs = context.jobs
    if jobs is not None:
        await jobs.stop_review(run_id)
    return count


def _jobs(context: JobsContext) -> BackgroundJobs:
    jobs = context.jobs
    if jobs is None:
        raise RuntimeError("review requests need background jobs: build the app with bot.web.app.create_app")
    return jobs
