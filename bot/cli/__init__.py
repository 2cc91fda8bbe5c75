"""The `lanebot` command: one sub-command family per module, composed here.

Each module in COMMAND_MODULES exposes `register(subparsers)`, adding its parsers with
`set_defaults(func=...)`; `func(args)` returns the exit status. Bad input is a one-line
error and exit 2 (raise `UsageError`), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

COMMAND_MODULES = ("plan", "db", "serve", "worker", "sandbox", "demo", "gc")


class UsageError(Exception):
    """Bad input from the person at the terminal: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lanebot",
        description="Plan an issue as a graph of work units, gate it on a human, run the units as parallel agent lanes.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"bot.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as error:
        print(f"lanebot: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`lanebot ... | head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
