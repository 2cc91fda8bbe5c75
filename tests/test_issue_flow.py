"""From a labelled issue or a `/plan` comment to a gate comment, and every command answered.

The real app runs (intake, dispatcher, background jobs) and gets GitHub's real example payloads
(/work/shared/github/webhooks), changed only where a test must: the comment body, the label name,
the commenter's login and type, the comment id (GitHub gives every comment its own), and the
`installation` a GitHub App's deliveries carry. GitHub is mocked at the HTTP level (respx) by
`FakeGitHub`, which keeps the issue's comments, labels and reactions as GitHub would and answers
with bodies shaped like GitHub's documentation. The repository is a real bare git repository on
disk (its `clone_url`), and the planner is a real subprocess: the `command` adapter running
`PLANNER` below, configured by the host's workflow (argv) and the repository's
`.github/lanebot.yml` (served through the contents API).
"""

from __future__ import annotations

import asyncio
import base64
import html
import copy
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import httpx
import pytest
import respx
import yaml

from gidgethub import sansio
from sqlmodel import col, select

from bot.app import create_app
from bot.dispatcher import HandlerContext
from bot.github.client import GitHubApp
from bot.handlers import router
from bot.jobs import BUILD_UNAVAILABLE, Jobs
from bot.labels import is_state_label
from bot.store import db, deliveries, runs
from bot.store.models import Run
from tests.app_helpers import PAYLOADS, TEST_INSTALLATION, make_settings, post_delivery, running, settle

pytestmark = pytest.mark.anyio

API = "https://api.github.com"
REPO = "Codertocat/Hello-World"
ISSUE = 1
WAIT_LIMIT_SECONDS = 30  # a hang guard, not a timing assertion
WORKFLOWS = Path(__file__).resolve().parents[1] / "workflows"

GATE = re.compile(r"\A<!-- lanebot:gate run=(\d+) rev=(\d+)( superseded=\d+)? -->")

# The planner agent: a real executable. It records every prompt it gets, then writes a plan to
# .lanebot/units.jsonl as the plan prompt asks. What it writes depends on $state/mode:
#   valid          a two-unit plan; a one-unit plan when a maintainer's feedback asks for one
#   invalid-twice  a plan whose files overlap, twice, then the valid plan
#   never          a plan with a cycle, every time
PLANNER = textwrap.dedent('''\
    import json, pathlib, sys
    state = pathlib.Path(sys.argv[1])
    prompt = sys.stdin.read()
    prompts = state / "prompts"
    prompts.mkdir(exist_ok=True)
    attempt = len(list(prompts.iterdir())) + 1
    (prompts / f"{attempt:02d}.md").write_text(prompt)
    mode = (state / "mode").read_text().strip()
    lexer = {"id": "lexer", "title": "Tokens for the new syntax", "needs": [], "files": "^src/lexer\\\\.py$",
             "check": "python -m pytest tests/test_lexer.py -q", "brief": "Add the tokens to src/lexer.py."}
    parser = {"id": "parser", "title": "Parse the new syntax", "needs": ["lexer"],
              "files": "^(src/parser\\\\.py|tests/test_parser\\\\.py)$",
              "check": "python -m pytest tests/test_parser.py -q", "brief": "Parse it in src/parser.py."}
    whole = {"id": "whole", "title": "Everything at once", "needs": [], "files": "^(src|tests)/",
             "check": "python -m pytest -q", "brief": "Do the whole issue."}
    if mode == "never":
        plan = [dict(lexer, needs=["parser"]), parser]
    elif mode == "invalid-twice" and attempt <= 2:
        plan = [dict(lexer, files="^src/"), parser]
    elif "## Feedback from a maintainer" in prompt:
        plan = [whole]
    else:
        plan = [lexer, parser]
    out = pathlib.Path(".lanebot")
    out.mkdir(exist_ok=True)
    (out / "units.jsonl").write_text("".join(json.dumps(unit) + "\\n" for unit in plan))
    print(json.dumps({"type": "result", "result": f"wrote {len(plan)} units"}))
''')

HAND_PLAN = textwrap.dedent('''\
    /plan

    ```lanebot-plan
    {"id": "docs", "title": "Document the syntax", "needs": [], "files": "^README\\\\.md$", "check": "test -s README.md", "brief": "Describe it in README.md."}
    ```
''')


# --------------------------------------------------------------------------- GitHub, mocked


def _user(login: str, kind: str = "User") -> dict[str, Any]:
    return {"login": login, "id": abs(hash(login)) % 10**8, "node_id": "MDQ6VXNlcjE=", "type": kind,
            "site_admin": False, "avatar_url": f"https://avatars.githubusercontent.com/u/{login}",
            "url": f"{API}/users/{login}", "html_url": f"https://github.com/{login}"}


_FLAGS = {
    "admin": dict(admin=True, maintain=True, push=True, triage=True, pull=True),
    "maintain": dict(admin=False, maintain=True, push=True, triage=True, pull=True),
    "write": dict(admin=False, maintain=False, push=True, triage=True, pull=True),
    "read": dict(admin=False, maintain=False, push=False, triage=False, pull=True),
}


class FakeGitHub:
    """One repository and one issue as GitHub keeps them, behind GitHub's REST endpoints."""

    def __init__(self, mock: respx.MockRouter, *, clone_url: str, issue: dict[str, Any], config: str | None) -> None:
        self.issue = issue
        self.clone_url = clone_url
        self.config = config
        self.roles: dict[str, str] = {"Codertocat": "admin", "reader": "read"}
        self.comments: list[dict[str, Any]] = []
        self.repo_labels: dict[str, dict[str, Any]] = {"bug": self._label("bug", "d73a4a", "Something isn't working")}
        self.issue_labels: list[str] = [label["name"] for label in issue["labels"]]
        self.reactions: list[tuple[int, str]] = []
        self.lose_answer_to_first_gate_post = False
        self._next_id = 9000
        base = f"{API}/repos/{REPO}"
        mock.post(url__regex=rf"{API}/app/installations/\d+/access_tokens").respond(
            201, json={"token": "ghs_16C7e42F292c6912E7710c838347Ae178B4a", "expires_at": "2099-01-01T00:00:00Z",
                       "permissions": {"issues": "write", "contents": "write"}, "repository_selection": "selected"})
        self.contents = mock.get(url__regex=rf"{API}/repos/[^/]+/[^/]+/contents/.+").mock(side_effect=self._contents)
        self.permissions = mock.get(url__regex=rf"{base}/collaborators/[^/]+/permission").mock(side_effect=self._permission)
        mock.get(base).mock(side_effect=lambda _: httpx.Response(200, json=self._repository()))
        mock.get(f"{base}/issues/{ISSUE}").mock(side_effect=lambda _: httpx.Response(200, json=self.issue))
        mock.get(url__regex=rf"{base}/issues/{ISSUE}/comments(\?.*)?$").mock(
            side_effect=lambda _: httpx.Response(200, json=self.comments))
        self.comment_posts = mock.post(f"{base}/issues/{ISSUE}/comments").mock(side_effect=self._create_comment)
        mock.get(url__regex=rf"{base}/issues/comments/\d+$").mock(side_effect=self._get_comment)
        mock.patch(url__regex=rf"{base}/issues/comments/\d+$").mock(side_effect=self._edit_comment)
        mock.post(url__regex=rf"{base}/issues/comments/\d+/reactions$").mock(side_effect=self._react)
        mock.get(url__regex=rf"{base}/labels(\?.*)?$").mock(
            side_effect=lambda _: httpx.Response(200, json=list(self.repo_labels.values())))
        mock.post(f"{base}/labels").mock(side_effect=self._create_label)
        mock.get(url__regex=rf"{base}/issues/{ISSUE}/labels(\?.*)?$").mock(
            side_effect=lambda _: httpx.Response(200, json=self._labels_of_issue()))
        mock.post(f"{base}/issues/{ISSUE}/labels").mock(side_effect=self._add_labels)
        mock.delete(url__regex=rf"{base}/issues/{ISSUE}/labels/.+").mock(side_effect=self._remove_label)

    # -- what the tests read

    def lanebot_comments(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [c for c in self.comments if c["user"]["type"] == "Bot"
                and (kind is None or c["body"].startswith(f"<!-- lanebot:{kind} "))]

    def gates(self) -> list[dict[str, Any]]:
        return self.lanebot_comments("gate")

    def answers(self) -> list[str]:
        return [c["body"] for c in self.lanebot_comments("answer")]

    def state_labels(self) -> list[str]:
        return [name for name in self.issue_labels if is_state_label(name)]

    # -- the endpoints

    def _next(self) -> int:
        self._next_id += 1
        return self._next_id

    @staticmethod
    def _label(name: str, color: str = "ededed", description: str | None = None) -> dict[str, Any]:
        return {"id": abs(hash(name)) % 10**9, "node_id": "LA_kwDO", "url": f"{API}/repos/{REPO}/labels/{name}",
                "name": name, "color": color, "default": False, "description": description}

    def _repository(self) -> dict[str, Any]:
        return {"id": 186853002, "node_id": "MDEwOlJlcG9zaXRvcnkxODY4NTMwMDI=", "name": "Hello-World",
                "full_name": REPO, "private": False, "owner": _user("Codertocat"),
                "html_url": f"https://github.com/{REPO}", "clone_url": self.clone_url,
                "default_branch": "main", "visibility": "public"}

    def _contents(self, request: httpx.Request) -> httpx.Response:
        if self.config is None or not request.url.path.startswith(f"/repos/{REPO}/contents/.github/lanebot.yml"):
            return httpx.Response(404, json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
        content = base64.b64encode(self.config.encode()).decode()
        return httpx.Response(200, json={"type": "file", "encoding": "base64", "size": len(self.config),
                                         "name": "lanebot.yml", "path": ".github/lanebot.yml", "content": content,
                                         "sha": "3d21ec53a331a6f037a91c368710b99387d012c1"})

    def _permission(self, request: httpx.Request) -> httpx.Response:
        login = request.url.path.split("/")[-2]
        role = self.roles.get(login)
        if role is None:
            return httpx.Response(404, json={"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
        folded = {"maintain": "write"}.get(role, role)
        return httpx.Response(200, json={"permission": folded, "role_name": role,
                                         "user": {**_user(login), "permissions": _FLAGS[role], "role_name": role}})

    def _comment(self, comment_id: int) -> dict[str, Any] | None:
        return next((c for c in self.comments if c["id"] == comment_id), None)

    def _create_comment(self, request: httpx.Request) -> httpx.Response:
        number = self._next()
        body = json.loads(request.content)["body"]
        comment = {"id": number, "node_id": f"IC_{number}", "body": body, "user": _user("lanebot[bot]", "Bot"),
                   "url": f"{API}/repos/{REPO}/issues/comments/{number}",
                   "html_url": f"https://github.com/{REPO}/issues/{ISSUE}#issuecomment-{number}",
                   "issue_url": f"{API}/repos/{REPO}/issues/{ISSUE}", "author_association": "NONE",
                   "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}
        self.comments.append(comment)
        if self.lose_answer_to_first_gate_post and GATE.match(body):
            self.lose_answer_to_first_gate_post = False
            raise httpx.ReadTimeout("GitHub created the comment; its answer was lost", request=request)
        return httpx.Response(201, json=comment)

    def _get_comment(self, request: httpx.Request) -> httpx.Response:
        comment = self._comment(int(request.url.path.rsplit("/", 1)[1]))
        if comment is None:
            return httpx.Response(404, json={"message": "Not Found"})
        return httpx.Response(200, json=comment)

    def _edit_comment(self, request: httpx.Request) -> httpx.Response:
        comment = self._comment(int(request.url.path.rsplit("/", 1)[1]))
        assert comment is not None
        comment["body"] = json.loads(request.content)["body"]
        return httpx.Response(200, json=comment)

    def _react(self, request: httpx.Request) -> httpx.Response:
        comment_id = int(request.url.path.split("/")[-2])
        content = json.loads(request.content)["content"]
        self.reactions.append((comment_id, content))
        return httpx.Response(201, json={"id": len(self.reactions), "node_id": "REA_lADO", "content": content,
                                         "user": _user("lanebot[bot]", "Bot"), "created_at": "2026-01-01T00:00:00Z"})

    def _create_label(self, request: httpx.Request) -> httpx.Response:
        spec = json.loads(request.content)
        if spec["name"].casefold() in {name.casefold() for name in self.repo_labels}:
            return httpx.Response(422, json={"message": "Validation Failed", "errors": [
                {"resource": "Label", "code": "already_exists", "field": "name"}]})
        self.repo_labels[spec["name"]] = self._label(spec["name"], spec["color"], spec["description"])
        return httpx.Response(201, json=self.repo_labels[spec["name"]])

    def _labels_of_issue(self) -> list[dict[str, Any]]:
        return [self.repo_labels.get(name) or self._label(name) for name in self.issue_labels]

    def _add_labels(self, request: httpx.Request) -> httpx.Response:
        for name in json.loads(request.content)["labels"]:
            self.repo_labels.setdefault(name, self._label(name))  # GitHub creates a label it lacks
            if name not in self.issue_labels:
                self.issue_labels.append(name)
        return httpx.Response(200, json=self._labels_of_issue())

    def _remove_label(self, request: httpx.Request) -> httpx.Response:
        name = unquote(request.url.raw_path.decode().split("/")[-1])
        if name not in self.issue_labels:
            return httpx.Response(404, json={"message": "Label does not exist"})
        self.issue_labels.remove(name)
        return httpx.Response(200, json=self._labels_of_issue())


# --------------------------------------------------------------------------- payloads


def _payload(path: str) -> dict[str, Any]:
    payload = json.loads((PAYLOADS / path).read_text())
    payload["installation"] = dict(TEST_INSTALLATION)
    return payload


_COMMENT_IDS = iter(range(5000, 10**6))


def comment_created(body: str, *, login: str = "Codertocat", kind: str = "User") -> dict[str, Any]:
    payload = _payload("issue_comment/created.payload.json")
    payload["comment"]["id"] = next(_COMMENT_IDS)
    payload["comment"]["body"] = body
    payload["comment"]["user"]["login"] = login
    payload["comment"]["user"]["type"] = kind
    return payload


def comment_edited(body: str) -> dict[str, Any]:
    payload = _payload("issue_comment/edited.payload.json")
    payload["comment"]["body"] = body
    return payload


def labeled(name: str, *, login: str = "Codertocat") -> dict[str, Any]:
    payload = _payload("issues/labeled.payload.json")
    payload["label"]["name"] = name
    payload["sender"]["login"] = login
    return payload


# --------------------------------------------------------------------------- the world


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
                   cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository on "GitHub": a bare repository with a few files on `main`."""
    root = tmp_path_factory.mktemp("origin")
    work = root / "work"
    for path, text in {"README.md": "# Hello\n", "src/lexer.py": "TOKENS = []\n", "src/parser.py": "def parse(): ...\n",
                       "tests/test_parser.py": "def test_parse(): ...\n"}.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    _git("init", "--quiet", "--initial-branch=main", cwd=work)
    _git("add", "--all", cwd=work)
    _git("commit", "--quiet", "-m", "first", cwd=work)
    _git("clone", "--quiet", "--bare", str(work), str(root / "hello-world.git"), cwd=root)
    return root / "hello-world.git"


@pytest.fixture
def planner_state(tmp_path: Path) -> Path:
    state = tmp_path / "planner-state"
    state.mkdir()
    (state / "mode").write_text("valid")
    return state


@pytest.fixture
def host_workflows(tmp_path: Path, planner_state: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host's workflow: the defaults, with the command agent's argv set (a host-only key)."""
    folder = tmp_path / "workflows"
    shutil.copytree(WORKFLOWS, folder)
    script = tmp_path / "planner.py"
    script.write_text(PLANNER)
    workflow_file = folder / "resolve-issue.yaml"
    data = yaml.safe_load(workflow_file.read_text())
    data["agents"]["command"]["argv"] = [sys.executable, str(script), str(planner_state)]
    workflow_file.write_text(yaml.safe_dump(data))
    monkeypatch.setenv("LANEBOT_WORKFLOWS_DIR", str(folder))
    return folder


REPOSITORY_CONFIG = "plan:\n  agent: command\n  max_retries: 2\n"


class World:
    """The running app, GitHub behind it, and the planner's record of what it was asked."""

    def __init__(self, app: Any, client: httpx.AsyncClient, github: FakeGitHub, planner_state: Path) -> None:
        self.app = app
        self.client = client
        self.github = github
        self.planner_state = planner_state
        self.engine = app.state.engine

    async def send(self, event: str, payload: dict[str, Any]) -> None:
        response = await post_delivery(self.client, event, payload)
        assert response.status_code == 202, response.text

    async def settled(self) -> None:
        """Every delivery handled and every background job finished, none of them failed."""
        with anyio.fail_after(WAIT_LIMIT_SECONDS):
            await settle(self.app)
            await self.app.state.jobs.wait_idle()
        failed = [(row.event, row.error) for row in deliveries.list_recent(self.engine, 500) if row.status != "processed"]
        assert failed == []
        problems = [(event.kind, event.data) for run in self.runs() for event in runs.run_events(self.engine, run.id)
                    if event.kind == "job_failed"]
        assert problems == []

    async def step(self, event: str, payload: dict[str, Any]) -> None:
        await self.send(event, payload)
        await self.settled()

    def runs(self) -> list[Run]:
        with db.session(self.engine) as session:
            return list(session.exec(select(Run).order_by(col(Run.id))).all())

    def run(self) -> Any:
        return self.runs()[-1]

    def prompts(self) -> list[str]:
        folder = self.planner_state / "prompts"
        return [path.read_text() for path in sorted(folder.iterdir())] if folder.exists() else []

    def set_planner(self, mode: str) -> None:
        (self.planner_state / "mode").write_text(mode)


@pytest.fixture
async def world(engine, tmp_path, origin, host_workflows, planner_state) -> AsyncIterator[World]:
    settings = make_settings(str(engine.url), workdir=tmp_path / "work")
    issue = copy.deepcopy(_payload("issue_comment/created.payload.json")["issue"])

    async def no_sleep(_seconds: float) -> None:
        await asyncio.sleep(0)

    with respx.mock(base_url=API, assert_all_called=False) as mock:
        github = FakeGitHub(mock, clone_url=str(origin), issue=issue, config=REPOSITORY_CONFIG)
        app_github = GitHubApp(settings, sleep=no_sleep)
        app = create_app(settings, engine=engine, github=app_github)
        try:
            async with running(app) as client:
                yield World(app, client, github, planner_state)
        finally:
            await app_github.aclose()


def assert_state_label(world: World, expected: str | None) -> None:
    """The issue holds exactly the one state label of its run's state (none when it has ended)."""
    assert world.github.state_labels() == ([expected] if expected else [])


# --------------------------------------------------------------------------- planning


async def test_the_trigger_label_plans_the_issue_and_posts_one_gate_comment(world):
    await world.step("issues", labeled("lanebot"))

    run = world.run()
    assert (run.state, run.plan_revision, run.requested_by) == ("awaiting_approval", 1, "Codertocat")
    [gate] = world.github.gates()
    assert GATE.match(gate["body"]).groups()[:2] == (str(run.id), "1")
    assert "```mermaid" in gate["body"] and "`/approve`" in gate["body"]
    assert run.gate_comment_id == gate["id"]
    assert_state_label(world, "lanebot:awaiting-approval")
    assert {"lanebot:planning", "lanebot:running", "lanebot:failed"} <= world.github.repo_labels.keys()
    assert world.github.repo_labels["lanebot:planning"]["color"] != "ededed"  # created with its colour
    [prompt] = world.prompts()
    assert "Tokens for the new syntax" not in prompt and "src/lexer.py" in prompt  # tracked paths reached it


async def test_the_trigger_label_added_by_a_reader_is_answered_and_plans_nothing(world):
    await world.step("issues", labeled("lanebot", login="reader"))
    assert world.runs() == []
    [answer] = world.github.answers()
    assert "@reader: `label lanebot`: commanding lanebot here needs the write role or higher" in answer


async def test_another_label_or_lanebots_own_state_label_plans_nothing(world):
    await world.step("issues", labeled("bug"))
    await world.step("issues", labeled("lanebot:planning"))
    assert world.runs() == [] and world.github.comments == []


async def test_a_plan_that_fails_validation_twice_then_passes_gets_one_gate_comment(world):
    world.set_planner("invalid-twice")
    plan = comment_created("/plan")
    await world.step("issue_comment", plan)

    assert world.run().state == "awaiting_approval"
    assert len(world.github.gates()) == 1
    prompts = world.prompts()
    assert len(prompts) == 3
    sessions = runs.sessions(world.engine, world.run().id)
    assert [(s.kind, s.attempt, s.status) for s in sessions] == [("plan", 1, "succeeded"), ("plan", 2, "succeeded"),
                                                               ("plan", 3, "succeeded")]
    assert all(s.pid and s.ended_at and s.transcript_path.endswith(f"plan-attempt-{s.attempt}.jsonl")
               for s in sessions)
    refused = "## Your previous attempt was refused"
    assert refused not in prompts[0]
    overlap = "unit 'lexer': files '^src/' overlaps unit 'parser'"
    assert all(refused in prompt and overlap in prompt.split(refused)[1] for prompt in prompts[1:])
    assert world.github.reactions == [(plan["comment"]["id"], "eyes")]
    assert_state_label(world, "lanebot:awaiting-approval")


async def test_a_planner_that_never_produces_a_valid_plan_fails_the_run_with_every_error(world):
    world.set_planner("never")
    await world.step("issue_comment", comment_created("/plan"))

    run = world.run()
    assert run.state == "failed" and "lexer -> parser -> lexer" in run.error
    assert len(world.prompts()) == 3  # 1 + plan.max_retries
    assert world.github.gates() == []
    [failed] = world.github.lanebot_comments("plan-failed")
    assert "after 3 attempts" in failed["body"] and "lexer -&gt; parser -&gt; lexer" in failed["body"]
    assert_state_label(world, "lanebot:failed")


async def test_a_hand_written_plan_in_the_plan_comment_is_gated_without_any_agent_session(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))

    run = world.run()
    assert run.state == "awaiting_approval"
    assert world.prompts() == []
    assert runs.sessions(world.engine, run.id) == []
    [gate] = world.github.gates()
    assert "written by hand" in gate["body"] and "docs" in gate["body"]
    assert runs.latest_plan(world.engine, run.id).source == "hand"
    assert_state_label(world, "lanebot:awaiting-approval")


async def test_a_lost_answer_to_the_gate_post_does_not_make_a_second_gate(world):
    world.github.lose_answer_to_first_gate_post = True
    await world.step("issue_comment", comment_created(HAND_PLAN))

    [gate] = world.github.gates()
    gate_posts = [call for call in world.github.comment_posts.calls
                  if GATE.match(json.loads(call.request.content)["body"])]
    assert len(gate_posts) == 1  # the marker was looked for before posting again
    assert world.run().gate_comment_id == gate["id"]


async def test_a_broken_repository_configuration_answers_with_its_problems(world):
    world.github.config = "plan:\n  max_unit: 3\n"
    await world.step("issue_comment", comment_created("/plan"))
    assert world.runs() == []
    [answer] = world.github.answers()
    assert "@Codertocat: `/plan`: lanebot cannot read this repository's settings" in answer
    assert "plan.max_unit: unknown key; did you mean max_units?" in html.unescape(answer)


# --------------------------------------------------------------------------- who may command


async def test_approve_by_a_reader_is_refused_with_a_reply_quoting_it_and_nothing_else(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    reactions_before = list(world.github.reactions)

    await world.step("issue_comment", comment_created("/approve  please", login="reader"))

    assert world.run().state == "awaiting_approval"
    [answer] = world.github.answers()
    assert "@reader: `/approve  please`:" in answer
    assert "needs the write role or higher, and your role is read" in answer
    assert "Valid now, for a run that is awaiting approval: `/approve`" in answer
    assert world.github.reactions == reactions_before
    assert_state_label(world, "lanebot:awaiting-approval")


async def test_approve_by_a_bot_is_ignored_without_asking_github_anything(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    asked, comments = world.github.permissions.call_count, len(world.github.comments)

    await world.step("issue_comment", comment_created("/approve", login="helper-app[bot]", kind="Bot"))

    assert world.run().state == "awaiting_approval"
    assert (world.github.permissions.call_count, len(world.github.comments)) == (asked, comments)


async def test_approve_in_an_edited_comment_is_ignored(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    comments = len(world.github.comments)

    await world.step("issue_comment", comment_edited("/approve"))

    assert world.run().state == "awaiting_approval" and len(world.github.comments) == comments


# --------------------------------------------------------------------------- approving


class RecordingOrchestrator:
    """Stands where bot.orchestrator will: notes which runs it was asked to drive or cancel."""

    def __init__(self) -> None:
        self.driven: list[int] = []
        self.cancelled: list[int] = []
        self.retried: list[tuple[int, str | None]] = []

    async def drive(self, context: Any, run_id: int) -> None:
        self.driven.append(run_id)

    async def cancel(self, context: Any, run_id: int) -> None:
        self.cancelled.append(run_id)

    async def retry(self, context: Any, run_id: int, unit: str | None) -> None:
        self.retried.append((run_id, unit))


async def test_twenty_approvals_at_once_move_the_run_once_and_start_one_build(world):
    orchestrator = world.app.state.jobs.orchestrator = RecordingOrchestrator()
    await world.step("issue_comment", comment_created(HAND_PLAN))

    await asyncio.gather(*(world.send("issue_comment", comment_created("/approve")) for _ in range(20)))
    await world.settled()

    run = world.run()
    assert (run.state, run.approved_revision) == ("running", 1)
    moves = [event.payload() for event in runs.run_events(world.engine, run.id) if event.kind == "state"]
    assert moves.count({"from": "awaiting_approval", "to": "running"}) == 1
    assert orchestrator.driven == [run.id]
    answers = world.github.answers()
    assert len(answers) == 19 and all("cannot approve a run that is running" in answer for answer in answers)
    assert len(world.github.reactions) == 21  # /plan, then every /approve was seen
    assert_state_label(world, "lanebot:running")


async def test_approvals_handled_concurrently_are_decided_by_the_database(world):
    orchestrator = world.app.state.jobs.orchestrator = RecordingOrchestrator()
    await world.step("issue_comment", comment_created(HAND_PLAN))

    events = [sansio.Event(comment_created("/approve"), event="issue_comment", delivery_id=f"direct-{n}")
              for n in range(20)]
    context = world.app.state.jobs.context
    await asyncio.gather(*(router.dispatch(event, context=context) for event in events))
    await world.settled()

    moves = [event.payload() for event in runs.run_events(world.engine, world.run().id) if event.kind == "state"]
    assert moves.count({"from": "awaiting_approval", "to": "running"}) == 1
    assert orchestrator.driven == [world.run().id]


async def test_retry_names_a_failed_lane_and_is_handed_to_the_orchestrator(world):
    orchestrator = world.app.state.jobs.orchestrator = RecordingOrchestrator()
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/retry docs"))  # not blocked yet
    run = world.run()
    [lane] = runs.create_lanes(world.engine, run.id, [["docs"]])
    await world.step("issue_comment", comment_created("/approve"))
    assert runs.set_lane_state(world.engine, lane.id, "pending", "running")
    assert runs.set_lane_state(world.engine, lane.id, "running", "failed", failure="check failed")
    assert runs.transition(world.engine, run.id, "running", "blocked")

    await world.step("issue_comment", comment_created("/retry parser"))
    await world.step("issue_comment", comment_created("/retry docs"))

    not_blocked, unknown = world.github.answers()
    assert "cannot retry a run that is awaiting approval" in not_blocked
    assert "no failed lane is named parser; failed lanes: docs" in unknown
    assert orchestrator.retried == [(run.id, "docs")]


async def test_cancel_of_a_building_run_asks_the_orchestrator_to_stop_it(world):
    orchestrator = world.app.state.jobs.orchestrator = RecordingOrchestrator()
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/approve"))
    await world.step("issue_comment", comment_created("/cancel"))
    assert world.run().state == "cancelled" and orchestrator.cancelled == [world.run().id]
    assert_state_label(world, None)


async def test_without_an_orchestrator_an_approved_run_records_that_no_build_is_available(world):
    world.app.state.jobs.orchestrator = "bot.no_such_orchestrator_module"
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/approve"))

    run = world.run()
    assert run.state == "running"
    [event] = [e for e in runs.run_events(world.engine, run.id) if e.kind == BUILD_UNAVAILABLE]
    assert event.payload()["message"].startswith("build not available")


# --------------------------------------------------------------------------- replanning and the rest


async def test_replan_sends_the_feedback_and_previous_plan_to_the_planner_and_supersedes_the_old_gate(world):
    await world.step("issue_comment", comment_created("/plan"))
    assert_state_label(world, "lanebot:awaiting-approval")
    [first_gate] = world.github.gates()

    await world.step("issue_comment", comment_created("/replan Keep it to one unit, please."))

    run = world.run()
    assert (run.state, run.plan_revision) == ("awaiting_approval", 2)
    prompt = world.prompts()[-1]
    feedback = prompt.split("## Feedback from a maintainer")[1]
    assert "Keep it to one unit, please." in feedback
    previous = prompt.split("## The plan being replaced")[1].split("## Feedback")[0]
    assert '"id": "lexer"' in previous and '"id": "parser"' in previous
    old, new = world.github.gates()
    assert old["id"] == first_gate["id"]
    assert old["body"].startswith(f"<!-- lanebot:gate run={run.id} rev=1 superseded=2 -->")
    assert "Superseded" in old["body"] and "`/approve`" not in old["body"].split("lanebot:commands")[-1]
    assert GATE.match(new["body"]).groups()[:2] == (str(run.id), "2") and "whole" in new["body"]
    assert run.gate_comment_id == new["id"]
    assert runs.latest_plan(world.engine, run.id).feedback == "Keep it to one unit, please."
    assert_state_label(world, "lanebot:awaiting-approval")


async def test_reject_ends_the_run_removes_the_state_label_and_lets_a_new_plan_start(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/reject too big"))
    assert world.run().state == "rejected"
    assert_state_label(world, None)

    await world.step("issue_comment", comment_created(HAND_PLAN))
    assert [run.state for run in world.runs()] == ["rejected", "awaiting_approval"]
    assert_state_label(world, "lanebot:awaiting-approval")


async def test_cancel_stops_the_run_and_a_command_not_valid_now_gets_the_lifecycles_answer(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/cancel"))
    assert world.run().state == "cancelled"
    assert_state_label(world, None)

    await world.step("issue_comment", comment_created("/approve"))
    [answer] = world.github.answers()
    assert "@Codertocat: `/approve`: cannot approve a run that is cancelled." in answer
    assert "`/plan [notes]`" in answer


async def test_plan_while_a_run_is_active_answers_with_its_state(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/plan again"))
    assert len(world.runs()) == 1
    [answer] = world.github.answers()
    assert "cannot plan a run that is awaiting approval" in answer and "`/approve`" in answer


async def test_status_and_help_answer_with_the_runs_state_and_the_commands_valid_now(world):
    await world.step("issue_comment", comment_created("/status"))
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/status\n/help"))

    no_run, status, help_answer = world.github.answers()
    assert "This issue has no lanebot run" in no_run
    assert f"**Run {world.run().id}** is awaiting approval · plan revision 1." in status
    assert "@Codertocat: **lanebot commands** valid now, for a run that is awaiting approval" in help_answer
    assert "`/approve`" in help_answer


async def test_an_unknown_command_and_a_missing_argument_are_answered_with_the_problem(world):
    await world.step("issue_comment", comment_created(HAND_PLAN))
    await world.step("issue_comment", comment_created("/aprove\n/replan"))

    typo, usage = world.github.answers()
    assert "@Codertocat: `/aprove`:" in typo and "did you mean" in typo and "/approve" in typo
    assert "@Codertocat: `/replan`:" in usage and "needs its feedback" in usage
    assert world.run().state == "awaiting_approval"


async def test_fix_on_an_issue_is_answered_as_invalid(world):
    await world.step("issue_comment", comment_created("/fix the tests"))
    [answer] = world.github.answers()
    assert "@Codertocat: `/fix the tests`:" in answer and "pull request" in answer
    assert world.runs() == []


async def test_a_comment_without_commands_costs_no_request(world):
    await world.step("issue_comment", comment_created("Thanks, looks good to me."))
    assert world.github.permissions.call_count == 0 and world.github.contents.call_count == 0


async def test_a_run_left_in_planning_by_a_restart_is_planned_again_at_start_up(world):
    run = runs.create_run(world.engine, installation_id=TEST_INSTALLATION["id"], repository=REPO,
                          issue_number=ISSUE, requested_by="Codertocat")
    await world.app.state.jobs.resume()
    await world.settled()
    assert runs.get_run(world.engine, run.id).state == "awaiting_approval"
    assert len(world.github.gates()) == 1


async def test_a_plan_step_that_cannot_fetch_the_repository_fails_the_run_without_showing_the_details(world, tmp_path):
    world.github.clone_url = str(tmp_path / "no-such-repository.git")
    await world.step("issue_comment", comment_created("/plan"))

    run = world.run()
    assert run.state == "failed" and "GitError" in run.error and "no-such-repository" in run.error
    [failed] = world.github.lanebot_comments("plan-failed")
    assert "an internal error stopped it" in failed["body"] and "GitError" in failed["body"]
    assert "no-such-repository" not in failed["body"] and str(tmp_path) not in failed["body"]
    assert_state_label(world, "lanebot:failed")


# --------------------------------------------------------------------------- the background jobs


class GatedOrchestrator:
    """An orchestrator whose `drive` waits until the test lets it finish; it records overlaps."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, Any]] = []
        self.release = asyncio.Event()
        self.active = 0
        self.most_at_once = 0

    async def _work(self, name: str, run_id: int, argument: Any = None) -> None:
        self.calls.append((name, run_id, argument))
        self.active += 1
        self.most_at_once = max(self.most_at_once, self.active)
        try:
            await self.release.wait()
        finally:
            self.active -= 1

    async def drive(self, context: Any, run_id: int) -> None:
        await self._work("drive", run_id)

    async def retry(self, context: Any, run_id: int, unit: str | None) -> None:
        await self._work("retry", run_id, unit)

    async def cancel(self, context: Any, run_id: int) -> None:
        self.calls.append(("cancel", run_id, None))


def _jobs(orchestrator: Any) -> Jobs:
    return Jobs(HandlerContext(engine=None, github=None, settings=None), orchestrator=orchestrator)


async def test_requests_for_a_run_whose_job_is_running_are_coalesced_into_one_more_pass():
    orchestrator = GatedOrchestrator()
    jobs = _jobs(orchestrator)
    jobs.build(7)
    await asyncio.sleep(0)  # let the first pass start
    jobs.build(7)
    jobs.build(7)
    jobs.retry(7, "parser")  # the latest request is the one run next
    orchestrator.release.set()
    with anyio.fail_after(WAIT_LIMIT_SECONDS):
        await jobs.wait_idle()
    assert orchestrator.calls == [("drive", 7, None), ("retry", 7, "parser")]
    assert orchestrator.most_at_once == 1


async def test_jobs_of_different_runs_run_side_by_side():
    orchestrator = GatedOrchestrator()
    jobs = _jobs(orchestrator)
    jobs.build(1)
    jobs.build(2)
    await asyncio.sleep(0)
    assert sorted(jobs.running()) == [("build", 1), ("build", 2)] and orchestrator.most_at_once == 2
    orchestrator.release.set()
    await jobs.wait_idle()


async def test_stopping_cancels_running_jobs_and_starts_no_new_ones():
    orchestrator = GatedOrchestrator()
    jobs = _jobs(orchestrator)
    jobs.build(1)
    await asyncio.sleep(0)
    await jobs.stop()
    jobs.build(2)
    assert jobs.running() == [] and orchestrator.calls == [("drive", 1, None)] and orchestrator.active == 0


async def test_the_jobs_context_carries_the_jobs_for_handlers_and_the_orchestrator():
    jobs = _jobs(GatedOrchestrator())
    assert jobs.context.jobs is jobs
