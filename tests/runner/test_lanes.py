"""The lane's rules that need no run: branch names, ownership, the failure record, running a
command from a file, the check-run summaries and the pull request's text."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path

import pytest

from bot.core.checks import SUMMARY_LIMIT, external_id, lane_check_name, parse_external_id
from bot.core.graph import Graph, Unit
from bot.core.names import integration_branch, lane_branch, merge_message, parse_merge_message
from bot.edges.jail import JailPolicy
from bot.render.checks import lane_report, verify_report
from bot.render.pull_request import LaneSummary, pr_body, split_pr_text
from bot.runner.lanes import FailureKind, LaneFailure, keep_tail, ownership_violations, run_script
from tests.process_helpers import gone, processes_with, running


def make_unit(files: str, unit_id: str = "api") -> Unit:
    return Unit(id=unit_id, title="The API", needs=(), files=files, check="true", brief="Do it.")


# --------------------------------------------------------------------------- names


def test_the_integration_branch_and_lane_branches_can_live_in_one_repository():
    assert integration_branch(42) == "lanebot/42"
    assert lane_branch(42, "store-schema") == "lanebot-lanes/42/store-schema"
    # git stores refs as paths: `lanebot/42` (a file) cannot have children such as `lanebot/42/x`.
    assert not lane_branch(42, "x").startswith(integration_branch(42) + "/")


def test_the_merge_message_is_a_contract_that_parses_back():
    message = merge_message("api-endpoint", 42)
    assert message == "Merge lane 'api-endpoint' of #42"
    assert parse_merge_message(message) == ("api-endpoint", 42)
    assert parse_merge_message("Merge branch 'main'") is None


# --------------------------------------------------------------------------- ownership


def test_every_changed_path_must_match_the_units_files():
    unit = make_unit(r"^app/api/")
    assert ownership_violations(unit, ["app/api/status.py", "README.md", "app/cli.py"]) == ["README.md", "app/cli.py"]


def test_lanebot_scratch_and_workflows_are_refused_even_when_a_wildcard_matches_them():
    unit = make_unit(".*")
    paths = [".lanebot/notes.md", ".github/workflows/ci.yml", "src/x.py", ".github/CODEOWNERS"]
    assert ownership_violations(unit, paths) == [".lanebot/notes.md", ".github/workflows/ci.yml"]


def test_a_unit_whose_files_name_the_workflows_folder_may_change_it():
    unit = make_unit(r"^\.github/workflows/ci\.yml$")
    assert ownership_violations(unit, [".github/workflows/ci.yml"]) == []
    assert ownership_violations(unit, [".github/workflows/release.yml"]) == [".github/workflows/release.yml"]


# --------------------------------------------------------------------------- failures


def test_a_lane_failure_round_trips_through_its_row():
    failure = LaneFailure(FailureKind.OWNERSHIP, "changed paths outside its files", 2, output="x\n", paths=("a", "b"))
    assert LaneFailure.from_text(failure.to_text()) == failure
    assert failure.prompt() == {
        "reason": "changed paths outside its files",
        "attempt": 2,
        "paths": ["a", "b"],
        "output": "x\n",
    }


def test_a_failure_written_as_plain_text_is_read_as_an_error_with_its_first_line_as_reason():
    failure = LaneFailure.from_text("the disk is full\nmore detail")
    assert (failure.kind, failure.reason, failure.output) == (FailureKind.ERROR, "the disk is full", "more detail")


def test_a_failure_keeps_only_the_last_200_lines_of_output():
    output = "".join(f"line {n}\n" for n in range(1, 501))
    kept = LaneFailure(FailureKind.CHECK, "its check failed", output=output).output
    assert kept.splitlines()[0] == "line 301" and kept.splitlines()[-1] == "line 500"
    assert keep_tail("a\nb\nc\n", lines=2) == "b\nc\n"


def test_a_failure_describes_itself_for_people_with_reason_paths_and_output():
    text = LaneFailure(FailureKind.OWNERSHIP, "outside", 3, output="boom", paths=("README.md",)).describe()
    assert text == "attempt 3: outside\n  README.md\n\nboom"


# --------------------------------------------------------------------------- run_script


@pytest.mark.anyio
async def test_a_command_runs_from_its_file_so_its_text_is_never_spliced_into_a_command_line(tmp_path):
    command = "echo \"$1\" 'quoted; rm -rf /' && exit 4"
    result = await run_script(command, script=tmp_path / "s" / "check.sh", cwd=tmp_path, timeout=30, env={}, jail=None)
    assert (result.exit_status, result.ok) == (4, False)
    assert result.output == " quoted; rm -rf /\n"
    assert (tmp_path / "s" / "check.sh").read_text() == command + "\n"
    assert result.describe("its check") == "its check exited with status 4"


@pytest.mark.anyio
async def test_a_command_past_its_timeout_is_stopped_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    command = f"sh -c 'echo $$ > {pid_file}; exec sleep 60' & wait"
    result = await run_script(command, script=tmp_path / "slow.sh", cwd=tmp_path, timeout=0.3, env={}, jail=None)
    assert result.timed_out and result.exit_status is None
    assert result.describe("verify") == "verify did not finish within 0.3 s and was stopped"
    assert not running(int(pid_file.read_text()))


@pytest.mark.anyio
async def test_a_cancelled_command_leaves_no_process_behind(tmp_path):
    pid_file = tmp_path / "child.pid"
    task = asyncio.ensure_future(
        run_script(
            f"echo $$ > {pid_file}; exec sleep 60",
            script=tmp_path / "c.sh",
            cwd=tmp_path,
            timeout=60,
            env={},
            jail=None,
        )
    )
    while not pid_file.exists() or not pid_file.read_text().strip():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not running(int(pid_file.read_text()))


def _jail(root: Path) -> JailPolicy:
    policy = JailPolicy(
        worktree=root / "work" / "worktrees" / "run-1" / "api",
        home=root / "work" / "scratch" / "1" / "jail" / "home",
        tmp=root / "work" / "scratch" / "1" / "jail" / "tmp",
    )
    for folder in (policy.worktree, policy.home, policy.tmp):
        folder.mkdir(parents=True)
    return policy


@pytest.mark.anyio
async def test_a_check_through_run_script_runs_in_the_jail(bwrap, tmp_path, monkeypatch):
    monkeypatch.setenv("WEBHOOK_SECRET", "s3cret-of-lanebot")
    jail = _jail(tmp_path)
    (tmp_path / "key.pem").write_text("KEY", encoding="utf-8")
    (tmp_path / "work" / "lanebot.db").write_text("DB", encoding="utf-8")
    ours = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    marker = f"3600.{uuid.uuid4().int % 10**9}"
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        command = (
            f"test -e {tmp_path}/key.pem && echo LEAK key; test -e {tmp_path}/work/lanebot.db && echo LEAK db\n"
            'env; cat /proc/1/environ /proc/$PPID/environ | tr "\\0" "\\n"\n'
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done\n"
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\" 2>/dev/null && echo LEAK net\n"
            f"setsid sleep {marker} >/dev/null 2>&1 &\n"
            "echo unit=$LANEBOT_UNIT home=$HOME\n"
        )
        result = await run_script(
            command,
            script=tmp_path / "work" / "scripts" / "1" / "api.sh",
            cwd=jail.worktree,
            timeout=30,
            env={"LANEBOT_UNIT": "api"},
            jail=jail,
        )
    assert result.ok, result.output
    assert "LEAK" not in result.output and "s3cret-of-lanebot" not in result.output
    assert ours not in result.output  # lanebot's own process is not there to be seen
    assert f"unit=api home={jail.home}" in result.output
    assert gone(marker)


@pytest.mark.anyio
async def test_a_jailed_command_past_its_timeout_is_stopped_with_everything_in_its_jail(bwrap, tmp_path):
    marker = f"3600.{uuid.uuid4().int % 10**9}"
    jail = _jail(tmp_path)
    command = f"setsid sleep {marker} & sleep {marker}"
    result = await run_script(command, script=tmp_path / "slow.sh", cwd=jail.worktree, timeout=0.5, env={}, jail=jail)
    assert result.timed_out and result.describe("its check") == "its check did not finish within 0.5 s and was stopped"
    assert gone(marker)


@pytest.mark.anyio
async def test_a_cancelled_jailed_command_leaves_no_process_behind(bwrap, tmp_path):
    marker = f"3600.{uuid.uuid4().int % 10**9}"
    jail = _jail(tmp_path)
    task = asyncio.ensure_future(
        run_script(
            f"setsid sleep {marker} & exec sleep {marker}",
            script=tmp_path / "c.sh",
            cwd=jail.worktree,
            timeout=60,
            env={},
            jail=jail,
        )
    )
    while len(processes_with(marker)) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(marker)


# --------------------------------------------------------------------------- check runs


def test_check_runs_are_named_after_the_lane_and_carry_an_external_id_that_parses_back():
    assert lane_check_name("api") == "lanebot / api"
    assert parse_external_id(external_id(12, "api")) == (12, "api")
    assert parse_external_id(external_id(12)) == (12, None)
    assert parse_external_id("someone else's") is None


def test_a_lane_summary_names_the_files_the_output_and_the_transcript_and_fits_githubs_cap():
    report = lane_report(
        unit_id="api",
        attempt=2,
        passed=False,
        reason="its check exited with status 1",
        changed_paths=["app/api/status.py"],
        check_output="x" * 200_000 + "\nTHE END",
        transcript="/work/transcripts/1/api/attempt-2.jsonl",
    )
    assert report.conclusion == "failure"
    assert report.title == "attempt 2 failed: its check exited with status 1"
    assert len(report.summary) <= SUMMARY_LIMIT
    for needle in ("app/api/status.py", "THE END", "attempt-2.jsonl", "Why it failed"):
        assert needle in report.summary


def test_a_huge_list_of_changed_paths_is_cut_with_a_count():
    paths = [f"app/api/module_{n}.py" for n in range(5_000)]
    report = lane_report(
        unit_id="api", attempt=1, passed=True, reason=None, changed_paths=paths, check_output="", transcript="t"
    )
    assert report.conclusion == "success" and "… and 4800 more" in report.summary


def test_a_verify_summary_shows_the_command_and_the_end_of_its_output():
    report = verify_report(
        passed=False, command="make test", output="1 failed\n", reason="verify exited with status 2", transcript=None
    )
    assert report.conclusion == "failure" and "make test" in report.summary and "1 failed" in report.summary


# --------------------------------------------------------------------------- the PR text


def test_the_pr_file_gives_the_title_on_its_first_line_and_the_body_after():
    assert split_pr_text("\n# Add a status column\n\nIt adds one.\n\nAnd more.\n") == (
        "Add a status column",
        "It adds one.\n\nAnd more.",
    )
    assert split_pr_text("") == ("", "")


def _graph() -> Graph:
    return Graph(
        (Unit("migration", "Add it", (), "^m/", "true", "b"), Unit("api", "Expose", ("migration",), "^a/", "true", "b"))
    )


def _lanes() -> list[LaneSummary]:
    return [
        LaneSummary("migration", "Add it", "lanebot-lanes/7/migration", 1, 65.0, 1, "https://github.test/o/r/runs/5"),
        LaneSummary("api", "Expose", "lanebot-lanes/7/api", 2, 30.0, 2, None),
    ]


def test_the_pr_body_is_the_integrators_text_then_units_graph_timing_sessions_and_closes():
    body = pr_body(
        integrator_body="It works.",
        notes=[],
        issue_number=7,
        graph=_graph(),
        lanes=_lanes(),
        schedule="barrier",
        wall_clock_s=60.0,
        sum_of_lanes_s=95.0,
        sessions={"plan": 1, "lane": 3, "integrate": 1},
    )
    assert body.startswith("It works.\n\n---")
    for needle in (
        "<code>lanebot-lanes/7/migration</code>",
        "[lanebot / migration](https://github.test/o/r/runs/5)",
        "```mermaid\nflowchart TD",
        "| 1 min 5 s |",
        "**Wall-clock:** 1 min from the first lane",
        "against 1 min 35 s for the lanes one after the other: 1.6× faster",
        "5 agent sessions (1 planner, 3 lanes, 1 integrator)",
    ):
        assert needle in body
    assert body.rstrip().endswith("Closes #7")


def test_an_overlong_integrator_text_is_cut_so_the_body_fits_and_keeps_closes():
    body = pr_body(
        integrator_body="words " * 30_000,
        notes=[],
        issue_number=7,
        graph=_graph(),
        lanes=_lanes(),
        schedule="eager",
        wall_clock_s=None,
        sum_of_lanes_s=None,
        sessions={},
    )
    assert len(body) <= 65_536
    assert "cut to fit" in body and body.rstrip().endswith("Closes #7")


def test_an_integrators_mention_of_someone_in_a_note_is_escaped():
    body = pr_body(
        integrator_body="",
        notes=["@everyone look <script>"],
        issue_number=7,
        graph=_graph(),
        lanes=_lanes(),
        schedule="barrier",
        wall_clock_s=None,
        sum_of_lanes_s=None,
        sessions={},
    )
    assert "<script>" not in body and "@everyone" not in body
