"""The repository's own CI in the sandbox: a second App (GitHub Actions' id and slug) that reports on
a commit when a test says so, and what GitHub then shows and sends.

GitHub's behaviour held to: a check suite is one App's runs on one commit; `check_suite.completed`
goes to every subscribed App with checks permission, lanebot's too, once every run of the suite has
finished, with `check_suite.app` naming whose suite it is and `pull_requests` the open pull requests
whose head it is; annotations are listed by `GET .../check-runs/{id}/annotations` and a suite's runs
by `GET .../check-suites/{id}/check-runs` (docs.github.com/en/rest/checks/runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.sandbox.core import CI_APP_ID
from tests.sandbox.test_sandbox import APP_ID, Harness, harness, push_branch

pytestmark = pytest.mark.anyio

REPO = "alice/demo"
ANNOTATION = {
    "path": "pkg/core.py",
    "start_line": 1,
    "end_line": 2,
    "annotation_level": "failure",
    "message": "AssertionError: VALUE is 1",
}
TESTS = {
    "name": "tests",
    "conclusion": "failure",
    "output": {
        "title": "1 test failed",
        "summary": "test_value failed",
        "text": "E   assert 1 == 2",
        "annotations": [ANNOTATION],
    },
}
LINT = {"name": "lint", "conclusion": "success", "output": {"title": "clean", "summary": "No problems."}}


async def pull_request(h: Harness, tmp_path: Path) -> tuple[dict[str, str], str]:
    """An open pull request from `feature` (pushed by lanebot's bot); the bot's token and the head."""
    repo = await h.repository(REPO)
    token = await h.token(repo["installation_id"])
    push_branch(h.sandbox, REPO, "feature", tmp_path / "work", {"thing.txt": "thing\n"})
    opened = await h.http.post(
        f"/repos/{REPO}/pulls", headers=token, json={"title": "A thing", "head": "feature", "base": "main"}
    )
    assert opened.status_code == 201, opened.text
    await h.delivered()
    h.receiver.requests.clear()
    return token, opened.json()["head"]["sha"]


async def report(h: Harness, sha: str, *runs: dict[str, Any]) -> dict[str, Any]:
    response = await h.http.post(f"/_sandbox/repos/{REPO}/ci-reports", json={"sha": sha, "runs": list(runs)})
    assert response.status_code == 201, response.text
    return response.json()


def payloads(h: Harness, event: str) -> list[dict[str, Any]]:
    return [json.loads(r.content) for r in h.receiver.requests if r.headers["X-GitHub-Event"] == event]


async def test_a_ci_report_sends_each_runs_events_then_one_completed_suite_of_the_ci_app(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        _, head = await pull_request(h, tmp_path)
        await report(h, head, TESTS, LINT)
        assert await h.delivered() == [
            ("check_run", "created"),
            ("check_run", "completed"),
            ("check_run", "created"),
            ("check_run", "completed"),
            ("check_suite", "completed"),
        ]
        [delivered] = payloads(h, "check_suite")
        suite = delivered["check_suite"]
        assert (suite["app"]["id"], suite["app"]["slug"]) == (CI_APP_ID, "github-actions")
        assert suite["app"]["id"] != APP_ID
        assert (suite["status"], suite["conclusion"], suite["head_sha"]) == ("completed", "failure", head)
        assert [(p["number"], p["head"]["sha"]) for p in suite["pull_requests"]] == [(1, head)]
        assert suite["latest_check_runs_count"] == 2 and suite["head_commit"]["id"] == head
        assert suite["check_runs_url"].endswith(f"/repos/{REPO}/check-suites/{suite['id']}/check-runs")
        assert {p["check_run"]["app"]["slug"] for p in payloads(h, "check_run")} == {"github-actions"}
        assert delivered["sender"]["login"] == "github-actions[bot]"


async def test_a_suites_check_runs_are_its_apps_only_with_their_output(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        token, head = await pull_request(h, tmp_path)
        own = await h.http.post(
            f"/repos/{REPO}/check-runs", headers=token, json={"name": "lanebot / verify", "head_sha": head}
        )
        assert own.status_code == 201
        suite_id = (await report(h, head, TESTS, LINT))["check_suite_id"]
        listed = (await h.http.get(f"/repos/{REPO}/check-suites/{suite_id}/check-runs", headers=token)).json()
        assert listed["total_count"] == 2
        by_name = {run["name"]: run for run in listed["check_runs"]}
        assert set(by_name) == {"tests", "lint"}
        tests = by_name["tests"]
        assert (tests["conclusion"], tests["output"]["title"], tests["output"]["text"]) == (
            "failure",
            "1 test failed",
            "E   assert 1 == 2",
        )
        assert tests["output"]["annotations_count"] == 1
        assert tests["check_suite"]["id"] == suite_id and tests["app"]["slug"] == "github-actions"
        failed = await h.http.get(
            f"/repos/{REPO}/check-suites/{suite_id}/check-runs", headers=token, params={"check_name": "lint"}
        )
        assert [run["name"] for run in failed.json()["check_runs"]] == ["lint"]
        assert (await h.http.get(f"/repos/{REPO}/check-suites/999/check-runs", headers=token)).status_code == 404


async def test_a_runs_annotations_are_listed_as_github_shows_them_a_page_at_a_time(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        token, head = await pull_request(h, tmp_path)
        more = [dict(ANNOTATION, start_line=n, end_line=n, message=f"problem {n}") for n in range(1, 4)]
        tests = dict(TESTS, output=dict(TESTS["output"], annotations=more))
        [run] = (await report(h, head, tests))["check_runs"]
        url = f"/repos/{REPO}/check-runs/{run['id']}/annotations"
        first = await h.http.get(url, headers=token, params={"per_page": 2})
        assert first.status_code == 200 and 'rel="next"' in first.headers["Link"]
        assert [a["message"] for a in first.json()] == ["problem 1", "problem 2"]
        shown = first.json()[0]
        assert set(shown) == {
            "path",
            "start_line",
            "end_line",
            "start_column",
            "end_column",
            "annotation_level",
            "title",
            "message",
            "raw_details",
            "blob_href",
        }
        assert (shown["path"], shown["annotation_level"]) == ("pkg/core.py", "failure")
        assert shown["blob_href"].endswith(f"/{REPO}/blob/{head}/pkg/core.py")
        second = await h.http.get(url, headers=token, params={"per_page": 2, "page": 2})
        assert [a["message"] for a in second.json()] == ["problem 3"]


async def test_lanebots_own_suite_completes_when_its_last_run_finishes(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        token, head = await pull_request(h, tmp_path)
        ids = []
        for name in ("lanebot / a", "lanebot / b"):
            created = await h.http.post(
                f"/repos/{REPO}/check-runs", headers=token, json={"name": name, "head_sha": head}
            )
            ids.append(created.json()["id"])
        for run_id in ids:
            await h.http.patch(f"/repos/{REPO}/check-runs/{run_id}", headers=token, json={"conclusion": "failure"})
        assert await h.delivered() == [
            ("check_run", "created"),
            ("check_run", "created"),
            ("check_run", "completed"),
            ("check_run", "completed"),
            ("check_suite", "completed"),
        ]
        [delivered] = payloads(h, "check_suite")
        assert delivered["check_suite"]["app"]["id"] == APP_ID
        assert delivered["sender"]["login"].endswith("[bot]")


async def test_an_annotation_level_github_does_not_know_is_422(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        token, head = await pull_request(h, tmp_path)
        output = {"title": "t", "summary": "s", "annotations": [dict(ANNOTATION, annotation_level="error")]}
        refused = await h.http.post(
            f"/repos/{REPO}/check-runs", headers=token, json={"name": "x", "head_sha": head, "output": output}
        )
        assert refused.status_code == 422 and "annotation_level" in refused.json()["message"]


@pytest.mark.parametrize(
    ("runs", "says"),
    [
        ([], "non-empty list"),
        ([{"name": "tests", "output": TESTS["output"]}], "needs a conclusion"),
        ([dict(TESTS, output=dict(TESTS["output"], annotations=[{"path": "a.py"}]))], "not one GitHub takes"),
        ([dict(TESTS, conclusion="broken")], "not one GitHub takes"),
    ],
)
async def test_a_ci_report_github_would_not_take_is_refused_saying_why_and_sends_nothing(
    tmp_path: Path, project: Path, runs: list[dict[str, Any]], says: str
) -> None:
    async with harness(tmp_path, project) as h:
        _, head = await pull_request(h, tmp_path)
        refused = await h.http.post(f"/_sandbox/repos/{REPO}/ci-reports", json={"sha": head, "runs": runs})
        assert refused.status_code == 422 and says in refused.json()["message"]
        unknown = await h.http.post(f"/_sandbox/repos/{REPO}/ci-reports", json={"sha": "nowhere", "runs": [TESTS]})
        assert unknown.status_code == 422 and "no commit" in unknown.json()["message"]
        assert await h.delivered() == []


async def test_a_person_pushing_a_commit_moves_the_pull_request_and_github_says_who(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        _, head = await pull_request(h, tmp_path)
        pushed = await h.http.post(
            f"/_sandbox/repos/{REPO}/pushes",
            json={"as": "bob", "role": "write", "branch": "feature", "files": {"pkg/core.py": "VALUE = 2\n"}},
        )
        assert pushed.status_code == 201, pushed.text
        sha = pushed.json()["sha"]
        assert h.sandbox.git.resolve("alice", "demo", "feature") == sha != head
        assert h.sandbox.git.parent("alice", "demo", sha) == head
        assert await h.delivered() == [("push", None), ("pull_request", "synchronize")]
        [push] = payloads(h, "push")
        assert (push["ref"], push["before"], push["after"], push["pusher"]["name"]) == (
            "refs/heads/feature",
            head,
            sha,
            "bob",
        )
        assert [(c["id"], c["modified"], c["author"]["username"]) for c in push["commits"]] == [
            (sha, ["pkg/core.py"], "bob")
        ]
        [synchronize] = payloads(h, "pull_request")
        assert (synchronize["sender"]["login"], synchronize["after"]) == ("bob", sha)
        assert synchronize["pull_request"]["head"]["sha"] == sha
        reader = await h.http.post(
            f"/_sandbox/repos/{REPO}/pushes",
            json={"as": "carol", "role": "read", "branch": "feature", "files": {"a.txt": "a"}},
        )
        outside = await h.http.post(
            f"/_sandbox/repos/{REPO}/pushes", json={"as": "bob", "branch": "feature", "files": {"../a.txt": "a"}}
        )
        assert (reader.status_code, outside.status_code) == (403, 422)
