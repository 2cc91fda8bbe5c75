"""lanebot killed with SIGKILL in the middle of its lanes, in the middle of a merge, and right after
a merge round's push, then started again each time: the run still ends in one pull request, each
lane's agent ran once per attempt, an attempt lost to a crash did not use up a retry, and no lane
was merged twice.

The orchestration runs in a child process (tests/recovery_driver.py, the real modules); GitHub
is the sandbox, served over HTTP from a thread of this process (tests.sandbox_helpers), so its
state outlives each child.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from bot.core.names import integration_branch
from bot.edges.store import runs as store
from bot.edges.store.db import make_engine
from tests.app_helpers import private_key_pem
from tests.lanes_helpers import (
    INSTALLATION,
    ISSUE,
    OWNER,
    REPO,
    Scenario,
    approved_run,
    make_workflow_dir,
    run_git,
    unit,
)
from tests.process_helpers import kill_processes_under
from tests.sandbox_helpers import SandboxRepository, served_sandbox

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parents[1] / "recovery_driver.py"
WAIT_LIMIT_S = 60  # a hang guard, never a timing assertion


@pytest.fixture(autouse=True)
def no_orphans_left(tmp_path):
    """SIGKILL leaves the driver's agents orphaned (as it would in production, where recovery stops
    the ones it has pids for); whatever of this test's still runs afterwards is stopped here."""
    yield
    kill_processes_under(tmp_path)


def test_a_run_killed_in_lanes_in_a_merge_and_after_a_push_still_ends_in_one_pull_request(
    tmp_path, migrated_sqlite_file
):
    database = tmp_path / "lanebot.db"
    shutil.copyfile(migrated_sqlite_file, database)
    url = f"sqlite:///{database}"
    key_file = tmp_path / "app-key.pem"
    key_file.write_text(private_key_pem())
    (tmp_path / "agent").mkdir()
    never = tmp_path / "never-released"
    files = {
        "migration": "migrations/001.sql",
        "tui-rows": "app/tui/rows.py",
        "cli-flag": "app/cli.py",
        "api-endpoint": "app/api/status.py",
    }
    steps = {
        name: {"1": {"wait_for": [str(never)]}, "default": {"write": {path: f"{name}\n"}}}
        for name, path in files.items()
        if name != "api-endpoint"
    }
    steps["api-endpoint"] = {"default": {"write": {files["api-endpoint"]: "api\n"}}}
    scenario = Scenario(tmp_path / "agent", steps)
    host = {
        "build": {"agent": "command", "max_retries": 0, "timeout": "120s"},
        "integrate": {"agent": "recipe", "verify": "test -f app/api/status.py", "max_retries": 0},
        "review": {"enabled": False},
    }
    workflows = make_workflow_dir(tmp_path, host, scenario.argv())
    plan = [
        unit("migration", "^migrations/", "test -f migrations/001.sql"),
        unit("tui-rows", "^app/tui/", "test -f app/tui/rows.py"),
        unit("api-endpoint", "^app/api/", "test -f migrations/001.sql", needs=("migration",)),
        unit("cli-flag", r"^app/cli\.py$", "test -f app/cli.py"),
    ]
    engine = make_engine(url)
    run_id = approved_run(engine, plan)

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    (tmp_path / "project").mkdir()
    with served_sandbox(tmp_path) as server, contextlib.ExitStack() as cleanup:
        github = SandboxRepository.create(
            server, tmp_path / "project", f"{OWNER}/{REPO}", {"README.md": "# tasks\n"}, organization=True
        )
        cleanup.callback(github.close)
        assert github.installation_id == INSTALLATION
        assert github.open_issue("Status", "", login="maintainer", role="admin") == ISSUE

        def start(pause: str = "") -> subprocess.Popen[str]:
            # TMPDIR: what a killed child leaves in its temporary folder stays in this test's.
            env = {
                **os.environ,
                "LANEBOT_WORKFLOWS_DIR": str(workflows),
                "LANEBOT_TEST_PAUSE": pause,
                "LANEBOT_TEST_PAUSED_FILE": str(tmp_path / f"paused-{pause}"),
                "TMPDIR": str(temporary),
            }
            argv = [sys.executable, str(DRIVER), url, server.url, str(tmp_path / "work"), str(run_id), str(key_file)]
            return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # 1. Killed while the three first-round agents work.
        child = start()
        wait_for(lambda: {key for key, _, _ in scenario.runs()} == {"migration", "tui-rows", "cli-flag"}, child)
        kill(child)
        lost_agents = [pid for _, _, pid in scenario.runs()]

        # 2. Killed in the middle of the first-round merges (one merged locally, nothing pushed).
        child = start("merge")
        wait_for(lambda: (tmp_path / "paused-merge").exists(), child)
        kill(child)
        assert all(not _alive(pid) for pid in lost_agents)

        # 3. Killed right after the round's push, before the lanes were recorded as merged.
        child = start("pushed")
        wait_for(lambda: (tmp_path / "paused-pushed").exists(), child)
        kill(child)

        # 4. Left to finish.
        child = start()
        out, err = child.communicate(timeout=WAIT_LIMIT_S)
        assert child.returncode == 0, err
        assert out.strip() == "done"
        shown = github.readout()

    assert store.get_run(engine, run_id).state == "done"
    assert len(shown.pulls()) == 1
    assert shown.check_runs() and all(check["status"] == "completed" for check in shown.check_runs())
    started = [(key, int(attempt)) for key, attempt, _ in scenario.runs()]
    assert len(started) == len(set(started)), f"an attempt ran twice: {started}"
    for name in files:
        attempts = sorted(attempt for key, attempt in started if key == name)
        assert attempts == list(range(1, len(attempts) + 1)), (name, attempts)
        # A first-round lane lost its first attempt to the first kill (maybe a second one to a later kill).
        assert len(attempts) >= (1 if name == "api-endpoint" else 2), (name, attempts)
    history = run_git("log", "--format=%s", integration_branch(ISSUE), cwd=github.bare).splitlines()
    merges = Counter(subject for subject in history if subject.startswith("Merge lane"))
    assert merges == Counter({f"Merge lane '{name}' of #{ISSUE}": 1 for name in files})
    sessions = [s for s in store.sessions(engine, run_id) if s.kind == "lane"]
    lost = [s for s in sessions if s.status == "lost"]
    assert len(lost) == len(sessions) - len(files) >= 3
    assert not any(s.counts_as_retry for s in lost)  # max_retries is 0: a lost attempt must not count
    assert all(lane.attempts_used == 1 and lane.state == "merged" for lane in store.lanes(engine, run_id))
    assert any(event.kind == "merge_aborted" for event in store.run_events(engine, run_id))
    engine.dispose()


def wait_for(condition, child: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_LIMIT_S
    while not condition():
        if child.poll() is not None:
            raise AssertionError(f"the driver exited early ({child.returncode}): {child.stderr.read()}")
        if time.monotonic() > deadline:
            kill(child)
            raise AssertionError("the driver never got there")
        time.sleep(0.02)


def kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stderr.close()


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X")
