"""What a real agent session costs lanebot beyond the CLI itself, and what the jail adds.

The real Claude Code and Codex CLIs (the versions agents/package.json pins, `make agents`) against
the tests' scripted model server on loopback (tests/model_server), which answers every session
with one short final message: the smallest real session, so lanebot's fixed cost is the largest
share it can be. For each CLI, `--rounds` times, interleaved so drift hits all targets alike:

- bare: the CLI started as lanebot would start it (the same argv, the prompt on stdin, a minimal
  environment), its output drained; nothing of lanebot's around it;
- lanebot: the same session through lanebot's adapter (`ClaudeAgent.run` / `CodexAgent.run`): the
  environment built from the allowlists, the transcript written line by line, the stream parsed,
  the process group stopped and reaped;
- jailed: the same through the adapter in the agent's jail (bot.runner.jailing.agent_jail:
  bubblewrap, its own PID namespace, a private home and temp, the CLI's folder bound read-only);

and, for the jail alone, `/bin/true` run plain and in a command's jail (the per-command floor).

    .venv/bin/python bench/agent_session.py [--rounds 7]

Prints Markdown. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.edges.agents import AgentRequest  # noqa: E402
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings, claude_argv  # noqa: E402
from bot.edges.agents.codex import CodexAgent, CodexSettings, codex_argv  # noqa: E402
from bot.edges.jail import JailPolicy, bwrap_argv, find_bwrap  # noqa: E402
from bot.runner.jailing import agent_jail  # noqa: E402
from tests.agent_clis import real_cli  # noqa: E402
from tests.model_server.scenarios import always  # noqa: E402
from tests.model_server.script import Reply  # noqa: E402
from tests.model_server.server import ModelServer  # noqa: E402

PROMPT = "Say that you are done."
TIMEOUT_S = 120.0
Timed = Callable[[], Awaitable[None]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(
        f"{args.rounds} rounds, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f}\n"
    )
    with (
        tempfile.TemporaryDirectory(prefix="lanebot-bench-agents-") as folder,
        ModelServer(always(Reply(text="Done."))) as server,
    ):
        root = Path(folder)
        for name, build in (("claude", claude_targets), ("codex", codex_targets)):
            targets = build(root, server)
            if targets:
                report(name, asyncio.run(measure(targets, args.rounds)))
        report("a command (`/bin/true`)", asyncio.run(measure(command_targets(root), args.rounds * 3)))


def worktree(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def settings_for(root: Path) -> SimpleNamespace:
    """What agent_jail reads of lanebot's settings."""
    return SimpleNamespace(
        unjailed=False, jail_read_only=(), workdir=root / "work", database_url="", private_key_path=None
    )


def claude_targets(root: Path, server: ModelServer) -> dict[str, Timed] | None:
    binary = real_cli("claude")
    if binary is None:
        print("claude: not installed (`make agents`); skipped\n")
        return None
    home = root / "claude-home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **server.anthropic_env()}
    os.environ.update(server.anthropic_env(), HOME=str(home))  # lanebot's environment, which its adapter passes on
    settings = ClaudeSettings(binary=binary)
    return session_targets(
        root / "claude", claude_argv(settings, read_only=False), env, ClaudeAgent(settings), "claude"
    )


def codex_targets(root: Path, server: ModelServer) -> dict[str, Timed] | None:
    binary = real_cli("codex")
    if binary is None:
        print("codex: not installed (`make agents`); skipped\n")
        return None
    codex_env = server.codex_config(root / "codex-home")
    env = {"PATH": os.environ["PATH"], "HOME": str(root / "codex-home"), **codex_env}
    os.environ.update(codex_env, HOME=str(root / "codex-home"))
    settings = CodexSettings(binary=binary)
    argv = codex_argv(settings, read_only=False, last_message=root / "codex-last-message.txt")
    return session_targets(root / "codex", argv, env, CodexAgent(settings), "codex")


def session_targets(
    root: Path, argv: list[str], env: dict[str, str], agent: ClaudeAgent | CodexAgent, name: str
) -> dict[str, Timed]:
    tree = worktree(root, "worktree")
    counter = iter(range(1_000_000))

    async def bare() -> None:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        await process.communicate(PROMPT.encode())
        if process.returncode != 0:
            raise RuntimeError(f"bare {name} exited {process.returncode}")

    async def through_lanebot(jailed: bool) -> None:
        index = next(counter)
        jail = None
        if jailed:
            jail = await agent_jail(settings_for(root), agent=name, worktree=tree, folder=root / f"jail-{index}")
        request = AgentRequest(
            prompt=PROMPT, cwd=tree, transcript=root / f"t-{index}.jsonl", timeout=TIMEOUT_S, jail=jail
        )
        result = await agent.run(request)
        if result.error or result.timed_out:
            raise RuntimeError(f"{name} through lanebot failed: {result.error or 'timed out'}")

    return {
        "bare": bare,
        "lanebot": lambda: through_lanebot(False),
        "jailed": lambda: through_lanebot(True),
    }


def command_targets(root: Path) -> dict[str, Timed]:
    bwrap = find_bwrap()
    tree = worktree(root, "command-worktree")
    policy = JailPolicy(worktree=tree, home=root / "command-home", tmp=root / "command-tmp")
    for folder in (policy.home, policy.tmp):
        folder.mkdir(exist_ok=True)

    async def run(argv: list[str], env: dict[str, str]) -> None:
        process = await asyncio.create_subprocess_exec(*argv, cwd=tree, env=env, stdin=subprocess.DEVNULL)
        if await process.wait() != 0:
            raise RuntimeError(f"{argv[0]} exited {process.returncode}")

    targets: dict[str, Timed] = {"bare": lambda: run(["/bin/true"], {"PATH": "/usr/bin:/bin"})}
    if bwrap is not None:
        targets["jailed"] = lambda: run(bwrap_argv(policy, ["/bin/true"], bwrap=bwrap), policy.environment())
    return targets


async def measure(targets: dict[str, Timed], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in targets}
    for target in targets.values():  # one unmeasured run each: caches, the CLI's first start
        await target()
    for _ in range(rounds):
        for name, target in targets.items():
            started = time.perf_counter()
            await target()
            times[name].append(time.perf_counter() - started)
    return times


def report(title: str, times: dict[str, list[float]]) -> None:
    base = statistics.median(times["bare"])
    print(f"### {title}\n")
    print("| target | median | range | beyond bare | / bare |")
    print("|---|---:|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        extra = "" if name == "bare" else f"{(median - base) * 1000:+.0f} ms"
        print(
            f"| {name} | {median * 1000:.0f} ms | {min(values) * 1000:.0f}–{max(values) * 1000:.0f} ms "
            f"| {extra} | {median / base:.2f}× |"
        )
    print()


if __name__ == "__main__":
    main()
