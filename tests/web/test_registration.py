"""Registering the App from app.yml: the page posts the manifest, the callback writes .env safely."""

from __future__ import annotations

import html
import json
import re
import stat
import urllib.parse
from pathlib import Path

import httpx
import pytest
import respx
from starlette.applications import Starlette

from bot.cli import main
from bot.edges.settings import Settings, parse_env_text
from bot.render.dashboard.links import web_url_for_api
from bot.web import registration as setup
from bot.web.app import create_app, create_setup_app
from tests.app_helpers import make_settings, private_key_pem, running

pytestmark = pytest.mark.anyio

BASE = "http://lanebot.test"
CONVERSION_URL = "https://api.github.com/app-manifests/{code}/conversions"


def conversion(**overrides) -> dict:
    """GitHub's answer to `POST /app-manifests/{code}/conversions` (201), as its REST docs show it."""
    answer = {
        "id": 987654,
        "slug": "lanebot-test",
        "node_id": "MDM6QXBwOTg3NjU0",
        "owner": {"login": "octocat", "id": 1, "type": "User"},
        "name": "lanebot-test",
        "description": "",
        "external_url": "https://github.com/lanebot/lanebot",
        "html_url": "https://github.com/apps/lanebot-test",
        "created_at": "2024-05-01T10:00:00Z",
        "updated_at": "2024-05-01T10:00:00Z",
        "permissions": {
            "issues": "write",
            "pull_requests": "write",
            "contents": "write",
            "checks": "write",
            "metadata": "read",
        },
        "events": ["issues", "issue_comment", "pull_request", "pull_request_review", "check_run"],
        "client_id": "Iv1.8a61f9b3a7aba766",
        "client_secret": "1726be1638095a19edd134c77bde3aa2ece1e5d8",
        "webhook_secret": "e340154128314309424b7c8e90325147d99fdafa",
        "pem": private_key_pem(),
    }
    answer.update(overrides)
    return answer


def form_of(page: str) -> tuple[str, dict]:
    """The App-creation form's action and the manifest it posts."""
    action = html.unescape(re.search(r'<form action="([^"]+)" method="post">', page).group(1))
    manifest = html.unescape(re.search(r'name="manifest" value="([^"]*)"', page, re.S).group(1))
    return action, json.loads(manifest)


async def start_flow(client: httpx.AsyncClient, query: str = "") -> str:
    """Open the set-up page like a browser; return the state GitHub will send back."""
    page = await client.get(f"/setup{query}")
    assert page.status_code == 200
    action, _ = form_of(page.text)
    return urllib.parse.parse_qs(urllib.parse.urlsplit(action).query)["state"][0]


@pytest.fixture
def env_path(tmp_path) -> Path:
    return tmp_path / ".env"


@pytest.fixture
def setup_app(env_path):
    return create_setup_app(public_url=BASE, env_file=env_path)


def test_githubs_web_address_is_derived_from_the_api_address():
    assert web_url_for_api("https://api.github.com") == "https://github.com"
    assert web_url_for_api("https://ghe.example.com/api/v3") == "https://ghe.example.com"
    assert web_url_for_api("https://api.acme.ghe.com") == "https://acme.ghe.com"
    assert web_url_for_api("http://127.0.0.1:8765/") == "http://127.0.0.1:8765"


async def test_the_page_posts_app_yml_with_urls_of_the_configured_public_address(setup_app):
    async with running(setup_app) as client:
        page = await client.get("/setup")
    assert page.status_code == 200
    action, manifest = form_of(page.text)
    assert action.startswith("https://github.com/settings/apps/new?state=")
    assert manifest["hook_attributes"]["url"] == f"{BASE}/api/github/webhooks"
    assert manifest["hook_attributes"]["active"] is True
    assert manifest["redirect_url"] == f"{BASE}/setup/callback"
    assert manifest["name"] == "lanebot"
    assert manifest["default_permissions"] == {
        "issues": "write",
        "pull_requests": "write",
        "contents": "write",
        "checks": "write",
        "metadata": "read",
        "members": "read",
    }
    assert "issue_comment" in manifest["default_events"]
    assert setup.STATE_COOKIE in page.cookies


async def test_a_webhook_url_github_cannot_reach_is_said_so_with_the_way_to_a_relay_channel(env_path):
    app = create_setup_app(public_url="http://127.0.0.1:3000", env_file=env_path)
    async with running(app) as client:
        page = (await client.get("/setup")).text
    assert 'id="unreachable"' in page
    assert "GitHub cannot deliver webhooks to <code>http://127.0.0.1:3000/api/github/webhooks</code>" in page
    assert "the address 127.0.0.1 is loopback" in page
    assert "https://smee.io/new" in page and "LANEBOT_WEBHOOK_PROXY_URL" in page


@pytest.mark.parametrize(
    ("public_url", "webhook_url", "github_api_url"),
    [
        ("https://lanebot.example.com", "", "https://api.github.com"),
        ("http://127.0.0.1:3000", "https://smee.io/AbC123", "https://api.github.com"),
        # An Enterprise Server may well sit in the same private network as lanebot.
        ("http://10.0.0.5:3000", "", "https://ghe.corp.example/api/v3"),
    ],
)
async def test_a_webhook_url_github_can_reach_gets_no_warning(env_path, public_url, webhook_url, github_api_url):
    app = create_setup_app(
        public_url=public_url, env_file=env_path, webhook_url=webhook_url, github_api_url=github_api_url
    )
    async with running(app) as client:
        page = (await client.get("/setup")).text
    assert 'id="unreachable"' not in page


async def test_with_a_relay_channel_github_delivers_to_the_channel_and_the_browser_returns_here(env_path):
    app = create_setup_app(public_url="http://127.0.0.1:3000", env_file=env_path, webhook_url="https://smee.io/AbC123")
    async with running(app) as client:
        _, manifest = form_of((await client.get("/setup")).text)
    assert manifest["hook_attributes"]["url"] == "https://smee.io/AbC123"
    assert manifest["redirect_url"] == "http://127.0.0.1:3000/setup/callback"


def test_the_relay_channel_is_read_from_the_environment_before_env(env_path):
    env_path.write_text("WEBHOOK_PROXY_URL=https://smee.io/FromDotEnv\n")
    assert setup.relay_channel(env_path, {}) == ("WEBHOOK_PROXY_URL", "https://smee.io/FromDotEnv")
    environ = {"LANEBOT_WEBHOOK_PROXY_URL": "https://smee.io/FromEnviron"}
    assert setup.relay_channel(env_path, environ) == ("LANEBOT_WEBHOOK_PROXY_URL", "https://smee.io/FromEnviron")
    assert setup.relay_channel(env_path.with_name("missing.env"), {}) == ("", "")


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({}, "GitHub cannot deliver webhooks to http://127.0.0.1:3000/api/github/webhooks: the address 127.0.0.1"),
        (
            {"WEBHOOK_PROXY_URL": "https://smee.io/AbC123"},
            "GitHub will deliver webhooks to the relay channel https://smee.io/AbC123 (WEBHOOK_PROXY_URL).",
        ),
    ],
)
def test_lanebot_setup_says_in_the_terminal_where_github_will_deliver(tmp_path, monkeypatch, capsys, environ, says):
    served = []
    monkeypatch.setattr("bot.cli.serve.uvicorn.run", lambda app, **options: served.append(options))
    for name in ("HOST", "PORT", "GITHUB_API_URL", "WEBHOOK_PATH", "LANEBOT_WEBHOOK_PROXY_URL", "WEBHOOK_PROXY_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["setup", "--env-file", str(tmp_path / ".env")]) == 0
    out = capsys.readouterr().out
    assert says in out
    assert ("LANEBOT_WEBHOOK_PROXY_URL=<that URL>" in out) == (not environ)  # the steps only when needed
    assert served == [{"host": "127.0.0.1", "port": 3000, "log_level": "info"}]


async def test_an_organisation_gets_githubs_organisation_form(setup_app):
    async with running(setup_app) as client:
        page = await client.get("/setup?org=acme-corp")
        refused = await client.get("/setup?org=../evil")
    action, _ = form_of(page.text)
    assert action.startswith("https://github.com/organizations/acme-corp/settings/apps/new?state=")
    assert refused.status_code == 400


async def test_a_ghes_api_url_sends_the_form_to_that_server(env_path):
    app = create_setup_app(public_url=BASE, env_file=env_path, github_api_url="https://ghe.example.com/api/v3")
    async with running(app) as client:
        page = await client.get("/setup")
    assert form_of(page.text)[0].startswith("https://ghe.example.com/settings/apps/new?state=")


async def test_the_callback_writes_the_credentials_to_env_and_sends_to_the_installation_page(setup_app, env_path):
    with respx.mock() as github:
        exchange = github.post(CONVERSION_URL.format(code="abc123")).mock(
            return_value=httpx.Response(201, json=conversion())
        )
        async with running(setup_app) as client:
            state = await start_flow(client)
            response = await client.get(f"/setup/callback?code=abc123&state={state}")
    assert exchange.call_count == 1
    assert "authorization" not in exchange.calls[0].request.headers
    assert response.status_code == 303
    assert response.headers["location"] == "https://github.com/apps/lanebot-test/installations/new"
    text = env_path.read_text()
    assert re.search(r'^PRIVATE_KEY="-----BEGIN PRIVATE KEY-----\\n.+\\n-----END PRIVATE KEY-----\\n"$', text, re.M)
    assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
    settings = Settings.load(environ={}, env_file=env_path)
    assert (settings.app_id, settings.webhook_secret) == ("987654", "e340154128314309424b7c8e90325147d99fdafa")
    assert settings.private_key == private_key_pem()


async def test_existing_values_are_not_overwritten_without_confirmation(setup_app, env_path):
    env_path.write_text('# mine\nDATABASE_URL=sqlite:///keep.db\nAPP_ID=111\nWEBHOOK_SECRET="old"\n')
    with respx.mock() as github:
        exchange = github.post(CONVERSION_URL.format(code="abc123")).mock(
            return_value=httpx.Response(201, json=conversion())
        )
        async with running(setup_app) as client:
            state = await start_flow(client)
            refused = await client.get(f"/setup/callback?code=abc123&state={state}")
            assert exchange.call_count == 0  # the single-use code is kept for the confirmation
            assert env_path.read_text() == '# mine\nDATABASE_URL=sqlite:///keep.db\nAPP_ID=111\nWEBHOOK_SECRET="old"\n'
            assert refused.status_code == 409
            assert "<code>APP_ID</code>" in refused.text and "<code>WEBHOOK_SECRET</code>" in refused.text
            confirm = html.unescape(re.search(r'<a class="button" href="([^"]+)">', refused.text).group(1))
            assert "force=1" in confirm and confirm.startswith("/setup/callback?")
            confirmed = await client.get(confirm)
    assert exchange.call_count == 1
    assert confirmed.status_code == 303
    lines = env_path.read_text().splitlines()
    assert lines[:3] == ["# mine", "DATABASE_URL=sqlite:///keep.db", 'APP_ID="987654"']
    values = Settings.load(environ={}, env_file=env_path)
    assert (values.app_id, values.webhook_secret) == ("987654", "e340154128314309424b7c8e90325147d99fdafa")


@pytest.mark.parametrize("case", ["wrong-state", "no-cookie", "no-state", "expired"])
async def test_a_callback_without_this_browsers_state_is_refused(env_path, case):
    now = [1_700_000_000.0]
    app = Starlette(routes=setup.routes(setup.SetupConfig(env_path=env_path, clock=lambda: now[0])))
    with respx.mock(assert_all_called=False) as github:
        exchange = github.post(CONVERSION_URL.format(code="abc123")).mock(
            return_value=httpx.Response(201, json=conversion())
        )
        async with running(app) as client:
            state = await start_flow(client)
            query = {"code": "abc123", "state": state}
            if case == "wrong-state":
                query["state"] = "forged"
            elif case == "no-state":
                del query["state"]
            elif case == "no-cookie":
                client.cookies.clear()
            elif case == "expired":
                now[0] += setup.STATE_LIFETIME_SECONDS + 1
            response = await client.get("/setup/callback?" + urllib.parse.urlencode(query))
    assert response.status_code == 403
    assert "start again at /setup" in response.text
    assert exchange.call_count == 0
    assert not env_path.exists()


async def test_a_code_github_does_not_know_gets_a_page_saying_to_start_again(setup_app, env_path):
    with respx.mock() as github:
        github.post(CONVERSION_URL.format(code="stale")).mock(
            return_value=httpx.Response(404, json={"message": "Not Found"})
        )
        async with running(setup_app) as client:
            state = await start_flow(client)
            response = await client.get(f"/setup/callback?code=stale&state={state}")
    assert response.status_code == 502
    assert "GitHub does not know this code" in response.text
    assert not env_path.exists()


async def test_the_running_app_serves_no_set_up_pages(engine):
    app = create_app(make_settings(), engine=engine)
    async with running(app) as client:
        answers = [await client.get(path) for path in ("/setup", "/setup/callback?code=abc123&state=x")]
    assert [answer.status_code for answer in answers] == [404, 404]
    assert not any("4711" in answer.text or ".env" in answer.text for answer in answers)


async def test_a_forged_host_header_is_not_reflected_in_the_page_or_the_manifest(setup_app):
    async with running(setup_app) as client:
        page = await client.get("/setup", headers={"Host": "evil.example"})
    assert page.status_code == 200
    assert "evil.example" not in page.text
    _, manifest = form_of(page.text)
    assert manifest["hook_attributes"]["url"] == f"{BASE}/api/github/webhooks"
    assert manifest["redirect_url"] == f"{BASE}/setup/callback"


async def test_an_https_public_url_gets_a_secure_state_cookie(env_path):
    app = create_setup_app(public_url="https://lanebot.example.com", env_file=env_path)
    async with running(app) as client:
        page = await client.get("/setup")
    assert "secure" in page.headers["set-cookie"].lower()
    assert form_of(page.text)[1]["redirect_url"] == "https://lanebot.example.com/setup/callback"


def test_env_updates_keep_other_lines_and_multiline_values():
    text = 'A=1\nPRIVATE_KEY="-----BEGIN\nold\n-----END"\nPRIVATE_KEY_PATH=/k.pem\nexport B="two"\n'
    updated = setup.update_env_text(text, {"PRIVATE_KEY": "new\nkey\n", "APP_ID": "7"}, remove=setup.REPLACED_KEYS)
    assert updated == 'A=1\nPRIVATE_KEY="new\\nkey\\n"\nexport B="two"\nAPP_ID="7"\n'


def test_values_with_quotes_and_backslashes_survive_the_round_trip():
    value = 'a "quoted" \\ value\nnext'
    assert parse_env_text(f"X={setup.format_env_value(value)}\n")[0] == {"X": value}


def test_a_state_is_good_once_per_browser_and_only_until_it_expires():
    signer = setup.StateSigner(b"k" * 32, lifetime_seconds=60)
    state, cookie = signer.issue(now=1000)
    assert signer.check(cookie, state, now=1059) is None
    assert "expired" in signer.check(cookie, state, now=1061)
    assert "does not match" in signer.check(cookie, "other", now=1000)
    other_signer = setup.StateSigner(b"x" * 32)
    assert "not issued by this lanebot" in other_signer.check(cookie, state, now=1000)
