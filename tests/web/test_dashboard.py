"""The dashboard through Starlette's TestClient: Sign in with GitHub (GitHub's web flow and user API
mocked with respx in their documented shapes), who sees which runs, the run and attempt pages, the
transcript's boundary, the security headers, and the dashboard being off without an OAuth client."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import respx
from starlette.testclient import TestClient

from bot.edges.store import runs as store
from bot.web.app import create_app
from tests.app_helpers import make_settings

API = "https://github.example.test/api/v3"
WEB = "https://github.example.test"
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "ghu_user-token-0123456789abcdef"
CLIENT_SECRET = "client-secret-for-tests-0123456789"
PLAN = (
    '{"id": "api", "title": "The API", "needs": [], "files": "^api/", "check": "true", "brief": "b", "estimate": 10}\n'
    '{"id": "ui", "title": "<script>alert(1)</script> UI", "needs": ["api"], "files": "^ui/", "check": "true",'
    ' "brief": "b", "estimate": 5}\n'
)
CLAUDE = Path(__file__).resolve().parents[1] / "agents_fixtures" / "claude_stream_success.jsonl"


def without_lifespan(app) -> contextlib.AbstractContextManager[TestClient]:
    """A client of the app with no lifespan: the database is migrated already, and no job resumes the
    seeded runs (their lanes are rows for the pages to show, not work to do)."""
    return contextlib.nullcontext(TestClient(app))


def settings_for(engine, workdir: Path, **overrides):
    values = dict(
        github_api_url=API,
        github_client_id="Iv1.dashboardclient",
        github_client_secret=CLIENT_SECRET,
        workdir=workdir,
    )
    values.update(overrides)
    return make_settings(str(engine.url), **values)


def seed(engine, workdir: Path) -> dict[str, int]:
    """Two repositories' runs: octo/one (the person can read it) and octo/secret (they cannot)."""
    ids = {}
    for name, issue in (("octo/one", 7), ("octo/secret", 9)):
        run = store.create_run(
            engine, installation_id=42, repository=name, issue_number=issue, requested_by="ann", now=T0
        )
        assert run.id is not None
        store.add_plan(engine, run.id, units_jsonl=PLAN, source="agent", now=T0)
        store.update_run(engine, run.id, approved_revision=1, pr_number=31, now=T0)
        store.transition(engine, run.id, "planning", "awaiting_approval", now=T0)
        store.transition(engine, run.id, "awaiting_approval", "running", now=T0)
        api, ui = store.create_lanes(engine, run.id, [["api"], ["ui"]])
        assert api.id is not None and ui.id is not None
        transcript = workdir / "transcripts" / str(run.id) / "api" / "attempt-1.jsonl"
        transcript.parent.mkdir(parents=True)
        transcript.write_bytes(CLAUDE.read_bytes() + json.dumps({"lanebot": "exit", "status": 0}).encode() + b"\n")
        session = store.start_session(
            engine, run_id=run.id, kind="lane", lane_id=api.id, host="runner-1", transcript_path=str(transcript), now=T0
        )
        assert session.id is not None
        store.set_lane_state(engine, api.id, "pending", "running", now=T0)
        store.update_lane(engine, api.id, check_run_id=555)
        store.set_lane_state(engine, api.id, "running", "finished", now=T0 + timedelta(minutes=8))
        store.finish_session(
            engine,
            session.id,
            status="succeeded",
            now=T0 + timedelta(minutes=8),
            input_tokens=1200,
            output_tokens=340,
            cost_usd=0.09,
            check_started_at=T0 + timedelta(minutes=6),
            check_output="3 passed in 0.4s",
            diff_stat="12\t0\tapp/api.py\n-\t-\tlogo.png",
        )
        store.set_lane_state(engine, api.id, "finished", "merged", now=T0 + timedelta(minutes=9))
        outside = workdir.parent / f"outside-{run.id}.jsonl"
        outside.write_text('{"type":"assistant","message":{"content":[{"type":"text","text":"OUTSIDE-SECRET"}]}}\n')
        store.start_session(
            engine, run_id=run.id, kind="lane", lane_id=ui.id, host="runner-1", transcript_path=str(outside), now=T0
        )
        ids[name] = run.id
    return ids


def github_mock(router: respx.MockRouter, repositories=("Octo/One",)) -> dict[str, respx.Route]:
    """GitHub's OAuth token endpoint and user API, answering as the docs show."""
    return {
        "token": router.post(f"{WEB}/login/oauth/access_token").mock(
            return_value=httpx.Response(
                200, json={"access_token": TOKEN, "token_type": "bearer", "scope": "", "expires_in": 28800}
            )
        ),
        "user": router.get(f"{API}/user").mock(return_value=httpx.Response(200, json={"login": "ann", "id": 1001})),
        "installations": router.get(f"{API}/user/installations").mock(
            return_value=httpx.Response(
                200, json={"total_count": 1, "installations": [{"id": 42, "account": {"login": "octo"}}]}
            )
        ),
        "repositories": router.get(f"{API}/user/installations/42/repositories").mock(
            return_value=httpx.Response(
                200,
                json={
                    "total_count": len(repositories),
                    "repository_selection": "selected",
                    "repositories": [
                        {"id": index, "full_name": name, "private": True, "permissions": {"pull": True, "push": False}}
                        for index, name in enumerate(repositories, start=1)
                    ],
                },
            )
        ),
    }


def sign_in(client: TestClient, next_path: str | None = None) -> httpx.Response:
    query = f"?next={urllib.parse.quote(next_path)}" if next_path else ""
    started = client.get(f"/dashboard/login{query}", follow_redirects=False)
    assert started.status_code == 303
    location = urllib.parse.urlsplit(started.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{WEB}/login/oauth/authorize"
    params = urllib.parse.parse_qs(location.query)
    assert params["client_id"] == ["Iv1.dashboardclient"]
    return client.get(f"/dashboard/oauth/callback?code=thecode123&state={params['state'][0]}", follow_redirects=False)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def test_signing_in_shows_only_the_runs_of_readable_repositories(engine, workdir):
    ids = seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        routes = github_mock(router)
        assert client.get("/dashboard", follow_redirects=False).headers["location"] == "/dashboard/login"
        finished = sign_in(client)
        assert finished.status_code == 303 and finished.headers["location"] == "/dashboard"
        cookie = finished.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower() and "path=/dashboard" in cookie.lower()
        assert TOKEN not in cookie  # sealed, not merely signed
        exchanged = urllib.parse.parse_qs(routes["token"].calls.last.request.content.decode())
        assert exchanged["code"] == ["thecode123"] and exchanged["client_secret"] == [CLIENT_SECRET]
        assert routes["repositories"].calls.last.request.headers["authorization"] == f"Bearer {TOKEN}"
        page = client.get("/dashboard")
        assert page.status_code == 200
        assert f'href="/dashboard/runs/{ids["octo/one"]}"' in page.text and "octo/one" in page.text
        assert "octo/secret" not in page.text and f"/dashboard/runs/{ids['octo/secret']}" not in page.text
        assert "1 / 2" in page.text and "1,200 in · 340 out" in page.text and "$0.09" in page.text
        assert "Signed in as <strong>ann</strong>" in page.text
        one = f'data-run="{ids["octo/one"]}"'
        assert one in client.get("/dashboard?state=running").text
        assert one in client.get("/dashboard?repository=OCTO/one").text
        assert one not in client.get("/dashboard?state=done").text
        filtered = client.get("/dashboard?repository=octo/secret").text
        assert one not in filtered and f'data-run="{ids["octo/secret"]}"' not in filtered
        assert client.get("/dashboard?state=nonsense").status_code == 400


def test_another_repositorys_run_lane_and_attempt_answer_404(engine, workdir):
    ids = seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        secret = ids["octo/secret"]
        for path in (
            f"/dashboard/runs/{secret}",
            f"/dashboard/runs/{secret}/lanes/api/attempts/1",
            "/dashboard/runs/99999",
            f"/dashboard/runs/{ids['octo/one']}/lanes/api/attempts/7",
            f"/dashboard/runs/{ids['octo/one']}/lanes/nope/attempts/1",
        ):
            response = client.get(path)
            assert response.status_code == 404, path
            assert "octo/secret" not in response.text and "OUTSIDE-SECRET" not in response.text


def test_the_run_page_holds_the_graph_svg_the_timeline_and_links(engine, workdir):
    ids = seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        page = client.get(f"/dashboard/runs/{ids['octo/one']}")
    assert page.status_code == 200
    text = page.text
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="unit-graph"' in text
    assert 'data-unit="api" data-state="merged" data-critical="true"' in text
    assert 'data-from="api" data-to="ui" data-critical="true"' in text
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert f'href="{WEB}/octo/one/issues/7"' in text and f'href="{WEB}/octo/one/pull/31"' in text
    assert f'href="{WEB}/octo/one/runs/555"' in text
    assert f'href="/dashboard/runs/{ids["octo/one"]}/lanes/api/attempts/1"' in text
    assert "runner-1" in text and "8 min" in text and "15 min" in text  # took; the critical path's estimate
    assert "lane" in text and "&#34;to&#34;: &#34;merged&#34;" in text  # the event log, escaped
    planned, actual = text.split('class="timeline timeline-planned"')[1].split('class="timeline timeline-actual"')
    assert planned.count('data-kind="planned"') == 2  # one bar per unit, by its estimate
    api_row = actual.split('data-unit="api"')[1].split("</g>")[0]
    assert [kind for kind in ("agent", "check", "to-merge") if f'data-kind="{kind}"' in api_row] == [
        "agent",
        "check",
        "to-merge",
    ]
    assert "the agent, 6 min" in api_row and "its check, 2 min" in api_row and 'class="merged"' in api_row


def test_a_held_run_says_so_in_the_list_and_on_its_page_with_the_reason_escaped(engine, workdir):
    ids = seed(engine, workdir)
    store.update_run(engine, ids["octo/one"], held_by="ann", held_reason="<b>the release</b>", held_at=T0)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        listed = client.get("/dashboard").text
        page = client.get(f"/dashboard/runs/{ids['octo/one']}").text
    assert "running, held by @ann" in listed
    assert "Held by @ann since 2025-" in page and "&lt;b&gt;the release&lt;/b&gt;" in page and "<b>the" not in page
    assert "until /unhold" in page


def test_an_attempt_renders_its_transcript_and_refuses_a_path_outside_the_workdir(engine, workdir):
    ids = seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    run = ids["octo/one"]
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        page = client.get(f"/dashboard/runs/{run}/lanes/api/attempts/1")
        outside = client.get(f"/dashboard/runs/{run}/lanes/ui/attempts/1")
    assert page.status_code == 200
    assert "ABRACADABRA" in page.text and "Write" in page.text and "File created successfully" in page.text
    assert "&lt;!DOCTYPE html&gt;" in page.text and "<details>" in page.text  # the long Write input, folded
    assert "runner-1" in page.text and "lanebot: exit" in page.text
    assert "The unit's check passed in 2 min." in page.text and "3 passed in 0.4s" in page.text
    assert "2 files, 12 lines added, 0 deleted." in page.text
    assert "<code>app/api.py</code>" in page.text and "+12" in page.text and "binary" in page.text
    assert outside.status_code == 200
    assert "OUTSIDE-SECRET" not in outside.text
    assert "not under this host&#39;s LANEBOT_WORKDIR" in outside.text


def test_a_transcript_through_a_link_is_refused(engine, workdir, tmp_path):
    ids = seed(engine, workdir)
    run = ids["octo/one"]
    target = workdir / "transcripts" / str(run) / "api" / "attempt-1.jsonl"
    target.unlink()
    target.symlink_to(tmp_path / f"outside-{run}.jsonl")  # a link inside the workdir, pointing out
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        page = client.get(f"/dashboard/runs/{run}/lanes/api/attempts/1")
    assert page.status_code == 200 and "OUTSIDE-SECRET" not in page.text and "a link" in page.text


def test_every_dashboard_response_carries_the_security_headers_and_no_secret(engine, workdir):
    ids = seed(engine, workdir)
    settings = settings_for(engine, workdir)
    app = create_app(settings, engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        responses = [
            client.get("/dashboard", follow_redirects=False),
            client.get("/dashboard/login", follow_redirects=False),
        ]
        responses.append(sign_in(client))
        responses += [
            client.get(path)
            for path in (
                "/dashboard",
                f"/dashboard/runs/{ids['octo/one']}",
                f"/dashboard/runs/{ids['octo/one']}/lanes/api/attempts/1",
                f"/dashboard/runs/{ids['octo/secret']}",
                "/dashboard/no/such/page",
                "/dashboard/static/dashboard.css",
            )
        ]
        responses.append(client.post("/dashboard/logout"))
        assert client.get("/dashboard", follow_redirects=False).status_code == 303  # signed out
    for response in responses:
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "style-src 'self'" in csp and "img-src 'self' data:" in csp
        # Scripts only from this origin (the packaged live.js), never inline; its stream and fetches too.
        assert "script-src 'self';" in csp and "connect-src 'self';" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["x-frame-options"] == "DENY"
        for secret in (settings.webhook_secret, CLIENT_SECRET, TOKEN, settings.private_key.splitlines()[1]):
            assert secret not in response.text
    assert responses[-2].headers["content-type"].startswith("text/css")
    assert "style=" not in responses[4].text and "<style" not in responses[4].text


def test_a_forged_or_replayed_state_is_refused(engine, workdir):
    seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        routes = github_mock(router)
        client.get("/dashboard/login", follow_redirects=False)
        refused = client.get("/dashboard/oauth/callback?code=thecode123&state=not-the-state", follow_redirects=False)
        assert refused.status_code == 403 and not routes["token"].called
    with without_lifespan(app) as stranger:
        assert stranger.get("/dashboard/oauth/callback?code=c&state=s", follow_redirects=False).status_code == 403


def test_access_is_checked_again_after_the_ttl(engine, workdir):
    ids = seed(engine, workdir)
    clock = [1_000_000.0]
    from bot.web.dashboard import dashboard_routes

    settings = settings_for(engine, workdir)
    app = create_app(settings, engine=engine)
    app.router.routes[:] = [
        route for route in app.router.routes if not getattr(route, "path", "").startswith("/dashboard")
    ]
    app.router.routes.extend(dashboard_routes(settings, engine, clock=lambda: clock[0]))
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        sign_in(client)
        assert client.get(f"/dashboard/runs/{ids['octo/one']}").status_code == 200
        github_mock(router, repositories=("octo/secret",))  # access changed on GitHub
        assert client.get(f"/dashboard/runs/{ids['octo/one']}").status_code == 200  # within the TTL
        clock[0] += 301
        assert client.get(f"/dashboard/runs/{ids['octo/one']}").status_code == 404
        assert client.get(f"/dashboard/runs/{ids['octo/secret']}").status_code == 200
        router.get(f"{API}/user/installations").mock(
            return_value=httpx.Response(401, json={"message": "Bad credentials"})
        )
        clock[0] += 301
        expired = client.get("/dashboard", follow_redirects=False)
        assert expired.status_code == 401 and "Sign in again" in expired.text  # no refresh token to renew it with
        assert "lanebot_dashboard" not in client.cookies


def test_sign_in_returns_to_the_page_asked_for(engine, workdir):
    ids = seed(engine, workdir)
    app = create_app(settings_for(engine, workdir), engine=engine)
    with respx.mock(assert_all_called=False) as router, without_lifespan(app) as client:
        github_mock(router)
        wanted = f"/dashboard/runs/{ids['octo/one']}"
        redirected = client.get(wanted, follow_redirects=False)
        assert redirected.headers["location"] == f"/dashboard/login?next={wanted}"
        assert sign_in(client, wanted).headers["location"] == wanted
        assert sign_in(client, "//evil.example/").headers["location"] == "/dashboard"


def test_the_dashboard_is_off_without_the_oauth_client(engine, workdir):
    seed(engine, workdir)
    app = create_app(settings_for(engine, workdir, github_client_id="", github_client_secret=""), engine=engine)
    with without_lifespan(app) as client:
        for path in ("/dashboard", "/dashboard/login", "/dashboard/runs/1"):
            response = client.get(path, follow_redirects=False)
            assert response.status_code == 404
            assert "GITHUB_CLIENT_ID" in response.text and "GITHUB_CLIENT_SECRET" in response.text
            assert response.headers["x-frame-options"] == "DENY"
        assert client.get("/healthz").status_code == 200


def test_the_oauth_client_comes_from_setup_and_goes_in_pairs(tmp_path):
    from bot.edges.settings import Settings, SettingsError
    from bot.web import registration

    conversion = {"id": 1, "pem": "pem", "webhook_secret": "w", "client_id": "Iv1.abc", "client_secret": "s3cret"}
    values = registration.credentials_from_conversion(conversion)
    assert values["GITHUB_CLIENT_ID"] == "Iv1.abc" and values["GITHUB_CLIENT_SECRET"] == "s3cret"
    filled = registration.fill_manifest({"name": "lanebot"}, "https://lanebot.example", "/hooks")
    assert filled["callback_urls"] == ["https://lanebot.example/dashboard/oauth/callback"]
    base = {"APP_ID": "1", "PRIVATE_KEY": make_settings().private_key, "WEBHOOK_SECRET": "w"}
    with pytest.raises(SettingsError) as refused:
        Settings.load({**base, "GITHUB_CLIENT_ID": "Iv1.abc"}, env_file=None)
    assert "GITHUB_CLIENT_SECRET" in refused.value.names
    loaded = Settings.load(
        {
            **base,
            "GITHUB_CLIENT_ID": "Iv1.abc",
            "GITHUB_CLIENT_SECRET": "s3cret",
            "LANEBOT_PUBLIC_URL": "https://l.example/",
        },
        env_file=None,
    )
    assert (loaded.github_client_id, loaded.public_url) == ("Iv1.abc", "https://l.example")
    assert "s3cret" not in repr(loaded)
