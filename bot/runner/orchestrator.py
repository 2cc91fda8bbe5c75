"""The orchestrator: moves an approved run from its plan to one pull request, and back from a crash.

One idempotent `reconcile(context, run_id)` does one step: it reads the rows, asks the
scheduler (`bot.core.scheduler.decide`) what to do, does it through the executor, and writes what it
intends before it acts and what happened after. `drive` repeats it until the run rests (`done`,
`blocked`, `cancelled`), waiting for lane jobs in between; it keeps the progress comment (edited
in place at most once every few seconds, and once more at the end) and the state label in step.

What one step does, for a run in `running`:

- the first time: record the run's `base_sha` (the default branch as it is now) and push the
  integration branch `lanebot/<issue>` there; create the lanes' rows;
- lanes the executor no longer holds although their rows say `running` (lanebot restarted) are
  put back to `pending`, their sessions marked `lost`, at no cost to their retries;
- merge what the scheduler says to merge (a merge job), or start what it says to start (record
  each lane's base, then hand the lane job to the executor);
- every lane merged: `lanes_merged`, and the run is `integrating`; a failed lane with nothing
  else left to do: `lane_blocked`, and the run is `blocked` naming the lanes and why.

For a run in `integrating`: the integrate job (integrate, verify, the PR).

`cancel` stops the run's jobs and agents and keeps branches and transcripts; `retry` gives
failed lanes (or a failed integrate step) another go and drives the run again; `recover_runs`
is the start-up pass over unfinished runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine

from bot.core.budget import Spent, lane_spent
from bot.core.labels import label_for
from bot.core.lifecycle import Event, InvalidTransition, RunState, is_held, transition
from bot.core.names import integration_branch, lane_branch
from bot.core.scheduler import LaneState, decide
from bot.core.text import marker
from bot.core.waiting import Held, NoLaneSlot, WaitReason, lane_slot_wait, why_waiting
from bot.edges.executor import Executor, Job, JobKind, integrate_job, lane_job, merge_job
from bot.edges.executor.embedded import EmbeddedExecutor
from bot.edges.github.client import RateLimitWait
from bot.edges.github.issues import edit_comment_if_there, get_comment, post_or_update_marked_comment
from bot.edges.logcontext import bind_log_context
from bot.edges.store import runs as store
from bot.edges.store.models import AgentSession, Lane, Run, utc_now
from bot.render.progress import LaneView, RateLimitNote, Throttle, render_progress, shows_state
from bot.runner.budget import block_for_budget, budget_stop_for, integrate_over_budget
from bot.runner.context import EngineContext, GitHubContext, IssueContext, RunnerContext, RuntimeContext
from bot.runner.faults import MAX_INTERRUPTIONS, counts_against_the_cap, host_fault, interruption_pause
from bot.runner.integrate import (
    INTEGRATION_WORKTREE,
    integrate_run,
    merge_lanes,
    remove_integration_worktree,
    session_seconds,
)
from bot.runner.lanes import FailureKind, LaneFailure, remote_sha, run_lane
from bot.runner.leases import DatabaseLeases, take_over_expired
from bot.runner.plan import follow_labels
from bot.runner.runtime import (
    Runtime,
    add_worktree,
    db,
    forget_runtimes,
    host_name,
    load_runtime,
    remove_worktree,
)
from bot.runner.sessions import stop_session_process

log = logging.getLogger(__name__)

__all__ = [
    "PROGRESS_INTERVAL_S",
    "cancel",
    "drive",
    "executor_for",
    "perform",
    "publish_progress",
    "reconcile",
    "recover_run",
    "recover_runs",
    "retry",
    "shutdown",
]

PROGRESS_INTERVAL_S = 5.0  # at most one edit of the progress comment this often
IDLE_POLL_S = 10.0  # how often drive looks at the database when no job of its run ends
BUILDING = (RunState.RUNNING.value, RunState.INTEGRATING.value)


# --------------------------------------------------------------------------- the executor


_EXECUTORS: dict[int, tuple[Engine, Executor]] = {}


def executor_for(context: RunnerContext) -> Executor:
    """The context's executor (`context.executor`), else this process's executor for its database,
    created on first use with the host's caps: the Celery executor when the host's settings name a
    broker (LANEBOT_BROKER_URL), else the embedded one."""
    # An extra a host or a test may set; RunnerContext cannot declare a member that may be absent.
    explicit: Executor | None = getattr(context, "executor", None)
    if explicit is not None:
        return explicit
    entry = _EXECUTORS.get(id(context.engine))
    if entry is None or entry[0] is not context.engine:
        # LANEBOT_BROKER_URL (an extra of the host's Settings): jobs go to `lanebot worker`s.
        broker_url: str = getattr(context.settings, "broker_url", "")
        executor: Executor
        if broker_url:
            from bot.edges.executor.celery_executor import CeleryExecutor

            async def stopping(run_id: int) -> bool:
                run = await db(store.get_run, context.engine, run_id)
                return run is not None and run.state == RunState.CANCELLED

            executor = CeleryExecutor(
                broker_url,
                stopping=stopping,
                leases=DatabaseLeases(context),
            )
        else:
            executor = EmbeddedExecutor(
                functools.partial(perform, context),
                max_lanes=context.settings.max_lanes,
                max_runs_per_repo=context.settings.max_runs_per_repo,
            )
        entry = _EXECUTORS[id(context.engine)] = (context.engine, executor)
    return entry[1]


async def shutdown(context: EngineContext) -> None:
    """lanebot is stopping: stop every job of this process's executor for the context's database
    (their runs resume at the next start) and forget what was cached for it."""
    entry = _EXECUTORS.pop(id(context.engine), None)
    forget_runtimes(context)
    if entry is not None and entry[0] is context.engine:
        await entry[1].close()


async def perform(context: RunnerContext, job: Job) -> None:
    """Do one job (what an executor calls). A merge or integrate step that fails for a reason of
    lanebot's own blocks the run with that reason, so `/retry` can run it again."""
    bind_log_context(run_id=job.run_id, unit=job.unit_id)
    if job.kind is JobKind.LANE:
        await run_lane(context, job)
        return
    step, state, event = (
        (merge_lanes, RunState.RUNNING, Event.LANE_BLOCKED)
        if job.kind is JobKind.MERGE
        else (integrate_run, RunState.INTEGRATING, Event.INTEGRATE_FAILED)
    )
    key = (id(context.engine), job.run_id, job.kind)
    try:
        await step(context, job)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        fault = host_fault(error)
        if fault is not None and counts_against_the_cap(fault):
            _STEP_INTERRUPTIONS[key] = _STEP_INTERRUPTIONS.get(key, 0) + 1
        interruptions = _STEP_INTERRUPTIONS.get(key, 0)
        if fault is not None and interruptions <= MAX_INTERRUPTIONS:
            await _step_interrupted(context, job, fault, interruption_pause(interruptions, error))
            return
        _STEP_INTERRUPTIONS.pop(key, None)
        log.exception("%s failed", job.describe())
        what = "merging the lanes" if job.kind is JobKind.MERGE else "the integrate step"
        reason = (
            f"{what} failed ({fault or type(error).__name__}); the runner's log has the details. /retry runs it again."
        )
        await db(
            store.append_event,
            context.engine,
            job.run_id,
            "step_failed",
            {"job": job.kind.value, "error": f"{type(error).__name__}: {error}"[:2_000]},
        )
        await db(
            store.transition, context.engine, job.run_id, state.value, transition(state, event).value, error=reason
        )
    else:
        _STEP_INTERRUPTIONS.pop(key, None)


# (engine, run, kind) -> the merge or integrate steps the host interrupted in a row (bot.runner.faults).
_STEP_INTERRUPTIONS: dict[tuple[int, int, JobKind], int] = {}


async def _step_interrupted(context: RunnerContext, job: Job, fault: str, pause: float) -> None:
    """A merge or integrate step met a fault of the host: it is not the step's failure. After a
    pause the step ends; the drive loop's next reconcile runs it again (each step picks up
    what its interrupted predecessor left, as after a crash)."""
    log.warning("%s interrupted (%s); it runs again in %g s", job.describe(), fault, pause)
    with contextlib.suppress(Exception):  # the database may be what is away
        await db(store.append_event, context.engine, job.run_id, "interrupted", {"job": job.kind.value, "fault": fault})
    await asyncio.sleep(pause)


# --------------------------------------------------------------------------- reconcile


async def reconcile(context: RunnerContext, run_id: int) -> bool:
    """Do the next step of the run; whether anything changed. Safe to call again at any time."""
    run = await db(store.get_run, context.engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    if run.state == RunState.INTEGRATING:
        await _recover_orphans(context, run_id)
        if _on_hold(run):  # the integrate step starts agent sessions; one already running goes on
            return False
        if await integrate_over_budget(context, run_id):
            return True
        await executor_for(context).run(integrate_job(run_id))
        return True
    if run.state != RunState.RUNNING:
        return False
    shared = not executor_for(context).local
    if shared and await db(store.building_ahead, context.engine, run) >= context.settings.max_runs_per_repo:
        return False  # waits for an earlier run of the repository (the cap is the database's: see _start_lanes)
    rt = await load_runtime(context, run_id)
    changed = await _start_integration_branch(rt)
    lanes = await db(store.lanes, context.engine, run_id) or await db(
        store.create_lanes, context.engine, run_id, rt.graph.rounds()
    )
    if await _recover_orphans(context, run_id, lanes):
        return True
    states = {lane.unit_id: LaneState(lane.state) for lane in lanes}
    decision = decide(rt.graph, states, rt.workflow.build.schedule, rt.workflow.build.max_lanes)
    _note_lane_slot_wait(context, rt, states)
    if decision.merge:  # merges go on while the run is held: they start no agent session
        await executor_for(context).run(merge_job(run_id, decision.merge))
        return True
    if decision.start and not _on_hold(run) and (over_budget := await budget_stop_for(rt)) is not None:
        return await block_for_budget(rt, over_budget, state=RunState.RUNNING, lanes=lanes) or changed
    if decision.start and not _on_hold(run):
        starting = decision.start
        if shared:  # at most max_lanes across every run and every worker, counted in the database
            room = context.settings.max_lanes - await db(store.lanes_running, context.engine)
            starting = starting[: max(room, 0)]
        return (bool(starting) and await _start_lanes(context, rt, lanes, starting)) or changed
    if decision.complete:
        return await _move(context, run, Event.LANES_MERGED)
    if decision.stalled:
        return await _move(context, run, Event.LANE_BLOCKED, error=blocked_reason(lanes))
    return changed


def _on_hold(run: Run) -> bool:
    """`/hold`: the run starts no new agent session (lanes, the integrate step) until `/unhold`."""
    return is_held(run.state, run.held_at is not None)


# (engine, run) -> the lanes `build.max_lanes` keeps waiting, as the run's last reconcile saw them.
_LANE_SLOT_WAITS: dict[tuple[int, int], NoLaneSlot] = {}


def _note_lane_slot_wait(context: EngineContext, rt: Runtime, states: dict[str, LaneState]) -> None:
    key = (id(context.engine), rt.run_id)
    build = rt.workflow.build
    wait = lane_slot_wait(rt.graph, states, build.schedule, build.max_lanes)
    if wait is None:
        _LANE_SLOT_WAITS.pop(key, None)
    else:
        _LANE_SLOT_WAITS[key] = wait


def waits_of(context: EngineContext, run: Run, rate_limit: RateLimitNote | None) -> tuple[WaitReason, ...]:
    """Why the run waits now, for its progress comment (bot.core.waiting decides)."""
    assert run.id is not None
    hold = Held(run.held_by or "someone", run.held_at, run.held_reason) if run.held_at is not None else None
    return why_waiting(
        run.state,
        hold=hold,
        lane_slot=_LANE_SLOT_WAITS.get((id(context.engine), run.id)),
        rate_limited_until=rate_limit.until if rate_limit is not None and rate_limit.waiting else None,
        now=utc_now(),
    )


async def _move(context: EngineContext, run: Run, event: Event, **fields: Any) -> bool:
    target = transition(run.state, event)
    return await db(store.transition, context.engine, run.id, run.state, target.value, **fields)


async def _start_integration_branch(rt: Runtime) -> bool:
    """Record the run's base (the default branch now) and push `lanebot/<issue>` there, once.

    `runs.integration_branch` is set only after that push, so a crash in between pushes again.
    """
    run = rt.run
    if run.integration_branch is not None:
        return False
    branch = integration_branch(run.issue_number)
    await rt.mirror.fetch()
    base = run.base_sha
    if base is None:
        base = await rt.mirror.resolve(rt.repository.default_branch)
        await db(store.update_run, rt.engine, run.id, base_sha=base)
    worktree = await add_worktree(rt.mirror, rt.worktree_path(INTEGRATION_WORKTREE), branch=branch, start=base)
    try:
        await worktree.push(branch, force=True)
    finally:
        await remove_worktree(rt.mirror, worktree.path)
    await db(store.update_run, rt.engine, run.id, integration_branch=branch)
    await db(store.append_event, rt.engine, run.id, "integration_branch", {"branch": branch, "base": base})
    return True


async def _start_lanes(context: RunnerContext, rt: Runtime, lanes: Sequence[Lane], units: Sequence[str]) -> bool:
    """Mark each lane running on its base (the integration branch as pushed now), then submit it."""
    await rt.mirror.fetch()
    pushed = await remote_sha(rt.mirror, integration_branch(rt.issue_number))
    if pushed is None:
        raise RuntimeError(f"the integration branch of run {rt.run.id} is missing from the remote")
    by_unit = {lane.unit_id: lane for lane in lanes}
    sessions = await db(store.sessions, rt.engine, rt.run.id)
    started = False
    for unit in units:
        lane = by_unit[unit]
        attempt = 1 + sum(1 for s in sessions if s.lane_id == lane.id and s.kind == "lane")
        base = lane.base_sha or pushed
        await db(
            store.append_event, rt.engine, rt.run.id, "lane_start", {"unit": unit, "attempt": attempt, "base": base}
        )
        if await db(
            store.set_lane_state,
            rt.engine,
            lane.id,
            "pending",
            "running",
            base_sha=base,
            branch=lane_branch(rt.issue_number, unit),
        ):
            await executor_for(context).submit(lane_job(rt.run_id, unit, attempt))
            started = True
    return started


def blocked_reason(lanes: Sequence[Lane]) -> str:
    """Which lanes failed and why, one line each, for the run's `error`."""
    lines = []
    for lane in lanes:
        if lane.state == "failed":
            failure = LaneFailure.from_text(lane.failure) if lane.failure else None
            lines.append(f"lane '{lane.unit_id}' failed: {failure.reason if failure else 'no reason recorded'}")
    return "\n".join(lines) or "no lane can make progress"


# --------------------------------------------------------------------------- lost work


async def _recover_orphans(context: RunnerContext, run_id: int, lanes: Sequence[Lane] | None = None) -> bool:
    """Sessions and lanes the database calls running but no job of this process holds (a previous
    life of lanebot ran them): sessions `lost` (their processes stopped), lanes back to `pending`.
    Only for an executor that runs every job in this process. Whether anything was recovered."""
    executor = executor_for(context)
    if not executor.local:  # its jobs run on workers, which hold leases
        return await take_over_expired(context, run_id)
    active = executor.active(run_id)
    lanes = lanes if lanes is not None else await db(store.lanes, context.engine, run_id)
    held = {job.unit_id for job in active if job.kind is JobKind.LANE}
    kinds_held = {job.kind for job in active}
    lane_units = {lane.id: lane.unit_id for lane in lanes}
    changed = False
    for session in await db(store.running_sessions, context.engine, run_id):
        if _held(session, lane_units, held, kinds_held):
            continue
        await stop_session_process(session)
        changed |= await db(
            store.finish_session,
            context.engine,
            session.id,
            status="lost",
            counts_as_retry=False,
            failure="lanebot was not running it any more (restarted)",
        )
    for lane in lanes:
        if lane.state == "running" and lane.unit_id not in held:
            # Its check run, if it reported one, holds a result that stands; else there is none.
            changed |= await db(store.set_lane_state, context.engine, lane.id, "running", "pending")
    if changed:
        await db(store.append_event, context.engine, run_id, "recovered", {"host": host_name()})
    return changed


def _held(session: AgentSession, lane_units: dict[int | None, str], held: set[str | None], kinds: set[JobKind]) -> bool:
    if session.kind == "lane":
        return lane_units.get(session.lane_id or -1) in held
    if session.kind == "resolve":
        return JobKind.MERGE in kinds
    if session.kind in ("integrate", "verify"):
        return JobKind.INTEGRATE in kinds
    return True  # planner and review sessions are not the orchestrator's


async def recover_run(context: RunnerContext, run_id: int) -> bool:
    """Recover one run's lost sessions and lanes (see `reconcile`); whether anything changed."""
    return await _recover_orphans(context, run_id)


async def recover_runs(context: RunnerContext) -> list[int]:
    """The start-up pass: recover every building run's lost work; the ids of the runs to `drive`."""
    ids = []
    for run in await db(store.unfinished_runs, context.engine):
        if run.state in BUILDING:
            assert run.id is not None
            await _recover_orphans(context, run.id)
            ids.append(run.id)
    return ids


# --------------------------------------------------------------------------- drive


_DRIVING: dict[tuple[int, int], asyncio.Task[object] | None] = {}


async def drive(context: RunnerContext, run_id: int) -> str:
    """Reconcile the run until it rests (done, blocked, cancelled, ...); its state then.

    One drive per run in this process: a second call while one runs returns at once (the first
    one sees whatever the caller changed in the database at its next step).
    """
    bind_log_context(run_id=run_id)
    key = (id(context.engine), run_id)
    if key in _DRIVING:
        run = await db(store.get_run, context.engine, run_id)
        return run.state if run else "missing"
    _DRIVING[key] = asyncio.current_task()
    executor = executor_for(context)
    progress = _Progress(context, run_id)
    try:
        run = await db(store.get_run, context.engine, run_id)
        if run is None:
            raise LookupError(f"no run with id {run_id}")
        async with executor.run_slot(run.repository):
            state = await _drive_loop(context, run_id, executor, progress)
    except asyncio.CancelledError:
        # lanebot is stopping: stop the run's jobs too; they resume at the next start.
        progress.cancel()
        await _shielded(executor.cancel_run(run_id))
        raise
    finally:
        _DRIVING.pop(key, None)
    await _tidy(context, run_id)
    await progress.final()
    return state


async def _tidy(context: RuntimeContext, run_id: int) -> None:
    """The run rests: its integration worktree (kept between merge rounds) goes; branches stay."""
    _LANE_SLOT_WAITS.pop((id(context.engine), run_id), None)
    with contextlib.suppress(Exception):  # best effort: a later run of the issue replaces it anyway
        await remove_integration_worktree(await load_runtime(context, run_id))


async def _drive_loop(context: RunnerContext, run_id: int, executor: Executor, progress: _Progress) -> str:
    faults = 0
    while True:
        generation = executor.generation(run_id)
        try:
            changed = await reconcile(context, run_id)
            run = await db(store.get_run, context.engine, run_id)
        except Exception as error:
            fault = host_fault(error)
            if fault is None:
                raise
            faults += 1
            pause = interruption_pause(faults, error)
            # The run's owner keeps trying: nothing can move while the database or disk is away.
            log.warning("run %d: %s; reconciling again in %g s", run_id, fault, pause)
            await asyncio.sleep(pause)
            continue
        faults = 0
        if run is None or run.state not in BUILDING:
            return run.state if run else "missing"
        if changed or executor.generation(run_id) != generation:
            progress.changed()
            continue
        progress.flush_if_due()
        await executor.wait(run_id, generation, progress.wait_hint(IDLE_POLL_S))
        if executor.generation(run_id) != generation:
            progress.changed()


FINAL_EDIT_PAUSES_S = (2.0, 10.0)  # between the tries of a run's last progress edit


class _Progress:
    """The run's progress comment and state label, edited at most once per interval.

    Edits go out in the background, one after another, so talking to GitHub never holds up a
    merge or a lane's start; `final` waits for them and makes the last edit.
    """

    def __init__(self, context: IssueContext, run_id: int) -> None:
        self.context = context
        self.run_id = run_id
        # An extra (tests edit more often); IssueContext cannot declare a member that may be absent.
        interval: float = getattr(context, "progress_interval_s", PROGRESS_INTERVAL_S)
        self.throttle = Throttle(interval)
        self.labelled: str | None = None
        self.edits: asyncio.Task[None] | None = None

    def changed(self) -> None:
        if self.throttle.should_edit(time.monotonic()):
            self._edit_in_background()

    def flush_if_due(self) -> None:
        now = time.monotonic()
        if self.throttle.pending and self.throttle.next_allowed(now) <= now and self.throttle.should_edit(now):
            self._edit_in_background()

    def wait_hint(self, idle: float) -> float:
        if not self.throttle.pending:
            return idle
        now = time.monotonic()
        return max(0.05, min(idle, self.throttle.next_allowed(now) - now))

    async def final(self) -> None:
        """The last edit: the comment and the label must show where the run came to rest, so a
        failed edit is tried again (nothing edits after this one)."""
        await self._settled()
        for pause in (*FINAL_EDIT_PAUSES_S, None):
            if await self.publish():
                return
            if pause is not None:
                await asyncio.sleep(pause)

    def cancel(self) -> None:
        if self.edits is not None:
            self.edits.cancel()

    def _edit_in_background(self) -> None:
        earlier = self.edits

        async def edit() -> None:
            if earlier is not None:
                await asyncio.gather(earlier, return_exceptions=True)
            await self.publish()

        self.edits = asyncio.ensure_future(edit())

    async def _settled(self) -> None:
        if self.edits is not None:
            await asyncio.gather(self.edits, return_exceptions=True)

    async def publish(self) -> bool:
        """Edit the comment, then the label if the state moved to another label (running and
        integrating share one, so that move costs no read); whether both went through. GitHub
        being unwell must not stop the run: the next edit brings both up to date."""
        published = True
        try:
            await publish_progress(self.context, self.run_id)
        except Exception:
            log.warning("could not update the progress comment of run %d", self.run_id, exc_info=True)
            published = False
        try:
            run = await db(store.get_run, self.context.engine, self.run_id)
            # The label set before this driver started (by /approve, or an earlier life) is known
            # from the run's row, so the first edit reads the issue's labels only when it moved.
            shown = self.labelled or (run.labelled_state if run is not None else None)
            if run is not None and (shown is None or label_for(run.state) != label_for(shown)):
                await follow_labels(self.context, run.repository, run.issue_number)
                self.labelled = run.state
        except Exception:
            log.warning("could not update the state label of run %d", self.run_id, exc_info=True)
            published = False
        return published


async def publish_progress(context: GitHubContext, run_id: int) -> str | None:
    """Write the run's progress comment (edited in place by the id the database keeps; found by its
    marker before it is first posted, or when it was deleted); the run's state."""
    run = await db(store.get_run, context.engine, run_id)
    lanes = await db(store.lanes, context.engine, run_id)
    if run is None or not lanes:
        return run.state if run else None
    sessions = await db(store.sessions, context.engine, run_id)
    views = await lane_views(context, run, lanes, sessions)
    lane_sessions = [s for s in sessions if s.kind == "lane"]
    starts = [s.started_at for s in lane_sessions]
    ends = [lane.merged_at for lane in lanes if lane.merged_at]
    finished = run.state not in BUILDING and ends
    wall_clock = ((max(ends) if finished else utc_now()) - min(starts)).total_seconds() if starts else None
    rate_limit = rate_limit_note(context.github.rate_limit_waits(run.installation_id), since=min(starts, default=None))
    body = render_progress(
        run_id,
        run.state,
        views,
        wall_clock_s=max(0.0, wall_clock) if wall_clock is not None else None,
        sum_of_lanes_s=session_seconds(lane_sessions),
        blocked_reason=run.error if run.state == RunState.BLOCKED else None,
        now=utc_now(),
        rate_limit=rate_limit,
        waits=waits_of(context, run, rate_limit),
        held=run.held_at is not None,
        spent=Spent.of(sessions),
    )
    client = context.github.installation_client(run.installation_id, run.repository)
    if run.progress_comment_id is not None:  # the database knows it: edit it, no look for it first
        if await edit_comment_if_there(client, run.repository, run.progress_comment_id, body) is not None:
            return run.state
    comment = await post_or_update_marked_comment(
        client, run.repository, run.issue_number, body, marker=marker("progress", run.id)
    )
    if run.progress_comment_id != comment["id"]:
        await db(store.update_run, context.engine, run.id, progress_comment_id=comment["id"])
    return run.state


async def refresh_progress(context: GitHubContext, run_id: int) -> None:
    """Start-up, for a run that ended lately: a crash between its last transition and its last
    progress edit left the comment one step behind. Edit it when it does not show the run's
    state; one read when it does."""
    run = await db(store.get_run, context.engine, run_id)
    if run is None or run.progress_comment_id is None:
        return
    client = context.github.installation_client(run.installation_id, run.repository)
    shown = await get_comment(client, run.repository, run.progress_comment_id)
    if shown is None or not shows_state(str(shown.get("body", "")), run_id, run.state):
        await publish_progress(context, run_id)


def rate_limit_note(waits: Sequence[RateLimitWait], *, since: datetime | None) -> RateLimitNote | None:
    """What the installation's waits for GitHub's rate limit since the run's first lane cost it."""
    if since is None:
        return None
    since = since if since.tzinfo else since.replace(tzinfo=UTC)
    mine = [wait for wait in waits if wait.until >= since]
    if not mine:
        return None
    now = datetime.now(UTC)
    seconds = sum((min(wait.until, now) - max(wait.started_at, since)).total_seconds() for wait in mine)
    last = max(wait.until for wait in mine)
    return RateLimitNote(waits=len(mine), seconds=max(seconds, 0.0), until=last, waiting=last > now)


async def _plan_titles(context: EngineContext, run: Run) -> dict[str, str]:
    from bot.runner.plan import stored_graph

    plan = (
        await db(store.get_plan, context.engine, run.id, run.approved_revision)
        if run.approved_revision
        else await db(store.latest_plan, context.engine, run.id)
    )
    return {unit.id: unit.title for unit in stored_graph(plan.units_jsonl)} if plan else {}


async def lane_views(
    context: EngineContext,
    run: Run,
    lanes: Sequence[Lane] | None = None,
    sessions: Sequence[AgentSession] | None = None,
) -> list[LaneView]:
    """How the run's lanes look to people: the progress comment and `/status` both show these."""
    lanes = lanes if lanes is not None else await db(store.lanes, context.engine, run.id)
    sessions = sessions if sessions is not None else await db(store.sessions, context.engine, run.id)
    titles = await _plan_titles(context, run)
    return [_lane_view(run, lane, titles, sessions) for lane in lanes]


def _lane_view(run: Run, lane: Lane, titles: dict[str, str], sessions: Sequence[AgentSession]) -> LaneView:
    attempts = sum(1 for s in sessions if s.lane_id == lane.id and s.kind == "lane")
    # The host of the lane's latest session (sessions come in the order they started).
    host = next((s.host for s in reversed(sessions) if s.lane_id == lane.id and s.kind == "lane"), None)
    failure = LaneFailure.from_text(lane.failure).describe() if lane.failure else None
    finished: datetime | None = lane.finished_at if lane.state in ("finished", "merged", "failed") else None
    return LaneView(
        unit_id=lane.unit_id,
        title=titles.get(lane.unit_id, lane.unit_id),
        state=lane.state,
        round=max(0, lane.round - 1),
        attempts=attempts,
        started_at=lane.started_at,
        finished_at=finished,
        branch=lane.branch or lane_branch(run.issue_number, lane.unit_id),
        failure=failure,
        host=host,
        host_is_here=host == host_name(),
        spent=lane_spent(sessions, lane.id),
    )


# --------------------------------------------------------------------------- commands


async def cancel(context: RunnerContext, run_id: int) -> str:
    """`/cancel`: mark the run cancelled (unless it is already), stop its jobs and their agents'
    process groups, and fail its running lanes as cancelled. Branches and transcripts stay.

    Raises InvalidTransition when the run is in a state that cannot be cancelled (done, ...).
    """
    engine = context.engine
    while True:
        run = await db(store.get_run, engine, run_id)
        if run is None:
            raise LookupError(f"no run with id {run_id}")
        if run.state == RunState.CANCELLED or await _move(context, run, Event.CANCEL):
            break
    await executor_for(context).cancel_run(run_id)
    for session in await db(store.running_sessions, engine, run_id):
        await stop_session_process(session)
        await db(store.finish_session, engine, session.id, status="cancelled", failure="stopped by /cancel")
    cancelled = LaneFailure(FailureKind.CANCELLED, "stopped by /cancel").to_text()
    for lane in await db(store.lanes, engine, run_id):
        if lane.state == "running":
            await db(store.set_lane_state, engine, lane.id, "running", "failed", failure=cancelled)
    await _Progress(context, run_id).final()
    return RunState.CANCELLED.value


async def retry(context: RunnerContext, run_id: int, unit: str | None = None) -> str:
    """`/retry [unit]`: give a blocked run's failed lane `unit` (None: every failed lane) a fresh
    set of attempts, its last failure in its prompt, then drive the run; its state when it rests.

    A lane that failed to merge, or whose merge verify found broke it (bot.runner.integrate), is cut
    again from the integration branch as it is now, so its agent fixes what the joined branch shows. A run
    blocked by the integrate step (no lane failed) runs that step again. Raises InvalidTransition
    when the run is not blocked, ValueError when `unit` names no failed lane.
    """
    engine = context.engine
    run = await db(store.get_run, engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    target = transition(run.state, Event.RETRY)
    lanes = await db(store.lanes, engine, run_id)
    chosen = _lanes_to_retry(lanes, unit)
    await db(store.append_event, engine, run_id, "retry", {"units": [lane.unit_id for lane in chosen]})
    for lane in chosen:
        failure = LaneFailure.from_text(lane.failure) if lane.failure else None
        cut_again = failure is not None and failure.kind in (FailureKind.CONFLICT, FailureKind.VERIFY)
        base = None if cut_again else lane.base_sha
        await db(store.set_lane_state, engine, lane.id, "failed", "pending", attempts_used=0, base_sha=base)
    if not await db(store.transition, engine, run_id, run.state, target.value, error=None):
        now = await db(store.get_run, engine, run_id)
        assert now is not None  # a run row is never deleted
        raise InvalidTransition(RunState(now.state), Event.RETRY)
    return await drive(context, run_id)


def _lanes_to_retry(lanes: Sequence[Lane], unit: str | None) -> list[Lane]:
    failed = [lane for lane in lanes if lane.state == "failed"]
    if unit is None:
        return failed
    named = [lane for lane in lanes if lane.unit_id == unit]
    failed_ids = ", ".join(lane.unit_id for lane in failed) or "none"
    if not named:
        known = ", ".join(lane.unit_id for lane in lanes) or "none"
        raise ValueError(f"this run has no lane {unit!r} (its lanes: {known}); failed lanes: {failed_ids}")
    if named[0].state != "failed":
        raise ValueError(f"lane {unit!r} is {named[0].state}, not failed; failed lanes: {failed_ids}")
    return named


async def _shielded(work: Awaitable[None]) -> None:
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
