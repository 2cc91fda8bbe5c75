"""`/update` on lanebot's pull request, end to end through the real app and the sandbox GitHub.

As tests/web/test_ci_fix_flow.py: lanebot builds an issue's one-unit plan to its pull request. Then
a maintainer pushes to `main` what conflicts with it, and comments `/update` on the pull request:
the `command` agent below (`AGENT`) is the lane and the resolver (`build.on_conflict: agent`), and
the pull request must merge cleanly again, with verify run on the update lanebot pushed."""

from __future__ import annotations

import contextlib
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest

from bot.core.checks import VERIFY_CHECK
from bot.core.names import base_update_message, integration_branch
from bot.edges.github.client import GitHubApp
from bot.edges.store import deliveries, reviews, runs
from bot.web.app import create_app
from tests.app_helpers import SECRET, WEBHOOK_PATH, make_settings, running, settle
from tests.lanes_helpers import make_workflow_dir, run_git, run_scripted_agent_plain
from tests.sandbox_helpers import SandboxRepository, WebhookInbox, served_sandbox

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = "Codertocat/Hello-World"
MAINTAINER = "Codertocat"  # owns the repository: admin
WAIT_LIMIT_SECONDS = 90  # a hang guard, not a timing assertion
BRANCH = integration_branch(1)

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
UNIT = {
    "id": "words",
    "title": "Greet",
    "needs": [],
    "files": r"^greeting\.txt$",
    "check": "test -f greeting.txt",
    "brief": "Write greeting.txt.",
}
ISSUE_BODY = f"Greet people.\n\n~~~lanebot-plan\n{json.dumps(UNIT)}\n~~~\n"


class World:
    def __init__(self, app: Any, client: httpx.AsyncClient, repository: SandboxRepository, inbox: WebhookInbox):
        self.app, self.client, self.repository, self.inbox = app, client, repository, inbox
        self.engine = app.state.engine

    async def settled(self) -> None:
        """Every delivery handed on and handled and every background job done, none failed."""
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            while True:
                await settle(self.app)
                await self.app.state.jobs.wait_idle()
                self.repository.human.drain()
                batch = self.inbox.take()
                if not batch:
                    break
                for headers, body in batch:
                    response = await self.client.post(WEBHOOK_PATH, content=body, headers=headers)
                    assert response.status_code == 202, response.text
        failed = [
            (row.event, row.error) for row in deliveries.list_recent(self.engine, 500) if row.status != "processed"
        ]
        assert failed == []

    def pull(self) -> dict[str, Any]:
        [pull] = [p for p in self.repository.pulls() if p["state"] == "open"]
        return pull


@pytest.fixture
async def world(engine, tmp_path, monkeypatch) -> AsyncIterator[World]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(make_workflow_dir(tmp_path, {}, [sys.executable, str(script)])))
    run_scripted_agent_plain(monkeypatch)
    inbox = WebhookInbox()
    with served_sandbox(
        tmp_path, webhook_url=f"http://lanebot.test{WEBHOOK_PATH}", webhook_secret=SECRET, webhook_client=inbox.client()
    ) as server:
        (tmp_path / "hello-world").mkdir()
        files = {"README.md": "# Hello\n", "greeting.txt": "hello\n", ".github/lanebot.yml": CONFIG}
        repository = SandboxRepository.create(server, tmp_path / "hello-world", REPO, files, private=False)
        with contextlib.closing(repository):
            settings = make_settings(str(engine.url), workdir=tmp_path / "work", github_api_url=server.url)
            app_github = GitHubApp(settings)
            app = create_app(settings, engine=engine, github=app_github)
            try:
                async with running(app) as client:
                    world = World(app, client, repository, inbox)
                    await world.settled()
                    repository.open_issue("Greet people", ISSUE_BODY, login=MAINTAINER, labels=["lanebot"])
                    await world.settled()
                    repository.human.comment(REPO, 1, login=MAINTAINER, body="/approve")
                    await world.settled()
                    assert world.pull()["pull_request"]["head"] == BRANCH
                    yield world
            finally:
                await app_github.aclose()


def conflict_notes(world: World, number: int) -> list[str]:
    return [
        c["body"]
        for c in world.repository.comments(number)
        if c["by_app"] and "<!-- lanebot:base-conflict " in c["body"]
    ]


async def test_a_pull_request_that_came_to_conflict_with_main_is_said_so_once_and_offered_update(world):
    number = world.pull()["number"]
    world.repository.human.push(REPO, "main", {"greeting.txt": "hello from main\n"}, login=MAINTAINER)
    await world.settled()
    assert conflict_notes(world, number) == []  # nothing on the pull request moved yet

    world.repository.human.push(REPO, BRANCH, {"NOTES.md": "a note\n"}, login=MAINTAINER)  # synchronize
    await world.settled()

    [note] = conflict_notes(world, number)
    assert "now conflicts with `main`" in note and "Comment `/update`" in note and "resolver session" in note


async def test_update_on_the_pull_request_resolves_a_conflicting_main_and_pushes_a_verified_merge(world):
    number = world.pull()["number"]
    world.repository.human.push(REPO, "main", {"greeting.txt": "hello from main\n"}, login=MAINTAINER)
    await world.settled()

    world.repository.human.comment(REPO, number, login=MAINTAINER, body="/update")
    await world.settled()

    run = runs.run_for_pull(world.engine, REPO, number)
    [request] = [r for r in reviews.requests(world.engine, run.id) if r.kind == "update"]
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
    assert conflict_notes(world, number) == []  # lanebot's own push left it mergeable: nothing to say


async def test_update_from_someone_who_may_not_command_lanebot_is_refused(world):
    number = world.pull()["number"]
    world.repository.human.comment(REPO, number, login="mallory", body="/update")
    await world.settled()

    run = runs.run_for_pull(world.engine, REPO, number)
    assert [r for r in reviews.requests(world.engine, run.id) if r.kind == "update"] == []
