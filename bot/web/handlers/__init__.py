"""Every event handler lanebot has, composed into one gidgethub router.

Each module under bot/web/handlers/ handles one family of events and exposes `router`; a handler
is `async def handler(event, *, context)` where `context` is a `bot.web.dispatcher.HandlerContext`.
A new module is added to the list below.
"""

from gidgethub import routing

from bot.web.handlers import (
    access,
    base_conflict,
    base_moved,
    check_run,
    check_suite,
    installation,
    issue_comment,
    issues,
    ping,
    pull_comment,
    pull_request,
    pull_request_review,
)

router = routing.Router(
    access.router,
    base_conflict.router,
    base_moved.router,
    check_run.router,
    check_suite.router,
    installation.router,
    issue_comment.router,
    issues.router,
    ping.router,
    pull_comment.router,
    pull_request.router,
    pull_request_review.router,
)
