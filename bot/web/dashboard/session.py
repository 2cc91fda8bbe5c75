"""The dashboard's session: one cookie, encrypted and authenticated, and the access cache beside it.

The cookie (`lanebot_dashboard`, Path=/dashboard, HttpOnly, SameSite=Lax, Secure when the public URL
is https, at most `SESSION_SECONDS` old) holds JSON sealed with AES-256-GCM: nobody without the key
can read it or forge one. Before sign-in it holds the OAuth `state` and where to go after; after,
the person's login and id, their user access token, a random session id and, when the App's user
tokens expire (GitHub's default: 8 hours), when the token expires and its refresh token (`SignedIn`).

A token is renewed with its refresh token when it is about to expire (`REFRESH_MARGIN_SECONDS`) and
GitHub must be asked something, or when GitHub answers 401 to it; the cookie is then sealed again
with the new pair, which starts its `SESSION_SECONDS` again (never past the refresh token's own
expiry). A refresh token is good once, and a page and its event stream may both bring the same one
at the same moment: `Renewals` lets the second have the first's new pair rather than GitHub's
refusal (within this process; two processes renewing the same session at once sign it out).

The key is derived (HKDF-SHA256, salt and info naming the dashboard's cookie) from WEBHOOK_SECRET
and GITHUB_CLIENT_SECRET, both secrets the host already keeps: no new setting to lose or leak, the
same key in every `lanebot serve` sharing the settings, sessions surviving a restart, and rotating
either secret signs everyone out. HKDF keeps the derived key unrelated to either input: the cookie
reveals nothing of the webhook or client secret, and neither can be used as the cookie key.

What the person may read (their readable repositories) lives in `AccessCache`, in this process,
keyed by the session id, checked again with GitHub after `ACCESS_TTL_SECONDS`: a list of hundreds of
repositories would not fit in a cookie, and losing it (a restart, another process) only costs
asking GitHub again with the token in the cookie.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from bot.web.dashboard.github import GitHubUser, UserTokens

__all__ = [
    "ACCESS_TTL_SECONDS",
    "COOKIE_NAME",
    "SESSION_SECONDS",
    "AccessCache",
    "CookieSealer",
    "Renewals",
    "SignedIn",
    "session_key",
]

COOKIE_NAME = "lanebot_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_SECONDS = 7 * 24 * 3600  # a week after the cookie was last sealed (signing in, a renewal)
REFRESH_MARGIN_SECONDS = 60.0  # renew a token this close to expiring, so that it does not expire mid-request
RENEWAL_GRACE_SECONDS = 60.0
LOGIN_SECONDS = 600  # from /dashboard/login to GitHub's callback
ACCESS_TTL_SECONDS = 300.0
ACCESS_CACHE_ENTRIES = 10_000
_VERSION = "v1."


def session_key(webhook_secret: str, client_secret: str) -> bytes:
    """The cookie key: HKDF-SHA256 over both secrets, for this purpose only."""
    material = webhook_secret.encode("utf-8") + b"\x00" + client_secret.encode("utf-8")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"lanebot dashboard", info=b"session cookie v1")
    return hkdf.derive(material)


@dataclass(frozen=True)
class CookieSealer:
    """Seals a session's JSON into the cookie's value and opens it again (None for anything else)."""

    key: bytes = b""

    def seal(self, data: dict[str, Any], *, now: float) -> str:
        nonce = os.urandom(12)
        plain = json.dumps({**data, "at": int(now)}, separators=(",", ":")).encode("utf-8")
        sealed = AESGCM(self.key).encrypt(nonce, plain, COOKIE_NAME.encode())
        return _VERSION + base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")

    def open(self, value: str | None, *, now: float, max_age: float = SESSION_SECONDS) -> dict[str, Any] | None:
        if not value or not value.startswith(_VERSION) or len(value) > 4096:
            return None
        text = value[len(_VERSION) :]
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            plain = AESGCM(self.key).decrypt(raw[:12], raw[12:], COOKIE_NAME.encode())
            data = json.loads(plain)
        except (binascii.Error, ValueError, InvalidTag):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("at"), int):
            return None
        if not 0 <= now - data["at"] <= max_age:
            return None
        return data


@dataclass
class _Access:
    checked_at: float
    repositories: frozenset[str]


class AccessCache:
    """Readable repositories by session id, each good for `ttl` seconds; the oldest dropped past `size`."""

    def __init__(self, ttl: float = ACCESS_TTL_SECONDS, size: int = ACCESS_CACHE_ENTRIES) -> None:
        self.ttl = ttl
        self.size = size
        self._entries: OrderedDict[str, _Access] = OrderedDict()

    def get(self, session_id: str, *, now: float) -> frozenset[str] | None:
        entry = self._entries.get(session_id)
        if entry is None or not 0 <= now - entry.checked_at < self.ttl:
            return None
        return entry.repositories

    def put(self, session_id: str, repositories: frozenset[str], *, now: float) -> None:
        self._entries[session_id] = _Access(now, repositories)
        self._entries.move_to_end(session_id)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def drop(self, session_id: str) -> None:
        self._entries.pop(session_id, None)


@dataclass(frozen=True)
class SignedIn:
    """A signed-in session as its cookie holds it; the instants are seconds since the epoch, None
    for a token that does not expire (an App with expiring user tokens turned off)."""

    login: str
    uid: int
    session_id: str
    token: str
    expires_at: float | None = None
    refresh_token: str | None = None
    refresh_expires_at: float | None = None

    @classmethod
    def start(cls, user: GitHubUser, session_id: str, tokens: UserTokens, *, now: float) -> SignedIn:
        return cls(user.login, user.id, session_id, tokens.access_token).renewed(tokens, now=now)

    def renewed(self, tokens: UserTokens, *, now: float) -> SignedIn:
        """The session with the token endpoint's new tokens (a refresh token not sent again is kept)."""
        refresh, refresh_expires_at = self.refresh_token, self.refresh_expires_at
        if tokens.refresh_token:
            refresh, lifetime = tokens.refresh_token, tokens.refresh_token_expires_in
            refresh_expires_at = now + lifetime if lifetime else None
        return replace(
            self,
            token=tokens.access_token,
            expires_at=now + tokens.expires_in if tokens.expires_in else None,
            refresh_token=refresh,
            refresh_expires_at=refresh_expires_at,
        )

    def needs_renewal(self, *, now: float) -> bool:
        return self.expires_at is not None and self.expires_at - now <= REFRESH_MARGIN_SECONDS

    def can_renew(self, *, now: float) -> bool:
        return self.refresh_token is not None and (self.refresh_expires_at is None or now < self.refresh_expires_at)

    def cookie_seconds(self, *, now: float) -> int:
        """How long the cookie may live: `SESSION_SECONDS`, cut short by the refresh token's expiry
        (or the token's, when there is nothing to renew it with)."""
        ends = self.refresh_expires_at if self.refresh_token else self.expires_at
        left = SESSION_SECONDS if ends is None else min(SESSION_SECONDS, ends - now)
        return max(0, int(left))

    def cookie(self) -> dict[str, Any]:
        data: dict[str, Any] = {"login": self.login, "uid": self.uid, "sid": self.session_id, "token": self.token}
        for key, value in (("exp", self.expires_at), ("rt", self.refresh_token), ("rexp", self.refresh_expires_at)):
            if value is not None:
                data[key] = value
        return data

    @classmethod
    def from_cookie(cls, data: dict[str, Any] | None) -> SignedIn | None:
        """The session of an opened cookie; None for one that is not (yet) signed in, or malformed."""
        if data is None:
            return None
        login, uid, sid, token = data.get("login"), data.get("uid"), data.get("sid"), data.get("token")
        if not (isinstance(login, str) and isinstance(uid, int) and isinstance(sid, str) and isinstance(token, str)):
            return None
        refresh = data.get("rt")
        return cls(
            login,
            uid,
            sid,
            token,
            _instant(data.get("exp")),
            refresh if isinstance(refresh, str) and refresh else None,
            _instant(data.get("rexp")),
        )


def _instant(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class Renewals:
    """Each refresh of this process, by the (digest of the) refresh token it spent, kept `grace`
    seconds: asked again with a spent one within that time, the same new tokens, not a refusal."""

    def __init__(self, grace: float = RENEWAL_GRACE_SECONDS, size: int = ACCESS_CACHE_ENTRIES) -> None:
        self.grace = grace
        self.size = size
        self._done: OrderedDict[str, tuple[float, UserTokens]] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def renew(
        self, refresh_token: str, ask: Callable[[str], Awaitable[UserTokens]], *, clock: Callable[[], float]
    ) -> UserTokens:
        """`ask(refresh_token)` once for concurrent and closely following callers of one refresh token."""
        key = hashlib.sha256(refresh_token.encode("utf-8")).hexdigest()
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                done = self._done.get(key)
                if done is not None and 0 <= clock() - done[0] < self.grace:
                    return done[1]
                tokens = await ask(refresh_token)
                self._done[key] = (clock(), tokens)
                self._done.move_to_end(key)
                while len(self._done) > self.size:
                    self._done.popitem(last=False)
                return tokens
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]
