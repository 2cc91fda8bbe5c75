"""Sign in with GitHub: the App's OAuth client in GitHub's web application flow, and what the
signed-in person may read. The dashboard's only seam to GitHub, a small Protocol (`GitHubUsers`) so
that a test can put a fake in its place; `HttpGitHubUsers` speaks GitHub's documented API:

1. The browser goes to `GET <web>/login/oauth/authorize?client_id=&state=[&redirect_uri=]`.
2. GitHub sends it back with `?code=&state=`; `POST <web>/login/oauth/access_token` (form fields
   client_id, client_secret, code[, redirect_uri], `Accept: application/json`) trades the code for a
   user access token (`access_token`; an error comes as 200 with `error` and `error_description`).
   When the App's user tokens expire (GitHub's default) the answer also has `expires_in` (8 hours),
   `refresh_token` and `refresh_token_expires_in` (6 months); the same endpoint with
   grant_type=refresh_token and refresh_token gives a new pair, and the refresh token used stops
   working ("Refreshing user access tokens").
3. `GET <api>/user` names the person; `GET <api>/user/installations` lists the App's installations
   the person can reach, and `GET <api>/user/installations/{id}/repositories` the repositories of
   each that the person may read (GitHub lists only those the person has explicit read, write or
   admin on, each with its `permissions`). Both pages by 100, up to `MAX_PAGES` pages each.

A user access token only ever reaches GitHub: it is never logged, and never put in an error message.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

__all__ = [
    "GitHubUser",
    "GitHubUsers",
    "HttpGitHubUsers",
    "RefreshRefused",
    "SignInFailed",
    "TokenRejected",
    "UserTokens",
]

PER_PAGE = 100
MAX_PAGES = 10
API_VERSION = "2022-11-28"


class SignInFailed(Exception):
    """GitHub did not sign the person in (a refused or expired code, GitHub unreachable); the message
    says what, for the person, with nothing secret in it."""


class TokenRejected(SignInFailed):
    """GitHub answered 401 to the person's token: it expired or was revoked; they sign in again."""


class RefreshRefused(SignInFailed):
    """GitHub refused the refresh token (`bad_refresh_token`: expired, spent or revoked); they sign in again."""


@dataclass(frozen=True)
class UserTokens:
    """What GitHub's token endpoint gives: the user access token and, when the App's user tokens
    expire, its lifetime and the refresh token with its own (in seconds from the answer)."""

    access_token: str = field(repr=False)
    expires_in: int | None = None
    refresh_token: str | None = field(default=None, repr=False)
    refresh_token_expires_in: int | None = None


@dataclass(frozen=True)
class GitHubUser:
    login: str
    id: int


class GitHubUsers(Protocol):
    """What the dashboard asks of GitHub about the person signing in."""

    def authorize_url(self, *, state: str, redirect_uri: str | None) -> str:
        """Where the browser goes to sign in (GitHub's `/login/oauth/authorize`)."""
        ...

    async def exchange_code(self, code: str, *, redirect_uri: str | None) -> UserTokens:
        """The user access token for the callback's `code`; SignInFailed when GitHub refuses."""
        ...

    async def refresh(self, refresh_token: str) -> UserTokens:
        """A new pair for a refresh token; RefreshRefused when GitHub refuses it, SignInFailed when
        GitHub cannot be asked."""
        ...

    async def user(self, token: str) -> GitHubUser:
        """The person the token is for (`GET /user`)."""
        ...

    async def readable_repositories(self, token: str) -> frozenset[str]:
        """`owner/name` (lower case) of every repository of the App's installations the person may read."""
        ...


def _default_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=15.0)


@dataclass
class HttpGitHubUsers:
    """`GitHubUsers` over HTTP: `web_url` is GitHub's web address (https://github.com, a GHES host,
    the sandbox), `api_url` its REST API's."""

    web_url: str
    api_url: str
    client_id: str
    client_secret: str = field(repr=False)
    http_client: Callable[[], httpx.AsyncClient] = _default_client

    def authorize_url(self, *, state: str, redirect_uri: str | None) -> str:
        query = {"client_id": self.client_id, "state": state, "allow_signup": "false"}
        if redirect_uri:
            query["redirect_uri"] = redirect_uri
        return f"{self.web_url.rstrip('/')}/login/oauth/authorize?{urllib.parse.urlencode(query)}"

    async def exchange_code(self, code: str, *, redirect_uri: str | None) -> UserTokens:
        form = {"code": code}
        if redirect_uri:
            form["redirect_uri"] = redirect_uri
        body = await self._token_endpoint(form, "finish signing in")
        if "error" in body:
            raise SignInFailed(f"GitHub refused the sign-in: {_described(body)}")
        return _user_tokens(body)

    async def refresh(self, refresh_token: str) -> UserTokens:
        body = await self._token_endpoint({"grant_type": "refresh_token", "refresh_token": refresh_token}, "renew it")
        if "error" in body:
            raise RefreshRefused(f"GitHub refused to renew the sign-in: {_described(body)}")
        return _user_tokens(body)

    async def _token_endpoint(self, form: dict[str, str], why: str) -> dict[str, Any]:
        """POST <web>/login/oauth/access_token with the client's credentials: its JSON answer (errors
        come as 200 with `error`)."""
        fields = {"client_id": self.client_id, "client_secret": self.client_secret, **form}
        url = f"{self.web_url.rstrip('/')}/login/oauth/access_token"
        try:
            async with self.http_client() as http:
                response = await http.post(url, data=fields, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise SignInFailed(f"GitHub could not be reached to {why} ({type(error).__name__})") from None
        body = _json_object(response)
        if response.status_code != 200 or body is None:
            raise SignInFailed(f"GitHub answered {response.status_code} when asked to {why}")
        return body

    async def user(self, token: str) -> GitHubUser:
        async with self.http_client() as http:
            body = await self._get(http, token, "/user")
        login, user_id = body.get("login"), body.get("id")
        if not isinstance(login, str) or not isinstance(user_id, int):
            raise SignInFailed("GitHub's answer to GET /user has no login or id")
        return GitHubUser(login, user_id)

    async def readable_repositories(self, token: str) -> frozenset[str]:
        found: set[str] = set()
        async with self.http_client() as http:
            installations = await self._pages(http, token, "/user/installations", "installations")
            for installation in installations:
                installation_id = installation.get("id")
                if not isinstance(installation_id, int) or isinstance(installation_id, bool):
                    continue
                path = f"/user/installations/{installation_id}/repositories"
                for repository in await self._pages(http, token, path, "repositories"):
                    name = repository.get("full_name")
                    permissions = repository.get("permissions")
                    readable = not isinstance(permissions, dict) or any(
                        permissions.get(level) is True for level in ("pull", "triage", "push", "maintain", "admin")
                    )
                    if isinstance(name, str) and readable:
                        found.add(name.lower())
        return frozenset(found)

    async def _pages(self, http: httpx.AsyncClient, token: str, path: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            body = await self._get(http, token, path, params={"per_page": PER_PAGE, "page": page})
            listed = body.get(key)
            if not isinstance(listed, list):
                raise SignInFailed(f"GitHub's answer to GET {path} has no {key} list")
            items += [item for item in listed if isinstance(item, dict)]
            total = body.get("total_count")
            if len(listed) < PER_PAGE or (isinstance(total, int) and len(items) >= total):
                break
        return items

    async def _get(
        self, http: httpx.AsyncClient, token: str, path: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
        }
        try:
            response = await http.get(f"{self.api_url.rstrip('/')}{path}", params=params, headers=headers)
        except httpx.HTTPError as error:
            raise SignInFailed(f"GitHub could not be reached ({type(error).__name__})") from None
        if response.status_code == 401:
            raise TokenRejected("GitHub no longer accepts this sign-in (it expired or was revoked)")
        body = _json_object(response)
        if response.status_code != 200 or body is None:
            raise SignInFailed(f"GitHub answered {response.status_code} to GET {path.split('?')[0]}")
        return body


def _described(body: dict[str, Any]) -> str:
    return str(body.get("error_description") or body.get("error"))[:200]


def _seconds(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _user_tokens(body: dict[str, Any]) -> UserTokens:
    """The tokens of a token endpoint answer; SignInFailed without an access token."""
    access, refresh = body.get("access_token"), body.get("refresh_token")
    if not isinstance(access, str) or not access:
        raise SignInFailed("GitHub's answer has no access token")
    return UserTokens(
        access,
        _seconds(body.get("expires_in")),
        refresh if isinstance(refresh, str) and refresh else None,
        _seconds(body.get("refresh_token_expires_in")),
    )


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
