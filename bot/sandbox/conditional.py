"""Conditional requests, as GitHub answers them ("Best practices for using the REST API": use
conditional requests if appropriate).

Every 200 answer to a GET carries an `ETag`; one about a single resource with an `updated_at`
also carries `Last-Modified`. A GET whose `If-None-Match` names the current ETag (or whose
`If-Modified-Since` is not older than `Last-Modified`, when it sends no `If-None-Match`) is
answered `304 Not Modified` with no body, and GitHub does not count it against the caller's
primary rate limit. The ETag is weak and covers what the answer varies by (GitHub's `Vary:
Accept, Authorization, Cookie, X-GitHub-OTP`): the same body read with another token has another
ETag, as GitHub's does, so a client that mints a new installation token reads the body again.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from starlette.requests import Request
from starlette.responses import Response

VARY = "Accept, Authorization, Cookie, X-GitHub-OTP"
CACHE_CONTROL = "private, max-age=60, s-maxage=60"
# What an ETag covers besides the body: the request headers GitHub's answers vary by.
_VARIES_BY = ("accept", "authorization", "cookie", "x-github-otp")


def entity_tag(request: Request, body: bytes) -> str:
    digest = hashlib.sha256()
    for name in _VARIES_BY:
        digest.update(request.headers.get(name, "").encode("latin-1") + b"\0")
    digest.update(body)
    return f'W/"{digest.hexdigest()}"'


def last_modified(body: bytes) -> datetime | None:
    """The `updated_at` of a single resource's JSON, if it has one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    updated = data.get("updated_at") if isinstance(data, dict) else None
    if not isinstance(updated, str):
        return None
    try:
        return datetime.fromisoformat(updated.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def tags_match(if_none_match: str, tag: str) -> bool:
    """RFC 9110's weak comparison of `If-None-Match` (a list of entity tags, or `*`) with `tag`."""
    wanted = tag.removeprefix("W/")
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == wanted:
            return True
    return False


def not_modified_since(if_modified_since: str, modified: datetime) -> bool:
    try:
        since = parsedate_to_datetime(if_modified_since)
    except (TypeError, ValueError):
        return False  # an unreadable date is ignored, as HTTP says
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return modified.replace(microsecond=0) <= since


def conditional(request: Request, response: Response) -> tuple[Response, bool]:
    """`response` with its validators, or a 304 in its place; whether it is the 304.

    Only a GET's 200 is validated (GitHub's answers to writes carry ETags too, but nothing can be
    asked of them conditionally)."""
    if request.method != "GET" or response.status_code != 200:
        return response, False
    body = bytes(response.body)
    validators = {"ETag": entity_tag(request, body), "Cache-Control": CACHE_CONTROL, "Vary": VARY}
    modified = last_modified(body)
    if modified is not None:
        validators["Last-Modified"] = format_datetime(modified, usegmt=True)
    if_none_match = request.headers.get("if-none-match")
    if_modified_since = request.headers.get("if-modified-since")
    if if_none_match is not None:  # it wins over If-Modified-Since (RFC 9110, 13.2.2)
        unchanged = tags_match(if_none_match, validators["ETag"])
    elif modified is not None and if_modified_since is not None:
        unchanged = not_modified_since(if_modified_since, modified)
    else:
        unchanged = False
    if unchanged:
        return Response(status_code=304, headers=validators), True
    response.headers.update(validators)
    return response, False
