"""The web app and `lanebot serve`: start-up, health, the configured webhook path, clear refusals."""

from __future__ import annotations

import asyncio
import json

import anyio
import httpx
import pytest
import respx
from starlette.applications import Starlette

import bot.web.app
from bot import __version__
from bot.cli import main
from bot.cli.serve import server_implementation
from bot.edges.store import db, deliveries
from bot.web.app import create_app
from tests.app_helpers import (
    as_app_delivery,
    delivery_headers,
    make_settings,
    payload_files,
    post_delivery,
    private_key_pem,
    running,
    running_lanebot,
    settle,
)

pytestmark = pytest.mark.anyio

ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))
APP_SETTINGS = ("APP_ID", "PRIVATE_KEY", "PRIVATE_KEY_PATH", "WEBHOOK_SECRET")


@pytest.fixture
def clean_environment(tmp_path, monkeypatch):
    """A working folder with no .env and none of lanebot's settings in the environment."""
    monkeypatch.chdir(tmp_path)
    for name in (
        *APP_SETTINGS,
        "DATABASE_URL",
        "HOST",
        "PORT",
        "LOG_LEVEL",
        "WEBHOOK_PATH",
        "GITHUB_API_URL",
        "LANEBOT_RECOVER_DELIVERIES",
    ):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


async def test_start_up_migrates_an_empty_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    app = create_app(make_settings(url))
    async with running(app) as client:
        health = await client.get("/healthz")
    assert health.status_code == 200
    assert db.current_revision(db.make_engine(url)) == db.head_revision()


async def test_health_reports_the_database_the_version_and_the_deliveries_waiting(engine):
    async with running_lanebot(engine) as (app, client):
        await app.state.dispatcher.stop()  # hold deliveries back, so some wait
        for number in range(2):
            await post_delivery(client, "issues", {**ISSUE_OPENED, "n": number}, delivery_id=f"waiting-{number}")
        health = await client.get("/healthz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "version": __version__, "database": "reachable", "deliveries_waiting": 2}


async def test_health_is_503_when_the_database_cannot_be_reached():
    unreachable = db.make_engine("postgresql://nobody@127.0.0.1:1/lanebot", connect_args={"connect_timeout": 2})
    app = create_app(make_settings(), engine=unreachable)
    transport = httpx.ASGITransport(app=app)  # no lifespan: the database was never there
    async with httpx.AsyncClient(transport=transport, base_url="http://lanebot.test") as client:
        health = await client.get("/healthz")
    assert health.status_code == 503
    assert health.json()["database"] == "unreachable"
    assert "nobody" not in health.text


async def test_the_webhook_listens_at_the_configured_path(engine):
    settings = make_settings(webhook_path="/hooks/github")
    async with running_lanebot(engine, settings=settings) as (app, client):
        body = json.dumps(ISSUE_OPENED).encode()
        headers = delivery_headers("issues", body)
        moved = await client.post("/hooks/github", content=body, headers=headers)
        default = await client.post("/api/github/webhooks", content=body, headers=headers)
        await settle(app)
    assert (moved.status_code, default.status_code) == (202, 404)


async def test_with_recovery_enabled_start_up_asks_github_for_missed_deliveries(engine):
    redelivered = asyncio.Event()
    missed = {
        "id": 77,
        "guid": "guid-missed",
        "delivered_at": "2099-01-01T00:00:00Z",
        "redelivery": False,
        "duration": 0.1,
        "status": "Invalid HTTP Response: 502",
        "status_code": 502,
        "event": "issues",
        "action": "opened",
        "installation_id": 4242,
        "repository_id": 1,
        "throttled_at": None,
    }

    def accept(request):
        redelivered.set()
        return httpx.Response(202, json={})

    with respx.mock() as github:
        github.get("https://api.github.com/app/hook/deliveries").mock(return_value=httpx.Response(200, json=[missed]))
        github.post("https://api.github.com/app/hook/deliveries/77/attempts").mock(side_effect=accept)
        async with running_lanebot(engine, settings=make_settings(recover_deliveries=True)):
            with anyio.fail_after(20):
                await redelivered.wait()


async def test_uvicorn_can_import_the_app_built_from_the_environment(clean_environment, monkeypatch):
    monkeypatch.delitem(bot.web.app.__dict__, "app", raising=False)
    monkeypatch.setenv("APP_ID", "4711")
    monkeypatch.setenv("PRIVATE_KEY", private_key_pem())
    monkeypatch.setenv("WEBHOOK_SECRET", "s")
    application = bot.web.app.app
    assert isinstance(application, Starlette)
    assert application.state.settings.app_id == "4711"
    assert bot.web.app.app is application


def test_serve_without_the_app_settings_exits_2_naming_each_one(clean_environment, capsys, monkeypatch):
    started = []
    monkeypatch.setattr("bot.cli.serve.uvicorn.run", lambda *args, **kwargs: started.append(args))
    status = main(["serve"])
    error = capsys.readouterr().err
    assert status == 2
    assert started == []
    for name in ("APP_ID", "PRIVATE_KEY", "WEBHOOK_SECRET"):
        assert f"{name}" in error
    assert "Traceback" not in error


def test_serve_runs_uvicorn_with_the_settings_host_port_and_log_level(clean_environment, monkeypatch):
    (clean_environment / ".env").write_text(
        f'APP_ID=4711\nPRIVATE_KEY="{private_key_pem().replace(chr(10), chr(92) + "n")}"\nWEBHOOK_SECRET=s\n'
        "PORT=8123\nLOG_LEVEL=debug\n"
    )
    calls = []
    monkeypatch.setattr("bot.cli.serve.uvicorn.run", lambda app, **options: calls.append((app, options)))
    assert main(["serve", "--host", "0.0.0.0"]) == 0
    [(app, options)] = calls
    assert isinstance(app, Starlette) and app.state.settings.app_id == "4711"
    implementation = server_implementation()
    assert options == {
        "host": "0.0.0.0",
        "port": 8123,
        "log_level": "debug",
        "http": implementation.http,
        "loop": implementation.loop,
    }


def test_setup_serves_the_setup_pages_without_any_app_settings(clean_environment, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("bot.cli.serve.uvicorn.run", lambda app, **options: calls.append((app, options)))
    assert main(["setup", "--port", "3456"]) == 0
    [(app, options)] = calls
    assert {route.path for route in app.routes} == {"/setup", "/setup/callback"}
    assert options == {"host": "127.0.0.1", "port": 3456, "log_level": "info"}
    assert "http://127.0.0.1:3456/setup" in capsys.readouterr().out


async def test_deliveries_stored_count_as_waiting_until_handled(engine):
    async with running_lanebot(engine) as (app, client):
        await post_delivery(client, "issues", ISSUE_OPENED, delivery_id="one")
        await settle(app)
        health = await client.get("/healthz")
    assert health.json()["deliveries_waiting"] == 0
    assert deliveries.waiting_count(engine) == 0


async def test_health_is_503_when_the_database_can_be_read_but_not_written(tmp_path):
    path = tmp_path / "lanebot.db"
    db.migrate(f"sqlite:///{path}")
    read_only = db.make_engine(f"sqlite:///file:{path}?mode=ro&uri=true")  # as on a full or read-only disk
    app = create_app(make_settings(), engine=read_only)
    transport = httpx.ASGITransport(app=app)  # no lifespan: start-up would try to migrate
    async with httpx.AsyncClient(transport=transport, base_url="http://lanebot.test") as client:
        health = await client.get("/healthz")
    read_only.dispose()
    assert health.status_code == 503
    assert (health.json()["status"], health.json()["database"]) == ("unavailable", "unwritable")


async def test_health_is_503_when_the_database_takes_no_writes(engine):
    if engine.dialect.name == "sqlite":
        pytest.skip("the SQLite case is the read-only file above")
    options = f"{engine.url.query['options']} -cdefault_transaction_read_only=on"
    read_only = db.make_engine(engine.url.update_query_dict({"options": options}).render_as_string(hide_password=False))
    app = create_app(make_settings(), engine=read_only)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://lanebot.test") as client:
        health = await client.get("/healthz")
    read_only.dispose()
    assert health.status_code == 503
    assert health.json()["database"] == "unwritable"


async def get_page(app, path: str, **options) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://lanebot.test") as client:
        return await client.get(path, **options)


def test_setup_builds_its_urls_on_the_public_url_it_is_given(clean_environment, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr("bot.cli.serve.uvicorn.run", lambda app, **options: calls.append(app))
    assert main(["setup", "--public-url", "https://lanebot.example.com/"]) == 0
    assert "Open https://lanebot.example.com/setup" in capsys.readouterr().out
    [app] = calls
    page = asyncio.run(get_page(app, "/setup", headers={"Host": "evil.example"}))
    assert "https://lanebot.example.com/api/github/webhooks" in page.text and "evil.example" not in page.text
    with pytest.raises(SystemExit) as refused:
        main(["setup", "--public-url", "lanebot.example.com"])
    assert refused.value.code == 2
    assert "is not an http(s) URL" in capsys.readouterr().err
