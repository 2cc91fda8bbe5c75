"""`lanebot serve`, `lanebot setup` and `lanebot deliveries recover`: running lanebot as a GitHub App."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import re
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import gidgethub
import httpx
import uvicorn

from bot.cli import UsageError
from bot.cli.db import deliveries_subcommands
from bot.core.reachability import reachability_advice
from bot.edges.logcontext import json_handler
from bot.edges.settings import DEFAULT_API_URL, DEFAULT_WEBHOOK_PATH, Settings, SettingsError

if TYPE_CHECKING:
    from bot.web.recovery import RecoveryReport

_DURATION = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
# Uvicorn knows "trace"; the logging module does not.
_LOGGING_LEVELS = {"trace": logging.DEBUG}

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = subparsers.add_parser("serve", help="run the GitHub App: webhooks, dispatcher, health check")
    serve.add_argument("--host", help="address to listen on (default: HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default: PORT, else 3000)")
    _env_file_argument(serve)
    serve.set_defaults(func=run_serve)

    setup = subparsers.add_parser("setup", help="serve only the pages that register the GitHub App and write .env")
    setup.add_argument("--host", help="address to listen on (default: HOST, else 127.0.0.1)")
    setup.add_argument("--port", type=int, help="port to listen on (default: PORT, else 3000)")
    setup.add_argument(
        "--public-url",
        type=parse_public_url,
        metavar="URL",
        help="where GitHub will reach lanebot, e.g. https://lanebot.example.com (default http://HOST:PORT); "
        "the App's webhook and callback URLs are built on it",
    )
    _env_file_argument(setup)
    setup.set_defaults(func=run_setup)

    recover = deliveries_subcommands(subparsers).add_parser(
        "recover", help="ask GitHub to redeliver what failed and lanebot has not stored"
    )
    recover.add_argument(
        "--since",
        type=parse_duration,
        default=timedelta(hours=24),
        metavar="DURATION",
        help="how far back to look, e.g. 90m, 24h, 3d (default 24h; GitHub keeps 3 days)",
    )
    _env_file_argument(recover)
    recover.set_defaults(func=run_recover)


def _env_file_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-file",
        type=Path,
        default=Path(".env"),
        metavar="FILE",
        help="the .env file with the App's settings (default .env)",
    )


def parse_duration(text: str) -> timedelta:
    """'90s', '30m', '24h', '3d' -> a timedelta."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 30m, 24h or 3d")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def parse_public_url(text: str) -> str:
    """An http(s) URL with a host and no query: where GitHub reaches lanebot."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL such as https://lanebot.example.com")
    return text.strip().rstrip("/")


def load_settings(env_file: Path) -> Settings:
    try:
        return Settings.load(env_file=env_file)
    except SettingsError as error:
        raise UsageError(str(error)) from None


def configure_logging(level: str, log_format: str = "text") -> None:
    """The root logger at `level`, writing text lines or (`log_format` "json", LOG_FORMAT=json) JSON
    lines that carry the run, unit and delivery ids (bot.edges.logcontext); `lanebot worker` uses it too."""
    numeric = _LOGGING_LEVELS.get(level, getattr(logging, level.upper(), logging.INFO))
    if log_format == "json":
        logging.basicConfig(level=numeric, handlers=[json_handler()])
        logging.captureWarnings(True)  # a warning is a JSON line too, not text among them
    else:
        logging.basicConfig(level=numeric, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def uvicorn_logging(log_format: str) -> dict[str, Any]:
    """uvicorn.run's logging options: its own text config, or none (its loggers then reach the JSON lines)."""
    return {"log_config": None} if log_format == "json" else {}


@dataclass(frozen=True)
class ServerImplementation:
    """uvicorn.run's `http` and `loop`."""

    http: Literal["httptools", "h11"]
    loop: Literal["uvloop", "asyncio"]


def server_implementation() -> ServerImplementation:
    """uvicorn's HTTP parser and event loop: httptools and uvloop (uvicorn[standard]) where they
    import, else uvicorn's pure-Python h11 and asyncio. bench/intake.py serves both of its targets with these."""
    return ServerImplementation(
        http="httptools" if _importable("httptools") else "h11",
        loop="uvloop" if _importable("uvloop") else "asyncio",
    )


def _importable(module: str) -> bool:
    # Imported, not only found: a wheel built for another platform is found and then fails to load.
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def run_serve(args: argparse.Namespace) -> int:
    from bot.web.app import create_app

    settings = load_settings(args.env_file)
    configure_logging(settings.log_level, settings.log_format)
    app = create_app(settings)
    implementation = server_implementation()
    log.info("serving with uvicorn's http=%s, loop=%s", implementation.http, implementation.loop)
    uvicorn.run(
        app,
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_level=settings.log_level,
        http=implementation.http,
        loop=implementation.loop,
        **uvicorn_logging(settings.log_format),
    )
    return 0


def run_setup(args: argparse.Namespace) -> int:
    from bot.web.app import create_setup_app
    from bot.web.registration import relay_channel

    host = args.host or os.environ.get("HOST", "").strip() or "127.0.0.1"
    port = args.port or _port_from_environment()
    configure_logging("info")
    public_url = args.public_url or f"http://{host}:{port}"
    webhook_path = os.environ.get("WEBHOOK_PATH", "").strip() or DEFAULT_WEBHOOK_PATH
    channel_setting, channel = relay_channel(args.env_file, os.environ)
    github_api_url = os.environ.get("GITHUB_API_URL", "").strip() or DEFAULT_API_URL
    app = create_setup_app(
        public_url=public_url,
        env_file=args.env_file,
        github_api_url=github_api_url,
        webhook_path=webhook_path,
        webhook_url=channel,
    )
    if channel:
        print(f"GitHub will deliver webhooks to the relay channel {channel} ({channel_setting}).")
    for line in reachability_advice(channel or public_url + webhook_path, github_api_url):
        print(line)
    print(f"Open {public_url}/setup to register the App; it writes {args.env_file}.")
    uvicorn.run(app, host=host, port=port, log_level="info")
    return 0


def _port_from_environment() -> int:
    raw = os.environ.get("PORT", "").strip() or "3000"
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise UsageError(f"PORT must be a whole number between 1 and 65535, not {raw!r}")
    return int(raw)


def run_recover(args: argparse.Namespace) -> int:
    settings = load_settings(args.env_file)
    report = asyncio.run(_recover(settings, args.since))
    for line in report.lines():
        print(line)
    return 1 if report.not_redelivered else 0


async def _recover(settings: Settings, since: timedelta) -> RecoveryReport:
    from anyio import to_thread

    from bot.edges.github.client import GitHubApp
    from bot.edges.store import db
    from bot.web.recovery import recover

    engine = db.make_engine(settings.database_url)
    try:
        await to_thread.run_sync(db.migrate, engine)
        async with GitHubApp(settings) as github:
            try:
                return await recover(github, engine, since, relayed=bool(settings.webhook_proxy_url))
            except (gidgethub.GitHubException, httpx.HTTPError) as error:
                raise UsageError(
                    f"GitHub would not list the App's deliveries ({type(error).__name__}: {error}); "
                    "check APP_ID, PRIVATE_KEY and GITHUB_API_URL"
                ) from None
    finally:
        engine.dispose()
