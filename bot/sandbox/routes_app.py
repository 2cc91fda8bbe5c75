"""REST routes of the App itself (JWT): the App, its installations and their tokens, its webhook
configuration and deliveries; and /rate_limit."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from bot.sandbox.auth import narrow_permissions
from bot.sandbox.errors import GitHubError, invalid_request, not_found
from bot.sandbox.rest import (
    RestRoute,
    caller,
    docs_url,
    json_response,
    read_json,
    require_app,
    sandbox_of,
)
from bot.sandbox.shapes import timestamp
from bot.sandbox.state import Installation

APPS = "https://docs.github.com/rest/apps/apps"
HOOKS = "https://docs.github.com/rest/apps/webhooks"
NOT_IN_INSTALLATION = (
    "There is at least one repository that does not exist or is not accessible to the parent installation."
)
NOT_GRANTED = "The permissions requested are not granted to this installation."


def _installation(request: Request) -> Installation:
    sandbox = require_app(request)
    raw = request.path_params["installation_id"]
    installation = sandbox.state.installations.get(int(raw)) if str(raw).isdigit() else None
    if installation is None:
        raise not_found(docs_url(request))
    return installation


async def get_app(request: Request) -> Response:
    sandbox = require_app(request)
    return json_response(sandbox.renderer.app(sandbox.app, rest=True))


async def list_installations(request: Request) -> Response:
    sandbox = require_app(request)
    return json_response([sandbox.renderer.installation(i) for i in sandbox.state.installations.values()])


async def get_installation(request: Request) -> Response:
    installation = _installation(request)
    return json_response(sandbox_of(request).renderer.installation(installation))


async def repository_installation(request: Request) -> Response:
    sandbox = require_app(request)
    found = sandbox.state.repository(request.path_params["owner"], request.path_params["repo"])
    if found is None:
        raise not_found(docs_url(request))
    return json_response(sandbox.renderer.installation(sandbox.state.installations[found.installation_id]))


async def create_access_token(request: Request) -> Response:
    installation = _installation(request)
    sandbox = sandbox_of(request)
    body = await read_json(request)
    repository_ids = _requested_repositories(request, installation, body)
    permissions = narrow_permissions(installation.permissions, body.get("permissions"))
    if permissions is None:
        raise GitHubError(422, NOT_GRANTED, documentation_url=docs_url(request))
    value, token = sandbox.tokens.mint(installation, permissions, repository_ids)
    answer: dict[str, Any] = {
        "token": value,
        "expires_at": timestamp(token.expires_at),
        "permissions": token.permissions,
        "repository_selection": "selected",
    }
    if repository_ids is not None:
        repositories = [sandbox.state.repository_by_id(rid) for rid in sorted(repository_ids)]
        answer["repositories"] = [sandbox.renderer.repository(r, rest=True) for r in repositories if r is not None]
    return json_response(answer, status=201)


def _requested_repositories(
    request: Request, installation: Installation, body: dict[str, Any]
) -> frozenset[int] | None:
    names, ids = body.get("repositories"), body.get("repository_ids")
    if names is None and ids is None:
        return None
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise invalid_request(
            docs_url(request), f"For 'properties/repositories', {names!r} is not an array of strings."
        )
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, int) for i in ids)):
        raise invalid_request(
            docs_url(request), f"For 'properties/repository_ids', {ids!r} is not an array of integers."
        )
    state = sandbox_of(request).state
    chosen: set[int] = set()
    for name in names or []:
        found = state.repository(installation.account.login, name.rsplit("/", 1)[-1])
        if found is None or found.id not in installation.repository_ids:
            raise GitHubError(422, NOT_IN_INSTALLATION, documentation_url=docs_url(request))
        chosen.add(found.id)
    for repository_id in ids or []:
        if repository_id not in installation.repository_ids:
            raise GitHubError(422, NOT_IN_INSTALLATION, documentation_url=docs_url(request))
        chosen.add(repository_id)
    return frozenset(chosen)


async def installation_repositories(request: Request) -> Response:
    principal = caller(request)
    sandbox = sandbox_of(request)
    if principal.kind != "installation" or principal.token is None:
        raise GitHubError(
            403,
            "You must authenticate with an installation access token in order to list "
            "repositories for an installation.",
            documentation_url=docs_url(request),
        )
    installation = sandbox.state.installations[principal.token.installation_id]
    ids = principal.token.repository_ids or frozenset(installation.repository_ids)
    repositories = [sandbox.state.repository_by_id(rid) for rid in sorted(ids)]
    shown = [sandbox.renderer.repository(r, rest=True) for r in repositories if r is not None]
    return json_response({"total_count": len(shown), "repository_selection": "selected", "repositories": shown})


async def get_hook_config(request: Request) -> Response:
    sandbox = require_app(request)
    return json_response(_hook_config(sandbox.app.webhook_url, sandbox.app.webhook_secret))


async def update_hook_config(request: Request) -> Response:
    sandbox = require_app(request)
    body = await read_json(request)
    for name in ("url", "secret"):
        if name in body and not isinstance(body[name], str):
            raise invalid_request(docs_url(request), f"For 'properties/{name}', {body[name]!r} is not a string.")
    if "url" in body:
        sandbox.app.webhook_url = body["url"] or None
    if "secret" in body:
        sandbox.app.webhook_secret = body["secret"] or None
    return json_response(_hook_config(sandbox.app.webhook_url, sandbox.app.webhook_secret))


def _hook_config(url: str | None, secret: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {"content_type": "json", "insecure_ssl": "0", "url": url or ""}
    if secret:
        config["secret"] = "********"
    return config


async def list_deliveries(request: Request) -> Response:
    sandbox = require_app(request)
    deliveries = sandbox.webhooks.newest_first()
    redelivery = request.query_params.get("redelivery")
    if redelivery in ("true", "false"):
        deliveries = [d for d in deliveries if d.redelivery == (redelivery == "true")]
    cursor = request.query_params.get("cursor", "")
    if cursor.startswith("v1_") and cursor[3:].isdigit():
        deliveries = [d for d in deliveries if d.id < int(cursor[3:])]
    raw_per_page = request.query_params.get("per_page", "30")
    per_page = min(max(int(raw_per_page), 1), 100) if raw_per_page.isdigit() else 30
    page, rest = deliveries[:per_page], deliveries[per_page:]
    headers = {}
    if rest:
        params = f"per_page={per_page}&cursor=v1_{page[-1].id}"
        if redelivery in ("true", "false"):
            params += f"&redelivery={redelivery}"
        headers["Link"] = f'<{request.url.replace(query="")}?{params}>; rel="next"'
    return json_response([d.summary() for d in page], headers=headers)


def _delivery_id(request: Request) -> int:
    raw = request.path_params["delivery_id"]
    if not str(raw).isdigit():
        raise not_found(docs_url(request))
    return int(raw)


async def get_delivery(request: Request) -> Response:
    sandbox = require_app(request)
    delivery = sandbox.webhooks.find(_delivery_id(request))
    if delivery is None:
        raise not_found(docs_url(request))
    return json_response(delivery.detail())


async def redeliver(request: Request) -> Response:
    sandbox = require_app(request)
    if sandbox.webhooks.redeliver(_delivery_id(request)) is None:
        raise not_found(docs_url(request))
    return json_response({}, status=202)


async def rate_limit(request: Request) -> Response:
    principal = caller(request, count=False)
    sandbox = sandbox_of(request)
    core = sandbox.limiter.peek(principal)
    core_json = {"limit": core.limit, "used": core.used, "remaining": core.remaining, "reset": core.reset}
    others = {
        name: {"limit": limit, "used": 0, "remaining": limit, "reset": core.reset}
        for name, limit in (("search", 30), ("graphql", 5000), ("integration_manifest", 5000), ("code_search", 10))
    }
    return json_response({"resources": {"core": core_json, **others}, "rate": core_json})


ROUTES = (
    RestRoute("GET", "/app", get_app, f"{APPS}#get-the-authenticated-app"),
    RestRoute("GET", "/app/installations", list_installations, f"{APPS}#list-installations-for-the-authenticated-app"),
    RestRoute(
        "GET",
        "/app/installations/{installation_id}",
        get_installation,
        f"{APPS}#get-an-installation-for-the-authenticated-app",
    ),
    RestRoute(
        "POST",
        "/app/installations/{installation_id}/access_tokens",
        create_access_token,
        f"{APPS}#create-an-installation-access-token-for-an-app",
    ),
    RestRoute(
        "GET",
        "/repos/{owner}/{repo}/installation",
        repository_installation,
        f"{APPS}#get-a-repository-installation-for-the-authenticated-app",
    ),
    RestRoute(
        "GET",
        "/installation/repositories",
        installation_repositories,
        "https://docs.github.com/rest/apps/installations#list-repositories-accessible-to-the-app-installation",
    ),
    RestRoute("GET", "/app/hook/config", get_hook_config, f"{HOOKS}#get-a-webhook-configuration-for-an-app"),
    RestRoute("PATCH", "/app/hook/config", update_hook_config, f"{HOOKS}#update-a-webhook-configuration-for-an-app"),
    RestRoute("GET", "/app/hook/deliveries", list_deliveries, f"{HOOKS}#list-deliveries-for-an-app-webhook"),
    RestRoute("GET", "/app/hook/deliveries/{delivery_id}", get_delivery, f"{HOOKS}#get-a-delivery-for-an-app-webhook"),
    RestRoute(
        "POST",
        "/app/hook/deliveries/{delivery_id}/attempts",
        redeliver,
        f"{HOOKS}#redeliver-a-delivery-for-an-app-webhook",
    ),
    RestRoute(
        "GET",
        "/rate_limit",
        rate_limit,
        "https://docs.github.com/rest/rate-limit/rate-limit#get-rate-limit-status-for-the-authenticated-user",
    ),
)
