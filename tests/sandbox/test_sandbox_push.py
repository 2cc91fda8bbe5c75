"""`push` webhooks from the sandbox: every branch or tag a push moves is announced as GitHub does.

git over smart HTTP (real git, a served sandbox) creates, moves, force-moves and deletes refs; the
App's webhook endpoint records what arrives. The payloads' keys and types are held to GitHub's
schema by test_sandbox_fidelity.py; these tests hold what the values say: which ref, from what to
what, whether forced, which commits are new to the repository (`distinct`), and the subscription.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bot.sandbox import DEFAULT_EVENTS, SandboxConfig, SandboxServer, generate_app_key
from bot.sandbox.cli import HumanClient

pytestmark = pytest.mark.slow

APP_ID = 4242
WAIT_LIMIT_SECONDS = 30  # a hang guard, not a timing assertion


@functools.cache
def app_key() -> tuple[str, str]:
    return generate_app_key()


class Endpoint:
    """The App's webhook URL: the payload of each delivery, by event."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.received.append((request.headers["X-GitHub-Event"], json.loads(request.content)))
        return httpx.Response(202)

    def pushes(self) -> list[dict[str, Any]]:
        return [payload for event, payload in self.received if event == "push"]


def git(*args: str, cwd: Path) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout.strip()


class Served:
    def __init__(self, server: SandboxServer, endpoint: Endpoint, work: Path) -> None:
        self.server, self.endpoint, self.work = server, endpoint, work

    def delivered(self, count: int) -> list[dict[str, Any]]:
        """The pushes announced, once `count` deliveries have been attempted since the repository's."""
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while len(self.server.sandbox.webhooks.deliveries) < 1 + count:
            assert time.monotonic() < deadline, self.endpoint.received
            time.sleep(0.02)
        return self.endpoint.pushes()

    def commit(self, name: str, text: str) -> str:
        (self.work / name).write_text(text)
        git("add", "--all", cwd=self.work)
        git("commit", "--quiet", "-m", f"write {name}", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


def serve(tmp_path: Path, project: Path, events: tuple[str, ...]) -> Iterator[Served]:
    endpoint = Endpoint()
    config = SandboxConfig(
        public_key_pem=app_key()[1],
        app_id=APP_ID,
        state_dir=tmp_path / "state",
        webhook_url="http://lanebot.test/hooks",
        webhook_secret="secret",
        events=events,
    )
    client = httpx.AsyncClient(transport=httpx.MockTransport(endpoint))
    with SandboxServer(config, webhook_client=client) as server, HumanClient(server.url) as human:
        human.create_repository("alice/demo", project)
        installation = server.sandbox.state.repository("alice", "demo").installation_id
        now = int(time.time())
        app_jwt = jwt.encode({"iat": now - 60, "exp": now + 540, "iss": str(APP_ID)}, app_key()[0], algorithm="RS256")
        minted = httpx.post(
            f"{server.url}/app/installations/{installation}/access_tokens",
            headers={"Authorization": f"Bearer {app_jwt}"},
        )
        token = minted.json()["token"]
        work = tmp_path / "clone"
        git(
            "clone",
            "--quiet",
            f"http://x-access-token:{token}@{server.host}:{server.port}/alice/demo.git",
            str(work),
            cwd=tmp_path,
        )
        served = Served(server, endpoint, work)
        served.delivered(0)  # installation.created
        endpoint.received.clear()
        yield served


@pytest.fixture
def served(tmp_path: Path, project: Path) -> Iterator[Served]:
    yield from serve(tmp_path, project, DEFAULT_EVENTS)


@pytest.fixture
def unsubscribed(tmp_path: Path, project: Path) -> Iterator[Served]:
    yield from serve(tmp_path, project, tuple(event for event in DEFAULT_EVENTS if event != "push"))


def test_a_new_branch_then_a_fast_forward_then_a_forced_push_then_its_deletion(served: Served) -> None:
    work = served.work
    main = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "--quiet", "-b", "lanebot/1/a", cwd=work)
    first = served.commit("a.txt", "a\n")
    git("push", "--quiet", "origin", "lanebot/1/a", cwd=work)
    second = served.commit("a.txt", "aa\n")
    git("push", "--quiet", "origin", "lanebot/1/a", cwd=work)
    git("commit", "--quiet", "--amend", "-m", "rewritten", cwd=work)
    rewritten = git("rev-parse", "HEAD", cwd=work)
    git("push", "--quiet", "--force", "origin", "lanebot/1/a", cwd=work)
    git("push", "--quiet", "origin", "--delete", "lanebot/1/a", cwd=work)
    made, moved, forced, deleted = served.delivered(4)

    assert (made["ref"], made["before"], made["after"], made["created"]) == (
        "refs/heads/lanebot/1/a",
        "0" * 40,
        first,
        True,
    )
    assert [(c["id"], c["added"], c["distinct"]) for c in made["commits"]] == [(first, ["a.txt"], True)]
    assert main not in [c["id"] for c in made["commits"]]  # only what the push brought
    assert made["pusher"]["name"] == made["sender"]["login"] == "lanebot[bot]"

    assert (moved["before"], moved["after"], moved["created"], moved["forced"]) == (first, second, False, False)
    assert [(c["id"], c["modified"]) for c in moved["commits"]] == [(second, ["a.txt"])]

    assert (forced["before"], forced["after"], forced["forced"]) == (second, rewritten, True)
    assert [c["message"] for c in forced["commits"]] == ["rewritten"]
    assert forced["head_commit"]["id"] == rewritten

    assert (deleted["before"], deleted["after"], deleted["deleted"]) == (rewritten, "0" * 40, True)
    assert (deleted["commits"], deleted["head_commit"]) == ([], None)


def test_commits_the_repository_already_held_are_listed_but_not_distinct(served: Served) -> None:
    work = served.work
    git("checkout", "--quiet", "-b", "topic", cwd=work)
    topic = served.commit("t.txt", "t\n")
    git("push", "--quiet", "origin", "topic", cwd=work)
    git("checkout", "--quiet", "main", cwd=work)
    git("merge", "--quiet", "--no-ff", "-m", "Merge topic", "topic", cwd=work)
    merge = git("rev-parse", "HEAD", cwd=work)
    git("push", "--quiet", "origin", "main", cwd=work)
    git("tag", "v1", cwd=work)
    git("push", "--quiet", "origin", "v1", cwd=work)
    _, onto_main, tagged = served.delivered(3)

    assert onto_main["ref"] == "refs/heads/main"
    assert [(c["id"], c["distinct"]) for c in onto_main["commits"]] == [(topic, False), (merge, True)]
    assert onto_main["head_commit"]["added"] == ["t.txt"]  # a merge's paths are against its first parent
    # a tag made at a branch's tip: that branch is its base, and it brings no commit
    assert (tagged["ref"], tagged["created"], tagged["base_ref"], tagged["commits"]) == (
        "refs/tags/v1",
        True,
        "refs/heads/main",
        [],
    )
    assert tagged["head_commit"]["id"] == merge and tagged["head_commit"]["distinct"] is False


def test_an_app_not_subscribed_to_push_is_not_sent_it(unsubscribed: Served) -> None:
    unsubscribed.commit("n.txt", "n\n")
    git("push", "--quiet", "origin", "main", cwd=unsubscribed.work)
    assert unsubscribed.server.sandbox.git.branches("alice", "demo")["main"] == git(
        "rev-parse", "HEAD", cwd=unsubscribed.work
    )
    # the push's answer ends after the sandbox has decided what to send: nothing was queued
    assert [d.event for d in unsubscribed.server.sandbox.webhooks.deliveries] == ["installation"]
