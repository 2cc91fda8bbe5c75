"""The sandbox GitHub behaves as GitHub does: App authentication, token lifetime and scope, the
limits GitHub enforces, git over smart HTTP, signed webhook deliveries and redelivery, the
request log, the human API and its CLI.

Most tests drive the Starlette app in-process (httpx's ASGI transport) with an injected clock and
a webhook receiver that records what arrives; the git tests serve it on a loopback port, because
git needs real HTTP.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import gidgethub.sansio
import httpx
import jwt
import pytest

from bot.cli import main
from bot.sandbox import Sandbox, SandboxConfig, SandboxServer, create_app, generate_app_key
from bot.sandbox.cli import HumanClient

APP_ID = 4242
SECRET = "webhook-secret"
BASE = "http://sandbox.test"
HOOK_URL = "http://lanebot.test/api/github/webhooks"


@functools.cache
def app_key() -> tuple[str, str]:
    return generate_app_key()


@functools.cache
def other_key() -> tuple[str, str]:
    return generate_app_key()


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Receiver:
    """The App's webhook endpoint: records each delivery and answers `status` (or raises `error`)."""

    status: int = 202
    error: Exception | None = None
    requests: list[httpx.Request] = field(default_factory=list)

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.error is not None:
            raise self.error
        self.requests.append(request)
        return httpx.Response(self.status, json={"ok": True})

    def events(self) -> list[tuple[str, str]]:
        return [(r.headers["X-GitHub-Event"], json.loads(r.content).get("action")) for r in self.requests]


def app_jwt(clock: Clock, *, key: str | None = None, iss: Any = APP_ID, iat: int = -60, exp: int = 540) -> str:
    now = int(clock().timestamp())
    return jwt.encode({"iat": now + iat, "exp": now + exp, "iss": str(iss)}, key or app_key()[0], algorithm="RS256")


@dataclass
class Harness:
    sandbox: Sandbox
    http: httpx.AsyncClient
    clock: Clock
    receiver: Receiver
    folder: Path

    def bearer(self, **claims: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {app_jwt(self.clock, **claims)}"}

    async def repository(self, full_name: str, *, private: bool = True, organization: bool = False) -> dict[str, Any]:
        """A new repository; the installation webhooks its creation sends are left out of `receiver`."""
        response = await self.http.post(
            "/_sandbox/repos",
            json={"full_name": full_name, "path": str(self.folder), "private": private, "organization": organization},
        )
        assert response.status_code == 201, response.text
        await self.sandbox.webhooks.drain()
        self.receiver.requests.clear()
        return response.json()

    async def token(self, installation_id: int, **body: Any) -> dict[str, str]:
        response = await self.http.post(
            f"/app/installations/{installation_id}/access_tokens", headers=self.bearer(), json=body
        )
        assert response.status_code == 201, response.text
        return {"Authorization": f"token {response.json()['token']}"}

    async def issue(self, full_name: str, login: str = "alice", role: str = "admin") -> int:
        response = await self.http.post(
            f"/_sandbox/repos/{full_name}/issues", json={"as": login, "role": role, "title": "An issue", "body": "Text"}
        )
        assert response.status_code == 201, response.text
        return response.json()["number"]

    async def delivered(self) -> list[tuple[str, str]]:
        await self.sandbox.webhooks.drain()
        return self.receiver.events()


@contextlib.asynccontextmanager
async def harness(
    tmp_path: Path, project: Path, *, receiver: Receiver | None = None, **config: Any
) -> AsyncIterator[Harness]:
    receiver = receiver or Receiver()
    clock = Clock()
    settings = {
        "public_key_pem": app_key()[1],
        "app_id": APP_ID,
        "webhook_url": HOOK_URL,
        "webhook_secret": SECRET,
        "state_dir": tmp_path / "state",
        "public_url": BASE,
        **config,
    }
    sandbox = Sandbox(
        SandboxConfig(**settings),
        clock=clock,
        webhook_client=httpx.AsyncClient(transport=httpx.MockTransport(receiver)),
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(sandbox)), base_url=BASE) as http:
        yield Harness(sandbox, http, clock, receiver, project)
    await sandbox.close()


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd or Path.cwd()),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=check)


def push_branch(sandbox: Sandbox, full_name: str, branch: str, work: Path, files: dict[str, str]) -> None:
    """Commit files on a branch and push it straight into the sandbox's bare repository."""
    owner, name = full_name.split("/")
    if not work.exists():
        git("clone", "--quiet", str(sandbox.git.path(owner, name)), str(work))
        git("checkout", "--quiet", "-b", branch, cwd=work)
    for path, text in files.items():
        (work / path).write_text(text)
    git("add", "--all", cwd=work)
    git("commit", "--quiet", "--allow-empty", "-m", "change", cwd=work)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)


pytestmark = pytest.mark.anyio


# the App's JWT and installation tokens


async def test_a_valid_app_jwt_mints_a_token_that_expires_in_one_hour(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        response = await h.http.post(f"/app/installations/{repo['installation_id']}/access_tokens", headers=h.bearer())
        body = response.json()
        assert response.status_code == 201
        assert body["token"].startswith("ghs_")
        assert body["expires_at"] == "2026-03-01T13:00:00Z"
        assert body["permissions"] == {
            "checks": "write",
            "contents": "write",
            "issues": "write",
            "members": "read",
            "metadata": "read",
            "pull_requests": "write",
        }
        assert body["repository_selection"] == "selected"
        assert "repositories" not in body


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        (
            {"iat": -700, "exp": -60},
            "'Expiration time' claim ('exp') must be a numeric value representing the future "
            "time at which the assertion expires",
        ),
        ({"key": other_key()[0]}, "A JSON web token could not be decoded"),
        ({"iss": 999}, "A JSON web token could not be decoded"),
        ({"iat": 0, "exp": 660}, "'Expiration time' claim ('exp') is too far in the future"),
    ],
    ids=["expired", "signed-with-another-key", "another-apps-id", "lives-over-ten-minutes"],
)
async def test_a_bad_app_jwt_is_refused_with_401_and_githubs_message(
    tmp_path: Path, project: Path, claims: dict, message: str
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        response = await h.http.post(
            f"/app/installations/{repo['installation_id']}/access_tokens", headers=h.bearer(**claims)
        )
        assert response.status_code == 401
        assert response.json() == {
            "message": message,
            "documentation_url": "https://docs.github.com/rest",
            "status": "401",
        }


async def test_app_routes_take_the_apps_jwt_only(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        assert (await h.http.get("/app", headers=token)).json()["message"] == "A JSON web token could not be decoded"
        assert (await h.http.get("/app")).status_code == 401
        assert (await h.http.get("/app", headers=h.bearer())).json()["id"] == APP_ID


async def test_an_installation_token_stops_working_one_hour_after_it_was_minted(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        h.clock.advance(minutes=59, seconds=59)
        assert (await h.http.get("/repos/alice/demo", headers=token)).status_code == 200
        h.clock.advance(seconds=1)
        response = await h.http.get("/repos/alice/demo", headers=token)
        assert response.status_code == 401
        assert response.json()["message"] == "Bad credentials"


async def test_a_token_scoped_to_one_repository_cannot_reach_another(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        demo = await h.repository("alice/demo")
        await h.repository("alice/secret")
        await h.repository("alice/open", private=False)
        token = await h.token(demo["installation_id"], repositories=["demo"])
        assert (await h.http.get("/repos/alice/demo", headers=token)).status_code == 200
        assert (await h.http.get("/repos/alice/secret", headers=token)).status_code == 404
        await h.issue("alice/open")
        assert (await h.http.get("/repos/alice/open/issues/1", headers=token)).status_code == 200
        refused = await h.http.post("/repos/alice/open/issues/1/comments", headers=token, json={"body": "hi"})
        assert refused.status_code == 403
        assert refused.json()["message"] == "Resource not accessible by integration"


async def test_a_token_gets_only_the_permissions_asked_for_and_granted(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        reader = await h.token(repo["installation_id"], permissions={"issues": "read"})
        assert (await h.http.get("/repos/alice/demo/issues/1", headers=reader)).status_code == 200
        assert (
            await h.http.post("/repos/alice/demo/issues/1/comments", headers=reader, json={"body": "x"})
        ).status_code == 403
        too_much = await h.http.post(
            f"/app/installations/{repo['installation_id']}/access_tokens",
            headers=h.bearer(),
            json={"permissions": {"administration": "write"}},
        )
        assert too_much.status_code == 422
        unknown = await h.http.post(
            f"/app/installations/{repo['installation_id']}/access_tokens",
            headers=h.bearer(),
            json={"repositories": ["nope"]},
        )
        assert unknown.status_code == 422


async def test_without_credentials_a_private_repository_is_404_and_writes_need_authentication(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        await h.repository("alice/open", private=False)
        await h.issue("alice/open")
        assert (await h.http.get("/repos/alice/demo")).status_code == 404
        assert (await h.http.get("/repos/alice/open")).status_code == 200
        response = await h.http.post("/repos/alice/open/issues/1/comments", json={"body": "x"})
        assert (response.status_code, response.json()["message"]) == (401, "Requires authentication")
        bad = await h.http.get("/repos/alice/open", headers={"Authorization": "token ghs_not-a-real-token"})
        assert (bad.status_code, bad.json()["message"]) == (401, "Bad credentials")


# limits and validation


async def test_a_comment_may_be_65536_characters_and_not_one_more(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        url = "/repos/alice/demo/issues/1/comments"
        assert (await h.http.post(url, headers=token, json={"body": "x" * 65536})).status_code == 201
        refused = await h.http.post(url, headers=token, json={"body": "x" * 65537})
        assert refused.status_code == 422
        body = refused.json()
        assert body["message"] == "Validation Failed"
        assert body["errors"][0]["resource"] == "IssueComment"
        assert {"resource", "code", "field"} <= set(body["errors"][0])
        edit = await h.http.patch(
            f"/repos/alice/demo/issues/comments/{(await h.http.get(url, headers=token)).json()[0]['id']}",
            headers=token,
            json={"body": "y" * 65537},
        )
        assert edit.status_code == 422


async def test_a_body_that_is_not_json_is_400_problems_parsing_json(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        response = await h.http.post("/repos/alice/demo/issues/1/comments", headers=token, content=b"{not json")
        assert (response.status_code, response.json()["message"]) == (400, "Problems parsing JSON")


async def test_comments_are_paginated_with_githubs_link_header(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        for n in range(5):
            await h.http.post("/repos/alice/demo/issues/1/comments", headers=token, json={"body": f"c{n}"})
        first = await h.http.get("/repos/alice/demo/issues/1/comments", headers=token, params={"per_page": 2})
        assert [c["body"] for c in first.json()] == ["c0", "c1"]
        assert first.headers["link"] == (
            f'<{BASE}/repos/alice/demo/issues/1/comments?per_page=2&page=2>; rel="next", '
            f'<{BASE}/repos/alice/demo/issues/1/comments?per_page=2&page=3>; rel="last"'
        )
        last = await h.http.get("/repos/alice/demo/issues/1/comments", headers=token, params={"per_page": 2, "page": 3})
        assert [c["body"] for c in last.json()] == ["c4"]
        assert 'rel="prev"' in last.headers["link"] and 'rel="first"' in last.headers["link"]


async def test_a_reaction_is_201_when_new_and_200_when_already_there(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        comment = (
            await h.http.post("/_sandbox/repos/alice/demo/issues/1/comments", json={"as": "alice", "body": "/approve"})
        ).json()
        token = await h.token(repo["installation_id"])
        url = f"/repos/alice/demo/issues/comments/{comment['id']}/reactions"
        assert (await h.http.post(url, headers=token, json={"content": "eyes"})).status_code == 201
        assert (await h.http.post(url, headers=token, json={"content": "eyes"})).status_code == 200
        assert (await h.http.post(url, headers=token, json={"content": "party"})).status_code == 422
        shown = (await h.http.get(f"/repos/alice/demo/issues/comments/{comment['id']}", headers=token)).json()
        assert shown["reactions"]["eyes"] == 1 and shown["reactions"]["total_count"] == 1


async def test_creating_a_label_that_exists_in_any_case_is_422_already_exists(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        created = await h.http.post(
            "/repos/alice/demo/labels", headers=token, json={"name": "lanebot:running", "color": "0e8a16"}
        )
        assert created.status_code == 201
        again = await h.http.post("/repos/alice/demo/labels", headers=token, json={"name": "LANEBOT:running"})
        assert again.status_code == 422
        assert again.json()["errors"] == [{"resource": "Label", "code": "already_exists", "field": "name"}]
        names = [label["name"] for label in (await h.http.get("/repos/alice/demo/labels", headers=token)).json()]
        assert "bug" in names  # GitHub's default labels come with every new repository


async def test_a_label_added_to_an_issue_before_it_exists_is_made_grey_and_can_be_restyled(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        added = await h.http.post("/repos/alice/demo/issues/1/labels", headers=token, json={"labels": ["lanebot:done"]})
        [made] = added.json()
        assert (made["color"], made["description"]) == ("ededed", None)
        url = "/repos/alice/demo/labels/lanebot%3Adone"
        styled = await h.http.patch(url, headers=token, json={"color": "0E8A16", "description": "opened a PR"})
        assert (styled.status_code, styled.json()["color"], styled.json()["description"]) == (
            200,
            "0e8a16",
            "opened a PR",
        )
        [held] = (await h.http.get("/repos/alice/demo/issues/1/labels", headers=token)).json()
        assert (held["name"], held["color"]) == ("lanebot:done", "0e8a16")
        bad = await h.http.patch(url, headers=token, json={"color": "green"})
        assert bad.json()["errors"] == [{"resource": "Label", "code": "invalid", "field": "color"}]
        missing = await h.http.patch("/repos/alice/demo/labels/nope", headers=token, json={"color": "000000"})
        assert missing.status_code == 404


async def test_removing_a_label_the_issue_lacks_is_404(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        added = await h.http.post("/repos/alice/demo/issues/1/labels", headers=token, json={"labels": ["lanebot/plan"]})
        assert [label["name"] for label in added.json()] == ["lanebot/plan"]
        url = "/repos/alice/demo/issues/1/labels/lanebot%2Fplan"
        assert (await h.http.delete(url, headers=token)).json() == []
        missing = await h.http.delete(url, headers=token)
        assert (missing.status_code, missing.json()["message"]) == (404, "Label does not exist")


@pytest.mark.parametrize(
    ("role", "permission"),
    [("admin", "admin"), ("maintain", "write"), ("write", "write"), ("triage", "read"), ("read", "read")],
)
async def test_collaborator_permission_folds_maintain_and_triage_and_keeps_the_role_name(
    tmp_path: Path, project: Path, role: str, permission: str
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("acme/demo", organization=True)
        await h.http.post("/_sandbox/repos/acme/demo/collaborators", json={"login": "carol", "role": role})
        token = await h.token(repo["installation_id"])
        body = (await h.http.get("/repos/acme/demo/collaborators/carol/permission", headers=token)).json()
        assert (body["permission"], body["role_name"], body["user"]["login"]) == (permission, role, "carol")
        assert body["user"]["permissions"]["push"] == (role in ("admin", "maintain", "write"))


async def test_a_stranger_has_no_permission_on_a_private_repository(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("acme/demo", organization=True)
        await h.repository("acme/other", organization=True)
        await h.http.post("/_sandbox/repos/acme/other/collaborators", json={"login": "mallory", "role": "write"})
        token = await h.token(repo["installation_id"])
        body = (await h.http.get("/repos/acme/demo/collaborators/mallory/permission", headers=token)).json()
        assert (body["permission"], body["role_name"]) == ("none", "none")
        assert (await h.http.get("/repos/acme/demo/collaborators/nobody/permission", headers=token)).status_code == 404


async def test_contents_are_base64_at_a_ref_and_404_when_absent(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        found = await h.http.get(
            "/repos/alice/demo/contents/.github/lanebot.yml", headers=token, params={"ref": "main"}
        )
        body = found.json()
        assert (body["type"], body["encoding"], body["path"]) == ("file", "base64", ".github/lanebot.yml")
        assert base64.b64decode(body["content"]) == b"max_units: 4\n"
        assert body["size"] == len(b"max_units: 4\n")
        assert (await h.http.get("/repos/alice/demo/contents/nope.yml", headers=token)).status_code == 404
        missing_ref = await h.http.get("/repos/alice/demo/contents/README.md", headers=token, params={"ref": "gone"})
        assert missing_ref.status_code == 404
        listing = (await h.http.get("/repos/alice/demo/contents/pkg", headers=token)).json()
        assert [(e["name"], e["type"]) for e in listing] == [("core.py", "file")]


# pull requests


async def test_a_second_open_pull_request_for_the_same_head_is_422(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        push_branch(h.sandbox, "alice/demo", "lanebot/1/run", tmp_path / "work", {"new.txt": "new\n"})
        body = {"title": "Run", "head": "lanebot/1/run", "base": "main", "body": "Closes #1"}
        first = await h.http.post("/repos/alice/demo/pulls", headers=token, json=body)
        assert first.status_code == 201
        assert (first.json()["number"], first.json()["commits"], first.json()["changed_files"]) == (1, 1, 1)
        second = await h.http.post(
            "/repos/alice/demo/pulls", headers=token, json={**body, "head": "alice:lanebot/1/run"}
        )
        assert second.status_code == 422
        assert second.json()["errors"] == [
            {
                "resource": "PullRequest",
                "code": "custom",
                "message": "A pull request already exists for alice:lanebot/1/run.",
            }
        ]
        listed = await h.http.get("/repos/alice/demo/pulls", headers=token, params={"head": "alice:lanebot/1/run"})
        assert [p["number"] for p in listed.json()] == [1]
        assert (await h.http.get("/repos/alice/demo/pulls", headers=token, params={"state": "closed"})).json() == []


async def test_a_pull_request_needs_an_existing_head_with_commits_ahead(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        missing = await h.http.post(
            "/repos/alice/demo/pulls", headers=token, json={"title": "x", "head": "nope", "base": "main"}
        )
        assert missing.json()["errors"] == [{"resource": "PullRequest", "field": "head", "code": "invalid"}]
        git("--git-dir", str(h.sandbox.git.path("alice", "demo")), "branch", "same", "main")
        same = await h.http.post(
            "/repos/alice/demo/pulls", headers=token, json={"title": "x", "head": "same", "base": "main"}
        )
        assert same.status_code == 422
        assert same.json()["errors"][0]["message"] == "No commits between main and same"


# check runs


async def test_a_check_run_summary_may_be_65535_characters_and_not_one_more(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])

        def body(summary: str) -> dict:
            return {"name": "lane", "head_sha": "main", "output": {"title": "t", "summary": summary}}

        assert (
            await h.http.post("/repos/alice/demo/check-runs", headers=token, json=body("s" * 65535))
        ).status_code == 201
        refused = await h.http.post("/repos/alice/demo/check-runs", headers=token, json=body("s" * 65536))
        assert refused.status_code == 422
        assert (
            refused.json()["message"] == "Invalid request.\n\nOnly 65535 characters are allowed; 65536 were supplied."
        )


@pytest.mark.parametrize(
    "actions",
    [
        [{"label": f"Act {n}", "description": "d", "identifier": f"a{n}"} for n in range(4)],
        [{"label": "x" * 21, "description": "d", "identifier": "a"}],
    ],
    ids=["four-actions", "label-of-21-characters"],
)
async def test_a_check_run_takes_at_most_three_actions_with_short_labels(
    tmp_path: Path, project: Path, actions: list
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        ok = await h.http.post(
            "/repos/alice/demo/check-runs",
            headers=token,
            json={
                "name": "lane",
                "head_sha": "main",
                "actions": actions[:3] if len(actions) > 1 else [{**actions[0], "label": "x" * 20}],
            },
        )
        assert ok.status_code == 201
        refused = await h.http.post(
            "/repos/alice/demo/check-runs", headers=token, json={"name": "lane", "head_sha": "main", "actions": actions}
        )
        assert refused.status_code == 422


async def test_check_runs_for_a_ref_show_the_latest_run_of_each_name(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        for name in ("lane: a", "lane: a", "lane: b"):
            await h.http.post("/repos/alice/demo/check-runs", headers=token, json={"name": name, "head_sha": "main"})
        run_id = (await h.http.get("/repos/alice/demo/commits/main/check-runs", headers=token)).json()["check_runs"][0][
            "id"
        ]
        finished = await h.http.patch(
            f"/repos/alice/demo/check-runs/{run_id}", headers=token, json={"conclusion": "success"}
        )
        assert (finished.json()["status"], finished.json()["conclusion"]) == ("completed", "success")
        latest = (await h.http.get("/repos/alice/demo/commits/main/check-runs", headers=token)).json()
        assert latest["total_count"] == 2
        every = (
            await h.http.get("/repos/alice/demo/commits/main/check-runs", headers=token, params={"filter": "all"})
        ).json()
        assert every["total_count"] == 3
        assert await h.delivered() == [("check_run", "created")] * 3 + [("check_run", "completed")]


# webhooks


async def test_a_delivery_carries_githubs_headers_and_verifies_with_gidgethub(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        assert await h.delivered() == [("issues", "opened")]
        request = h.receiver.requests[0]
        headers = {key.lower(): value for key, value in request.headers.items()}
        event = gidgethub.sansio.Event.from_http(headers, request.content, secret=SECRET)
        assert (event.event, event.data["action"], event.data["issue"]["number"]) == ("issues", "opened", 1)
        assert event.data["installation"]["id"] == h.sandbox.state.repository("alice", "demo").installation_id
        assert headers["user-agent"].startswith("GitHub-Hookshot/")
        assert headers["x-github-hook-installation-target-type"] == "integration"
        assert headers["x-github-hook-installation-target-id"] == str(APP_ID)
        assert headers["x-github-hook-id"].isdigit()
        assert headers["x-hub-signature"].startswith("sha1=")
        assert headers["content-type"] == "application/json"
        with pytest.raises(gidgethub.ValidationFailure):
            gidgethub.sansio.Event.from_http(headers, request.content, secret="another-secret")


async def test_creating_repositories_installs_the_app_and_adds_them_to_its_installation(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        for name in ("alice/one", "alice/two"):
            await h.http.post("/_sandbox/repos", json={"full_name": name, "path": str(project)})
        assert await h.delivered() == [("installation", "created"), ("installation_repositories", "added")]
        created, added = (json.loads(r.content) for r in h.receiver.requests)
        assert created["installation"]["id"] == added["installation"]["id"]
        assert [r["full_name"] for r in created["repositories"]] == ["alice/one"]
        assert [r["full_name"] for r in added["repositories_added"]] == ["alice/two"]
        listed = (await h.http.get("/app/installations", headers=h.bearer())).json()
        assert [(i["id"], i["account"]["login"]) for i in listed] == [(created["installation"]["id"], "alice")]


async def test_the_app_hears_of_its_own_actions_with_its_bot_as_sender(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        await h.issue("alice/demo")
        token = await h.token(repo["installation_id"])
        await h.http.post("/repos/alice/demo/issues/1/comments", headers=token, json={"body": "Plan:"})
        assert await h.delivered() == [("issues", "opened"), ("issue_comment", "created")]
        payload = json.loads(h.receiver.requests[1].content)
        assert payload["sender"] == payload["comment"]["user"]
        assert (payload["sender"]["login"], payload["sender"]["type"]) == ("lanebot[bot]", "Bot")
        assert payload["comment"]["performed_via_github_app"]["id"] == APP_ID


async def test_events_the_app_does_not_subscribe_to_are_not_sent(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project, events=("issue_comment",)) as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        await h.http.post("/_sandbox/repos/alice/demo/issues/1/comments", json={"as": "alice", "body": "hello"})
        assert await h.delivered() == [("issue_comment", "created")]


async def test_deliveries_go_out_in_the_order_of_their_events(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        await h.http.post("/_sandbox/repos/alice/demo/issues", json={"as": "alice", "title": "t", "labels": ["a", "b"]})
        for n in range(3):
            await h.http.post("/_sandbox/repos/alice/demo/issues/1/comments", json={"as": "alice", "body": f"c{n}"})
        assert (
            await h.delivered()
            == [("issues", "opened"), ("issues", "labeled"), ("issues", "labeled")] + [("issue_comment", "created")] * 3
        )
        bodies = [json.loads(r.content)["comment"]["body"] for r in h.receiver.requests[3:]]
        assert bodies == ["c0", "c1", "c2"]


async def test_deliveries_are_listed_newest_first_a_page_at_a_time(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        for _ in range(3):
            await h.issue("alice/demo")
        await h.sandbox.webhooks.drain()
        first = await h.http.get("/app/hook/deliveries", headers=h.bearer(), params={"per_page": 2})
        assert [d["id"] for d in first.json()] == sorted((d["id"] for d in first.json()), reverse=True)
        assert {
            "guid",
            "delivered_at",
            "redelivery",
            "duration",
            "status",
            "status_code",
            "event",
            "action",
            "installation_id",
            "repository_id",
        } <= set(first.json()[0])
        next_url = first.headers["link"].split(";")[0].strip("<>")
        second = await h.http.get(next_url, headers=h.bearer())
        assert [d["event"] for d in second.json()] == ["issues", "installation"]  # the oldest: the App installed
        assert "link" not in second.headers
        assert second.json()[0]["id"] < first.json()[-1]["id"]


async def test_a_redelivery_sends_the_same_guid_and_body_and_is_marked_so(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        await h.sandbox.webhooks.drain()
        original = (await h.http.get("/app/hook/deliveries", headers=h.bearer())).json()[0]
        response = await h.http.post(f"/app/hook/deliveries/{original['id']}/attempts", headers=h.bearer())
        assert response.status_code == 202
        await h.sandbox.webhooks.drain()
        first, again = h.receiver.requests
        assert again.headers["X-GitHub-Delivery"] == first.headers["X-GitHub-Delivery"] == original["guid"]
        assert again.content == first.content
        newest = (await h.http.get("/app/hook/deliveries", headers=h.bearer())).json()[0]
        assert (newest["guid"], newest["redelivery"]) == (original["guid"], True)
        assert newest["id"] != original["id"]
        detail = (await h.http.get(f"/app/hook/deliveries/{newest['id']}", headers=h.bearer())).json()
        assert detail["request"]["payload"]["action"] == "opened"
        assert detail["response"]["payload"] == '{"ok":true}'
        assert (await h.http.post("/app/hook/deliveries/1/attempts", headers=h.bearer())).status_code == 404


@pytest.mark.parametrize(
    ("receiver", "status", "code"),
    [
        (Receiver(status=500), "Invalid HTTP Response: 500", 500),
        (Receiver(error=httpx.ConnectError("refused")), "failed to connect to host", 502),
    ],
    ids=["server-error", "connection-refused"],
)
async def test_a_failed_delivery_is_recorded_and_not_retried(
    tmp_path: Path, project: Path, receiver: Receiver, status: str, code: int
) -> None:
    async with harness(tmp_path, project, receiver=receiver) as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        await h.sandbox.webhooks.drain()
        listed = (await h.http.get("/app/hook/deliveries", headers=h.bearer())).json()
        assert [(d["event"], d["status"], d["status_code"]) for d in listed] == [
            ("issues", status, code),
            ("installation", status, code),
        ]


async def test_the_delivery_log_holds_each_delivery_as_json(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project, delivery_log=tmp_path / "deliveries") as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        await h.sandbox.webhooks.drain()
    written = sorted((tmp_path / "deliveries").glob("*.json"))
    assert [path.name.split("-", 1)[1] for path in written] == ["installation.created.json", "issues.opened.json"]
    record = json.loads(written[1].read_text())
    assert (record["event"], record["action"], record["status_code"]) == ("issues", "opened", 202)
    assert record["request"]["headers"]["X-GitHub-Event"] == "issues"
    assert record["request"]["payload"]["issue"]["title"] == "An issue"


# the edge: headers, versions, rate limits, the request log


async def test_rest_answers_carry_githubs_headers(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        response = await h.http.get("/repos/alice/demo", headers=token)
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        assert response.headers["x-github-api-version-selected"] == "2022-11-28"
        assert response.headers["x-github-request-id"]
        assert (
            response.headers["x-ratelimit-limit"],
            response.headers["x-ratelimit-used"],
            response.headers["x-ratelimit-remaining"],
            response.headers["x-ratelimit-resource"],
        ) == ("5000", "1", "4999", "core")
        assert response.json()["clone_url"] == f"{BASE}/alice/demo.git"


async def test_an_unsupported_api_version_is_400(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        response = await h.http.get("/app", headers={**h.bearer(), "X-GitHub-Api-Version": "v3"})
        assert response.status_code == 400
        assert '"v3", is not a supported version' in response.json()["message"]


async def test_a_spent_rate_limit_is_403_until_it_resets(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project, rate_limit=2) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        for _ in range(2):
            assert (await h.http.get("/repos/alice/demo", headers=token)).status_code == 200
        spent = await h.http.get("/repos/alice/demo", headers=token)
        assert spent.status_code == 403
        assert spent.headers["x-ratelimit-remaining"] == "0"
        assert spent.json()["message"].startswith("API rate limit exceeded")
        status = (await h.http.get("/rate_limit", headers=token)).json()
        assert status["resources"]["core"]["remaining"] == 0
        h.clock.advance(hours=1)
        fresh = await h.token(repo["installation_id"])  # the old one has expired too
        assert (await h.http.get("/repos/alice/demo", headers=fresh)).status_code == 200


async def test_every_request_is_logged_as_method_path_status(tmp_path: Path, project: Path) -> None:
    log = tmp_path / "requests.log"
    async with harness(tmp_path, project, request_log=log) as h:
        await h.repository("alice/demo")
        await h.http.get("/repos/alice/demo")
        await h.http.get("/nowhere", params={"token": "never-logged"})
    assert log.read_text().splitlines() == ["POST /_sandbox/repos 201", "GET /repos/alice/demo 404", "GET /nowhere 404"]


# the human API


async def test_a_person_without_triage_cannot_label_a_private_repositorys_issue(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/demo")
        await h.issue("alice/demo")
        refused = await h.http.post(
            "/_sandbox/repos/alice/demo/issues/1/labels", json={"as": "dave", "role": "read", "name": "lanebot"}
        )
        assert refused.status_code == 403
        assert "needs triage or higher" in refused.json()["message"]
        stranger = await h.http.post("/_sandbox/repos/alice/demo/issues/1/comments", json={"as": "eve", "body": "hi"})
        assert stranger.status_code == 403
        allowed = await h.http.post(
            "/_sandbox/repos/alice/demo/issues/1/labels", json={"as": "alice", "name": "lanebot"}
        )
        assert allowed.json()["labels"] == ["lanebot"]


async def test_an_issues_author_edits_it_and_github_sends_issues_edited_with_what_changed(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        await h.repository("alice/open", private=False)
        number = await h.issue("alice/open", login="reporter", role="read")
        await h.delivered()
        h.receiver.requests.clear()
        stranger = await h.http.patch(f"/_sandbox/repos/alice/open/issues/{number}", json={"as": "eve", "body": "x"})
        assert stranger.status_code == 403 and "needs triage or higher" in stranger.json()["message"]
        edited = await h.http.patch(
            f"/_sandbox/repos/alice/open/issues/{number}", json={"as": "reporter", "title": "New", "body": "Later"}
        )
        assert edited.status_code == 200, edited.text
        assert await h.delivered() == [("issues", "edited")]
        payload = json.loads(h.receiver.requests[-1].content)
        assert (payload["issue"]["title"], payload["issue"]["body"]) == ("New", "Later")
        assert payload["changes"] == {"title": {"from": "An issue"}, "body": {"from": "Text"}}


async def test_a_person_can_rerequest_a_check_run_and_pick_one_of_its_actions(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        token = await h.token(repo["installation_id"])
        run = (
            await h.http.post(
                "/repos/alice/demo/check-runs",
                headers=token,
                json={
                    "name": "lane",
                    "head_sha": "main",
                    "conclusion": "failure",
                    "actions": [{"label": "Retry", "description": "again", "identifier": "retry"}],
                },
            )
        ).json()
        assert (
            await h.http.post(f"/_sandbox/repos/alice/demo/check-runs/{run['id']}/rerequest", json={"as": "alice"})
        ).status_code == 202
        unknown = await h.http.post(
            f"/_sandbox/repos/alice/demo/check-runs/{run['id']}/requested-action",
            json={"as": "alice", "identifier": "merge"},
        )
        assert unknown.status_code == 422
        await h.http.post(
            f"/_sandbox/repos/alice/demo/check-runs/{run['id']}/requested-action",
            json={"as": "alice", "identifier": "retry"},
        )
        assert await h.delivered() == [
            ("check_run", "created"),
            ("check_run", "completed"),
            ("check_suite", "completed"),
            ("check_run", "rerequested"),
            ("check_run", "requested_action"),
        ]
        payload = json.loads(h.receiver.requests[-1].content)
        assert (payload["sender"]["login"], payload["requested_action"]) == ("alice", {"identifier": "retry"})


# git over smart HTTP (real git, real HTTP)


@pytest.fixture
def served(tmp_path: Path, project: Path) -> Iterator[tuple[SandboxServer, HumanClient]]:
    config = SandboxConfig(public_key_pem=app_key()[1], app_id=APP_ID, state_dir=tmp_path / "state")
    with SandboxServer(config) as server, HumanClient(server.url) as client:
        client.create_repository("alice/demo", project)
        client.create_repository("alice/open", project, private=False)
        yield server, client


def mint(server: SandboxServer, **body: Any) -> str:
    installation = server.sandbox.state.repository("alice", "demo").installation_id
    response = httpx.post(
        f"{server.url}/app/installations/{installation}/access_tokens",
        json=body,
        headers={"Authorization": f"Bearer {app_jwt(Clock(datetime.now(UTC)))}"},
    )
    return response.json()["token"]


def clone_url(server: SandboxServer, name: str, token: str | None = None) -> str:
    auth = f"x-access-token:{token}@" if token else ""
    return f"http://{auth}{server.host}:{server.port}/alice/{name}.git"


@pytest.mark.slow
def test_git_clones_and_pushes_over_smart_http_with_an_installation_token(tmp_path: Path, served) -> None:
    server, client = served
    token = mint(server)
    work = tmp_path / "clone"
    git("clone", "--quiet", clone_url(server, "demo", token), str(work))
    assert (work / "pkg" / "core.py").read_text() == "VALUE = 1\n"
    git("checkout", "--quiet", "-b", "lanebot/1/a", cwd=work)
    (work / "a.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # over git's 1 MiB post buffer: sent chunked
    git("add", "a.bin", cwd=work)
    git("commit", "--quiet", "-m", "a", cwd=work)
    git("push", "--quiet", "origin", "lanebot/1/a", cwd=work)
    branches = client.state("alice/demo")["branches"]
    assert branches["lanebot/1/a"] == git("rev-parse", "HEAD", cwd=work).stdout.strip()
    opened = httpx.post(
        f"{server.url}/repos/alice/demo/pulls",
        headers={"Authorization": f"token {token}"},
        json={"title": "A", "head": "lanebot/1/a", "base": "main"},
    )
    assert opened.status_code == 201
    git("commit", "--quiet", "--allow-empty", "-m", "again", cwd=work)
    git("push", "--quiet", "origin", "lanebot/1/a", cwd=work)
    pull = client.state("alice/demo")["pulls"][0]["pull_request"]
    assert (pull["head_sha"], pull["commits"]) == (git("rev-parse", "HEAD", cwd=work).stdout.strip(), 2)
    git("fetch", "--quiet", "origin", cwd=work)  # a fetch negotiates with the pushed history


def pkt_line(text: str) -> bytes:
    return f"{len(text) + 4:04x}{text}".encode()


@pytest.mark.slow
def test_a_gzip_encoded_fetch_request_is_inflated_for_git(served) -> None:
    server, _ = served
    request = pkt_line("command=ls-refs\n") + b"0001" + pkt_line("peel\n") + b"0000"
    response = httpx.post(
        f"{server.url}/alice/open.git/git-upload-pack",
        content=gzip.compress(request),
        headers={
            "Content-Type": "application/x-git-upload-pack-request",
            "Content-Encoding": "gzip",
            "Git-Protocol": "version=2",
        },
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-git-upload-pack-result"
    assert b"refs/heads/main" in response.content


@pytest.mark.slow
def test_a_push_without_a_token_is_refused_with_a_basic_challenge(tmp_path: Path, served) -> None:
    server, _ = served
    work = tmp_path / "clone"
    git("clone", "--quiet", clone_url(server, "open"), str(work))  # public: anyone may read
    (work / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=work)
    git("commit", "--quiet", "-m", "x", cwd=work)
    refused = git("push", "origin", "HEAD:refs/heads/x", cwd=work, check=False)
    assert refused.returncode != 0
    probe = httpx.get(f"{server.url}/alice/open.git/info/refs", params={"service": "git-receive-pack"})
    assert probe.status_code == 401
    assert probe.headers["www-authenticate"] == 'Basic realm="GitHub"'
    assert git("clone", "--quiet", clone_url(server, "demo"), str(tmp_path / "private"), check=False).returncode != 0


@pytest.mark.slow
def test_a_push_with_a_token_that_cannot_write_contents_is_403(tmp_path: Path, served) -> None:
    server, _ = served
    reader = mint(server, permissions={"contents": "read"})
    work = tmp_path / "clone"
    git("clone", "--quiet", clone_url(server, "demo", reader), str(work))
    git("commit", "--quiet", "--allow-empty", "-m", "x", cwd=work)
    refused = git("push", "origin", "HEAD:refs/heads/x", cwd=work, check=False)
    assert refused.returncode != 0 and "403" in refused.stderr


# the CLI


@pytest.mark.slow
def test_the_cli_acts_as_people_in_a_running_sandbox(tmp_path: Path, project: Path, capsys) -> None:
    config = SandboxConfig(public_key_pem=app_key()[1], app_id=APP_ID, state_dir=tmp_path / "state")
    with SandboxServer(config) as server:
        url = ["--sandbox-url", server.url]
        assert main(["sandbox", "repo", "create", "acme/demo", "--from", str(project), "--org", *url]) == 0
        assert (
            main(
                [
                    "sandbox",
                    "issue",
                    "open",
                    "acme/demo",
                    "--as",
                    "alice",
                    "--role",
                    "admin",
                    "--title",
                    "Add a thing",
                    "--body",
                    "please",
                    *url,
                ]
            )
            == 0
        )
        assert main(["sandbox", "label", "add", "acme/demo", "1", "lanebot", "--as", "alice", *url]) == 0
        assert (
            main(
                [
                    "sandbox",
                    "comment",
                    "acme/demo",
                    "1",
                    "--as",
                    "bob",
                    "--role",
                    "maintain",
                    "--body",
                    "/approve",
                    *url,
                ]
            )
            == 0
        )
        capsys.readouterr()
        assert main(["sandbox", "state", "acme/demo", *url]) == 0
        state = json.loads(capsys.readouterr().out)
    issue = state["issues"][0]
    assert (issue["title"], issue["labels"], issue["comments"][0]["body"]) == ("Add a thing", ["lanebot"], "/approve")
    assert state["collaborators"] == {"alice": "admin", "bob": "maintain"}


def test_the_cli_without_a_running_sandbox_says_how_to_start_one(capsys) -> None:
    status = main(["sandbox", "state", "--sandbox-url", "http://127.0.0.1:9"])
    assert status == 2
    assert "lanebot sandbox serve" in capsys.readouterr().err


def test_serve_refuses_a_key_file_that_holds_no_public_key(tmp_path: Path, capsys) -> None:
    key_file = tmp_path / "key.pem"
    key_file.write_text(app_key()[0])
    assert main(["sandbox", "serve", "--public-key", str(key_file), "--port", "0"]) == 2
    assert "no PEM public key" in capsys.readouterr().err
