"""Who is asking, and may they: the App's JWT, installation and user tokens, repository access, rate limits.

- The App's JWT (RS256) must verify against the App's public key, name the App in `iss` (its ID,
  or its client ID), have an `exp` in the future and no more than ten minutes after `iat`. Each
  failure gets GitHub's own 401 message.
- Installation tokens are minted for an installation, optionally narrowed to some of its
  repositories and permissions, and live one hour. Only their SHA-256 is kept.
- User access tokens (the web flow's, bot.sandbox.oauth) make the caller a person through the App:
  they read what that person can (a private repository only where they have a role).
- Repository access follows GitHub: a private repository the caller cannot see is 404 (its
  existence is not revealed); a visible repository the caller may not change is 403 "Resource not
  accessible by integration"; no credentials where some are needed is 401.

Pure apart from the injected clock and the random token generator.
"""

from __future__ import annotations

import hashlib
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

import jwt

from bot.sandbox.errors import (
    BAD_CREDENTIALS,
    JWT_UNDECODABLE,
    NOT_ACCESSIBLE,
    REQUIRES_AUTHENTICATION,
    GitHubError,
    not_found,
)
from bot.sandbox.state import Account, AppRecord, Installation, Repository, role_in

TOKEN_LIFETIME = timedelta(hours=1)
JWT_MAX_LIFETIME_SECONDS = 600
JWT_CLOCK_DRIFT_SECONDS = 60  # GitHub tells Apps to backdate iat by 60 s; allow the same drift ahead
EXPIRED_JWT = "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires"
JWT_TOO_LONG = "'Expiration time' claim ('exp') is too far in the future"
JWT_BAD_IAT = "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
JWT_NO_ISSUER = "Missing 'issuer' claim ('iss') in assertion"
_LEVELS = {"read": 1, "write": 2, "admin": 3}
_TOKEN_ALPHABET = string.ascii_letters + string.digits


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def verify_app_jwt(token: str, app: AppRecord, now: datetime) -> None:
    """Accept the App's JWT or raise GitHub's 401 for what is wrong with it."""
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise GitHubError(401, JWT_UNDECODABLE) from None
    if header.get("alg") != "RS256":
        raise GitHubError(401, JWT_UNDECODABLE)
    if "iss" not in claims:
        raise GitHubError(401, JWT_NO_ISSUER)
    if str(claims["iss"]) not in (str(app.id), app.client_id):
        raise GitHubError(401, JWT_UNDECODABLE)  # GitHub's answer to a JWT of another App
    try:
        jwt.decode(
            token,
            app.public_key_pem,
            algorithms=["RS256"],
            options={"verify_exp": False, "verify_iat": False, "verify_nbf": False, "verify_aud": False},
        )
    except jwt.PyJWTError:
        raise GitHubError(401, JWT_UNDECODABLE) from None
    exp, iat, moment = claims.get("exp"), claims.get("iat"), now.timestamp()
    if not isinstance(exp, int) or exp <= moment:
        raise GitHubError(401, EXPIRED_JWT)
    if not isinstance(iat, int) or iat > moment + JWT_CLOCK_DRIFT_SECONDS:
        raise GitHubError(401, JWT_BAD_IAT)
    if exp - iat > JWT_MAX_LIFETIME_SECONDS or exp > moment + JWT_MAX_LIFETIME_SECONDS + JWT_CLOCK_DRIFT_SECONDS:
        raise GitHubError(401, JWT_TOO_LONG)


@dataclass(frozen=True)
class InstallationToken:
    installation_id: int
    expires_at: datetime
    permissions: dict[str, str]
    repository_ids: frozenset[int] | None  # None: every repository of the installation


@dataclass(frozen=True)
class Principal:
    """The caller of one request: no one, the App (JWT), an installation (its token), or a person
    through the App (a user access token from the web flow; `user` is who)."""

    kind: Literal["anonymous", "app", "installation", "user"]
    token: InstallationToken | None = None
    address: str = ""
    user: Account | None = None

    @property
    def rate_key(self) -> str:
        if self.kind == "installation" and self.token is not None:
            return f"installation:{self.token.installation_id}"
        if self.kind == "user" and self.user is not None:
            return f"user:{self.user.id}"
        return self.kind if self.kind == "app" else f"address:{self.address}"


ANONYMOUS = Principal("anonymous")


def new_token_value() -> str:
    return "ghs_" + "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(36))


@dataclass
class TokenBook:
    """Minted installation tokens, by digest."""

    clock: Callable[[], datetime]
    generate: Callable[[], str] = new_token_value
    _tokens: dict[str, InstallationToken] = field(default_factory=dict)

    def mint(
        self, installation: Installation, permissions: dict[str, str], repository_ids: frozenset[int] | None
    ) -> tuple[str, InstallationToken]:
        value = self.generate()
        token = InstallationToken(installation.id, self.clock() + TOKEN_LIFETIME, dict(permissions), repository_ids)
        self._tokens[token_digest(value)] = token
        return value, token

    def lookup(self, value: str) -> InstallationToken | None:
        """The live token of that value, or None when unknown or expired (GitHub: Bad credentials)."""
        token = self._tokens.get(token_digest(value))
        if token is None or token.expires_at <= self.clock():
            return None
        return token


def narrow_permissions(granted: dict[str, str], requested: dict[str, Any] | None) -> dict[str, str] | None:
    """The permissions a token asks for, when they are within the installation's; else None."""
    if not requested:
        return dict(granted)
    narrowed: dict[str, str] = {}
    for name, level in requested.items():
        if not isinstance(level, str) or level not in _LEVELS:
            return None
        have = granted.get(name)
        if have is None or _LEVELS[have] < _LEVELS[level]:
            return None
        narrowed[name] = level
    return narrowed


def has_permission(permissions: dict[str, str], name: str, level: str) -> bool:
    if name == "metadata" and level == "read":
        return True  # every installation can read metadata
    have = permissions.get(name)
    return have is not None and _LEVELS[have] >= _LEVELS[level]


def token_covers(principal: Principal, repository: Repository) -> bool:
    token = principal.token
    if principal.kind != "installation" or token is None or token.installation_id != repository.installation_id:
        return False
    return token.repository_ids is None or repository.id in token.repository_ids


def authorize(
    principal: Principal, repository: Repository, permission: str, level: str, documentation_url: str
) -> None:
    """Raise what GitHub answers when this caller may not use `permission` at `level` here.

    A user access token reaches what both the person and the App can: a private repository only
    where the person has a role. The sandbox's user tokens only read; a write with one is refused
    as GitHub refuses what a token may not do."""
    if principal.kind == "user" and principal.user is not None:
        if repository.private and role_in(repository, principal.user.login) is None:
            raise not_found(documentation_url)
        if level != "read":
            raise GitHubError(403, NOT_ACCESSIBLE, documentation_url=documentation_url)
        return
    covered = token_covers(principal, repository)
    if not covered:
        if repository.private:
            raise not_found(documentation_url)
        if level == "read":
            return  # public repositories are readable by anyone
        if principal.kind == "anonymous":
            raise GitHubError(401, REQUIRES_AUTHENTICATION, documentation_url=documentation_url)
        raise GitHubError(403, NOT_ACCESSIBLE, documentation_url=documentation_url)
    assert principal.token is not None
    if not has_permission(principal.token.permissions, permission, level):
        raise GitHubError(403, NOT_ACCESSIBLE, documentation_url=documentation_url)


def parse_authorization(header: str | None) -> tuple[str, str] | None:
    """('token'|'bearer', credential) from an Authorization header, or None."""
    if not header:
        return None
    scheme, _, credential = header.strip().partition(" ")
    scheme = scheme.lower()
    if scheme not in ("token", "bearer") or not credential.strip():
        raise GitHubError(401, BAD_CREDENTIALS)
    return scheme, credential.strip()


def looks_like_jwt(credential: str) -> bool:
    return credential.count(".") == 2 and not credential.startswith("ghs_")


@dataclass
class RateWindow:
    limit: int
    reset: int
    used: int = 0


@dataclass(frozen=True)
class RateSnapshot:
    limit: int
    remaining: int
    reset: int
    used: int
    resource: str = "core"

    def headers(self) -> dict[str, str]:
        return {
            "x-ratelimit-limit": str(self.limit),
            "x-ratelimit-remaining": str(self.remaining),
            "x-ratelimit-reset": str(self.reset),
            "x-ratelimit-used": str(self.used),
            "x-ratelimit-resource": self.resource,
        }


@dataclass
class RateLimiter:
    """GitHub's primary rate limit: a budget per caller per hour (installation, App, or address)."""

    clock: Callable[[], datetime]
    installation_limit: int = 5000
    anonymous_limit: int = 60
    _windows: dict[str, RateWindow] = field(default_factory=dict)

    def _window(self, principal: Principal) -> RateWindow:
        now = int(self.clock().timestamp())
        key = principal.rate_key
        window = self._windows.get(key)
        if window is None or window.reset <= now:
            limit = self.anonymous_limit if principal.kind == "anonymous" else self.installation_limit
            window = RateWindow(limit=limit, reset=now + 3600)
            self._windows[key] = window
        return window

    def peek(self, principal: Principal) -> RateSnapshot:
        window = self._window(principal)
        return RateSnapshot(window.limit, max(window.limit - window.used, 0), window.reset, window.used)

    def consume(self, principal: Principal) -> RateSnapshot:
        """Count one request, or raise GitHub's 403 when the budget is spent."""
        window = self._window(principal)
        if window.used >= window.limit:
            snapshot = RateSnapshot(window.limit, 0, window.reset, window.used)
            who = (
                f"installation ID {principal.token.installation_id}"
                if principal.token
                else principal.address or principal.kind
            )
            raise GitHubError(
                403,
                f"API rate limit exceeded for {who}.",
                documentation_url="https://docs.github.com/rest/overview/rate-limits-for-the-rest-api",
                headers=snapshot.headers(),
            )
        window.used += 1
        return RateSnapshot(window.limit, window.limit - window.used, window.reset, window.used)

    def refund(self, principal: Principal) -> RateSnapshot:
        """Give back one counted request: GitHub does not count a conditional request answered 304."""
        window = self._window(principal)
        window.used = max(window.used - 1, 0)
        return self.peek(principal)
