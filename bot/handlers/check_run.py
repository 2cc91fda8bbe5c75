"""`check_run.rerequested`: a person re-ran one of lanebot's lane check runs, so retry that lane.

The check run says which run and lane it reports on in its `external_id` (bot/checks.py). Only
someone allowed to command lanebot on the repository is obeyed; anyone else, and bots, are
ignored with a log line (there is no issue thread to answer on from a check run, and GitHub
shows the re-run as requested either way). The retry goes through the same path as `/retry`.
"""

from __future__ import annotations

import logging
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.checks import parse_external_id
from bot.dispatcher import HandlerContext
from bot.github.config import load_repository_workflow
from bot.github.issues import split_repository
from bot.handlers.issues import is_bot_account, jobs_of
from bot.lifecycle import Event, InvalidTransition, transition
from bot.permissions import authorise, cache_for
from bot.store import runs

log = logging.getLogger(__name__)

router = routing.Router()


@router.register("check_run", action="rerequested")
async def rerun_lane(event: sansio.Event, *, context: HandlerContext) -> None:
    payload = event.data
    target = parse_external_id(payload["check_run"].get("external_id"))
    if target is None or target[1] is None:
        return  # not a lane check of lanebot's
    run_id, unit = target
    run = await to_thread.run_sync(runs.get_run, context.engine, run_id)
    repository = payload["repository"]["full_name"]
    if run is None or run.repository != repository:
        log.info("check run %s names run %s, which is not on %s", payload["check_run"]["id"], run_id, repository)
        return
    if not await _may_command(context, payload, repository):
        return
    try:
        transition(run.state, Event.RETRY)
    except InvalidTransition as refused:
        log.info("re-run of lane %s on run %s ignored: %s", unit, run_id, refused)
        return
    jobs_of(context).retry(run_id, unit)


async def _may_command(context: HandlerContext, payload: dict[str, Any], repository: str) -> bool:
    sender = payload.get("sender") or {}
    if is_bot_account(sender):
        return False
    installation_id = int(payload["installation"]["id"])
    owner, name = split_repository(repository)
    workflow = await load_repository_workflow(context.github.installation_client(installation_id, None), owner, name)
    client = context.github.installation_client(installation_id, repository)
    decision = await authorise(client, repository, sender["login"], workflow.gate, cache_for(context.github))
    if not decision.allowed:
        log.info("re-run by %s ignored: %s", sender["login"], decision.reason)
    return decision.allowed
