"""The dashboard's session: one cookie, encrypted and authenticated, and the access cache beside it.

The cookie (`lanebot_dashboard`, Path=/dashboard, HttpOnly, SameSite=Lax, Secure when the public URL
is https, at most `SESSION_SECONDS` old) holds JSON sealed with AES-256-GCM: nobody without the key
can read it or forge one. Before sign-in it holds the OAuth `state` and where to go after; after,
the person's login and id, their user access token, and a random session id.

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

import base64
import binascii
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "ACCESS_TTL_SECONDS",
    "COOKIE_NAME",
    "SESSION_SECONDS",
    "AccessCache",
    "CookieSealer",
    "session_key",
]

COOKIE_NAME = "lanebot_dashboard"
COOKIE_PATH = "/dashboard"
SESSION_SECONDS = 8 * 3600  # a GitHub user access token's own lifetime
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
