"""`lanebot demo`: the whole flow, label to pull request, against a local sandbox GitHub."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.edges.agents import AGENT_NAMES

MAX_WORKERS = 8


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo", help="run one issue from label to pull request against a local sandbox GitHub (no account, no model)"
    )
    demo.add_argument(
        "--keep",
        action="store_true",
        help="leave the sandbox and lanebot running, the dashboard on, and print their URLs and who can sign in",
    )
    demo.add_argument(
        "--agent",
        default="recipe",
        choices=[name for name in AGENT_NAMES if name != "http"],
        help="the lane and integrate agent (default recipe: applies the files the briefs spell out; "
        "claude or codex if you have one installed and signed in)",
    )
    demo.add_argument(
        "--agent-binary",
        metavar="PATH",
        help="with --agent claude or codex: the CLI to run (default: $LANEBOT_DEMO_AGENT_BINARY, else the agent's "
        "name on PATH); it gets the credentials and endpoints the environment has for it "
        "(ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, CODEX_HOME, ... or a login in its home folder)",
    )
    demo.add_argument("--dir", type=Path, metavar="DIR", help="work here instead of a new temporary folder")
    demo.add_argument(
        "--workers",
        type=_workers,
        default=0,
        metavar="N",
        help="run the lanes on N `lanebot worker` processes (each with its own work folder, as N runner hosts "
        "would have) over Redis at LANEBOT_BROKER_URL (default redis://127.0.0.1:6379/0; the demo takes a free "
        "database number there) and PostgreSQL at DATABASE_URL (default postgresql://postgres@127.0.0.1:5432/test; "
        "the demo creates a database there and drops it after); the table of lanes shows each lane's host",
    )
    demo.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help="run the demo with the dashboard on, then sign in with headless Chromium (/usr/bin/chromium, "
        "driven by the pip package playwright) and save DIR/runs.png and DIR/run.png (1280x800); then stop",
    )
    demo.set_defaults(func=run)


def _workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {MAX_WORKERS}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from bot.demo.runner import main

    return main(
        keep=args.keep,
        agent=args.agent,
        root=args.dir,
        agent_binary=args.agent_binary,
        workers=args.workers,
        screenshots=args.screenshots,
    )
