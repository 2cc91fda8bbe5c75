"""The GitHub client: headers, credentials, the one retry policy, and serial mutations per installation.

GitHub is mocked at the HTTP level (respx) with bodies and headers shaped like GitHub's own;
sleeping is injected, so every wait the client would make is recorded, never slept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from datetime import UTC, datetime
from typing import Any

import httpx
import jwt
import pytest
import respx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from gidgethub import BadRequest, GitHubBroken, RateLimitExceeded

from bot.edges.github.client import (
    GitHubApp,
    RateLimitTooLong,
    RetryPolicy,
    convert_manifest,
    find_comment_by_marker,
    may_repeat,
)
from bot.edges.settings import Settings
from tests.held_sleep import HeldSleep

API = "https://api.github.com"
T0 = 1_750_000_000.0
TOKEN = "ghs_16C7e42F292c6912E7710c838347Ae178B4a"
ISSUE_URL = f"{API}/repos/octocat/hello-world/issues/7"
COMMENTS_URL = f"{ISSUE_URL}/comments"
TLS = ssl.create_default_context()  # built once: loading the CA bundle per client is slow
SECONDARY_LIMIT = {
    "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
    "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
}


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def settings(key) -> Settings:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return Settings.load(environ={"APP_ID": "4242", "PRIVATE_KEY": pem, "WEBHOOK_SECRET": "x"}, env_file=None)


class Waits(list):
    """An injected sleep that records how long the client wanted to wait, and lets others run meanwhile."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)
        await asyncio.sleep(0)


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"message": message, "documentation_url": "https://docs.github.com/rest"}
    return httpx.Response(status, json=body, headers=headers or {})


def issue(number: int = 7) -> httpx.Response:
    return httpx.Response(
        200,
        json={"number": number, "title": "Split the parser", "state": "open"},
        headers={
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "4999",
            "x-ratelimit-reset": str(int(T0) + 3600),
        },
    )


def comment(body: str, login: str = "lanebot[bot]", kind: str = "Bot", number: int = 1) -> dict[str, Any]:
    return {"id": number, "body": body, "user": {"login": login, "type": kind}, "created_at": iso(T0)}


def mint_tokens(api: str = API) -> respx.Route:
    return respx.post(url__regex=rf"{api}/app/installations/\d+/access_tokens").mock(
        return_value=httpx.Response(
            201,
            json={
                "token": TOKEN,
                "expires_at": iso(T0 + 3600),
                "permissions": {"issues": "write", "contents": "write"},
                "repository_selection": "selected",
            },
        )
    )


def run_app(settings: Settings, scenario, waits: Waits | None = None, clock=lambda: T0, policy=None):
    async def main():
        async with httpx.AsyncClient(verify=TLS) as http:
            app = GitHubApp(settings, http, sleep=waits if waits is not None else Waits(), clock=clock, policy=policy)
            return await scenario(app)

    return asyncio.run(main())


def read_issue(app: GitHubApp):
    return app.installation_client(42, "octocat/hello-world").getitem("/repos/octocat/hello-world/issues/7")


# -- headers and credentials ------------------------------------------------------------------


@respx.mock
def test_every_request_carries_the_api_version_githubs_media_type_and_a_user_agent(settings):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(return_value=issue())
    assert run_app(settings, read_issue)["number"] == 7
    headers = route.calls.last.request.headers
    assert headers["x-github-api-version"] == "2022-11-28"
    assert headers["accept"] == "application/vnd.github+json"
    assert headers["user-agent"] == "lanebot"
    assert headers["authorization"] == f"token {TOKEN}"


@respx.mock
def test_an_installation_client_uses_a_token_scoped_to_its_repository_name(settings):
    tokens = mint_tokens()
    respx.get(ISSUE_URL).mock(return_value=issue())
    run_app(settings, read_issue)
    assert json.loads(tokens.calls.last.request.content) == {"repositories": ["hello-world"]}
    assert tokens.calls.last.request.headers["authorization"].lower().startswith("bearer ")


@respx.mock
def test_the_api_base_url_comes_from_the_settings(settings):
    enterprise = "https://ghe.example.com/api/v3"
    ghes_settings = Settings(**{**settings.__dict__, "github_api_url": enterprise})
    tokens = mint_tokens(enterprise)
    route = respx.get(f"{enterprise}/repos/octocat/hello-world/issues/7").mock(return_value=issue())
    run_app(ghes_settings, read_issue)
    assert route.called and tokens.called


@respx.mock
def test_the_app_client_acts_with_the_apps_jwt(settings, key):
    route = respx.get(f"{API}/app/installations/42").mock(
        return_value=httpx.Response(200, json={"id": 42, "account": {"login": "octocat"}, "app_id": 4242})
    )
    answer = run_app(settings, lambda app: app.app_client().installation(42))
    assert answer["account"]["login"] == "octocat"
    scheme, credential = route.calls.last.request.headers["authorization"].split(" ", 1)
    claims = jwt.decode(credential, key.public_key(), algorithms=["RS256"], options={"verify_exp": False})
    assert scheme == "Bearer" and claims["iss"] == "4242" and claims["iat"] == int(T0) - 60


@respx.mock
def test_a_refused_token_is_dropped_so_the_next_request_mints_a_new_one(settings):
    tokens = mint_tokens()
    respx.get(ISSUE_URL).mock(side_effect=[error(401, "Bad credentials"), issue()])

    async def scenario(app):
        with pytest.raises(BadRequest) as caught:
            await read_issue(app)
        assert caught.value.status_code == 401
        return await read_issue(app)

    assert run_app(settings, scenario)["number"] == 7
    assert tokens.call_count == 2


@respx.mock
def test_the_token_is_never_logged_shown_in_a_repr_or_put_in_an_error(settings, caplog):
    mint_tokens()
    respx.get(ISSUE_URL).mock(side_effect=[error(502, "Server Error"), error(404, "Not Found")])
    caplog.set_level(logging.DEBUG)

    async def scenario(app):
        client = app.installation_client(42, "octocat/hello-world")
        with pytest.raises(BadRequest) as caught:
            await client.getitem("/repos/octocat/hello-world/issues/7")
        return [repr(client), repr(app), repr(app.tokens), str(caught.value), repr(caught.value)]

    shown = run_app(settings, scenario)
    assert "retry 1" in caplog.text
    assert TOKEN not in caplog.text
    assert all(TOKEN not in text for text in shown)


# -- the retry policy -------------------------------------------------------------------------


@respx.mock
def test_a_server_error_is_retried_with_exponential_backoff(settings):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(side_effect=[error(502, "Server Error"), error(503, "Unavailable"), issue()])
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert route.call_count == 3
    assert waits == [1.0, 2.0]


@respx.mock
def test_server_errors_are_retried_a_bounded_number_of_times_then_raised(settings):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(return_value=error(500, "Server Error"))
    waits = Waits()
    with pytest.raises(GitHubBroken):
        run_app(settings, read_issue, waits)
    assert route.call_count == 5
    assert waits == [1.0, 2.0, 4.0, 8.0]


@respx.mock
def test_a_connection_error_is_retried(settings):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(side_effect=[httpx.ConnectError("connection refused"), issue()])
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert (route.call_count, waits) == (2, [1.0])


@respx.mock
def test_a_read_that_timed_out_is_retried(settings):
    mint_tokens()
    respx.get(ISSUE_URL).mock(side_effect=[httpx.ReadTimeout("timed out"), issue()])
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert waits == [1.0]


@respx.mock
@pytest.mark.parametrize("status", [403, 429])
def test_a_secondary_limit_with_retry_after_waits_that_many_seconds(settings, status):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(
        side_effect=[httpx.Response(status, json=SECONDARY_LIMIT, headers={"retry-after": "30"}), issue()]
    )
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert (route.call_count, waits) == (2, [30.0])


@respx.mock
@pytest.mark.parametrize("status", [403, 429])
def test_a_primary_rate_limit_waits_until_x_ratelimit_reset(settings, status):
    mint_tokens()
    exhausted = error(
        status,
        "API rate limit exceeded for installation ID 42.",
        {
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-used": "5000",
            "x-ratelimit-reset": str(int(T0) + 120),
            "x-ratelimit-resource": "core",
        },
    )
    route = respx.get(ISSUE_URL).mock(side_effect=[exhausted, issue()])
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert route.call_count == 2
    assert waits == [121.0]  # until the reset, plus a second for clock skew


@respx.mock
def test_a_secondary_limit_without_headers_waits_at_least_a_minute_growing(settings):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(
        side_effect=[httpx.Response(403, json=SECONDARY_LIMIT), httpx.Response(403, json=SECONDARY_LIMIT), issue()]
    )
    waits = Waits()
    assert run_app(settings, read_issue, waits)["number"] == 7
    assert route.call_count == 3
    assert waits == [60.0, 120.0]


@respx.mock
def test_a_rate_limit_that_never_lifts_ends_in_gidgethubs_exception_with_the_headers(settings):
    mint_tokens()
    respx.get(ISSUE_URL).mock(
        return_value=error(
            403,
            "API rate limit exceeded",
            {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(T0) + 10)},
        )
    )
    waits = Waits()
    with pytest.raises(RateLimitExceeded):
        run_app(settings, read_issue, waits)
    assert waits == [11.0] * 4


@respx.mock
@pytest.mark.parametrize(
    "response",
    [
        error(404, "Not Found"),
        error(422, "Validation Failed"),
        error(403, "Resource not accessible by integration", {"x-ratelimit-remaining": "4999"}),
    ],
    ids=["404", "422", "403-permission"],
)
def test_other_client_errors_are_never_retried(settings, response):
    mint_tokens()
    route = respx.get(ISSUE_URL).mock(return_value=response)
    waits = Waits()
    with pytest.raises(BadRequest) as caught:
        run_app(settings, read_issue, waits)
    assert caught.value.status_code == response.status_code
    assert (route.call_count, waits) == (1, [])


def post_comment(app: GitHubApp, body: str = "hello", installation: int = 42, repository: str = "octocat/hello-world"):
    owner, name = repository.split("/")
    return app.installation_client(installation, repository).post(
        "/repos/{owner}/{repo}/issues/{issue_number}/comments",
        {"owner": owner, "repo": name, "issue_number": 7},
        data={"body": body},
    )


@respx.mock
@pytest.mark.parametrize(
    "failure",
    [error(502, "Server Error"), httpx.ReadTimeout("timed out")],
    ids=["502", "read-timeout"],
)
def test_a_post_that_may_have_landed_is_not_repeated(settings, failure):
    mint_tokens()
    route = respx.post(COMMENTS_URL).mock(side_effect=[failure, httpx.Response(201, json=comment("hello"))])
    waits = Waits()
    with pytest.raises((GitHubBroken, httpx.ReadTimeout)):
        run_app(settings, post_comment, waits)
    assert (route.call_count, waits) == (1, [])


@respx.mock
def test_a_post_that_never_reached_github_is_retried(settings):
    mint_tokens()
    route = respx.post(COMMENTS_URL).mock(
        side_effect=[httpx.ConnectError("connection refused"), httpx.Response(201, json=comment("hello"))]
    )
    waits = Waits()
    assert run_app(settings, post_comment, waits)["body"] == "hello"
    assert (route.call_count, waits) == (2, [1.0])


@respx.mock
def test_a_post_refused_for_a_secondary_limit_is_retried(settings):
    mint_tokens()
    route = respx.post(COMMENTS_URL).mock(
        side_effect=[
            httpx.Response(403, json=SECONDARY_LIMIT, headers={"retry-after": "5"}),
            httpx.Response(201, json=comment("hello")),
        ]
    )
    waits = Waits()
    assert run_app(settings, post_comment, waits)["body"] == "hello"
    assert (route.call_count, waits) == (2, [5.0])


@respx.mock
def test_idempotent_mutations_and_label_posts_are_retried_after_a_server_error(settings):
    mint_tokens()
    edit = respx.patch(f"{API}/repos/octocat/hello-world/issues/comments/1").mock(
        side_effect=[error(502, "Server Error"), httpx.Response(200, json=comment("edited"))]
    )
    labels = respx.post(f"{ISSUE_URL}/labels").mock(
        side_effect=[error(502, "Server Error"), httpx.Response(200, json=[{"name": "lanebot:running"}])]
    )
    waits = Waits()

    async def scenario(app):
        client = app.installation_client(42, "octocat/hello-world")
        await client.patch("/repos/octocat/hello-world/issues/comments/1", data={"body": "edited"})
        await client.post("/repos/octocat/hello-world/issues/7/labels", data={"labels": ["lanebot:running"]})

    run_app(settings, scenario, waits)
    assert (edit.call_count, labels.call_count, waits) == (2, 2, [1.0, 1.0])


@pytest.mark.parametrize(
    "status, headers, message, retries, expected",
    [
        (403, {"retry-after": "7", "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(T0) + 500)}, "", 0, 7.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(T0) - 30)}, "", 0, 1.0),
        (429, {}, "", 2, 240.0),
        (403, {}, "Resource not accessible by integration", 0, None),
        (401, {}, "Bad credentials", 0, None),
        (500, {}, "", 4, None),
        (503, {}, "", 10, None),
    ],
    ids=["retry-after-first", "reset-in-the-past", "429-growing", "plain-403", "401", "5xx-exhausted", "past-max"],
)
def test_the_retry_policy_reads_githubs_headers_in_githubs_order(status, headers, message, retries, expected):
    assert RetryPolicy().after_response(retries, status, headers, message, now=T0, repeatable=True) == expected


def test_backoff_is_capped():
    policy = RetryPolicy(max_retries=20, backoff=1.0, backoff_cap=60.0)
    assert policy.after_response(10, 502, {}, "", now=T0, repeatable=True) == 60.0


# -- serial mutations per installation --------------------------------------------------------


async def settle() -> None:
    """Let every other ready task run; nothing in the mocked path waits on I/O or on a timer."""
    for _ in range(100):
        await asyncio.sleep(0)


@respx.mock
def test_mutations_of_one_installation_go_out_one_at_a_time_while_reads_and_other_installations_proceed(settings):
    mint_tokens()
    respx.get(url__regex=rf"{API}/repos/octocat/[\w-]+/issues/7$").mock(return_value=issue())
    events: list[str] = []

    async def scenario(app):
        first_in_flight, release_first = asyncio.Event(), asyncio.Event()

        async def create_comment(request):
            body = json.loads(request.content)["body"]
            events.append(f"start {body}")
            if body == "first":
                first_in_flight.set()
                await release_first.wait()
            events.append(f"end {body}")
            return httpx.Response(201, json=comment(body))

        respx.post(url__regex=rf"{API}/repos/octocat/[\w-]+/issues/7/comments").mock(side_effect=create_comment)
        await read_issue(app)  # warm the token cache of both installations,
        await app.installation_client(43, "octocat/spoon-knife").getitem("/repos/octocat/spoon-knife/issues/7")

        first = asyncio.create_task(post_comment(app, "first"))
        await first_in_flight.wait()
        # a second client object of the same installation: it must wait for the first POST
        second = asyncio.create_task(post_comment(app, "second"))
        await settle()
        assert "start second" not in events
        # another installation is not blocked, and neither are reads of this one
        await post_comment(app, "other", installation=43, repository="octocat/spoon-knife")
        assert (await read_issue(app))["number"] == 7
        await settle()
        assert events == ["start first", "start other", "end other"]
        release_first.set()
        await asyncio.gather(first, second)

    run_app(settings, scenario)
    assert events == ["start first", "start other", "end other", "end first", "start second", "end second"]


@respx.mock
def test_a_mutation_waiting_out_a_rate_limit_holds_back_the_installations_other_mutations(settings):
    mint_tokens()
    events: list[str] = []
    answers = {"first": [httpx.Response(403, json=SECONDARY_LIMIT, headers={"retry-after": "30"})]}

    async def create_comment(request):
        body = json.loads(request.content)["body"]
        events.append(body)
        pending = answers.get(body)
        return pending.pop(0) if pending else httpx.Response(201, json=comment(body))

    respx.post(COMMENTS_URL).mock(side_effect=create_comment)

    async def scenario(app):
        await asyncio.gather(post_comment(app, "first"), post_comment(app, "second"))

    waits = Waits()
    run_app(settings, scenario, waits)
    assert events == ["first", "first", "second"]
    assert waits == [30.0]


# -- rate limits: per installation, capped, visible --------------------------------------------


@respx.mock
def test_a_rate_limit_longer_than_the_cap_fails_at_once_saying_whose_and_until_when(settings, caplog):
    mint_tokens()
    respx.get(ISSUE_URL).mock(return_value=httpx.Response(429, json=SECONDARY_LIMIT, headers={"retry-after": "900"}))
    waits = Waits()
    with pytest.raises(RateLimitTooLong) as too_long:
        run_app(settings, read_issue, waits, policy=RetryPolicy(max_rate_limit_wait=300))
    assert waits == []
    until = datetime.fromtimestamp(T0 + 900, UTC).strftime("%Y-%m-%d %H:%M:%S")
    message = str(too_long.value)
    assert "installation 42" in message and f"until {until} UTC" in message and "LANEBOT_MAX_RATE_LIMIT_WAIT" in message
    assert message in caplog.text


@respx.mock
def test_repeated_limits_are_waited_out_only_up_to_the_cap_in_all(settings):
    mint_tokens()
    respx.get(ISSUE_URL).mock(return_value=httpx.Response(403, json=SECONDARY_LIMIT))
    waits = Waits()
    with pytest.raises(RateLimitTooLong):
        run_app(settings, read_issue, waits, policy=RetryPolicy(max_rate_limit_wait=300))
    assert waits == [60.0, 120.0]  # the next, 240 s, would make 420 s in all


def test_the_cap_comes_from_the_settings(settings):
    assert settings.max_rate_limit_wait == 300.0

    async def scenario(app):
        return app.installation_client(42, None)._policy.max_rate_limit_wait

    assert run_app(settings.__class__(**{**settings.__dict__, "max_rate_limit_wait": 5.0}), scenario) == 5.0


@respx.mock
def test_a_rate_limit_wait_is_logged_with_the_installation_and_the_reset_time(settings, caplog):
    caplog.set_level(logging.INFO)
    mint_tokens()
    respx.get(ISSUE_URL).mock(
        side_effect=[httpx.Response(429, json=SECONDARY_LIMIT, headers={"retry-after": "60"}), issue()]
    )
    run_app(settings, read_issue)
    reset = datetime.fromtimestamp(T0 + 60, UTC).strftime("%H:%M:%S")
    assert (
        f"GitHub rate-limited installation 42 (GET /repos/octocat/hello-world/issues/7: HTTP 429); waiting 60 s, until {reset} UTC"
        in caplog.text
    )


@respx.mock
def test_while_one_installation_waits_out_a_limit_its_other_requests_wait_with_it_and_others_go_on(settings):
    mint_tokens()
    limited = respx.get(ISSUE_URL).mock(
        side_effect=[httpx.Response(429, json=SECONDARY_LIMIT, headers={"retry-after": "60"}), issue(), issue()]
    )
    other = respx.get(f"{API}/repos/octocat/spoon-knife/issues/7").mock(return_value=issue())
    sleep = HeldSleep()

    async def scenario(app):
        first = asyncio.create_task(read_issue(app))
        await sleep.started.wait()
        assert app.rate_limited_until(42) == datetime.fromtimestamp(T0 + 60, UTC)
        second = asyncio.create_task(read_issue(app))
        spoon = app.installation_client(43, "octocat/spoon-knife")
        assert (await spoon.getitem("/repos/octocat/spoon-knife/issues/7"))["number"] == 7  # not held back
        await settle()
        assert (limited.call_count, second.done()) == (1, False)  # waits with the first, asks GitHub nothing
        sleep.release.set()
        await asyncio.gather(first, second)
        assert app.rate_limited_until(42) is None

    async def main():
        async with httpx.AsyncClient(verify=TLS) as http:
            await scenario(GitHubApp(settings, http, sleep=sleep, clock=lambda: T0))

    asyncio.run(main())
    assert (limited.call_count, other.call_count, sleep.waits) == (3, 1, [60.0])


# -- the App's endpoints ----------------------------------------------------------------------


def delivery(number: int, delivered_at: float, status_code: int = 200) -> dict[str, Any]:
    """Shaped like an item of GET /app/hook/deliveries."""
    return {
        "id": number,
        "guid": f"0b989ba4-242f-11e5-81e1-{number:012d}",
        "delivered_at": iso(delivered_at),
        "redelivery": False,
        "duration": 0.27,
        "status": "OK" if status_code < 400 else "Invalid HTTP Response: 503",
        "status_code": status_code,
        "event": "issues",
        "action": "opened",
        "installation_id": 42,
        "repository_id": 1296269,
        "throttled_at": None,
    }


@respx.mock
def test_hook_deliveries_follow_the_cursor_pages_and_stop_at_since(settings):
    pages = {
        None: ([delivery(5, T0 - 60), delivery(4, T0 - 120, 503)], "v1_4"),
        "v1_4": ([delivery(3, T0 - 3000), delivery(2, T0 - 9000)], "v1_2"),
        "v1_2": ([delivery(1, T0 - 20000)], None),
    }

    def page(request):
        items, cursor = pages[request.url.params.get("cursor")]
        headers = {}
        if cursor:
            headers["link"] = f'<{API}/app/hook/deliveries?per_page=100&cursor={cursor}>; rel="next"'
        return httpx.Response(200, json=items, headers=headers)

    route = respx.get(f"{API}/app/hook/deliveries").mock(side_effect=page)
    since = datetime.fromtimestamp(T0 - 3600, UTC)

    async def scenario(app):
        return [item["id"] async for item in app.app_client().hook_deliveries(since)]

    assert run_app(settings, scenario) == [5, 4, 3]
    assert route.call_count == 2  # the third page is older than `since` and never asked for
    assert route.calls[0].request.url.params["per_page"] == "100"
    assert route.calls[1].request.url.params["cursor"] == "v1_4"


@respx.mock
def test_a_redelivery_is_requested_and_retried_after_a_server_error(settings):
    route = respx.post(f"{API}/app/hook/deliveries/12345678/attempts").mock(
        side_effect=[error(502, "Server Error"), httpx.Response(202, json={})]
    )
    waits = Waits()
    run_app(settings, lambda app: app.app_client().redeliver(12345678), waits)
    assert (route.call_count, waits) == (2, [1.0])
    assert route.calls.last.request.headers["authorization"].startswith("Bearer ")


@respx.mock
def test_the_manifest_code_is_exchanged_without_credentials_and_only_once():
    route = respx.post(f"{API}/app-manifests/a180b1a3d263c81bc6441d7b990bae27d4c10679/conversions").mock(
        side_effect=[
            httpx.Response(
                201,
                json={
                    "id": 1,
                    "slug": "lanebot-octocat",
                    "pem": "-----BEGIN RSA PRIVATE KEY-----",
                    "webhook_secret": "e340154128314309424b7c8e90325147d99fdafa",
                    "html_url": "https://github.com/apps/lanebot-octocat",
                },
            ),
        ]
    )

    async def scenario():
        async with httpx.AsyncClient(verify=TLS) as http:
            return await convert_manifest(http, "a180b1a3d263c81bc6441d7b990bae27d4c10679")

    answer = asyncio.run(scenario())
    assert answer["slug"] == "lanebot-octocat"
    assert "authorization" not in route.calls.last.request.headers


# -- finding what lanebot already wrote -------------------------------------------------------


MARKER = "<!-- lanebot:gate run=17 -->"


@respx.mock
def test_find_comment_by_marker_finds_lanebots_comment_on_any_page_and_ignores_humans_quoting_it(settings):
    def page(request):
        if request.url.params.get("page") == "2":
            return httpx.Response(200, json=[comment(f"{MARKER}\nThe plan", number=3), comment(MARKER, number=4)])
        return httpx.Response(
            200,
            json=[comment(f"I copied {MARKER}", login="mallory", kind="User", number=1), comment("other", number=2)],
            headers={
                "link": f'<{COMMENTS_URL}?per_page=100&page=2>; rel="next", <{COMMENTS_URL}?per_page=100&page=2>; rel="last"'
            },
        )

    respx.get(COMMENTS_URL).mock(side_effect=page)

    async def scenario(app):
        client = app.installation_client(42, "octocat/hello-world")
        return (
            await find_comment_by_marker(client, "octocat/hello-world", 7, MARKER),
            await find_comment_by_marker(client, "octocat/hello-world", 7, "<!-- lanebot:progress -->"),
            await find_comment_by_marker(client, "octocat/hello-world", 7, MARKER, author="mallory"),
        )

    mint_tokens()
    found, absent, by_author = run_app(settings, scenario)
    assert found["id"] == 3
    assert absent is None
    assert by_author["id"] == 1


@pytest.mark.parametrize(
    ("method", "url", "repeatable"),
    [
        ("POST", "https://api.github.com/repos/octo/widgets/labels", True),  # a repeat is 422 already_exists
        ("POST", "https://api.github.com/repos/octo/widgets/issues/5/labels", True),  # labels are a set
        ("POST", "https://api.github.com/repos/octo/widgets/issues/5/comments", False),  # a second comment
        ("POST", "https://api.github.com/repos/octo/widgets/pulls", False),
        ("POST", "https://api.github.com/repos/octo/widgets/check-runs", False),
        ("PATCH", "https://api.github.com/repos/octo/widgets/issues/comments/9", True),
    ],
)
def test_only_requests_whose_repetition_is_harmless_may_be_sent_again(method: str, url: str, repeatable: bool) -> None:
    assert may_repeat(method, url) is repeatable
