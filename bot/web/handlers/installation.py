"""Installation events: keep the `installations` table as GitHub last described each installation.

`installation` (created, deleted, suspend, unsuspend, new_permissions_accepted) and
`installation_repositories` (added, removed) both carry the installation object; every one of
them overwrites the row with what the payload says. GitHub delivers both to every App without
subscribing to them.
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.edges.store import db
from bot.edges.store.models import Installation, utc_now
from bot.web.dispatcher import HandlerContext

router = routing.Router()


def installation_state(payload: dict[str, Any]) -> dict[str, Any]:
    """The `installations` columns an installation or installation_repositories payload implies."""
    installation = payload["installation"]
    account = installation.get("account") or {}
    return {
        "id": installation["id"],
        "account_login": account.get("login") or account.get("slug") or "",
        "account_type": account.get("type") or installation.get("target_type") or "",
        "repository_selection": installation.get("repository_selection") or "",
        "suspended": installation.get("suspended_at") is not None or payload.get("action") == "suspend",
        "deleted": payload.get("action") == "deleted",
    }


def save_installation(engine: Any, state: dict[str, Any]) -> None:
    """Insert or overwrite the installation's row."""
    with db.session(engine) as session:
        row = session.get(Installation, state["id"]) or Installation(**state)
        for column, value in state.items():
            setattr(row, column, value)
        row.updated_at = utc_now()
        session.add(row)


@router.register("installation")
@router.register("installation_repositories")
async def record_installation(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    await to_thread.run_sync(save_installation, context.engine, installation_state(event.data))
