"""`issues.labeled`: adding the trigger label to an issue plans it, exactly as `/plan` does.

The trigger label's name comes from the repository's workflow (`trigger.label`, default
`lanebot`). Labels lanebot sets itself (its state labels, or anything a bot adds) are ignored, as
are closed issues. The person who added the label must be allowed to command lanebot, like a
commenter; if they are not, or the issue already has a run, they get an answer that says why.

`issues.closed`: closing the issue cancels its run as `/cancel` does (authorised the same way),
unless the run is over already (done, failed, rejected, cancelled); reopening it changes nothing.

This module also holds what both issue handlers share: the issue an event is about
(`IssueTarget`), starting a run (`request_plan`) and answering on the issue (`answer`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio
from gidgethub.abc import GitHubAPI

from bot.core.labels import is_state_label
from bot.core.lifecycle import Event, InvalidTransition, RunState, transition
from bot.core.text import marker
from bot.core.workflow import Workflow, WorkflowError
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.store import runs
from bot.render.answers import render_refusal
from bot.runner.context import BackgroundJobs, EngineContext, GitHubContext, IssueContext, JobsContext
from bot.runner.plan import PlanRequest, follow_labels, issue_run, record_plan_request
from bot.runner.repository_workflow import installation_workflow
from bot.web.dispatcher import HandlerContext

log = logging.getLogger(__name__)

router = routing.Router()


@dataclass(frozen=True)
class IssueTarget:
    """The issue an event is about, and the installation to act as."""

    installation_id: int
    repository: str
    issue_number: int

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> IssueTarget:
        installation = payload.get("installation") or {}
        if "id" not in installation:
            raise ValueError("the delivery carries no installation: lanebot acts only through its App's installations")
        return cls(int(installation["id"]), payload["repository"]["full_name"], int(payload["issue"]["number"]))

    def client(self, context: GitHubContext) -> GitHubAPI:
        """A client scoped to this repository."""
        return context.github.installation_client(self.installation_id, self.repository)

    async def workflow(self, context: GitHubContext) -> Workflow:
        """The repository's workflow, read with an installation-wide client (it may fall back to the
        owner's `.github` repository, which a repository-scoped token cannot see)."""
        return await installation_workflow(context.github, self.installation_id, self.repository)


def is_bot_account(user: dict[str, Any] | None) -> bool:
    """Bots (lanebot itself, `<slug>[bot]`, included) are never obeyed."""
    user = user or {}
    return user.get("type") == "Bot" or str(user.get("login", "")).lower().endswith("[bot]")


def jobs_of(context: JobsContext) -> BackgroundJobs:
    jobs = context.jobs
    if jobs is None:
        raise RuntimeError("the issue handlers need background jobs: build the app with bot.web.app.create_app")
    return jobs


async def answer(context: GitHubContext, target: IssueTarget, body: str, answer_marker: str) -> None:
    """Post lanebot's answer on the issue once, however often this is called (found by its marker)."""
    await post_or_update_marked_comment(
        target.client(context), target.repository, target.issue_number, body, marker=answer_marker
    )


async def request_plan(
    context: IssueContext, target: IssueTarget, request: PlanRequest, *, quoted: str, answer_marker: str
) -> int | None:
    """Start a run in `planning` for the issue and schedule its plan; the run's id.

    When the issue already has an active run (the database refuses a second one), the requester
    is answered with that run's state and the commands valid for it, and None is returned.
    """
    try:
        run = await to_thread.run_sync(
            lambda: runs.create_run(
                context.engine,
                installation_id=target.installation_id,
                repository=target.repository,
                issue_number=target.issue_number,
                requested_by=request.by,
            )
        )
    except runs.ActiveRunExists as error:
        state = error.run.state if error.run is not None else None
        reason = (
            f"this issue already has run {error.run.id}, which is {state_words(state)}"
            if error.run
            else "this issue already has an active run"
        )
        await answer(
            context, target, render_refusal(request.by, quoted, reason, state, marker_text=answer_marker), answer_marker
        )
        return None
    assert run.id is not None
    await to_thread.run_sync(record_plan_request, context.engine, run.id, request)
    jobs_of(context).plan(run.id)
    log.info("run %d of %s#%d: planning, asked by %s", run.id, target.repository, target.issue_number, request.by)
    return run.id


@router.register("issues", action="labeled")
async def plan_on_trigger_label(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    label = (payload.get("label") or {}).get("name") or ""
    issue = payload.get("issue") or {}
    sender = payload.get("sender") or {}
    if is_bot_account(sender) or is_state_label(label) or issue.get("state") != "open" or "pull_request" in issue:
        return
    target = IssueTarget.from_payload(payload)
    workflow = await target.workflow(context)
    if label.casefold() != workflow.trigger.label.casefold():
        return
    login = sender["login"]
    quoted = f"label {label}"
    answer_marker = marker("answer", None, delivery=event.delivery_id.replace("-", "") or "unknown")
    decision = await authorise(
        target.client(context),
        target.repository,
        login,
        workflow.gate,
        cache_for(context.github),
        user_id=sender.get("id"),
    )
    if not decision.allowed:
        state = await _current_state(context, target)
        body = render_refusal(login, quoted, decision.reason or "not allowed", state, marker_text=answer_marker)
        await answer(context, target, body, answer_marker)
        return
    await request_plan(context, target, PlanRequest(kind="plan", by=login), quoted=quoted, answer_marker=answer_marker)


# Cancelling a run in these stops work the orchestrator may be doing (`/cancel` too).
STOPS_THE_BUILD = frozenset({RunState.RUNNING, RunState.INTEGRATING, RunState.BLOCKED})


@router.register("issues", action="closed")
async def cancel_on_close(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    sender = payload.get("sender") or {}
    if is_bot_account(sender) or "pull_request" in (payload.get("issue") or {}):
        return
    target = IssueTarget.from_payload(payload)
    run = await to_thread.run_sync(issue_run, context.engine, target.repository, target.issue_number)
    if run is None:
        return
    run_id, state = run.id, RunState(run.state)
    assert run_id is not None
    try:
        cancelled = transition(state, Event.CANCEL)
    except InvalidTransition:
        return  # over already: closing the issue has nothing to stop
    login = sender["login"]
    answer_marker = marker("answer", None, delivery=event.delivery_id.replace("-", "") or "unknown")
    refused = await _closing_refused(context, target, login, sender.get("id"))
    if refused is not None:
        reason = f"{refused}; run {run_id} goes on"
        body = render_refusal(login, "closed the issue", reason, state, marker_text=answer_marker)
        await answer(context, target, body, answer_marker)
        return
    moved = await to_thread.run_sync(lambda: runs.transition(context.engine, run_id, state.value, cancelled.value))
    if not moved:
        return  # another command moved the run at this moment; it says where it went
    await to_thread.run_sync(runs.append_event, context.engine, run_id, "cancelled", {"by": login, "closed": True})
    await follow_labels(context, target.repository, target.issue_number)
    await jobs_of(context).cancel(run_id, building=state in STOPS_THE_BUILD)
    text = f"@{login} closed the issue, so run {run_id} is cancelled; its branches and transcripts are kept."
    await answer(context, target, f"{answer_marker}\n{text}", answer_marker)


async def _closing_refused(context: HandlerContext, target: IssueTarget, login: str, user_id: Any) -> str | None:
    """Why `login` may not cancel the run by closing its issue, or None when they may."""
    try:
        workflow = await target.workflow(context)
    except WorkflowError as error:
        return "lanebot cannot read this repository's settings: " + "; ".join(error.problems)
    decision = await authorise(
        target.client(context), target.repository, login, workflow.gate, cache_for(context.github), user_id=user_id
    )
    return None if decision.allowed else decision.reason or "not allowed"


def state_words(state: RunState | str | None) -> str:
    """`awaiting approval`, for answers."""
    return "not started" if state is None else RunState(state).value.replace("_", " ")


async def _current_state(context: EngineContext, target: IssueTarget) -> RunState | None:
    run = await to_thread.run_sync(issue_run, context.engine, target.repository, target.issue_number)
    return RunState(run.state) if run is not None else None
