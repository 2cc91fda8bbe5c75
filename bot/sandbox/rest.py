"""What every REST route shares: its documentation page, the caller, the repository, JSON in and
out, pagination with GitHub's Link header, and conditional GETs (bot.sandbox.conditional: ETag,
Last-Modified, 304 without counting against the rate limit).

A route is declared as a `RestRoute(method, path, handler, docs)`; `docs` is the docs.github.com
page of that route, and errors from the route point there as GitHub's do.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bot.sandbox.auth import Principal, authorize, looks_like_jwt, parse_authorization, verify_app_jwt
from bot.sandbox.conditional import conditional
from bot.sandbox.core import Sandbox
from bot.sandbox.errors import (
    BAD_CREDENTIALS,
    DOCS,
    JWT_UNDECODABLE,
    REQUIRES_AUTHENTICATION,
    GitHubError,
    invalid_request,
    missing_field,
    not_found,
    too_long,
    unparsable_json,
)
from bot.sandbox.state import Repository

JSON_MEDIA_TYPE = "application/json; charset=utf-8"
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100
T = TypeVar("T")
Handler = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class RestRoute:
    method: str
    path: str
    handler: Handler
    docs: str


def starlette_routes(rest_routes: Sequence[RestRoute]) -> list[Route]:
    def bind(rest_route: RestRoute) -> Handler:
        async def endpoint(request: Request) -> Response:
            request.scope["sandbox.docs"] = rest_route.docs
            response, not_modified = conditional(request, await rest_route.handler(request))
            if not_modified:
                _uncount(request)
            return response

        return endpoint

    return [Route(r.path, bind(r), methods=[r.method], include_in_schema=False) for r in rest_routes]


def _uncount(request: Request) -> None:
    """A 304 is not counted against the caller's rate limit (when the caller was counted at all)."""
    principal: Principal | None = request.scope.get("sandbox.counted")
    if principal is not None and principal.kind != "anonymous":
        request.scope["sandbox.rate"] = sandbox_of(request).limiter.refund(principal)


def docs_url(request: Request) -> str:
    docs: str = request.scope.get("sandbox.docs", DOCS)
    return docs


def sandbox_of(request: Request) -> Sandbox:
    sandbox: Sandbox = request.app.state.sandbox
    return sandbox


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(data, ensure_ascii=False), status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers
    )


def empty_response(status: int = 204) -> Response:
    return Response(status_code=status)


async def read_json(request: Request, *, allow_list: bool = False) -> Any:
    """The request's JSON body ({} when empty); 400 'Problems parsing JSON' when it is not JSON."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise unparsable_json(docs_url(request)) from None
    if isinstance(data, dict) or (allow_list and isinstance(data, list)):
        return data
    raise unparsable_json(docs_url(request))


def caller(request: Request, *, count: bool = True) -> Principal:
    """Who is asking (anonymous, the App by JWT, an installation by its token, or a person by a
    user access token); counts the request against that caller's rate limit unless `count` is False."""
    sandbox = sandbox_of(request)
    parsed = parse_authorization(request.headers.get("authorization"))
    address = request.client.host if request.client else ""
    if parsed is None:
        principal = Principal("anonymous", address=address)
    elif looks_like_jwt(parsed[1]):
        verify_app_jwt(parsed[1], sandbox.app, sandbox.clock())
        principal = Principal("app")
    else:
        token = sandbox.tokens.lookup(parsed[1])
        user_token = sandbox.oauth.lookup(parsed[1]) if token is None else None
        if token is not None:
            principal = Principal("installation", token)
        elif user_token is not None:
            principal = Principal("user", user=user_token.account)
        else:
            raise GitHubError(401, BAD_CREDENTIALS)
    limiter = sandbox.limiter
    request.scope["sandbox.rate"] = limiter.consume(principal) if count else limiter.peek(principal)
    if count:
        request.scope["sandbox.counted"] = principal
    return principal


def require_app(request: Request) -> Sandbox:
    """For /app routes: only the App's JWT will do."""
    parsed = parse_authorization(request.headers.get("authorization"))
    if parsed is None:
        raise GitHubError(401, REQUIRES_AUTHENTICATION, documentation_url=docs_url(request))
    if not looks_like_jwt(parsed[1]):
        raise GitHubError(401, JWT_UNDECODABLE)
    caller(request)
    return sandbox_of(request)


def repository(request: Request, permission: str, level: str) -> tuple[Sandbox, Principal, Repository]:
    """The repository named in the path, once the caller may use `permission` at `level` on it."""
    sandbox = sandbox_of(request)
    principal = caller(request)
    owner, name = request.path_params["owner"], request.path_params["repo"]
    found = sandbox.state.repository(owner, name)
    if found is None:
        raise not_found(docs_url(request))
    authorize(principal, found, permission, level, docs_url(request))
    return sandbox, principal, found


def paginate(request: Request, items: Sequence[T]) -> tuple[list[T], dict[str, str]]:
    """One page of `items` (per_page, page) and GitHub's Link header to the others."""
    per_page = _query_int(request, "per_page", DEFAULT_PER_PAGE, 1, MAX_PER_PAGE)
    page = _query_int(request, "page", 1, 1, 10**9)
    last = max(1, -(-len(items) // per_page))
    chosen = list(items[(page - 1) * per_page : page * per_page])
    relations = []
    if page < last:
        relations += [("next", page + 1), ("last", last)]
    if page > 1:
        relations = [("prev", page - 1), *relations, ("first", 1)] if page <= last else [("prev", last), ("first", 1)]
    links = [f'<{_page_url(request, number)}>; rel="{rel}"' for rel, number in relations]
    return chosen, ({"Link": ", ".join(links)} if links else {})


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or not raw.strip().isdigit():
        return default
    return min(max(int(raw), low), high)


def _page_url(request: Request, page: int) -> str:
    params = [(key, value) for key, value in request.query_params.multi_items() if key != "page"]
    params.append(("page", str(page)))
    base = str(request.url.replace(query=""))
    return f"{base}?{urlencode(params)}"


def text_field(
    request: Request,
    body: dict[str, Any],
    name: str,
    *,
    required: bool,
    where: str = "properties",
    limit: int | None = None,
) -> str | None:
    """The string `body[name]` (None when absent and not `required`), refused as GitHub refuses it:
    missing, not a string, or (with `limit`) longer than `limit` characters."""
    value = body.get(name)
    if value is None:
        if required:
            raise missing_field(docs_url(request), name)
        return None
    if not isinstance(value, str):
        raise invalid_request(docs_url(request), f"For '{where}/{name}', {value!r} is not a string.")
    if limit is not None and len(value) > limit:
        raise too_long(docs_url(request), limit, len(value))
    return value


def string_field(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return value if isinstance(value, str) else None


def owned_by(table: Mapping[int, T], raw: object, repository: Repository) -> T | None:
    """The row of `table` whose id is the path parameter `raw`, if it belongs to `repository`."""
    text = str(raw)
    found = table.get(int(text)) if text.isdigit() else None
    return found if found is not None and getattr(found, "repository_id", None) == repository.id else None


def owned_or_404(request: Request, table: Mapping[int, T], parameter: str, repository: Repository) -> T:
    """`owned_by` for a REST route: GitHub's 404 when the repository has no such row."""
    found = owned_by(table, request.path_params[parameter], repository)
    if found is None:
        raise not_found(docs_url(request))
    return found
