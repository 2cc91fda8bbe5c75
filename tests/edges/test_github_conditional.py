"""lanebot reads again conditionally: it keeps the ETags of what it read and sends them back, so
what has not changed comes back as a 304 (free of the rate limit) and the body it kept is used.
Against the sandbox GitHub, in process (tests.sandbox.test_sandbox's harness)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.edges.github.client import ConditionalCache, GitHubApp
from bot.edges.github.config import load_config_chain
from bot.edges.settings import Settings
from tests.sandbox.test_sandbox import APP_ID, BASE, Harness, app_key, git, harness

pytestmark = pytest.mark.anyio
CONTENTS = "/repos/alice/demo/contents/.github/lanebot.yml"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".github").mkdir(parents=True)
    (folder / ".github" / "lanebot.yml").write_text("max_units: 4\n")
    return folder


def commit_on_main(h: Harness, work: Path, path: str, text: str) -> None:
    git("clone", "--quiet", str(h.sandbox.git.path("alice", "demo")), str(work))
    (work / path).write_text(text)
    git("commit", "--quiet", "-am", "change", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)


def settings() -> Settings:
    return Settings(app_id=str(APP_ID), private_key=app_key()[0], webhook_secret="secret", github_api_url=BASE)


async def test_a_file_read_again_unchanged_is_a_304_and_reads_the_same(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        async with GitHubApp(settings(), http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], "alice/demo")
            first = await load_config_chain(client, "alice", "demo")
            again = await load_config_chain(
                app.installation_client(repo["installation_id"], "alice/demo"), "alice", "demo"
            )

        assert first == again == [("alice/demo:.github/lanebot.yml", {"max_units": 4})]
        assert [status for method, path, status in h.sandbox.served if path == CONTENTS] == [200, 304]


async def test_a_file_changed_since_is_read_anew(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        async with GitHubApp(settings(), http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], "alice/demo")
            await load_config_chain(client, "alice", "demo")
            commit_on_main(h, tmp_path / "work", ".github/lanebot.yml", "max_units: 2\n")
            changed = await load_config_chain(client, "alice", "demo")

        assert changed == [("alice/demo:.github/lanebot.yml", {"max_units": 2})]
        assert [status for method, path, status in h.sandbox.served if path == CONTENTS] == [200, 200]


async def test_clients_of_another_token_scope_keep_their_own_etags(tmp_path: Path, project: Path) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository("alice/demo")
        async with GitHubApp(settings(), http=h.http, clock=lambda: h.clock().timestamp()) as app:
            scoped = app.installation_client(repo["installation_id"], "alice/demo")
            broad = app.installation_client(repo["installation_id"], None)
            for client in (scoped, broad, scoped, broad):
                await load_config_chain(client, "alice", "demo")

        assert [status for method, path, status in h.sandbox.served if path == CONTENTS] == [200, 200, 304, 304]


def test_the_cache_is_bounded_in_entries_and_bytes_dropping_the_least_recently_used() -> None:
    cache = ConditionalCache(max_entries=2, max_bytes=100)
    view = cache.view("1:octo/app")
    view["a"] = ('W/"a"', None, {"n": 1}, None)
    view["b"] = ('W/"b"', None, {"n": 2}, None)
    assert view["a"][0] == 'W/"a"'  # "a" is now the most recently used
    view["c"] = ('W/"c"', None, {"n": 3}, None)
    assert sorted(view) == ["a", "c"]

    view["big"] = ('W/"big"', None, "x" * 200, None)  # larger than the whole budget: not kept
    assert "big" not in view and sorted(view) == ["a", "c"]
    view["d"] = ('W/"d"', None, "y" * 95, None)  # fits only once the others are dropped
    assert sorted(view) == ["d"] and cache.size <= 100
    assert "d" not in cache.view("2:octo/app")
