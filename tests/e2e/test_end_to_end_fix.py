"""Review feedback and lanebot's own review, end to end through the sandbox GitHub.

As in tests/e2e/test_end_to_end.py, `lanebot sandbox serve` and `lanebot serve` run as processes and
people act through the sandbox's human API. Lanes and the integrate step use the recipe agent; fix
lanes and verifiers use the `command` adapter running tests/agents_fixtures/review_agent.py, a
scripted agent that knows only lanebot's contract (the prompt, `.lanebot/threads.json`, the report
files, the LANEBOT_* variables). The repository's gate is `approvers: maintain`, so a collaborator
with write access is a reader as far as lanebot's commands go.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.demo.stack import Stack
from bot.edges.store import reviews, runs
from tests.e2e.test_end_to_end import (
    MAINTAINER,
    REPO,
    STEP_TIMEOUT,
    open_and_label,
    plan_body,
    recipe_unit,
    wait_for_pull,
)
from tests.e2e.test_end_to_end_review import lanebot_db, lanebot_run
from tests.lanes_helpers import make_workflow_dir

pytestmark = pytest.mark.slow

READER = "contributor"  # write access on GitHub; the gate asks for maintain
AGENT = Path(__file__).resolve().parents[1] / "agents_fixtures" / "review_agent.py"
UNITS = [recipe_unit("words", r"^(greeting|notes)\.txt$", {"greeting.txt": "hello\n", "notes.txt": "notes\n"})]


@pytest.fixture
def script(tmp_path) -> Path:
    """The agent's script, in a folder the jail shows the agent (with the files it waits for)."""
    (tmp_path / "agent").mkdir()
    path = tmp_path / "agent" / "agent-script.json"
    path.write_text("{}")
    return path


@pytest.fixture
def stack(tmp_path, script):
    workflows = make_workflow_dir(tmp_path, {}, [sys.executable, str(AGENT), str(script)])
    # The fix and review sessions run jailed: the jail shows the test's Python, the agent and its folder.
    shown = ":".join((sys.base_prefix, str(AGENT), str(script.parent)))
    env = {"LANEBOT_WORKFLOWS_DIR": str(workflows), "LANEBOT_JAIL_READ_ONLY": shown}
    with Stack(tmp_path / "stack", lanebot_env=env) as running:
        yield running


def config(*, review: bool = False, lenses: tuple[str, ...] = ("correctness", "security")) -> str:
    text = (
        "build:\n  agent: recipe\n  max_retries: 0\n"
        'integrate:\n  agent: recipe\n  verify: "test -f greeting.txt"\n  max_retries: 0\n'
        "pull_request:\n  draft: false\n"
        "gate:\n  approvers: maintain\n"
        "fix:\n  agent: command\n  max_retries: 0\n  timeout: 2m\n"
    )
    if not review:
        return text + "review:\n  enabled: false\n"
    return text + f"review:\n  enabled: true\n  agent: command\n  lenses: [{', '.join(lenses)}]\n  timeout: 2m\n"


def open_pull(stack: Stack, cfg: str) -> tuple[int, dict]:
    number = open_and_label(stack, plan_body(UNITS), cfg=cfg)
    stack.human.add_collaborator(REPO, READER, "write")
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    return number, wait_for_pull(stack, number)


# --------------------------------------------------------------------------- looking


def file_on_branch(stack: Stack, branch: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(stack.bare_repository(REPO)), "show", f"{branch}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def requests_of(stack: Stack, number: int) -> list[Any]:
    run_id = lanebot_run(stack, number).id
    return lanebot_db(stack, lambda engine: reviews.requests(engine, run_id))


def wait_for_requests(stack: Stack, number: int, states: list[str]) -> list[Any]:
    def probe():
        found = requests_of(stack, number)
        return found if [r.state for r in found] == states else None

    return stack.wait_for(
        f"review requests {states}",
        probe,
        timeout=STEP_TIMEOUT,
        seen=lambda: str([(r.kind, r.state, r.error) for r in requests_of(stack, number)]),
    )


def pull_comments(stack: Stack, pull: dict) -> list[dict]:
    return next(p for p in stack.repository(REPO)["pulls"] if p["number"] == pull["number"])["comments"]


def wait_for_pull_comment(stack: Stack, pull: dict, contains: str) -> dict:
    return stack.wait_for(
        f"a comment with {contains!r}",
        lambda: next((c for c in pull_comments(stack, pull) if contains in c["body"]), None),
        timeout=STEP_TIMEOUT,
        seen=lambda: str([c["body"][:120] for c in pull_comments(stack, pull)]),
    )


def review_comments(stack: Stack) -> list[dict]:
    return stack.repository(REPO)["review_comments"]


def replies_to(stack: Stack, root_id: int) -> list[dict]:
    return [c for c in review_comments(stack) if c["in_reply_to_id"] == root_id]


def inline(stack: Stack, path: str, body: str) -> dict:
    return next(c for c in review_comments(stack) if c["path"] == path and c["body"] == body)


def session_kinds(stack: Stack, number: int) -> list[str]:
    run_id = lanebot_run(stack, number).id
    return lanebot_db(stack, lambda engine: [s.kind for s in runs.sessions(engine, run_id)])


# --------------------------------------------------------------------------- acting on review feedback


SUGGESTION = "Greet the world, please:\n\n```text path=greeting.txt\nhello, world\n```"
QUESTION = "Why does this file exist?"
READERS_SUGGESTION = "Replace it:\n\n```text path=notes.txt\nsomething a reader wants\n```"


def test_a_changes_requested_review_is_fixed_pushed_and_answered_in_each_thread(stack):
    number, pull = open_pull(stack, config())
    branch = f"lanebot/{number}"
    stack.human.review(
        REPO,
        pull["number"],
        login=READER,
        event="COMMENT",
        body="A thought.",
        comments=[{"path": "notes.txt", "line": 1, "body": READERS_SUGGESTION}],
    )
    stack.human.review(
        REPO,
        pull["number"],
        login=MAINTAINER,
        event="REQUEST_CHANGES",
        body="Two things.",
        comments=[
            {"path": "greeting.txt", "line": 1, "body": SUGGESTION},
            {"path": "notes.txt", "line": 1, "body": QUESTION},
        ],
    )
    [request] = wait_for_requests(stack, number, ["done"])

    assert file_on_branch(stack, branch, "greeting.txt") == "hello, world\n"
    assert file_on_branch(stack, branch, "notes.txt") == "notes\n"  # the reader's words are context, not orders
    assert request.requested_by == MAINTAINER and request.head_sha is not None
    [addressed] = replies_to(stack, inline(stack, "greeting.txt", SUGGESTION)["id"])
    [declined] = replies_to(stack, inline(stack, "notes.txt", QUESTION)["id"])
    assert addressed["body"].startswith("<!-- lanebot:fix-reply")
    assert "Addressed in" in addressed["body"] and request.head_sha[:7] in addressed["body"]
    assert "rewrote greeting.txt as suggested" in addressed["body"]
    assert "Not addressed" in declined["body"] and "spells out no change" in declined["body"]
    assert replies_to(stack, inline(stack, "notes.txt", READERS_SUGGESTION)["id"]) == []
    summary = wait_for_pull_comment(stack, pull, f"request={request.id}")
    assert "@maintainer" in summary["body"]
    [pulled] = [p for p in stack.repository(REPO)["pulls"] if p["number"] == pull["number"]]
    assert pulled["pull_request"]["requested_reviewers"] == [MAINTAINER]
    verify = [
        c
        for c in stack.repository(REPO)["check_runs"]
        if c["name"] == "lanebot / verify" and c["head_sha"] == request.head_sha
    ]
    assert [c["conclusion"] for c in verify] == ["success"]
    assert session_kinds(stack, number).count("fix") == 1


def test_a_reader_is_refused_and_a_second_fix_waits_for_the_first(stack, script, tmp_path):
    number, pull = open_pull(stack, config())
    release = script.parent / "release-fix"
    script.write_text(json.dumps({"fix_waits_for": str(release)}))

    stack.human.comment(REPO, pull["number"], login=READER, body="/fix do it my way")
    refusal = wait_for_pull_comment(stack, pull, "@contributor")
    assert "needs the maintain role" in refusal["body"]
    stack.human.review(REPO, pull["number"], login=READER, event="REQUEST_CHANGES", body="Change it all.")
    wait_for_pull_comment(stack, pull, "your review starts no fix lane")
    assert requests_of(stack, number) == []

    stack.human.comment(REPO, pull["number"], login=MAINTAINER, body="/fix first")
    wait_for_requests(stack, number, ["running"])
    stack.human.comment(REPO, pull["number"], login=MAINTAINER, body="/fix second")
    wait_for_requests(stack, number, ["running", "queued"])
    queued = wait_for_pull_comment(stack, pull, "is queued")
    assert "1 earlier request on this pull request goes first" in queued["body"]

    release.write_text("go")
    first, second = wait_for_requests(stack, number, ["done", "done"])
    assert first.started_at < first.finished_at <= second.started_at
    assert [r.notes for r in (first, second)] == ["first", "second"]


def test_closing_the_pull_request_cancels_the_review_work_it_had_queued(stack, script, tmp_path):
    number, pull = open_pull(stack, config())
    script.write_text(json.dumps({"fix_waits_for": str(script.parent / "never")}))
    stack.human.comment(REPO, pull["number"], login=MAINTAINER, body="/fix first")
    wait_for_requests(stack, number, ["running"])
    stack.human.comment(REPO, pull["number"], login=MAINTAINER, body="/fix second")
    wait_for_requests(stack, number, ["running", "queued"])

    stack.human.close_issue(REPO, pull["number"], login=MAINTAINER)
    cancelled = wait_for_requests(stack, number, ["cancelled", "cancelled"])
    assert all("was closed by @maintainer" in (r.error or "") for r in cancelled)
    assert lanebot_run(stack, number).state == "cancelled"


def test_a_fix_report_that_links_to_a_host_file_is_refused_naming_the_file_never_its_content(stack, script, tmp_path):
    secret = tmp_path / "host-report.json"
    secret.write_text(json.dumps({"summary": "HOST-SECRET", "addressed": [], "not_addressed": []}))
    script.write_text(json.dumps({"fix_links_report_to": str(secret)}))
    number, pull = open_pull(stack, config())
    stack.human.review(
        REPO,
        pull["number"],
        login=MAINTAINER,
        event="REQUEST_CHANGES",
        body="One thing.",
        comments=[{"path": "greeting.txt", "line": 1, "body": SUGGESTION}],
    )
    [request] = wait_for_requests(stack, number, ["done"])

    [reply] = replies_to(stack, inline(stack, "greeting.txt", SUGGESTION)["id"])
    assert "Not addressed" in reply["body"] and ".lanebot/fix.json" in reply["body"] and "symlink" in reply["body"]
    everything = json.dumps(stack.repository(REPO))
    assert "HOST-SECRET" not in everything and "HOST-SECRET" not in (request.result or "")


# --------------------------------------------------------------------------- lanebot's own review


def test_its_own_review_comments_inline_on_the_right_lines_and_drops_a_refuted_finding(stack, script):
    finding = {
        "file": "greeting.txt",
        "line": 1,
        "claim": "The greeting names nobody.",
        "evidence": "greeting.txt line 1 reads 'hello'.",
        "severity": "low",
    }
    refuted = {
        "file": "notes.txt",
        "line": 1,
        "claim": "notes.txt leaks a secret.",
        "evidence": "It is called notes.",
        "severity": "high",
    }
    script.write_text(
        json.dumps(
            {
                "review": {
                    "correctness": {"find": {"looked_at": [], "findings": [finding]}, "refute": ["security-1"]},
                    "security": {"find": {"looked_at": [], "findings": [refuted]}, "refute": []},
                }
            }
        )
    )
    number, pull = open_pull(stack, config(review=True))
    [request] = wait_for_requests(stack, number, ["done"])

    [review] = [r for r in stack.repository(REPO)["reviews"] if r["pull"] == pull["number"]]
    assert review["state"] == "commented" and review["commit_id"] == request.head_sha
    assert review["body"].startswith(f"<!-- lanebot:self-review run={lanebot_run(stack, number).id}")
    [comment] = [c for c in review_comments(stack) if c["review_id"] == review["id"]]
    assert (comment["path"], comment["line"], comment["side"]) == ("greeting.txt", 1, "RIGHT")
    assert "The greeting names nobody." in comment["body"]
    assert "leaks a secret" not in json.dumps(stack.repository(REPO)["review_comments"])
    assert json.loads(request.result)["dropped"] == ["security-1"]
    assert session_kinds(stack, number).count("review") == 4  # two lenses find, then each judges the other


def test_a_lens_whose_findings_file_links_to_a_host_file_is_a_problem_naming_the_file_never_its_content(
    stack, script, tmp_path
):
    secret = tmp_path / "host-findings.json"
    secret.write_text(
        json.dumps(
            {
                "looked_at": [],
                "findings": [
                    {
                        "file": "greeting.txt",
                        "line": 1,
                        "claim": "HOST-SECRET-CLAIM",
                        "evidence": "HOST-SECRET-EVIDENCE",
                        "severity": "high",
                    }
                ],
            }
        )
    )
    script.write_text(
        json.dumps(
            {
                "review": {
                    "correctness": {"find": {"looked_at": [], "findings": []}, "refute": []},
                    "security": {"link_findings_to": str(secret), "refute": []},
                }
            }
        )
    )
    number, pull = open_pull(stack, config(review=True))
    [request] = wait_for_requests(stack, number, ["done"])

    [review] = [r for r in stack.repository(REPO)["reviews"] if r["pull"] == pull["number"]]
    everything = json.dumps(stack.repository(REPO)["reviews"]) + json.dumps(stack.repository(REPO)["review_comments"])
    assert "HOST-SECRET" not in everything and "HOST-SECRET" not in (request.result or "")
    assert any(
        "`.lanebot/findings.json` is a symlink; lanebot reads only regular files there" in problem
        for problem in json.loads(request.result)["problems"]
    )
