"""`pull_request_review.submitted`: a reviewer asked for changes on lanebot's pull request.

A review whose state is `changes_requested`, on a pull request a lanebot run opened (its head is
`lanebot/<issue>` in the repository itself and the run recorded its number), from someone allowed to
approve, queues a fix lane (bot/runner/review/queue.py). Its brief holds the review's body and every review
comment still unresolved, the reviewer's and everyone else's, each marked as an instruction or as
context by who wrote it.

A changes-requested review from someone who may not approve starts nothing; lanebot answers once to
say so, and that its comments will be read as context by the next fix lane. Approvals, plain
comments, reviews by bots and reviews of other pull requests are ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.lifecycle import Event, InvalidTransition, transition
from bot.core.text import marker
from bot.core.workflow import WorkflowError
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.store import runs
from bot.runner.repository_workflow import installation_workflow
from bot.runner.review.queue import request_fix
from bot.web.dispatcher import HandlerContext
from bot.web.handlers.issues import is_bot_account
from bot.web.handlers.pull_request import lanebot_issue

log = logging.getLogger(__name__)

router = routing.Router()


@router.register("pull_request_review", action="submitted")
async def review_submitted(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    review = payload.get("review") or {}
    pull = payload.get("pull_request") or {}
    if str(review.get("state") or "").lower() != "changes_requested" or is_bot_account(review.get("user")):
        return
    if lanebot_issue(payload) is None or pull.get("state") != "open":
        return
    repository, number = payload["repository"]["full_name"], int(pull["number"])
    run = await to_thread.run_sync(runs.run_for_pull, context.engine, repository, number)
    if run is None:
        return
    try:
        transition(run.state, Event.FIX)
    except InvalidTransition:
        log.info("run %d is %s: a review asking for changes on #%d starts nothing", run.id, run.state, number)
        return
    login = review["user"]["login"]
    installation = int(payload["installation"]["id"])
    client = context.github.installation_client(installation, repository)
    answer_marker = marker("answer", run.id, review=int(review["id"]))
    try:
        workflow = await installation_workflow(context.github, installation, repository)
    except WorkflowError as error:
        body = (
            f"{answer_marker}\n@{login}: your review starts no fix lane: lanebot cannot read this "
            f"repository's settings: {'; '.join(error.problems)}"
        )
        await post_or_update_marked_comment(client, repository, number, body, marker=answer_marker)
        return
    decision = await authorise(
        client, repository, login, workflow.gate, cache_for(context.github), user_id=review["user"].get("id")
    )
    if not decision.allowed:
        body = (
            f"{answer_marker}\n@{login}: your review starts no fix lane: "
            f"{decision.reason or 'you may not command lanebot here'}. Its comments stay as context: the next "
            "fix lane someone who may command lanebot asks for (a review asking for changes, or `/fix`) reads "
            "them, but does not take them as instructions."
        )
        await post_or_update_marked_comment(client, repository, number, body, marker=answer_marker)
        return
    await request_fix(
        context,
        run,
        by=login,
        key=f"review:{review['id']}",
        review_id=int(review["id"]),
        notes=review.get("body") or None,
        asked="your review",
    )
