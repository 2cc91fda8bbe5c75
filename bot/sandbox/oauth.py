"""The App's OAuth client and GitHub's web flow, as bookkeeping: who is signed in to the sandbox's
web pages, who has authorized the App, the codes `/login/oauth/authorize` hands out and the user
access tokens `/login/oauth/access_token` trades them for.

As GitHub's docs have it ("Generating a user access token for a GitHub App", "Refreshing user
access tokens", "Authorizing OAuth apps"), for an App whose user access tokens expire (the
default for a new App):

- a code expires after 10 minutes, is good once, and only for the client it was issued to; a
  `redirect_uri` given with it must be the one it was issued for;
- a user access token (`ghu_...`) lives 8 hours, its refresh token (`ghr_...`) 6 months;
- a refresh gives a new pair, and the refresh token used and the access token it came with stop
  working;
- with expiring user tokens turned off (the App's "User-to-server token expiration" opted out), a
  token has no `expires_in` and no refresh token, and lives until revoked.

For tests across processes, `user_token_seconds` (`PATCH /_sandbox/app`) issues user access tokens
that expire sooner than GitHub's 8 hours, said so in their `expires_in`; it is the sandbox's only
departure from GitHub here.

Only the SHA-256 of a code, token or browser session is kept. Pure apart from the injected clock
and the random generators.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bot.sandbox.auth import token_digest
from bot.sandbox.state import Account

CODE_LIFETIME = timedelta(minutes=10)
USER_TOKEN_SECONDS = 28_800  # "The value will always be 28800 (8 hours)."
REFRESH_TOKEN_SECONDS = 15_811_200  # "The value will always be 15811200 (6 months)."
_ALPHABET = string.ascii_letters + string.digits
_TROUBLESHOOTING = (
    "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-oauth-app-access-token-request-errors/"
)
# The `error` answers of POST /login/oauth/access_token: error -> (error_description, error_uri).
# GitHub's words, from its troubleshooting page and the answers quoted in public bug reports; the one
# marked "sandbox" is the sandbox's own, GitHub's wording being unknown.
TOKEN_ERRORS: dict[str, tuple[str, str]] = {
    "incorrect_client_credentials": (
        "The client_id and/or client_secret passed are incorrect.",
        f"{_TROUBLESHOOTING}#incorrect-client-credentials",
    ),
    "redirect_uri_mismatch": (
        "The redirect_uri MUST match the registered callback URL for this application.",
        "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/#redirect-uri-mismatch2",
    ),
    "bad_verification_code": ("The code passed is incorrect or expired.", f"{_TROUBLESHOOTING}#bad-verification-code"),
    "bad_refresh_token": (
        "The refresh token passed is incorrect or expired.",
        f"{_TROUBLESHOOTING}#bad-verification-code",
    ),
    "unsupported_grant_type": (
        "The grant_type must be authorization_code or refresh_token (sandbox).",
        _TROUBLESHOOTING,
    ),
}
_AUTHORIZATION_ERRORS = (
    "/apps/building-integrations/setting-up-and-registering-oauth-apps/troubleshooting-authorization-request-errors/"
)
# The errors /login/oauth/authorize sends a person back with: error -> (error_description, error_uri).
AUTHORIZE_ERRORS: dict[str, tuple[str, str]] = {
    "redirect_uri_mismatch": (
        "The redirect_uri MUST match the registered callback URL for this application.",
        f"{_AUTHORIZATION_ERRORS}#redirect-uri-mismatch",
    ),
    "access_denied": ("The user has denied your application access.", f"{_AUTHORIZATION_ERRORS}#access-denied"),
}


class OAuthRefused(Exception):
    """POST /login/oauth/access_token refuses: `error` is one of TOKEN_ERRORS."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error

    def answer(self) -> dict[str, str]:
        description, uri = TOKEN_ERRORS[self.error]
        return {"error": self.error, "error_description": description, "error_uri": uri}


def _random(prefix: str, length: int) -> str:
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_user_token() -> str:
    return _random("ghu_", 36)


def new_refresh_token() -> str:
    return _random("ghr_", 76)


def new_code() -> str:
    return secrets.token_hex(10)  # GitHub's codes are 20 hexadecimal characters


@dataclass(frozen=True)
class Grant:
    """What a code stands for: a person's approval, for one client and redirect."""

    account: Account
    client_id: str
    redirect_uri: str | None
    expires_at: datetime


@dataclass(frozen=True)
class UserToken:
    """A live user access token: whose it is and until when (None: until revoked)."""

    account: Account
    expires_at: datetime | None
    refresh_digest: str | None


@dataclass(frozen=True)
class RefreshToken:
    account: Account
    expires_at: datetime
    access_digest: str


@dataclass(frozen=True)
class Issued:
    """A new user access token and its refresh token (None when user tokens do not expire), as the
    values the client is given."""

    access_token: str
    refresh_token: str | None
    expires_in: int = USER_TOKEN_SECONDS

    def answer(self) -> dict[str, str | int]:
        """The response parameters, in the order GitHub's docs show them; without expiry, only the
        token, its scope and type."""
        if self.refresh_token is None:
            return {"access_token": self.access_token, "scope": "", "token_type": "bearer"}
        return {
            "access_token": self.access_token,
            "expires_in": self.expires_in,
            "refresh_token": self.refresh_token,
            "refresh_token_expires_in": REFRESH_TOKEN_SECONDS,
            "scope": "",
            "token_type": "bearer",
        }


@dataclass
class OAuthBook:
    """Browser sessions, authorizations, codes and user tokens, by digest."""

    clock: Callable[[], datetime]
    generate_token: Callable[[], str] = new_user_token
    generate_refresh: Callable[[], str] = new_refresh_token
    generate_code: Callable[[], str] = new_code
    expiring_user_tokens: bool = True  # GitHub's default for a new App
    user_token_seconds: int = USER_TOKEN_SECONDS
    _sessions: dict[str, Account] = field(default_factory=dict)
    _authorized: set[int] = field(default_factory=set)  # ids of the people who have authorized the App
    _codes: dict[str, Grant] = field(default_factory=dict)
    _tokens: dict[str, UserToken] = field(default_factory=dict)
    _refresh: dict[str, RefreshToken] = field(default_factory=dict)

    # signing in to the sandbox's web pages

    def sign_in(self, account: Account) -> str:
        """A new browser session for the person: the value of their session cookie."""
        value = secrets.token_urlsafe(32)
        self._sessions[token_digest(value)] = account
        return value

    def signed_in(self, value: str | None) -> Account | None:
        return self._sessions.get(token_digest(value)) if value else None

    def sign_out(self, value: str | None) -> None:
        if value:
            self._sessions.pop(token_digest(value), None)

    # authorizing the App

    def approve(self, account: Account) -> None:
        """The person pressed "Authorize": later web flows for them skip the question, as on GitHub."""
        self._authorized.add(account.id)

    def has_approved(self, account: Account) -> bool:
        return account.id in self._authorized

    def issue_code(self, account: Account, client_id: str, redirect_uri: str | None) -> str:
        code = self.generate_code()
        self._codes[token_digest(code)] = Grant(account, client_id, redirect_uri, self.clock() + CODE_LIFETIME)
        return code

    # the token endpoint

    def redeem(self, code: str, client_id: str, redirect_uri: str | None) -> Issued:
        """The tokens a code is traded for; the code is then spent. OAuthRefused when it will not do."""
        grant = self._codes.get(token_digest(code)) if code else None
        if grant is None or grant.client_id != client_id or grant.expires_at <= self.clock():
            raise OAuthRefused("bad_verification_code")
        if redirect_uri and grant.redirect_uri is not None and redirect_uri != grant.redirect_uri:
            raise OAuthRefused("redirect_uri_mismatch")
        del self._codes[token_digest(code)]
        return self._issue(grant.account)

    def refresh(self, value: str) -> Issued:
        """A new pair for a live refresh token; the old refresh token and access token stop working."""
        digest = token_digest(value) if value else ""
        held = self._refresh.get(digest)
        if held is None or held.expires_at <= self.clock():
            raise OAuthRefused("bad_refresh_token")
        del self._refresh[digest]
        self._tokens.pop(held.access_digest, None)
        return self._issue(held.account)

    def _issue(self, account: Account) -> Issued:
        access = self.generate_token()
        access_digest = token_digest(access)
        if not self.expiring_user_tokens:
            self._tokens[access_digest] = UserToken(account, None, None)
            return Issued(access, None)
        refresh, now, lifetime = self.generate_refresh(), self.clock(), self.user_token_seconds
        refresh_digest = token_digest(refresh)
        self._tokens[access_digest] = UserToken(account, now + timedelta(seconds=lifetime), refresh_digest)
        self._refresh[refresh_digest] = RefreshToken(
            account, now + timedelta(seconds=REFRESH_TOKEN_SECONDS), access_digest
        )
        return Issued(access, refresh, lifetime)

    def lookup(self, value: str) -> UserToken | None:
        """The live user token of that value, or None when unknown, replaced or expired (Bad credentials)."""
        token = self._tokens.get(token_digest(value))
        if token is None or (token.expires_at is not None and token.expires_at <= self.clock()):
            return None
        return token
