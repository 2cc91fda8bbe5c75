"""The budget end to end: a run whose agent sessions report a cost (a scripted agent speaking Claude
Code's stream-json, run by the `claude` adapter) stops starting sessions at `budget.max_cost_usd`,
says so on the issue once, keeps its branches and transcripts, and goes on after the cap is raised
in `.github/lanebot.yml` and `/retry`. Real git, the sandbox GitHub, the orchestrator as it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from bot.core.names import lane_branch
from bot.edges.github.client import GitHubApp
from bot.edges.store import runs as store
from bot.edges.store.db import make_engine
from bot.runner import jailing, orchestrator
from tests.lanes_helpers import (
    ISSUE,
    OWNER,
    REPO,
    RunnerContext,
    approved_run,
    has_branch,
    make_settings,
    make_workflow_dir,
    tree_paths,
    unit,
)
from tests.sandbox_helpers import SandboxRepository, recording_tokens, served_sandbox

pytestmark = pytest.mark.slow

WAIT_LIMIT_S = 60  # a hang guard, never a timing assertion
LANE_COST_USD = 0.3
UNITS = [unit(name, f"^{name}/", f"test -f {name}/done.txt") for name in ("alpha", "beta", "gamma")]

# What Claude Code prints in `-p --output-format stream-json`, cut to what the adapter reads: the
# scripted session writes the unit's file and reports tokens and a cost in its `result` event.
CLAUDE_LIKE_AGENT = r"""
import json, os, pathlib, sys
scenario = json.loads(pathlib.Path(SCENARIO).read_text())
sys.stdin.read()
unit = os.environ.get("LANEBOT_UNIT", "")
key = unit or os.environ.get("LANEBOT_SESSION", "")  # a lane's unit, else the session's kind
with open(scenario["log"], "a") as log:
    log.write(key + "\n")
if unit:
    pathlib.Path(unit).mkdir(exist_ok=True)
    pathlib.Path(unit, "done.txt").write_text("done\n")
print(json.dumps({"type": "system", "subtype": "init", "session_id": key}))
print(json.dumps({
    "type": "result", "subtype": "success", "is_error": False, "result": f"{key} done",
    "total_cost_usd": scenario["cost"], "usage": {"input_tokens": 1000, "output_tokens": 200},
}))
"""


@dataclass
class World:
    context: RunnerContext
    github: SandboxRepository
    log: Path
    root: Path

    async def drive(self, run_id: int) -> str:
        return await asyncio.wait_for(orchestrator.drive(self.context, run_id), WAIT_LIMIT_S)

    async def retry(self, run_id: int) -> str:
        return await asyncio.wait_for(orchestrator.retry(self.context, run_id), WAIT_LIMIT_S)

    def sessions_started(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []

    def comments(self, kind: str) -> list[str]:
        """The bodies of lanebot's comments of `kind` on the issue, as a reader sees their text."""
        return [unescape(c["body"]) for c in self.github.comments(ISSUE) if f"lanebot:{kind} " in c["body"]]

    def set_budget(self, budget: dict[str, float]) -> None:
        scratch = self.root / f"scratch-{len(list(self.root.glob('scratch-*')))}"
        self.github.commit({".github/lanebot.yml": json.dumps({"budget": budget})}, "Raise lanebot's budget", scratch)


def claude_like_agent(folder: Path) -> tuple[Path, Path]:
    """The scripted agent as an executable the claude adapter starts, and its log."""
    scenario, log, script = folder / "scenario.json", folder / "sessions.log", folder / "claude"
    scenario.write_text(json.dumps({"log": str(log), "cost": LANE_COST_USD}))
    script.write_text(f"#!{sys.executable}\nSCENARIO = {str(scenario)!r}\n{CLAUDE_LIKE_AGENT}")
    script.chmod(0o755)
    return script, log


@contextlib.asynccontextmanager
async def world(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    budget: dict[str, float],
    integrate: dict[str, Any] | None = None,
) -> AsyncIterator[World]:
    (tmp_path / "agent").mkdir()
    binary, log = claude_like_agent(tmp_path / "agent")
    # Out of the agents' jail, as the scripted agents of tests/runner/test_orchestrator.py: its
    # scenario lives outside the worktree. Checks and verify stay jailed.
    monkeypatch.setattr(jailing, "PROCESSLESS_AGENTS", jailing.PROCESSLESS_AGENTS | {"claude"})
    host = {
        # One lane at a time, so the spending is known when each lane is about to start.
        "build": {"agent": "claude", "max_lanes": 1, "max_retries": 0, "timeout": "60s"},
        "integrate": {"agent": "recipe", "verify": "true", "max_retries": 0, **(integrate or {})},
        "review": {"enabled": False},
        "agents": {"claude": {"binary": str(binary)}},
    }
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(make_workflow_dir(tmp_path, host)))
    engine = make_engine(sqlite_url)
    (tmp_path / "project").mkdir()
    files = {"README.md": "# project\n", ".github/lanebot.yml": json.dumps({"budget": budget})}
    try:
        with served_sandbox(tmp_path) as server:
            github = SandboxRepository.create(
                server, tmp_path / "project", f"{OWNER}/{REPO}", files, first_commit="Before", organization=True
            )
            with contextlib.closing(github):
                assert github.open_issue("Three parts", "Do them.", login="maintainer", role="admin") == ISSUE
                settings = make_settings(tmp_path, sqlite_url, server.url)
                async with recording_tokens() as (http, _), GitHubApp(settings, http) as app:
                    context = RunnerContext(engine=engine, github=app, settings=settings)
                    try:
                        yield World(context, github, log, tmp_path)
                    finally:
                        await orchestrator.shutdown(context)
    finally:
        engine.dispose()


@pytest.mark.anyio
async def test_a_run_at_its_cap_starts_no_lane_says_so_once_and_continues_after_the_cap_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
):
    # Two lanes cost $0.60, above the $0.50 cap: the third never starts while the cap holds.
    async with world(tmp_path, monkeypatch, sqlite_url, {"max_cost_usd": 0.5}) as w:
        run_id = approved_run(w.context.engine, UNITS)

        assert await w.drive(run_id) == "blocked"

        engine = w.context.engine
        assert w.sessions_started() == ["alpha", "beta"]
        lanes = {lane.unit_id: lane.state for lane in store.lanes(engine, run_id)}
        assert lanes == {"alpha": "merged", "beta": "merged", "gamma": "pending"}
        run = store.get_run(engine, run_id)
        assert "run spent $0.60 of $0.50" in run.error
        assert "Raise budget.max_cost_usd in .github/lanebot.yml, then /retry continues." in run.error
        # Nothing is thrown away: the lanes' branches are pushed and their transcripts kept.
        for name in ("alpha", "beta"):
            assert has_branch(w.github.bare, lane_branch(ISSUE, name))
            assert f"{name}/done.txt" in tree_paths(w.github.bare, lane_branch(ISSUE, name))
        sessions = store.sessions(engine, run_id)
        assert [s.cost_usd for s in sessions] == [LANE_COST_USD, LANE_COST_USD]
        assert all(os.path.getsize(s.transcript_path) > 0 for s in sessions)

        [said] = w.comments("budget")
        assert "**lanebot stopped at its budget:** run spent $0.60 of $0.50." in said
        assert "2,000 tokens in, 400 out, $0.60" in said
        assert "`budget.max_cost_usd`" in said and "then comment `/retry`" in said
        [progress] = w.comments("progress")
        assert "**Spent:** 2,000 tokens in, 400 out, $0.60 in all." in progress
        assert "the budget is reached: run spent $0.60 of $0.50" in progress

        # Driving the blocked run again (lanebot restarted, another reconcile) starts and says nothing new.
        assert await w.drive(run_id) == "blocked"
        assert len(w.comments("budget")) == 1 and w.sessions_started() == ["alpha", "beta"]

        # `/retry` with the cap as it was: the run is still over it, and says so once more.
        assert await w.retry(run_id) == "blocked"
        assert w.sessions_started() == ["alpha", "beta"]
        assert len(w.comments("budget")) == 2

        w.set_budget({"max_cost_usd": 5})
        assert await w.retry(run_id) == "done"

        assert w.sessions_started() == ["alpha", "beta", "gamma"]
        [pull] = w.github.pulls()
        assert "**Spent:** 3,000 tokens in, 600 out, $0.90 in all." in unescape(pull["body"])
        assert "| 1,000 tokens in, 200 out, $0.30 |" in unescape(pull["body"])


@pytest.mark.anyio
async def test_a_repository_at_its_days_cap_starts_no_lane_of_a_new_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
):
    async with world(tmp_path, monkeypatch, sqlite_url, {"daily_cost_usd": 1}) as w:
        engine = w.context.engine
        earlier = store.create_run(
            engine,
            installation_id=w.github.installation_id,
            repository=f"{OWNER}/{REPO}",
            issue_number=99,
            requested_by="maintainer",
        )
        spent = store.start_session(engine, run_id=earlier.id, kind="plan")
        store.finish_session(engine, spent.id, status="succeeded", cost_usd=1.25)
        run_id = approved_run(engine, UNITS)

        assert await w.drive(run_id) == "blocked"

        assert w.sessions_started() == []
        assert "repository spent $1.25 today of $1.00" in store.get_run(engine, run_id).error
        [said] = w.comments("budget")
        assert "`budget.daily_cost_usd`" in said and "or wait for the next UTC day" in said
        assert "0 tokens in, 0 out, no cost reported" in said  # this run's own sessions: none yet


@pytest.mark.anyio
async def test_a_failed_verify_at_the_cap_gets_no_repair_session_and_the_run_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
):
    # The lane ($0.30) and the integrate session ($0.30) reach the $0.50 cap; verify fails after them.
    integrate = {"agent": "claude", "verify": "false", "max_retries": 1}
    async with world(tmp_path, monkeypatch, sqlite_url, {"max_cost_usd": 0.5}, integrate) as w:
        run_id = approved_run(w.context.engine, UNITS[:1])

        assert await w.drive(run_id) == "blocked"

        assert w.sessions_started() == ["alpha", "integrate"]  # no "verify" repair session
        error = store.get_run(w.context.engine, run_id).error
        assert error.startswith("no verify repair session started: the budget is reached, run spent $0.60 of $0.50.")
        assert "Raise the cap in .github/lanebot.yml, then /retry." in error
