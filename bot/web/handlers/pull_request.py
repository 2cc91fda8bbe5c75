"""`pull_request.closed`: lanebot's pull request was merged or closed, so its run is tidied up.

Only a pull request lanebot opened counts: its head is `lanebot/<issue>` in the same repository
(not a fork's branch of that name), and the issue's newest run recorded this very pull request
number when it opened it. Anything else is ignored. What the clean-up does is bot/runner/cleanup.py's.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.names import INTEGRATION_PREFIX
from bot.runner.cleanup import ClosedPull, close_pull_request
from bot.runner.plan import issue_run
from bot.web.dispatcher import HandlerContext

log = logging.getLogger(__name__)

router = routing.Router()

_HEAD = re.compile(rf"^{re.escape(INTEGRATION_PREFIX)}/(?P<issue>[1-9][0-9]*)$")


def lanebot_issue(payload: Mapping[str, Any]) -> int | None:
    """The issue whose integration branch is the pull request's head, when that branch is in the
    repository itself; None for any other pull request. Pure."""
    pull = payload.get("pull_request") or {}
    head = pull.get("head") or {}
    head_repo = (head.get("repo") or {}).get("full_name")
    if head_repo is None or head_repo != (payload.get("repository") or {}).get("full_name"):
        return None
    match = _HEAD.match(str(head.get("ref") or ""))
    return int(match["issue"]) if match else None


@router.register("pull_request", action="closed")
async def pull_request_closed(event: sansio.Event, *, context: HandlerContext) -> None:
    payload = event.data
    issue_number = lanebot_issue(payload)
    if issue_number is None:
        return
    repository = payload["repository"]["full_name"]
    number = int(payload["pull_request"]["number"])
    run = await to_thread.run_sync(issue_run, context.engine, repository, issue_number)
    if run is None or run.pr_number != number:
        log.info(
            "%s#%d was closed but is not the pull request of a lanebot run of #%d", repository, number, issue_number
        )
        return
    pull = payload["pull_request"]
    closed = ClosedPull(
        number=number,
        merged=bool(pull.get("merged")),
        closed_by=str((payload.get("sender") or {}).get("login") or "someone"),
        merge_commit_sha=pull.get("merge_commit_sha") if pull.get("merged") else None,
    )
    await close_pull_request(context, run, closed)
