"""`lanebot demo`: one issue, from label to pull request, against the sandbox GitHub.

It creates a sandbox with a small Python project and an App, starts lanebot pointed at it, opens
an issue whose hand-written plan has four units (one `needs` edge) with recipe briefs, labels it,
waits for the gate comment, approves as a maintainer, and waits for the pull request. Then it
prints what a person wants to see. Every wait has a timeout; a step that does not happen ends
the demo with a non-zero status naming the step.

With `agent` `claude` or `codex`, the real CLI runs the lanes and the integrate step, with whatever
credentials and endpoints the environment gives it (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, a login
in its home folder, CODEX_HOME's config, ...: the variables lanebot passes to that CLI). The binary
is `agent_binary`, else $LANEBOT_DEMO_AGENT_BINARY, else the agent's name on PATH; it reaches
lanebot as host settings (`agents.<agent>.binary`, in a copy of the default workflow under the
demo's folder), as a repository's .github/lanebot.yml may not choose programs for the host.

With `workers` N, the lanes, merges and the integrate step run on N `lanebot worker` processes
(`runner-1` ... `runner-N`, one job at a time each, each with a work folder of its own as N hosts
would have), which `lanebot serve` hands them to over Redis (LANEBOT_BROKER_URL, default
redis://127.0.0.1:6379/0: the demo claims a database number of its own there and empties it after),
on a PostgreSQL database created for the demo on the server of DATABASE_URL (default
postgresql://postgres@127.0.0.1:5432/test) and dropped after (bot/demo/services.py). The table of
lanes then has a `host` column: which worker ran each lane's last attempt.

With `keep`, the dashboard is on (the sandbox App's OAuth client, as `lanebot setup` leaves it), and
the demo prints its address and the sandbox login to sign in as (`dashboard_lines`). With
`screenshots` DIR, the dashboard is on too, and after the run headless Chromium signs in and saves
DIR/runs.png, DIR/run.png and DIR/time.png (bot/demo/screenshots.py); then everything stops.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bot.core.workflow import deep_merge
from bot.demo.plan import issue_body
from bot.demo.services import (
    DEFAULT_BROKER_URL,
    DEFAULT_POSTGRES_URL,
    ServiceUnavailable,
    claimed_redis,
    shown_url,
    throwaway_postgres,
)
from bot.demo.stack import Stack, StepTimedOut
from bot.edges.store import db, runs
from bot.edges.store.models import Lane
from bot.edges.workflow_files import DEFAULT_WORKFLOW, WORKFLOWS_DIR_ENV

REPOSITORY = "octo-org/tasks"
MAINTAINER = "maintainer"
TRIGGER_LABEL = "lanebot"
GATE_TIMEOUT_S = 90.0
PR_TIMEOUT_S = 240.0
# A real model writes four units and integrates them: minutes, not seconds (lanebot's own session
# timeouts, 30 minutes each by default, still bound every lane).
REAL_AGENT_PR_TIMEOUT_S = 3600.0
REAL_AGENTS = ("claude", "codex")
AGENT_BINARY_ENV = "LANEBOT_DEMO_AGENT_BINARY"


def repository_config(agent: str) -> str:
    """The sample repository's .github/lanebot.yml: which agents run, and its test command."""
    return (
        "# lanebot settings for this repository (see workflows/resolve-issue.yaml for every key)\n"
        "build:\n"
        f"  agent: {agent}\n"
        "integrate:\n"
        f"  agent: {agent}\n"
        "  verify: python3 -m unittest -q\n"
        "# lanebot's own review of its pull request asks a model to refute it; the demo runs no model.\n"
        "review:\n"
        "  enabled: false\n"
    )


@dataclass
class DemoResult:
    gate_comment: str
    pull: dict[str, Any]
    check_runs: list[dict[str, Any]]
    lanes: list[Lane]
    wall_clock_s: float
    graph_log: str
    api_requests: int
    hosts: dict[str, str] = field(default_factory=dict)  # unit -> the host of its last attempt (with workers)


def agent_binary_for(agent: str, agent_binary: str | None = None) -> str:
    """The executable a real agent runs as: `agent_binary`, else $LANEBOT_DEMO_AGENT_BINARY, else `agent`."""
    return agent_binary or os.environ.get(AGENT_BINARY_ENV, "").strip() or agent


def host_workflows(root: Path, agent: str, binary: str) -> Path:
    """A copy of the default workflow folder under `root` whose host settings run `agent` as `binary`."""
    folder = root / "workflows"
    shutil.copytree(DEFAULT_WORKFLOW.parent / "prompts", folder / "prompts", dirs_exist_ok=True)
    settings = yaml.safe_load(DEFAULT_WORKFLOW.read_text())
    merged = deep_merge(settings, {"agents": {agent: {"binary": binary}}})
    (folder / DEFAULT_WORKFLOW.name).write_text(yaml.safe_dump(merged, sort_keys=False))
    return folder


def worker_names(workers: int) -> list[str]:
    return [f"runner-{index}" for index in range(1, workers + 1)]


def run_demo(
    root: Path,
    *,
    agent: str = "recipe",
    agent_binary: str | None = None,
    say: Callable[[str], None] = print,
    workers: int = 0,
    broker_url: str = "",
    database_url: str = "",
    dashboard: bool = False,
) -> tuple[Stack, DemoResult]:
    """Run the whole flow under `root`; the Stack is returned still running (the caller stops it).

    `agent_binary` (claude and codex only): the CLI to run, see `agent_binary_for`. `workers` > 0:
    that many `lanebot worker`s run the jobs, over the Redis `broker_url`, on the PostgreSQL
    `database_url` (both the caller's to give and to take back; see `main`). `dashboard`: lanebot serves
    /dashboard, with the sandbox App's OAuth client (`Stack(dashboard=True)`)."""
    lanebot_env: dict[str, str] = {}
    if workers:
        lanebot_env["LANEBOT_BROKER_URL"] = broker_url
    if agent in REAL_AGENTS:
        binary = agent_binary_for(agent, agent_binary)
        root.mkdir(parents=True, exist_ok=True)
        lanebot_env[WORKFLOWS_DIR_ENV] = str(host_workflows(root, agent, binary))
        say(f"The lanes and the integrate step run `{binary}` ({agent}).")
    stack = Stack(root, lanebot_env=lanebot_env, database=database_url if workers else "", dashboard=dashboard)
    say(f"Starting the sandbox GitHub and lanebot under {root} ...")
    stack.start()
    try:
        if workers:
            names = worker_names(workers)
            say(
                f"Starting {workers} lanebot workers ({', '.join(names)}), each with its own work folder, "
                f"over Redis at {shown_url(broker_url)} and PostgreSQL at {shown_url(database_url)} ..."
            )
            for name in names:
                stack.start_worker(name, concurrency=1)
            stack.wait_for_workers()
        return stack, _flow(stack, agent, say)
    except BaseException:
        stack.stop()
        raise


def _flow(stack: Stack, agent: str, say: Callable[[str], None]) -> DemoResult:
    say(f"  sandbox GitHub: {stack.sandbox_url}")
    say(f"  lanebot:        {stack.lanebot_url}")
    stack.create_repository(REPOSITORY, config=repository_config(agent), maintainers=(MAINTAINER,))
    human = stack.human
    assert human is not None  # run_demo started the stack
    issue = human.open_issue(REPOSITORY, login=MAINTAINER, title="Tasks need a status", body=issue_body())
    number = issue["number"]
    say(f"Opened issue #{number} with a hand-written plan; labelling it `{TRIGGER_LABEL}` ...")
    human.add_label(REPOSITORY, number, TRIGGER_LABEL, login=MAINTAINER)

    gate = stack.wait_for(
        "the gate comment",
        lambda: _comment_with(stack, number, "<!-- lanebot:gate"),
        timeout=GATE_TIMEOUT_S,
        seen=lambda: _seen(stack, number),
    )
    say("The gate comment is up; commenting /approve as a maintainer ...")
    human.comment(REPOSITORY, number, login=MAINTAINER, body="/approve")

    pull = stack.wait_for(
        "the pull request",
        lambda: _pull_for(stack, number),
        timeout=REAL_AGENT_PR_TIMEOUT_S if agent in REAL_AGENTS else PR_TIMEOUT_S,
        seen=lambda: _seen(stack, number),
    )
    state = stack.repository(REPOSITORY)
    lanes, wall_clock, hosts = _lanes_and_wall_clock(stack, number)
    graph_log = subprocess.run(
        [
            "git",
            "--git-dir",
            str(stack.bare_repository(REPOSITORY)),
            "log",
            "--graph",
            "--format=%h %s",
            pull["pull_request"]["head"],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return DemoResult(
        gate_comment=gate["body"],
        pull=pull,
        check_runs=state["check_runs"],
        lanes=lanes,
        wall_clock_s=wall_clock,
        graph_log=graph_log,
        api_requests=len(stack.api_requests()),
        hosts=hosts if stack.lanebot_env.get("LANEBOT_BROKER_URL") else {},
    )


def _comment_with(stack: Stack, number: int, marker: str) -> dict[str, Any] | None:
    comments = stack.issue(REPOSITORY, number)["comments"]
    return next((c for c in comments if c["by_app"] and c["body"].startswith(marker)), None)


def _pull_for(stack: Stack, number: int) -> dict[str, Any] | None:
    stack.check_workers()
    pulls = stack.repository(REPOSITORY)["pulls"]
    closing = [pull for pull in pulls if f"Closes #{number}" in (pull["body"] or "")]
    blocked = "lanebot:blocked" in stack.issue(REPOSITORY, number)["labels"]
    if blocked and not closing:
        raise StepTimedOut(f"the run is blocked; {_seen(stack, number)}")
    return closing[0] if closing else None


def _seen(stack: Stack, number: int) -> str:
    issue = stack.issue(REPOSITORY, number)
    last = issue["comments"][-1]["body"][:600] if issue["comments"] else "no comments"
    return f"labels {issue['labels']}; last comment: {last}; lanebot's log: {stack.root / 'lanebot.log'}"


def _lanes_and_wall_clock(stack: Stack, number: int) -> tuple[list[Lane], float, dict[str, str]]:
    """The run's lanes, the wall-clock from /approve to the last merge, and each lane's host (that
    of its last attempt's session)."""
    engine = db.make_engine(stack.database_url)
    try:
        run = runs.active_run(engine, REPOSITORY, number)
        if run is None or run.id is None:
            raise StepTimedOut(f"lanebot's database has no run for #{number}")
        lanes = runs.lanes(engine, run.id)
        events = runs.run_events(engine, run.id)
        sessions = runs.sessions(engine, run.id)
    finally:
        engine.dispose()
    units = {lane.id: lane.unit_id for lane in lanes}
    hosts = {units[s.lane_id]: s.host or "?" for s in sessions if s.kind == "lane" and s.lane_id in units}
    approved = next((e.at for e in events if e.kind == "state" and '"to": "running"' in (e.data or "")), None)
    ends = [lane.merged_at for lane in lanes if lane.merged_at]
    start = approved or min(lane.started_at for lane in lanes if lane.started_at)
    return lanes, (max(ends) - start).total_seconds() if ends else 0.0, hosts


def _seconds(start: datetime | None, end: datetime | None) -> float:
    return (end - start).total_seconds() if start and end else 0.0


def report(result: DemoResult) -> str:
    """What the demo prints: the gate, the timeline, the PR, the history, the checks, the cost."""
    lines = ["", "=" * 78, "The gate comment lanebot posted", "=" * 78, result.gate_comment.strip(), ""]
    lines += [
        "=" * 78,
        "The lanes",
        "=" * 78,
        f"{'unit':<14}{'round':>6}{'start':>10}{'end':>10}{'duration':>10}{'merged':>10}"
        + (f"  {'host'}" if result.hosts else ""),
    ]
    started = [lane.started_at for lane in result.lanes if lane.started_at]
    origin = min(started) if started else None
    total = 0.0
    never = datetime.max.replace(tzinfo=origin.tzinfo if origin else None)
    for lane in sorted(result.lanes, key=lambda lane: lane.started_at or never):
        duration = _seconds(lane.started_at, lane.finished_at)
        total += duration
        lines.append(
            f"{lane.unit_id:<14}{lane.round:>6}{_seconds(origin, lane.started_at):>9.1f}s"
            f"{_seconds(origin, lane.finished_at):>9.1f}s{duration:>9.1f}s{_seconds(origin, lane.merged_at):>9.1f}s"
            + (f"  {result.hosts.get(lane.unit_id, '-')}" if result.hosts else "")
        )
    lines.append(
        f"Wall-clock from /approve to the last merge: {result.wall_clock_s:.1f} s; "
        f"the lanes' own time added up: {total:.1f} s."
    )
    lines += [
        "",
        "=" * 78,
        f"Pull request #{result.pull['number']}: {result.pull['title']}",
        "=" * 78,
        result.pull["body"].strip(),
        "",
    ]
    lines += [
        "=" * 78,
        f"git log --graph {result.pull['pull_request']['head']}",
        "=" * 78,
        result.graph_log.rstrip(),
        "",
    ]
    lines += ["=" * 78, "Check runs", "=" * 78]
    lines += [f"  {run['name']:<28} {run['status']:<12} {run['conclusion'] or '-'}" for run in result.check_runs]
    lines += ["", f"lanebot made {result.api_requests} REST API requests to the sandbox GitHub."]
    return "\n".join(lines)


def dashboard_lines(lanebot_url: str, login: str = MAINTAINER, repository: str = REPOSITORY) -> list[str]:
    """What `--keep` prints of the dashboard: its address, and who can sign in and how."""
    return [
        f"The dashboard: {lanebot_url}/dashboard",
        f"Sign in as `{login}` (a collaborator of {repository}): the sandbox's sign-in page asks only for a "
        f"login, so type {login}, press Sign in, then Authorize.",
    ]


def main(
    *,
    keep: bool,
    agent: str,
    root: Path | None,
    agent_binary: str | None = None,
    workers: int = 0,
    screenshots: Path | None = None,
) -> int:
    if screenshots is not None:
        from bot.demo.screenshots import BrowserMissing, chromium_path

        try:
            chromium_path()
        except BrowserMissing as error:
            print(f"lanebot demo --screenshots: {error}")
            return 2
    with contextlib.ExitStack() as services:
        broker_url = database_url = ""
        if workers:
            try:
                broker_url = services.enter_context(
                    claimed_redis(os.environ.get("LANEBOT_BROKER_URL", "").strip() or DEFAULT_BROKER_URL)
                )
                database_url = services.enter_context(
                    throwaway_postgres(os.environ.get("DATABASE_URL", "").strip() or DEFAULT_POSTGRES_URL)
                )
            except ServiceUnavailable as error:
                print(f"lanebot demo --workers: {error}")
                return 2
        return _run(
            keep=keep,
            agent=agent,
            root=root,
            agent_binary=agent_binary,
            workers=workers,
            broker_url=broker_url,
            database_url=database_url,
            screenshots=screenshots,
        )
    raise AssertionError("unreachable")  # mypy: ExitStack may swallow exceptions


def _run(
    *,
    keep: bool,
    agent: str,
    root: Path | None,
    agent_binary: str | None,
    workers: int,
    broker_url: str,
    database_url: str,
    screenshots: Path | None = None,
) -> int:
    folder = root or Path(tempfile.mkdtemp(prefix="lanebot-demo-"))
    try:
        stack, result = run_demo(
            folder,
            agent=agent,
            agent_binary=agent_binary,
            workers=workers,
            broker_url=broker_url,
            database_url=database_url,
            dashboard=keep or screenshots is not None,
        )
    except StepTimedOut as error:
        print(f"lanebot demo: {error}")
        logs = ", worker-*.log" if workers else ""
        print(f"Everything is under {folder} (lanebot.log, sandbox.log, sandbox-requests.log{logs}, deliveries/).")
        return 1
    try:
        print(report(result))
        if screenshots is not None:
            from bot.demo.screenshots import ScreenshotFailed, take_screenshots

            print(f"\nSigning in to the dashboard as {MAINTAINER} with headless Chromium ...")
            try:
                written = take_screenshots(stack.lanebot_url, MAINTAINER, screenshots)
            except ScreenshotFailed as error:
                print(f"lanebot demo --screenshots: {error}")
                print(f"Everything is under {folder} (lanebot.log, sandbox.log).")
                return 1
            for path in written:
                print(f"  wrote {path}")
        if keep:
            print(f"\nBoth servers keep running (--keep): sandbox {stack.sandbox_url}, lanebot {stack.lanebot_url}.")
            print("\n".join(dashboard_lines(stack.lanebot_url)))
            print(f"Their logs are under {folder}. Stop them with Ctrl-C.")
            sandbox = stack._sandbox
            assert sandbox is not None  # run_demo started it
            try:
                sandbox.wait()
            except KeyboardInterrupt:
                pass
    finally:
        stack.stop()
    return 0
