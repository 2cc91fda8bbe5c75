"""`lanebot gc`: remove what finished runs left on this runner host, and say how much disk it freed.

A run is *finished* when nothing will run for it again: rejected, cancelled or failed, or done
with its pull request merged or closed (the run no longer holds its issue). A done run whose
pull request is still open is not finished: review feedback may still start work on it.

What goes, for finished runs last changed longer ago than the age given:

- the run's files (bot/cleanup.py `run_paths`): worktrees, scripts, scratch, the planner's checkout;
- a repository's mirror cache, only when *every* run of that repository in the database is such a
  run: a mirror is shared by all runs of its repository, and one unfinished (or recent) run keeps
  it. A mirror that no run in the database names is left alone (nothing says whose it is).

Transcripts stay: they are the record of what the agents did. The sizes are summed before
anything is removed (files and symlinks by their own size, without following links). Mirrors are
removed holding the mirror's lock file (the one bot/git.py takes for fetches and pushes), after
asking the database again under it, so a run that started meanwhile keeps its mirror.

The planning (`plan_collection`, `parse_age`, `human_bytes`) is pure; `collect` does the I/O.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import col, select

from bot.cleanup import mirror_paths, run_paths
from bot.store.db import session
from bot.store.models import RELEASED_RUN_STATES, Run

__all__ = [
    "Collection",
    "Removal",
    "RunRecord",
    "collect",
    "disk_usage",
    "human_bytes",
    "is_finished",
    "parse_age",
    "plan_collection",
]

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
        return cls(id=int(run.id or 0), repository=run.repository, state=run.state,
                   holds_issue=run.active_key is not None, updated_at=run.updated_at)


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
    engine: Engine, workdir: Path, *, now: datetime, older_than: timedelta, dry_run: bool,
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


def _collect_mirror(engine: Engine, workdir: Path, repository: str, *, now: datetime, older_than: timedelta,
                    dry_run: bool) -> Removal | None:
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
        subprocess.run(["git", "worktree", "prune"], cwd=mirror, check=False, capture_output=True,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
                            "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})


@contextlib.contextmanager
def _locked(lock: Path, *, take: bool) -> Iterator[None]:
    """The mirror's lock file, held while it is removed (the lock file itself stays)."""
    if not take or not lock.parent.is_dir():
        yield
        return
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
