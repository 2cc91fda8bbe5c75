"""The sandbox merges pull requests and deletes branches as GitHub does.

Merging (the human API's "Merge pull request" button): a real merge commit on the base branch,
the pull request merged and closed, `pull_request.closed` with `merged: true`, and the issues its
body closes closed. Deleting a branch (`DELETE /repos/{owner}/{repo}/git/refs/heads/{branch}`):
204, GitHub's 422 "Reference does not exist" for a ref that is not there, and the open pull
requests from that branch closed. Driven in-process with the harness of tests/sandbox/test_sandbox.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.sandbox.core import closing_references
from tests.sandbox.test_sandbox import git, harness, push_branch

pytestmark = pytest.mark.anyio

REPO = "alice/demo"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# demo\n")
    return folder


async def open_pull(
    h,
    token: dict[str, str],
    branch: str,
    work: Path,
    files: dict[str, str],
    *,
    draft: bool = False,
    body: str = "Closes #1",
) -> int:
    push_branch(h.sandbox, REPO, branch, work, files)
    response = await h.http.post(
        f"/repos/{REPO}/pulls",
        headers=token,
        json={"title": f"From {branch}", "head": branch, "base": "main", "body": body, "draft": draft},
    )
    assert response.status_code == 201, response.text
    await h.sandbox.webhooks.drain()
    return response.json()["number"]


def bare(h) -> Path:
    return h.sandbox.git.path("alice", "demo")


async def test_merging_makes_a_merge_commit_of_the_base_tip_and_the_head_on_the_base_branch(tmp_path, project):
    async with harness(tmp_path, project) as h:
        token = await h.token((await h.repository(REPO))["installation_id"])
        issue = await h.issue(REPO)
        base_before = h.sandbox.git.resolve("alice", "demo", "main")
        number = await open_pull(
            h, token, "feature", tmp_path / "work", {"feature.txt": "new\n"}, body=f"Does it.\n\nFixes: #{issue}"
        )
        head = h.sandbox.git.resolve("alice", "demo", "feature")
        h.receiver.requests.clear()

        merged = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{number}/merge", json={"as": "bob", "role": "write"})

        assert merged.status_code == 200, merged.text
        assert merged.json()["state"] == "closed" and merged.json()["pull_request"]["merged"] is True
        tip = h.sandbox.git.resolve("alice", "demo", "main")
        assert merged.json()["pull_request"]["merge_commit_sha"] == tip
        parents = git("--git-dir", str(bare(h)), "rev-list", "--parents", "-n", "1", tip).stdout.split()[1:]
        assert parents == [base_before, head]
        subject = git("--git-dir", str(bare(h)), "log", "-1", "--format=%s|%an|%cn", tip).stdout.strip()
        assert subject == f"Merge pull request #{number} from alice/feature|bob|GitHub"
        assert await h.delivered() == [("push", None), ("pull_request", "closed"), ("issues", "closed")]
        push = json.loads(h.receiver.requests[0].content)
        assert (push["ref"], push["before"], push["after"]) == ("refs/heads/main", base_before, tip)
        assert push["head_commit"]["committer"]["username"] == "web-flow" and push["pusher"]["name"] == "bob"
        closed = json.loads(h.receiver.requests[1].content)
        assert closed["pull_request"]["merged"] is True and closed["pull_request"]["merged_by"]["login"] == "bob"
        assert closed["pull_request"]["merge_commit_sha"] == tip
        rest = (await h.http.get(f"/repos/{REPO}/pulls/{number}", headers=token)).json()
        assert (rest["state"], rest["merged"], rest["merged_at"] is not None) == ("closed", True, True)


async def test_merge_is_refused_for_a_reader_a_draft_a_conflict_and_a_pull_already_merged(tmp_path, project):
    async with harness(tmp_path, project) as h:
        token = await h.token((await h.repository(REPO))["installation_id"])
        draft = await open_pull(h, token, "draft", tmp_path / "draft", {"a.txt": "a\n"}, draft=True)
        left = await open_pull(h, token, "left", tmp_path / "left", {"README.md": "left\n"})
        right = await open_pull(h, token, "right", tmp_path / "right", {"README.md": "right\n"})

        reader = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{left}/merge", json={"as": "rita", "role": "read"})
        assert reader.status_code == 403 and "needs write or higher" in reader.json()["message"]
        refused_draft = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{draft}/merge", json={"as": "alice"})
        assert refused_draft.status_code == 405 and "draft" in refused_draft.json()["message"]
        merged = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{left}/merge", json={"as": "alice"})
        assert merged.status_code == 200
        conflict = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{right}/merge", json={"as": "alice"})
        assert conflict.status_code == 405 and "not mergeable" in conflict.json()["message"]
        again = await h.http.post(f"/_sandbox/repos/{REPO}/pulls/{left}/merge", json={"as": "alice"})
        assert again.status_code == 405 and "already merged" in again.json()["message"]


async def test_deleting_a_branch_answers_204_then_422_reference_does_not_exist(tmp_path, project):
    async with harness(tmp_path, project) as h:
        token = await h.token((await h.repository(REPO))["installation_id"])
        push_branch(h.sandbox, REPO, "lanebot-lanes/1/api", tmp_path / "work", {"api.txt": "api\n"})

        deleted = await h.http.delete(f"/repos/{REPO}/git/refs/heads/lanebot-lanes/1/api", headers=token)
        assert (deleted.status_code, deleted.content) == (204, b"")
        assert "lanebot-lanes/1/api" not in h.sandbox.git.branches("alice", "demo")
        again = await h.http.delete(f"/repos/{REPO}/git/refs/heads/lanebot-lanes/1/api", headers=token)
        assert again.status_code == 422
        assert again.json()["message"] == "Reference does not exist"
        assert again.json()["documentation_url"] == "https://docs.github.com/rest/git/refs#delete-a-reference"
        for bad in ("main", "refs/heads/main", "heads/../main"):
            assert (await h.http.delete(f"/repos/{REPO}/git/refs/{bad}", headers=token)).status_code in (404, 422)
        assert "main" in h.sandbox.git.branches("alice", "demo")
        anonymous = await h.http.delete(f"/repos/{REPO}/git/refs/heads/main")
        assert anonymous.status_code in (401, 403, 404) and "main" in h.sandbox.git.branches("alice", "demo")


async def test_deleting_the_head_branch_of_an_open_pull_request_closes_it_unmerged(tmp_path, project):
    async with harness(tmp_path, project) as h:
        token = await h.token((await h.repository(REPO))["installation_id"])
        number = await open_pull(h, token, "feature", tmp_path / "work", {"f.txt": "f\n"})
        h.receiver.requests.clear()
        assert (await h.http.delete(f"/repos/{REPO}/git/refs/heads/feature", headers=token)).status_code == 204
        assert await h.delivered() == [("push", None), ("pull_request", "closed")]
        push = json.loads(h.receiver.requests[0].content)
        assert (push["ref"], push["deleted"], push["after"], push["head_commit"]) == (
            "refs/heads/feature",
            True,
            "0" * 40,
            None,
        )
        closed = json.loads(h.receiver.requests[1].content)["pull_request"]
        assert (closed["number"], closed["state"], closed["merged"]) == (number, "closed", False)


def test_closing_keywords_are_githubs_in_any_case_with_an_optional_colon_and_each_issue_once():
    text = "Closes #1. fixes: #2, Resolved #3 and CLOSE #1; mentions #4; reclosed #5; fix#6"
    assert closing_references(text) == [1, 2, 3]
    assert closing_references(None) == []
