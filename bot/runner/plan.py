"""The plan step: take a run in `planning` to a gate comment, or to `failed` with every reason.

It runs in the background (`bot.runner.jobs.Jobs.plan`), never in the dispatcher, and is safe to run
again: it does nothing unless the run is in `planning`, and every comment it writes is found
again by its hidden marker before a new one is made.

1. Load the repository's workflow (its `.github/lanebot.yml` chain over the defaults, read with an
   installation-wide client so the owner's `.github` repository is visible); create the labels
   lanebot uses if the repository lacks them; show `lanebot:planning` on the issue.
2. Fetch the default branch into the repository's mirror under `settings.workdir` (the remote is
   the repository's `clone_url`; the installation token reaches git through its environment only)
   and list its tracked paths.
3. Take the plan from a hand-written `lanebot-plan` block (in the `/plan` or `/replan` comment, or
   for `/plan` and the label, in the issue body) with no agent session; otherwise run the
   workflow's plan agent read-only in a fresh detached checkout, removed afterwards. A `/replan`
   gives the planner the maintainer's feedback and the plan being replaced.
4. Valid: store the plan as the run's next revision, move the run to `awaiting_approval`
   (compare-and-set), post the gate comment and mark the previous revision's gate comment
   superseded. Invalid: move the run to `failed` and post every reason. Labels follow.

What started the plan is stored as a run event (`record_plan_request`), so a run left in
`planning` by a restart is planned again with the same request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast

from anyio import to_thread
from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from bot.core.commands import COMMANDS
from bot.core.graph import Graph, Unit, UnitJson, parse_units
from bot.core.lifecycle import Event, RunState, available_actions, transition
from bot.core.plans import CommentText, IssueText, PlanOutcome, extract_hand_plan, plan_from_hand
from bot.core.text import COMMENT_LIMIT, Escaped, code_span, markdown_text, marker, parse_marker, shorten
from bot.core.workflow import Workflow, WorkflowError
from bot.edges.agents import Agent, AgentConfigError, make_agent
from bot.edges.git import Credentials, Mirror
from bot.edges.github.issues import (
    ensure_trigger_label,
    get_comment,
    list_comments,
    post_or_update_marked_comment,
    set_state_label,
    split_repository,
    update_comment,
)
from bot.edges.logcontext import bind_log_context
from bot.edges.store import runs
from bot.edges.store.db import session
from bot.edges.store.models import Run
from bot.render.answers import render_plan_failed
from bot.render.gate import GateTooLarge, PlanSource, gate_size_problems, render_gate, render_superseded
from bot.runner.context import EngineContext, GitHubContext, IssueContext, RunnerContext, RuntimeContext
from bot.runner.jailing import agent_jail, unjailed
from bot.runner.plan_session import plan_issue
from bot.runner.repository_workflow import installation_workflow
from bot.runner.sessions import RecordedAgent, abandon_running, host_name

log = logging.getLogger(__name__)

__all__ = [
    "PLAN_REQUESTED",
    "PlanRequest",
    "follow_labels",
    "issue_run",
    "latest_plan_request",
    "plan_run",
    "publish_gate",
    "record_plan_request",
    "stored_graph",
]

PLAN_REQUESTED = "plan_requested"  # the run event that says what asked for the next plan
_PROBLEMS_SHOWN = 50
_ERROR_CHARS = 2_000


# --------------------------------------------------------------------------- the request


@dataclass(frozen=True)
class PlanRequest:
    """What asked for a plan: `/plan [notes]`, `/replan <feedback>`, or the trigger label."""

    kind: Literal["plan", "replan"]
    by: str  # the login that asked
    text: str = ""  # the asking comment's body, where a hand-written plan may be ("" for the label)
    notes: str | None = None  # /plan's notes or /replan's feedback: a maintainer's words for the planner
    comment_id: int | None = None


def record_plan_request(engine: Engine, run_id: int, request: PlanRequest) -> None:
    """Store what asked for the run's next plan, before the plan job is started."""
    runs.append_event(engine, run_id, PLAN_REQUESTED, asdict(request))


def latest_plan_request(engine: Engine, run_id: int, requested_by: str) -> PlanRequest:
    """The last request stored for the run (a plain `/plan` by `requested_by` when none was)."""
    events = [event for event in runs.run_events(engine, run_id) if event.kind == PLAN_REQUESTED]
    if not events:
        return PlanRequest(kind="plan", by=requested_by)
    return PlanRequest(**events[-1].payload())


def issue_run(engine: Engine, repository: str, issue_number: int) -> Run | None:
    """The issue's newest run, finished or not (None when it never had one)."""
    query = (
        select(Run)
        .where(Run.repository == repository, Run.issue_number == issue_number)
        .order_by(col(Run.id).desc())
        .limit(1)
    )
    with session(engine) as db:
        return db.exec(query).first()


def stored_graph(units_jsonl: str) -> Graph:
    """The graph of a plan revision as stored (it was validated before it was stored)."""
    # Validated before it was stored, so each item is a unit's JSON object.
    return Graph(tuple(Unit.from_json(cast(UnitJson, item)) for item in parse_units(units_jsonl)))


# --------------------------------------------------------------------------- the step


async def plan_run(context: RunnerContext, run_id: int) -> None:
    """Plan run `run_id` if it is in `planning`; afterwards it is awaiting approval or failed.

    A cancellation (shutdown, `/cancel`) leaves the run as it is: a restart plans it again.
    """
    bind_log_context(run_id=run_id)
    run = await to_thread.run_sync(runs.get_run, context.engine, run_id)
    if run is None or run.state != RunState.PLANNING:
        return
    try:
        await _plan(context, run)
    except asyncio.CancelledError:
        raise
    except WorkflowError as error:
        await _fail_setup(context, run, "its lanebot settings are not valid", error.problems)
    except Exception as error:
        log.exception("planning run %d of %s#%d failed", run.id, run.repository, run.issue_number)
        await _fail_setup(context, run, "an internal error stopped it", (), internal=error)


async def _plan(context: RunnerContext, run: Run) -> None:
    assert run.id is not None
    client = _client(context, run)
    mirror, base_sha, tracked = await _default_branch(context, run, client)
    # At the commit the plan is cut from: what the lanes read again there is not asked for again.
    workflow = await installation_workflow(context.github, run.installation_id, run.repository, base_sha)
    await ensure_trigger_label(client, run.repository, workflow.trigger.label)
    await follow_labels(context, run.repository, run.issue_number)

    request = await to_thread.run_sync(latest_plan_request, context.engine, run.id, run.requested_by)
    issue, listed = await read_issue(client, run.repository, run.issue_number)
    hand_plan = _hand_plan(request, issue)
    if hand_plan is not None:
        shows = _gate_check(context, run, workflow, "hand")
        outcome = await to_thread.run_sync(
            lambda: plan_from_hand(hand_plan, workflow=workflow, tracked_paths=tracked, gate_problems=shows)
        )
    else:
        previous = (
            await to_thread.run_sync(runs.latest_plan, context.engine, run.id) if request.kind == "replan" else None
        )
        outcome = await _run_planner(
            context,
            run,
            workflow,
            mirror,
            base_sha,
            tracked,
            issue,
            request,
            previous.units_jsonl if previous else None,
        )
    await to_thread.run_sync(runs.append_event, context.engine, run.id, "planned", _outcome_summary(outcome, base_sha))
    if outcome.ok:
        await _accept(context, run, workflow, outcome, request, listed)
    else:
        await _fail(context, run, outcome)


async def _default_branch(context: RuntimeContext, run: Run, client: GitHubAPI) -> tuple[Mirror, str, list[str]]:
    """The repository's mirror, fetched; the sha of its default branch; that tree's paths."""
    owner, name = split_repository(run.repository)
    repository = await client.getitem("/repos/{owner}/{repo}", {"owner": owner, "repo": name})
    mirror = Mirror(context.settings.workdir, run.repository, repository["clone_url"], _token_provider(context, run))
    await mirror.fetch()
    base_sha = await mirror.resolve(repository["default_branch"])
    return mirror, base_sha, await mirror.tracked_paths(base_sha)


def _hand_plan(request: PlanRequest, issue: IssueText) -> str | None:
    """A `lanebot-plan` block in the asking comment, else (for a new plan only) in the issue body.

    A `/replan` asks for a different plan, so the issue body's block is not taken again.
    """
    found = extract_hand_plan(request.text) if request.text else None
    if found is None and request.kind == "plan":
        found = extract_hand_plan(issue.body)
    return found


async def _run_planner(
    context: RuntimeContext,
    run: Run,
    workflow: Workflow,
    mirror: Mirror,
    base_sha: str,
    tracked: Sequence[str],
    issue: IssueText,
    request: PlanRequest,
    previous_plan: str | None,
) -> PlanOutcome:
    assert run.id is not None
    owner, name = split_repository(run.repository)
    workdir = Path(context.settings.workdir)
    checkout = workdir / "checkouts" / owner / f"{name}-run-{run.id}-plan"
    transcripts = workdir / "transcripts" / owner / name / f"run-{run.id}" / f"plan-{run.plan_revision + 1}"
    await abandon_running(context.engine, run.id, ("plan",), "lanebot stopped while it ran; the run is planned again")
    await mirror.checkout(checkout, base_sha)
    try:
        return await plan_issue(
            issue=issue,
            workflow=workflow,
            checkout=checkout,
            tracked_paths=tracked,
            transcripts_dir=transcripts,
            feedback=request.notes,
            previous_plan=previous_plan,
            agent=_recorded_planner(context, run, workflow),
            gate_problems=_gate_check(context, run, workflow, "agent"),
            jail=lambda attempt: agent_jail(
                context.settings,
                agent=workflow.plan.agent,
                worktree=checkout,
                folder=workdir / "scratch" / str(run.id) / f"plan-{run.plan_revision + 1}-attempt-{attempt}",
            ),
        )
    finally:
        await mirror.remove_worktree(checkout)


def _recorded_planner(context: EngineContext, run: Run, workflow: Workflow) -> Agent | None:
    """The plan agent, each session a row of the run; None when it cannot be made (plan_issue says why)."""
    assert run.id is not None
    try:
        agent = make_agent(workflow.plan.agent, getattr(workflow.agents, workflow.plan.agent))
    except AgentConfigError:
        return None
    return RecordedAgent(agent, context.engine, run_id=run.id, kind="plan", host=host_name())


def _outcome_summary(outcome: PlanOutcome, base_sha: str) -> dict[str, Any]:
    return {
        "source": outcome.source,
        "ok": outcome.ok,
        "base_sha": base_sha,
        "attempts": [{"attempt": a.attempt, "reasons": list(a.reasons)} for a in outcome.attempts],
    }


async def _accept(
    context: IssueContext,
    run: Run,
    workflow: Workflow,
    outcome: PlanOutcome,
    request: PlanRequest,
    listed: list[dict[str, Any]],
) -> None:
    """Store the plan and put up its gate. `listed`, the issue's comments read before planning,
    holds any gate an earlier life of this step posted, so the gate is not looked for again."""
    run_id, units_jsonl = run.id, outcome.units_jsonl
    assert run_id is not None and units_jsonl is not None
    plan = await to_thread.run_sync(
        lambda: runs.add_plan(
            context.engine, run_id, units_jsonl=units_jsonl, source=outcome.source, feedback=request.notes
        )
    )
    target = transition(RunState.PLANNING, Event.PLAN_READY)
    moved = await to_thread.run_sync(runs.transition, context.engine, run_id, RunState.PLANNING.value, target.value)
    if not moved:
        await to_thread.run_sync(
            runs.append_event,
            context.engine,
            run_id,
            "plan_discarded",
            {"revision": plan.revision, "why": "the run left planning while the plan was made"},
        )
        return
    await publish_gate(context, run_id, workflow=workflow, listed=listed)
    await follow_labels(context, run.repository, run.issue_number)


async def publish_gate(
    context: GitHubContext,
    run_id: int,
    *,
    workflow: Workflow | None = None,
    listed: list[dict[str, Any]] | None = None,
) -> None:
    """Post (or bring up to date) the gate comment of the run's latest plan revision, and mark the
    previous revision's gate comment superseded. Idempotent: comments are found by their marker."""
    run = await to_thread.run_sync(runs.get_run, context.engine, run_id)
    plan = await to_thread.run_sync(runs.latest_plan, context.engine, run_id)
    if run is None or plan is None:
        return
    if workflow is None:
        workflow = await installation_workflow(context.github, run.installation_id, run.repository)
    graph = stored_graph(plan.units_jsonl)
    # The store writes no other source; render_gate checks again.
    arguments = _gate_arguments(context, run, workflow, plan.revision, cast(PlanSource, plan.source))
    client = _client(context, run)
    try:
        body = render_gate(graph=graph, **arguments)
    except GateTooLarge as too_large:  # the repository's verify grew since the plan was validated
        await _withdraw_gate(context, run, plan.revision, str(too_large))
        return
    gate = await post_or_update_marked_comment(
        client, run.repository, run.issue_number, body, marker=marker("gate", run.id, rev=plan.revision), listed=listed
    )
    previous = run.gate_comment_id
    if previous is not None and previous != gate["id"]:
        await _supersede(client, run.repository, previous, plan.revision)
    if previous != gate["id"]:
        await to_thread.run_sync(lambda: runs.update_run(context.engine, run_id, gate_comment_id=gate["id"]))


def _gate_arguments(
    context: GitHubContext, run: Run, workflow: Workflow, revision: int, source: PlanSource
) -> dict[str, Any]:
    """What render_gate needs besides the graph, for this run and revision."""
    assert run.id is not None
    return {
        "run_id": run.id,
        "revision": revision,
        "budget": workflow.session_budget(),
        "state": RunState.AWAITING_APPROVAL,
        "issue_number": run.issue_number,
        "repository": run.repository,
        "plan_source": source,
        "schedule": workflow.build.schedule,
        "max_lanes": workflow.build.max_lanes,
        "verify": workflow.integrate.verify,
        "setup": workflow.build.setup,
        "teardown": workflow.build.teardown,
        "cost_caps": workflow.budget.caps(),
        "unjailed": unjailed(getattr(context, "settings", None)),  # a context without settings: jailed
    }


def _gate_check(
    context: GitHubContext, run: Run, workflow: Workflow, source: PlanSource
) -> Callable[[Graph], tuple[str, ...]]:
    """The plan validation's question to the gate: can it show this graph whole?"""
    arguments = _gate_arguments(context, run, workflow, run.plan_revision + 1, source)
    return lambda graph: gate_size_problems(graph=graph, **arguments)


async def _withdraw_gate(context: GitHubContext, run: Run, revision: int, why: str) -> None:
    """A stored plan the gate can no longer show whole is not put up for approval: the run is
    rejected (by lanebot, with the reason), so no `/approve` can approve text nobody saw."""
    run_id = run.id
    assert run_id is not None
    target = transition(RunState.AWAITING_APPROVAL, Event.REJECT)
    moved = await to_thread.run_sync(
        lambda: runs.transition(context.engine, run_id, RunState.AWAITING_APPROVAL.value, target.value, error=why)
    )
    if not moved:
        return
    await to_thread.run_sync(runs.append_event, context.engine, run_id, "rejected", {"by": "lanebot", "why": why})
    text = (
        f"{marker('gate-withdrawn', run_id, rev=revision)}\n**lanebot cannot show plan revision {revision} whole**,"
        f" so it is not put up for approval and the run has ended: {markdown_text(shorten(why, 2_000))}.\n\n"
        "Start again with `/plan [notes]`.\n"
    )
    client = _client(context, run)
    await post_or_update_marked_comment(
        client, run.repository, run.issue_number, text, marker=marker("gate-withdrawn", run_id, rev=revision)
    )
    await set_state_label(client, run.repository, run.issue_number, target.value)


async def _supersede(client: GitHubAPI, repository: str, comment_id: int, revision: int) -> None:
    old = await get_comment(client, repository, comment_id)
    if old is None:
        return  # someone deleted it: nothing left to mark
    fields = parse_marker(old.get("body") or "")
    if (
        not fields
        or fields.get("kind") != "gate"
        or not isinstance(fields.get("rev"), int)
        or fields["rev"] >= revision
    ):
        return
    body = render_superseded(old["body"], revision)
    if body != old["body"]:
        await update_comment(client, repository, comment_id, body)


async def _fail(context: IssueContext, run: Run, outcome: PlanOutcome) -> None:
    problems = outcome.problems
    summary = "; ".join(problems) or "the planner produced no plan"
    body = render_plan_failed(problems, max(len(outcome.attempts), 1), marker_text=marker("plan-failed", run.id))
    await _end_failed(context, run, summary, body)


async def _fail_setup(
    context: IssueContext, run: Run, why: str, problems: Sequence[str], *, internal: BaseException | None = None
) -> None:
    """Fail the run for something other than the plan itself: settings, or an internal error.

    An internal error's details (paths, git's output) go to the run's row and the log, not to
    the issue, which anyone may read.
    """
    assert run.id is not None
    detail = f"{type(internal).__name__}: {internal}" if internal is not None else "; ".join(problems)
    if internal is not None:
        shown, advice = [f"{type(internal).__name__} (the details are in lanebot's log)"], "Try again"
    else:
        shown, advice = list(problems), "Fix this, then try again"
    body = _render_setup_failure(run.id, why, shown, advice)
    await _end_failed(context, run, f"{why}: {detail}"[:_ERROR_CHARS], body)


async def _end_failed(context: IssueContext, run: Run, error: str, body: str) -> None:
    run_id = run.id
    assert run_id is not None
    target = transition(RunState.PLANNING, Event.PLAN_FAILED)
    moved = await to_thread.run_sync(
        lambda: runs.transition(context.engine, run_id, RunState.PLANNING.value, target.value, error=error)
    )
    if not moved:
        return
    client = _client(context, run)
    await post_or_update_marked_comment(
        client, run.repository, run.issue_number, body, marker=marker("plan-failed", run.id)
    )
    await follow_labels(context, run.repository, run.issue_number)


def _render_setup_failure(run_id: int, why: str, problems: Sequence[str], advice: str) -> str:
    items = [f"- {markdown_text(shorten(problem, 1_000))}" for problem in problems[:_PROBLEMS_SHOWN]]
    if len(problems) > _PROBLEMS_SHOWN:
        items.append(f"- … and {len(problems) - _PROBLEMS_SHOWN} more")
    valid_now = ", ".join(code_span(COMMANDS[name].usage) for name in available_actions(RunState.FAILED))
    text = (
        f"{marker('plan-failed', run_id)}\n"
        f"**lanebot could not plan this issue**: {markdown_text(why)}; the run has failed.\n\n"
        + "\n".join(items)
        + f"\n\n{advice} with `/plan [notes]`. Valid now: {Escaped(valid_now)}.\n"
    )
    return shorten(text, COMMENT_LIMIT)


# --------------------------------------------------------------------------- issue text and labels


async def read_issue(client: GitHubAPI, repository: str, issue_number: int) -> tuple[IssueText, list[dict[str, Any]]]:
    """The issue's title, body and comments as the planner sees them (lanebot's own left out), and
    every comment as GitHub listed it (where lanebot's own are looked for by marker)."""
    owner, name = split_repository(repository)
    issue = await client.getitem(
        "/repos/{owner}/{repo}/issues/{issue_number}", {"owner": owner, "repo": name, "issue_number": issue_number}
    )
    listed = await list_comments(client, repository, issue_number)
    comments = [
        CommentText(author=(comment.get("user") or {}).get("login", ""), body=comment.get("body") or "")
        for comment in listed
        if not is_lanebot_comment(comment)
    ]
    text = IssueText(
        number=issue_number, title=issue.get("title") or "", body=issue.get("body") or "", comments=tuple(comments)
    )
    return text, listed


def is_lanebot_comment(comment: dict[str, Any]) -> bool:
    """A comment written by a bot account that starts with one of lanebot's markers."""
    user = comment.get("user") or {}
    return user.get("type") == "Bot" and parse_marker(comment.get("body") or "") is not None


async def follow_labels(context: IssueContext, repository: str, issue_number: int) -> None:
    """Make the issue's state label show the state of its newest run, as the database holds it now.

    Reading the state inside a per-issue lock makes concurrent callers converge on the latest
    state, whatever order they finish in.
    """
    jobs = context.jobs
    lock: AbstractAsyncContextManager[object] = (
        jobs.issue_lock(repository, issue_number) if jobs is not None else contextlib.nullcontext()
    )
    async with lock:
        run = await to_thread.run_sync(issue_run, context.engine, repository, issue_number)
        if run is None or run.id is None:
            return
        await set_state_label(_client(context, run), repository, issue_number, run.state)
        if run.labelled_state != run.state:
            run_id, state = run.id, run.state
            await to_thread.run_sync(lambda: runs.update_run(context.engine, run_id, labelled_state=state))


def _client(context: GitHubContext, run: Run) -> GitHubAPI:
    return context.github.installation_client(run.installation_id, run.repository)


def _token_provider(context: GitHubContext, run: Run) -> Callable[[], Awaitable[Credentials]]:
    async def credentials() -> Credentials:
        return Credentials(token=await context.github.tokens.token(run.installation_id, run.repository))

    return credentials
