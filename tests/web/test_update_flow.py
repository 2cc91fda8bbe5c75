"""`/update` on lanebot's pull request, end to end through the real app and the sandbox GitHub.

As tests/web/test_ci_fix_flow.py: lanebot builds an issue's one-unit plan to its pull request
(tests/web/flow_helpers.py). Then a maintainer pushes to `main` what conflicts with it, and comments
`/update` on the pull request: the `command` agent below (`AGENT`) is the lane and the resolver
(`build.on_conflict: agent`), and the pull request must merge cleanly again, with verify run on the
update lanebot pushed."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator

import pytest

from bot.core.checks import VERIFY_CHECK
from bot.core.names import base_update_message
from tests.lanes_helpers import run_git
from tests.web.flow_helpers import BRANCH, World, lanebots_pull_request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = textwrap.dedent("""\
    import json, os, pathlib, sys
    session = os.environ.get("LANEBOT_SESSION", "lane")
    text = "hello from main\\nhello from the lane\\n" if session == "resolve" else "hello from the lane\\n"
    pathlib.Path("greeting.txt").write_text(text)
    print(json.dumps({"type": "result", "result": f"{session}: wrote greeting.txt"}))
""")
CONFIG = textwrap.dedent("""\
    build:
      agent: command
      max_retries: 0
      on_conflict: agent
    integrate:
      agent: recipe
      verify: "grep -q 'hello from the lane' greeting.txt"
      max_retries: 0
    pull_request:
      draft: false
    review:
      enabled: false
""")


@pytest.fixture
async def world(engine, tmp_path, monkeypatch) -> AsyncIterator[World]:
    async with lanebots_pull_request(
        engine,
        tmp_path,
        monkeypatch,
        world_type=World,
        agent=AGENT,
        agent_args=[],
        files={"README.md": "# Hello\n", "greeting.txt": "hello\n", ".github/lanebot.yml": CONFIG},
        brief="Write greeting.txt.",
    ) as world:
        yield world


async def main_moves_to_conflict(world: World) -> None:
    """A maintainer pushes to `main` a greeting.txt other than the lane's."""
    await world.push("main", {"greeting.txt": "hello from main\n"})


async def test_a_pull_request_that_came_to_conflict_with_main_is_said_so_once_and_offered_update(world):
    await main_moves_to_conflict(world)
    [note] = world.lanebot_comments("base-conflict")  # main's push says it (bot/web/handlers/base_moved.py)
    assert "now conflicts with `main`" in note and "Comment `/update`" in note and "resolver session" in note

    await world.push(BRANCH, {"NOTES.md": "a note\n"})  # synchronize: a new head, conflicting still

    head = world.pull()["pull_request"]["head_sha"]
    assert len([n for n in world.lanebot_comments("base-conflict") if f"head={head}" in n]) == 1


async def test_update_on_the_pull_request_resolves_a_conflicting_main_and_pushes_a_verified_merge(world):
    number = world.pull()["number"]
    await main_moves_to_conflict(world)

    await world.comment(number, "/update")

    [request] = world.requests("update")
    assert request.state == "done", request.error
    bare = world.repository.bare
    assert run_git("log", "-1", "--format=%s", BRANCH, cwd=bare) == base_update_message("main", BRANCH)
    assert run_git("show", f"{BRANCH}:greeting.txt", cwd=bare) == "hello from main\nhello from the lane"
    head = run_git("rev-parse", BRANCH, cwd=bare)
    assert world.pull()["pull_request"]["head_sha"] == head
    verified = {c["head_sha"]: c["conclusion"] for c in world.repository.checks_named(VERIFY_CHECK)}
    assert verified[head] == "success"
    answers = [
        c["body"] for c in world.repository.comments(number) if c["by_app"] and f"request={request.id}" in c["body"]
    ]
    assert len(answers) == 1 and "was merged into lanebot/1, its conflicts in greeting.txt resolved" in answers[0]
    # lanebot's own push left it mergeable: nothing said of the new head
    assert [n for n in world.lanebot_comments("base-conflict") if f"head={head}" in n] == []


async def test_update_from_someone_who_may_not_command_lanebot_is_refused(world):
    number = world.pull()["number"]
    await world.comment(number, "/update", login="mallory")

    assert world.requests("update") == []
