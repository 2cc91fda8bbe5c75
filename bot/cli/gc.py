"""`lanebot gc [--older-than 7d] [--dry-run]`: free the disk finished runs left on this runner host.

Reads the runs from `--database-url` (else `DATABASE_URL`, else SQLite in the working folder) and
works under `--workdir` (else `LANEBOT_WORKDIR`, else `.lanebot-work`), the folder `lanebot serve`
keeps mirrors and worktrees in. What it removes, and what it never removes, is bot/runner/cleanup.py's.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from bot.cli import UsageError
from bot.edges.settings import Settings
from bot.edges.store.db import DEFAULT_DATABASE_URL, current_revision, display_url, head_revision, make_engine
from bot.runner.cleanup import Removal, collect, human_bytes, parse_age

DEFAULT_AGE = "7d"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "gc",
        help="remove worktrees and mirror caches of finished runs, and say how much disk that freed",
        description=(
            "Remove the worktrees (and scripts and scratch) of finished runs last changed longer ago "
            "than --older-than, and the mirror cache of each repository whose runs are all such runs. "
            "Unfinished runs, and done runs whose pull request is still open, are never touched; "
            "transcripts are kept."
        ),
    )
    parser.add_argument(
        "--older-than",
        default=DEFAULT_AGE,
        metavar="AGE",
        help=f"only runs finished at least this long ago, e.g. 7d, 12h, 30m, or 0 for all (default: {DEFAULT_AGE})",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, and remove nothing")
    parser.add_argument(
        "--workdir", metavar="DIR", help=f"lanebot's work folder (default: $LANEBOT_WORKDIR, else {Settings.workdir})"
    )
    parser.add_argument(
        "--database-url", metavar="URL", help=f"the database (default: $DATABASE_URL, else {DEFAULT_DATABASE_URL})"
    )
    parser.set_defaults(func=run_gc)


def run_gc(args: argparse.Namespace) -> int:
    try:
        older_than = parse_age(args.older_than)
    except ValueError as error:
        raise UsageError(f"--older-than: {error}") from None
    workdir = Path(args.workdir or os.environ.get("LANEBOT_WORKDIR") or Settings.workdir).absolute()
    engine = _engine(args.database_url)
    verb = "would remove" if args.dry_run else "removed"
    try:
        if current_revision(engine) != head_revision():
            raise UsageError(f"the database at {display_url(engine)} is not migrated; run `lanebot migrate` first")
        removals = collect(
            engine,
            workdir,
            now=datetime.now(UTC),
            older_than=older_than,
            dry_run=args.dry_run,
            report=lambda removal: print(_line(verb, removal), flush=True),
        )
    except OperationalError as error:
        reason = str(error.orig).strip().splitlines()[0] if error.orig else type(error).__name__
        print(f"lanebot: error: cannot use the database at {display_url(engine)}: {reason}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(summary(removals, dry_run=args.dry_run, workdir=workdir))
    return 0


def summary(removals: list[Removal], *, dry_run: bool, workdir: Path) -> str:
    """The last line: how much was (or would be) freed, in bytes and for people."""
    freed = sum(removal.size for removal in removals)
    if not removals:
        return f"nothing to remove under {workdir}: freed 0 B"
    verb = "would free" if dry_run else "freed"
    return f"{verb} {human_bytes(freed)} ({freed:,} bytes) under {workdir}"


def _line(verb: str, removal: Removal) -> str:
    return f"{verb} {removal.what}: {human_bytes(removal.size)}"


def _engine(url: str | None) -> Engine:
    try:
        return make_engine(url or os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL)
    except ValueError as error:
        raise UsageError(f"{error} (from --database-url or DATABASE_URL)") from None
