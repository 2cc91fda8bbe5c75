"""git over smart HTTP, as GitHub serves it: `git http-backend` as a CGI behind the app.

Who may do what (GitHub's rules for installation tokens, which authenticate as HTTP Basic with
the user name `x-access-token` and the token as password):
- fetch/clone: anyone from a public repository; from a private one, a live token whose
  installation covers the repository with contents:read;
- push: only a live token covering the repository with contents:write.
No credentials where some are needed: 401 with `WWW-Authenticate: Basic realm="GitHub"`, so the
git client asks its credential helper. Credentials that cannot push: 403. A repository the
credentials cannot see: 404 "Repository not found.".

Request and response bodies are streamed through the CGI process; gzip-encoded request bodies
(git sends them for large fetch negotiations) are inflated by http-backend itself, told by
HTTP_CONTENT_ENCODING. After a push, before its answer ends, the branch tips are compared with
those before it and the sandbox is told which moved (the App gets `push` for each, pull requests
follow their head branch).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bot.sandbox.auth import Principal, has_permission, token_covers
from bot.sandbox.core import Sandbox
from bot.sandbox.state import Repository

log = logging.getLogger(__name__)
SERVICES = {"git-upload-pack": ("contents", "read"), "git-receive-pack": ("contents", "write")}
TOKEN_USER = "x-access-token"
_CHUNK = 64 * 1024


def _challenge() -> Response:
    return PlainTextResponse(
        "Authentication required.\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="GitHub"'}
    )


def _basic_credentials(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(encoded.strip()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user, password


def _principal(sandbox: Sandbox, request: Request) -> Principal | None:
    """The installation a request's Basic credentials stand for; None without (valid) credentials."""
    credentials = _basic_credentials(request)
    if credentials is None or credentials[0] != TOKEN_USER:
        return None
    token = sandbox.tokens.lookup(credentials[1])
    return None if token is None else Principal("installation", token)


def _decide(sandbox: Sandbox, request: Request, repository: Repository | None, service: str) -> Response | None:
    """None when the request may go on to http-backend, else the refusal."""
    permission, level = SERVICES[service]
    principal = _principal(sandbox, request)
    if repository is None:
        return _challenge() if principal is None else PlainTextResponse("Repository not found.\n", status_code=404)
    if level == "read" and not repository.private:
        return None
    if principal is None:
        return _challenge()
    if not token_covers(principal, repository):
        if repository.private:
            return PlainTextResponse("Repository not found.\n", status_code=404)
        return PlainTextResponse("Write access to repository not granted.\n", status_code=403)
    assert principal.token is not None
    if not has_permission(principal.token.permissions, permission, level):
        return PlainTextResponse("Write access to repository not granted.\n", status_code=403)
    return None


async def smart_http(request: Request) -> Response:
    sandbox: Sandbox = request.app.state.sandbox
    owner, name, rest = request.path_params["owner"], request.path_params["name"], request.path_params["rest"]
    if rest == "info/refs":
        service = request.query_params.get("service", "")
        if request.method != "GET" or service not in SERVICES:
            return PlainTextResponse("Not Found\n", status_code=404)  # the dumb protocol is not served
    elif rest in SERVICES and request.method == "POST":
        service = rest
    else:
        return PlainTextResponse("Not Found\n", status_code=404)
    repository = sandbox.state.repository(owner, name)
    refusal = _decide(sandbox, request, repository, service)
    if refusal is not None:
        return refusal
    assert repository is not None
    pushing = service == "git-receive-pack" and rest == service
    before = await sandbox.in_thread(sandbox.git.refs, repository.owner.login, repository.name) if pushing else {}
    return await _run_backend(sandbox, request, repository, rest, pushing, before)


def _environment(sandbox: Sandbox, request: Request, repository: Repository, rest: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        {
            "GIT_PROJECT_ROOT": str(sandbox.git.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"{sandbox.git.path_info(repository.owner.login, repository.name)}/{rest}",
            "QUERY_STRING": request.url.query,
            "REQUEST_METHOD": request.method,
            "CONTENT_TYPE": request.headers.get("content-type", ""),
            "REMOTE_ADDR": request.client.host if request.client else "127.0.0.1",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
    )
    principal = _principal(sandbox, request)
    if principal is not None:
        env["REMOTE_USER"] = TOKEN_USER
    for header, variable in (
        ("content-length", "CONTENT_LENGTH"),
        ("content-encoding", "HTTP_CONTENT_ENCODING"),
        ("git-protocol", "GIT_PROTOCOL"),
    ):
        if header in request.headers:
            env[variable] = request.headers[header]
    return env


async def _run_backend(
    sandbox: Sandbox, request: Request, repository: Repository, rest: str, pushing: bool, before: dict[str, str]
) -> Response:
    process = await asyncio.create_subprocess_exec(
        sandbox.git.git,
        "http-backend",
        env=_environment(sandbox, request, repository, rest),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    feeding = asyncio.create_task(_feed(request, process))
    assert process.stderr is not None
    complaints = asyncio.create_task(process.stderr.read())  # drained all along, so it never fills and blocks
    status, headers, first = await _read_cgi_headers(process)

    async def body() -> AsyncIterator[bytes]:
        try:
            if first:
                yield first
            assert process.stdout is not None
            while chunk := await process.stdout.read(_CHUNK):
                yield chunk
        finally:
            await feeding
            errors = await complaints
            code = await process.wait()
            if code != 0:
                log.warning("git http-backend exited %s: %s", code, errors.decode(errors="replace").strip())
            if pushing:
                # Before the answer ends, so a pusher that sees its push done sees its effects too.
                after = await sandbox.in_thread(sandbox.git.refs, repository.owner.login, repository.name)
                if after != before:
                    await sandbox.pushed(repository, before, after, sandbox.bot)

    return _CgiResponse(body(), status_code=status, headers=headers)


class _CgiResponse(StreamingResponse):
    """A streamed answer that leaves `receive` alone: the request body is still being fed to
    http-backend (which sends its headers before reading it), so nothing else may consume the
    request's messages, as StreamingResponse's disconnect watcher would."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.stream_response(send)


async def _feed(request: Request, process: asyncio.subprocess.Process) -> None:
    assert process.stdin is not None
    try:
        async for chunk in request.stream():
            if chunk:
                process.stdin.write(chunk)
                await process.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # http-backend stopped reading: its answer says why
    except ClientDisconnect:
        if process.returncode is None:
            process.kill()  # nobody is left to answer
    finally:
        process.stdin.close()


async def _read_cgi_headers(process: asyncio.subprocess.Process) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and any body bytes already read, from a CGI response on stdout."""
    assert process.stdout is not None
    buffer = b""
    while b"\r\n\r\n" not in buffer and b"\n\n" not in buffer:
        chunk = await process.stdout.read(_CHUNK)
        if not chunk:
            break
        buffer += chunk
    crlf, lf = buffer.find(b"\r\n\r\n"), buffer.find(b"\n\n")
    if crlf != -1 and (lf == -1 or crlf < lf):
        head, rest = buffer[:crlf], buffer[crlf + 4 :]
    elif lf != -1:
        head, rest = buffer[:lf], buffer[lf + 2 :]
    else:
        return 502, {}, b""
    status, headers = 200, {}
    for line in head.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "status":
            status = int(value.strip().split()[0])
        elif key.strip():
            headers[key.strip()] = value.strip()
    return status, headers, rest


ROUTES = [Route("/{owner}/{name}.git/{rest:path}", smart_http, methods=["GET", "POST"], include_in_schema=False)]
