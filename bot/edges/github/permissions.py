"""Who may command lanebot on a repository: GitHub's answer about the commenter, briefly cached.

GitHub is asked with `GET /repos/{owner}/{repo}/collaborators/{username}/permission`. Its answer
is read as DESIGN.md says: `role_name` first (read, triage, write, maintain, admin), then
`user.permissions` (admin, maintain, push, triage, pull) when the role is a custom one. The bare
`permission` field is NOT read: it folds maintain into write and triage into read. A 404 means
the user has no access at all. `author_association` is never used (it misreports private
organisation members).

The repository decides what is enough with `gate.approvers` in `.github/lanebot.yml`: a minimum
role, or a list of logins (then GitHub is not asked). Bot accounts never qualify
(`GateSettings.may_approve`). Answers are cached for a minute per (repository, login), so twenty
comments in a row cost one request; the clock is injectable.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.core.workflow import GateSettings

__all__ = ["CACHE_SECONDS", "Decision", "PermissionCache", "authorise", "cache_for", "role_from_answer"]

CACHE_SECONDS = 60.0
ROLES = ("read", "triage", "write", "maintain", "admin")
# `user.permissions` flags, strongest first, and the role each one means.
_PERMISSION_FLAGS = (
    ("admin", "admin"),
    ("maintain", "maintain"),
    ("push", "write"),
    ("triage", "triage"),
    ("pull", "read"),
)

Clock = Callable[[], float]


def role_from_answer(answer: Mapping[str, Any]) -> str | None:
    """The commenter's role from GitHub's collaborator-permission answer; None for no access. Pure."""
    role = answer.get("role_name")
    if isinstance(role, str) and role.lower() in ROLES:
        return role.lower()
    flags = (answer.get("user") or {}).get("permissions") or {}
    for flag, flag_role in _PERMISSION_FLAGS:
        if flags.get(flag) is True:
            return flag_role
    return None


class PermissionCache:
    """Repository roles by (repository, login), each kept `ttl` seconds; concurrent asks share one request."""

    def __init__(self, *, ttl: float = CACHE_SECONDS, clock: Clock = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._roles: dict[tuple[str, str], _Entry] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def role(self, client: GitHubAPI, repository: str, login: str) -> str | None:
        """`login`'s role on `repository` (read … admin), or None when they have no access."""
        key = (repository.lower(), login.lower())
        cached = self._fresh(key)
        if cached is not None:
            return cached.role
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._fresh(key)
            if cached is not None:
                return cached.role
            role = await _ask_github(client, repository, login)
            self._roles[key] = _Entry(expires_at=self._clock() + self._ttl, role=role)
            return role

    def _fresh(self, key: tuple[str, str]) -> _Entry | None:
        entry = self._roles.get(key)
        return entry if entry is not None and self._clock() < entry.expires_at else None


@dataclass(frozen=True)
class _Entry:
    expires_at: float
    role: str | None


async def _ask_github(client: GitHubAPI, repository: str, login: str) -> str | None:
    owner, _, name = repository.partition("/")
    try:
        answer = await client.getitem(
            "/repos/{owner}/{repo}/collaborators/{username}/permission",
            {"owner": owner, "repo": name, "username": login},
        )
    except BadRequest as error:
        if error.status_code == 404:
            return None
        raise
    return role_from_answer(answer)


_CACHES: weakref.WeakKeyDictionary[Any, PermissionCache] = weakref.WeakKeyDictionary()


def cache_for(github: Any) -> PermissionCache:
    """The cache that belongs to one GitHub App object (one per running app)."""
    cache = _CACHES.get(github)
    if cache is None:
        cache = _CACHES[github] = PermissionCache()
    return cache


@dataclass(frozen=True)
class Decision:
    """Whether a login may command lanebot here, and if not, a sentence saying why."""

    allowed: bool
    role: str | None
    reason: str | None = None


async def authorise(
    client: GitHubAPI,
    repository: str,
    login: str,
    gate: GateSettings,
    cache: PermissionCache,
) -> Decision:
    """May `login` command lanebot on `repository`, under the repository's `gate.approvers`?"""
    if login.lower().endswith("[bot]"):
        return Decision(False, None, "lanebot takes no commands from bot accounts")
    if isinstance(gate.approvers, tuple):
        if gate.may_approve(login, None):
            return Decision(True, None)
        return Decision(
            False, None, "only the approvers listed in gate.approvers of .github/lanebot.yml may command lanebot here"
        )
    role = await cache.role(client, repository, login)
    if gate.may_approve(login, role):
        return Decision(True, role)
    held = f"your role is {role}" if role else "GitHub reports no access to this repository for you"
    return Decision(False, role, f"commanding lanebot here needs the {gate.approvers} role or higher, and {held}")
