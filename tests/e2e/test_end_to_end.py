"""The whole flow through the sandbox GitHub: real HTTP, real git, real processes, no respx.

Each test starts `lanebot sandbox serve` and `lanebot serve` as processes (bot/demo/stack.py),
acts as people through the sandbox's human API, and asserts on what GitHub would show:
comments, labels, check runs, branches, the pull request.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from bot.demo.plan import UNITS, issue_body
from bot.demo.runner import repository_config
from bot.demo.stack import Stack
from tests.e2e.conftest import shared_folder

pytestmark = pytest.mark.slow

REPO = "octo-org/tasks"
MAINTAINER = "maintainer"
STEP_TIMEOUT = 120.0


def config(**build) -> str:
    text = repository_config("recipe")
    extra = "".join(f"  {key}: {value}\n" for key, value in build.items())
    return text.replace("build:\n", "build:\n" + extra, 1)


def plan_body(units: list[dict]) -> str:
    jsonl = "".join(json.dumps(unit) + "\n" for unit in units)
    return f"A change in several units.\n\n~~~lanebot-plan\n{jsonl}~~~\n"


def recipe_unit(unit_id: str, files: str, contents: dict[str, str], *, check: str = "true", needs=()) -> dict:
    blocks = "\n\n".join(f"```text path={path}\n{text}```" for path, text in contents.items())
    return {
        "id": unit_id,
        "title": f"Unit {unit_id}",
        "needs": list(needs),
        "files": files,
        "check": check,
        "brief": f"Write the files below.\n\n{blocks}",
    }


def open_and_label(stack: Stack, body: str, *, cfg: str) -> int:
    stack.create_repository(REPO, config=cfg, maintainers=(MAINTAINER,))
    number = stack.human.open_issue(REPO, login=MAINTAINER, title="Do the thing", body=body)["number"]
    stack.human.add_label(REPO, number, "lanebot", login=MAINTAINER)
    wait_for_comment(stack, number, "<!-- lanebot:gate")
    return number


def comments(stack: Stack, number: int) -> list[dict]:
    return stack.issue(REPO, number)["comments"]


# A lane's line in the progress comment while its first attempt runs (bot.render.progress).
LANE_RUNNING = ": running · round 1 · "


def wait_for_comment(stack: Stack, number: int, start: str, *, contains: str = "") -> dict:
    def probe():
        return next(
            (
                c
                for c in comments(stack, number)
                if c["by_app"] and c["body"].startswith(start) and contains in c["body"]
            ),
            None,
        )

    return stack.wait_for(
        f"a comment starting {start!r} containing {contains!r}",
        probe,
        timeout=STEP_TIMEOUT,
        seen=lambda: str([c["body"][:200] for c in comments(stack, number)]),
    )


def wait_for_label(stack: Stack, number: int, label: str) -> list[str]:
    return stack.wait_for(
        f"label {label}",
        lambda: label in (labels := stack.issue(REPO, number)["labels"]) and labels,
        timeout=STEP_TIMEOUT,
        seen=lambda: str(stack.issue(REPO, number)["labels"]),
    )


def state_labels(stack: Stack, number: int) -> list[str]:
    return [label for label in stack.issue(REPO, number)["labels"] if label.startswith("lanebot:")]


def wait_for_pull(stack: Stack, number: int) -> dict:
    def probe():
        return next((p for p in stack.repository(REPO)["pulls"] if f"Closes #{number}" in (p["body"] or "")), None)

    return stack.wait_for(
        "the pull request", probe, timeout=STEP_TIMEOUT, seen=lambda: f"labels {stack.issue(REPO, number)['labels']}"
    )


def merge_commits(stack: Stack, branch: str) -> list[str]:
    log = subprocess.run(
        ["git", "--git-dir", str(stack.bare_repository(REPO)), "log", "--format=%s", branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in log.splitlines() if line.startswith("Merge lane ")]


def test_an_approved_plan_becomes_one_pull_request(stack):
    number = open_and_label(stack, issue_body(), cfg=repository_config("recipe"))
    wait_for_label(stack, number, "lanebot:awaiting-approval")
    assert state_labels(stack, number) == ["lanebot:awaiting-approval"]
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")

    pull = wait_for_pull(stack, number)
    assert pull["pull_request"]["head"] == f"lanebot/{number}"
    assert pull["pull_request"]["draft"] is True
    assert merge_commits(stack, f"lanebot/{number}") == [
        f"Merge lane 'api-endpoint' of #{number}",
        f"Merge lane 'cli-flag' of #{number}",
        f"Merge lane 'tui-rows' of #{number}",
        f"Merge lane 'migration' of #{number}",
    ]
    branches = set(stack.repository(REPO)["branches"])
    assert {f"lanebot-lanes/{number}/{unit['id']}" for unit in UNITS} <= branches
    finished = {
        run["name"]: run["conclusion"] for run in stack.repository(REPO)["check_runs"] if run["conclusion"] == "success"
    }
    assert set(finished) == {f"lanebot / {unit['id']}" for unit in UNITS} | {"lanebot / verify"}
    # Each lane reports one check run, its result, on its head: none is left on the base commit.
    heads = stack.repository(REPO)["branches"]
    lane_checks = [run for run in stack.repository(REPO)["check_runs"] if run["name"] != "lanebot / verify"]
    assert sorted((run["name"], run["head_sha"]) for run in lane_checks) == sorted(
        (f"lanebot / {unit['id']}", heads[f"lanebot-lanes/{number}/{unit['id']}"]) for unit in UNITS
    )
    wait_for_label(stack, number, "lanebot:done")
    assert state_labels(stack, number) == ["lanebot:done"]
    approve = next(c for c in comments(stack, number) if c["body"] == "/approve")
    assert {"user": "lanebot[bot]", "content": "eyes"} in approve["reactions"]


def test_approve_from_a_reader_is_refused_and_nothing_runs(stack):
    number = open_and_label(stack, issue_body(), cfg=repository_config("recipe"))
    stack.human.comment(REPO, number, login="drive-by", role="read", body="/approve")
    refusal = wait_for_comment(stack, number, "<!-- lanebot:answer", contains="@drive-by")
    assert "`/approve`" in refusal["body"]
    wait_for_label(stack, number, "lanebot:awaiting-approval")
    assert state_labels(stack, number) == ["lanebot:awaiting-approval"]
    assert not [b for b in stack.repository(REPO)["branches"] if b.startswith("lanebot")]


def test_a_failing_check_blocks_the_run_and_retry_resumes_it(stack, tmp_path):
    gate_file = shared_folder(tmp_path) / "allow-check"
    units = [recipe_unit("only", r"^notes\.txt$", {"notes.txt": "hello\n"}, check=f"test -e {gate_file}")]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_label(stack, number, "lanebot:blocked")
    progress = wait_for_comment(stack, number, "<!-- lanebot:progress", contains="only")
    assert "blocked" in progress["body"].lower()

    gate_file.write_text("ok")
    stack.human.comment(REPO, number, login=MAINTAINER, body="/retry only")
    wait_for_pull(stack, number)
    assert merge_commits(stack, f"lanebot/{number}") == [f"Merge lane 'only' of #{number}"]


def test_a_lane_that_edits_outside_its_files_is_blocked_naming_the_path(stack):
    units = [recipe_unit("tidy", r"^docs/", {"docs/a.md": "a\n", "README.md": "taken over\n"})]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=1))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_label(stack, number, "lanebot:blocked")
    progress = wait_for_comment(stack, number, "<!-- lanebot:progress", contains="README.md")
    assert "tidy" in progress["body"]
    assert not [p for p in stack.repository(REPO)["pulls"]]


def test_a_merge_conflict_blocks_naming_the_conflicting_path(stack):
    units = [
        recipe_unit("left", r"^(shared\.txt|left\.txt)$", {"shared.txt": "left\n"}),
        recipe_unit("right", r"^(shared\.txt|right\.txt)$", {"shared.txt": "right\n"}),
    ]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_label(stack, number, "lanebot:blocked")
    wait_for_comment(stack, number, "<!-- lanebot:progress", contains="shared.txt")
    assert merge_commits(stack, f"lanebot/{number}") == [f"Merge lane 'left' of #{number}"]


def test_cancel_in_the_middle_stops_the_run(stack):
    units = [recipe_unit("slow", r"^slow\.txt$", {"slow.txt": "zzz\n"}, check="sleep 60")]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_label(stack, number, "lanebot:running")
    wait_for_comment(stack, number, "<!-- lanebot:progress", contains=LANE_RUNNING)  # its `sleep 60` check
    stack.human.comment(REPO, number, login=MAINTAINER, body="/cancel")
    stack.wait_for(
        "no state label (cancelled)",
        lambda: state_labels(stack, number) == [],
        timeout=STEP_TIMEOUT,
        seen=lambda: str(state_labels(stack, number)),
    )
    assert not stack.repository(REPO)["pulls"]


def test_a_redelivered_approve_changes_nothing(stack):
    number = open_and_label(stack, issue_body(), cfg=repository_config("recipe"))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_pull(stack, number)
    approve = next(
        d
        for d in delivered(stack)
        if d["event"] == "issue_comment" and d["request"]["payload"]["comment"]["body"] == "/approve"
    )
    stack.human.redeliver(approve["id"])
    stack.human.drain()
    redelivered = [d for d in stack.human.deliveries() if d["guid"] == approve["guid"]]
    assert [d["status_code"] for d in redelivered] == [202, 200]
    assert len(stack.repository(REPO)["pulls"]) == 1
    assert len(merge_commits(stack, f"lanebot/{number}")) == len(UNITS)


def delivered(stack: Stack) -> list[dict]:
    """Every delivery the sandbox sent, as its --delivery-log wrote them (payloads included)."""
    stack.human.drain()
    return [json.loads(path.read_text()) for path in sorted((stack.root / "deliveries").glob("*.json"))]


def test_lanebot_killed_while_lanes_run_finishes_after_a_restart(stack):
    units = [dict(unit, check=f"sleep 3 && {unit['check']}") for unit in UNITS]
    number = open_and_label(stack, plan_body(units), cfg=repository_config("recipe"))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_comment(stack, number, "<!-- lanebot:progress", contains=LANE_RUNNING)
    stack.kill_lanebot()
    stack.start_lanebot()

    wait_for_pull(stack, number)
    stack.human.drain()
    assert len(stack.repository(REPO)["pulls"]) == 1
    merges = merge_commits(stack, f"lanebot/{number}")
    assert sorted(merges) == sorted(f"Merge lane '{unit['id']}' of #{number}" for unit in UNITS)


def test_rerequesting_a_failed_lanes_check_run_retries_that_lane(stack, tmp_path):
    gate_file = shared_folder(tmp_path) / "allow-check"
    units = [recipe_unit("only", r"^notes\.txt$", {"notes.txt": "hello\n"}, check=f"test -e {gate_file}")]
    number = open_and_label(stack, plan_body(units), cfg=config(max_retries=0))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    wait_for_label(stack, number, "lanebot:blocked")
    failed = stack.wait_for(
        "the lane's failed check run",
        lambda: next(
            (
                r
                for r in stack.repository(REPO)["check_runs"]
                if r["name"] == "lanebot / only" and r["conclusion"] == "failure"
            ),
            None,
        ),
        timeout=STEP_TIMEOUT,
    )

    gate_file.write_text("ok")
    stack.human.rerun_check(REPO, failed["id"], login=MAINTAINER, role="maintain")
    wait_for_pull(stack, number)
