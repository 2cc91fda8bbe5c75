"""The demo's run, label to pull request, makes exactly the GitHub requests it needs (issue 17).

The budget is the request log of the sandbox GitHub for `lanebot demo`'s 4-unit run, counted as
reads answered 200, conditional reads answered 304 (free of GitHub's rate limit) and writes
(POST, PATCH, PUT, DELETE). A change that adds a request fails here with the whole log, each line
named by what it is for; docs/benchmarks.md ("GitHub requests per run") keeps the same table. The
progress comment's edits in the middle of the run follow the clock (at most one per
PROGRESS_INTERVAL_S), so they are counted apart: at least the final one.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from bot.demo.runner import REPOSITORY, run_demo
from bot.demo.stack import Stack

pytestmark = pytest.mark.slow

READS = 16
NOT_MODIFIED = 3
WRITES = 19  # besides the progress comment's edits
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
SETTLE_TIMEOUT_S = 60.0

# What each request is for, by method and path (first match); the failure message shows these.
PURPOSES = [
    ("GET", r"/app/hook/deliveries", "start-up: failed deliveries to redeliver"),
    ("POST", r"/app/installations/\d+/access_tokens", "an installation token for the repository"),
    ("GET", r"/repos/[^/]+/[^/]+/contents/\.github/lanebot\.yml", "the repository's workflow file"),
    ("GET", r"/repos/[^/]+/[^/]+/collaborators/[^/]+/permission", "may the commenter command lanebot"),
    ("GET", r"/repos/[^/]+/[^/]+/labels/[^/]+", "the trigger label (is it there)"),
    ("POST", r"/repos/[^/]+/[^/]+/labels", "create the trigger label (once per repository)"),
    (
        "PATCH",
        r"/repos/[^/]+/[^/]+/labels/[^/]+",
        "a state label GitHub just made, given its colour (once per repository)",
    ),
    ("GET", r"/repos/[^/]+/[^/]+/issues/\d+/labels", "the issue's labels, before its state label changes"),
    ("POST", r"/repos/[^/]+/[^/]+/issues/\d+/labels", "add the state label"),
    ("PUT", r"/repos/[^/]+/[^/]+/issues/\d+/labels", "swap the state label"),
    ("GET", r"/repos/[^/]+/[^/]+/issues/\d+", "the issue"),
    ("GET", r"/repos/[^/]+/[^/]+/issues/\d+/comments", "the issue's comments (a marker looked for)"),
    ("POST", r"/repos/[^/]+/[^/]+/issues/\d+/comments", "the gate or the progress comment"),
    ("PATCH", r"/repos/[^/]+/[^/]+/issues/comments/\d+", "an edit of the progress comment"),
    ("POST", r"/repos/[^/]+/[^/]+/issues/comments/\d+/reactions", "the 👀 on /approve"),
    ("GET", r"/repos/[^/]+/[^/]+", "the repository (its default branch)"),
    ("GET", r"/app", "the App (its bot's login)"),
    ("GET", r"/users/[^/]+", "the App's bot user (the commits' author)"),
    ("GET", r"/repos/[^/]+/[^/]+/commits/[^/]+/check-runs", "a commit's check runs (a lookup)"),
    ("POST", r"/repos/[^/]+/[^/]+/check-runs", "a check run (a lane's, made completed; verify's)"),
    ("PATCH", r"/repos/[^/]+/[^/]+/check-runs/\d+", "verify's check run completed"),
    ("GET", r"/repos/[^/]+/[^/]+/pulls", "an open pull request of the branch"),
    ("POST", r"/repos/[^/]+/[^/]+/pulls", "the pull request"),
]


def purpose(method: str, path: str) -> str:
    return next((why for m, pattern, why in PURPOSES if m == method and re.fullmatch(pattern, path)), "?")


def logged(stack: Stack) -> list[tuple[str, str, int]]:
    requests = []
    for line in stack.api_requests():
        method, path, status = line.split(" ")
        requests.append((method, path, int(status)))
    return requests


def settled(stack: Stack, number: int) -> bool:
    """The done label is set and its request logged (the last thing the run does on GitHub)."""
    if "lanebot:done" not in stack.issue(REPOSITORY, number)["labels"]:
        return False
    requests = logged(stack)
    opened = max((i for i, (m, p, _) in enumerate(requests) if (m, p) == ("POST", f"/repos/{REPOSITORY}/pulls")))
    return any(m in ("POST", "PUT") and p.endswith(f"/issues/{number}/labels") for m, p, _ in requests[opened:])


def test_the_demos_run_makes_exactly_its_budget_of_github_requests(tmp_path: Path) -> None:
    stack, result = run_demo(tmp_path / "demo", say=lambda _: None)
    try:
        issue_number = 1
        stack.wait_for("the run's last label", lambda: settled(stack, issue_number), timeout=SETTLE_TIMEOUT_S)
        progress = next(
            c["id"] for c in stack.issue(REPOSITORY, issue_number)["comments"] if "lanebot:progress" in c["body"][:80]
        )
        requests = logged(stack)
    finally:
        stack.stop()

    progress_edit = ("PATCH", f"/repos/{REPOSITORY}/issues/comments/{progress}")
    counts = Counter(
        "progress edit"
        if (method, path) == progress_edit
        else "write"
        if method in WRITE_METHODS
        else "not modified"
        if status == 304
        else "read"
        for method, path, status in requests
    )
    log = "\n".join(
        f"{n:3} {method:6} {path} {status}  {purpose(method, path)}"
        for n, (method, path, status) in enumerate(requests, 1)
    )
    budget = {"read": READS, "not modified": NOT_MODIFIED, "write": WRITES}
    assert {kind: counts[kind] for kind in budget} == budget and counts["progress edit"] >= 1, (
        f"the demo's run made {dict(counts)} GitHub requests, its budget is {budget} and at least one "
        f"progress edit; if a request was added on purpose, update the budget here and the table in "
        f"docs/benchmarks.md. The requests:\n{log}"
    )
    assert "?" not in [purpose(m, p) for m, p, _ in requests], f"a request nobody named:\n{log}"
    assert result.pull["number"] == 2
