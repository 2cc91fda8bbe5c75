"""The dashboard's session when GitHub's user access tokens expire, through the sandbox GitHub's web
flow and user API in-process (httpx's ASGI transport to both apps, one clock the test moves): the
token is renewed with its refresh token when it has expired and the cookie sealed again with the new
pair, so the page still loads, and keeps loading after the next expiry; when the refresh token is
refused the person is told to sign in again, never shown an error; a token GitHub answers 401 to
before the dashboard thinks it expired (this host's clock was set back) is renewed too; concurrent
requests bringing the same refresh token renew it once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from bot.edges.store import runs as store
from bot.sandbox import create_app as sandbox_app
from bot.sandbox.oauth import USER_TOKEN_SECONDS
from bot.web.dashboard import HttpGitHubUsers, dashboard_routes
from bot.web.dashboard.github import UserTokens
from bot.web.dashboard.session import COOKIE_NAME, CookieSealer, Renewals, SignedIn, session_key
from tests.app_helpers import SECRET, make_settings
from tests.sandbox.conftest import project
from tests.sandbox.test_oauth_web_flow import JSON, client_of, code_for, query_of
from tests.sandbox.test_sandbox import BASE, Clock, Harness, harness

pytestmark = pytest.mark.anyio
__all__ = ["project"]  # the sandbox tests' fixture: the files a repository starts from

DASHBOARD = "http://lanebot.test"
CALLBACK = f"{DASHBOARD}/dashboard/oauth/callback"
REPOSITORY = "acme/tasks"


@dataclass
class HostClock:
    """The dashboard host's clock: GitHub's, or `behind` seconds behind it once set back."""

    github: Clock
    behind: float = 0.0

    def __call__(self) -> float:
        return self.github().timestamp() - self.behind


@dataclass
class Signed:
    h: Harness
    browser: httpx.AsyncClient  # the person's browser on the dashboard, with its cookie
    run_id: int
    sealer: CookieSealer
    clock: HostClock

    def session(self) -> SignedIn:
        """What the browser's cookie holds now (the test knows the key, as the host does)."""
        opened = self.sealer.open(self.browser.cookies.get(COOKIE_NAME), now=self.clock())
        session = SignedIn.from_cookie(opened)
        assert session is not None, "the browser holds no signed-in session"
        return session

    async def run_page(self) -> httpx.Response:
        return await self.browser.get(f"/dashboard/runs/{self.run_id}")


def seed_run(engine: Engine, h: Harness) -> int:
    run = store.create_run(
        engine, installation_id=1, repository=REPOSITORY, issue_number=1, requested_by="alice", now=h.clock()
    )
    assert run.id is not None
    return run.id


@asynccontextmanager
async def signed_in(tmp_path: Path, project: Path, engine: Engine) -> AsyncIterator[Signed]:
    """alice, a reader of acme/tasks, signed in to the dashboard through the sandbox's web flow."""
    async with harness(tmp_path, project, callback_urls=(CALLBACK,)) as h:
        await h.repository(REPOSITORY, organization=True)
        added = await h.http.post(
            f"/_sandbox/repos/{REPOSITORY}/collaborators", json={"login": "alice", "role": "read"}
        )
        assert added.status_code == 201
        client_id, client_secret = await client_of(h)
        github = sandbox_app(h.sandbox)
        users = HttpGitHubUsers(
            web_url=BASE,
            api_url=BASE,
            client_id=client_id,
            client_secret=client_secret,
            http_client=lambda: httpx.AsyncClient(transport=httpx.ASGITransport(app=github), base_url=BASE),
        )
        settings = make_settings(
            str(engine.url),
            github_api_url=BASE,
            github_client_id=client_id,
            github_client_secret=client_secret,
            public_url=DASHBOARD,
            workdir=tmp_path / "work",
        )
        clock = HostClock(h.clock)
        routes = dashboard_routes(settings, engine, users=users, clock=clock)
        transport = httpx.ASGITransport(app=Starlette(routes=routes))
        async with httpx.AsyncClient(transport=transport, base_url=DASHBOARD) as browser:
            started = await browser.get("/dashboard/login")
            assert started.status_code == 303
            asked = query_of(started)
            code = await code_for(h, "alice", state=asked["state"], redirect_uri=asked["redirect_uri"])
            back = await browser.get("/dashboard/oauth/callback", params={"code": code, "state": asked["state"]})
            assert back.status_code == 303, back.text
            yield Signed(h, browser, seed_run(engine, h), CookieSealer(session_key(SECRET, client_secret)), clock)


async def refresh_at_github(h: Harness, refresh_token: str) -> dict[str, Any]:
    client_id, client_secret = await client_of(h)
    fields = {
        "client_id": client_id,
        "client_secret": client_secret,
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
    }
    answer: dict[str, Any] = (await h.http.post("/login/oauth/access_token", data=fields, headers=JSON)).json()
    return answer


async def test_an_expired_token_is_renewed_and_the_page_still_loads(
    tmp_path: Path, project: Path, engine: Engine
) -> None:
    async with signed_in(tmp_path, project, engine) as signed:
        first = signed.session()
        assert first.refresh_token is not None and first.refresh_token.startswith("ghr_")
        assert first.expires_at == signed.h.clock().timestamp() + USER_TOKEN_SECONDS
        assert (await signed.run_page()).status_code == 200

        signed.h.clock.advance(seconds=USER_TOKEN_SECONDS + 1)  # the token has expired, and the access check too
        expired = await signed.h.http.get("/user", headers={"Authorization": f"Bearer {first.token}"})
        assert expired.status_code == 401
        page = await signed.run_page()
        assert page.status_code == 200 and REPOSITORY in page.text
        assert COOKIE_NAME in page.headers.get("set-cookie", "")
        second = signed.session()
        assert second.token != first.token and second.refresh_token != first.refresh_token
        assert second.expires_at == signed.h.clock().timestamp() + USER_TOKEN_SECONDS
        assert (await refresh_at_github(signed.h, first.refresh_token))["error"] == "bad_refresh_token"  # spent

        # The cookie was sealed again: the next expiry is renewed with the new refresh token.
        signed.h.clock.advance(seconds=USER_TOKEN_SECONDS + 1)
        assert (await signed.run_page()).status_code == 200
        assert signed.session().token not in (first.token, second.token)


async def test_a_refused_refresh_token_asks_the_person_to_sign_in_again(
    tmp_path: Path, project: Path, engine: Engine
) -> None:
    async with signed_in(tmp_path, project, engine) as signed:
        session = signed.session()
        assert session.refresh_token is not None
        # Renewed elsewhere (a leaked cookie used by someone else): the pair in the cookie no longer works.
        assert "access_token" in await refresh_at_github(signed.h, session.refresh_token)
        signed.h.clock.advance(seconds=301)  # past the access check's five minutes, token not yet expired

        page = await signed.run_page()
        assert page.status_code == 401
        assert "Sign in again" in page.text and "expired or was revoked" in page.text
        assert f'href="/dashboard/login?next=/dashboard/runs/{signed.run_id}"' in page.text
        assert COOKIE_NAME not in signed.browser.cookies  # signed out
        listing = await signed.browser.get("/dashboard")
        assert listing.status_code == 303 and listing.headers["location"] == "/dashboard/login"


async def test_a_token_github_refuses_before_its_expiry_here_is_renewed_on_the_401(
    tmp_path: Path, project: Path, engine: Engine
) -> None:
    async with signed_in(tmp_path, project, engine) as signed:
        first = signed.session()
        signed.clock.behind = 600  # set back 10 minutes after signing in
        signed.h.clock.advance(seconds=USER_TOKEN_SECONDS + 1)  # expired at GitHub, 10 minutes left here
        assert not first.needs_renewal(now=signed.clock())
        page = await signed.run_page()
        assert page.status_code == 200 and REPOSITORY in page.text
        assert signed.session().token != first.token


async def test_concurrent_requests_with_one_refresh_token_renew_it_once() -> None:
    asked: list[str] = []

    async def ask(refresh_token: str) -> UserTokens:
        asked.append(refresh_token)
        await asyncio.sleep(0)  # GitHub answering: the other requests arrive meanwhile
        return UserTokens("ghu_new", 28800, "ghr_new", 15811200)

    renewals = Renewals(grace=60.0)
    now = [1000.0]
    answers = await asyncio.gather(*(renewals.renew("ghr_old", ask, clock=lambda: now[0]) for _ in range(3)))
    assert asked == ["ghr_old"] and {a.access_token for a in answers} == {"ghu_new"}
    now[0] += 61  # past the grace, the spent token is asked about again (and GitHub refuses it)
    await renewals.renew("ghr_old", ask, clock=lambda: now[0])
    assert asked == ["ghr_old", "ghr_old"]
