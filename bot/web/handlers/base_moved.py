"""`push` to a repository's default branch: lanebot's open pull requests there may now conflict.

A pull request comes to conflict when its base moves, and GitHub says a branch moved only with
`push` (no `pull_request` event: the pull request itself did not change). So on a push that moved
the default branch, the base of lanebot's pull requests, each run of the repository whose pull
request is open asks GitHub whether it still merges and, when it conflicts, says so once per head
and offers `/update` (bot/runner/pull_update.py `offer_update`, as on `pull_request.synchronize`).
A push to any other branch or tag, lanebot's own lane pushes among them, makes no request at all.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.base_moves import moves_default_branch
from bot.edges.store.runs import runs_with_open_pull
from bot.runner.pull_update import offer_update
from bot.web.dispatcher import HandlerContext

log = logging.getLogger(__name__)

router = routing.Router()


@router.register("push")
async def default_branch_pushed(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    if not moves_default_branch(payload):
        return
    runs = await to_thread.run_sync(runs_with_open_pull, context.engine, payload["repository"]["full_name"])
    # Side by side: each may wait some seconds for GitHub to compute its pull request's mergeability.
    # One failure does not stop the others; the first fails the delivery, the rest are logged.
    outcomes = await asyncio.gather(
        *(offer_update(context, run.id, run.pr_number) for run in runs if run.id is not None and run.pr_number),
        return_exceptions=True,
    )
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    for failure in failures[1:]:
        log.warning("asking whether a pull request still merges failed", exc_info=failure)
    if failures:
        raise failures[0]
