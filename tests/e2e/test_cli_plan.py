"""`lanebot plan ...` as a person at a terminal uses it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worked-example.jsonl"


def unit(unit_id: str, **fields) -> dict:
    base = {"id": unit_id, "title": unit_id, "needs": [], "files": f"^{unit_id}/", "check": "true", "brief": "b"}
    return base | fields


def write_plan(tmp_path: Path, units: list[dict]) -> Path:
    path = tmp_path / "plan.jsonl"
    path.write_text("\n".join(json.dumps(u) for u in units) + "\n")
    return path


@pytest.mark.parametrize(("schedule", "makespan"), [("sequential", "60"), ("barrier", "45"), ("eager", "30")])
def test_simulate_reproduces_the_worked_example(capsys, schedule, makespan):
    assert main(["plan", "simulate", str(EXAMPLE), "--schedule", schedule]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"makespan: {makespan} min ({schedule})"


def test_simulate_durations_override_estimates(capsys):
    code = main(["plan", "simulate", str(EXAMPLE), "--schedule", "eager", "--durations", "tui-rows=1"])
    assert code == 0
    assert capsys.readouterr().out.startswith("makespan: 25 min")


def test_simulate_without_durations_or_estimates_is_a_one_line_usage_error(tmp_path, capsys):
    plan = write_plan(tmp_path, [unit("a"), unit("b", needs=["a"])])
    assert main(["plan", "simulate", str(plan)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--durations" in err


@pytest.mark.parametrize("bad", ["nosuch=3", "migration", "migration=soon", "migration=-1"])
def test_simulate_rejects_bad_durations(capsys, bad):
    assert main(["plan", "simulate", str(EXAMPLE), "--durations", bad]) == 2
    assert "--durations" in capsys.readouterr().err


def test_check_passes_a_valid_plan(capsys):
    assert main(["plan", "check", str(EXAMPLE)]) == 0
    assert "4 units in 2 rounds" in capsys.readouterr().out


def test_check_prints_every_problem_and_exits_1(tmp_path, capsys):
    plan = write_plan(tmp_path, [unit("a", needs=["b"]), unit("b", needs=["a"]), unit("Bad_Id")])
    assert main(["plan", "check", str(plan)]) == 1
    out = capsys.readouterr().out
    assert "Dependency cycle detected: a -> b -> a" in out
    assert "Bad_Id" in out
    assert "2 problems" in out


def test_check_names_overlapping_files_on_tracked_paths(tmp_path, capsys):
    plan = write_plan(tmp_path, [unit("a", files="^src/"), unit("b", files=r"\.py$")])
    tracked = tmp_path / "tracked.txt"
    tracked.write_text("src/x.py\nREADME.md\n")
    assert main(["plan", "check", str(plan), "--tracked-paths", str(tracked)]) == 1
    out = capsys.readouterr().out
    assert "src/x.py" in out and "'a'" in out and "'b'" in out


def test_show_prints_rounds_critical_path_and_session_bound(capsys):
    assert main(["plan", "show", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "1. migration, tui-rows, cli-flag" in out
    assert "2. api-endpoint" in out
    assert "critical path: tui-rows (30 min; sequential 60 min)" in out
    assert "session bound: up to" in out


def test_show_session_bound_follows_a_repository_config(tmp_path, capsys):
    main(["plan", "show", str(EXAMPLE)])
    default_bound = int(capsys.readouterr().out.split("up to ")[1].split()[0])
    config = tmp_path / "lanebot.yml"
    config.write_text("build:\n  on_conflict: agent\n")
    assert main(["plan", "show", str(EXAMPLE), "--config", str(config)]) == 0
    bound = int(capsys.readouterr().out.split("up to ")[1].split()[0])
    assert bound == default_bound + 4  # one resolver session per merge


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ("", "empty"), ("{not json", "line 1"), ('{"id": "a"}\n[1,', "line 2")],
)
def test_bad_input_is_a_one_line_error_with_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "plan.jsonl"
    if content is not None:
        path.write_text(content)
    assert main(["plan", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err.lower()


def test_the_console_script_runs_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "plan", "check", str(tmp_path / "missing.jsonl")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "no such file" in result.stderr
