"""`lanebot worker`: a runner host, doing the lane, merge and integrate jobs `lanebot serve` queues."""

from __future__ import annotations

import argparse
import re
import socket
from pathlib import Path

from bot.cli import UsageError
from bot.cli.serve import configure_logging, load_settings

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

DESCRIPTION = """\
Run a runner host: take lane, merge and integrate jobs from the broker at LANEBOT_BROKER_URL (which
`lanebot serve` hands them to when that is set), and do them here, `--concurrency` at once.

What a runner host needs:
  - the broker: LANEBOT_BROKER_URL, the same as `lanebot serve`'s (redis://host:6379/0 or
    amqp://user:password@host:5672//);
  - the database: DATABASE_URL, the same PostgreSQL as `lanebot serve`'s (SQLite works only when
    every worker is on the machine of lanebot serve); the worker never migrates it, `lanebot serve` does;
  - the App: APP_ID and PRIVATE_KEY (or PRIVATE_KEY_PATH), GITHUB_API_URL, and WEBHOOK_SECRET (read
    like `lanebot serve`'s settings; the worker mints installation tokens with the key);
  - a work folder of its own: LANEBOT_WORKDIR (mirror cache, worktrees, transcripts), never shared
    with another worker or with `lanebot serve`;
  - git, bubblewrap (`bwrap`, the jail of agents and checks, unless LANEBOT_UNJAILED=1) and the agent
    CLIs the workflow names (claude, codex), logged in or given their keys in the environment.

Settings come from the environment and --env-file, as for `lanebot serve`. Each agent session it
starts records --name as its host.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = subparsers.add_parser(
        "worker",
        help="run a runner host: do the lane, merge and integrate jobs queued at LANEBOT_BROKER_URL",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument(
        "--concurrency",
        type=_positive,
        default=2,
        metavar="N",
        help="how many jobs this host runs at once, one process each (default 2)",
    )
    worker.add_argument(
        "--name",
        type=_name,
        default=None,
        metavar="NAME",
        help="this host's name, recorded on every agent session it runs (default: the machine's host name); "
        "unique among the workers",
    )
    worker.add_argument(
        "--env-file",
        type=Path,
        default=Path(".env"),
        metavar="FILE",
        help="the .env file with the App's settings (default .env)",
    )
    worker.add_argument(
        "--loglevel",
        choices=_LOG_LEVELS,
        default=None,
        help="how much the worker logs (default: LOG_LEVEL, else info)",
    )
    worker.set_defaults(func=run_worker)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a host name: letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit"
        )
    return text


def run_worker(args: argparse.Namespace) -> int:
    from bot.runner.worker import worker_app

    settings = load_settings(args.env_file)
    if not settings.broker_url:
        raise UsageError("LANEBOT_BROKER_URL is not set: a worker takes its jobs from that broker (see --help)")
    name = args.name or re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:63].lstrip("._-") or "lanebot"
    level = args.loglevel or (settings.log_level if settings.log_level in _LOG_LEVELS else "info")
    configure_logging(level)
    app = worker_app(settings, name)
    app.worker_main(
        [
            "worker",
            f"--concurrency={args.concurrency}",
            f"--hostname={name}@%h",
            f"--loglevel={level.upper()}",
            "--pool=prefork",
        ]
    )
    return 0
