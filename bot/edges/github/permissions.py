"""Who may command lanebot on a repository: GitHub's answer about the commenter, briefly cached.

GitHub is asked with `GET /repos/{owner}/{repo}/collaborators/{username}/permission`. Its answer
is read as DESIGN.md says: `role_name` first (read, triage, write, maintain, admin), then
`user.permissions` (admin, maintain, push, triage, pull) when the role is a custom one. The bare
`permission` field is NOT read: it folds maintain into write and triage into read. A 404 means
the user has no access at all. `author_association` is never used (it misreports private
organisation members).

The repository decides what is enough with `gate.approvers` in `.github/lanebot.yml`: a minimum
role, or a list of logins. A list narrows, never widens: GitHub is still asked, a listed person
needs write (`LISTED_APPROVER_ROLE`), and the list is matched by GitHub user id, never by login. A
login can be renamed and then registered by someone else; an id never changes. Each listed login
is resolved once (`GET /users/{username}`) and the id it first resolved to is kept for the life of
the process, so a login taken over later still stands for the person it named when lanebot first
read it; a login GitHub does not know is asked again after a minute. The commenter's id comes from
the event (`sender.id`, `comment.user.id`), never from their login. Bot accounts never qualify
(`GateSettings.may_approve`).

Roles are cached for a minute per (repository, login, user id), so twenty comments in a row cost
one request, and dropped at once when GitHub says access changed (`forget_repository`,
`forget_owner`: the `member`, `membership`, `organization`, `team` and `installation` handlers in
bot/web/handlers/access.py). The clock is injectable.
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

RoleKey = tuple[str, str, int | None]  # (repository, login, user id), lower case

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
    """Repository roles by (repository, login, id), each kept `ttl` seconds, and the ids listed logins
    stand for; concurrent asks share one request."""

    def __init__(self, *, ttl: float = CACHE_SECONDS, clock: Clock = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._roles: dict[RoleKey, _Entry] = {}
        self._locks: dict[RoleKey, asyncio.Lock] = {}
        self._generation = 0  # bumped by every forget: an answer asked for before it is not kept
        self._ids = _UserIds(ttl=ttl, clock=clock)

    async def role(self, client: GitHubAPI, repository: str, login: str, user_id: int | None = None) -> str | None:
        """`login`'s role on `repository` (read … admin), or None when they have no access."""
        key = (repository.lower(), login.lower(), user_id)
        cached = self._fresh(key)
        if cached is not None:
            return cached.role
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._fresh(key)
            if cached is not None:
                return cached.role
            generation = self._generation
            role = await _ask_github(client, repository, login)
            if generation == self._generation:
                self._roles[key] = _Entry(expires_at=self._clock() + self._ttl, role=role)
            return role

    async def listed_ids(self, client: GitHubAPI, logins: tuple[str, ...]) -> frozenset[int]:
        """The GitHub user ids `logins` stand for (a login GitHub does not know stands for nobody)."""
        ids = [await self._ids.id_of(client, login) for login in logins]
        return frozenset(found for found in ids if found is not None)

    def forget_repository(self, repository: str) -> int:
        """Drop every cached role on `repository` ("owner/name"); how many were dropped."""
        return self._forget(lambda key: key[0] == repository.lower())

    def forget_owner(self, owner: str) -> int:
        """Drop every cached role on the repositories of `owner` (an organisation or a user)."""
        prefix = owner.lower() + "/"
        return self._forget(lambda key: key[0].startswith(prefix))

    def _forget(self, matches: Callable[[RoleKey], bool]) -> int:
        self._generation += 1
        dropped = [key for key in self._roles if matches(key)]
        for key in dropped:
            del self._roles[key]
        return len(dropped)

    def _fresh(self, key: RoleKey) -> _Entry | None:
        entry = self._roles.get(key)
        return entry if entry is not None and self._clock() < entry.expires_at else None


class _UserIds:
    """login -> GitHub user id: the first id a login resolved to is kept; "no such user" for `ttl`."""

    def __init__(self, *, ttl: float, clock: Clock) -> None:
        self._ttl = ttl
        self._clock = clock
        self._pinned: dict[str, int] = {}
        self._unknown_until: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def id_of(self, client: GitHubAPI, login: str) -> int | None:
        key = login.lower()
        async with self._locks.setdefault(key, asyncio.Lock()):
            if key in self._pinned:
                return self._pinned[key]
            if self._clock() < self._unknown_until.get(key, float("-inf")):
                return None
            found = await _ask_user_id(client, login)
            if found is None:
                self._unknown_until[key] = self._clock() + self._ttl
            else:
                self._pinned[key] = found
            return found


@dataclass(frozen=True)
class _Entry:
    expires_at: float
    role: str | None


async def _ask_user_id(client: GitHubAPI, login: str) -> int | None:
    try:
        answer = await client.getitem("/users/{username}", {"username": login})
    except BadRequest as error:
        if error.status_code == 404:
            return None
        raise
    user_id = answer.get("id") if isinstance(answer, dict) else None
    return user_id if isinstance(user_id, int) and not isinstance(user_id, bool) else None


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
    """The cache that belongs to one GitHub App object (one per running app); a fresh one for an
    object that cannot be weakly referenced (None: a test's context without GitHub)."""
    try:
        cache = _CACHES.get(github)
    except TypeError:
        return PermissionCache()
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
    *,
    user_id: int | None = None,
) -> Decision:
    """May `login` (GitHub user `user_id`, from the event) command lanebot on `repository`, under the
    repository's `gate.approvers`? A list of approvers needs `user_id`: without it nobody matches."""
    if login.lower().endswith("[bot]"):
        return Decision(False, None, "lanebot takes no commands from bot accounts")
    listed = False
    if isinstance(gate.approvers, tuple):
        listed = user_id is not None and user_id in await cache.listed_ids(client, gate.approvers)
        if not listed:
            return Decision(False, None, _NOT_LISTED)
    role = await cache.role(client, repository, login, user_id)
    if gate.may_approve(login, role, listed=listed):
        return Decision(True, role)
    held = f"your role is {role}" if role else "GitHub reports no access to this repository for you"
    if listed:
        return Decision(False, role, f"{_LISTED_BUT} the {gate.minimum_role} role or higher, and {held}")
    return Decision(False, role, f"commanding lanebot here needs the {gate.approvers} role or higher, and {held}")


_NOT_LISTED = (
    "only the approvers listed in gate.approvers of .github/lanebot.yml may command lanebot here "
    "(matched by GitHub account, not by login)"
)
_LISTED_BUT = "you are listed in gate.approvers, but commanding lanebot here also needs"
