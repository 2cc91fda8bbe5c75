"""Helpers for the runner-side tests: git, a workflow folder with host settings, a scripted agent,
an approved run in the database, and a context to run it with. (GitHub itself, a repository and
its issue, is the sandbox's: tests.sandbox_helpers.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bot.core.workflow import deep_merge
from bot.edges.settings import Settings
from bot.edges.store import runs as store
from bot.edges.workflow_files import DEFAULT_WORKFLOW
from bot.runner import jailing
from bot.sandbox.state import Ids
from tests.app_helpers import private_key_pem

ISSUE = 1  # the sandbox numbers a repository's first issue 1
OWNER, REPO = "octo-org", "tasks"
INSTALLATION = next(Ids().installations)  # the installation a new sandbox makes first (for OWNER)
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "LC_ALL": "C",
    "GIT_AUTHOR_NAME": "Someone Else",
    "GIT_AUTHOR_EMAIL": "someone@example.com",
    "GIT_COMMITTER_NAME": "Someone Else",
    "GIT_COMMITTER_EMAIL": "someone@example.com",
}


def run_git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={"PATH": os.environ["PATH"], **GIT_ENV}, capture_output=True, text=True
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_remote(root: Path, files: dict[str, str]) -> Path:
    """A bare repository on disk whose `main` holds `files`: a remote for tests of git alone."""
    bare = root / "remote.git"
    work = root / "seed"
    run_git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), cwd=root)
    run_git("init", "--quiet", "--initial-branch=main", str(work), cwd=root)
    for name, content in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(content)
    run_git("add", "--all", cwd=work)
    run_git("commit", "--quiet", "-m", "The project before the issue", cwd=work)
    run_git("push", "--quiet", str(bare), "main", cwd=work)
    return bare


def first_parent_subjects(bare: Path, branch: str) -> list[str]:
    """The subjects of `branch`'s first-parent history, oldest first."""
    return run_git("log", "--first-parent", "--reverse", "--format=%s", branch, cwd=bare).splitlines()


def tree_paths(bare: Path, ref: str) -> set[str]:
    return set(run_git("ls-tree", "-r", "--name-only", ref, cwd=bare).splitlines())


def has_branch(bare: Path, branch: str) -> bool:
    return bool(run_git("branch", "--list", branch, cwd=bare))


def make_workflow_dir(root: Path, overrides: dict[str, Any], agent_argv: list[str] | None = None) -> Path:
    """A copy of the default workflow folder with the host's settings merged in."""
    folder = root / "workflows"
    shutil.copytree(DEFAULT_WORKFLOW.parent / "prompts", folder / "prompts")
    settings = yaml.safe_load(DEFAULT_WORKFLOW.read_text())
    host = dict(overrides)
    if agent_argv is not None:
        host = deep_merge(host, {"agents": {"command": {"argv": agent_argv}}})
    (folder / DEFAULT_WORKFLOW.name).write_text(yaml.safe_dump(deep_merge(settings, host)))
    return folder


def run_scripted_agent_plain(monkeypatch: Any = None) -> None:
    """Let the scripted `command` agent below run as a plain process, out of the agents' jail.

    It runs on the test's own Python and keeps its scenario, log and prompts outside its worktree,
    none of which a jail shows; the tests that use it are about the orchestration. Checks and
    verify stay jailed. What a jailed agent sees is tests/edges/test_agents_jailed.py's subject,
    and that every session asks for its jail is tests/runner/test_sessions.py's."""
    plain = jailing.PROCESSLESS_AGENTS | {"command"}
    if monkeypatch is None:  # a process of its own (tests/recovery_driver.py)
        jailing.PROCESSLESS_AGENTS = plain
    else:
        monkeypatch.setattr(jailing, "PROCESSLESS_AGENTS", plain)


AGENT_SCRIPT = r'''
"""A scripted agent: what it does is looked up in the scenario file by session and attempt."""
import json, os, pathlib, subprocess, sys, time

scenario = json.loads(pathlib.Path(sys.argv[1]).read_text())
prompt = sys.stdin.read()
session = os.environ.get("LANEBOT_SESSION", "lane")
key = os.environ.get("LANEBOT_UNIT", "") if session == "lane" else session
attempt = os.environ.get("LANEBOT_ATTEMPT", "")
with open(scenario["log"], "a") as log:
    log.write(f"{key} {attempt} {os.getpid()}\n")
prompts = pathlib.Path(scenario["prompts"])
prompts.mkdir(parents=True, exist_ok=True)
(prompts / f"{key}-{attempt or time.time_ns()}.md").write_text(prompt)
spec = scenario.get("steps", {}).get(key, {})
step = spec.get(attempt) or spec.get("default") or {}
for name in step.get("touch", []):
    pathlib.Path(name).write_text("")
for name in step.get("wait_for", []):
    while not pathlib.Path(name).exists():
        time.sleep(0.02)
for path, content in step.get("write", {}).items():
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).write_text(content)
for path in step.get("delete", []):
    pathlib.Path(path).unlink(missing_ok=True)
for path, target in step.get("symlink", {}).items():
    pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(path).unlink(missing_ok=True)
    pathlib.Path(path).symlink_to(target)
if step.get("git_add"):
    subprocess.run(["git", "add", "--", *step["git_add"]], check=True)
if step.get("git_commit"):
    subprocess.run(["git", "-c", "user.name=agent", "-c", "user.email=agent@example.com", "commit", "--quiet",
                    "-m", step["git_commit"]], check=True)
if step.get("spawn_sleeper"):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if step.get("sleep"):
    time.sleep(step["sleep"])
print(json.dumps({"result": step.get("say", f"{key} done")}))
sys.exit(step.get("exit", 0))
'''


@dataclass
class Scenario:
    """What the scripted agent does, written where it reads it."""

    root: Path
    steps: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.root / "scenario.json"

    @property
    def log(self) -> Path:
        return self.root / "agent.log"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts"

    def argv(self) -> list[str]:
        script = self.root / "agent.py"
        script.write_text(AGENT_SCRIPT)
        self.save()
        return [sys.executable, str(script), str(self.path)]

    def save(self) -> None:
        self.path.write_text(json.dumps({"log": str(self.log), "prompts": str(self.prompts), "steps": self.steps}))

    def runs(self) -> list[tuple[str, str, int]]:
        """(key, attempt, pid) for every session the agent was started for, in order."""
        if not self.log.exists():
            return []
        return [(k, a, int(p)) for k, a, p in (line.split(" ") for line in self.log.read_text().splitlines())]

    def prompt(self, key: str, attempt: int) -> str:
        return (self.prompts / f"{key}-{attempt}.md").read_text()


def make_settings(root: Path, database_url: str, api_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        app_id="4711",
        private_key=private_key_pem(),
        webhook_secret="secret",
        database_url=database_url,
        github_api_url=api_url,
        workdir=root / "work",
        max_lanes=8,
        max_runs_per_repo=2,
    )
    values.update(overrides)
    return Settings(**values)


@dataclass
class RunnerContext:
    """What the orchestrator reads from a handler's context."""

    engine: Any
    github: Any
    settings: Settings
    jobs: Any = None
    progress_interval_s: float = 0.5


def approved_run(engine: Any, units: list[dict[str, Any]], issue_number: int = ISSUE) -> int:
    """A run of `units` that a maintainer has just approved."""
    run = store.create_run(
        engine,
        installation_id=INSTALLATION,
        repository=f"{OWNER}/{REPO}",
        issue_number=issue_number,
        requested_by="maintainer",
    )
    units_jsonl = "".join(json.dumps(unit) + "\n" for unit in units)
    store.add_plan(engine, run.id, units_jsonl=units_jsonl, source="hand")
    assert store.transition(engine, run.id, "planning", "awaiting_approval")
    assert store.transition(engine, run.id, "awaiting_approval", "running", approved_revision=1)
    return run.id


def unit(
    unit_id: str,
    files: str,
    check: str,
    *,
    needs: tuple[str, ...] = (),
    brief: str = "Do the unit.",
    title: str | None = None,
) -> dict[str, Any]:
    return {
        "id": unit_id,
        "title": title or f"Unit {unit_id}",
        "needs": list(needs),
        "files": files,
        "check": check,
        "brief": brief,
    }


def recipe(path: str, content: str) -> str:
    return f"Write the file.\n\n```text path={path}\n{content}```\n"
