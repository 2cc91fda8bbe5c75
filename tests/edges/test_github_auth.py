"""App authentication: the App's JWT and cached, repository-scoped installation tokens."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import UTC, datetime

import httpx
import jwt
import pytest
import respx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from gidgethub import BadRequest
from gidgethub.httpx import GitHubAPI

from bot.edges.github.auth import InstallationTokenError, InstallationTokens, app_jwt

API = "https://api.github.com"
T0 = 1_750_000_000.0
TOKEN = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_answer(token: str, expires_at: float, repositories: list[str] | None = None) -> httpx.Response:
    """Shaped like GitHub's 201 answer to POST /app/installations/{id}/access_tokens."""
    body = {
        "token": token,
        "expires_at": iso(expires_at),
        "permissions": {"issues": "write", "contents": "write", "metadata": "read"},
        "repository_selection": "selected" if repositories else "all",
    }
    if repositories:
        body["repositories"] = [{"id": 1296269, "name": name, "full_name": f"octocat/{name}"} for name in repositories]
    return httpx.Response(201, json=body)


def run(coroutine):
    return asyncio.run(coroutine)


async def with_tokens(pem: str, clock: FakeClock, action):
    async with httpx.AsyncClient() as http:
        tokens = InstallationTokens(GitHubAPI(http, "lanebot-test", base_url=API), "4242", pem, clock=clock)
        return await action(tokens)


def test_app_jwt_claims_follow_githubs_rules_and_verify_with_the_public_key(key, pem):
    now = time.time()
    token = app_jwt(4242, pem, now=now)
    claims = jwt.decode(token, key.public_key(), algorithms=["RS256"])
    assert claims["iss"] == "4242"
    assert claims["iat"] == int(now) - 60
    assert claims["exp"] == int(now) + 540
    assert claims["exp"] - now <= 600
    assert jwt.get_unverified_header(token)["alg"] == "RS256"


def test_app_jwt_accepts_a_loaded_key_object(key):
    token = app_jwt("4242", key, now=time.time())
    assert jwt.decode(token, key.public_key(), algorithms=["RS256"])["iss"] == "4242"


def test_app_jwt_does_not_verify_with_another_key(pem):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(app_jwt(1, pem, now=time.time()), other.public_key(), algorithms=["RS256"])


@respx.mock
def test_a_token_is_minted_with_the_jwt_and_scoped_by_repository_name(key, pem):
    route = respx.post(f"{API}/app/installations/42/access_tokens").mock(
        return_value=token_answer(TOKEN, T0 + 3600, ["hello-world"])
    )
    token = run(with_tokens(pem, FakeClock(), lambda tokens: tokens.token(42, "octocat/hello-world")))
    assert token == TOKEN
    request = route.calls.last.request
    assert json.loads(request.content) == {"repositories": ["hello-world"]}
    scheme, credential = request.headers["authorization"].split(" ", 1)
    assert scheme.lower() == "bearer"
    claims = jwt.decode(credential, key.public_key(), algorithms=["RS256"], options={"verify_exp": False})
    assert claims == {"iat": int(T0) - 60, "exp": int(T0) + 540, "iss": "4242"}


@respx.mock
def test_a_token_for_the_whole_installation_is_asked_for_without_a_body(pem):
    route = respx.post(f"{API}/app/installations/42/access_tokens").mock(return_value=token_answer(TOKEN, T0 + 3600))
    assert run(with_tokens(pem, FakeClock(), lambda tokens: tokens.token(42, None))) == TOKEN
    assert route.calls.last.request.content == b""


@respx.mock
def test_a_token_is_reused_until_five_minutes_before_it_expires(pem):
    route = respx.post(f"{API}/app/installations/42/access_tokens").mock(
        side_effect=[token_answer("ghs_first", T0 + 3600), token_answer("ghs_second", T0 + 7200)]
    )
    clock = FakeClock()

    async def scenario(tokens: InstallationTokens):
        seen = [await tokens.token(42, "octocat/hello-world")]
        clock.now = T0 + 3600 - 301  # more than five minutes left: reuse
        seen.append(await tokens.token(42, "hello-world"))
        clock.now = T0 + 3600 - 300  # five minutes left: mint again
        seen.append(await tokens.token(42, "octocat/hello-world"))
        return seen

    assert run(with_tokens(pem, clock, scenario)) == ["ghs_first", "ghs_first", "ghs_second"]
    assert route.call_count == 2


@respx.mock
def test_each_repository_and_each_installation_gets_its_own_token(pem):
    minted = iter(f"ghs_{n}" for n in range(10))
    respx.post(url__regex=rf"{API}/app/installations/\d+/access_tokens").mock(
        side_effect=lambda request: token_answer(next(minted), T0 + 3600)
    )

    async def scenario(tokens: InstallationTokens):
        return [
            await tokens.token(42, "octocat/one"),
            await tokens.token(42, "octocat/two"),
            await tokens.token(43, "octocat/one"),
            await tokens.token(42, "octocat/one"),
        ]

    assert run(with_tokens(pem, FakeClock(), scenario)) == ["ghs_0", "ghs_1", "ghs_2", "ghs_0"]


@respx.mock
def test_concurrent_callers_for_the_same_repository_share_one_mint(pem):
    async def slow_answer(request):
        await asyncio.sleep(0)  # let every other caller arrive while this mint is in flight
        return token_answer(TOKEN, T0 + 3600)

    route = respx.post(f"{API}/app/installations/42/access_tokens").mock(side_effect=slow_answer)

    async def scenario(tokens: InstallationTokens):
        return await asyncio.gather(*(tokens.token(42, "octocat/hello-world") for _ in range(8)))

    assert run(with_tokens(pem, FakeClock(), scenario)) == [TOKEN] * 8
    assert route.call_count == 1


@respx.mock
def test_a_forgotten_token_is_minted_again(pem):
    route = respx.post(f"{API}/app/installations/42/access_tokens").mock(
        side_effect=[token_answer("ghs_revoked", T0 + 3600), token_answer("ghs_new", T0 + 3600)]
    )

    async def scenario(tokens: InstallationTokens):
        first = await tokens.token(42, "octocat/hello-world")
        tokens.forget(42, "octocat/hello-world")
        return first, await tokens.token(42, "octocat/hello-world")

    assert run(with_tokens(pem, FakeClock(), scenario)) == ("ghs_revoked", "ghs_new")
    assert route.call_count == 2


@respx.mock
def test_the_token_never_reaches_the_logs_or_the_repr(pem, caplog):
    respx.post(f"{API}/app/installations/42/access_tokens").mock(return_value=token_answer(TOKEN, T0 + 3600))
    caplog.set_level(logging.DEBUG)

    async def scenario(tokens: InstallationTokens):
        await tokens.token(42, "octocat/hello-world")
        return repr(tokens)

    shown = run(with_tokens(pem, FakeClock(), scenario))
    assert "installation 42" in caplog.text  # the mint is logged ...
    assert TOKEN not in caplog.text  # ... without the token
    assert TOKEN not in shown


@respx.mock
def test_an_answer_without_a_token_is_a_clear_error_that_does_not_echo_the_answer(pem):
    respx.post(f"{API}/app/installations/42/access_tokens").mock(
        return_value=httpx.Response(201, json={"token": "ghs_halfanswer"})
    )
    with pytest.raises(InstallationTokenError) as caught:
        run(with_tokens(pem, FakeClock(), lambda tokens: tokens.token(42, "octocat/hello-world")))
    assert "installation 42" in str(caught.value)
    assert "ghs_halfanswer" not in str(caught.value)


@respx.mock
def test_githubs_refusal_to_mint_propagates(pem):
    respx.post(f"{API}/app/installations/42/access_tokens").mock(
        return_value=httpx.Response(
            404,
            json={
                "message": "Not Found",
                "documentation_url": "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app",
            },
        )
    )
    with pytest.raises(BadRequest) as caught:
        run(with_tokens(pem, FakeClock(), lambda tokens: tokens.token(42, "octocat/hello-world")))
    assert caught.value.status_code == 404
