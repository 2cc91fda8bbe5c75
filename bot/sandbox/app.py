"""The sandbox as one Starlette app: GitHub's REST routes, its GraphQL endpoint, git smart HTTP,
the web pages of the OAuth web flow (bot.sandbox.routes_oauth), the human API, and webhook relay
channels in smee.io's format (bot.sandbox.channels).

Around every request: GitHub's response headers on REST answers (request ID, API version,
rate limit), GitHub's 404 body for anything not served (unknown paths, unsupported methods and
trailing slashes all 404 on GitHub), the faults a test has set (`bot.sandbox.faults`), and a line
`METHOD path status` in the request log and in `sandbox.served`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.sandbox import (
    channels,
    git_http,
    graphql,
    human,
    routes_app,
    routes_checks,
    routes_issues,
    routes_oauth,
    routes_pulls,
    routes_repos,
    routes_reviews,
    routes_user,
)
from bot.sandbox.core import Sandbox
from bot.sandbox.errors import DOCS, GitHubError, not_found
from bot.sandbox.faults import read_body
from bot.sandbox.rest import RestRoute, json_response, starlette_routes

API_VERSIONS = ("2026-03-10", "2022-11-28")  # newest first
DEFAULT_API_VERSION = "2022-11-28"
REST_ROUTES: tuple[RestRoute, ...] = (
    *routes_app.ROUTES,
    *routes_repos.ROUTES,
    *routes_issues.ROUTES,
    *routes_pulls.ROUTES,
    *routes_reviews.ROUTES,
    *routes_checks.ROUTES,
    *routes_user.ROUTES,
)


def served_rest_routes() -> list[tuple[str, str]]:
    """(method, path template) of every GitHub REST route the sandbox answers."""
    return [(route.method, route.path) for route in REST_ROUTES]


def _github_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, GitHubError)
    return json_response(error.body(), status=error.status, headers=error.headers)


def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    if error.status_code in (404, 405):
        return json_response(not_found(DOCS).body(), status=404)
    return json_response(
        {"message": error.detail, "documentation_url": DOCS, "status": str(error.status_code)}, status=error.status_code
    )


def _human_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, human.HumanError)
    return human.human_error_response(error)


def create_app(sandbox: Sandbox) -> ASGIApp:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await sandbox.close()

    routes = [
        *starlette_routes(REST_ROUTES),
        *graphql.ROUTES,
        *routes_oauth.ROUTES,
        *human.ROUTES,
        *git_http.ROUTES,
        *channels.ROUTES,
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            GitHubError: _github_error,
            human.HumanError: _human_error,
            HTTPException: _http_error,
        },
    )
    app.router.redirect_slashes = False
    app.state.sandbox = sandbox
    app.state.channels = channels.Channels()
    return GitHubEdge(app, sandbox)


class GitHubEdge:
    """ASGI middleware: version check, GitHub's headers, the request log."""

    def __init__(self, app: ASGIApp, sandbox: Sandbox) -> None:
        self.app = app
        self.sandbox = sandbox
        self.log_path: Path | None = sandbox.config.request_log
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        rest = not (
            path.startswith(human.PREFIX)
            or ".git/" in path
            or routes_oauth.is_web_path(path)
            or channels.is_channel_path(path)
        )
        status_seen: list[int] = []

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_seen.append(message["status"])
                if rest:
                    message = {**message, "headers": [*message.get("headers", []), *self._headers(scope)]}
            await send(message)

        version = _requested_version(scope)
        if rest and version is not None and version not in API_VERSIONS:
            response = _unsupported_version(version)
            await response(scope, receive, send_with_headers)
        else:
            scope["sandbox.version"] = version or DEFAULT_API_VERSION
            await self._answer(scope, receive, send_with_headers)
        self._record(method, path, status_seen[0] if status_seen else 500)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's answer, unless a fault set for this request answers instead or cuts it off."""
        method, path = scope["method"], scope["path"]
        watched, needs_body = self.sandbox.faults.watching(method, path)
        if not watched or path.startswith(f"{human.PREFIX}/faults"):  # faults can always be cleared
            await self.app(scope, receive, send)
            return
        body = b""
        if needs_body:
            body, receive = await read_body(receive)
        fault = self.sandbox.faults.take(method, path, body)
        if fault is not None and fault.delay is not None:
            await asyncio.sleep(fault.delay)
            fault = None
        if fault is None:
            await self.app(scope, receive, send)
        elif fault.status is not None:
            await json_response(fault.error_body(), status=fault.status, headers=fault.headers())(scope, receive, send)
        else:
            await self.app(scope, receive, _status_line_only(send))

    def _headers(self, scope: Scope) -> list[tuple[bytes, bytes]]:
        headers = {
            "x-github-api-version-selected": scope.get("sandbox.version", DEFAULT_API_VERSION),
            "x-github-media-type": "github.v3; format=json",
            "x-github-request-id": ":".join(secrets.token_hex(n).upper() for n in (2, 2, 3, 3, 4)),
            "x-content-type-options": "nosniff",
        }
        rate = scope.get("sandbox.rate")
        if rate is not None:
            headers.update(rate.headers())
        return [(key.encode(), value.encode()) for key, value in headers.items()]

    def _record(self, method: str, path: str, status: int) -> None:
        self.sandbox.served.append((method, path, status))
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as log:
                log.write(f"{method} {path} {status}\n")


def _status_line_only(send: Send) -> Send:
    """A `send` that lets the answer's status and headers out but not its body: the server then
    closes the connection on an incomplete answer, as a connection lost mid-answer does."""

    async def send_start(message: Message) -> None:
        if message["type"] == "http.response.start":
            await send(message)

    return send_start


def _requested_version(scope: Scope) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == b"x-github-api-version":
            return value.decode("latin-1").strip()
    return None


def _unsupported_version(version: str) -> Response:
    supported = ", ".join(f'"{v}"' + (" (most recent)" if i == 0 else "") for i, v in enumerate(API_VERSIONS))
    message = (
        f'The version you specified in the "X-GitHub-API-Version" request header, "{version}", is not a '
        f"supported version. The following versions are currently supported: {supported}."
    )
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS, "status": "400"}
    return json_response(body, status=400)
