"""`lanebot demo`: the whole flow, label to pull request, against a local sandbox GitHub."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.edges.agents import AGENT_NAMES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo", help="run one issue from label to pull request against a local sandbox GitHub (no account, no model)"
    )
    demo.add_argument("--keep", action="store_true", help="leave the sandbox and lanebot running and print their URLs")
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
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bot.demo.runner import main

    return main(keep=args.keep, agent=args.agent, root=args.dir, agent_binary=args.agent_binary)
