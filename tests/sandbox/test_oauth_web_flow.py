"""The OAuth web flow as GitHub documents it for a GitHub App: a person is sent to
`/login/oauth/authorize`, signs in (the sandbox's sign-in page), authorizes the App once, and comes
back with a code and the same state; the code is traded at `/login/oauth/access_token` for a user
access token (8 hours) and a refresh token (6 months); the token reads `GET /user`, the App's
installations the person can reach and their repositories, and nothing the person cannot see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from bot.sandbox import SandboxConfig, SandboxServer, create_app
from bot.sandbox.cli import HumanClient
from tests.sandbox.test_sandbox import BASE, Harness, app_key, harness

pytestmark = pytest.mark.anyio

CALLBACK = "http://lanebot.test/auth/callback"
OTHER_CALLBACK = "http://lanebot.test/auth/other"
JSON = {"Accept": "application/json"}


@asynccontextmanager
async def browser(h: Harness) -> AsyncIterator[httpx.AsyncClient]:
    """A browser of its own (its own cookies) on the sandbox."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(h.sandbox)), base_url=BASE) as client:
        yield client


async def client_of(h: Harness) -> tuple[str, str]:
    app = (await h.http.get("/_sandbox/app")).json()
    return app["client_id"], app["client_secret"]


def query_of(response: httpx.Response) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(response.headers["location"]).query).items()}


async def sign_in(web: httpx.AsyncClient, login: str, return_to: str = "") -> httpx.Response:
    return await web.post("/session", data={"login": login, "return_to": return_to})


async def code_for(h: Harness, login: str, *, state: str = "s-1", **params: str) -> str:
    """The whole browser half of the flow for `login`, who authorizes the App: the code they bring back."""
    client_id, _ = await client_of(h)
    async with browser(h) as web:
        query = {"client_id": client_id, "state": state, **params}
        sent = await web.get("/login/oauth/authorize", params=query)
        assert sent.status_code == 302 and sent.headers["location"].startswith("/login?")
        back = await sign_in(web, login, query_of(sent)["return_to"])
        assert back.status_code == 302
        asked = await web.get(back.headers["location"])
        if asked.status_code == 200:  # the first time: "Authorize lanebot"
            assert "Authorize lanebot" in asked.text
            answered = await web.post("/login/oauth/authorize", data={**query, "authorize": "1"})
        else:
            answered = asked
        assert answered.status_code == 302
        location = answered.headers["location"]
        assert location.startswith(params.get("redirect_uri", CALLBACK) + "?")
        returned = query_of(answered)
        assert returned["state"] == state
        return returned["code"]


async def exchange(h: Harness, code: str, **extra: str) -> dict[str, Any]:
    client_id, client_secret = await client_of(h)
    fields = {"client_id": client_id, "client_secret": client_secret, "code": code, **extra}
    response = await h.http.post("/login/oauth/access_token", data=fields, headers=JSON)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


async def user_token(h: Harness, login: str) -> dict[str, str]:
    answer = await exchange(h, await code_for(h, login))
    return {"Authorization": f"Bearer {answer['access_token']}"}


@asynccontextmanager
async def world(tmp_path: Path, project: Path) -> AsyncIterator[Harness]:
    """acme/secret (private, alice may read), acme/open (public, no roles), bob/solo (bob's own, private)."""
    async with harness(tmp_path, project, callback_urls=(CALLBACK, OTHER_CALLBACK)) as h:
        await h.repository("acme/secret", organization=True)
        await h.repository("acme/open", organization=True, private=False)
        await h.repository("bob/solo")
        added = await h.http.post("/_sandbox/repos/acme/secret/collaborators", json={"login": "alice", "role": "read"})
        assert added.status_code == 201
        yield h


async def test_sign_in_authorize_exchange_then_read_the_user_their_installations_and_repositories(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        answer = await exchange(h, await code_for(h, "alice", state="xyz"))
        assert answer["access_token"].startswith("ghu_") and answer["refresh_token"].startswith("ghr_")
        assert {k: v for k, v in answer.items() if k not in ("access_token", "refresh_token")} == {
            "expires_in": 28800,
            "refresh_token_expires_in": 15811200,
            "scope": "",
            "token_type": "bearer",
        }
        token = {"Authorization": f"Bearer {answer['access_token']}"}

        me = await h.http.get("/user", headers=token)
        assert me.status_code == 200 and me.json()["login"] == "alice" and me.json()["type"] == "User"
        assert me.json()["id"] == (await h.http.get("/users/alice")).json()["id"]

        installations = (await h.http.get("/user/installations", headers=token)).json()
        assert installations["total_count"] == 1
        [acme] = installations["installations"]
        assert acme["account"]["login"] == "acme" and acme["app_id"] == h.sandbox.app.id

        listed = await h.http.get(f"/user/installations/{acme['id']}/repositories", headers=token)
        assert listed.status_code == 200
        body = listed.json()
        assert body["total_count"] == 1 and [r["full_name"] for r in body["repositories"]] == ["acme/secret"]
        assert body["repositories"][0]["permissions"] == {
            "admin": False,
            "maintain": False,
            "push": False,
            "triage": False,
            "pull": True,
        }
        bobs = h.sandbox.state.repository("bob", "solo")
        assert bobs is not None
        hidden = await h.http.get(f"/user/installations/{bobs.installation_id}/repositories", headers=token)
        assert hidden.status_code == 404 and hidden.json()["message"] == "Not Found"


async def test_a_second_flow_skips_the_question_and_the_owner_reaches_their_own_installation(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        await code_for(h, "bob")
        client_id, _ = await client_of(h)
        async with browser(h) as web:
            await sign_in(web, "bob")
            again = await web.get("/login/oauth/authorize", params={"client_id": client_id, "state": "2"})
            assert again.status_code == 302 and query_of(again)["state"] == "2" and "code" in query_of(again)
        token = {"Authorization": f"Bearer {(await exchange(h, query_of(again)['code']))['access_token']}"}
        [solo] = (await h.http.get("/user/installations", headers=token)).json()["installations"]
        repositories = (await h.http.get(f"/user/installations/{solo['id']}/repositories", headers=token)).json()
        assert [r["full_name"] for r in repositories["repositories"]] == ["bob/solo"]
        assert repositories["repositories"][0]["permissions"]["admin"] is True


async def test_a_private_repository_is_reached_and_listed_only_by_a_collaborator(tmp_path: Path, project: Path) -> None:
    async with world(tmp_path, project) as h:
        carol, alice = await user_token(h, "carol"), await user_token(h, "alice")
        assert (await h.http.get("/user/installations", headers=carol)).json() == {
            "total_count": 0,
            "installations": [],
        }
        acme = h.sandbox.state.installations[next(iter(h.sandbox.state.installations))]
        assert (await h.http.get(f"/user/installations/{acme.id}/repositories", headers=carol)).status_code == 404
        assert (await h.http.get("/repos/acme/secret", headers=carol)).status_code == 404
        assert (await h.http.get("/repos/acme/open", headers=carol)).status_code == 200  # public: readable, not listed
        assert (await h.http.get("/repos/acme/secret", headers=alice)).status_code == 200
        # Once alice's role is taken away, her token reaches the repository no more.
        await h.http.delete("/_sandbox/repos/acme/secret/collaborators/alice")
        assert (await h.http.get("/repos/acme/secret", headers=alice)).status_code == 404
        assert (await h.http.get("/user/installations", headers=alice)).json()["total_count"] == 0


async def test_a_user_token_only_reads(tmp_path: Path, project: Path) -> None:
    async with world(tmp_path, project) as h:
        alice = await user_token(h, "alice")
        wrote = await h.http.delete("/repos/acme/secret/git/refs/heads/main", headers=alice)
        assert wrote.status_code == 403 and wrote.json()["message"] == "Resource not accessible by integration"


async def test_a_code_is_good_once_and_for_ten_minutes(tmp_path: Path, project: Path) -> None:
    async with world(tmp_path, project) as h:
        code = await code_for(h, "alice")
        assert "access_token" in await exchange(h, code)
        assert await exchange(h, code) == {
            "error": "bad_verification_code",
            "error_description": "The code passed is incorrect or expired.",
            "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#bad-verification-code",
        }
        late = await code_for(h, "alice")
        h.clock.advance(minutes=10)
        assert (await exchange(h, late))["error"] == "bad_verification_code"
        assert (await exchange(h, "not-a-code"))["error"] == "bad_verification_code"


async def test_a_wrong_secret_or_client_is_incorrect_client_credentials_with_http_200(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        code = await code_for(h, "alice")
        client_id, client_secret = await client_of(h)
        for fields in (
            {"client_id": client_id, "client_secret": "wrong"},
            {"client_id": "Iv1.0000000000000000", "client_secret": client_secret},
            {"client_id": client_id},
        ):
            response = await h.http.post("/login/oauth/access_token", json={**fields, "code": code}, headers=JSON)
            assert response.status_code == 200
            assert response.json()["error"] == "incorrect_client_credentials"
            assert response.json()["error_description"] == "The client_id and/or client_secret passed are incorrect."
        # The code was not spent by the refused attempts.
        assert "access_token" in await exchange(h, code)


async def test_without_accept_json_the_answer_is_form_encoded_and_query_parameters_do(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        client_id, client_secret = await client_of(h)
        code = await code_for(h, "alice")
        params = {"client_id": client_id, "client_secret": client_secret, "code": code}
        response = await h.http.post("/login/oauth/access_token", params=params)
        assert response.headers["content-type"] == "application/x-www-form-urlencoded; charset=utf-8"
        answer = parse_qs(response.text)
        assert answer["access_token"][0].startswith("ghu_") and answer["token_type"] == ["bearer"]
        assert answer["expires_in"] == ["28800"] and "scope" not in answer  # an empty scope is left out by parse_qs
        assert "x-github-api-version-selected" not in response.headers  # a web endpoint, not the REST API
        xml = await h.http.post("/login/oauth/access_token", params=params, headers={"Accept": "application/xml"})
        assert xml.text.startswith("<OAuth><error>bad_verification_code</error>")


async def test_a_redirect_uri_not_registered_sends_the_person_to_the_callback_url_with_the_error(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        client_id, _ = await client_of(h)
        async with browser(h) as web:
            await sign_in(web, "alice")
            for wrong in ("http://evil.test/cb", f"{CALLBACK}/deeper", f"{CALLBACK}?x=1"):
                sent = await web.get(
                    "/login/oauth/authorize", params={"client_id": client_id, "redirect_uri": wrong, "state": "q"}
                )
                assert sent.status_code == 302 and sent.headers["location"].startswith(CALLBACK + "?")
                back = query_of(sent)
                assert back["error"] == "redirect_uri_mismatch" and back["state"] == "q" and "code" not in back
                assert (
                    back["error_description"]
                    == "The redirect_uri MUST match the registered callback URL for this application."
                )
            unknown = await web.get(
                "/login/oauth/authorize", params={"client_id": "Iv1.nope", "redirect_uri": CALLBACK}
            )
            assert unknown.status_code == 404 and "location" not in unknown.headers
            assert unknown.headers["content-type"].startswith("text/html")
        # Another registered callback URL will do; the code then holds to it.
        code = await code_for(h, "alice", redirect_uri=OTHER_CALLBACK)
        assert (await exchange(h, code, redirect_uri=CALLBACK))["error"] == "redirect_uri_mismatch"
        assert (await exchange(h, code, redirect_uri="http://evil.test/cb"))["error"] == "redirect_uri_mismatch"
        assert "access_token" in await exchange(h, code, redirect_uri=OTHER_CALLBACK)


async def test_cancel_sends_the_person_back_with_access_denied(tmp_path: Path, project: Path) -> None:
    async with world(tmp_path, project) as h:
        client_id, _ = await client_of(h)
        async with browser(h) as web:
            await sign_in(web, "alice")
            asked = await web.get("/login/oauth/authorize", params={"client_id": client_id, "state": "c"})
            assert asked.status_code == 200 and "Cancel" in asked.text
            refused = await web.post("/login/oauth/authorize", data={"client_id": client_id, "state": "c"})
            assert refused.status_code == 302
            assert query_of(refused) | {"error_uri": ""} == {
                "error": "access_denied",
                "error_description": "The user has denied your application access.",
                "error_uri": "",
                "state": "c",
            }


async def test_a_suggested_login_other_than_the_signed_in_one_asks_to_sign_in_as_them(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        client_id, _ = await client_of(h)
        async with browser(h) as web:
            await sign_in(web, "bob")
            sent = await web.get("/login/oauth/authorize", params={"client_id": client_id, "login": "alice"})
            assert sent.status_code == 302 and query_of(sent)["login"] == "alice"
            page = await web.get(sent.headers["location"])
            assert 'value="alice"' in page.text and "Signed in as <strong>bob</strong>" in page.text
            refused = await sign_in(web, "acme")  # an organisation cannot sign in
            assert refused.status_code == 422 and "Incorrect username or password." in refused.text
            await web.post("/logout")
            assert "user_session" not in web.cookies


async def test_a_token_expires_after_eight_hours_and_a_refresh_gives_a_new_pair_once(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        first = await exchange(h, await code_for(h, "alice"))
        h.clock.advance(hours=8)
        expired = await h.http.get("/user", headers={"Authorization": f"Bearer {first['access_token']}"})
        assert expired.status_code == 401 and expired.json()["message"] == "Bad credentials"
        refresh = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
        second = await exchange(h, "", **refresh)
        assert second["access_token"] != first["access_token"] and second["expires_in"] == 28800
        me = await h.http.get("/user", headers={"Authorization": f"token {second['access_token']}"})
        assert me.json()["login"] == "alice"
        assert await exchange(h, "", **refresh) == {
            "error": "bad_refresh_token",
            "error_description": "The refresh token passed is incorrect or expired.",
            "error_uri": "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/#bad-verification-code",
        }
        # Refreshing early retires the access token it came with; a refresh token lasts six months.
        third = await exchange(h, "", grant_type="refresh_token", refresh_token=second["refresh_token"])
        retired = await h.http.get("/user", headers={"Authorization": f"Bearer {second['access_token']}"})
        assert retired.status_code == 401
        h.clock.advance(seconds=15811200)
        stale = await exchange(h, "", grant_type="refresh_token", refresh_token=third["refresh_token"])
        assert stale["error"] == "bad_refresh_token"
        assert (await exchange(h, "", grant_type="password"))["error"] == "unsupported_grant_type"


async def test_a_refresh_needs_the_clients_credentials_and_a_refresh_token(tmp_path: Path, project: Path) -> None:
    async with world(tmp_path, project) as h:
        first = await exchange(h, await code_for(h, "alice"))
        refresh = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]}
        wrong = await exchange(h, "", **refresh, client_secret="not-the-secret")
        assert wrong["error"] == "incorrect_client_credentials"
        assert (await exchange(h, "", grant_type="refresh_token"))["error"] == "bad_refresh_token"
        as_code = await exchange(h, first["refresh_token"])  # a refresh token is not a code
        assert as_code["error"] == "bad_verification_code"
        access = await exchange(h, "", grant_type="refresh_token", refresh_token=first["access_token"])
        assert access["error"] == "bad_refresh_token"
        assert "access_token" in await exchange(h, "", **refresh)  # none of the refusals spent it


async def test_the_sandbox_issues_short_lived_tokens_when_told_and_says_so_in_expires_in(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        for refused in (0, 28801, "60", True):
            answer = await h.http.patch("/_sandbox/app", json={"user_token_seconds": refused})
            assert answer.status_code == 422 and "user_token_seconds" in answer.json()["message"]
        shown = await h.http.patch("/_sandbox/app", json={"user_token_seconds": 60})
        assert shown.json()["user_token_seconds"] == 60 and shown.json()["expiring_user_tokens"] is True
        first = await exchange(h, await code_for(h, "alice"))
        assert first["expires_in"] == 60 and first["refresh_token_expires_in"] == 15811200
        bearer = {"Authorization": f"Bearer {first['access_token']}"}
        h.clock.advance(seconds=59)
        assert (await h.http.get("/user", headers=bearer)).status_code == 200
        h.clock.advance(seconds=1)
        assert (await h.http.get("/user", headers=bearer)).status_code == 401
        second = await exchange(h, "", grant_type="refresh_token", refresh_token=first["refresh_token"])
        assert second["expires_in"] == 60


async def test_without_expiring_user_tokens_a_token_has_no_expiry_and_no_refresh_token(
    tmp_path: Path, project: Path
) -> None:
    async with world(tmp_path, project) as h:
        assert (await h.http.patch("/_sandbox/app", json={"expiring_user_tokens": "no"})).status_code == 422
        await h.http.patch("/_sandbox/app", json={"expiring_user_tokens": False})
        answer = await exchange(h, await code_for(h, "alice"))
        assert set(answer) == {"access_token", "scope", "token_type"} and answer["access_token"].startswith("ghu_")
        h.clock.advance(hours=9)
        me = await h.http.get("/user", headers={"Authorization": f"Bearer {answer['access_token']}"})
        assert me.status_code == 200 and me.json()["login"] == "alice"
        nothing = await exchange(h, "", grant_type="refresh_token", refresh_token=answer["access_token"])
        assert nothing["error"] == "bad_refresh_token"


@pytest.mark.parametrize("path", ["/user", "/user/installations", "/user/installations/70001/repositories"])
async def test_the_user_routes_want_a_user_token(tmp_path: Path, project: Path, path: str) -> None:
    async with world(tmp_path, project) as h:
        anonymous = await h.http.get(path)
        assert anonymous.status_code == 401 and anonymous.json()["message"] == "Requires authentication"
        assert anonymous.json()["documentation_url"].startswith("https://docs.github.com/rest/")
        bad = await h.http.get(path, headers={"Authorization": "Bearer ghu_notatoken"})
        assert bad.status_code == 401 and bad.json()["message"] == "Bad credentials"
        repo = h.sandbox.state.repository("acme", "secret")
        assert repo is not None
        installation = await h.http.get(path, headers=await h.token(repo.installation_id))
        assert installation.status_code == 403
        if path != "/user":
            assert installation.json()["message"].startswith(
                "You must authenticate with an access token authorized to a GitHub App in order to list"
            )


async def test_a_served_sandbox_takes_the_flow_over_real_http_with_the_human_client(tmp_path: Path) -> None:
    config = SandboxConfig(public_key_pem=app_key()[1], state_dir=tmp_path / "state", client_secret="s3cret")
    with SandboxServer(config) as server, HumanClient(server.url) as human:
        app = human.set_callback_urls([CALLBACK])
        assert app["callback_urls"] == [CALLBACK] and app["client_secret"] == "s3cret"
        assert human.create_user("dora")["login"] == "dora"
        async with httpx.AsyncClient(base_url=server.url) as web:
            params = {"client_id": app["client_id"], "state": "r"}
            sent = await web.get("/login/oauth/authorize", params=params)
            await sign_in(web, "dora", query_of(sent)["return_to"])
            answered = await web.post("/login/oauth/authorize", data={**params, "authorize": "1"})
            code = query_of(answered)["code"]
            fields = {"client_id": app["client_id"], "client_secret": "s3cret", "code": code}
            token = (await web.post("/login/oauth/access_token", data=fields, headers=JSON)).json()["access_token"]
            me = await web.get("/user", headers={"Authorization": f"Bearer {token}"})
            assert me.json()["login"] == "dora"
