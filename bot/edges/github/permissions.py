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
is resolved once (`GET /users/{username}`) and the id it first resolved to is pinned in a
`PinStore`: the database's `approver_pins` table (bot.edges.store.approvers.DatabasePins, given
to `cache_for` where the app is composed), so the pin outlives restarts; without one, memory
(`MemoryPins`), for the life of the process. So a login taken over later still stands for the
person it named when lanebot first read it, and that person is still obeyed under their new
login. A login GitHub does not know is asked again after a minute. The commenter's id comes from
the event (`sender.id`, `comment.user.id`, a review comment's `user.id`), never from their login.
Bot accounts never qualify (`GateSettings.may_approve`).

A listed login whose commenter is another account than the one pinned (the login was renamed
and registered again) is refused like anyone unlisted, and a warning in the log names the login,
the pinned id and the commenter's id. The maintainer then decides. When the new account is not
the approver, the refusal is right: keep the pin, and list the approver's new login in
`gate.approvers` (it resolves to the pinned id). When it is (the approver moved to a new account
under the same login), remove the pin, and the login is resolved afresh within a minute:
`DELETE FROM approver_pins WHERE login = '<login, lower case>';`

Roles are cached for a minute per (repository, login, user id), so twenty comments in a row cost
one request, and dropped at once when GitHub says access changed (`forget_repository`,
`forget_owner`: the `member`, `membership`, `organization`, `team` and `installation` handlers in
bot/web/handlers/access.py). The clock is injectable.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gidgethub import BadRequest
from gidgethub.abc import GitHubAPI

from bot.core.workflow import GateSettings

log = logging.getLogger(__name__)

__all__ = [
    "CACHE_SECONDS",
    "Decision",
    "MemoryPins",
    "PermissionCache",
    "PinStore",
    "authorise",
    "cache_for",
    "role_from_answer",
]

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


class PinStore(Protocol):
    """The GitHub user id each listed login was first resolved to, by login in lower case."""

    async def get(self, login: str) -> int | None:
        """The id `login` is pinned to, or None when it never was."""
        ...

    async def put(self, login: str, user_id: int) -> int:
        """Pin `login` to `user_id` unless it is pinned already; the id it is pinned to now (the
        earlier pin's when another process pinned it first)."""
        ...


class MemoryPins:
    """A `PinStore` in memory: pins last as long as the process."""

    def __init__(self) -> None:
        self._pins: dict[str, int] = {}

    async def get(self, login: str) -> int | None:
        return self._pins.get(login.lower())

    async def put(self, login: str, user_id: int) -> int:
        return self._pins.setdefault(login.lower(), user_id)


class PermissionCache:
    """Repository roles by (repository, login, id), each kept `ttl` seconds, and the ids listed logins
    stand for (pinned in `pins`); concurrent asks share one request."""

    def __init__(
        self, *, ttl: float = CACHE_SECONDS, clock: Clock = time.monotonic, pins: PinStore | None = None
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._roles: dict[RoleKey, _Entry] = {}
        self._locks: dict[RoleKey, asyncio.Lock] = {}
        self._generation = 0  # bumped by every forget: an answer asked for before it is not kept
        self._ids = _UserIds(ttl=ttl, clock=clock, pins=pins if pins is not None else MemoryPins())

    def use_pins(self, pins: PinStore) -> None:
        """Keep the pins in `pins` from now on (the ids read from the previous store are read again)."""
        self._ids = _UserIds(ttl=self._ttl, clock=self._clock, pins=pins)

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
        return frozenset((await self.pinned_ids(client, logins)).values())

    async def pinned_ids(self, client: GitHubAPI, logins: tuple[str, ...]) -> dict[str, int]:
        """The GitHub user id each of `logins` stands for, by login in lower case (a login GitHub
        does not know is left out)."""
        pinned: dict[str, int] = {}
        for login in logins:
            found = await self._ids.id_of(client, login)
            if found is not None:
                pinned[login.lower()] = found
        return pinned

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
    """login -> GitHub user id: the first id a login resolved to is pinned in `pins` (and read from
    there again after `ttl`, so a pin a maintainer removed is let go of); "no such user" for `ttl`."""

    def __init__(self, *, ttl: float, clock: Clock, pins: PinStore) -> None:
        self._ttl = ttl
        self._clock = clock
        self._pins = pins
        self._read: dict[str, tuple[float, int]] = {}  # login -> (read again after, pinned id)
        self._unknown_until: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def id_of(self, client: GitHubAPI, login: str) -> int | None:
        key = login.lower()
        async with self._locks.setdefault(key, asyncio.Lock()):
            read = self._read.get(key)
            if read is not None and self._clock() < read[0]:
                return read[1]
            if self._clock() < self._unknown_until.get(key, float("-inf")):
                return None
            pinned = await self._pins.get(key)
            if pinned is None:
                found = await _ask_user_id(client, login)
                if found is None:
                    self._unknown_until[key] = self._clock() + self._ttl
                    return None
                pinned = await self._pins.put(key, found)
            self._read[key] = (self._clock() + self._ttl, pinned)
            return pinned


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


def cache_for(github: Any, *, pins: PinStore | None = None) -> PermissionCache:
    """The cache that belongs to one GitHub App object (one per running app); a fresh one for an
    object that cannot be weakly referenced (None: a test's context without GitHub).

    `pins`, given once where the app is composed (the database's, before any command is judged),
    becomes where the cache pins listed logins to ids; the callers that judge commands pass none."""
    try:
        cache = _CACHES.get(github)
    except TypeError:
        return PermissionCache(pins=pins)
    if cache is None:
        cache = _CACHES[github] = PermissionCache(pins=pins)
    elif pins is not None:
        cache.use_pins(pins)
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
        pinned = await cache.pinned_ids(client, gate.approvers)
        listed = user_id is not None and user_id in pinned.values()
        if not listed:
            if user_id is not None and login.lower() in pinned:
                _log_pinned_elsewhere(repository, login, pinned[login.lower()], user_id)
            return Decision(False, None, _NOT_LISTED)
    role = await cache.role(client, repository, login, user_id)
    if gate.may_approve(login, role, listed=listed):
        return Decision(True, role)
    held = f"your role is {role}" if role else "GitHub reports no access to this repository for you"
    if listed:
        return Decision(False, role, f"{_LISTED_BUT} the {gate.minimum_role} role or higher, and {held}")
    return Decision(False, role, f"commanding lanebot here needs the {gate.approvers} role or higher, and {held}")


def _log_pinned_elsewhere(repository: str, login: str, pinned: int, user_id: int) -> None:
    log.warning(
        "%s: gate.approvers lists %r, pinned to GitHub user %d, but the commenter %r is GitHub user %d "
        "(the login was renamed and registered again): refused. If user %d is not the approver, list "
        "the approver's new login; if it is, remove the pin: DELETE FROM approver_pins WHERE login = '%s';",
        repository,
        login,
        pinned,
        login,
        user_id,
        user_id,
        login.lower(),
    )


_NOT_LISTED = (
    "only the approvers listed in gate.approvers of .github/lanebot.yml may command lanebot here "
    "(matched by GitHub account, not by login)"
)
_LISTED_BUT = "you are listed in gate.approvers, but commanding lanebot here also needs"
