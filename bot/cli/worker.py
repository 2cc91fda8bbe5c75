"""`lanebot worker`: a runner host, doing the lane, merge and integrate jobs `lanebot serve` queues."""

from __future__ import annotations

import argparse
import re
import socket
from pathlib import Path

from bot.cli import UsageError
from bot.cli.serve import configure_logging, load_settings
from bot.edges.settings import Settings

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
starts records --name as its host. LOG_FORMAT=json writes its log as JSON lines carrying the run,
unit and delivery ids (and leaves out Celery's banner). --metrics-port N serves Prometheus metrics at
http://HOST:N/metrics (HOST, default 127.0.0.1) from the worker's main process: runs by state, lanes
running per host and queued, session and lane durations, all read from the database at each scrape,
so every worker (and `lanebot serve`) shows the same values.
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
        "--metrics-port",
        type=_port,
        default=0,
        metavar="N",
        help="serve Prometheus metrics at http://HOST:N/metrics (default 0: none)",
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


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: a whole number from 0 (none) to 65535")
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
    configure_logging(level, settings.log_format)
    app = worker_app(settings, name)
    if args.metrics_port:
        _serve_metrics(settings, args.metrics_port)
    quiet = []
    if settings.log_format == "json":
        # Celery then configures no logging of its own (the JSON lines stay the only format) and
        # prints no banner, so that every line of the worker's output is one JSON object.
        from celery.signals import setup_logging

        setup_logging.connect(_leave_logging_alone, weak=False)
        quiet = ["--quiet"]
    app.worker_main(
        [
            *quiet,  # one of Celery's own options: before its sub-command
            "worker",
            f"--concurrency={args.concurrency}",
            f"--hostname={name}@%h",
            f"--loglevel={level.upper()}",
            "--pool=prefork",
        ]
    )
    return 0


def _leave_logging_alone(**_kwargs: object) -> None:
    """Celery's `setup_logging` signal: connected, it makes Celery leave logging as lanebot set it."""


def _serve_metrics(settings: Settings, port: int) -> None:
    """Metrics from this, the main, process. Its engine keeps no connection between scrapes
    (NullPool): the prefork children are forked from this process and must not inherit one."""
    from sqlalchemy.pool import NullPool

    from bot.edges.store import db
    from bot.runner.metrics import serve_metrics, worker_registry

    engine = db.make_engine(settings.database_url, poolclass=NullPool)
    try:
        serve_metrics(worker_registry(engine), host=settings.host, port=port)
    except OSError as error:
        raise UsageError(f"cannot serve metrics on {settings.host}:{port}: {error.strerror or error}") from None
