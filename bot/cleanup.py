"""Tidying up after a run: when its pull request is merged or closed, and what a run leaves on disk.

`close_pull_request` is what `pull_request.closed` on lanebot's own pull request does:

- merged: the run stays `done` and releases its issue (`store.runs.close_run`), so a new `/plan`
  may start another run; its state label stays `lanebot:done`;
- closed without merging: the run is `cancelled` (which releases the issue) and loses its state
  label;
- either way the run's files on this runner host go (its worktrees, scripts and scratch; the
  transcripts stay, they are the record of what the agents did);
- merged only, when the workflow's `cleanup.delete_lane_branches` says so: the lane branches
  `lanebot-lanes/<issue>/*` are deleted on GitHub (their commits are in the merge). The
  integration branch, the pull request's head, is left to GitHub's own "Automatically delete
  head branches" setting.

Every step may run again (a redelivered webhook): the state moves by compare-and-set, a label
already right is left, a file already gone is fine, and a branch already deleted (GitHub's 422
"Reference does not exist") counts as deleted.

Where a run's files live under the work folder (`run_paths`), pure, as bot/runtime.py and
bot/planning.py lay them out; `lanebot gc` (bot/gc.py) uses the same layout.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine

from bot import review_queue
from bot.github.issues import split_repository
from bot.lanes import LANE_PREFIX, lane_branch
from bot.lifecycle import Event, RunState, transition
from bot.planning import follow_labels
from bot.runtime import db, load_runtime, remove_worktree
from bot.store import runs as store
from bot.store.models import Lane, Run

log = logging.getLogger(__name__)

__all__ = [
    "ClosedPull",
    "RunPaths",
    "close_pull_request",
    "delete_branch",
    "lane_branches",
    "mirror_paths",
    "record_pull_closed",
    "remove_run_files",
    "run_paths",
]

_SAFE_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


# --------------------------------------------------------------------------- the layout (pure)


@dataclass(frozen=True)
class RunPaths:
    """A run's files under the work folder. `worktrees` holds one folder per worktree."""

    worktrees: Path
    others: tuple[Path, ...]  # scripts, scratch, the planner's checkout

    def all(self) -> tuple[Path, ...]:
        return (self.worktrees, *self.others)


def run_paths(workdir: Path, repository: str, run_id: int) -> RunPaths:
    """Where run `run_id` of `repository` keeps files (transcripts excepted: they are kept)."""
    owner, name = split_repository(repository)
    root = Path(workdir).absolute()
    return RunPaths(
        worktrees=root / "worktrees" / owner / name / f"run-{run_id}",
        others=(root / "scripts" / str(run_id), root / "scratch" / str(run_id),
                root / "checkouts" / owner / f"{name}-run-{run_id}-plan"),
    )


def mirror_paths(workdir: Path, repository: str) -> tuple[Path, ...]:
    """The repository's mirror cache, its lock file and a half-built mirror (as bot/git.py names them)."""
    owner, name = split_repository(repository)
    folder = Path(workdir).absolute() / "mirrors" / owner
    return folder / f"{name}.git", folder / f"{name}.lock", folder / f"{name}.git.building"


def lane_branches(issue_number: int, lanes: Iterable[Lane]) -> list[str]:
    """The lane branches of a run, as its lanes recorded them; only names under
    `lanebot-lanes/<issue>/`, so nothing else can ever be deleted by mistake."""
    prefix = f"{LANE_PREFIX}/{issue_number}/"
    names = (lane.branch or lane_branch(issue_number, lane.unit_id) for lane in lanes)
    return sorted({name for name in names if name.startswith(prefix) and _SAFE_BRANCH.match(name)})


# --------------------------------------------------------------------------- I/O edges


async def delete_branch(client: GitHubAPI, repository: str, branch: str) -> bool:
    """Delete `branch` on GitHub; True if it was there, False if it was already gone."""
    if not _SAFE_BRANCH.match(branch) or ".." in branch:
        raise ValueError(f"refusing to delete {branch!r}: not a plain branch name")
    owner, name = split_repository(repository)
    try:
        await client.delete("/repos/{owner}/{repo}/git/refs/heads/{+branch}",
                            {"owner": owner, "repo": name, "branch": branch})
    except BadRequest as error:
        if error.status_code == 422:  # GitHub: "Reference does not exist"
            return False
        raise
    return True


async def remove_run_files(paths: RunPaths, *, mirror: Any | None) -> None:
    """Remove a run's files. Each worktree goes through `mirror` (a `bot.git.Mirror`), so git's
    bookkeeping in the mirror forgets it too; whatever is left is deleted as plain files."""
    if mirror is not None and paths.worktrees.is_dir():
        for worktree in sorted(paths.worktrees.iterdir()):
            await remove_worktree(mirror, worktree)
    await asyncio.to_thread(_remove_trees, paths.all())


def _remove_trees(paths: Sequence[Path]) -> None:
    for path in paths:
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
        elif path.exists():
            shutil.rmtree(path)


# --------------------------------------------------------------------------- the pull request closed


@dataclass(frozen=True)
class ClosedPull:
    """What `pull_request.closed` says about lanebot's pull request."""

    number: int
    merged: bool
    closed_by: str
    merge_commit_sha: str | None = None


async def close_pull_request(context: Any, run: Run, pull: ClosedPull) -> None:
    """The run's pull request was merged or closed: move the run, fix its label, tidy up."""
    if not await db(record_pull_closed, context.engine, run.id, pull):
        return
    await follow_labels(context, run.repository, run.issue_number)
    why = f"pull request #{pull.number} was {'merged' if pull.merged else 'closed'} by @{pull.closed_by}"
    await review_queue.cancel(context, run.id, why)  # before the worktrees go: a fix lane may be in one
    rt = await load_runtime(context, run.id)
    await remove_run_files(run_paths(rt.workdir, run.repository, run.id), mirror=rt.mirror)
    if pull.merged and rt.workflow.cleanup.delete_lane_branches:
        await _delete_lane_branches(context, rt.client, run)


def record_pull_closed(engine: Engine, run_id: int, pull: ClosedPull) -> bool:
    """Move run `run_id` for its pull request's merge or close (in the database only): merged, a
    done run releases its issue; closed unmerged, it is cancelled. Whether the run is one to tidy
    up now (True again for a redelivery); False, changing nothing, for a run in another state."""
    run = store.get_run(engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    if pull.merged:
        if run.state != RunState.DONE:
            log.info("run %d is %s, not done: its merged pull request #%d changes nothing", run.id, run.state,
                     pull.number)
            return False
        transition(run.state, Event.PR_MERGED)  # the machine's word that a merge is valid here
        if store.close_run(engine, run.id):
            store.append_event(engine, run.id, "pr_merged", {
                "pr": pull.number, "merged_by": pull.closed_by, "merge_commit_sha": pull.merge_commit_sha})
        return True
    if run.state == RunState.CANCELLED:
        return True  # a redelivery, or cancelled before its pull request was closed: tidying again is harmless
    if run.state != RunState.DONE:
        log.info("run %d is %s: closing its pull request #%d changes nothing", run.id, run.state, pull.number)
        return False
    target = transition(run.state, Event.PR_CLOSED)
    if store.transition(engine, run.id, run.state, target.value,
                        error=f"its pull request #{pull.number} was closed without merging by @{pull.closed_by}"):
        store.append_event(engine, run.id, "pr_closed", {"pr": pull.number, "by": pull.closed_by})
    return True


async def _delete_lane_branches(context: Any, client: GitHubAPI, run: Run) -> None:
    branches = lane_branches(run.issue_number, await db(store.lanes, context.engine, run.id))
    deleted, gone = [], []
    for branch in branches:
        (deleted if await delete_branch(client, run.repository, branch) else gone).append(branch)
    await db(store.append_event, context.engine, run.id, "lane_branches_deleted",
             {"deleted": deleted, "already_gone": gone})
