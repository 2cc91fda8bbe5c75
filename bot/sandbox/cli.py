"""Driving a sandbox from outside: `HumanClient` (the human API over HTTP, for the CLI, the demo
and end-to-end tests) and `serve` (run one in the foreground)."""

from __future__ import annotations

import faulthandler
import ipaddress
import signal
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import uvicorn

from bot.sandbox.app import create_app
from bot.sandbox.core import DEFAULT_PORT, Sandbox, SandboxConfig
from bot.sandbox.human import PREFIX

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"


class SandboxUnavailable(Exception):
    """No sandbox answered, or it refused the request; the message says which and why."""


class HumanClient:
    """The human API of a running sandbox: each method is one thing a person does on GitHub."""

    def __init__(
        self, base_url: str = DEFAULT_URL, *, timeout: float = 60.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url + PREFIX, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HumanClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> Any:
        try:
            response = self._http.request(method, path, json=body, params=params)
        except httpx.TransportError as error:
            raise SandboxUnavailable(
                f"no sandbox answered at {self.base_url} ({type(error).__name__}); "
                "start one with `lanebot sandbox serve`"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise SandboxUnavailable(f"the sandbox refused {method} {path}: {message}")
        return response.json()

    def _object(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """`_call` for a route that answers with one JSON object."""
        answer: dict[str, Any] = self._call(method, path, body, params)
        return answer

    def _objects(self, method: str, path: str) -> list[dict[str, Any]]:
        """`_call` for a route that answers with a JSON array of objects."""
        answer: list[dict[str, Any]] = self._call(method, path)
        return answer

    @staticmethod
    def _acting(login: str, role: str | None) -> dict[str, Any]:
        return {"as": login, **({"role": role} if role else {})}

    def create_repository(
        self,
        full_name: str,
        folder: Path,
        *,
        private: bool = True,
        organization: bool = False,
        default_branch: str = "main",
        description: str | None = None,
    ) -> dict[str, Any]:
        return self._object(
            "POST",
            "/repos",
            {
                "full_name": full_name,
                "path": str(Path(folder).resolve()),
                "private": private,
                "organization": organization,
                "default_branch": default_branch,
                "description": description,
            },
        )

    def add_collaborator(self, full_name: str, login: str, role: str) -> dict[str, Any]:
        return self._object("POST", f"/repos/{full_name}/collaborators", {"login": login, "role": role})

    def remove_collaborator(self, full_name: str, login: str) -> dict[str, Any]:
        return self._object("DELETE", f"/repos/{full_name}/collaborators/{login}")

    def create_user(self, login: str) -> dict[str, Any]:
        """A person signs up; they have no role anywhere until given one."""
        return self._object("POST", "/users", {"login": login})

    def rename_user(self, login: str, new_login: str) -> dict[str, Any]:
        return self._object("POST", f"/users/{login}/rename", {"login": new_login})

    def open_issue(
        self,
        full_name: str,
        *,
        login: str,
        title: str,
        body: str | None = None,
        labels: list[str] | None = None,
        role: str | None = None,
    ) -> dict[str, Any]:
        return self._object(
            "POST",
            f"/repos/{full_name}/issues",
            {**self._acting(login, role), "title": title, "body": body, "labels": labels or []},
        )

    def comment(self, full_name: str, number: int, *, login: str, body: str, role: str | None = None) -> dict[str, Any]:
        return self._object(
            "POST", f"/repos/{full_name}/issues/{number}/comments", {**self._acting(login, role), "body": body}
        )

    def edit_comment(self, full_name: str, comment_id: int, *, login: str, body: str) -> dict[str, Any]:
        return self._object("PATCH", f"/repos/{full_name}/issues/comments/{comment_id}", {"as": login, "body": body})

    def add_label(
        self, full_name: str, number: int, name: str, *, login: str, role: str | None = None
    ) -> dict[str, Any]:
        return self._object(
            "POST", f"/repos/{full_name}/issues/{number}/labels", {**self._acting(login, role), "name": name}
        )

    def remove_label(self, full_name: str, number: int, name: str, *, login: str) -> dict[str, Any]:
        return self._object(
            "DELETE", f"/repos/{full_name}/issues/{number}/labels/{quote(name, safe='')}", params={"as": login}
        )

    def edit_issue(
        self, full_name: str, number: int, *, login: str, title: str | None = None, body: str | None = None
    ) -> dict[str, Any]:
        """Edit an issue's title or body, as its author (or someone with triage) does; GitHub sends `issues.edited`."""
        fields = {key: value for key, value in (("title", title), ("body", body)) if value is not None}
        return self._object("PATCH", f"/repos/{full_name}/issues/{number}", {"as": login, **fields})

    def close_issue(self, full_name: str, number: int, *, login: str, role: str | None = None) -> dict[str, Any]:
        """Close an issue or pull request (without merging)."""
        return self._object("POST", f"/repos/{full_name}/issues/{number}/close", self._acting(login, role))

    def review(
        self,
        full_name: str,
        number: int,
        *,
        login: str,
        event: str,
        body: str | None = None,
        comments: list[dict[str, Any]] | None = None,
        role: str | None = None,
    ) -> dict[str, Any]:
        """Submit a review (APPROVE, REQUEST_CHANGES or COMMENT), with inline comments
        `[{path, line, body, side?}]` on lines the pull request's diff shows."""
        return self._object(
            "POST",
            f"/repos/{full_name}/pulls/{number}/reviews",
            {**self._acting(login, role), "event": event, "body": body, "comments": comments or []},
        )

    def reply_to_review_comment(self, full_name: str, comment_id: int, *, login: str, body: str) -> dict[str, Any]:
        """Reply in a review comment's thread; the reply as the state dump lists review comments."""
        return self._object(
            "POST", f"/repos/{full_name}/pulls/comments/{comment_id}/replies", {"as": login, "body": body}
        )

    def resolve_thread(self, full_name: str, comment_id: int, *, login: str, resolved: bool = True) -> dict[str, Any]:
        """Resolve (or unresolve) the thread holding a review comment, as its pull request's author or
        someone with write access; the thread as the state dump lists threads."""
        return self._object(
            "POST", f"/repos/{full_name}/pulls/comments/{comment_id}/resolve", {"as": login, "resolved": resolved}
        )

    def merge_pull(self, full_name: str, number: int, *, login: str, role: str | None = None) -> dict[str, Any]:
        """Press "Merge pull request": a merge commit on the base branch, then `pull_request.closed`."""
        return self._object("POST", f"/repos/{full_name}/pulls/{number}/merge", self._acting(login, role))

    def rerun_check(self, full_name: str, check_run_id: int, *, login: str, role: str | None = None) -> dict[str, Any]:
        return self._object(
            "POST", f"/repos/{full_name}/check-runs/{check_run_id}/rerequest", self._acting(login, role)
        )

    def request_action(
        self, full_name: str, check_run_id: int, identifier: str, *, login: str, role: str | None = None
    ) -> dict[str, Any]:
        return self._object(
            "POST",
            f"/repos/{full_name}/check-runs/{check_run_id}/requested-action",
            {**self._acting(login, role), "identifier": identifier},
        )

    def push(
        self, full_name: str, branch: str, files: dict[str, str], *, login: str, message: str = "A change"
    ) -> dict[str, Any]:
        """A person pushes one commit of `files` onto `branch` (write access needed); {branch, sha}."""
        body = {**self._acting(login, None), "branch": branch, "files": files, "message": message}
        return self._object("POST", f"/repos/{full_name}/pushes", body)

    def report_ci(self, full_name: str, sha: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
        """The repository's CI (the `github-actions` App) reports on `sha` (a SHA or branch): a check
        suite of `runs` ({name, conclusion, output: {title, summary, text, annotations}}), finished;
        GitHub's `check_run` and `check_suite.completed` events follow."""
        return self._object("POST", f"/repos/{full_name}/ci-reports", {"sha": sha, "runs": runs})

    def app(self) -> dict[str, Any]:
        return self._object("GET", "/app")

    def set_webhook(self, url: str | None, secret: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"webhook_url": url}
        if secret is not None:
            body["webhook_secret"] = secret
        return self._object("PATCH", "/app", body)

    def set_callback_urls(self, urls: list[str]) -> dict[str, Any]:
        """Where the web flow may send a person back (the first is the default); the App as `app()` shows it."""
        return self._object("PATCH", "/app", {"callback_urls": urls})

    def deliveries(self) -> list[dict[str, Any]]:
        return self._objects("GET", "/deliveries")

    def delivery(self, delivery_id: int) -> dict[str, Any]:
        """One delivery's detail, with `raw_body`: the exact bytes sent (as text)."""
        return self._object("GET", f"/deliveries/{delivery_id}")

    def redeliver(self, delivery_id: int) -> dict[str, Any]:
        return self._object("POST", f"/deliveries/{delivery_id}/redeliver")

    def drain(self) -> dict[str, Any]:
        return self._object("POST", "/drain")

    def add_fault(self, **fault: Any) -> dict[str, Any]:
        """Make requests fail (bot.sandbox.faults): method, path, status or drop_answer, and the rest."""
        return self._object("POST", "/faults", fault)

    def faults(self) -> dict[str, Any]:
        """The faults pending and the ones that acted: {"pending": [...], "fired": [...]}."""
        return self._object("GET", "/faults")

    def clear_faults(self) -> dict[str, Any]:
        return self._object("DELETE", "/faults")

    def requests(self) -> list[dict[str, Any]]:
        return self._objects("GET", "/requests")

    def state(self, full_name: str | None = None) -> dict[str, Any]:
        return self._object("GET", f"/repos/{full_name}" if full_name else "/state")


def serve(config: SandboxConfig, *, host: str, port: int, log_level: str = "info") -> None:
    """Serve a sandbox in the foreground until interrupted; prints where it is. SIGUSR1 writes every
    thread's stack to stderr (a test that finds the sandbox stuck can ask where)."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # else no TCP_NODELAY
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(2048)  # before saying where: a client that connects at once waits in the backlog, not refused
    bound_host, bound_port = listener.getsockname()[:2]
    url = f"http://{bound_host}:{bound_port}"
    public_url = config.public_url if config.public_url != DEFAULT_URL else url
    if not ipaddress.ip_address(socket.gethostbyname(bound_host)).is_loopback:
        print(
            f"Warning: {url} is reachable from other machines, and the human API under {PREFIX}/ has no "
            "authentication (it can read any folder into a repository). Prefer --host 127.0.0.1.",
            file=sys.stderr,
        )
    sandbox = Sandbox(replace(config, public_url=public_url))
    app = sandbox.app
    print(
        f"Sandbox GitHub at {url}: App {app.id} ({app.slug}), webhooks to {app.webhook_url or 'nowhere yet'}.",
        flush=True,
    )
    print(
        f"Point lanebot at it with GITHUB_API_URL={url}; act as people with `lanebot sandbox ... --sandbox-url {url}`.",
        flush=True,
    )
    server = uvicorn.Server(uvicorn.Config(create_app(sandbox), log_level=log_level, lifespan="on"))
    server.run(sockets=[listener])
