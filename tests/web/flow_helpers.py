"""Lanebot's own pull request, end to end through the real app and the sandbox GitHub, for the tests of
what happens on it afterwards (tests/web/test_ci_fix_flow.py, tests/web/test_update_flow.py).

The real app (intake, dispatcher, background jobs, the orchestrator) runs against the sandbox served
from a thread, as in tests/web/test_issue_flow.py. A maintainer opens an issue carrying a one-unit
plan (unit `words`, which owns `greeting.txt`) and approves it; lanebot builds it and opens its pull
request from `lanebot/1`. The `command` agent is the test's script."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
from sqlalchemy.engine import Engine

from bot.core.names import integration_branch
from bot.edges.github.client import GitHubApp
from bot.edges.store import deliveries, reviews, runs
from bot.web.app import create_app
from tests.app_helpers import SECRET, WEBHOOK_PATH, make_settings, running, settle
from tests.lanes_helpers import make_workflow_dir, run_scripted_agent_plain
from tests.sandbox_helpers import SandboxRepository, WebhookInbox, served_sandbox

REPO = "Codertocat/Hello-World"
MAINTAINER = "Codertocat"  # owns the repository: admin
WAIT_LIMIT_SECONDS = 90  # a hang guard, not a timing assertion
BRANCH = integration_branch(1)


class World:
    """lanebot running, the sandbox behind it, and the pull request lanebot opened."""

    def __init__(self, app: Any, client: httpx.AsyncClient, repository: SandboxRepository, inbox: WebhookInbox):
        self.app, self.client, self.repository, self.inbox = app, client, repository, inbox
        self.engine = app.state.engine
        self.events: list[str] = []  # X-GitHub-Event of each delivery handed to lanebot, in order

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
                    self.events.append(headers["X-GitHub-Event"])
                    response = await self.client.post(WEBHOOK_PATH, content=body, headers=headers)
                    assert response.status_code == 202, response.text
        failed = [
            (row.event, row.error) for row in deliveries.list_recent(self.engine, 500) if row.status != "processed"
        ]
        assert failed == []

    async def delivered_until(self, condition: Callable[[], bool]) -> None:
        """Deliveries handed to lanebot as they come, without waiting for its jobs, until `condition`."""
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            while not condition():
                for headers, body in self.inbox.take():
                    self.events.append(headers["X-GitHub-Event"])
                    response = await self.client.post(WEBHOOK_PATH, content=body, headers=headers)
                    assert response.status_code == 202, response.text
                await anyio.sleep(0.05)

    async def push(self, branch: str, files: dict[str, str], *, login: str = MAINTAINER) -> dict[str, Any]:
        """A person's push of one commit of `files` onto `branch`, once all it set off has settled."""
        pushed = self.repository.human.push(REPO, branch, files, login=login)
        await self.settled()
        return pushed

    async def comment(self, number: int, body: str, *, login: str = MAINTAINER) -> None:
        """A person's comment on issue or pull request `number`, once all it set off has settled."""
        self.repository.human.comment(REPO, number, login=login, body=body)
        await self.settled()

    def pull(self) -> dict[str, Any]:
        [pull] = [p for p in self.repository.pulls() if p["state"] == "open"]
        return pull

    def head(self) -> str:
        head: str = self.pull()["pull_request"]["head_sha"]
        return head

    def requests(self, kind: str) -> list[Any]:
        """The run's review requests of `kind` (`ci`, `update`, ...), oldest first."""
        run = runs.run_for_pull(self.engine, REPO, self.pull()["number"])
        assert run is not None and run.id is not None
        return [request for request in reviews.requests(self.engine, run.id) if request.kind == kind]

    def lanebot_comments(self, kind: str) -> list[str]:
        """The bodies of lanebot's comments on the pull request marked `<!-- lanebot:{kind} ...`."""
        number = self.pull()["number"]
        return [
            c["body"] for c in self.repository.comments(number) if c["by_app"] and f"<!-- lanebot:{kind} " in c["body"]
        ]


W = TypeVar("W", bound=World)


def greeting_issue(brief: str) -> str:
    """An issue body carrying a one-unit plan: unit `words` owns greeting.txt, checked by its being there."""
    unit = {
        "id": "words",
        "title": "Greet",
        "needs": [],
        "files": r"^greeting\.txt$",
        "check": "test -f greeting.txt",
        "brief": brief,
    }
    return f"Greet people.\n\n~~~lanebot-plan\n{json.dumps(unit)}\n~~~\n"


@contextlib.asynccontextmanager
async def lanebot_world(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    world_type: type[W],
    agent: str,
    agent_args: list[str],
    files: dict[str, str],
) -> AsyncIterator[W]:
    """lanebot running against a sandbox repository holding `files` (its `.github/lanebot.yml`
    among them), nothing asked of it yet; `agent` (Python source, run with `agent_args`) is the
    `command` agent. The world is a `world_type`: World, or a test's own with more to ask."""
    script = tmp_path / "agent.py"
    script.write_text(agent)
    workflows = make_workflow_dir(tmp_path, {}, [sys.executable, str(script), *agent_args])
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(workflows))
    run_scripted_agent_plain(monkeypatch)  # the agents keep what they record outside their worktree
    inbox = WebhookInbox()
    with served_sandbox(
        tmp_path, webhook_url=f"http://lanebot.test{WEBHOOK_PATH}", webhook_secret=SECRET, webhook_client=inbox.client()
    ) as server:
        (tmp_path / "hello-world").mkdir()
        repository = SandboxRepository.create(server, tmp_path / "hello-world", REPO, files, private=False)
        with contextlib.closing(repository):
            settings = make_settings(str(engine.url), workdir=tmp_path / "work", github_api_url=server.url)
            app_github = GitHubApp(settings)
            app = create_app(settings, engine=engine, github=app_github)
            try:
                async with running(app) as client:
                    world = world_type(app, client, repository, inbox)
                    await world.settled()
                    yield world
            finally:
                await app_github.aclose()


@contextlib.asynccontextmanager
async def lanebots_pull_request(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    world_type: type[W],
    agent: str,
    agent_args: list[str],
    files: dict[str, str],
    brief: str,
) -> AsyncIterator[W]:
    """`lanebot_world` whose issue 1, planned with `brief`, lanebot has built to its open pull request."""
    async with lanebot_world(
        engine, tmp_path, monkeypatch, world_type=world_type, agent=agent, agent_args=agent_args, files=files
    ) as world:
        world.repository.open_issue("Greet people", greeting_issue(brief), login=MAINTAINER, labels=["lanebot"])
        await world.settled()
        await world.comment(1, "/approve")
        assert world.pull()["pull_request"]["head"] == BRANCH
        yield world
