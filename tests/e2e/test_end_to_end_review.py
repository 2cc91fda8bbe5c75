"""Check-run buttons and the clean-up after the pull request, through the sandbox GitHub.

As in tests/e2e/test_end_to_end.py: `lanebot sandbox serve` and `lanebot serve` run as processes
(bot/demo/stack.py), people act through the sandbox's human API, and the tests look at what
GitHub would show (check runs, labels, branches, the pull request). What only lanebot knows (a
run's state, the events it recorded) is read from its database; what is left on disk from the
stack's work folder. The repository's gate is `approvers: maintain`, so a collaborator with
write access can press a button on GitHub and still not be obeyed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest
from sqlmodel import select

from bot.core.checks import RERUN_VERIFY, RETRY_LANE
from bot.demo.stack import Stack
from bot.edges.store import runs
from bot.edges.store.db import make_engine, session
from bot.edges.store.models import Delivery
from bot.runner.cleanup import mirror_paths, run_paths
from bot.runner.plan import issue_run
from tests.e2e.conftest import shared_folder
from tests.e2e.test_end_to_end import (
    MAINTAINER,
    REPO,
    STEP_TIMEOUT,
    open_and_label,
    plan_body,
    recipe_unit,
    state_labels,
    wait_for_label,
    wait_for_pull,
)

pytestmark = pytest.mark.slow

CONTRIBUTOR = "contributor"  # write access on GitHub, but the gate asks for maintain


def config(*, verify: str = "true") -> str:
    return (
        "build:\n  agent: recipe\n  max_retries: 0\n"
        f'integrate:\n  agent: recipe\n  verify: "{verify}"\n  max_retries: 0\n'
        "pull_request:\n  draft: false\n"
        "gate:\n  approvers: maintain\n"
        "review:\n  enabled: false\n"
    )


# --------------------------------------------------------------------------- looking


def lanebot_db(stack: Stack, read: Any) -> Any:
    engine = make_engine(stack.database_url)
    try:
        return read(engine)
    finally:
        engine.dispose()


def lanebot_run(stack: Stack, number: int) -> Any:
    return lanebot_db(stack, lambda engine: issue_run(engine, REPO, number))


def run_events(stack: Stack, number: int, kind: str) -> list[dict]:
    run_id = lanebot_run(stack, number).id
    return lanebot_db(stack, lambda engine: [e.payload() for e in runs.run_events(engine, run_id) if e.kind == kind])


def checks(stack: Stack, name: str) -> list[dict]:
    return [c for c in stack.repository(REPO)["check_runs"] if c["name"] == name]


def check(stack: Stack, check_id: int) -> dict:
    return next(c for c in stack.repository(REPO)["check_runs"] if c["id"] == check_id)


def wait_for_failed_checks(stack: Stack, name: str, count: int) -> list[dict]:
    def probe():
        failed = [c for c in checks(stack, name) if c["conclusion"] == "failure"]
        return failed if len(failed) >= count else None

    return stack.wait_for(
        f"{count} failed {name!r} check runs",
        probe,
        timeout=STEP_TIMEOUT,
        seen=lambda: str([(c["name"], c["conclusion"]) for c in checks(stack, name)]),
    )


def wait_for_state(stack: Stack, number: int, state: str) -> Any:
    return stack.wait_for(
        f"the run {state}",
        lambda: (run := lanebot_run(stack, number)).state == state and run,
        timeout=STEP_TIMEOUT,
        seen=lambda: f"it is {lanebot_run(stack, number).state}",
    )


def wait_until_lanebot_handled_the_last(stack: Stack, action: str) -> None:
    """Until lanebot has processed the last `check_run.<action>` delivery (its decision is made)."""
    stack.human.drain()
    guid = [d for d in stack.human.deliveries() if d["event"] == "check_run" and d["action"] == action][-1]["guid"]

    def processed() -> bool:
        query = select(Delivery.status).where(Delivery.delivery_id == guid)
        return lanebot_db(stack, lambda engine: _first(engine, query)) == "processed"

    stack.wait_for(f"lanebot to process delivery {guid}", processed, timeout=STEP_TIMEOUT)


def _first(engine: Any, query: Any) -> Any:
    with session(engine) as db:
        return db.exec(query).first()


def branches(stack: Stack) -> set[str]:
    return set(stack.repository(REPO)["branches"])


# --------------------------------------------------------------------------- check-run buttons


def test_retry_lane_on_a_failed_lanes_check_run_retries_it_and_a_non_approvers_click_is_ignored(stack, tmp_path):
    allow = shared_folder(tmp_path) / "allow-check"
    units = [recipe_unit("only", r"^notes\.txt$", {"notes.txt": "hello\n"}, check=f"test -e {allow}")]
    number = open_and_label(stack, plan_body(units), cfg=config())
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    [failed] = wait_for_failed_checks(stack, "lanebot / only", 1)
    wait_for_state(stack, number, "blocked")
    assert failed["actions"] == [RETRY_LANE.to_api()]
    allow.write_text("ok")

    stack.human.request_action(REPO, failed["id"], RETRY_LANE.identifier, login=CONTRIBUTOR, role="write")
    wait_until_lanebot_handled_the_last(stack, "requested_action")
    assert check(stack, failed["id"])["actions"] == [RETRY_LANE.to_api()]
    assert run_events(stack, number, "check_rerun") == []

    stack.human.request_action(REPO, failed["id"], RETRY_LANE.identifier, login=MAINTAINER)
    wait_for_pull(stack, number)
    # The retry committed nothing new: its result completes the clicked check run again, on that
    # commit (the note saying who asked, and its button gone, came between; tests/web/test_check_actions.py).
    [clicked] = checks(stack, "lanebot / only")
    assert (clicked["id"], clicked["head_sha"]) == (failed["id"], failed["head_sha"])
    assert (clicked["conclusion"], clicked["actions"]) == ("success", [])
    assert clicked["output"]["title"] == "lane only passed its check (attempt 2)"
    assert [(e["by"], e["unit"], e["via"]) for e in run_events(stack, number, "check_rerun")] == [
        ("maintainer", "only", "retry-lane")
    ]


def test_rerun_verify_and_githubs_rerun_run_the_integrate_step_and_verify_again(stack, tmp_path):
    allow = shared_folder(tmp_path) / "allow-verify"
    units = [recipe_unit("only", r"^notes\.txt$", {"notes.txt": "hello\n"})]
    number = open_and_label(stack, plan_body(units), cfg=config(verify=f"test -e {allow}"))
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    [first] = wait_for_failed_checks(stack, "lanebot / verify", 1)
    wait_for_state(stack, number, "blocked")
    assert first["actions"] == [RERUN_VERIFY.to_api()]

    stack.human.request_action(REPO, first["id"], RERUN_VERIFY.identifier, login=MAINTAINER)
    second = wait_for_failed_checks(stack, "lanebot / verify", 2)[-1]
    wait_for_state(stack, number, "blocked")
    assert check(stack, first["id"])["actions"] == []
    assert check(stack, first["id"])["output"]["title"] == "a re-run of verify requested by @maintainer"
    assert second["actions"] == [RERUN_VERIFY.to_api()]

    allow.write_text("ok")
    stack.human.rerun_check(REPO, second["id"], login=MAINTAINER)
    wait_for_pull(stack, number)
    assert [c["conclusion"] for c in sorted(checks(stack, "lanebot / verify"), key=lambda c: c["id"])] == [
        "failure",
        "failure",
        "success",
    ]
    assert [e["via"] for e in run_events(stack, number, "check_rerun")] == ["rerun-verify", "rerequested"]


# --------------------------------------------------------------------------- clean-up


def lanebot_gc(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": stack.database_url, "LANEBOT_WORKDIR": str(stack.workdir)}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "gc", *args], env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT
    )


def test_merging_the_pull_request_finishes_the_run_and_tidies_up_then_gc_frees_its_mirror(stack):
    units = [
        recipe_unit("left", r"^left\.txt$", {"left.txt": "left\n"}),
        recipe_unit("right", r"^right\.txt$", {"right.txt": "right\n"}),
    ]
    number = open_and_label(stack, plan_body(units), cfg=config())
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    pull = wait_for_pull(stack, number)
    wait_for_label(stack, number, "lanebot:done")
    run = lanebot_run(stack, number)
    files = run_paths(stack.workdir, REPO, run.id)
    assert files.worktrees.is_dir()
    lane_branches = {f"lanebot-lanes/{number}/left", f"lanebot-lanes/{number}/right"}
    assert lane_branches <= branches(stack)

    stack.human.merge_pull(REPO, pull["number"], login=MAINTAINER)
    stack.wait_for("the clean-up", lambda: run_events(stack, number, "lane_branches_deleted"), timeout=STEP_TIMEOUT)

    assert not lane_branches & branches(stack)
    assert f"lanebot/{number}" in branches(stack)  # GitHub's "delete head branches" setting decides
    assert state_labels(stack, number) == ["lanebot:done"]
    run = lanebot_run(stack, number)
    assert (run.state, run.active_key) == ("done", None)
    assert not any(path.exists() for path in files.all())
    assert stack.issue(REPO, number)["state"] == "closed"  # GitHub closed it: the body says "Closes #N"

    mirror = mirror_paths(stack.workdir, REPO)[0]
    assert mirror.is_dir()
    gc = lanebot_gc(stack, "--older-than", "0")
    assert gc.returncode == 0, gc.stderr
    assert "removed the mirror of octo-org/tasks" in gc.stdout
    freed = re.search(r"^freed \S+ \S+ \(([\d,]+) bytes\) under ", gc.stdout, re.MULTILINE)
    assert freed and int(freed[1].replace(",", "")) > 0
    assert not mirror.exists()


def test_closing_the_pull_request_unmerged_cancels_the_run_and_keeps_its_branches(stack):
    units = [recipe_unit("only", r"^notes\.txt$", {"notes.txt": "hello\n"})]
    number = open_and_label(stack, plan_body(units), cfg=config())
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    pull = wait_for_pull(stack, number)
    wait_for_label(stack, number, "lanebot:done")
    files = run_paths(stack.workdir, REPO, lanebot_run(stack, number).id)

    stack.human.close_issue(REPO, pull["number"], login=MAINTAINER)
    run = wait_for_state(stack, number, "cancelled")
    stack.wait_for(
        "no state label",
        lambda: state_labels(stack, number) == [],
        timeout=STEP_TIMEOUT,
        seen=lambda: str(state_labels(stack, number)),
    )
    stack.wait_for("the run's files removed", lambda: not any(p.exists() for p in files.all()), timeout=STEP_TIMEOUT)

    assert run.active_key is None
    assert {f"lanebot-lanes/{number}/only", f"lanebot/{number}"} <= branches(stack)
    assert stack.issue(REPO, number)["state"] == "open"
    assert lanebot_gc(stack, "--older-than", "7d").stdout.strip().endswith("freed 0 B")
