"""GitHub App authentication: the App's JWT and cached, repository-scoped installation tokens.

The JWT (RS256, signed with the App's private key) identifies the App itself and is only good
for `/app/...` endpoints. Everything done inside a repository uses an installation access
token, minted with the JWT, scoped to the repository at hand (least privilege), and cached until
shortly before it expires (tokens live one hour). Tokens are secrets: they never reach a log
line, a repr or an exception message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import jwt

log = logging.getLogger(__name__)

JWT_BACKDATE_SECONDS = 60  # GitHub's advice: allow for clock drift between us and GitHub
JWT_LIFETIME_SECONDS = 540  # GitHub refuses an `exp` more than 10 minutes ahead
REFRESH_MARGIN_SECONDS = 300  # re-mint this long before `expires_at`


def app_jwt(app_id: str | int, private_key: Any, *, now: float | None = None) -> str:
    """The App's JSON Web Token: iat 60 s in the past, exp 9 minutes ahead, iss the App ID."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iat": issued - JWT_BACKDATE_SECONDS,
        "exp": issued + JWT_LIFETIME_SECONDS,
        "iss": str(app_id),
    }
    return jwt.encode(claims, private_key, algorithm="RS256")


class _Poster(Protocol):
    async def post(self, url: str, url_vars: dict[str, Any] = ..., *, data: Any, jwt: str | None = ...) -> Any: ...


@dataclass(frozen=True)
class _Token:
    value: str = field(repr=False)
    expires_at: float


TokenKey = tuple[int, frozenset[str]]


class InstallationTokenError(Exception):
    """GitHub's answer to a token request was not a token."""


def repository_name(repository: str) -> str:
    """GitHub scopes tokens by bare repository name: 'owner/name' -> 'name'."""
    return repository.rsplit("/", 1)[-1]


class InstallationTokens:
    """Mints installation tokens and reuses each until `refresh_margin` seconds before it expires.

    `api` is a gidgethub `GitHubAPI` (anything with its `post`); the App's JWT is passed with
    each mint. Tokens are cached per (installation, repositories); concurrent callers asking
    for the same key share one mint.
    """

    def __init__(
        self,
        api: _Poster,
        app_id: str | int,
        private_key: Any,
        *,
        clock: Callable[[], float] = time.time,
        refresh_margin: float = REFRESH_MARGIN_SECONDS,
    ) -> None:
        self._api = api
        self._app_id = app_id
        self._private_key = private_key
        self._clock = clock
        self._refresh_margin = refresh_margin
        self._tokens: dict[TokenKey, _Token] = {}
        self._locks: dict[TokenKey, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"InstallationTokens(app_id={self._app_id!r}, cached={len(self._tokens)})"

    async def token(self, installation_id: int, repository: str | None) -> str:
        """A token for the installation, scoped to `repository` ('owner/name' or 'name'; None: all)."""
        key = _key(installation_id, repository)
        cached = self._fresh(key)
        if cached is not None:
            return cached
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._fresh(key)
            if cached is not None:
                return cached
            token = await self._mint(*key)
            self._tokens[key] = token
            return token.value

    def forget(self, installation_id: int, repository: str | None) -> None:
        """Drop a cached token GitHub refused (revoked, or the installation changed)."""
        self._tokens.pop(_key(installation_id, repository), None)

    def _fresh(self, key: TokenKey) -> str | None:
        token = self._tokens.get(key)
        if token is None or self._clock() >= token.expires_at - self._refresh_margin:
            return None
        return token.value

    async def _mint(self, installation_id: int, repositories: frozenset[str]) -> _Token:
        body: Any = {"repositories": sorted(repositories)} if repositories else b""
        answer = await self._api.post(
            "/app/installations/{installation_id}/access_tokens",
            {"installation_id": installation_id},
            data=body,
            jwt=app_jwt(self._app_id, self._private_key, now=self._clock()),
        )
        token = _parse_token(answer, installation_id)
        log.info(
            "minted an installation token for installation %s (repositories: %s), expires at %s",
            installation_id,
            ", ".join(sorted(repositories)) or "all",
            answer.get("expires_at"),
        )
        return token


def _key(installation_id: int, repository: str | None) -> TokenKey:
    names = frozenset() if repository is None else frozenset({repository_name(repository)})
    return int(installation_id), names


def _parse_token(answer: Any, installation_id: int) -> _Token:
    try:
        value = answer["token"]
        expires = datetime.fromisoformat(answer["expires_at"].replace("Z", "+00:00"))
    except (TypeError, KeyError, AttributeError, ValueError):
        # The answer is not echoed: it may hold a token after all.
        raise InstallationTokenError(
            f"GitHub's answer to the token request for installation {installation_id} "
            "has no usable 'token' and 'expires_at'"
        ) from None
    if not isinstance(value, str) or not value:
        raise InstallationTokenError(f"GitHub gave installation {installation_id} an empty token")
    return _Token(value=value, expires_at=expires.timestamp())
