"""The runner side end to end, in process: real git, real agent subprocesses (the recipe adapter,
and a scripted `command` agent), and the sandbox GitHub served from a thread (tests.sandbox_helpers):
lanebot authenticates as the App, fetches and pushes over git's smart HTTP, and uses GitHub's REST
routes as it would on github.com.

Each test approves a plan in the database and drives the run with `bot.runner.orchestrator`, then
looks at what GitHub would show: branches and their history (in the sandbox's git store), check
runs, the progress comment, labels, the pull request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bot.core.diffstat import parse_numstat
from bot.core.lifecycle import InvalidTransition
from bot.core.names import integration_branch, lane_branch
from bot.edges.github.client import GitHubApp
from bot.edges.jail import INSTALL_HINT, JailProblem
from bot.edges.store import runs as store
from bot.edges.store.db import make_engine
from bot.runner import jailing, orchestrator
from tests.lanes_helpers import (
    INSTALLATION,
    ISSUE,
    OWNER,
    REPO,
    RunnerContext,
    Scenario,
    approved_run,
    first_parent_subjects,
    has_branch,
    make_settings,
    make_workflow_dir,
    recipe,
    run_git,
    run_scripted_agent_plain,
    tree_paths,
    unit,
)
from tests.sandbox_helpers import Readout, SandboxRepository, recording_tokens, served_sandbox

pytestmark = pytest.mark.slow

PROJECT = {
    "README.md": "# tasks\n",
    "app/__init__.py": "",
    "app/tui/__init__.py": "",
    "app/cli.py": "def main(): ...\n",
}
WAIT_LIMIT_S = 30  # a hang guard, never a timing assertion

WORKED_EXAMPLE = [
    unit(
        "migration",
        "^migrations/",
        "test -f migrations/001_status.sql",
        title="Add the status column",
        brief=recipe("migrations/001_status.sql", "ALTER TABLE tasks ADD COLUMN status TEXT;\n"),
    ),
    unit(
        "tui-rows",
        "^app/tui/",
        "test -f app/tui/rows.py",
        title="Show status in the TUI rows",
        brief=recipe("app/tui/rows.py", "def row(task): return f'{task.title} [{task.status}]'\n"),
    ),
    unit(
        "api-endpoint",
        "^app/api/",
        "test -f app/api/status.py && test -f migrations/001_status.sql",
        needs=("migration",),
        title="Expose status in the API",
        brief=recipe("app/api/status.py", "def status(task): return task.status\n"),
    ),
    unit(
        "cli-flag",
        r"^app/cli\.py$",
        "grep -q -- --status app/cli.py",
        title="Add --status to the CLI",
        brief=recipe("app/cli.py", "def main(): ...  # --status filters by status\n"),
    ),
]
VERIFY_ALL = "test -f migrations/001_status.sql && test -f app/api/status.py && test -f app/tui/rows.py"


@dataclass
class World:
    context: RunnerContext
    github: SandboxRepository
    scenario: Scenario
    tokens: list[str] = field(default_factory=list)  # every installation token lanebot was given

    @property
    def bare(self) -> Path:
        return self.github.bare

    async def drive(self, run_id: int) -> str:
        return await asyncio.wait_for(orchestrator.drive(self.context, run_id), WAIT_LIMIT_S)

    def lane(self, run_id: int, unit_id: str) -> Any:
        return store.get_lane(self.context.engine, run_id, unit_id)

    def run(self, run_id: int) -> Any:
        return store.get_run(self.context.engine, run_id)


@contextlib.asynccontextmanager
async def world(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_url: str,
    *,
    build: dict[str, Any],
    integrate: dict[str, Any] | None = None,
    steps: dict[str, Any] | None = None,
    files: dict[str, str] = PROJECT,
    pull_request: dict[str, Any] | None = None,
    agent_argv: list[str] | None = None,
) -> AsyncIterator[World]:
    """`agent_argv` replaces the scripted agent as the `command` agent; it then runs jailed."""
    (tmp_path / "agent").mkdir()
    if agent_argv is None:
        run_scripted_agent_plain(monkeypatch)
    scenario = Scenario(tmp_path / "agent", steps or {})
    host = {
        "build": {"max_retries": 1, "timeout": "60s", **build},
        "integrate": {"agent": "recipe", "verify": "true", "max_retries": 0, **(integrate or {})},
        "pull_request": pull_request or {},
    }
    argv = scenario.argv() if agent_argv is None else agent_argv
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(make_workflow_dir(tmp_path, host, argv)))
    engine = make_engine(sqlite_url)
    (tmp_path / "project").mkdir()
    try:
        with served_sandbox(tmp_path) as server:
            github = SandboxRepository.create(
                server,
                tmp_path / "project",
                f"{OWNER}/{REPO}",
                files,
                first_commit="The project before the issue",
                organization=True,
            )
            with contextlib.closing(github):
                assert github.installation_id == INSTALLATION, "approved_run records the sandbox's first installation"
                assert (
                    github.open_issue("Show task status", "Tasks need a status.", login="maintainer", role="admin")
                    == ISSUE
                )
                settings = make_settings(tmp_path, sqlite_url, server.url)
                async with recording_tokens() as (http, tokens), GitHubApp(settings, http) as app:
                    context = RunnerContext(engine=engine, github=app, settings=settings)
                    try:
                        yield World(context, github, scenario, tokens)
                    finally:
                        await orchestrator.shutdown(context)
    finally:
        engine.dispose()


async def eventually(condition: Any, what: str) -> None:
    """Wait for `condition()` (a hang guard: it fails only if it never holds)."""
    for _ in range(int(WAIT_LIMIT_S / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


# --------------------------------------------------------------------------- the happy path


@dataclass
class Finished:
    """What a finished run left: its state and rows, what GitHub showed, the git store, the workdir."""

    state: str
    run: Any
    lanes: dict[str, Any]
    github: Readout
    bare: Path
    workdir: Path
    sessions: list[Any]


@pytest.fixture(scope="module")
def worked_example(tmp_path_factory: pytest.TempPathFactory, migrated_sqlite_file: Path) -> Finished:
    """The worked example's graph (four units, one needs edge), driven once to its end."""
    root = tmp_path_factory.mktemp("worked-example")
    shutil.copyfile(migrated_sqlite_file, root / "lanebot.db")

    async def drive() -> Finished:
        with pytest.MonkeyPatch.context() as patch:
            async with world(
                root,
                patch,
                f"sqlite:///{root / 'lanebot.db'}",
                build={"agent": "recipe"},
                integrate={"verify": VERIFY_ALL},
            ) as w:
                run_id = approved_run(w.context.engine, WORKED_EXAMPLE)
                state = await w.drive(run_id)
                lanes = {lane.unit_id: lane for lane in store.lanes(w.context.engine, run_id)}
                return Finished(
                    state,
                    w.run(run_id),
                    lanes,
                    w.github.readout(),
                    w.bare,
                    Path(w.context.settings.workdir),
                    store.sessions(w.context.engine, run_id),
                )

    return asyncio.run(drive())


def test_the_worked_example_runs_to_one_pull_request_with_each_merge_in_order(worked_example):
    done = worked_example
    assert done.state == "done"
    assert first_parent_subjects(done.bare, integration_branch(ISSUE)) == [
        "The project before the issue",
        f"Merge lane 'migration' of #{ISSUE}",
        f"Merge lane 'tui-rows' of #{ISSUE}",
        f"Merge lane 'cli-flag' of #{ISSUE}",
        f"Merge lane 'api-endpoint' of #{ISSUE}",
    ]
    [pull] = done.github.pulls()
    branches = pull["pull_request"]
    assert (branches["head"], branches["base"], branches["draft"]) == (integration_branch(ISSUE), "main", True)
    assert pull["title"] == f"Show task status (#{ISSUE})"
    assert done.run.pr_number == pull["number"]
    for needle in (f"Closes #{ISSUE}", "```mermaid", lane_branch(ISSUE, "api-endpoint"), "/runs/", "Sessions:"):
        assert needle in pull["body"]
    # The integrator's own words, defused: its closing keyword closes nothing, lanebot's `Closes` line does.
    assert f"This change resolves\u200b #\u200b{ISSUE} in 4 units" in pull["body"]


def test_a_dependent_lane_holds_its_dependency_and_a_lane_never_holds_its_siblings(worked_example):
    done = worked_example
    api = tree_paths(done.bare, lane_branch(ISSUE, "api-endpoint"))
    assert {"migrations/001_status.sql", "app/api/status.py"} <= api
    tui = tree_paths(done.bare, lane_branch(ISSUE, "tui-rows"))
    assert "app/tui/rows.py" in tui
    assert not tui & {"migrations/001_status.sql", "app/api/status.py"}
    assert "--status" not in _show(done.bare, lane_branch(ISSUE, "tui-rows"), "app/cli.py")
    assert done.lanes["api-endpoint"].base_sha != done.lanes["migration"].base_sha
    assert done.lanes["tui-rows"].base_sha == done.lanes["migration"].base_sha == done.run.base_sha


def test_every_lane_reports_one_check_run_on_its_head_and_verify_reports_on_the_pr_head(worked_example):
    done = worked_example
    for spec in WORKED_EXAMPLE:
        head = _rev(done.bare, lane_branch(ISSUE, spec["id"]))
        assert done.lanes[spec["id"]].head_sha == head
        # Nothing on the lane's base commit: the one check run is its result, made completed.
        [check] = done.github.checks_named(f"lanebot / {spec['id']}")
        assert (check["head_sha"], check["status"], check["conclusion"]) == (head, "completed", "success")
        assert check["id"] == done.lanes[spec["id"]].check_run_id
        assert "Files changed (1)" in check["output"]["summary"]
        assert f"transcripts/{done.run.id}/{spec['id']}/attempt-1.jsonl" in check["output"]["summary"]
        assert check["external_id"] == f"lanebot run={done.run.id} unit={spec['id']}"
    [verify] = done.github.checks_named("lanebot / verify")
    assert verify["head_sha"] == _rev(done.bare, integration_branch(ISSUE))
    assert verify["conclusion"] == "success"
    assert (done.workdir / "transcripts" / str(done.run.id) / "migration" / "attempt-1.jsonl").is_file()


def test_each_lane_attempt_keeps_its_diff_stat_its_checks_output_and_when_its_check_began(worked_example):
    done = worked_example
    by_lane = {s.lane_id: s for s in done.sessions if s.kind == "lane"}
    for spec in WORKED_EXAMPLE:
        attempt = by_lane[done.lanes[spec["id"]].id]
        [change] = parse_numstat(attempt.diff_stat)
        replaced = spec["id"] == "cli-flag"  # its file was there before: one line out, one in
        assert f"path={change.path}" in spec["brief"]
        assert (change.added, change.deleted) == (1, 1 if replaced else 0)
        assert attempt.check_output == ""  # `test -f` prints nothing, and a passing check is kept too
        assert attempt.started_at <= attempt.check_started_at <= attempt.ended_at


def test_the_progress_comment_is_one_comment_edited_in_place_and_the_label_follows_the_run(worked_example):
    done = worked_example
    [comment] = progress_comments(done.github, done.run.id)
    assert f"run {done.run.id}: done" in comment["body"]
    assert "4 of 4 lanes merged" in comment["body"]
    assert comment["body"].count("- [x]") == 4
    assert done.run.progress_comment_id == comment["id"]
    assert done.github.labels(ISSUE) == ["lanebot:done"]


@pytest.mark.anyio
async def test_eager_starts_a_dependent_lane_as_soon_as_its_need_merged_without_its_slow_siblings(
    tmp_path, monkeypatch, sqlite_url
):
    api_started = tmp_path / "api-started"
    steps = {
        "migration": {"default": {"write": {"migrations/001_status.sql": "ALTER TABLE tasks ADD status;\n"}}},
        "tui-rows": {"default": {"wait_for": [str(api_started)], "write": {"app/tui/rows.py": "rows\n"}}},
        "api-endpoint": {"default": {"touch": [str(api_started)], "write": {"app/api/status.py": "api\n"}}},
        "cli-flag": {"default": {"write": {"app/cli.py": "# --status\n"}}},
    }
    plan = [{**spec, "check": "true"} for spec in WORKED_EXAMPLE]
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "schedule": "eager"}, steps=steps
    ) as w:
        run_id = approved_run(w.context.engine, plan)

        assert await w.drive(run_id) == "done"

        api = tree_paths(w.bare, lane_branch(ISSUE, "api-endpoint"))
        assert "migrations/001_status.sql" in api
        assert "app/tui/rows.py" not in api  # the slow sibling had not merged when it was cut
        merges = [s for s in first_parent_subjects(w.bare, integration_branch(ISSUE)) if s.startswith("Merge lane")]
        assert sorted(merges) == sorted(f"Merge lane '{spec['id']}' of #{ISSUE}" for spec in plan)


@pytest.mark.anyio
async def test_a_merge_onto_an_integration_branch_that_moved_on_the_remote_fetches_and_merges_onto_it(
    tmp_path, monkeypatch, sqlite_url
):
    # The first merge pushes the branch; before the second, someone else pushes a commit onto it.
    # The second merge skips the fetch (this process pushed last): its lease is refused, so it
    # fetches and merges onto their commit, and nothing is lost or merged twice.
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe", "schedule": "eager"}) as w:
        run_id = approved_run(w.context.engine, WORKED_EXAMPLE)
        branch = integration_branch(ISSUE)
        merge, merges = orchestrator.merge_lanes, []

        async def someone_pushes_between_merges(context, job):
            if len(merges) == 1:
                tree = run_git("rev-parse", f"{branch}^{{tree}}", cwd=w.bare).strip()
                theirs = run_git("commit-tree", tree, "-p", branch, "-m", "Someone else's commit", cwd=w.bare).strip()
                run_git("update-ref", f"refs/heads/{branch}", theirs, cwd=w.bare)
            merges.append(job.units)
            await merge(context, job)

        monkeypatch.setattr(orchestrator, "merge_lanes", someone_pushes_between_merges)

        assert await w.drive(run_id) == "done"

        assert len(merges) >= 2
        subjects = first_parent_subjects(w.bare, branch)
        assert "Someone else's commit" in subjects
        lane_merges = [s for s in subjects if s.startswith("Merge lane")]
        assert sorted(lane_merges) == sorted(f"Merge lane '{spec['id']}' of #{ISSUE}" for spec in WORKED_EXAMPLE)
        assert all(w.lane(run_id, spec["id"]).state == "merged" for spec in WORKED_EXAMPLE)


@pytest.mark.anyio
async def test_verify_failing_gets_a_repair_session_shown_the_failure_and_the_pr_takes_the_integrators_text(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {
        # It commits the PR file, which it was told not to: lanebot takes it out again.
        "integrate": {
            "default": {
                "write": {".lanebot/pr.md": "Add a task status\n\nEvery layer shows it now.\n"},
                "git_add": [".lanebot/pr.md"],
                "git_commit": "the PR text",
            }
        },
        "verify": {"default": {"write": {"verified.txt": "ok\n"}}},
    }
    async with world(
        tmp_path,
        monkeypatch,
        sqlite_url,
        build={"agent": "recipe"},
        steps=steps,
        integrate={"agent": "command", "verify": "echo verifying; test -f verified.txt", "max_retries": 1},
        pull_request={"title": "{{ proposed or issue.title }}"},
    ) as w:
        run_id = approved_run(w.context.engine, WORKED_EXAMPLE[:1])

        assert await w.drive(run_id) == "done"

        repair_prompt = next(p for p in w.scenario.prompts.iterdir() if p.name.startswith("verify-")).read_text()
        assert "verify exited with status 1" in repair_prompt and "verifying" in repair_prompt
        failed, passed = w.github.checks_named("lanebot / verify")
        assert (failed["conclusion"], passed["conclusion"]) == ("failure", "success")
        assert passed["head_sha"] == _rev(w.bare, integration_branch(ISSUE))
        [pull] = w.github.pulls()
        assert pull["title"] == "Add a task status"
        assert pull["body"].startswith("Every layer shows it now.")
        tree = tree_paths(w.bare, integration_branch(ISSUE))
        assert "verified.txt" in tree and not any(path.startswith(".lanebot/") for path in tree)
        assert first_parent_subjects(w.bare, integration_branch(ISSUE))[-1] == f"Repair the joined lanes of #{ISSUE}"


@pytest.mark.anyio
async def test_a_pr_file_that_links_to_a_host_file_is_refused_and_never_read_into_the_pull_request(
    tmp_path, monkeypatch, sqlite_url
):
    secret = tmp_path / "host-secret.pem"
    secret.write_text("-----BEGIN PRIVATE KEY----- lanebot's own\n")
    steps = {"integrate": {"default": {"symlink": {".lanebot/pr.md": str(secret)}}}}
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}, steps=steps, integrate={"agent": "command"}
    ) as w:
        run_id = approved_run(w.context.engine, WORKED_EXAMPLE[:1])

        assert await w.drive(run_id) == "done"

        [pull] = w.github.pulls()
        assert "PRIVATE KEY" not in pull["title"] + pull["body"]
        assert "&#96;.lanebot/pr.md&#96; is a symlink; lanebot reads only regular files there" in pull["body"]
        assert secret.read_text().startswith("-----BEGIN PRIVATE KEY-----")
        tree = tree_paths(w.bare, integration_branch(ISSUE))
        assert not any(path.startswith(".lanebot/") for path in tree)


@pytest.mark.anyio
async def test_verify_failing_after_its_repairs_blocks_the_run_without_a_pull_request(
    tmp_path, monkeypatch, sqlite_url
):
    async with world(
        tmp_path,
        monkeypatch,
        sqlite_url,
        build={"agent": "recipe"},
        integrate={"verify": "echo the suite is red; exit 3"},
    ) as w:
        run_id = approved_run(w.context.engine, WORKED_EXAMPLE[:1])

        assert await w.drive(run_id) == "blocked"

        assert "verify failed after 0 repair sessions: verify exited with status 3" in w.run(run_id).error
        assert w.github.pulls() == []
        [verify] = w.github.checks_named("lanebot / verify")
        assert verify["conclusion"] == "failure" and "the suite is red" in verify["output"]["summary"]
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "the suite is red" in comment["body"]


# --------------------------------------------------------------------------- failures


@pytest.mark.anyio
async def test_a_lane_that_edits_outside_its_files_fails_and_is_retried_with_the_paths_in_its_prompt(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {
        "cli-flag": {
            "1": {"write": {"app/cli.py": "# --status\n", "README.md": "# tasks, now with status\n"}},
            "2": {"write": {"README.md": "# tasks\n"}},
        }
    }
    plan = [unit("cli-flag", r"^app/cli\.py$", "grep -q -- --status app/cli.py")]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command"}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)

        assert await w.drive(run_id) == "done"

        assert [(key, attempt) for key, attempt, _ in w.scenario.runs()] == [("cli-flag", "1"), ("cli-flag", "2")]
        retry_prompt = w.scenario.prompt("cli-flag", 2)
        assert "do not match your expression" in retry_prompt
        assert "README.md" in retry_prompt.split("## Your previous attempt failed")[1]
        failed_check = [c for c in w.github.checks_named("lanebot / cli-flag") if c["conclusion"] == "failure"]
        assert "README.md" in failed_check[0]["output"]["summary"]
        assert tree_paths(w.bare, integration_branch(ISSUE)) >= {"app/cli.py", "README.md"}
        assert _show(w.bare, integration_branch(ISSUE), "README.md") == "# tasks"


@pytest.mark.anyio
async def test_lanebot_scratch_and_workflow_files_are_refused_unless_the_unit_names_them(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {"wide": {"default": {"write": {".lanebot/notes.md": "scratch", "src/x.py": "x = 1\n"}}}}
    plan = [unit("wide", ".*", "true")]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 0}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)

        assert await w.drive(run_id) == "blocked"

        assert "outside its files" in w.run(run_id).error and ".lanebot/notes.md" in w.run(run_id).error


SETUP = """
if [ -f "$LANEBOT_CACHE/deps" ]; then echo "$LANEBOT_UNIT reused" >> "$LANEBOT_CACHE/setups"
else echo "installed-$(cat deps.lock)" > "$LANEBOT_CACHE/deps"; echo "$LANEBOT_UNIT filled" >> "$LANEBOT_CACHE/setups"; fi
cp "$LANEBOT_CACHE/deps" .lane-deps
echo "$LANEBOT_PORT_BASE $LANEBOT_PORT_COUNT" > .lane-ports
"""
# The check sees what set-up left, its ports, and the cache, which it may read and not write.
SETUP_CHECK = (
    'test "$(cat .lane-deps)" = installed-v1 && test "$(cat .lane-ports)" = "$LANEBOT_PORT_BASE 5"'
    ' && test -f "$LANEBOT_CACHE/deps" && ! touch "$LANEBOT_CACHE/written-by-a-check" 2>/dev/null'
)


@pytest.mark.anyio
async def test_set_up_runs_in_each_new_worktree_fills_the_cache_once_and_tear_down_runs_after(
    tmp_path, monkeypatch, sqlite_url
):
    files = {**PROJECT, ".gitignore": ".lane-*\n", "deps.lock": "v1\n"}
    build = {
        "agent": "recipe",
        "schedule": "barrier",
        "setup": SETUP,
        "teardown": 'echo "$LANEBOT_UNIT" >> "$LANEBOT_CACHE/teardowns"',
        "cache_key": ["deps.lock"],
        "ports": 5,
    }
    plan = [
        unit("one", "^one/", SETUP_CHECK, brief=recipe("one/a.txt", "a\n")),
        unit("two", "^two/", SETUP_CHECK, needs=("one",), brief=recipe("two/b.txt", "b\n")),
    ]
    async with world(tmp_path, monkeypatch, sqlite_url, build=build, files=files) as w:
        run_id = approved_run(w.context.engine, plan)

        assert await w.drive(run_id) == "done", w.run(run_id).error

        [cache] = [path for path in (tmp_path / "work" / "cache" / OWNER / REPO).iterdir() if path.is_dir()]
        assert (cache / "setups").read_text() == "one filled\ntwo reused\n"
        assert (cache / "teardowns").read_text() == "one\ntwo\n"
        assert not (cache / "written-by-a-check").exists()
        assert tree_paths(w.bare, integration_branch(ISSUE)) >= {"one/a.txt", "two/b.txt"}
        assert not any(path.startswith(".lane-") for path in tree_paths(w.bare, integration_branch(ISSUE)))


@pytest.mark.anyio
async def test_a_failing_set_up_fails_its_lane_at_once_without_an_agent_naming_the_script_and_its_output(
    tmp_path, monkeypatch, sqlite_url
):
    build = {"agent": "command", "max_retries": 2, "setup": "echo cannot reach the registry >&2; exit 7"}
    async with world(tmp_path, monkeypatch, sqlite_url, build=build) as w:
        run_id = approved_run(w.context.engine, [unit("api", "^app/api/", "true")])

        assert await w.drive(run_id) == "blocked"

        assert w.scenario.runs() == []  # no agent session: a retry could not mend the repository's set-up
        assert w.lane(run_id, "api").state == "failed"
        error = w.run(run_id).error
        assert "its set-up (build.setup) failed: build.setup exited with status 7" in error
        assert "`/retry api`" in error
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "cannot reach the registry" in comment["body"]


@pytest.mark.anyio
async def test_a_failing_check_retries_then_blocks_and_retry_resumes_to_a_pull_request(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {"api": {"default": {"write": {"app/api/status.py": "broken = True\n"}}}}
    plan = [
        unit(
            "api",
            "^app/api/",
            "echo checking the api; test ! -e app/api/broken-marker && grep -q fixed app/api/status.py",
        )
    ]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 1}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)

        assert await w.drive(run_id) == "blocked"

        assert [attempt for _, attempt, _ in w.scenario.runs()] == ["1", "2"]
        assert w.lane(run_id, "api").state == "failed"
        assert "lane 'api' failed: its check exited with status 1" in w.run(run_id).error
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "Blocked" in comment["body"] and "`/retry api`" in comment["body"]
        assert "checking the api" in comment["body"]
        assert w.github.labels(ISSUE) == ["lanebot:blocked"]
        assert w.github.pulls() == []

        w.scenario.steps["api"]["3"] = {"write": {"app/api/status.py": "fixed = True\n"}}
        w.scenario.save()
        assert await asyncio.wait_for(orchestrator.retry(w.context, run_id, "api"), WAIT_LIMIT_S) == "done"

        third_prompt = w.scenario.prompt("api", 3)
        assert "its check exited with status 1" in third_prompt and "checking the api" in third_prompt
        assert len(w.github.pulls()) == 1
        assert w.github.labels(ISSUE) == ["lanebot:done"]


@pytest.mark.anyio
async def test_without_a_working_jail_no_lane_starts_and_the_run_blocks_saying_how_to_install_it(
    tmp_path, monkeypatch, sqlite_url
):
    # What the probe says on a host without bubblewrap (the probe itself is tested in tests/edges/test_jail.py).
    missing = JailProblem("bubblewrap is not installed (no executable /usr/bin/bwrap)", INSTALL_HINT)
    monkeypatch.setattr(jailing, "_probed", [missing])
    steps = {"api": {"default": {"write": {"app/api/status.py": "fixed = True\n"}}}}
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "max_retries": 1}, steps=steps) as w:
        run_id = approved_run(w.context.engine, [unit("api", "^app/api/", "true")])

        assert await w.drive(run_id) == "blocked"

        assert w.scenario.runs() == []  # no agent session was spent on work that could not be checked
        error = w.run(run_id).error
        assert "bubblewrap is not installed" in error and "apt-get install bubblewrap" in error
        assert "LANEBOT_UNJAILED=1" in error
        assert w.github.pulls() == []


@pytest.mark.anyio
async def test_the_lane_and_integrate_agents_each_run_in_a_jail_of_their_own(tmp_path, monkeypatch, sqlite_url, bwrap):
    monkeypatch.setattr(jailing, "_probed", [])
    outside = tmp_path / "agent"  # the test's own folder, beside lanebot's workdir
    script = 'echo "$HOME $(test -e "$0" && echo sees-outside || echo blind)" > "jail-${LANEBOT_SESSION:-lane}.txt"'
    async with world(
        tmp_path,
        monkeypatch,
        sqlite_url,
        build={"agent": "command", "max_retries": 0},
        integrate={"agent": "command"},
        agent_argv=["sh", "-c", script, str(outside)],
    ) as w:
        run_id = approved_run(w.context.engine, [unit("api", r"^jail-lane\.txt$", "test -s jail-lane.txt")])

        assert await w.drive(run_id) == "done", w.run(run_id).error

        branch = integration_branch(ISSUE)
        scratch = Path(w.context.settings.workdir).absolute() / "scratch" / str(run_id) / "jail"
        lane = run_git("show", f"{branch}:jail-lane.txt", cwd=w.bare).split()
        integrate = run_git("show", f"{branch}:jail-integrate.txt", cwd=w.bare).split()
        assert lane == [str(scratch / "api-attempt-1-agent" / "home"), "blind"]
        assert integrate[1] == "blind" and Path(integrate[0]).parent.parent == scratch
        assert Path(integrate[0]).parent.name.startswith("_integrate-integrate-")


@pytest.mark.anyio
async def test_with_the_opt_out_commands_run_unjailed_and_the_log_says_so(monkeypatch, caplog):
    monkeypatch.setattr(jailing, "_probed", [JailProblem("bubblewrap is not installed", INSTALL_HINT)])
    monkeypatch.setattr(jailing, "_warned", [])
    assert await jailing.jail_problem(type("S", (), {"unjailed": True})()) is None
    assert await jailing.jail_problem(type("S", (), {"unjailed": True})()) is None
    warnings = [r for r in caplog.records if "WITHOUT a jail" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING


@pytest.mark.anyio
async def test_retry_refuses_a_run_that_is_not_blocked_and_a_lane_that_did_not_fail(tmp_path, monkeypatch, sqlite_url):
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        run_id = approved_run(w.context.engine, WORKED_EXAMPLE[:1])
        with pytest.raises(InvalidTransition, match="cannot retry a run that is running"):
            await orchestrator.retry(w.context, run_id, None)
        store.transition(w.context.engine, run_id, "running", "blocked")
        store.create_lanes(w.context.engine, run_id, [["migration"]])
        with pytest.raises(ValueError, match="lane 'migration' is pending, not failed; failed lanes: none"):
            await orchestrator.retry(w.context, run_id, "migration")
        with pytest.raises(ValueError, match="no lane 'nope'"):
            await orchestrator.retry(w.context, run_id, "nope")


# --------------------------------------------------------------------------- conflicts

CONFLICTING = [
    unit("left", r"^(left|shared)\.txt$", "test -f shared.txt", brief=recipe("shared.txt", "left\n")),
    unit("right", r"^(right|shared)\.txt$", "test -f shared.txt", brief=recipe("shared.txt", "right\n")),
]


@pytest.mark.anyio
async def test_a_conflict_blocks_the_run_naming_the_paths_and_earlier_merges_stay(tmp_path, monkeypatch, sqlite_url):
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "recipe"}) as w:
        run_id = approved_run(w.context.engine, CONFLICTING)

        assert await w.drive(run_id) == "blocked"

        assert w.lane(run_id, "left").state == "merged"
        assert w.lane(run_id, "right").state == "failed"
        assert "conflicted in shared.txt" in w.run(run_id).error
        assert first_parent_subjects(w.bare, integration_branch(ISSUE))[-1] == f"Merge lane 'left' of #{ISSUE}"
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "shared.txt" in comment["body"]


SIDES = {
    "left": {"default": {"write": {"shared.txt": "left\n"}}},
    "right": {"default": {"write": {"shared.txt": "right\n"}}},
}


@pytest.mark.anyio
async def test_with_on_conflict_agent_a_resolver_merges_what_both_lanes_meant(tmp_path, monkeypatch, sqlite_url):
    steps = {**SIDES, "resolve": {"default": {"write": {"shared.txt": "left\nright\n"}, "git_add": ["shared.txt"]}}}
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "on_conflict": "agent"}, steps=steps
    ) as w:
        run_id = approved_run(w.context.engine, CONFLICTING)

        assert await w.drive(run_id) == "done"

        assert _show(w.bare, integration_branch(ISSUE), "shared.txt") == "left\nright"
        assert first_parent_subjects(w.bare, integration_branch(ISSUE))[-1] == f"Merge lane 'right' of #{ISSUE}"
        [resolve_prompt] = [p for p in w.scenario.prompts.iterdir() if p.name.startswith("resolve-")]
        assert "shared.txt" in resolve_prompt.read_text() and "`left`" in resolve_prompt.read_text()
        [resolver] = [s for s in store.sessions(w.context.engine, run_id) if s.kind == "resolve"]
        assert resolver.status == "succeeded"


JAILED_SIDES = """case "${LANEBOT_SESSION:-lane}-$LANEBOT_UNIT" in
  lane-left) echo left > shared.txt ;;
  lane-right) echo right > shared.txt ;;
  resolve-*) printf 'left\\nright\\n' > shared.txt
    git add shared.txt 2> /dev/null && echo "git add worked" || echo "git add refused" ;;
esac"""


@pytest.mark.anyio
async def test_a_jailed_resolver_that_cannot_stage_has_its_resolution_staged_by_lanebot(
    tmp_path, monkeypatch, sqlite_url, bwrap
):
    monkeypatch.setattr(jailing, "_probed", [])
    build = {"agent": "command", "on_conflict": "agent"}
    async with world(tmp_path, monkeypatch, sqlite_url, build=build, agent_argv=["sh", "-c", JAILED_SIDES]) as w:
        run_id = approved_run(w.context.engine, CONFLICTING)

        assert await w.drive(run_id) == "done", w.run(run_id).error

        assert _show(w.bare, integration_branch(ISSUE), "shared.txt") == "left\nright"
        [resolver] = [s for s in store.sessions(w.context.engine, run_id) if s.kind == "resolve"]
        assert resolver.status == "succeeded"
        assert "git add refused" in Path(resolver.transcript_path).read_text()  # the mirror is read-only in its jail


@pytest.mark.anyio
async def test_a_resolver_that_leaves_a_conflict_marker_in_a_staged_file_is_refused(tmp_path, monkeypatch, sqlite_url):
    marked = "<<<<<<< HEAD\nleft\n=======\nright\n>>>>>>> lane\n"
    steps = {**SIDES, "resolve": {"default": {"write": {"shared.txt": marked}, "git_add": ["shared.txt"]}}}
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "on_conflict": "agent"}, steps=steps
    ) as w:
        run_id = approved_run(w.context.engine, CONFLICTING)

        assert await w.drive(run_id) == "blocked"

        assert "the resolver left conflict markers in shared.txt" in w.run(run_id).error
        assert first_parent_subjects(w.bare, integration_branch(ISSUE))[-1] == f"Merge lane 'left' of #{ISSUE}"


# --------------------------------------------------------------------------- cancel and secrets


@pytest.mark.anyio
async def test_cancel_stops_the_agents_process_groups_and_keeps_branches_and_transcripts(
    tmp_path, monkeypatch, sqlite_url
):
    steps = {
        "slow": {"default": {"spawn_sleeper": True, "sleep": 600}},
        "quick": {"default": {"write": {"quick.txt": "done\n"}}},
    }
    plan = [unit("quick", r"^quick\.txt$", "true"), unit("slow", r"^slow\.txt$", "true")]
    async with world(
        tmp_path, monkeypatch, sqlite_url, build={"agent": "command", "schedule": "eager"}, steps=steps
    ) as w:
        run_id = approved_run(w.context.engine, plan)
        driving = asyncio.ensure_future(w.drive(run_id))
        await eventually(lambda: any(key == "slow" for key, _, _ in w.scenario.runs()), "the slow agent started")
        await eventually(lambda: w.lane(run_id, "quick").state == "merged", "the quick lane merged")
        [(_, _, pid)] = [run for run in w.scenario.runs() if run[0] == "slow"]

        assert await orchestrator.cancel(w.context, run_id) == "cancelled"

        assert await asyncio.wait_for(driving, WAIT_LIMIT_S) == "cancelled"
        assert not _group_alive(pid)
        assert w.run(run_id).state == "cancelled"
        assert w.lane(run_id, "slow").state == "failed"
        sessions = store.sessions(w.context.engine, run_id)
        assert [s.status for s in sessions if s.lane_id == w.lane(run_id, "slow").id] == ["cancelled"]
        assert has_branch(w.bare, integration_branch(ISSUE)) and has_branch(w.bare, lane_branch(ISSUE, "quick"))
        assert (Path(w.context.settings.workdir) / "transcripts" / str(run_id) / "slow" / "attempt-1.jsonl").is_file()
        assert w.github.labels(ISSUE) == []
        [comment] = progress_comments(w.github.readout(), run_id)
        assert f"run {run_id}: cancelled" in comment["body"]
        [slow_check] = w.github.checks_named("lanebot / slow")
        assert (slow_check["status"], slow_check["conclusion"]) == ("completed", "cancelled")


@pytest.mark.anyio
async def test_the_token_never_reaches_a_log_record_an_argv_or_an_agent(tmp_path, monkeypatch, sqlite_url, caplog):
    caplog.set_level(logging.DEBUG)
    seen: list[tuple[tuple[str, ...], dict[str, str] | None]] = []
    real_exec = asyncio.create_subprocess_exec

    async def recording_exec(*argv: Any, **kwargs: Any) -> Any:
        seen.append((tuple(map(str, argv)), kwargs.get("env")))
        return await real_exec(*argv, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", recording_exec)
    steps = {"cli-flag": {"default": {"write": {"app/cli.py": "# --status\n"}}}}
    plan = [unit("cli-flag", r"^app/cli\.py$", "env; grep -q -- --status app/cli.py")]
    async with world(tmp_path, monkeypatch, sqlite_url, build={"agent": "command"}, steps=steps) as w:
        run_id = approved_run(w.context.engine, plan)
        assert await w.drive(run_id) == "done"

        assert any(argv[0] == "git" for argv, _ in seen) and any("agent.py" in " ".join(argv) for argv, _ in seen)
        assert w.tokens, "lanebot was given an installation token"
        for token in w.tokens:
            for argv, env in seen:
                assert not any(token in arg for arg in argv)
                if argv[0] != "git":  # agents and checks get no credentials at all
                    assert env is not None and not any(token in value for value in env.values())
            for record in caplog.records:
                assert token not in record.getMessage()
            for path in Path(w.context.settings.workdir).rglob("*"):
                if path.is_file():
                    assert token.encode() not in path.read_bytes(), path
            assert not any(token in path for _, path, _ in w.github.sandbox.served)


# --------------------------------------------------------------------------- helpers


def progress_comments(github: Readout, run_id: int) -> list[dict[str, Any]]:
    """The issue's comments holding the run's progress marker."""
    marker = f"<!-- lanebot:progress run={run_id} -->"
    return [comment for comment in github.comments(ISSUE) if marker in comment["body"]]


def _rev(bare: Path, ref: str) -> str:
    return run_git("rev-parse", ref, cwd=bare)


def _show(bare: Path, ref: str, path: str) -> str:
    return run_git("show", f"{ref}:{path}", cwd=bare)


def _group_alive(group: int) -> bool:
    """Whether a process of the group still runs (a zombie waiting for init to reap it does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[2] == str(group) and fields[0] not in ("Z", "X"):
                return True
    return False
