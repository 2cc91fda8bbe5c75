"""`ping`: GitHub's hello when a webhook is created; lanebot checks the hook is its own App's.

A ping from another App's hook (or a repository hook) whose secret happens to match means the
webhook settings on GitHub and lanebot's APP_ID disagree; the delivery is failed with a message
saying so, so it shows in `lanebot deliveries list`.
"""

from __future__ import annotations

import logging
from typing import Any

from gidgethub import routing, sansio

from bot.web.dispatcher import HandlerContext

log = logging.getLogger(__name__)

router = routing.Router()


class ForeignHookError(Exception):
    """A ping came from a webhook that is not the configured App's."""


def hook_mismatch(payload: dict[str, Any], app_id: Any) -> str | None:
    """Why the pinging hook is not this App's, or None when it is."""
    hook = payload.get("hook") or {}
    hook_type = hook.get("type")
    if hook_type != "App":
        return (
            f"the ping came from a {hook_type or 'unknown'} webhook (id {payload.get('hook_id')}), "
            f"not from App {app_id}'s webhook; lanebot expects deliveries from its App only"
        )
    if str(hook.get("app_id")) != str(app_id):
        return f"the ping came from App {hook.get('app_id')}'s webhook but APP_ID is {app_id}"
    return None


@router.register("ping")
async def check_ping(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    mismatch = hook_mismatch(event.data, getattr(context.settings, "app_id", None))
    if mismatch:
        raise ForeignHookError(mismatch)
    log.info("GitHub pinged App %s's webhook: %s", context.settings.app_id, event.data.get("zen", ""))
