"""`/update` on lanebot's pull request: bring its branch up to date with the base branch.

A review request of kind `update` (bot/runner/review/queue.py: one piece of work on the branch at a
time), from someone allowed to approve. In the integration worktree cut from the pull request's
head, the default branch is merged in as before the pull request opened (bot.runner.base_update,
the resolver of `build.on_conflict`), then `integrate.verify` runs on the merge. Only a merge that
verify passed is pushed, with a lease on the head it started from (someone else's push meanwhile
wins), and verify's check run goes on the new head. The request's comment says what was done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from bot.core.base_moves import Mergeability, mergeability
from bot.core.checks import VERIFY_CHECK, external_id
from bot.core.names import integration_branch
from bot.core.text import marker
from bot.edges.git import GitError, Worktree
from bot.edges.github.checks import finish_check, start_check
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.github.reviews import get_pull
from bot.edges.store import reviews
from bot.edges.store import runs as store
from bot.edges.store.models import ReviewRequest
from bot.render.base_update import conflicting_comment, update_report
from bot.render.checks import verify_report
from bot.runner.base_update import BaseMerge, merge_base
from bot.runner.context import RuntimeContext
from bot.runner.culprit import run_verify
from bot.runner.integrate import fresh_integration_worktree, remove_integration_worktree, resolve_conflicts
from bot.runner.jailing import jail_problem
from bot.runner.lanes import ScriptResult, keep_tail
from bot.runner.review import queue as review_queue
from bot.runner.review.fix import FIX_PUSHING
from bot.runner.runtime import Runtime, db, load_runtime

log = logging.getLogger(__name__)

__all__ = ["offer_update", "run_update"]

# GitHub computes mergeability in the background: how long to wait before each new ask.
MERGEABILITY_WAITS_S = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)


async def offer_update(context: RuntimeContext, run_id: int, pr_number: int) -> Mergeability:
    """When the pull request conflicts with its base, say so on it once per head and offer
    `/update`; what GitHub said (UNKNOWN when it never finished computing it)."""
    rt = await load_runtime(context, run_id)
    known = Mergeability.UNKNOWN
    for wait in MERGEABILITY_WAITS_S:
        await asyncio.sleep(wait)
        pull = await get_pull(rt.client, rt.run.repository, pr_number)
        known = mergeability(pull)
        if known is not Mergeability.UNKNOWN or pull.get("state") != "open":  # a closed one never says
            break
    if known is Mergeability.CONFLICTING:
        head = str(pull["head"]["sha"])
        said = marker("base-conflict", run_id, head=head)
        body = conflicting_comment(
            base=str(pull["base"]["ref"]),
            branch=integration_branch(rt.issue_number),
            head=head,
            on_conflict=rt.workflow.build.on_conflict,
        )
        await post_or_update_marked_comment(rt.client, rt.run.repository, pr_number, f"{said}\n{body}", marker=said)
    return known


async def run_update(context: RuntimeContext, request: ReviewRequest) -> None:
    """Do the `/update` request (claimed, so `running`); its outcome goes to its row and comment."""
    rt = await load_runtime(context, request.run_id)
    await _Update(rt, request).run()


class _Update:
    def __init__(self, rt: Runtime, request: ReviewRequest) -> None:
        self.rt = rt
        self.request = request
        self.branch = integration_branch(rt.issue_number)
        self.to = f"@{request.requested_by}: "

    async def run(self) -> None:
        pull = await get_pull(self.rt.client, self.rt.run.repository, self.request.pr_number)
        if pull.get("state") != "open":
            await self._end("cancelled", f"pull request #{self.request.pr_number} was closed; nothing was done")
            return
        refused = await jail_problem(self.rt.context.settings)
        if refused is not None:  # verify could not run on the merge
            await self._end("failed", f"the update did not start: {refused}")
            return
        head = str(pull["head"]["sha"])
        await self.rt.mirror.fetch()
        worktree = await fresh_integration_worktree(self.rt, head)
        try:
            update = await merge_base(self.rt, worktree, resolve=self._resolver(worktree))
            await self._conclude(worktree, head, update)
        finally:
            await remove_integration_worktree(self.rt)

    async def _conclude(self, worktree: Worktree, head: str, update: BaseMerge) -> None:
        done = update.describe(self.branch)
        if update.refusal is not None:
            await self._end("failed", done)
            return
        if update.up_to_date:
            await self._end("done", f"{done}: there was nothing to update")
            return
        verified = await run_verify(self.rt, worktree.path, f"update-{self.request.id}")
        if not verified.ok:
            why = f"{done}, but {verified.describe('verify')}, so it was not pushed"
            await self._end("failed", f"{why}\n\n```\n{keep_tail(verified.output, 40)}\n```", verified=verified)
            return
        new_head = await worktree.head()
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            FIX_PUSHING,
            {"request": self.request.id, "head": new_head},
        )
        try:
            await worktree.push(self.branch, expected=head)
        except GitError:
            log.info("update %d: %s moved while it ran", self.request.id, self.branch, exc_info=True)
            await self._end(
                "failed", f"{done}, but `{self.branch}` moved meanwhile (someone pushed), so it was not pushed"
            )
            return
        await self._report_verify(new_head, verified)
        await self._end("done", done, pushed=new_head, verified=verified)

    def _resolver(self, worktree: Worktree) -> Any:
        async def resolve(prompt: str, conflicted: Sequence[str]) -> str | None:
            return await resolve_conflicts(
                self.rt,
                worktree,
                prompt=prompt,
                lane_id=None,
                folder=f"_update-{self.request.id}",
                conflicted=conflicted,
            )

        return resolve

    async def _report_verify(self, head: str, verified: ScriptResult) -> None:
        client, repository, verify = self.rt.client, self.rt.run.repository, self.rt.workflow.integrate.verify
        check_id = await start_check(
            client,
            repository,
            name=VERIFY_CHECK,
            head_sha=head,
            external=external_id(self.rt.run_id),
            title="verify ran on the update from the base branch",
            summary=f"`{verify}` ran on the merge of the base branch before it was pushed.",
        )
        report = verify_report(
            passed=True, command=verify, output=verified.output, reason=None, transcript=None, offer_rerun=False
        )
        await finish_check(client, repository, check_id, report)

    async def _end(
        self, state: str, done: str, *, pushed: str | None = None, verified: ScriptResult | None = None
    ) -> None:
        body = update_report(
            to=self.to,
            done=done,
            pushed=pushed,
            verify=self.rt.workflow.integrate.verify if verified is not None else None,
            verify_passed=verified.ok if verified is not None else None,
            problems=(),
        )
        await review_queue.request_comment(self.rt.context, self.rt.run, self.request, body)
        error = None if state == "done" else done
        await db(reviews.finish, self.rt.engine, self.request.id, state, head_sha=pushed, error=error)
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            "update_pushed" if pushed else "update_ended",
            {"request": self.request.id, "state": state, "head": pushed},
        )
