"""`/hold`, `/unhold` and closing the issue, through the whole app and the sandbox GitHub.

The app of tests/web/test_issue_flow.py (its `world`: intake, dispatcher, background jobs, the real
orchestrator) with scripted lane agents (tests.lanes_helpers.Scenario) instead of the planner: a
maintainer writes the plan by hand, approves it and then holds, unholds or closes the issue while
lanes run. The build runs in the background meanwhile, so deliveries are handed on without waiting
for it (`deliver`).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.edges.store import runs
from bot.runner import orchestrator
from tests.app_helpers import settle
from tests.lanes_helpers import Scenario, make_workflow_dir, run_scripted_agent_plain
from tests.web.test_issue_flow import ISSUE, MAINTAINER, REPO, WAIT_LIMIT_SECONDS, World, assert_state_label

# The world's fixtures, re-exported so pytest finds them here (`host_workflows` is this module's own).
from tests.web.test_issue_flow import planner_state as planner_state
from tests.web.test_issue_flow import world as world

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

HOST = {
    "build": {"agent": "command", "schedule": "eager", "max_lanes": 1, "max_retries": 0, "timeout": "60s"},
    "integrate": {"agent": "recipe", "verify": "true", "max_retries": 0},
    "review": {"enabled": False},
}


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    """`first` runs until the test creates its release file; `second` writes its file at once."""
    root = tmp_path / "agent"
    root.mkdir()
    release = root / "release-first"
    return Scenario(
        root,
        {
            "first": {"default": {"wait_for": [str(release)], "write": {"first.txt": "first\n"}}},
            "second": {"default": {"write": {"second.txt": "second\n"}}},
        },
    )


@pytest.fixture
def host_workflows(tmp_path: Path, scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's workflow: lanes by the scripted agent, one lane at a time, no review."""
    folder = make_workflow_dir(tmp_path / "host", HOST, scenario.argv())
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(folder))
    run_scripted_agent_plain(monkeypatch)
    # The drive loop looks again this often when no job ends (an /unhold is seen at its next look).
    monkeypatch.setattr(orchestrator, "IDLE_POLL_S", 0.1)
    return folder


def hand_plan(*units: str) -> str:
    lines = [
        json.dumps(
            {
                "id": unit,
                "title": f"Write {unit}",
                "needs": [],
                "files": rf"^{unit}\.txt$",
                "check": f"test -f {unit}.txt",
                "brief": f"Write {unit}.txt.",
            }  # fmt: skip
        )
        for unit in units
    ]
    return "/plan\n\n```lanebot-plan\n" + "\n".join(lines) + "\n```\n"


async def deliver(world: World) -> None:
    """Hand on every delivery until none is left and the dispatcher handled them all, without
    waiting for the build that runs in the background."""
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        while True:
            await settle(world.app)
            batch = world.delivered()
            if not batch:
                return
            for delivery in batch:
                await world.hand_on(delivery)


async def say(world: World, body: str) -> None:
    world.github.comment(body)
    await deliver(world)


async def eventually(condition: Any, what: str) -> None:
    """Wait for `condition()` (a hang guard: it fails only if it never holds)."""
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        while not condition():
            await asyncio.sleep(0.05)
    assert condition(), what


async def build_finished(world: World) -> None:
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        await world.app.state.jobs.wait_idle()
    await deliver(world)


def started(scenario: Scenario) -> list[str]:
    return [unit for unit, _, _ in scenario.runs()]


def lane_state(world: World, unit: str) -> str:
    lane = runs.get_lane(world.engine, world.run().id, unit)
    return lane.state if lane is not None else "none"


def progress(world: World) -> str:
    [comment] = world.github.lanebot_comments("progress")
    return str(comment["body"])


async def test_a_held_run_starts_no_lane_merges_what_finished_and_resumes_on_unhold(world, scenario):
    await world.comment(hand_plan("first", "second"))
    await say(world, "/approve")
    await eventually(lambda: started(scenario) == ["first"], "the first lane started")
    await eventually(lambda: "**Waiting** for a lane slot: `second` may start" in progress(world), "the slot wait")

    await say(world, "/hold the CI is down")

    run = world.run()
    assert (run.state, run.held_by, run.held_reason) == ("running", MAINTAINER, "the CI is down")
    assert any("run 1 is held. No new agent session starts until `/unhold`" in a for a in world.github.answers())
    assert f"**Held** by @&#8203;{MAINTAINER} since " in progress(world) and ": the CI is down." in progress(world)
    assert "`/unhold`" in progress(world).splitlines()[-1]
    assert "lane slot" not in progress(world)  # the hold is why `second` waits now

    (scenario.root / "release-first").touch()  # the running session finishes, and its lane merges
    await eventually(lambda: lane_state(world, "first") == "merged", "the first lane merged")
    await asyncio.sleep(1.0)  # many looks of the drive loop (IDLE_POLL_S), none of which may start a lane
    assert started(scenario) == ["first"] and lane_state(world, "second") == "pending"
    assert world.run().state == "running"

    await say(world, "/unhold")

    assert any("run 1 is no longer held" in answer for answer in world.github.answers())
    await build_finished(world)
    run = world.run()
    assert (run.state, run.held_at) == ("done", None) and run.pr_number is not None
    assert started(scenario) == ["first", "second"]
    assert "**Held**" not in progress(world)
    kinds = [event.kind for event in runs.run_events(world.engine, run.id)]
    assert kinds.index("held") < kinds.index("unheld")


async def test_a_run_held_until_its_lanes_merged_waits_to_integrate_until_unhold(world, scenario):
    await world.comment(hand_plan("first"))
    await say(world, "/approve")
    await eventually(lambda: started(scenario) == ["first"], "the lane started")
    await say(world, "/hold")

    (scenario.root / "release-first").touch()
    await eventually(lambda: world.run().state == "integrating", "every lane merged")
    await asyncio.sleep(1.0)  # many looks of the drive loop, none of which may start the integrate step
    assert world.run().state == "integrating"
    assert [s.kind for s in runs.sessions(world.engine, world.run().id)] == ["lane"]
    assert "since " in progress(world) and ". No new agent session starts until `/unhold`" in progress(world)

    await say(world, "/unhold")
    await build_finished(world)

    assert world.run().state == "done"
    assert [s.kind for s in runs.sessions(world.engine, world.run().id)] == ["lane", "integrate"]


async def test_hold_and_unhold_are_refused_where_they_are_not_valid(world, scenario):
    await world.comment(hand_plan("second"))
    await say(world, "/unhold")
    await say(world, "/hold")

    not_held, not_building = world.github.answers()
    assert "cannot unhold a run that is awaiting approval: it is not held" in not_held
    assert "cannot hold a run that is awaiting approval" in not_building
    assert world.run().held_at is None


async def test_closing_the_issue_cancels_its_running_run_and_keeps_its_branches(world, scenario):
    await world.comment(hand_plan("first"))
    await say(world, "/approve")
    await eventually(lambda: lane_state(world, "first") == "running" and started(scenario), "the lane started")

    world.github.repository.human.close_issue(REPO, ISSUE, login=MAINTAINER)
    await deliver(world)
    await build_finished(world)

    run = world.run()
    assert run.state == "cancelled"
    assert lane_state(world, "first") == "failed"
    [session] = [s for s in runs.sessions(world.engine, run.id) if s.kind == "lane"]
    assert session.status == "cancelled"
    assert any(f"@{MAINTAINER} closed the issue, so run 1 is cancelled" in a for a in world.github.answers())
    assert f"run {run.id}: cancelled" in progress(world)
    assert_state_label(world, None)


async def test_closing_the_issue_by_someone_who_may_not_command_lanebot_leaves_the_run_going(world, scenario):
    await world.comment(hand_plan("first"))

    world.github.repository.human.close_issue(REPO, ISSUE, login="triager", role="triage")
    await deliver(world)

    assert world.run().state == "awaiting_approval"
    [refusal] = world.github.answers()
    assert refusal.startswith("<!-- lanebot:answer") and "@triager: `closed the issue`: " in refusal
    assert "run 1 goes on" in refusal


async def test_closing_the_issue_of_a_finished_run_changes_nothing(world, scenario):
    (scenario.root / "release-first").touch()
    await world.comment(hand_plan("first"))
    await say(world, "/approve")
    await build_finished(world)
    assert world.run().state == "done"

    world.github.repository.human.close_issue(REPO, ISSUE, login=MAINTAINER)
    await deliver(world)

    assert world.run().state == "done"
    assert not any("closed the issue" in answer for answer in world.github.answers())
