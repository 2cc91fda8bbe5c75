"""lanebot hears its pull request's base move (`push` to the default branch), end to end through the
real app and the sandbox GitHub.

lanebot builds an issue's one-unit plan (the `command` agent below writes greeting.txt) to its pull
request. Then a maintainer pushes to `main`: GitHub sends `push` and nothing about the pull request,
whose head did not move. A push that makes the pull request conflict is said on it, once per head,
with `/update` offered; a push that leaves it mergeable says nothing; a push to any other branch
costs lanebot no GitHub request at all.
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator

import pytest

from bot.core.names import lane_branch
from bot.edges.store import deliveries
from tests.web.flow_helpers import BRANCH, REPO, World, lanebots_pull_request

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENT = textwrap.dedent("""\
    import json, pathlib
    pathlib.Path("greeting.txt").write_text("hello from the lane\\n")
    print(json.dumps({"type": "result", "result": "wrote greeting.txt"}))
""")
CONFIG = textwrap.dedent("""\
    build:
      agent: command
      max_retries: 0
    integrate:
      agent: recipe
      verify: "grep -q 'hello from the lane' greeting.txt"
      max_retries: 0
    pull_request:
      draft: false
    review:
      enabled: false
""")


class PushWorld(World):
    async def after_push(self, branch: str, files: dict[str, str]) -> list[str]:
        """A maintainer pushes `files` onto `branch`; the events GitHub sent lanebot for it."""
        before = len(self.events)
        await self.push(branch, files)
        return self.events[before:]

    def conflict_notes(self) -> list[str]:
        return self.lanebot_comments("base-conflict")


@pytest.fixture
async def world(engine, tmp_path, monkeypatch) -> AsyncIterator[PushWorld]:
    async with lanebots_pull_request(
        engine,
        tmp_path,
        monkeypatch,
        world_type=PushWorld,
        agent=AGENT,
        agent_args=[],
        files={"README.md": "# Hello\n", "greeting.txt": "hello\n", ".github/lanebot.yml": CONFIG},
        brief="Write greeting.txt.",
    ) as world:
        assert world.pull()["pull_request"]["head"] == BRANCH
        yield world


async def test_a_push_to_main_that_makes_the_pull_request_conflict_is_said_once_with_update_offered(world):
    sent = await world.after_push("main", {"greeting.txt": "hello from main\n"})
    # GitHub said only that main moved (then lanebot's own comment came back as issue_comment)
    assert sent == ["push", "issue_comment"]

    [note] = world.conflict_notes()
    assert "now conflicts with `main`" in note and "Comment `/update`" in note
    assert f"head={world.pull()['pull_request']['head_sha']}" in note

    # main moves on while the pull request's head stays: still the one note for that head
    assert await world.after_push("main", {"README.md": "# Hello again\n"}) == ["push"]
    assert world.conflict_notes() == [note]


async def test_a_push_to_main_that_still_merges_asks_github_and_says_nothing(world):
    number = world.pull()["number"]
    asked = world.repository.served("GET", f"/repos/{REPO}/pulls/{number}")

    assert await world.after_push("main", {"NOTES.md": "unrelated\n"}) == ["push"]

    assert world.repository.served("GET", f"/repos/{REPO}/pulls/{number}") > asked
    assert world.conflict_notes() == []


async def test_a_push_to_another_branch_makes_no_github_request(world):
    requests = world.repository.api_requests()

    assert await world.after_push(lane_branch(1, "words"), {"greeting.txt": "hello from main\n"}) == ["push"]

    assert world.repository.api_requests() == requests
    newest = deliveries.list_recent(world.engine, 1)[0]
    assert (newest.event, newest.status) == ("push", "processed")  # stored and handled like any delivery
