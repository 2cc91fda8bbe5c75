"""The repository's own CI failing on lanebot's pull request, end to end through the sandbox GitHub.

The recipe agent builds an issue's one-unit plan, and lanebot opens its pull request
(tests/web/flow_helpers.py). Then the repository's CI (the sandbox's second App, GitHub Actions)
reports on the pull request's head through the human API, and the sandbox sends what GitHub sends:
`check_run` and `check_suite.completed`. Fix lanes run the `command` agent: `FIXER` below records
each prompt it gets and changes `greeting.txt`, a file the pull request changes, as an agent fixing
the failure would.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.edges.store import runs
from bot.edges.store.models import RunEvent
from bot.web.handlers.check_suite import (
    CI_BEFORE_PULL,
    ci_bot_login,
    heads_lanebot_pushed,
    lanebot_pull,
    last_pushed_head,
)
from tests.lanes_helpers import run_git
from tests.web.flow_helpers import BRANCH, MAINTAINER, REPO, World, greeting_issue, lanebot_world, lanebots_pull_request

pytestmark = pytest.mark.anyio
whole_run = pytest.mark.slow  # each builds an issue to its pull request first

FIXER = textwrap.dedent("""\
    import json, os, pathlib, sys
    prompts = pathlib.Path(sys.argv[1])
    prompts.mkdir(exist_ok=True)
    prompt = sys.stdin.read()
    number = len(list(prompts.iterdir())) + 1
    (prompts / f"{os.environ.get('LANEBOT_SESSION')}-{number:02d}.md").write_text(prompt)
    greeting = pathlib.Path("greeting.txt")
    greeting.write_text(greeting.read_text() + f"fixed {number}\\n")
    pathlib.Path(".lanebot").mkdir(exist_ok=True)
    report = {"summary": f"Made the greeting test pass (round {number}).", "addressed": [], "not_addressed": []}
    pathlib.Path(".lanebot/fix.json").write_text(json.dumps(report))
    print(json.dumps({"type": "result", "result": "fixed greeting.txt"}))
""")
CONFIG = textwrap.dedent("""\
    build:
      agent: recipe
      max_retries: 0
    integrate:
      agent: recipe
      verify: "test -f greeting.txt"
      max_retries: 0
    pull_request:
      draft: false
    fix:
      agent: command
      max_retries: 0
      timeout: 2m
    review:
      enabled: false
""")
BRIEF = "Write the file below.\n\n```text path=greeting.txt\nhello\n```"
ANNOTATION = {
    "path": "greeting.txt",
    "start_line": 1,
    "end_line": 1,
    "annotation_level": "failure",
    "message": "test_greeting: expected 'hello, world'",
}


def failing_tests(message: str = ANNOTATION["message"], *, name: str = "unit-tests") -> dict[str, Any]:
    return {
        "name": name,
        "conclusion": "failure",
        "output": {
            "title": "1 test failed",
            "summary": "test_greeting failed",
            "text": "collected 3 items\n...\nFAILED tests/test_greeting.py::test_greeting",
            "annotations": [dict(ANNOTATION, message=message)],
        },
    }


LINT = {"name": "lint", "conclusion": "success", "output": {"title": "clean", "summary": "No problems."}}


class FixWorld(World):
    """lanebot's pull request, the CI reporting on it, and the fixer's prompts."""

    prompts_dir: Path

    async def ci_reports(self, sha: str, *check_runs: dict[str, Any]) -> None:
        self.repository.human.report_ci(REPO, sha, list(check_runs))
        await self.settled()

    def fix_prompts(self) -> list[str]:
        folder = self.prompts_dir
        return [path.read_text() for path in sorted(folder.glob("fix-*.md"))] if folder.exists() else []


@pytest.fixture
async def world(engine, tmp_path, monkeypatch) -> AsyncIterator[FixWorld]:
    prompts = tmp_path / "fixer-prompts"
    async with lanebots_pull_request(
        engine,
        tmp_path,
        monkeypatch,
        world_type=FixWorld,
        agent=FIXER,
        agent_args=[str(prompts)],
        files={"README.md": "# Hello\n", ".github/lanebot.yml": CONFIG},
        brief=BRIEF,
    ) as world:
        world.prompts_dir = prompts
        yield world


@whole_run
async def test_failing_ci_on_lanebots_head_gets_two_fix_rounds_then_lanebot_stops_and_says_so(world):
    first = world.head()
    await world.ci_reports(first, failing_tests(), LINT)

    [prompt] = world.fix_prompts()
    assert "unit-tests" in prompt and "test_greeting: expected 'hello, world'" in prompt
    assert "greeting.txt:1 (failure)" in prompt and "FAILED tests/test_greeting.py::test_greeting" in prompt
    assert "lint" not in prompt.split("## What the CI reported")[1].split("## ")[0]  # only what failed
    second = world.head()
    assert second != first
    assert world.repository.sandbox.git.parent("Codertocat", "Hello-World", second) == first
    [answer] = world.lanebot_comments("review-request")
    assert "lanebot acted on failing CI" in answer and second[:7] in answer
    assert "Made the greeting test pass (round 1)." in answer

    await world.ci_reports(second, failing_tests("test_greeting: still wrong"))
    assert len(world.fix_prompts()) == 2 and "still wrong" in world.fix_prompts()[1]
    third = world.head()
    assert third != second

    await world.ci_reports(third, failing_tests("test_greeting: wrong again"))
    assert len(world.fix_prompts()) == 2 and world.head() == third
    [stop] = world.lanebot_comments("ci-stop")
    assert "2 fix rounds" in stop and "`/fix`" in stop
    assert [request.dedupe_key.split(":")[0] for request in world.requests("ci")] == ["ci", "ci"]

    # Another check of the same CI fails on that head: the same suite, completed again (as a re-run
    # does), so nothing is queued twice and lanebot does not say it stopped twice.
    await world.ci_reports(third, failing_tests("test_greeting: and again", name="integration-tests"))
    assert len(world.lanebot_comments("ci-stop")) == 1 and len(world.fix_prompts()) == 2
    assert len(world.requests("ci")) == 2


@whole_run
async def test_ci_that_failed_on_lanebots_head_before_its_pull_request_opened_gets_a_fix_once_it_opens(
    engine, tmp_path, monkeypatch
):
    """CI that runs on push can finish before lanebot opens its pull request: GitHub's suite then
    names no pull request. lanebot keeps it, and acts on it when its pull request opens."""
    prompts = tmp_path / "fixer-prompts"
    files = {"README.md": "# Hello\n", ".github/lanebot.yml": CONFIG}
    async with lanebot_world(
        engine, tmp_path, monkeypatch, world_type=FixWorld, agent=FIXER, agent_args=[str(prompts)], files=files
    ) as world:
        world.prompts_dir = prompts
        human = world.repository.human
        human.add_fault(method="POST", path=rf"/repos/{REPO}/pulls", delay=5)  # GitHub is slow to open it
        world.repository.open_issue("Greet people", greeting_issue(BRIEF), login=MAINTAINER, labels=["lanebot"])
        await world.settled()
        human.comment(REPO, 1, login=MAINTAINER, body="/approve")
        await world.delivered_until(lambda: bool(human.faults()["fired"]))

        bare = world.repository.sandbox.git.path("Codertocat", "Hello-World")
        head = run_git("--git-dir", str(bare), "rev-parse", BRANCH, cwd=bare).strip()
        human.report_ci(REPO, head, [failing_tests(), LINT])  # while lanebot's pull request is being opened
        await world.delivered_until(lambda: any(e.kind == CI_BEFORE_PULL for e in runs.run_events(world.engine, 1)))
        assert world.repository.pulls() == [] and world.fix_prompts() == []  # kept, for when it opens
        await world.settled()

        assert world.repository.sandbox.git.parent("Codertocat", "Hello-World", world.head()) == head  # the fix
        [prompt] = world.fix_prompts()
        assert "unit-tests" in prompt and "test_greeting: expected 'hello, world'" in prompt
        [request] = world.requests("ci")
        assert request.dedupe_key.startswith("ci:")


@whole_run
async def test_lanebots_own_failing_suite_and_a_passing_one_start_nothing(world):
    head = world.head()
    installation = world.repository.installation_id
    client = world.app.state.github.installation_client(installation, REPO)
    await client.post(
        "/repos/{owner}/{repo}/check-runs",
        {"owner": "Codertocat", "repo": "Hello-World"},
        data={"name": "lanebot / extra", "head_sha": head, "conclusion": "failure"},
    )
    await world.settled()
    await world.ci_reports(head, LINT)
    assert world.fix_prompts() == [] and world.requests("ci") == [] and world.head() == head


@whole_run
async def test_failing_ci_on_a_head_a_person_pushed_starts_nothing(world):
    world.repository.human.add_collaborator(REPO, "mona", "write")
    pushed = await world.push(BRANCH, {"greeting.txt": "hello, world\n"}, login="mona")
    assert world.head() == pushed["sha"]
    await world.ci_reports(pushed["sha"], failing_tests())
    assert world.fix_prompts() == [] and world.requests("ci") == [] and world.head() == pushed["sha"]


# --------------------------------------------------------------------------- the handler's pure rules


def pull_ref(number: int, ref: str, sha: str, repository_id: int = 7) -> dict[str, Any]:
    return {"number": number, "head": {"ref": ref, "sha": sha, "repo": {"id": repository_id}}}


def test_the_suites_pull_request_is_one_from_an_integration_branch_of_the_repository_at_its_head():
    suite = {"head_sha": "abc", "pull_requests": [pull_ref(3, "feature", "abc"), pull_ref(4, BRANCH, "abc")]}
    assert lanebot_pull(suite, 7) == 4
    assert lanebot_pull(suite, 8) is None  # a fork's branch of that name
    assert lanebot_pull({"head_sha": "abc", "pull_requests": [pull_ref(4, BRANCH, "def")]}, 7) is None
    assert lanebot_pull({"head_sha": "abc", "pull_requests": [pull_ref(4, "lanebot/1/x", "abc")]}, 7) is None
    assert lanebot_pull({"head_sha": "abc", "pull_requests": []}, 7) is None


def test_the_heads_lanebot_pushed_are_those_verify_ran_on_and_those_fix_lanes_pushed():
    events = [
        RunEvent(run_id=1, kind="verify", data=json.dumps({"head": "a", "ok": False})),
        RunEvent(run_id=1, kind="verify", data=json.dumps({"head": "b", "ok": True})),
        RunEvent(run_id=1, kind="fix_pushing", data=json.dumps({"request": 1, "head": "c"})),
        RunEvent(run_id=1, kind="lane_start", data=json.dumps({"unit": "u", "head": "d"})),
        RunEvent(run_id=1, kind="fix_pushed", data=json.dumps({"request": 1, "head": None})),
    ]
    assert heads_lanebot_pushed(events) == {"a", "b", "c"}
    assert last_pushed_head(events) == "c" and last_pushed_head(events[3:]) is None


def test_the_ci_bot_is_named_by_the_apps_slug():
    assert ci_bot_login({"slug": "github-actions"}) == "github-actions[bot]"
    assert ci_bot_login({"slug": "we ird/slug"}) == "we-ird-slug[bot]"
    assert ci_bot_login({}) == "ci[bot]"
