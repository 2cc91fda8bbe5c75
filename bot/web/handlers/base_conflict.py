"""`pull_request.synchronize` on lanebot's pull request: when it now conflicts with its base, say so.

GitHub sends `synchronize` when the pull request's head moves (lanebot's own pushes and people's).
lanebot then asks GitHub whether it still merges into its base (computed lazily: asked again while
the answer is null) and, when it conflicts, says so once per head on the pull request and offers
`/update` (bot/runner/pull_update.py). Only the pull request a lanebot run opened counts.
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.runner.plan import issue_run
from bot.runner.pull_update import offer_update
from bot.web.dispatcher import HandlerContext
from bot.web.handlers.pull_request import lanebot_issue

router = routing.Router()


@router.register("pull_request", action="synchronize")
async def pull_request_synchronized(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    issue_number = lanebot_issue(payload)
    if issue_number is None:
        return
    number = int(payload["pull_request"]["number"])
    run = await to_thread.run_sync(issue_run, context.engine, payload["repository"]["full_name"], issue_number)
    if run is None or run.id is None or run.pr_number != number:
        return
    await offer_update(context, run.id, number)
