"""The whole flow with the real agent CLIs, through the sandbox GitHub and a scripted model server.

As in tests/e2e/test_end_to_end.py, `lanebot sandbox serve` and `lanebot serve` run as processes
and people act through the sandbox's human API. Here every agent session is the real Claude Code
(or Codex) CLI, pinned in `.agents/` (tests/agent_clis.py), talking to a model server on loopback
(tests/model_server/server.py) whose answers come from tests/model_server/lanebot.py: a model that
reads lanebot's prompts and does what a competent one would, using the CLI's own tools (files are
written by Claude Code's `Write` tool or Codex's `apply_patch`, commands run by `Bash` or Codex's
shell). So these tests hold lanebot to the CLIs as they really are: their flags, their stream
formats, their environment and permission modes, where they write, what they print.

The CLIs reach the server through the environment lanebot gives them (ANTHROPIC_BASE_URL and a key;
CODEX_HOME with a model provider), their home folders are the test's own, and the binaries and
extra variables are host settings (`agents.*`, in a workflow folder named by LANEBOT_WORKFLOWS_DIR).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.cli import main as cli_main
from bot.core.diffstat import parse_numstat
from bot.demo.plan import UNITS as DEMO_UNITS
from bot.demo.runner import AGENT_BINARY_ENV, agent_binary_for, host_workflows
from bot.demo.stack import Stack
from bot.edges.store import reviews, runs
from bot.edges.workflow_files import DEFAULT_WORKFLOW, WORKFLOWS_DIR_ENV, load_workflow
from bot.render.prompts import render_prompt
from bot.runner.plan import issue_run
from bot.sandbox.cli import HumanClient
from tests.agent_clis import require_real_cli
from tests.e2e.test_end_to_end_review import lanebot_db
from tests.lanes_helpers import make_workflow_dir
from tests.model_server.lanebot import (
    SESSION_KINDS,
    UNKNOWN,
    Finding,
    LanebotModel,
    LanebotScenario,
    kinds_seen,
    recipe_files,
    session_kind,
)
from tests.model_server.script import ModelCall, RunCommand, WriteFile
from tests.model_server.server import ModelServer

pytestmark = pytest.mark.slow

REPO = "octo-org/greeter"
MAINTAINER = "maintainer"
STEP_TIMEOUT = 120.0
FENCE = "```"

# --------------------------------------------------------------------------- the project and its plan

SOURCE = {"README.md": "# greeter\n\nSays hello.\n", ".gitignore": "__pycache__/\n"}
GREET = 'def greeting(name):\n    return f"hello, {name}"\n'
# The main unit's brief gets the helper's name wrong: its own check (it compiles) cannot tell, the
# repository's verify (it runs) can; the repair session puts it right.
MAIN_AS_BRIEFED = 'from greet import greet\n\nprint(greet("world"))\n'
MAIN_REPAIRED = 'from greet import greeting\n\nprint(greeting("world"))\n'
GREET_CHANGES = "- greet: a greeting for anyone\n"
MAIN_CHANGES = "- main: greets the world\n"
GREET_AS_ASKED = 'def greeting(name):\n    return f"Hello, {name}!"\n'


def brief(summary: str, files: dict[str, str]) -> str:
    blocks = [f"{FENCE}text path={path}\n{content}{FENCE}" for path, content in files.items()]
    return "\n\n".join([summary, *blocks])


def unit(unit_id: str, files: str, check: str, contents: dict[str, str]) -> dict[str, Any]:
    return {
        "id": unit_id,
        "title": f"Write {unit_id}",
        "needs": [],
        "files": files,
        "check": check,
        "brief": brief(f"Write {', '.join(contents)} exactly as below.", contents),
    }


# Both units add CHANGES.md (untracked, so the plan is valid): merging the second conflicts.
PLAN = [
    unit(
        "greet",
        r"^(greet\.py|CHANGES\.md)$",
        "python3 -c \"import greet; assert greet.greeting('x') == 'hello, x'\"",
        {"greet.py": GREET, "CHANGES.md": GREET_CHANGES},
    ),
    unit(
        "main",
        r"^(main\.py|CHANGES\.md)$",
        "python3 -m py_compile main.py",
        {"main.py": MAIN_AS_BRIEFED, "CHANGES.md": MAIN_CHANGES},
    ),
]
KEPT = Finding("main.py", 3, "main.py prints without checking the name.", "main.py line 3 passes a literal.", "low")
REFUTED = Finding("greet.py", 2, "greeting() leaks a secret.", "It formats a string.", "high")
SCENARIO = LanebotScenario(
    plan=PLAN,
    pr_title="Greet the world from main.py",
    pr_body="main.py prints the greeting greet.py makes. Verified with `python3 main.py`.",
    repairs={"main.py": MAIN_REPAIRED},
    findings={"correctness": [KEPT], "security": [REFUTED]},
    refute={"correctness": ["security-1"]},
)
README_AS_ASKED = "# greeter\n\nSays hello: `python3 main.py`.\n"
README_NOTES = f"Say how to run it in `README.md`:\n\n{FENCE}markdown path=README.md\n{README_AS_ASKED}{FENCE}"
SUGGESTION = f"Capitalise it, please:\n\n{FENCE}python path=greet.py\n{GREET_AS_ASKED}{FENCE}"

CONFIG = """\
plan:
  agent: {agent}
  max_retries: 0
  timeout: 2m
build:
  agent: {agent}
  max_retries: 0
  timeout: 2m
  on_conflict: agent
integrate:
  agent: {integrate}
  verify: python3 main.py
  max_retries: 1
  timeout: 2m
pull_request:
  draft: false
  title: "{{{{ proposed or issue.title }}}}"
fix:
  agent: claude
  max_retries: 0
  timeout: 2m
review:
  enabled: {review}
  agent: claude
  lenses: [correctness, security]
  timeout: 2m
"""


def config(*, agent: str = "claude", integrate: str = "claude", review: bool = True) -> str:
    return CONFIG.format(agent=agent, integrate=integrate, review=str(review).lower())


# --------------------------------------------------------------------------- the stack


@contextmanager
def real_agents(
    tmp_path: Path, scenario: LanebotScenario, *, codex: bool = False
) -> Iterator[tuple[Stack, ModelServer]]:
    """The model server, and the stack whose agents are the real CLIs pointed at it."""
    agents: dict[str, Any] = {"claude": {"binary": require_real_cli("claude")}}
    if codex:
        agents["codex"] = {"binary": require_real_cli("codex")}  # its default sandbox: workspace-write
    with ModelServer(LanebotModel(scenario)) as server:
        home = tmp_path / "home"
        home.mkdir()
        env = {**server.anthropic_env(), "HOME": str(home)}
        if codex:
            env.update(server.codex_config(tmp_path / "codex-home"))
            # Codex starts its sandbox through helper links it makes in CODEX_HOME, and makes none when
            # CODEX_HOME is inside the temporary folder (`bwrap: execvp codex-linux-sandbox: No such
            # file`): pytest's tmp_path is, so the temporary folder is another one here.
            (tmp_path / "tmp").mkdir()
            env["TMPDIR"] = str(tmp_path / "tmp")
        env[WORKFLOWS_DIR_ENV] = str(make_workflow_dir(tmp_path, {"agents": agents}))
        with Stack(tmp_path / "stack", lanebot_env=env) as stack:
            yield stack, server
        assert server.errors == [], f"the scripted model failed: {server.errors}"


def source_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "source"
    folder.mkdir()
    for name, content in SOURCE.items():
        (folder / name).write_text(content)
    return folder


# --------------------------------------------------------------------------- looking


def human(stack: Stack) -> HumanClient:
    assert stack.human is not None, "the stack is started"
    return stack.human


def comments(stack: Stack, number: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = stack.issue(REPO, number)["comments"]
    return found


def seen(stack: Stack, number: int) -> str:
    issue = stack.issue(REPO, number)
    last = issue["comments"][-1]["body"][:800] if issue["comments"] else "no comments"
    return f"labels {issue['labels']}; last comment: {last}; lanebot's log: {stack.root / 'lanebot.log'}"


def wait_for_gate(stack: Stack, number: int) -> dict[str, Any]:
    return stack.wait_for(
        "the gate comment",
        lambda: next((c for c in comments(stack, number) if c["by_app"] and "<!-- lanebot:gate" in c["body"]), None),
        timeout=STEP_TIMEOUT,
        seen=lambda: seen(stack, number),
    )


def wait_for_pull(stack: Stack, number: int, *, repo: str = REPO) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        pulls = [p for p in stack.repository(repo)["pulls"] if f"Closes #{number}" in (p["body"] or "")]
        if not pulls and "lanebot:blocked" in stack.issue(repo, number)["labels"]:
            raise AssertionError(f"the run is blocked: {seen(stack, number)}")
        return pulls[0] if pulls else None

    return stack.wait_for("the pull request", probe, timeout=STEP_TIMEOUT, seen=lambda: seen(stack, number))


def on_branch(stack: Stack, branch: str, path: str, *, repo: str = REPO) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(stack.bare_repository(repo)), "show", f"{branch}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def merge_subjects(stack: Stack, branch: str) -> list[str]:
    log = subprocess.run(
        ["git", "--git-dir", str(stack.bare_repository(REPO)), "log", "--format=%s", branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in log.splitlines() if line.startswith("Merge lane ")]


def lanebot_run_id(stack: Stack, number: int, *, repo: str = REPO) -> int:
    run = lanebot_db(stack, lambda engine: issue_run(engine, repo, number))
    assert run is not None and run.id is not None, f"lanebot has no run for {repo}#{number}"
    return int(run.id)


def session_kinds(stack: Stack, number: int, *, repo: str = REPO) -> list[str]:
    run_id = lanebot_run_id(stack, number, repo=repo)
    kinds: list[str] = lanebot_db(stack, lambda engine: sorted(s.kind for s in runs.sessions(engine, run_id)))
    return kinds


def lane_sessions(stack: Stack, number: int) -> list[Any]:
    run_id = lanebot_run_id(stack, number)
    found: list[Any] = lanebot_db(stack, lambda engine: [s for s in runs.sessions(engine, run_id) if s.kind == "lane"])
    return found


def verify_conclusions(stack: Stack) -> list[str]:
    checks = [c for c in stack.repository(REPO)["check_runs"] if c["name"] == "lanebot / verify"]
    return [c["conclusion"] for c in sorted(checks, key=lambda c: c["id"])]


def wait_for_fixes(stack: Stack, number: int, count: int) -> list[Any]:
    """The run's fix requests once `count` of them have finished (done or failed)."""
    run_id = lanebot_run_id(stack, number)

    def fixes() -> list[Any]:
        return [r for r in lanebot_db(stack, lambda e: reviews.requests(e, run_id)) if r.kind == "fix"]

    def finished() -> list[Any] | None:
        found = fixes()
        return found if sum(1 for r in found if r.finished_at) >= count else None

    return stack.wait_for(
        f"{count} fix lanes finished",
        finished,
        timeout=STEP_TIMEOUT,
        seen=lambda: str([(r.state, r.error) for r in fixes()]),
    )


def last_calls(calls: list[ModelCall], kind: str) -> list[ModelCall]:
    """The last request of each session of `kind` (a session is one prompt, its turns in order)."""
    last: dict[str, ModelCall] = {}
    for call in calls:
        if session_kind(call) == kind:
            last[call.prompt] = call
    return list(last.values())


def tools_used(call: ModelCall) -> set[tuple[str, bool]]:
    return {(outcome.name, outcome.is_error) for outcome in call.outcomes}


# --------------------------------------------------------------------------- Claude Code as every agent


def test_claude_code_plans_builds_resolves_repairs_reviews_and_fixes_one_pull_request(tmp_path: Path) -> None:
    """Label -> planner -> gate -> /approve -> two lanes whose merge conflicts -> a resolver -> the
    integrator -> verify fails -> a repair -> verify passes -> the pull request -> two lenses find,
    one refutes the other -> one review -> a Request-changes review -> a fix lane: all real Claude Code."""
    with real_agents(tmp_path, SCENARIO) as (stack, server):
        stack.create_repository(REPO, config=config(), source=source_folder(tmp_path), maintainers=(MAINTAINER,))
        issue = human(stack).open_issue(REPO, login=MAINTAINER, title="Greet the world", body="main.py should greet.")
        number = issue["number"]
        human(stack).add_label(REPO, number, "lanebot", login=MAINTAINER)

        gate = wait_for_gate(stack, number)
        assert "`greet`" in gate["body"] and "`main`" in gate["body"]  # the planner's plan, validated
        human(stack).comment(REPO, number, login=MAINTAINER, body="/approve")
        pull = wait_for_pull(stack, number)
        branch = f"lanebot/{number}"

        # The integrator's title and body; the lanes' files; the resolver's union; the repair.
        assert pull["title"] == SCENARIO.pr_title
        assert SCENARIO.pr_body in pull["body"]
        assert merge_subjects(stack, branch) == [f"Merge lane 'main' of #{number}", f"Merge lane 'greet' of #{number}"]
        assert on_branch(stack, branch, "greet.py") == GREET
        assert on_branch(stack, branch, "CHANGES.md") == GREET_CHANGES + MAIN_CHANGES
        assert on_branch(stack, branch, "main.py") == MAIN_REPAIRED
        assert on_branch(stack, f"lanebot-lanes/{number}/main", "main.py") == MAIN_AS_BRIEFED
        assert verify_conclusions(stack) == ["failure", "success"]
        lanes = {
            c["name"]: c["conclusion"] for c in stack.repository(REPO)["check_runs"] if c["name"] != "lanebot / verify"
        }
        assert lanes == {"lanebot / greet": "success", "lanebot / main": "success"}

        # lanebot's own review: the finding the other lens let stand is posted inline, the refuted one is not.
        review = stack.wait_for(
            "lanebot's own review",
            lambda: next((r for r in stack.repository(REPO)["reviews"] if r["pull"] == pull["number"]), None),
            timeout=STEP_TIMEOUT,
            seen=lambda: seen(stack, number),
        )
        assert review["state"] == "commented"
        inline = [c for c in stack.repository(REPO)["review_comments"] if c["review_id"] == review["id"]]
        assert [(c["path"], c["line"]) for c in inline] == [(KEPT.file, KEPT.line)]
        assert KEPT.claim in inline[0]["body"]
        assert REFUTED.claim not in json.dumps(stack.repository(REPO)["review_comments"]) + review["body"]

        # A maintainer asks for a change: a fix lane makes it, verify passes, the thread is answered.
        human(stack).review(
            REPO,
            pull["number"],
            login=MAINTAINER,
            event="REQUEST_CHANGES",
            body="One thing.",
            comments=[{"path": "greet.py", "line": 2, "body": SUGGESTION}],
        )
        [fixed] = wait_for_fixes(stack, number, 1)
        assert (fixed.state, fixed.error) == ("done", None)
        assert on_branch(stack, branch, "greet.py") == GREET_AS_ASKED
        root = next(c for c in stack.repository(REPO)["review_comments"] if c["body"] == SUGGESTION)
        [reply] = [c for c in stack.repository(REPO)["review_comments"] if c["in_reply_to_id"] == root["id"]]
        assert "Addressed in" in reply["body"] and "rewrote greet.py as suggested" in reply["body"]
        assert verify_conclusions(stack) == ["failure", "success", "success"]

        # `/fix` with notes: they may name a file the pull request does not touch yet, in backticks.
        human(stack).comment(REPO, pull["number"], login=MAINTAINER, body=f"/fix {README_NOTES}")
        _, notes_fix = wait_for_fixes(stack, number, 2)
        assert (notes_fix.state, notes_fix.error, notes_fix.notes) == ("done", None, README_NOTES)
        assert on_branch(stack, branch, "README.md") == README_AS_ASKED
        assert on_branch(stack, branch, "greet.py") == GREET_AS_ASKED  # its thread, still open, asked nothing new
        assert verify_conclusions(stack) == ["failure", "success", "success", "success"]

        assert session_kinds(stack, number) == sorted(
            ["plan", "lane", "lane", "resolve", "integrate", "verify"] + ["review"] * 4 + ["fix", "fix"]
        )
        calls = server.calls
    assert sorted(set(kinds_seen(calls)), key=str) == sorted(SESSION_KINDS)
    for lane in last_calls(calls, "lane"):  # the real CLI's own tools wrote the files and ran the check
        assert {("Write", False), ("Bash", False)} <= tools_used(lane)
    assert all(call.api == "anthropic" for call in calls)


# --------------------------------------------------------------------------- Codex plans and builds


def test_codex_plans_and_builds_and_the_pull_request_opens(tmp_path: Path) -> None:
    """Planner and lanes are the real Codex CLI, the integrator too: label to pull request."""
    main = unit("main", r"^main\.py$", "python3 -m py_compile main.py", {"main.py": MAIN_REPAIRED})
    greet = unit(
        "greet",
        r"^greet\.py$",
        "python3 -c \"import greet; assert greet.greeting('x') == 'hello, x'\"",
        {"greet.py": GREET},
    )
    scenario = LanebotScenario(plan=[greet, main], pr_title="Greet the world, by Codex")
    with real_agents(tmp_path, scenario, codex=True) as (stack, server):
        cfg = config(agent="codex", integrate="codex", review=False)
        stack.create_repository(REPO, config=cfg, source=source_folder(tmp_path), maintainers=(MAINTAINER,))
        number = human(stack).open_issue(REPO, login=MAINTAINER, title="Greet the world", body="Please.")["number"]
        human(stack).add_label(REPO, number, "lanebot", login=MAINTAINER)
        wait_for_gate(stack, number)
        human(stack).comment(REPO, number, login=MAINTAINER, body="/approve")
        pull = wait_for_pull(stack, number)

        branch = f"lanebot/{number}"
        assert pull["title"] == scenario.pr_title
        assert on_branch(stack, branch, "greet.py") == GREET
        assert on_branch(stack, branch, "main.py") == MAIN_REPAIRED
        assert verify_conclusions(stack) == ["success"]
        assert session_kinds(stack, number) == ["integrate", "lane", "lane", "plan"]
        for lane in lane_sessions(stack, number):  # what the CLI reported, and what the attempt changed
            assert lane.input_tokens and lane.output_tokens
            assert [change.path for change in parse_numstat(lane.diff_stat)] in (["greet.py"], ["main.py"])
            assert lane.check_output is not None and lane.check_started_at is not None
        calls = server.calls
    assert sorted(kinds_seen(calls), key=str) == ["integrate", "lane", "lane", "plan"]
    assert all(call.api == "openai" for call in calls)
    for lane in last_calls(calls, "lane"):
        assert ("apply_patch", False) in tools_used(lane)


# --------------------------------------------------------------------------- lanebot demo --agent claude


def test_lanebot_demo_agent_claude_as_the_readme_says_opens_the_pull_request_with_the_cli_s_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """README, *Giving lanebot an agent*, as written: the CLI on PATH, ANTHROPIC_BASE_URL and a key in
    the environment, `lanebot demo --agent claude`. The four lanes and the integrator are Claude Code."""
    claude = require_real_cli("claude")
    monkeypatch.delenv(AGENT_BINARY_ENV, raising=False)
    monkeypatch.setenv("PATH", f"{Path(claude).parent}:{os.environ['PATH']}")
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with ModelServer(LanebotModel(LanebotScenario(pr_title="Tasks get a status"))) as server:
        for name, value in server.anthropic_env().items():
            monkeypatch.setenv(name, value)
        status = cli_main(["demo", "--agent", "claude", "--dir", str(tmp_path / "demo")])
        calls = server.calls
    printed = capsys.readouterr().out
    assert status == 0, printed[-3000:]
    assert "Pull request #2: Tasks need a status (#1)" in printed  # the demo keeps the default title
    [bare] = (tmp_path / "demo" / "sandbox").rglob("tasks.git")
    for demo_unit in DEMO_UNITS:
        for path, content in recipe_files(str(demo_unit["brief"])).items():
            shown = ["git", "--git-dir", str(bare), "show", f"lanebot/1:{path}"]
            assert subprocess.run(shown, capture_output=True, text=True, check=True).stdout == content
    assert server.errors == []
    assert sorted(kinds_seen(calls), key=str) == ["integrate", "lane", "lane", "lane", "lane"]
    for lane in last_calls(calls, "lane"):
        assert ("Write", False) in tools_used(lane)


def test_lanebot_demo_agent_codex_with_its_binary_opens_the_pull_request_with_the_cli_s_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lanebot demo --agent codex --agent-binary PATH`: Codex runs the lanes and the integrator,
    configured by nothing but its CODEX_HOME; the demo says so and prints the pull request."""
    codex = require_real_cli("codex")
    monkeypatch.delenv(AGENT_BINARY_ENV, raising=False)
    with ModelServer(LanebotModel(LanebotScenario())) as server:
        for name, value in server.codex_config(tmp_path / "codex-home").items():
            monkeypatch.setenv(name, value)
        (tmp_path / "tmp").mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # see real_agents: CODEX_HOME is in pytest's
        monkeypatch.setenv("HOME", str(tmp_path))
        status = cli_main(["demo", "--agent", "codex", "--agent-binary", codex, "--dir", str(tmp_path / "demo")])
        calls = server.calls
    printed = capsys.readouterr().out
    assert status == 0, printed[-3000:]
    assert f"The lanes and the integrate step run `{codex}` (codex)." in printed
    assert "Pull request #2: Tasks need a status (#1)" in printed
    [bare] = (tmp_path / "demo" / "sandbox").rglob("tasks.git")
    for demo_unit in DEMO_UNITS:
        for path, content in recipe_files(str(demo_unit["brief"])).items():
            shown = ["git", "--git-dir", str(bare), "show", f"lanebot/1:{path}"]
            assert subprocess.run(shown, capture_output=True, text=True, check=True).stdout == content
    assert sorted(kinds_seen(calls), key=str) == ["integrate", "lane", "lane", "lane", "lane"]
    assert all(call.api == "openai" for call in calls)


def test_the_demo_runs_the_agent_binary_it_is_given_else_the_environments_else_its_name_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--agent-binary` wins over $LANEBOT_DEMO_AGENT_BINARY, which wins over the agent's name; the
    choice reaches lanebot as host settings, in a workflow folder that loads."""
    monkeypatch.delenv(AGENT_BINARY_ENV, raising=False)
    assert agent_binary_for("codex") == "codex"
    monkeypatch.setenv(AGENT_BINARY_ENV, "/opt/claude/bin/claude")
    assert agent_binary_for("claude") == "/opt/claude/bin/claude"
    assert agent_binary_for("claude", "/usr/local/bin/claude") == "/usr/local/bin/claude"

    folder = host_workflows(tmp_path, "claude", "/usr/local/bin/claude")
    workflow = load_workflow(path=folder / DEFAULT_WORKFLOW.name)
    assert workflow.agents.claude.binary == "/usr/local/bin/claude"
    assert workflow.build.agent == "claude"  # the default; the demo's repository chooses its agents itself


# --------------------------------------------------------------------------- the scripted model reads lanebot's prompts


def rendered(name: str, **context: Any) -> ModelCall:
    """lanebot's `name` template rendered as lanebot renders it, as the first request of a Codex session."""
    prompt = render_prompt(load_workflow(), name, **context)
    return ModelCall(api="openai", system="", prompt=prompt, turns=0, outcomes=(), tools=("apply_patch",))


ISSUE = {"number": 7, "title": "Greet the world", "body": "Please.", "comments": []}
UNIT = {"id": "main", "title": "Write main", "files": r"^main\.py$", "check": "python3 -m py_compile main.py"}


def test_the_scripted_model_recognises_every_prompt_lanebot_renders_and_does_what_it_asks() -> None:
    """The e2e tests above stand on this: each of lanebot's templates names its session, and the
    model reads from it what a session must do (the brief's files, the check, the conflicting paths,
    the threads, the lens, the findings to judge)."""
    model = LanebotModel(SCENARIO)
    lane = rendered("lane", issue=ISSUE, unit={**UNIT, "brief": PLAN[1]["brief"]}, branch="b", failure=None)
    assert model(lane).actions == (
        WriteFile("main.py", MAIN_AS_BRIEFED),
        WriteFile("CHANGES.md", MAIN_CHANGES),
    )
    assert model(replace(lane, turns=1)).actions == (RunCommand("python3 -m py_compile main.py"),)
    assert model(replace(lane, turns=2)).text == "Done with unit `main`: 0 tool call(s)."

    plan = rendered("plan", issue=ISSUE, tracked_paths=["README.md"], max_units=6, rules=[])
    assert [json.loads(line) for line in model(plan).text.splitlines()] == PLAN

    resolve = rendered(
        "resolve",
        issue=ISSUE,
        branch="lanebot/7",
        incoming=unit_of(PLAN[1]),
        incoming_branch="l",
        merged=[],
        paths=["CHANGES.md"],
    )
    assert [a.command for a in model(resolve).actions if isinstance(a, RunCommand)][
        -1
    ] == "mv -- CHANGES.md.union CHANGES.md"

    units = [unit_of(u) for u in PLAN]
    integrate = rendered("integrate", issue=ISSUE, units=units, verify="python3 main.py", failure=None)
    repair = rendered(
        "integrate",
        issue=ISSUE,
        units=units,
        verify="python3 main.py",
        failure={"reason": "exit 1", "output": "ImportError"},
    )
    assert model(integrate).actions == (WriteFile(".lanebot/pr.md", f"{SCENARIO.pr_title}\n\n{SCENARIO.pr_body}\n"),)
    assert model(repair).actions == (WriteFile("main.py", MAIN_REPAIRED),)
    assert model(replace(repair, turns=1)).actions == (RunCommand("python3 main.py"),)

    thread = {
        "thread": 41,
        "path": "greet.py",
        "line": 2,
        "diff_hunk": "",
        "comments": [
            {"id": 41, "author": MAINTAINER, "trusted": True, "body": SUGGESTION},
        ],
    }
    question = {
        "thread": 42,
        "path": "main.py",
        "line": 1,
        "diff_hunk": "",
        "comments": [
            {"id": 42, "author": MAINTAINER, "trusted": True, "body": "Why?"},
        ],
    }
    fix = rendered(
        "fix",
        issue=ISSUE,
        pull={"number": 8, "url": "u", "branch": "lanebot/7"},
        request={"kind": "command", "by": MAINTAINER, "body": README_NOTES},
        instructions=[thread, question],
        context=[],
        allowed_files=["greet.py", "main.py", "README.md"],
        verify="python3 main.py",
        failure=None,
        threads_file=".lanebot/threads.json",
        report_file=".lanebot/fix.json",
    )
    writes = {a.path: a.content for a in model(fix).actions if isinstance(a, WriteFile)}
    assert (writes["README.md"], writes["greet.py"]) == (README_AS_ASKED, GREET_AS_ASKED)
    report = json.loads(writes[".lanebot/fix.json"])
    assert [entry["thread"] for entry in report["addressed"]] == [41]
    assert [entry["thread"] for entry in report["not_addressed"]] == [42]

    pull = {"number": 8, "title": "t", "body": "b"}
    for lens, found in (("correctness", [KEPT]), ("security", [REFUTED])):
        review = rendered(
            "review",
            issue=ISSUE,
            pull=pull,
            lens={"name": lens, "description": "d"},
            units=units,
            diff_file=".lanebot/diff.patch",
            findings_file=".lanebot/findings.json",
            max_findings=10,
        )
        [written] = [a for a in model(replace(review, turns=1)).actions if isinstance(a, WriteFile)]
        assert json.loads(written.content) == {"looked_at": [], "findings": [f.to_json() for f in found]}
    others = [{"id": "security-1", "lens": "security", **REFUTED.to_json()}]
    refute = rendered(
        "refute",
        issue=ISSUE,
        lens={"name": "correctness", "description": "d"},
        findings=others,
        findings_file="f",
        verdicts_file=".lanebot/verdicts.json",
        diff_file="d",
    )
    [verdicts] = model(refute).actions
    assert isinstance(verdicts, WriteFile)
    assert [(v["finding"], v["refute"]) for v in json.loads(verdicts.content)["verdicts"]] == [("security-1", True)]

    assert kinds_seen([plan, lane, resolve, integrate, repair, fix, review, refute]) == list(SESSION_KINDS)
    assert model(replace(lane, prompt="Write me a poem.")).text.startswith(UNKNOWN)


def unit_of(plan_unit: dict[str, Any]) -> dict[str, Any]:
    return {key: plan_unit[key] for key in ("id", "title", "files", "check", "brief")}
