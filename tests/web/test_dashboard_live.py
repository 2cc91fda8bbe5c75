"""The dashboard's live updates: `GET /dashboard/events` streams server-sent events from the database
(a `change` when the stream starts and whenever what the page shows changed, nothing otherwise), ends
when the client goes, is access-checked like the pages; the page loads its one script from the
package (no inline script, `script-src 'self'`) and still works without it."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from bot.edges.store import runs as store
from bot.web.dashboard import GitHubUser, dashboard_routes
from bot.web.dashboard.github import RefreshRefused, UserTokens
from tests.web.test_dashboard import T0, seed, settings_for

pytestmark = pytest.mark.anyio


class FakeUsers:
    """GitHub's OAuth and user API as the dashboard sees it: ann, who can read octo/one."""

    def authorize_url(self, *, state: str, redirect_uri: str | None) -> str:
        return f"https://github.example.test/login/oauth/authorize?state={state}"

    async def exchange_code(self, code: str, *, redirect_uri: str | None) -> UserTokens:
        return UserTokens("ghu_token")  # a token that does not expire

    async def refresh(self, refresh_token: str) -> UserTokens:
        raise RefreshRefused("there is no refresh token to renew")

    async def user(self, token: str) -> GitHubUser:
        return GitHubUser("ann", 1001)

    async def readable_repositories(self, token: str) -> frozenset[str]:
        return frozenset({"octo/one"})


def live_app(engine, workdir: Path, *, stream_seconds: float) -> Starlette:
    routes = dashboard_routes(
        settings_for(engine, workdir), engine, users=FakeUsers(), poll_seconds=0.05, stream_seconds=stream_seconds
    )
    return Starlette(routes=routes)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


async def signed_in(client: httpx.AsyncClient) -> None:
    started = await client.get("/dashboard/login")
    state = urllib.parse.parse_qs(urllib.parse.urlsplit(started.headers["location"]).query)["state"][0]
    finished = await client.get(f"/dashboard/oauth/callback?code=abc123&state={state}")
    assert finished.status_code == 303, finished.text


def events_of(text: str) -> list[tuple[str, str]]:
    """(event, data) of each event in a text/event-stream body; comments and `retry` left out."""
    found = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in fields:
            found.append((fields["event"], fields.get("data", "")))
    return found


def client_of(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://lanebot.test")


async def test_a_runs_stream_says_change_at_its_start_and_when_a_lane_moves_and_nothing_else(engine, workdir):
    ids = seed(engine, workdir)
    one = ids["octo/one"]
    ui = store.get_lane(engine, one, "ui")
    assert ui is not None and ui.id is not None
    app = live_app(engine, workdir, stream_seconds=1.5)
    async with client_of(app) as client:
        await signed_in(client)

        async def move_a_lane() -> None:
            await asyncio.sleep(0.6)
            await asyncio.to_thread(store.set_lane_state, engine, ui.id, "pending", "running", now=T0)

        started = time.monotonic()
        async with asyncio.TaskGroup() as group:
            group.create_task(move_a_lane())
            streamed = group.create_task(client.get(f"/dashboard/events?run={one}"))
        response = streamed.result()
        took = time.monotonic() - started
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.text.startswith("retry: 2000\n\n")
    events = events_of(response.text)
    assert [kind for kind, _ in events] == ["change", "change"], response.text
    assert events[0][1] != events[1][1] and all(re.fullmatch(r"[0-9a-f]{32}", data) for _, data in events)
    assert 1.4 < took < 5  # the stream ends after stream_seconds; the browser connects again


async def test_the_runs_list_stream_changes_for_a_readable_repositorys_new_run_only(engine, workdir):
    seed(engine, workdir)
    app = live_app(engine, workdir, stream_seconds=1.5)
    async with client_of(app) as client:
        await signed_in(client)

        async def open_runs() -> None:
            await asyncio.sleep(0.4)
            await asyncio.to_thread(
                store.create_run,
                engine,
                installation_id=42,
                repository="octo/secret",
                issue_number=77,
                requested_by="eve",
                now=T0,
            )
            await asyncio.sleep(0.4)
            await asyncio.to_thread(
                store.create_run,
                engine,
                installation_id=42,
                repository="Octo/One",
                issue_number=78,
                requested_by="ann",
                now=T0,
            )

        async with asyncio.TaskGroup() as group:
            group.create_task(open_runs())
            streamed = group.create_task(client.get("/dashboard/events"))
    events = events_of(streamed.result().text)
    assert [kind for kind, _ in events] == ["change", "change"]  # the start, then octo/one's new run


async def test_the_stream_is_access_checked_like_the_pages(engine, workdir):
    ids = seed(engine, workdir)
    app = live_app(engine, workdir, stream_seconds=0.3)
    async with client_of(app) as client:
        anonymous = await client.get(f"/dashboard/events?run={ids['octo/one']}")
        assert anonymous.status_code == 401 and "event:" not in anonymous.text
        await signed_in(client)
        for query in (f"run={ids['octo/secret']}", "run=99999", "run=abc", "run=%C2%B2", "run=" + "9" * 40):
            refused = await client.get(f"/dashboard/events?{query}")
            assert refused.status_code == 404, query
            assert "octo/secret" not in refused.text and "text/html" in refused.headers["content-type"]


async def test_the_stream_ends_when_the_client_goes(engine, workdir):
    """Straight over ASGI (spec 2.4, where Starlette leaves noticing a disconnect to the endpoint):
    the client goes after 0.3 s of a stream that would last a minute; the endpoint returns."""
    ids = seed(engine, workdir)
    app = live_app(engine, workdir, stream_seconds=60)
    async with client_of(app) as client:
        await signed_in(client)
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())
    gone_at = time.monotonic() + 0.3
    sent: list[dict] = []
    requested = False

    async def receive() -> dict:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if time.monotonic() >= gone_at:
            return {"type": "http.disconnect"}
        await asyncio.sleep(gone_at - time.monotonic())
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/dashboard/events",
        "raw_path": b"/dashboard/events",
        "query_string": f"run={ids['octo/one']}".encode(),
        "root_path": "",
        "headers": [(b"host", b"lanebot.test"), (b"cookie", cookie.encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("lanebot.test", 80),
    }
    started = time.monotonic()
    await asyncio.wait_for(app(scope, receive, send), timeout=5)
    assert time.monotonic() - started < 2
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    assert [kind for kind, _ in events_of(body)] == ["change"]


async def test_pages_load_the_packaged_script_and_no_inline_one(engine, workdir):
    ids = seed(engine, workdir)
    app = live_app(engine, workdir, stream_seconds=0.3)
    async with client_of(app) as client:
        await signed_in(client)
        run_page = await client.get(f"/dashboard/runs/{ids['octo/one']}")
        runs_page = await client.get("/dashboard")
        attempt = await client.get(f"/dashboard/runs/{ids['octo/one']}/lanes/api/attempts/1")
        script = await client.get("/dashboard/static/live.js")
    tag = '<script src="/dashboard/static/live.js" defer></script>'
    for page, stream in ((run_page, f"/dashboard/events?run={ids['octo/one']}"), (runs_page, "/dashboard/events")):
        assert page.status_code == 200
        assert page.text.count("<script") == 1 and tag in page.text
        assert f'<main id="main" data-events="{stream}">' in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
    assert 'data-live="lanes"' in run_page.text and 'data-live="heading"' in run_page.text
    assert 'data-live="runs"' in runs_page.text
    assert attempt.status_code == 200 and "<script" not in attempt.text  # nothing there moves
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert "EventSource" in script.text and "innerHTML" not in script.text


async def test_every_stream_ends_when_the_server_is_stopping(engine, workdir):
    ids = seed(engine, workdir)
    closing = threading.Event()
    routes = dashboard_routes(
        settings_for(engine, workdir), engine, users=FakeUsers(), poll_seconds=0.05, stream_seconds=60, closing=closing
    )
    async with client_of(Starlette(routes=routes)) as client:
        await signed_in(client)

        async def stop_soon() -> None:
            await asyncio.sleep(0.3)
            closing.set()

        started = time.monotonic()
        async with asyncio.TaskGroup() as group:
            group.create_task(stop_soon())
            streamed = group.create_task(client.get(f"/dashboard/events?run={ids['octo/one']}"))
    assert time.monotonic() - started < 3
    assert [kind for kind, _ in events_of(streamed.result().text)] == ["change"]
