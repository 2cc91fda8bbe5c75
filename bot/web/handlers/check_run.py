"""`check_run.rerequested` and `check_run.requested_action`: a person asked to run again what one
of lanebot's check runs ran.

- On a lane's check run (`lanebot / <unit>`): GitHub's "Re-run", or the `Retry lane` button a
  lane's last failed attempt offers (bot/core/checks.py), retries that lane, as `/retry <unit>` does.
- On the verify check run (`lanebot / verify`): "Re-run", or the `Re-run verify` button, runs the
  integrate step and verify again, as `/retry` does on a run that verify blocked.

The check run says which run (and lane) it reports on in its `external_id`. Only someone allowed
to command lanebot on the repository is obeyed; anyone else, and bots, are ignored with a log
line (there is no issue thread to answer on from a check run). A request the run cannot take
(it is not blocked, that lane did not fail) is ignored the same way.

The clicked check run is edited to say who asked, and loses its button so nobody asks twice.
A lane's retry reports once, when it is done: on a new check run on the lane's new head when
the attempt commits, or, when it ends on the same commit, by completing the clicked one again
with its result (GitHub shows one check run per name and commit, not two). What was asked is stored as a
`check_rerun` run event before the retry is handed to the background jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.checks import RERUN_VERIFY, RETRY_LANE, VERIFY_CHECK, lane_check_name, parse_external_id
from bot.core.lifecycle import Event, InvalidTransition, transition
from bot.edges.github.checks import acknowledge_rerun
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.store import runs
from bot.render.checks import rerun_note
from bot.runner.context import GitHubContext, IssueContext
from bot.runner.repository_workflow import installation_workflow
from bot.web.dispatcher import HandlerContext
from bot.web.handlers.issues import is_bot_account, jobs_of

log = logging.getLogger(__name__)

router = routing.Router()

CHECK_RERUN_EVENT = "check_rerun"  # the run event that records who asked for what, from which check run


@dataclass(frozen=True)
class Rerun:
    """What a person asked for from a check run: lane `unit` of run `run_id` again, or (unit None)
    the run's integrate step and verify again."""

    run_id: int
    unit: str | None

    @property
    def what(self) -> str:
        return f"a retry of lane {self.unit}" if self.unit else "a re-run of verify"


def rerun_asked(check_run: Mapping[str, Any], identifier: str | None) -> Rerun | str:
    """What a re-run (`identifier` None) or a click on the button `identifier` of `check_run` asks
    for; a string saying why it asks for nothing of lanebot's. Pure."""
    target = parse_external_id(check_run.get("external_id"))
    if target is None:
        return "the check run is not one of lanebot's"
    run_id, unit = target
    name = check_run.get("name")
    if unit is not None:
        if name != lane_check_name(unit):
            return f"the check run {name!r} is not lane {unit}'s"
        wanted = RETRY_LANE.identifier
    else:
        if name != VERIFY_CHECK:
            return f"the check run {name!r} is not lanebot's verify check"
        wanted = RERUN_VERIFY.identifier
    if identifier is not None and identifier != wanted:
        return f"the button {identifier!r} is not one lanebot offers on {name!r}"
    return Rerun(run_id, unit)


def rerun_refusal(rerun: Rerun, run_state: str, lane_states: Mapping[str, str]) -> str | None:
    """Why the run cannot take `rerun` now, or None when it can. Pure."""
    try:
        transition(run_state, Event.RETRY)
    except InvalidTransition as refused:
        return str(refused)
    failed = sorted(unit for unit, state in lane_states.items() if state == "failed")
    if rerun.unit is None:
        if failed:
            return f"verify did not block this run, its failed lanes did ({', '.join(failed)}); retry them instead"
        return None
    state = lane_states.get(rerun.unit)
    if state is None:
        return f"the run has no lane {rerun.unit!r}"
    if state != "failed":
        return f"lane {rerun.unit!r} is {state}, not failed"
    return None


@router.register("check_run", action="rerequested")
async def rerun_check(event: sansio.Event, *, context: HandlerContext) -> None:
    await _rerun(context, event.data, identifier=None)


@router.register("check_run", action="requested_action")
async def run_requested_action(event: sansio.Event, *, context: HandlerContext) -> None:
    identifier = (event.data.get("requested_action") or {}).get("identifier")
    if not isinstance(identifier, str):
        log.info("check_run.requested_action without an identifier ignored")
        return
    await _rerun(context, event.data, identifier=identifier)


async def _rerun(context: IssueContext, payload: dict[str, Any], *, identifier: str | None) -> None:
    check_run = payload["check_run"]
    asked = rerun_asked(check_run, identifier)
    if isinstance(asked, str):
        log.info("check run %s: nothing to do (%s)", check_run.get("id"), asked)
        return
    run = await to_thread.run_sync(runs.get_run, context.engine, asked.run_id)
    repository = payload["repository"]["full_name"]
    if run is None or run.repository != repository:
        log.info("check run %s names run %s, which is not on %s", check_run.get("id"), asked.run_id, repository)
        return
    assert run.id is not None
    if not await _may_command(context, payload, repository):
        return
    lanes = await to_thread.run_sync(runs.lanes, context.engine, run.id)
    refusal = rerun_refusal(asked, run.state, {lane.unit_id: lane.state for lane in lanes})
    if refusal is not None:
        log.info("%s on run %s ignored: %s", asked.what, run.id, refusal)
        return
    requested_by = payload["sender"]["login"]
    await to_thread.run_sync(
        runs.append_event,
        context.engine,
        run.id,
        CHECK_RERUN_EVENT,
        {
            "unit": asked.unit,
            "check_run_id": check_run.get("id"),
            "by": requested_by,
            "via": identifier or "rerequested",
        },
    )
    await _acknowledge(context, payload, run.installation_id, asked, requested_by)
    jobs_of(context).retry(run.id, asked.unit)


async def _acknowledge(
    context: GitHubContext, payload: dict[str, Any], installation_id: int, asked: Rerun, requested_by: str
) -> None:
    """Best effort: the retry must happen even when GitHub will not take the note."""
    repository = payload["repository"]["full_name"]
    client = context.github.installation_client(installation_id, repository)
    try:
        check_run = payload["check_run"]
        title, summary = rerun_note(
            requested_by=requested_by,
            what=asked.what,
            check_name=str(check_run.get("name")),
            summary=(check_run.get("output") or {}).get("summary"),
        )
        await acknowledge_rerun(client, repository, int(check_run["id"]), title=title, summary=summary)
    except Exception:
        log.warning(
            "could not note on check run %s that %s asked for %s",
            payload["check_run"].get("id"),
            requested_by,
            asked.what,
            exc_info=True,
        )


async def _may_command(context: GitHubContext, payload: dict[str, Any], repository: str) -> bool:
    sender = payload.get("sender") or {}
    if is_bot_account(sender):
        return False
    installation_id = int(payload["installation"]["id"])
    workflow = await installation_workflow(context.github, installation_id, repository)
    client = context.github.installation_client(installation_id, repository)
    decision = await authorise(
        client, repository, sender["login"], workflow.gate, cache_for(context.github), user_id=sender.get("id")
    )
    if not decision.allowed:
        log.info("re-run by %s ignored: %s", sender["login"], decision.reason)
    return decision.allowed
