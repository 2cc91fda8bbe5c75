"""Bringing a branch of lanebot's up to date with the default branch that moved under it.

Lanes of one run all start from the run's base (`runs.base_sha`, the default branch when the run
began) and the merges before them, so the integration branch is one coherent chain the culprit
search can bisect; each lane fetches first, so the mirror is fresh, but it is cut from that chain,
never from a newer default branch. The base moves in once, here, by one merge commit:

- before the pull request opens (bot.runner.integrate), when verify passed and the default branch
  has moved past what the integration branch holds;
- on `/update` on the pull request (bot.runner.pull_update), when the pull request conflicts with
  its base or lags behind it.

`merge_base` merges the default branch's tip into the worktree's branch (`git merge --no-ff`, the
subject `Merge <base> into <branch> (the update from <base>)`, bot.core.names), resolving a
conflict as lane merges do: `build.on_conflict: block` refuses, `agent` runs the resolver
(bot.runner.integrate.resolve_conflicts, handed in as `resolve`) on the merge in progress. A
refused merge is aborted: the worktree is left as it was. Verifying and pushing are the caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bot.core.ere import match_paths
from bot.core.names import base_update_message, integration_branch
from bot.edges.git import Worktree
from bot.edges.store import runs as store
from bot.render.prompts import render_prompt
from bot.runner.lanes import is_ancestor
from bot.runner.runtime import Runtime, db

__all__ = ["BaseMerge", "Resolve", "merge_base"]

# (the resolver's prompt, the conflicted paths) -> None when its work is accepted, else why not.
Resolve = Callable[[str, Sequence[str]], Awaitable[str | None]]


@dataclass(frozen=True)
class BaseMerge:
    """What `merge_base` did: `base` is the default branch's name, `tip` the commit of it it saw."""

    base: str
    tip: str
    merged: bool  # a merge commit was made (False: the branch already held the tip, or it was refused)
    conflicted: tuple[str, ...] = ()
    refusal: str | None = None  # why a conflicting merge was not concluded

    @property
    def up_to_date(self) -> bool:
        return not self.merged and self.refusal is None

    def describe(self, branch: str) -> str:
        """One sentence for people, plain text (it is escaped where it is shown): what happened to `branch`."""
        if self.refusal is not None:
            return (
                f"merging {self.base} ({self.tip[:12]}) into {branch} conflicted in "
                f"{', '.join(self.conflicted)} ({self.refusal})"
            )
        if not self.merged:
            return f"{branch} already holds {self.base} ({self.tip[:12]})"
        resolved = f", its conflicts in {', '.join(self.conflicted)} resolved" if self.conflicted else ""
        return f"{self.base} ({self.tip[:12]}) was merged into {branch}{resolved}"


async def merge_base(rt: Runtime, worktree: Worktree, *, resolve: Resolve) -> BaseMerge:
    """Merge the default branch, as the mirror last fetched it, into `worktree`, which holds the
    integration branch (fetch first)."""
    base = rt.repository.default_branch
    tip = await rt.mirror.resolve(base)
    if await is_ancestor(rt.mirror, tip, await worktree.head()):
        return BaseMerge(base=base, tip=tip, merged=False)
    branch = integration_branch(rt.issue_number)
    message = base_update_message(base, branch)
    result = await worktree.merge_no_ff(tip, message, rt.identity)
    conflicted = tuple(result.conflicted)
    outcome = BaseMerge(base=base, tip=tip, merged=True, conflicted=() if result.ok else conflicted)
    if not result.ok:
        refusal: str | None = "on_conflict is block"
        if rt.workflow.build.on_conflict == "agent":
            refusal = await resolve(await _resolve_prompt(rt, branch, base, conflicted), conflicted)
        if refusal is None:
            await worktree.commit_all(message, rt.identity)
        else:
            await worktree.abort_merge()
            outcome = BaseMerge(base=base, tip=tip, merged=False, conflicted=conflicted, refusal=refusal)
    await db(
        store.append_event,
        rt.engine,
        rt.run.id,
        "base_update",
        {
            "base": base,
            "tip": tip,
            "merged": outcome.merged,
            "conflicted": list(conflicted),
            "refusal": outcome.refusal,
        },
    )
    return outcome


async def _resolve_prompt(rt: Runtime, branch: str, base: str, conflicted: Sequence[str]) -> str:
    """The resolver's prompt (the repository's `resolve` template): the default branch is the side
    being merged in, and the run's units that claim a conflicted path are the side already there."""
    units = [rt.graph[unit] for unit in rt.graph.ids]
    matched = await asyncio.to_thread(match_paths, [unit.files for unit in units], list(conflicted))
    incoming = {
        "id": base,
        "title": f"the default branch `{base}` as people changed it since this run began",
        "files": "any path",
        "brief": f"What was pushed to `{base}` after the run's lanes started: `git log HEAD..MERGE_HEAD`.",
    }
    return render_prompt(
        rt.workflow,
        "resolve",
        issue={"number": rt.issue_number},
        branch=branch,
        incoming=incoming,
        incoming_branch=base,
        merged=[unit for unit, paths in zip(units, matched) if paths],
        paths=list(conflicted),
    )
