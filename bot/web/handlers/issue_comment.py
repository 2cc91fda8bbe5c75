"""`issue_comment.created`: the slash commands people give lanebot on an issue.

Only newly created comments count, never edits (an edit could turn an old comment into an
approval). Comments by bots, lanebot itself included, are ignored, and so are comments on pull
requests: those are bot/web/handlers/pull_comment.py's, which reuses this module's `Conversation`.
A comment with no command line at all costs nothing (no request to GitHub).

For a comment with commands (see `bot.core.commands` for what counts as one):

1. The author is authorised first (`bot.edges.github.permissions`, under the repository's `gate.approvers`).
   Refused: one answer `@login: `/command`: why. Valid now: …`, and nothing else happens.
2. Accepted: a 👀 reaction at once, then each command and each lookalike in the order written.
   Lookalikes (`/aprove`, `/replan` without feedback) get an answer naming the problem.
3. Each command is checked against the run's state with `bot.core.lifecycle.transition`; one that is
   not valid now gets the lifecycle's refusal. A state change is a compare-and-set in the
   database, so of twenty `/approve` comments racing, exactly one moves the run.

Every answer carries a hidden marker naming the comment and line it answers, so it is posted once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.budget import Spent
from bot.core.commands import Command, InvalidUsage, ParsedComment, UnknownCommand, help_text, parse_commands
from bot.core.lifecycle import HOLDABLE, Event, InvalidTransition, RunState, describe_state, is_held, transition
from bot.core.text import marker
from bot.core.workflow import WorkflowError
from bot.edges.github.issues import add_reaction
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.store import runs
from bot.edges.store.models import Run, utc_now
from bot.render.answers import render_refusal, render_status
from bot.render.progress import LaneView
from bot.runner.context import IssueContext
from bot.runner.plan import PlanRequest, follow_labels, issue_run, record_plan_request
from bot.web.dispatcher import HandlerContext
from bot.web.handlers.issues import STOPS_THE_BUILD, IssueTarget, answer, is_bot_account, jobs_of, request_plan

log = logging.getLogger(__name__)

router = routing.Router()

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# `approved_revision = plan_revision` evaluated by the database inside the compare-and-set, so the
# revision approved is the latest at the moment the run moves, never one read a moment earlier.
_LATEST_REVISION = Run.__table__.c.plan_revision  # type: ignore[attr-defined]  # SQLModel does not type `__table__`

Item = Command | UnknownCommand | InvalidUsage  # one command line of a comment, well-formed or not


@router.register("issue_comment", action="created")
async def on_comment_created(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    comment = payload.get("comment") or {}
    if is_bot_account(comment.get("user")):
        return
    parsed = parse_commands(comment.get("body") or "")
    if not parsed.commands and not parsed.problems:
        return
    if (payload.get("issue") or {}).get("pull_request"):
        return  # commands on pull requests (`/fix`) are bot/web/handlers/pull_comment.py's
    issue = payload.get("issue") or {}
    await Conversation(context, IssueTarget.from_payload(payload), comment, parsed, issue=issue).handle()


@dataclass
class Conversation:
    """One comment's commands, answered on its issue."""

    context: IssueContext
    target: IssueTarget
    comment: dict[str, Any]
    parsed: ParsedComment
    issue: Mapping[str, Any] = field(default_factory=dict)  # the issue as the delivery showed it

    @property
    def login(self) -> str:
        login: str = self.comment["user"]["login"]
        return login

    def items(self) -> list[Item]:
        """The comment's commands and lookalikes, in the order written."""
        found: list[Item] = [*self.parsed.commands, *self.parsed.unknown, *self.parsed.invalid]
        return sorted(found, key=lambda item: item.line)

    async def handle(self) -> None:
        items = self.items()
        try:
            workflow = await self.target.workflow(self.context)
        except WorkflowError as error:
            reason = "lanebot cannot read this repository's settings: " + "; ".join(error.problems)
            await self.refuse(items[0], reason, await self.state())
            return
        client = self.target.client(self.context)
        decision = await authorise(
            client,
            self.target.repository,
            self.login,
            workflow.gate,
            cache_for(self.context.github),
            user_id=self.comment["user"].get("id"),
        )
        if not decision.allowed:
            await self.refuse(items[0], decision.reason or "not allowed", await self.state())
            return
        if self.parsed.commands:
            await add_reaction(client, self.target.repository, self.comment["id"])
        for item in items:
            if isinstance(item, Command):
                await self.perform(item)
            else:
                await self.refuse(item, item.message, await self.state())

    async def perform(self, command: Command) -> None:
        await _COMMANDS[command.name](self, command)

    # ----------------------------------------------------------------------- answers

    def quoted(self, item: Item) -> str:
        """The line the command was written on, as the author wrote it."""
        lines = _LINE_BREAK.split(self.comment.get("body") or "")
        return lines[item.line - 1].strip() if 0 < item.line <= len(lines) else f"/{item.name}"

    def marker_for(self, item: Item) -> str:
        return marker("answer", None, comment=self.comment["id"], line=item.line)

    async def say(self, item: Item, text: str) -> None:
        answer_marker = self.marker_for(item)
        await answer(self.context, self.target, f"{answer_marker}\n{text}", answer_marker)

    async def refuse(self, item: Item, reason: str, state: RunState | None) -> None:
        """Answer `@login: `line`: reason. Valid now: …` (the valid commands of `state`)."""
        answer_marker = self.marker_for(item)
        body = render_refusal(
            self.login, self.quoted(item), reason, state, marker_text=answer_marker, held=await self.held()
        )
        await answer(self.context, self.target, body, answer_marker)

    # ----------------------------------------------------------------------- the run

    async def run(self) -> Run | None:
        return await to_thread.run_sync(
            issue_run, self.context.engine, self.target.repository, self.target.issue_number
        )

    async def state(self) -> RunState | None:
        run = await self.run()
        return RunState(run.state) if run is not None else None

    async def held(self) -> bool:
        run = await self.run()
        return run is not None and is_held(run.state, run.held_at is not None)

    async def move(self, command: Command, event: Event, **fields: Any) -> tuple[Run, RunState] | None:
        """Move the issue's run on `event` by compare-and-set: (the run as it was, its new state),
        or None after answering why it cannot move."""
        run = await self.run()
        state = RunState(run.state) if run is not None else None
        try:
            target = transition(state, event)
        except InvalidTransition as error:
            await self.refuse(command, _lifecycle_reason(error), state)
            return None
        # Only `/plan` is valid without a run, and it does not come here.
        assert run is not None and run.id is not None and state is not None
        run_id = run.id
        moved = await to_thread.run_sync(
            lambda: runs.transition(self.context.engine, run_id, state.value, target.value, **fields)
        )
        if not moved:
            await self.lost_race(command, event)
            return None
        await follow_labels(self.context, self.target.repository, self.target.issue_number)
        return run, target

    async def valid_now(self, command: Command, event: Event) -> Run | None:
        """The run, when `event` is valid in its state now; otherwise None, after answering why not."""
        run = await self.run()
        state = RunState(run.state) if run is not None else None
        try:
            transition(state, event)
        except InvalidTransition as error:
            await self.refuse(command, _lifecycle_reason(error), state)
            return None
        return run

    async def lost_race(self, command: Command, event: Event) -> None:
        state = await self.state()
        try:
            transition(state, event)
        except InvalidTransition as error:
            await self.refuse(command, _lifecycle_reason(error), state)
            return
        await self.refuse(
            command, "another command changed the run at the same moment; look at its state and try again", state
        )


def _lifecycle_reason(error: InvalidTransition) -> str:
    """The lifecycle's refusal without its list of valid commands (the answer adds that itself)."""
    return f"cannot {error.event.value} {describe_state(error.state)}"


# --------------------------------------------------------------------------- the commands


async def _plan(talk: Conversation, command: Command) -> None:
    # The run holding the issue decides, not the newest one: a done run whose pull request was
    # merged and closed holds the issue no more, and a new plan may start.
    active = await to_thread.run_sync(
        runs.active_run, talk.context.engine, talk.target.repository, talk.target.issue_number
    )
    state = RunState(active.state) if active is not None else None
    try:
        transition(state, Event.PLAN)
    except InvalidTransition as error:
        await talk.refuse(command, _lifecycle_reason(error), state)
        return
    request = PlanRequest(
        kind="plan",
        by=talk.login,
        text=talk.comment.get("body") or "",
        notes=command.args or None,
        comment_id=talk.comment["id"],
    )
    await request_plan(
        talk.context, talk.target, request, quoted=talk.quoted(command), answer_marker=talk.marker_for(command)
    )


async def _approve(talk: Conversation, command: Command) -> None:
    # The issue as GitHub showed it when the approval was written (the delivery's own copy), stored
    # with the approval: the lanes and the pull request read it, never the issue as edited since.
    moved = await talk.move(command, Event.APPROVE, approved_revision=_LATEST_REVISION, **_issue_snapshot(talk.issue))
    if moved is None:
        return
    run, _ = moved
    assert run.id is not None
    await to_thread.run_sync(runs.append_event, talk.context.engine, run.id, "approved", {"by": talk.login})
    jobs_of(talk.context).build(run.id)


def _issue_snapshot(issue: Mapping[str, Any]) -> dict[str, str]:
    if not isinstance(issue.get("title"), str):
        return {}  # no copy of the issue in the delivery: the run reads it from GitHub
    return {"approved_issue_title": issue["title"], "approved_issue_body": str(issue.get("body") or "")}


async def _reject(talk: Conversation, command: Command) -> None:
    moved = await talk.move(command, Event.REJECT)
    if moved is not None:
        run_id = moved[0].id
        assert run_id is not None
        await to_thread.run_sync(
            runs.append_event, talk.context.engine, run_id, "rejected", {"by": talk.login, "why": command.args}
        )


async def _replan(talk: Conversation, command: Command) -> None:
    run = await talk.run()
    request = PlanRequest(
        kind="replan",
        by=talk.login,
        text=talk.comment.get("body") or "",
        notes=command.args,
        comment_id=talk.comment["id"],
    )
    if run is not None and run.state == RunState.AWAITING_APPROVAL:
        assert run.id is not None
        # Stored before the move: once the run is in `planning`, a restart must find the feedback.
        await to_thread.run_sync(record_plan_request, talk.context.engine, run.id, request)
    moved = await talk.move(command, Event.REPLAN)
    if moved is not None:
        run_id = moved[0].id
        assert run_id is not None
        jobs_of(talk.context).plan(run_id)


async def _cancel(talk: Conversation, command: Command) -> None:
    moved = await talk.move(command, Event.CANCEL)
    if moved is None:
        return
    run, _ = moved
    assert run.id is not None
    await to_thread.run_sync(runs.append_event, talk.context.engine, run.id, "cancelled", {"by": talk.login})
    await jobs_of(talk.context).cancel(run.id, building=RunState(run.state) in STOPS_THE_BUILD)


async def _retry(talk: Conversation, command: Command) -> None:
    """Checked here so the author gets an answer; the orchestrator's `retry` moves the run itself
    (blocked -> running, by compare-and-set) after resetting the lanes it retries."""
    run = await talk.valid_now(command, Event.RETRY)
    if run is None:
        return
    assert run.id is not None
    state = RunState(run.state)
    unit = command.args.split()[0] if command.args else None
    failed = [
        lane.unit_id
        for lane in await to_thread.run_sync(runs.lanes, talk.context.engine, run.id)
        if lane.state == "failed"
    ]
    if unit is not None and unit not in failed:
        await talk.refuse(
            command, f"no failed lane is named {unit}; failed lanes: {', '.join(failed) or 'none'}", state
        )
        return
    jobs_of(talk.context).retry(run.id, unit)


async def _fix(talk: Conversation, command: Command) -> None:
    reason = "`/fix` works on lanebot's pull request, not on the issue: comment it there"
    await talk.refuse(command, reason, await talk.state())


async def _update(talk: Conversation, command: Command) -> None:
    reason = "`/update` works on lanebot's pull request, not on the issue: comment it there"
    await talk.refuse(command, reason, await talk.state())


async def _status(talk: Conversation, command: Command) -> None:
    run = await talk.run()
    answer_marker = talk.marker_for(command)
    head = f"{answer_marker}\n@{talk.login}:"
    if run is None:
        body = render_status(run_id=None, state=None, marker_text=head)
    else:
        assert run.id is not None  # a stored run has its id
        sessions = await to_thread.run_sync(runs.sessions, talk.context.engine, run.id)
        body = render_status(
            run_id=run.id,
            state=run.state,
            lanes=await _lane_views(talk, run),
            plan_revision=run.plan_revision or None,
            approved_revision=run.approved_revision,
            pr_number=run.pr_number,
            error=run.error,
            marker_text=head,
            spent=Spent.of(sessions),
            held=is_held(run.state, run.held_at is not None),
        )
    await answer(talk.context, talk.target, body, answer_marker)


async def _help(talk: Conversation, command: Command) -> None:
    await talk.say(command, f"@{talk.login}: {help_text(await talk.state(), held=await talk.held())}")


async def _hold(talk: Conversation, command: Command) -> None:
    """A flag beside the state (bot/core/lifecycle.py): the orchestrator starts no new agent session
    while it is set; what runs finishes, and finished lanes still merge."""
    run = await talk.run()
    state = RunState(run.state) if run is not None else None
    if run is None or run.held_at is not None or state not in HOLDABLE:
        held_by = f"; @{run.held_by} held it already" if run is not None and run.held_at is not None else ""
        await talk.refuse(command, f"cannot hold {describe_state(state)}{held_by}", state)
        return
    assert run.id is not None
    reason = command.args or None
    await _set_hold(talk, run.id, held_by=talk.login, held_reason=reason, held_at=utc_now())
    await to_thread.run_sync(
        runs.append_event, talk.context.engine, run.id, "held", {"by": talk.login, "reason": reason}
    )
    await talk.say(
        command,
        f"@{talk.login}: run {run.id} is held. No new agent session starts until `/unhold`; "
        "the running ones finish and finished lanes still merge.",
    )
    await _show_progress(talk, run.id)


async def _unhold(talk: Conversation, command: Command) -> None:
    run = await talk.run()
    state = RunState(run.state) if run is not None else None
    if run is None or not is_held(state, run.held_at is not None):
        await talk.refuse(command, f"cannot unhold {describe_state(state)}: it is not held", state)
        return
    assert run.id is not None
    await _set_hold(talk, run.id, held_by=None, held_reason=None, held_at=None)
    await to_thread.run_sync(
        runs.append_event, talk.context.engine, run.id, "unheld", {"by": talk.login, "held_by": run.held_by}
    )
    await talk.say(command, f"@{talk.login}: run {run.id} is no longer held; it starts its sessions again.")
    await _show_progress(talk, run.id)


async def _set_hold(talk: Conversation, run_id: int, **fields: Any) -> None:
    await to_thread.run_sync(lambda: runs.update_run(talk.context.engine, run_id, **fields))


async def _show_progress(talk: Conversation, run_id: int) -> None:
    """The progress comment says at once whether the run is held (nothing else may edit it soon)."""
    from bot.runner.orchestrator import publish_progress

    try:
        await publish_progress(talk.context, run_id)
    except Exception:  # the hold is set and answered; the run's next edit shows it
        log.warning("could not update the progress comment of run %d", run_id, exc_info=True)


async def _lane_views(talk: Conversation, run: Run) -> list[LaneView]:
    from bot.runner.orchestrator import lane_views

    return await lane_views(talk.context, run)


_COMMANDS: dict[str, Callable[[Conversation, Command], Awaitable[None]]] = {
    "plan": _plan,
    "approve": _approve,
    "reject": _reject,
    "replan": _replan,
    "cancel": _cancel,
    "retry": _retry,
    "fix": _fix,
    "update": _update,
    "hold": _hold,
    "unhold": _unhold,
    "status": _status,
    "help": _help,
}
