"""The repository's verify command, and the culprit for a red verify.

`run_verify` is the one way verify runs (the integrate step's verify, and each run of it here):
the command written to a file and run with `sh`, jailed, within `integrate.verify_timeout`.

`find_culprit`, when verify failed on the joined branch's head: the integration branch is the
run's base and one `--no-ff` merge commit per lane, in merge order, on its first-parent chain.
Verify runs on those commits, in a scratch worktree of their own (the integration worktree stays
as the integrate session left it), in the order bot.core.bisect asks, until the first commit it
fails on is known: at most ceil(log2(n + 1)) runs for n candidates (the base and the merges; the
head is not run again). The result names the lane whose merge that is, with verify's output
there; or says that verify fails on the base itself, or only after the last merge.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.core.bisect import Chain, Merge, Suspect, Verdict, first_failure, next_probe
from bot.core.names import integration_branch
from bot.core.text import shorten
from bot.edges.git import Worktree
from bot.edges.store import runs as store
from bot.edges.store.models import Lane
from bot.render.checks import CulpritNote
from bot.runner.jailing import command_jail
from bot.runner.lanes import FailureKind, LaneFailure, ScriptResult, run_script
from bot.runner.runtime import Runtime, db, remove_worktree

__all__ = ["CULPRIT_WORKTREE", "Culprit", "find_culprit", "run_verify"]

CULPRIT_WORKTREE = "_culprit"  # unit ids are slugs, which never start with "_"


async def run_verify(rt: Runtime, cwd: Path, name: str) -> ScriptResult:
    """The repository's verify command in `cwd`, jailed; `name` names its script and jail folder."""
    settings = rt.workflow.integrate
    return await run_script(
        settings.verify,
        script=rt.script_path(name),
        cwd=cwd,
        timeout=float(settings.verify_timeout),
        env={"LANEBOT_RUN": str(rt.run.id)},
        jail=await command_jail(rt, worktree=cwd, name=name),
    )


@dataclass(frozen=True)
class Culprit:
    """What the bisection found: its verdict, verify's result on the first commit it fails on, and
    the lane that commit merged (None for the base, a merge of no lane's, or after the merges)."""

    verdict: Verdict
    failed: ScriptResult
    lane: Lane | None
    check_url: str | None  # the culprit lane's check run on GitHub
    verify_runs: int  # how many times verify ran to find it

    @property
    def finding(self) -> str:
        """One sentence for people and for the repair session."""
        verdict = self.verdict
        at, before = verdict.sha[:12], (verdict.passed_on or "")[:12]
        if verdict.suspect is Suspect.BASE:
            return f"verify fails on {at} itself, the run's base, before any lane"
        if verdict.suspect is Suspect.AFTER_MERGES:
            return f"verify passes on {before}, the last lane's merge; what was committed after it breaks it"
        assert verdict.merge is not None
        if verdict.merge.unit:
            what = f"lane '{verdict.merge.unit}' merged"
        elif verdict.merge.base_update:
            what = f"the update from {verdict.merge.base_update} merged"
        else:
            what = f"'{verdict.merge.subject}' merged"
        return f"verify first fails on {at}, where {what}; it passes on {before} before it"

    def note(self) -> CulpritNote:
        return CulpritNote(
            finding=self.finding,
            output=self.failed.output,
            check_url=self.check_url,
            retry_unit=self.lane.unit_id if self.lane else None,
        )

    def lane_failure(self, rt: Runtime) -> LaneFailure:
        """The culprit lane's failure, for its row and for the prompt of its next attempt."""
        branch = integration_branch(rt.issue_number)
        command = shorten(" ".join(rt.workflow.integrate.verify.split()), 200)
        at, before = self.verdict.sha[:12], (self.verdict.passed_on or "")[:12]
        return LaneFailure(
            FailureKind.VERIFY,
            f"the repository's verify (`{command}`) broke when this lane merged into {branch}: "
            f"{self.failed.describe('verify')} on its merge {at}, and it passed on {before} just before. "
            f"This attempt starts from {branch} as it is now, every lane's work in it: make verify pass "
            "there, changing only this unit's files",
            output=self.failed.output,
        )


async def find_culprit(rt: Runtime, head: str, failed: ScriptResult, *, name: str) -> Culprit | None:
    """The first commit of the integration branch's chain that verify fails on, given that it
    failed on `head` with `failed`; None when the run has no base recorded. `name` prefixes the
    names of verify's scripts."""
    base = rt.run.base_sha
    if base is None:
        return None
    merges = tuple(Merge(sha, subject) for sha, subject in await rt.mirror.first_parent_merges(base, head))
    chain = Chain(base, merges, head)
    candidates = chain.candidates
    results: dict[int, ScriptResult] = {}
    path = rt.worktree_path(CULPRIT_WORKTREE)
    worktree: Worktree | None = None
    try:
        while (probe := next_probe(len(candidates), {i: r.ok for i, r in results.items()})) is not None:
            if worktree is None:
                worktree = await rt.mirror.checkout(path, candidates[probe])
            else:
                await worktree.move_to(candidates[probe])
            results[probe] = await run_verify(rt, path, f"{name}-culprit-{len(results) + 1}")
            await db(
                store.append_event,
                rt.engine,
                rt.run.id,
                "culprit_probe",
                {"sha": candidates[probe], "ok": results[probe].ok, "exit_status": results[probe].exit_status},
            )
    finally:
        if worktree is not None:
            await remove_worktree(rt.mirror, path)
    failing = first_failure(len(candidates), {i: r.ok for i, r in results.items()})
    verdict = chain.verdict(failing)
    lane = await _lane_of(rt, verdict)
    culprit = Culprit(
        verdict=verdict,
        failed=results.get(failing, failed),
        lane=lane,
        check_url=f"{rt.repository.html_url}/runs/{lane.check_run_id}" if lane and lane.check_run_id else None,
        verify_runs=len(results),
    )
    await db(
        store.append_event,
        rt.engine,
        rt.run.id,
        "culprit",
        {
            "suspect": verdict.suspect.value,
            "sha": verdict.sha,
            "unit": lane.unit_id if lane else None,
            "verify_runs": len(results),
        },
    )
    return culprit


async def _lane_of(rt: Runtime, verdict: Verdict) -> Lane | None:
    unit = verdict.merge.unit if verdict.merge else None
    if unit is None:
        return None
    lanes = await db(store.lanes, rt.engine, rt.run.id)
    return next((lane for lane in lanes if lane.unit_id == unit), None)
