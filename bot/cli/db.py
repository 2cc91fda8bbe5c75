"""`lanebot migrate` and `lanebot deliveries list`: the database from the terminal.

Both read `--database-url`, else `DATABASE_URL`, else SQLite in the working folder. Other
modules add commands under `lanebot deliveries` with `deliveries_subcommands(subparsers)`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from bot.cli import UsageError
from bot.edges.store import deliveries
from bot.edges.store.db import (
    DEFAULT_DATABASE_URL,
    current_revision,
    display_url,
    head_revision,
    make_engine,
    migrate,
)
from bot.edges.store.models import Delivery

_DELIVERY_COLUMNS = ("id", "event", "action", "repository", "status", "error")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate_parser = subparsers.add_parser(
        "migrate",
        help="create or upgrade lanebot's database tables",
        description="Upgrade the database to the newest schema. Safe to run again; it changes nothing then.",
    )
    _add_database_url(migrate_parser)
    migrate_parser.set_defaults(func=run_migrate)

    list_parser = deliveries_subcommands(subparsers).add_parser(
        "list",
        help="show stored webhook deliveries, newest first",
        description="Show stored webhook deliveries (id, event, action, repository, status, error), newest first.",
    )
    list_parser.add_argument("--limit", type=int, default=20, help="how many to show (default: 20)")
    _add_database_url(list_parser)
    list_parser.set_defaults(func=run_deliveries_list)


def deliveries_subcommands(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The sub-commands of `lanebot deliveries`, created on first use by whichever module asks."""
    existing = subparsers.choices.get("deliveries")
    if existing is not None:
        return _subcommands_of(existing)
    parser = subparsers.add_parser("deliveries", help="inspect and recover webhook deliveries")
    return parser.add_subparsers(dest="deliveries_command", metavar="ACTION", required=True)


def _subcommands_of(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    # argparse keeps no public handle on a parser's sub-commands; its actions hold them.
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def _add_database_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help=f"the database (default: $DATABASE_URL, else {DEFAULT_DATABASE_URL})",
    )


def run_migrate(args: argparse.Namespace) -> int:
    engine = _engine(args)
    try:
        before = current_revision(engine)
        after = migrate(engine)
    except OperationalError as error:
        return _unreachable(engine, error)
    finally:
        engine.dispose()
    change = "already at" if before == after else f"upgraded from {before or 'an empty database'} to"
    print(f"{display_url(engine)}: {change} revision {after}")
    return 0


def run_deliveries_list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    engine = _engine(args)
    try:
        if current_revision(engine) != head_revision():
            raise UsageError(f"the database at {display_url(engine)} is not migrated; run `lanebot migrate` first")
        rows = deliveries.list_recent(engine, args.limit)
    except OperationalError as error:
        return _unreachable(engine, error)
    finally:
        engine.dispose()
    print(format_deliveries(rows) if rows else "no deliveries stored")
    return 0


def format_deliveries(rows: Sequence[Delivery]) -> str:
    """An aligned table, one delivery a line; an error shows its first line."""
    table = [_DELIVERY_COLUMNS] + [_delivery_cells(row) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_DELIVERY_COLUMNS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table)


def _delivery_cells(row: Delivery) -> tuple[str, ...]:
    error = row.error.strip().splitlines()[0] if row.error and row.error.strip() else "-"
    return (row.delivery_id, row.event, row.action or "-", row.repository or "-", row.status, error)


def _engine(args: argparse.Namespace) -> Engine:
    url = args.database_url or os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    try:
        return make_engine(url)
    except ValueError as error:
        raise UsageError(f"{error} (from --database-url or DATABASE_URL)") from None


def _unreachable(engine: Engine, error: OperationalError) -> int:
    reason = str(error.orig).strip().splitlines()[0] if error.orig else type(error).__name__
    print(f"lanebot: error: cannot use the database at {display_url(engine)}: {reason}", file=sys.stderr)
    return 1
