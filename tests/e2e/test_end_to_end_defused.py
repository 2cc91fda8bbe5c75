"""Finding 2 of the hardening issue, through the sandbox GitHub: a plan's unit title (and the issue's title,
and a check's output) `Add notes. Closes #1 cc @octo-org/everyone` reaches the pull request, the lane's
commits and the check runs inert. Merging the pull request (the sandbox closes the issues its body names
with a closing keyword, as GitHub does) closes lanebot's issue and leaves unrelated issue #1 open."""

from __future__ import annotations

import re
import subprocess

import pytest

from bot.demo.stack import Stack
from tests.e2e.test_end_to_end import (
    MAINTAINER,
    REPO,
    STEP_TIMEOUT,
    config,
    plan_body,
    recipe_unit,
    wait_for_comment,
    wait_for_pull,
)

pytestmark = pytest.mark.slow

HOSTILE = "Add notes. Closes #1 cc @octo-org/everyone"
LIVE_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")


def live_closing(text: str) -> list[str]:
    """The issues GitHub's closing keywords in `text` would close (`Closes #1`, `fixes: o/r#2`, a URL)."""
    pattern = r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s*((?:[\w.-]+/[\w.-]+)?#\d+|gh-\d+|https?://\S+)"
    return re.findall(pattern, text, re.IGNORECASE)


def commit_messages(stack: Stack, ref: str) -> list[str]:
    log = subprocess.run(
        ["git", "--git-dir", str(stack.bare_repository(REPO)), "log", "--format=%B%x00", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [message.strip() for message in log.split("\x00") if message.strip()]


def test_a_hostile_title_reaches_github_inert_and_merging_closes_only_lanebots_issue(stack):
    stack.create_repository(REPO, config=config() + "pull_request:\n  draft: false\n", maintainers=(MAINTAINER,))
    unrelated = stack.human.open_issue(REPO, login=MAINTAINER, title="Unrelated", body="Leave me open.")["number"]
    assert unrelated == 1
    unit = recipe_unit("notes", "^notes/", {"notes/a.md": "notes\n"}, check=f"echo '{HOSTILE}'")
    number = stack.human.open_issue(
        REPO, login=MAINTAINER, title=HOSTILE, body=plan_body([{**unit, "title": HOSTILE}])
    )["number"]
    stack.human.add_label(REPO, number, "lanebot", login=MAINTAINER)
    wait_for_comment(stack, number, "<!-- lanebot:gate")
    stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
    pull = wait_for_pull(stack, number)

    body, title = pull["body"], pull["title"]
    assert "Add notes. Closes" in body.replace("\u200b", "")  # the title is shown, from the plan and the integrator
    assert live_closing(body) == [f"#{number}"]  # lanebot's own `Closes #<issue>`, nothing of the plan's
    assert not LIVE_MENTION.search(body) and not LIVE_MENTION.search(title) and not live_closing(title)
    messages = commit_messages(stack, f"lanebot/{number}")
    lane_commit = next(message for message in messages if message.startswith("notes: "))
    assert "octo-org/everyone" in lane_commit
    for message in messages:
        assert not live_closing(message) and not LIVE_MENTION.search(message), message
    lane_checks = [run for run in stack.repository(REPO)["check_runs"] if run["name"] == "lanebot / notes"]
    assert lane_checks and any("octo-org/everyone" in run["output"].get("summary", "") for run in lane_checks)
    for run in lane_checks:
        for text in (run["output"].get("title", ""), run["output"].get("summary", "")):
            assert not live_closing(text) and not LIVE_MENTION.search(text), text

    stack.human.merge_pull(REPO, pull["number"], login=MAINTAINER)
    stack.wait_for(
        "lanebot's issue closed by the merge",
        lambda: stack.issue(REPO, number)["state"] == "closed" or None,
        timeout=STEP_TIMEOUT,
        seen=lambda: stack.issue(REPO, number)["state"],
    )
    assert stack.issue(REPO, unrelated)["state"] == "open"
    merged = commit_messages(stack, "main")
    assert not any(live_closing(message) for message in merged if "notes" in message)
