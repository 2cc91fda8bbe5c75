"""How much a lane costs beyond its agent, and whether a run's wall-clock matches the scheduler's model.

Part 1, a lane's orchestration overhead with an agent that does nothing (it leaves one new
file, so the commit, the merge and the pushes have something to carry): the lane's worktree
cut from the mirror, the commit, the ownership check, the lane branch's push, the merge in the
integration worktree (kept between merge rounds, as the orchestrator keeps it, so reset rather
than cut again) and its push, the lane worktree's removal. All through lanebot's own git
code (`bot.edges.git`, `bot.runner.lanes.ownership_violations`) against a local bare repository as the
remote, on repositories of 1,000, 10,000 and 100,000 files, beside `git worktree add` alone on
the same repository in the same run. Database and GitHub calls are not part of it.

Part 2, the worked example (examples/worked-example.jsonl) driven by the real orchestrator, its
agents sleeping their estimates scaled (1 minute = 0.2 s), against the sandbox GitHub: the measured
makespan (first lane start to last merge, from the database) against the model's (45 minutes
under barrier, 30 under eager).

    .venv/bin/python bench/lane_overhead.py [--sizes 1000,10000,100000] [--repeat 5] [--skip-makespan]
    .venv/bin/python bench/lane_overhead.py --processes [--sizes 1000]

`--processes` lists every git process of one lane (after a first lane has warmed the mirror), as
git's own trace2 reports them, children indented under their parent, and counts them.

Prints Markdown tables. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.core.graph import Unit, load_plan  # noqa: E402
from bot.core.names import integration_branch, lane_branch, merge_message  # noqa: E402
from bot.core.scheduler import simulate  # noqa: E402
from bot.edges.git import Identity, Mirror, Worktree, git  # noqa: E402
from bot.runner.lanes import ownership_violations  # noqa: E402

IDENTITY = Identity("lanebot-bench[bot]", "1+lanebot-bench[bot]@users.noreply.github.com")
SCALE_S_PER_MINUTE = 0.2
GIT_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
}


# --------------------------------------------------------------------------- part 1


def make_repository(root: Path, files: int) -> Path:
    """A bare repository whose `main` holds `files` small files in 100-file folders (git fast-import)."""
    bare = root / f"remote-{files}.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(bare)], check=True, env=GIT_ENV)
    stream = ["commit refs/heads/main", "committer bench <bench@example.com> 0 +0000", "data 4", "seed"]
    for index in range(files):
        data = f"file {index}\n"
        stream += [f"M 644 inline src/d{index // 100:04d}/f{index:06d}.txt", f"data {len(data)}", data.rstrip("\n")]
    subprocess.run(
        ["git", "fast-import", "--quiet"], input="\n".join(stream) + "\n", text=True, cwd=bare, check=True, env=GIT_ENV
    )
    return bare


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


@dataclass
class LaneTimes:
    worktree: float
    commit_and_ownership: float
    push_lane: float
    merge_and_push: float
    cleanup: float

    @property
    def total(self) -> float:
        return self.worktree + self.commit_and_ownership + self.push_lane + self.merge_and_push + self.cleanup


async def one_lane(mirror: Mirror, integration: Worktree, work: Path, number: int, base: str) -> LaneTimes:
    """One lane's git work as `bot.runner.lanes` and `bot.runner.integrate` do it; the integration worktree is kept
    between merge rounds (`fresh_integration_worktree` resets it), so it is cut once per run, not here."""
    unit = Unit(
        id=f"lane-{number}", title="bench", needs=(), files=rf"^bench/lane-{number}\.txt$", check="true", brief=""
    )
    branch = lane_branch(1, unit.id)
    lane_path = work / f"lane-{number}"
    start = time.perf_counter()
    await mirror.fetch()
    lane = await mirror.add_worktree(lane_path, branch=branch, start=base)
    cut = time.perf_counter()
    (lane_path / "bench").mkdir()
    (lane_path / "bench" / f"lane-{number}.txt").write_text("the agent's only change\n")
    await lane.commit_all(f"{unit.id}: bench", IDENTITY)
    offending = ownership_violations(unit, await lane.changed_paths(base))
    assert not offending, offending
    committed = time.perf_counter()
    await lane.push(branch, expected="")
    pushed = time.perf_counter()
    await mirror.fetch()
    await git("reset", "--quiet", "--hard", base, cwd=integration.path)
    await git("clean", "-d", "--force", "--quiet", "-x", cwd=integration.path)
    result = await integration.merge_no_ff(await lane.head(), merge_message(unit.id, 1), IDENTITY)
    assert result.ok
    await integration.push(integration_branch(1), force=True)
    merged = time.perf_counter()
    await mirror.remove_worktree(lane_path)
    done = time.perf_counter()
    return LaneTimes(cut - start, committed - cut, pushed - committed, merged - pushed, done - merged)


def worktree_add_alone(mirror_path: Path, target: Path, sha: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        ["git", "worktree", "add", "--quiet", "--detach", str(target), sha], cwd=mirror_path, check=True, env=GIT_ENV
    )
    elapsed = time.perf_counter() - start
    subprocess.run(["git", "worktree", "remove", "--force", str(target)], cwd=mirror_path, check=True, env=GIT_ENV)
    return elapsed


async def overhead(sizes: list[int], repeat: int) -> list[str]:
    rows = [
        "| Files | `git worktree add` alone | Lane overhead | Ratio | worktree cut | commit + ownership | "
        "push lane | merge + push | remove worktree | integration worktree (once per run) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="lanebot-bench-") as folder:
            root = Path(folder)
            bare = make_repository(root, size)
            mirror = Mirror(root / "work", "bench/repo", str(bare))
            await mirror.fetch()
            base = await mirror.resolve("main")
            cut_start = time.perf_counter()
            integration = await mirror.add_worktree(root / "integration", branch=integration_branch(1), start=base)
            integration_cut = time.perf_counter() - cut_start
            alone, lanes = [], []
            for number in range(repeat):
                alone.append(worktree_add_alone(mirror.path, root / "alone", base))
                lanes.append(await one_lane(mirror, integration, root / "worktrees", number, base))
            median = statistics.median
            lane_total = median(lane.total for lane in lanes)
            rows.append(
                f"| {size:,} | {median(alone):.3f} s | {lane_total:.3f} s | {lane_total / median(alone):.1f}× | "
                f"{median(t.worktree for t in lanes):.3f} s | {median(t.commit_and_ownership for t in lanes):.3f} s | "
                f"{median(t.push_lane for t in lanes):.3f} s | {median(t.merge_and_push for t in lanes):.3f} s | "
                f"{median(t.cleanup for t in lanes):.3f} s | {integration_cut:.3f} s |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


async def lane_processes(size: int) -> list[str]:
    """Every git process one lane starts, from GIT_TRACE2_EVENT: lanebot's git environment is built
    from scratch, so a `git` first on PATH turns the trace on for the calls of the second lane."""
    real_git = shutil.which("git")
    assert real_git, "git is not on PATH"
    with tempfile.TemporaryDirectory(prefix="lanebot-bench-") as folder:
        root = Path(folder)
        events, switch, wrapper = root / "events.json", root / "tracing", root / "bin" / "git"
        wrapper.parent.mkdir()
        wrapper.write_text(
            f'#!/bin/sh\n[ -e "{switch}" ] && export GIT_TRACE2_EVENT="{events}"\nexec "{real_git}" "$@"\n'
        )
        wrapper.chmod(0o755)
        bare = make_repository(root, size)
        path = os.environ["PATH"]
        os.environ["PATH"] = f"{wrapper.parent}{os.pathsep}{path}"
        try:
            mirror = Mirror(root / "work", "bench/repo", str(bare))
            await mirror.fetch()
            base = await mirror.resolve("main")
            integration = await mirror.add_worktree(root / "integration", branch=integration_branch(1), start=base)
            await one_lane(mirror, integration, root / "worktrees", 0, base)
            switch.touch()
            await one_lane(mirror, integration, root / "worktrees", 1, base)
            switch.unlink()
        finally:
            os.environ["PATH"] = path
        starts = [event for event in map(json.loads, events.read_text().splitlines()) if event["event"] == "start"]
    rows = []
    for event in starts:
        depth = event["sid"].count("/")
        argv = " ".join(Path(event["argv"][0]).name.split() + event["argv"][1:])
        rows.append(f"{'    ' * depth}{argv[:140]}")
    top = sum(1 for event in starts if "/" not in event["sid"])
    rows.append(f"\n{len(starts)} git processes: {top} started by lanebot, {len(starts) - top} by those")
    return rows


# --------------------------------------------------------------------------- part 2


async def makespan(schedule: str) -> tuple[float, float]:
    """(measured, model) makespan of the worked example in seconds, agents sleeping scaled estimates."""
    from bot.edges.github.client import GitHubApp
    from bot.edges.store import runs as store
    from bot.edges.store.db import make_engine, migrate
    from bot.runner import orchestrator
    from tests.lanes_helpers import (
        OWNER,
        REPO,
        RunnerContext,
        approved_run,
        make_settings,
        make_workflow_dir,
        run_scripted_agent_plain,
    )
    from tests.sandbox_helpers import SandboxRepository, served_sandbox

    units = [json.loads(line) for line in (ROOT / "examples" / "worked-example.jsonl").read_text().splitlines() if line]
    graph = load_plan("\n".join(json.dumps(u) for u in units))
    model = simulate(graph, None, schedule).makespan * SCALE_S_PER_MINUTE
    with tempfile.TemporaryDirectory(prefix="lanebot-makespan-") as folder:
        root = Path(folder)
        (root / "project").mkdir()
        agent = _sleeping_agent(root / "agent.sh", units)
        run_scripted_agent_plain()  # the agent is a script under /tmp, which the agents' jail hides; checks stay jailed
        host = {
            "build": {"agent": "command", "schedule": schedule, "max_lanes": 4, "timeout": "120s"},
            "integrate": {"agent": "recipe", "verify": "true", "max_retries": 0},
            "review": {"enabled": False},
        }
        os.environ["LANEBOT_WORKFLOWS_DIR"] = str(make_workflow_dir(root, host, ["sh", str(agent)]))
        url = f"sqlite:///{root / 'lanebot.db'}"
        engine = make_engine(url)
        migrate(engine)
        plan = [{**u, "check": "true"} for u in units]
        with served_sandbox(root) as server:
            github = SandboxRepository.create(
                server, root / "project", f"{OWNER}/{REPO}", {"README.md": "# tasks\n"}, organization=True
            )
            github.open_issue("Status", "", login="maintainer", role="admin")
            github.close()
            settings = make_settings(root, url, server.url)
            async with GitHubApp(settings) as app:
                context = RunnerContext(engine=engine, github=app, settings=settings, progress_interval_s=5.0)
                run_id = approved_run(engine, plan)
                state = await orchestrator.drive(context, run_id)
                await orchestrator.shutdown(context)
        assert state == "done", state
        sessions = [s for s in store.sessions(engine, run_id) if s.kind == "lane"]
        lanes = store.lanes(engine, run_id)
        first = min(s.started_at for s in sessions)
        last = max(lane.merged_at for lane in lanes if lane.merged_at)
        engine.dispose()
    return (last - first).total_seconds(), model


def _sleeping_agent(path: Path, units: list[dict]) -> Path:
    """A shell agent that sleeps each unit's scaled estimate, then leaves one file its unit owns."""
    cases = []
    for unit in units:
        owned = _owned_path(unit["files"])
        cases.append(
            f"  {unit['id']}) sleep {unit['estimate'] * SCALE_S_PER_MINUTE:g};"
            f' mkdir -p "$(dirname {owned})"; echo done > {owned} ;;'
        )
    path.write_text('case "$LANEBOT_UNIT" in\n' + "\n".join(cases) + "\nesac\n")
    return path


def _owned_path(files: str) -> str:
    """A path the worked example's `files` expressions own."""
    return {
        "^migrations/": "migrations/001_status.sql",
        "^app/tui/": "app/tui/rows.py",
        "^app/api/": "app/api/status.py",
        r"^app/cli\.py$": "app/cli.py",
    }[files]


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000", help="repository sizes in files, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="lanes measured per size (the median is shown)")
    parser.add_argument("--skip-makespan", action="store_true", help="only measure the lane overhead")
    parser.add_argument("--processes", action="store_true", help="list the git processes of one lane, and stop")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.processes:
        for size in sizes:
            print(f"## The git processes of one lane, {size:,} files\n")
            print("\n".join(asyncio.run(lane_processes(size))))
        return
    print("## A lane's orchestration overhead (medians)\n")
    print("\n".join(asyncio.run(overhead(sizes, args.repeat))))
    if args.skip_makespan:
        return
    print("\n## The worked example's makespan (1 minute = 0.2 s)\n")
    print("| Schedule | Model | Measured | Difference |\n|---|---:|---:|---:|")
    for schedule in ("barrier", "eager"):
        measured, model = asyncio.run(makespan(schedule))
        print(
            f"| {schedule} | {model:.2f} s ({model / SCALE_S_PER_MINUTE:.0f} min) | {measured:.2f} s | "
            f"{(measured - model) / model:+.1%} |",
            flush=True,
        )
    shutil.rmtree(ROOT / ".lanebot-bench", ignore_errors=True)


if __name__ == "__main__":
    main()
