"""Joining the lanes: merge rounds, the integrate step, verify, and the one pull request.

`merge_lanes` (a merge job) merges finished lanes, one at a time and in the order given, into
the integration branch `lanebot/<issue>`, in a worktree reset to the branch *as pushed* (so a
merge a crash interrupted is simply redone from there; nothing merges twice):

- a lane whose head the pushed branch already contains is recorded as merged, not merged again;
- otherwise `git merge --no-ff -m "Merge lane '<unit>' of #<issue>"`;
- a conflict with `on_conflict: block` fails the lane, naming the paths; with `agent`, a
  resolver session runs on the merge in progress and its work counts only if nothing is left
  unmerged and no file *contains* a conflict marker (contents are read: staging hides them);
- the branch is pushed after the batch (barrier) or after every merge (eager), and lanes are
  marked merged only once the push that holds them succeeded. Under barrier a conflict stops
  the batch (later lanes of the round would merge onto a tree that depends on timing);
- the batch starts without a fetch when the branch as last fetched is where this process last
  pushed it and every lane head is in the mirror; a push whose lease finds the branch moved
  fetches and merges what is left of the batch again, onto the branch as it is now.

`integrate_run` (the integrate job), after the last merge: one integrate session on the joined
branch (it writes the PR's title and body to `.lanebot/pr.md`, which is never committed), then
the repository's `integrate.verify` command (written to a file, run with `sh`) and, while it
fails, up to `integrate.max_retries` repair sessions shown the failure. Its first failure
bisects the lanes' merges for the one that broke it (bot.runner.culprit), which the repair
prompt, the check run and the blocked run name; a blocked run fails that lane, for `/retry
<unit>`. Each head verify ran on is pushed and gets a `lanebot / verify` check run; the last
failed one offers `Re-run verify` (unless a lane is blamed: then `/retry <unit>` moves it on).
Verify passing opens the pull request from `lanebot/<issue>` to the default branch (found first
by its head branch, so a lost answer never makes a second one) and, with `review.enabled`, queues
lanebot's own review of it (bot/runner/review/own.py); verify failing after the repairs blocks the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gidgethub import BadRequest, GitHubBroken

from bot.core.budget import Spent, lane_spent
from bot.core.checks import VERIFY_CHECK, external_id
from bot.core.ere import match_paths
from bot.core.graph import Unit
from bot.core.lifecycle import Event, RunState, is_held, transition
from bot.core.names import integration_branch, lane_branch, merge_message
from bot.edges.agents import AgentConfigError, AgentRequest, AgentResult, make_agent
from bot.edges.executor import Job
from bot.edges.files import WorktreeFileError, read_worktree_file, remove_worktree_file, write_worktree_file
from bot.edges.git import PushRejected, Worktree, git
from bot.edges.github.checks import begin_check, finish_check
from bot.edges.github.issues import split_repository
from bot.edges.store import runs as store
from bot.edges.store.models import AgentSession, Lane, utc_now
from bot.render.base_update import UPDATE_HINT
from bot.render.checks import verify_report
from bot.render.prompts import render_prompt
from bot.render.pull_request import PR_BODY_LIMIT, LaneSummary, pr_body, pr_title, split_pr_text
from bot.runner.base_update import merge_base
from bot.runner.budget import budget_stop_for
from bot.runner.context import JobsContext, RunnerContext, RuntimeContext
from bot.runner.culprit import Culprit, find_culprit, run_verify
from bot.runner.jailing import JailRefused, agent_jail, jail_problem
from bot.runner.lanes import FailureKind, LaneFailure, ScriptResult, is_ancestor, remote_sha
from bot.runner.review import queue as review_queue
from bot.runner.runtime import Runtime, add_worktree, db, host_name, load_runtime, remove_worktree
from bot.runner.sessions import outcome_fields

log = logging.getLogger(__name__)

__all__ = [
    "PR_FILE",
    "LaneSummary",
    "integrate_run",
    "merge_lanes",
    "pr_body",
    "split_pr_text",
]

PR_FILE = ".lanebot/pr.md"
INTEGRATION_WORKTREE = "_integration"  # unit ids are slugs, which never start with "_"
# How often a pull request is asked for when GitHub answers 5xx and none is open afterwards.
PULL_ATTEMPTS = 3
HOLD_POLL_S = 2.0  # how often a session that waits for `/unhold` looks at the run
LEASE_TRIES = 3  # how often a batch is merged onto an integration branch that moved on the remote


# --------------------------------------------------------------------------- merging


async def merge_lanes(context: RuntimeContext, job: Job) -> None:
    """Merge the finished lanes `job.units`, in that order; outcomes go to the lanes' rows."""
    rt = await load_runtime(context, job.run_id)
    if rt.run.state != RunState.RUNNING:
        return
    by_unit = {lane.unit_id: lane for lane in await db(store.lanes, rt.engine, rt.run.id)}
    batch = [by_unit[unit] for unit in job.units if unit in by_unit and by_unit[unit].state == "finished"]
    if batch:
        await _Merger(rt, list(by_unit.values())).merge(batch)


class _Merger:
    """One batch of merges in the integration worktree; used only by `merge_lanes`."""

    def __init__(self, rt: Runtime, all_lanes: Sequence[Lane]) -> None:
        self.rt = rt
        self.branch = integration_branch(rt.issue_number)
        self.eager = rt.workflow.build.schedule == "eager"
        self.merged_units = {lane.unit_id for lane in all_lanes if lane.state == "merged"}
        self.pushed = ""
        self.worktree: Worktree | None = None
        self.settled: set[int | None] = set()  # lanes this batch recorded as merged or failed
        self.stopped_at: int | None = None  # under barrier, the lane whose conflict stopped the batch

    async def merge(self, batch: Sequence[Lane]) -> None:
        fetch = not await self._known_current(batch)
        for tries in range(1, LEASE_TRIES + 1):
            if fetch:
                await self.rt.mirror.fetch()
            pushed = await remote_sha(self.rt.mirror, self.branch)
            if pushed is None:
                raise RuntimeError(
                    f"the integration branch {self.branch} is not on the remote; reconcile pushes it first"
                )
            self.pushed = pushed
            left = self._left(batch)
            await db(
                store.append_event,
                self.rt.engine,
                self.rt.run.id,
                "merging",
                {"units": [lane.unit_id for lane in left], "onto": pushed},
            )
            self.worktree = await fresh_integration_worktree(self.rt, pushed)
            try:
                await self._merge_each(left)  # the worktree stays for the next round (see fresh_integration_worktree)
                return
            except PushRejected:
                if tries == LEASE_TRIES:
                    raise
                # The branch moved on the remote since it was last fetched: merge again onto it.
                log.info("%s moved on the remote; fetching and merging again", self.branch)
                fetch = True

    def _left(self, batch: Sequence[Lane]) -> list[Lane]:
        """What of the batch is still to merge: neither merged nor failed, and before a conflict
        that stopped it."""
        left = []
        for lane in batch:
            if lane.id == self.stopped_at:
                break
            if lane.id not in self.settled:
                left.append(lane)
        return left

    async def _known_current(self, batch: Sequence[Lane]) -> bool:
        """Whether the mirror already knows what the batch needs without a fetch: the integration
        branch as last fetched is where this process last pushed it, and every lane's head is here.
        The push's lease catches a branch that moved meanwhile (`merge` then fetches and merges again)."""
        mirror = self.rt.mirror
        here = mirror.pushed_here(self.branch)
        if here is None or await remote_sha(mirror, self.branch) != here:
            return False
        return await mirror.has_commits(lane.head_sha or "" for lane in batch)

    async def _merge_each(self, batch: Sequence[Lane]) -> None:
        held: list[Lane] = []  # in the local branch, not yet recorded as merged
        for lane in batch:
            if lane.head_sha is None:
                raise RuntimeError(f"lane {lane.unit_id!r} finished without a head commit recorded")
            if await is_ancestor(self.rt.mirror, lane.head_sha, self.pushed):
                held.append(lane)  # a push whose answer was lost already holds it
            elif await self._merge_one(lane):
                held.append(lane)
            elif not self.eager:
                self.stopped_at = lane.id
                break
            if self.eager and held:
                await self._publish(held)
                held = []
        await self._publish(held)

    async def _merge_one(self, lane: Lane) -> bool:
        assert self.worktree is not None and lane.head_sha is not None  # _merge_each checked the head
        message = merge_message(lane.unit_id, self.rt.issue_number)
        result = await self.worktree.merge_no_ff(lane.head_sha, message, self.rt.identity)
        if result.ok:
            self.merged_units.add(lane.unit_id)
            return True
        conflicted = list(result.conflicted)
        refusal: str | None = "on_conflict is block"
        if self.rt.workflow.build.on_conflict == "agent":
            refusal = await self._resolve(lane, conflicted)
            if refusal is None:
                await self.worktree.commit_all(message, self.rt.identity)
                self.merged_units.add(lane.unit_id)
                return True
        await self.worktree.abort_merge()
        failure = LaneFailure(
            FailureKind.CONFLICT,
            f"merging it into {self.branch} conflicted in {', '.join(conflicted)} ({refusal})",
            paths=tuple(conflicted),
        )
        await db(store.set_lane_state, self.rt.engine, lane.id, "finished", "failed", failure=failure.to_text())
        self.settled.add(lane.id)
        return False

    async def _resolve(self, lane: Lane, conflicted: list[str]) -> str | None:
        """Run a resolver on the merge in progress; None when its work is accepted, else why not."""
        assert self.worktree is not None
        unit = self.rt.graph[lane.unit_id]
        merged = [self.rt.graph[u] for u in self.rt.graph.ids if u in self.merged_units]
        matched = await asyncio.to_thread(match_paths, [m.files for m in merged], conflicted)
        claimants = [unit for unit, paths in zip(merged, matched) if paths]
        prompt = render_prompt(
            self.rt.workflow,
            "resolve",
            issue={"number": self.rt.issue_number},
            branch=self.branch,
            incoming=unit,
            incoming_branch=lane_branch(self.rt.issue_number, unit.id),
            merged=claimants,
            paths=conflicted,
        )
        return await resolve_conflicts(
            self.rt, self.worktree, prompt=prompt, lane_id=lane.id, folder=unit.id, conflicted=conflicted
        )

    async def _publish(self, held: list[Lane]) -> None:
        """Push the branch, then record `held` as merged (never before the push succeeded)."""
        assert self.worktree is not None
        if not held:
            return
        head = await self.worktree.head()
        if head != self.pushed:
            await self.worktree.push(self.branch, expected=self.pushed)
            self.rt.mirror.note_pushed(self.branch, head)
            self.pushed = head
        for lane in held:
            await db(store.set_lane_state, self.rt.engine, lane.id, "finished", "merged")
            self.settled.add(lane.id)
        held.clear()


async def resolve_conflicts(
    rt: Runtime,
    worktree: Worktree,
    *,
    prompt: str,
    lane_id: int | None,
    folder: str,
    conflicted: Sequence[str],
    brief: str | None = None,
) -> str | None:
    """Run `build.agent` as the resolver of the merge in progress in `worktree`: None when its work
    is accepted (staged, nothing unmerged, no conflict marker left), else why not. Lane merges and
    base updates (bot.runner.base_update) both resolve through here."""
    over_budget = await budget_stop_for(rt)
    if over_budget is not None:
        return f"no resolver started: the budget is reached, {over_budget}"
    result = await run_session(
        rt,
        kind="resolve",
        lane_id=lane_id,
        folder=folder,
        prompt=prompt,
        agent=rt.workflow.build.agent,
        timeout=rt.workflow.build.timeout,
        cwd=worktree.path,
        brief=brief,
    )
    if isinstance(result, str):
        return f"the resolver could not run: {result}"
    if not result.ok:
        return f"the resolver failed: {result.error}"
    marked = sorted(
        set(await worktree.files_with_conflict_markers()) | set(await worktree.files_with_conflict_markers(conflicted))
    )
    if marked:
        return f"the resolver left conflict markers in {', '.join(marked)}"
    # lanebot stages what was resolved: in its jail the resolver's git cannot write the mirror's objects.
    await git("add", "--all", "--", *conflicted, cwd=worktree.path)
    unmerged = await worktree.unmerged_paths()
    if unmerged:
        return f"the resolver left {', '.join(unmerged)} unmerged"
    return None


async def fresh_integration_worktree(rt: Runtime, start: str) -> Worktree:
    """The integration worktree at `start` (the branch as pushed). The one a previous step left is
    reused (reset hard and cleaned: no full checkout per merge round); a merge a crash left
    half-way in it is aborted first. Otherwise a new worktree is cut."""
    path = rt.worktree_path(INTEGRATION_WORKTREE)
    branch = integration_branch(rt.issue_number)
    if (path / ".git").is_file():
        on = await git("symbolic-ref", "--quiet", "HEAD", cwd=path, check=False)
        if on.returncode == 0 and on.stdout.strip() == f"refs/heads/{branch}":
            await _abort_half_done_merge(rt, path)
            await git("reset", "--quiet", "--hard", start, cwd=path)
            await git("clean", "-d", "--force", "--quiet", "-x", cwd=path)
            return Worktree(path=path, branch=branch, mirror=rt.mirror)
    return await add_worktree(rt.mirror, path, branch=branch, start=start)


async def _abort_half_done_merge(rt: Runtime, path: Path) -> None:
    in_progress = await git("rev-parse", "--quiet", "--verify", "MERGE_HEAD", cwd=path, check=False)
    if in_progress.returncode == 0:
        await git("merge", "--abort", cwd=path, check=False)
        await db(
            store.append_event,
            rt.engine,
            rt.run.id,
            "merge_aborted",
            {"why": "a merge was left half-way; it is redone from the branch as pushed"},
        )


async def remove_integration_worktree(rt: Runtime) -> None:
    await remove_worktree(rt.mirror, rt.worktree_path(INTEGRATION_WORKTREE))


# --------------------------------------------------------------------------- agent sessions


async def run_session(
    rt: Runtime,
    *,
    kind: str,
    lane_id: int | None,
    folder: str,
    prompt: str,
    agent: str,
    timeout: int,
    cwd: Path,
    brief: str | None = None,
    env: Mapping[str, str] | None = None,
) -> AgentResult | str:
    """One recorded agent session (resolve, integrate, verify repair, fix, review) in its jail
    (`agent_jail`): its result, or why it could not run (the jail refused included). `env` adds
    to the LANEBOT_* variables the agent is given."""
    await _while_held(rt)
    session = await db(store.start_session, rt.engine, run_id=rt.run.id, kind=kind, lane_id=lane_id, host=host_name())
    session_id = session.id
    assert session_id is not None
    transcript = rt.transcript_path(folder, session.attempt, prefix=kind)
    await db(store.update_session, rt.engine, session_id, transcript_path=str(transcript))
    env = {"LANEBOT_RUN": str(rt.run.id), "LANEBOT_ISSUE": str(rt.issue_number), "LANEBOT_SESSION": kind, **(env or {})}
    try:
        adapter = make_agent(agent, getattr(rt.workflow.agents, agent))
        jail = await agent_jail(
            rt.context.settings, agent=agent, worktree=cwd, folder=rt.scratch_path(f"jail/{folder}-{kind}-{session_id}")
        )
        result: AgentResult | str = await adapter.run(
            AgentRequest(
                prompt=prompt, cwd=cwd, transcript=transcript, timeout=float(timeout), env=env, brief=brief, jail=jail
            ),
            on_start=lambda pid: store.update_session(rt.engine, session_id, pid=pid),
        )
    except (AgentConfigError, JailRefused) as error:
        result = str(error)
    except BaseException:
        await db(store.finish_session, rt.engine, session_id, status="cancelled")
        raise
    await db(store.finish_session, rt.engine, session_id, **outcome_fields(result))
    return result


async def _while_held(rt: Runtime) -> None:
    """`/hold` stops new agent sessions, not the job that wants one: a resolver or a verify repair
    waits here for `/unhold` (a `/cancel` meanwhile stops the job itself)."""
    while True:
        run = await db(store.get_run, rt.engine, rt.run.id)
        if run is None or not is_held(run.state, run.held_at is not None):
            return
        await asyncio.sleep(HOLD_POLL_S)


# --------------------------------------------------------------------------- integrate, verify, PR


async def integrate_run(context: RunnerContext, job: Job) -> None:
    """The integrate step of a run in `integrating`; it ends `done` (PR open) or `blocked`."""
    rt = await load_runtime(context, job.run_id)
    if rt.run.state != RunState.INTEGRATING:
        return
    await _Integration(context, rt).run()


class _Integration:
    """The integrate session, verify with repairs, and the PR; used only by `integrate_run`."""

    def __init__(self, context: JobsContext, rt: Runtime) -> None:
        self.context = context  # the self-review it queues goes to the background jobs
        self.rt = rt
        self.settings = rt.workflow.integrate
        self.branch = integration_branch(rt.issue_number)
        self.pushed = ""
        self.title = ""
        self.body = ""
        self.notes: list[str] = []
        self.worktree: Worktree | None = None
        self.verify_runs = 0
        self.culprit: Culprit | None = None  # what bisecting the merges found when verify first failed
        self.culprit_sought = False
        self.over_budget: str | None = None  # why the budget let no repair session start

    async def run(self) -> None:
        refused = await jail_problem(self.rt.context.settings)
        if refused is not None:  # before the integrate session: verify could not run after it
            target = transition(RunState.INTEGRATING, Event.INTEGRATE_FAILED)
            await db(
                store.transition,
                self.rt.engine,
                self.rt.run.id,
                RunState.INTEGRATING.value,
                target.value,
                error=refused,
            )
            return
        mirror = self.rt.mirror
        await mirror.fetch()
        pushed = await remote_sha(mirror, self.branch)
        if pushed is None:
            raise RuntimeError(f"the integration branch {self.branch} is not on the remote")
        self.pushed = pushed
        await db(store.append_event, self.rt.engine, self.rt.run.id, "integrating", {"onto": pushed})
        self.worktree = await fresh_integration_worktree(self.rt, pushed)
        try:
            verified = await self._integrate_and_verify()
            if verified.ok:
                verified = await self._catch_up_with_base(verified)
        finally:
            await remove_integration_worktree(self.rt)
        if verified.ok:
            await self._open_pull_request()
        else:
            await self._block(verified)

    async def _integrate_and_verify(self) -> ScriptResult:
        result = await self._session("integrate", failure=None)
        if not _succeeded(result):
            self.notes.append(f"The integrate session did not succeed ({_why(result)}); verify decided.")
        repairs = 0
        verified = await self._verify(last=repairs >= self.settings.max_retries)
        while not verified.ok and repairs < self.settings.max_retries:
            self.over_budget = await budget_stop_for(self.rt)
            if self.over_budget is not None:
                break
            repairs += 1
            await self._session("verify", failure={"reason": self._why_red(verified), "output": verified.output})
            verified = await self._verify(last=repairs >= self.settings.max_retries)
        if verified.ok and self.culprit is not None:
            self.notes.append(f"Verify failed at first ({self.culprit.finding}); a repair session made it pass.")
        return verified

    async def _catch_up_with_base(self, verified: ScriptResult) -> ScriptResult:
        """Verify passed: when the default branch moved meanwhile, merge it (bot.runner.base_update)
        and verify again, so the pull request opens on what it would merge into. A merge the resolver
        could not conclude leaves the branch as verified; the pull request then says it conflicts."""
        assert self.worktree is not None
        await self.rt.mirror.fetch()
        update = await merge_base(self.rt, self.worktree, resolve=self._resolve_base)
        if update.refusal is not None:
            self.notes.append(f"The default branch moved during the run: {update.describe(self.branch)}. {UPDATE_HINT}")
            return verified
        if not update.merged:
            return verified
        self.notes.append(f"The default branch moved during the run: {update.describe(self.branch)}; verify ran again.")
        return await self._verify(last=True)

    async def _resolve_base(self, prompt: str, conflicted: Sequence[str]) -> str | None:
        assert self.worktree is not None
        return await resolve_conflicts(
            self.rt, self.worktree, prompt=prompt, lane_id=None, folder="_base", conflicted=conflicted
        )

    def _why_red(self, verified: ScriptResult) -> str:
        found = f"; {self.culprit.finding}" if self.culprit is not None else ""
        return f"{verified.describe('verify')}{found}"

    async def _session(self, kind: str, failure: Mapping[str, str] | None) -> AgentResult | str:
        assert self.worktree is not None
        units = await self._units_in_merge_order()
        prompt = render_prompt(
            self.rt.workflow,
            "integrate",
            issue=self.rt.issue_context(),
            units=units,
            verify=self.settings.verify,
            failure=failure,
        )
        await self._restore_pr_file()
        brief = _recipe_pr_brief(self.rt, units) if self.settings.agent == "recipe" else None
        result = await run_session(
            self.rt,
            kind=kind,
            lane_id=None,
            folder="_integrate",
            prompt=prompt,
            agent=self.settings.agent,
            timeout=self.settings.timeout,
            cwd=self.worktree.path,
            brief=brief,
        )
        refused = await self._take_pr_file()
        await self.worktree.commit_all(_commit_message(kind, self.rt.issue_number), self.rt.identity)
        return result if refused is None else refused

    async def _units_in_merge_order(self) -> list[Unit]:
        lanes = await db(store.lanes, self.rt.engine, self.rt.run.id)
        ordered = sorted(lanes, key=lambda lane: (lane.merged_at or utc_now(), lane.round, lane.id or 0))
        return [self.rt.graph[lane.unit_id] for lane in ordered]

    async def _restore_pr_file(self) -> None:
        if self.title or self.body:
            assert self.worktree is not None
            write_worktree_file(self.worktree.path, PR_FILE, f"{self.title}\n\n{self.body}")

    async def _take_pr_file(self) -> str | None:
        """Read `.lanebot/pr.md`, then clear it and lanebot's untracked scratch, so neither is committed
        (an integrator that committed the file anyway has it removed by the next commit).

        The file is data: a link, a file outside the worktree, a FIFO or an oversized file is refused,
        and why (naming the file, never what it points to) is returned as the session's failure."""
        assert self.worktree is not None
        refused: str | None = None
        try:
            data = read_worktree_file(self.worktree.path, PR_FILE)
        except WorktreeFileError as error:
            data, refused = None, str(error)
        if data is not None:
            self.title, self.body = split_pr_text(data.decode("utf-8", errors="replace"))
            await db(
                store.append_event,
                self.rt.engine,
                self.rt.run.id,
                "pr_text",
                {"title": self.title, "body": self.body[:PR_BODY_LIMIT]},
            )
        await git("rm", "--cached", "--quiet", "--ignore-unmatch", "--", PR_FILE, cwd=self.worktree.path)
        remove_worktree_file(self.worktree.path, PR_FILE)
        await git("clean", "-d", "--force", "--quiet", "-x", "--", ".lanebot", cwd=self.worktree.path)
        return refused

    async def _verify(self, *, last: bool) -> ScriptResult:
        """Run verify on the branch as it is now (pushed first); `last`: no repair follows a failure,
        so a failure blocks the run and its check run offers `Re-run verify`."""
        assert self.worktree is not None
        head = await self.worktree.head()
        if head != self.pushed:
            await self.worktree.push(self.branch, expected=self.pushed)
            self.pushed = head
        self.verify_runs += 1
        check = await begin_check(
            self.rt.client,
            self.rt.run.repository,
            name=VERIFY_CHECK,
            head_sha=head,
            external=external_id(self.rt.run_id),
            title="verify is running",
            summary=f"`{self.settings.verify}` runs on the joined branch `{self.branch}`.",
            keep_passed=True,
            look_first=await self._lived_before(),
        )
        if check.passed_before:  # an earlier life of this step verified this very commit
            self.notes.append(f"Verify passed on {head[:12]} before lanebot restarted; it was not run again.")
            return ScriptResult(exit_status=0, output="", timed_out=False, timeout=float(self.settings.verify_timeout))
        check_id = check.id
        name = f"verify-{self.verify_runs}"
        result = await run_verify(self.rt, self.worktree.path, name)
        if not result.ok and self.settings.find_culprit and not self.culprit_sought:
            self.culprit_sought = True  # once: the merges stay what they were while repairs commit on top
            self.culprit = await find_culprit(self.rt, head, result, name=name)
        await finish_check(
            self.rt.client,
            self.rt.run.repository,
            check_id,
            verify_report(
                passed=result.ok,
                command=self.settings.verify,
                output=result.output,
                reason=None if result.ok else result.describe("verify"),
                transcript=None,
                offer_rerun=last,
                culprit=self.culprit.note() if self.culprit else None,
            ),
        )
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            "verify",
            {"head": head, "ok": result.ok, "exit_status": result.exit_status, "timed_out": result.timed_out},
        )
        return result

    async def _lived_before(self) -> bool:
        """Whether an earlier life of this step ran (it left an integrate session): only it can have
        made a verify check run the database does not know of."""
        sessions = await db(store.sessions, self.rt.engine, self.rt.run.id)
        return sum(1 for session in sessions if session.kind == "integrate") > 1

    async def _block(self, verified: ScriptResult) -> None:
        reason = (
            f"verify failed after {self.settings.max_retries} repair session"
            f"{'s' * (self.settings.max_retries != 1)}: {verified.describe('verify')}\n\n" + verified.output[-4_000:]
        )
        if self.culprit is not None:
            reason = await self._blame(verified)
        if self.over_budget is not None:  # said first: fewer repairs ran than the count below says
            reason = (
                f"no verify repair session started: the budget is reached, {self.over_budget}. "
                f"Raise the cap in .github/lanebot.yml, then /retry.\n\n{reason}"
            )
        target = transition(RunState.INTEGRATING, Event.INTEGRATE_FAILED)
        await db(
            store.transition, self.rt.engine, self.rt.run.id, RunState.INTEGRATING.value, target.value, error=reason
        )

    async def _blame(self, verified: ScriptResult) -> str:
        """The blocked run's reason, naming what the bisection found; a culprit lane is failed with
        verify's failure, so `/retry <unit>` redoes it (bot.runner.orchestrator.retry)."""
        assert self.culprit is not None
        culprit = self.culprit
        reason = (
            f"verify failed after {self.settings.max_retries} repair session"
            f"{'s' * (self.settings.max_retries != 1)}: {self._why_red(verified)}"
        )
        if culprit.lane is not None and culprit.lane.id is not None:
            failure = culprit.lane_failure(self.rt).to_text()
            await db(store.set_lane_state, self.rt.engine, culprit.lane.id, "merged", "failed", failure=failure)
            reason += f". /retry {culprit.lane.unit_id} redoes that lane from the joined branch, shown this failure"
            if culprit.check_url:
                reason += f" (its check run: {culprit.check_url})"
            return f"{reason}."  # the lane's failure holds verify's output there
        return f"{reason}.\n\n{culprit.failed.output[-4_000:]}"

    async def _open_pull_request(self) -> None:
        body = await self._pr_body()
        title = self.rt.workflow.render_pr_title(  # the issue's title and the integrator's are untrusted
            {"number": self.rt.issue_number, "title": pr_title(self.rt.issue.title)}, proposed=pr_title(self.title)
        )
        await db(store.append_event, self.rt.engine, self.rt.run.id, "opening_pr", {"head": self.branch})
        pull = await open_pull_request(self.rt, title=title, body=body)
        target = transition(RunState.INTEGRATING, Event.PR_OPENED)
        await db(
            store.transition,
            self.rt.engine,
            self.rt.run.id,
            RunState.INTEGRATING.value,
            target.value,
            pr_number=int(pull["number"]),
            error=None,
        )
        if self.rt.workflow.review.enabled:
            await review_queue.request_self_review(self.context, self.rt.run_id, self.pushed)

    async def _pr_body(self) -> str:
        lanes = await db(store.lanes, self.rt.engine, self.rt.run.id)
        sessions = await db(store.sessions, self.rt.engine, self.rt.run.id)
        summaries = lane_summaries(self.rt, lanes, sessions)
        starts = [s.started_at for s in sessions if s.kind == "lane"]
        wall_clock = (utc_now() - min(starts)).total_seconds() if starts else None
        return pr_body(
            integrator_body=self.body,
            notes=self.notes,
            issue_number=self.rt.issue_number,
            graph=self.rt.graph,
            lanes=summaries,
            schedule=self.rt.workflow.build.schedule,
            wall_clock_s=wall_clock,
            sum_of_lanes_s=sum(s.duration_s or 0.0 for s in summaries),
            sessions=_session_counts(sessions),
            spent=Spent.of(sessions),
        )


async def open_pull_request(rt: Runtime, *, title: str, body: str) -> dict[str, Any]:
    """The open PR from the integration branch (brought up to date), or a new one."""
    owner, name = split_repository(rt.run.repository)
    branch = integration_branch(rt.issue_number)
    existing = await _find_pull(rt, owner, name, branch)
    if existing is None:
        data = {
            "title": title,
            "head": branch,
            "base": rt.repository.default_branch,
            "body": body,
            "draft": rt.workflow.pull_request.draft,
        }
        for attempt in range(1, PULL_ATTEMPTS + 1):
            try:
                created: dict[str, Any] = await rt.client.post(
                    "/repos/{owner}/{repo}/pulls", {"owner": owner, "repo": name}, data=data
                )
                return created
            except (BadRequest, GitHubBroken) as error:
                # 422: one exists already (a race); 5xx: GitHub may have opened it all the same.
                if isinstance(error, BadRequest) and error.status_code != 422:
                    raise
                existing = await _find_pull(rt, owner, name, branch)
                if existing is not None:
                    break
                if isinstance(error, BadRequest) or attempt == PULL_ATTEMPTS:
                    raise
                log.warning("opening the pull request of %s failed (%s); none is open, trying again", branch, error)
        assert existing is not None
    if existing.get("title") != title or existing.get("body") != body:
        existing = await rt.client.patch(
            "/repos/{owner}/{repo}/pulls/{pull_number}",
            {"owner": owner, "repo": name, "pull_number": existing["number"]},
            data={"title": title, "body": body},
        )
    return existing


async def _find_pull(rt: Runtime, owner: str, name: str, branch: str) -> dict[str, Any] | None:
    url = "/repos/{owner}/{repo}/pulls{?head,state,per_page}"
    url_vars: dict[str, str | int] = {
        "owner": owner,
        "repo": name,
        "head": f"{owner}:{branch}",
        "state": "open",
        "per_page": 100,
    }
    pull: dict[str, Any]
    async for pull in rt.client.getiter(url, url_vars):
        if (pull.get("head") or {}).get("ref") == branch:
            return pull
    return None


def _succeeded(result: AgentResult | str) -> bool:
    return not isinstance(result, str) and result.ok


def _why(result: AgentResult | str) -> str:
    return result if isinstance(result, str) else (result.error or "it failed")


def _commit_message(kind: str, issue_number: int) -> str:
    if kind == "integrate":
        return f"Integrate the lanes of #{issue_number}\n\nThe integrate session's changes, by lanebot.\n"
    return f"Repair the joined lanes of #{issue_number}\n\nA repair session after verify failed, by lanebot.\n"


def _recipe_pr_brief(rt: Runtime, units: Sequence[Unit]) -> str:
    """The recipe adapter writes only what a brief spells out: for the integrate step that is the PR
    text, made from the plan, so a run with no model still gets a PR that says what it holds."""
    lines = [
        rt.issue_context()["title"].strip() or f"Resolve #{rt.issue_number}",
        "",
        f"This change resolves #{rt.issue_number} in {len(units)} unit{'s' * (len(units) != 1)}:",
        "",
    ]
    lines += [f"- {unit.title}" for unit in units]
    text = "\n".join(lines) + "\n"
    fence = "`" * max(3, 1 + max((len(run) for run in _backtick_runs(text)), default=0))
    return f"{fence}markdown path={PR_FILE}\n{text}{fence}\n"


def _backtick_runs(text: str) -> list[str]:
    runs, current = [], ""
    for char in text:
        if char == "`":
            current += char
        elif current:
            runs.append(current)
            current = ""
    return runs + ([current] if current else [])


# --------------------------------------------------------------------------- the PR text (pure)


def lane_summaries(rt: Runtime, lanes: Sequence[Lane], sessions: Sequence[AgentSession]) -> list[LaneSummary]:
    summaries = []
    for lane in lanes:
        own = [s for s in sessions if s.lane_id == lane.id and s.kind == "lane"]
        summaries.append(
            LaneSummary(
                unit_id=lane.unit_id,
                title=rt.graph[lane.unit_id].title,
                branch=lane.branch or lane_branch(rt.issue_number, lane.unit_id),
                round=lane.round,
                duration_s=session_seconds(own),
                attempts=len(own),
                check_url=f"{rt.repository.html_url}/runs/{lane.check_run_id}" if lane.check_run_id else None,
                spent=lane_spent(sessions, lane.id),
            )
        )
    return summaries


def session_seconds(sessions: Sequence[AgentSession]) -> float | None:
    """How long the sessions ran together (those that ended), or None when none ended."""
    spans = [(s.ended_at - s.started_at).total_seconds() for s in sessions if s.ended_at is not None]
    return sum(spans) if spans else None


def _session_counts(sessions: Sequence[AgentSession]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for session in sessions:
        counts[session.kind] = counts.get(session.kind, 0) + 1
    return counts
