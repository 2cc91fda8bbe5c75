"""Access changes: drop the cached roles GitHub just said may be wrong, so the next command is judged afresh.

lanebot caches each commenter's repository role for a minute (bot.edges.github.permissions). GitHub
says when access changes, and these handlers drop what it affects at once:

- `member` (a collaborator added, removed, or their role edited): that repository's roles;
- `membership` (someone added to or removed from a team), `team` (a team's repositories or
  permissions changed, or the team deleted) and `organization` (a member added, removed or invited,
  the organisation renamed or deleted): every role on the organisation's repositories;
- `installation` and `installation_repositories` (the App installed, removed, suspended, given new
  permissions, or repositories added and removed): every role on the account's repositories.

GitHub delivers `member`, `membership`, `organization` and `team` only to an App with the
organisation permission "Members" (read) that subscribed to them (app.yml); `installation` and
`installation_repositories` go to every App. "Members" is an organisation permission: for a personal
account's repositories the minute's cache is what bounds a stale role.
"""

from __future__ import annotations

import logging
from typing import Any

from gidgethub import routing, sansio

from bot.edges.github.permissions import cache_for
from bot.web.dispatcher import HandlerContext

router = routing.Router()
log = logging.getLogger(__name__)


def _login(thing: Any) -> str | None:
    login = thing.get("login") if isinstance(thing, dict) else None
    return login if isinstance(login, str) and login else None


def affected_owners(payload: dict[str, Any]) -> list[str]:
    """The accounts whose repositories' roles a membership, team, organization or installation event
    may have changed (an organisation's old name too, when it was renamed)."""
    installation = payload.get("installation") or {}
    owners = [
        _login(payload.get("organization")),
        _login(installation.get("account")),
        ((payload.get("changes") or {}).get("login") or {}).get("from"),
    ]
    return [owner for owner in dict.fromkeys(owners) if isinstance(owner, str) and owner]


@router.register("member")
async def forget_repository_roles(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    full_name = (event.data.get("repository") or {}).get("full_name")
    if isinstance(full_name, str) and full_name:
        dropped = cache_for(context.github).forget_repository(full_name)
        log.info("member %s on %s: %d cached roles dropped", event.data.get("action"), full_name, dropped)


@router.register("membership")
@router.register("team")
@router.register("organization")
@router.register("installation")
@router.register("installation_repositories")
async def forget_owner_roles(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    cache = cache_for(context.github)
    for owner in affected_owners(event.data):
        dropped = cache.forget_owner(owner)
        log.info(
            "%s %s: %d cached roles on %s's repositories dropped", event.event, event.data.get("action"), dropped, owner
        )
