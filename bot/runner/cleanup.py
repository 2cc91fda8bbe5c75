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

Where a run's files live under the work folder (`run_paths`), pure, as bot/runner/runtime.py and
bot/runner/plan.py lay them out; `lanebot gc` (`collect`, below) uses the same layout.

`lanebot gc` (`collect`): remove what finished runs left on this runner host, and say how much disk it freed.

A run is *finished* when nothing will run for it again: rejected, cancelled or failed, or done
with its pull request merged or closed (the run no longer holds its issue). A done run whose
pull request is still open is not finished: review feedback may still start work on it.

What goes, for finished runs last changed longer ago than the age given:

- the run's files (`run_paths`): worktrees, scripts, scratch, the planner's checkout;
- a repository's mirror cache, only when *every* run of that repository in the database is such a
  run: a mirror is shared by all runs of its repository, and one unfinished (or recent) run keeps
  it. A mirror that no run in the database names is left alone (nothing says whose it is).

Transcripts stay: they are the record of what the agents did. The sizes are summed before
anything is removed (files and symlinks by their own size, without following links). Mirrors are
removed holding the mirror's lock file (the one bot/edges/git.py takes for fetches and pushes), after
asking the database again under it, so a run that started meanwhile keeps its mirror.

The planning (`plan_collection`, `parse_age`, `human_bytes`) is pure; `collect` does the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from bot.core.lifecycle import Event, RunState, transition
from bot.core.names import LANE_PREFIX, lane_branch
from bot.edges.git import Mirror
from bot.edges.github.issues import split_repository
from bot.edges.store import runs as store
from bot.edges.store.db import session
from bot.edges.store.models import RELEASED_RUN_STATES, Lane, Run
from bot.runner.context import EngineContext, RunnerContext
from bot.runner.plan import follow_labels
from bot.runner.review import queue as review_queue
from bot.runner.runtime import db, load_runtime, remove_worktree

log = logging.getLogger(__name__)

__all__ = [
    "ClosedPull",
    "Collection",
    "Removal",
    "RunPaths",
    "RunRecord",
    "close_pull_request",
    "collect",
    "delete_branch",
    "disk_usage",
    "human_bytes",
    "is_finished",
    "lane_branches",
    "mirror_paths",
    "parse_age",
    "plan_collection",
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
        others=(
            root / "scripts" / str(run_id),
            root / "scratch" / str(run_id),
            root / "checkouts" / owner / f"{name}-run-{run_id}-plan",
        ),
    )


def mirror_paths(workdir: Path, repository: str) -> tuple[Path, ...]:
    """The repository's mirror cache, its lock file and a half-built mirror (as bot/edges/git.py names them)."""
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
        await client.delete(
            "/repos/{owner}/{repo}/git/refs/heads/{+branch}", {"owner": owner, "repo": name, "branch": branch}
        )
    except BadRequest as error:
        if error.status_code == 422:  # GitHub: "Reference does not exist"
            return False
        raise
    return True


async def remove_run_files(paths: RunPaths, *, mirror: Mirror | None) -> None:
    """Remove a run's files. Each worktree goes through `mirror` (a `bot.edges.git.Mirror`), so git's
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


async def close_pull_request(context: RunnerContext, run: Run, pull: ClosedPull) -> None:
    """The run's pull request was merged or closed: move the run, fix its label, tidy up."""
    assert run.id is not None
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
            log.info(
                "run %d is %s, not done: its merged pull request #%d changes nothing", run.id, run.state, pull.number
            )
            return False
        transition(run.state, Event.PR_MERGED)  # the machine's word that a merge is valid here
        if store.close_run(engine, run_id):
            store.append_event(
                engine,
                run_id,
                "pr_merged",
                {"pr": pull.number, "merged_by": pull.closed_by, "merge_commit_sha": pull.merge_commit_sha},
            )
        return True
    if run.state == RunState.CANCELLED:
        return True  # a redelivery, or cancelled before its pull request was closed: tidying again is harmless
    if run.state != RunState.DONE:
        log.info("run %d is %s: closing its pull request #%d changes nothing", run.id, run.state, pull.number)
        return False
    target = transition(run.state, Event.PR_CLOSED)
    if store.transition(
        engine,
        run_id,
        run.state,
        target.value,
        error=f"its pull request #{pull.number} was closed without merging by @{pull.closed_by}",
    ):
        store.append_event(engine, run_id, "pr_closed", {"pr": pull.number, "by": pull.closed_by})
    return True


async def _delete_lane_branches(context: EngineContext, client: GitHubAPI, run: Run) -> None:
    branches = lane_branches(run.issue_number, await db(store.lanes, context.engine, run.id))
    deleted: list[str] = []
    gone: list[str] = []
    for branch in branches:
        (deleted if await delete_branch(client, run.repository, branch) else gone).append(branch)
    await db(
        store.append_event, context.engine, run.id, "lane_branches_deleted", {"deleted": deleted, "already_gone": gone}
    )


# --------------------------------------------------------------------------- lanebot gc

_AGE = re.compile(r"(?:(?P<w>\d+)w)?(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?")
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


# --------------------------------------------------------------------------- pure


def parse_age(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `90s`, `2w`, `1d12h`, or `0` (every finished run) as a timedelta."""
    cleaned = text.strip().lower()
    if cleaned == "0":
        return timedelta(0)
    match = _AGE.fullmatch(cleaned)
    if not cleaned or match is None:
        raise ValueError(f"{text!r} is not an age: write e.g. 7d, 12h, 30m, 2w, 1d12h, or 0 for every finished run")
    parts = {unit: int(match[unit] or 0) for unit in "wdhms"}
    return timedelta(weeks=parts["w"], days=parts["d"], hours=parts["h"], minutes=parts["m"], seconds=parts["s"])


def human_bytes(count: int) -> str:
    """`0 B`, `512 B`, `1.5 KiB`, `12.3 MiB`, ..."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in _UNITS[1:]:
        value /= 1024
        if value < 1024 or unit == _UNITS[-1]:
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class RunRecord:
    """What gc needs of a run's row."""

    id: int
    repository: str
    state: str
    holds_issue: bool  # `active_key` is set: the run still owns its issue
    updated_at: datetime

    @classmethod
    def of(cls, run: Run) -> RunRecord:
        return cls(
            id=int(run.id or 0),
            repository=run.repository,
            state=run.state,
            holds_issue=run.active_key is not None,
            updated_at=run.updated_at,
        )


def is_finished(run: RunRecord) -> bool:
    """Nothing will run for it again: ended, or done with its pull request merged or closed."""
    return run.state in RELEASED_RUN_STATES or (run.state == "done" and not run.holds_issue)


@dataclass(frozen=True)
class Collection:
    """What gc removes: the files of `runs`, and the mirrors of `mirrors` (repositories)."""

    runs: tuple[RunRecord, ...]
    mirrors: tuple[str, ...]


def plan_collection(runs: Iterable[RunRecord], *, now: datetime, older_than: timedelta) -> Collection:
    """The finished runs last changed at least `older_than` before `now`, and the repositories
    all of whose runs are among them. Pure."""
    runs = list(runs)
    cutoff = now - older_than
    old = [run for run in runs if is_finished(run) and run.updated_at <= cutoff]
    old_ids = {run.id for run in old}
    repositories = sorted({run.repository for run in runs})
    mirrors = [repo for repo in repositories if all(run.id in old_ids for run in runs if run.repository == repo)]
    return Collection(runs=tuple(sorted(old, key=lambda run: run.id)), mirrors=tuple(mirrors))


# --------------------------------------------------------------------------- I/O


def disk_usage(path: Path) -> int:
    """Bytes under `path` (files and symlinks by their own size, links not followed); 0 if absent."""
    try:
        top = path.lstat()
    except FileNotFoundError:
        return 0
    if not path.is_dir() or path.is_symlink():
        return top.st_size
    total = 0
    for folder, folders, files in os.walk(path):  # never follows links: a link to a folder is in `folders`
        linked = [name for name in folders if os.path.islink(os.path.join(folder, name))]
        for name in (*files, *linked):
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


@dataclass(frozen=True)
class Removal:
    """One thing gc removed (or, in a dry run, would remove)."""

    what: str  # for people: "run 12 (octo/app)" or "the mirror of octo/app"
    paths: tuple[Path, ...]
    size: int


def read_runs(engine: Engine, repository: str | None = None) -> list[RunRecord]:
    """Every run in the database (or of one repository), as gc sees them."""
    query = select(Run).order_by(col(Run.id))
    if repository is not None:
        query = query.where(Run.repository == repository)
    with session(engine) as db:
        return [RunRecord.of(run) for run in db.exec(query).all()]


def collect(
    engine: Engine,
    workdir: Path,
    *,
    now: datetime,
    older_than: timedelta,
    dry_run: bool,
    report: Callable[[Removal], None] = lambda removal: None,
) -> list[Removal]:
    """Remove (unless `dry_run`) what `plan_collection` chose; what was removed, each reported as it goes."""
    plan = plan_collection(read_runs(engine), now=now, older_than=older_than)
    removals: list[Removal] = []
    for run in plan.runs:
        removal = _measure(f"run {run.id} ({run.repository})", run_paths(workdir, run.repository, run.id).all())
        if removal is not None:
            if not dry_run:
                _remove(removal.paths)
            removals.append(removal)
            report(removal)
    for repository in sorted({run.repository for run in plan.runs} - set(plan.mirrors)):
        if not dry_run:
            _prune_worktrees(workdir, repository)  # its mirror stays: it forgets the worktrees removed above
    for repository in plan.mirrors:
        removal = _collect_mirror(engine, workdir, repository, now=now, older_than=older_than, dry_run=dry_run)
        if removal is not None:
            removals.append(removal)
            report(removal)
    return removals


def _collect_mirror(
    engine: Engine, workdir: Path, repository: str, *, now: datetime, older_than: timedelta, dry_run: bool
) -> Removal | None:
    mirror, lock, building = mirror_paths(workdir, repository)
    if not mirror.exists() and not building.exists():
        return None
    with _locked(lock, take=not dry_run):
        again = plan_collection(read_runs(engine, repository), now=now, older_than=older_than)
        if repository not in again.mirrors:
            return None  # a run of this repository started (or changed) meanwhile: its mirror stays
        removal = _measure(f"the mirror of {repository}", (mirror, building))
        if removal is not None and not dry_run:
            _remove(removal.paths)
    return removal


def _measure(what: str, paths: Sequence[Path]) -> Removal | None:
    present = tuple(path for path in paths if path.exists() or path.is_symlink())
    if not present:
        return None
    return Removal(what=what, paths=present, size=sum(disk_usage(path) for path in present))


def _remove(paths: Sequence[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _prune_worktrees(workdir: Path, repository: str) -> None:
    """`git worktree prune` in the mirror, under its lock (a prune beside a worktree being added
    could delete that worktree's bookkeeping)."""
    mirror, lock, _ = mirror_paths(workdir, repository)
    if not (mirror / "HEAD").is_file():
        return
    with _locked(lock, take=True):
        subprocess.run(
            ["git", "worktree", "prune"],
            cwd=mirror,
            check=False,
            capture_output=True,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_TERMINAL_PROMPT": "0",
                "LC_ALL": "C",
            },
        )


@contextlib.contextmanager
def _locked(lock: Path, *, take: bool) -> Iterator[None]:
    """The mirror's lock file, held while it is removed (the lock file itself stays)."""
    if not take or not lock.parent.is_dir():
        yield
        return
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
