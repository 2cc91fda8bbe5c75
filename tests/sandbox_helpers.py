"""The sandbox GitHub (bot/sandbox) for tests that run lanebot's own modules against it.

The sandbox is served from a thread of the test process on a loopback port: lanebot's git needs
real HTTP, and a child process reaches it by URL, while the test can still look inside it (its
request log, its faults, its git store). Its App is the one lanebot's test settings describe
(`tests.app_helpers`: App 4711 and its key), so lanebot signs real JWTs and gets real
installation tokens.

A repository is made from a tree of files (optionally with the project's own first commit), and
everything GitHub would show of it is read from the sandbox's human API read-out (`Readout`):
issues with their comments, reactions and labels, pull requests, check runs (with their buttons),
branches. Its git store is a real bare repository (`SandboxRepository.bare`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.hazmat.primitives import serialization

from bot.sandbox import Sandbox, SandboxConfig, SandboxServer
from bot.sandbox.cli import HumanClient
from tests.app_helpers import private_key_pem
from tests.lanes_helpers import run_git

APP_ID = 4711  # the App of tests.app_helpers.make_settings and tests.lanes_helpers.make_settings


@functools.cache
def app_public_key() -> str:
    """The public half of the key lanebot's test settings sign JWTs with: what the sandbox verifies."""
    key = serialization.load_pem_private_key(private_key_pem().encode(), password=None)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One TLS context for every test client: httpx loads the certificate store anew for each client
    otherwise (some 25 ms), though the sandbox on loopback is plain HTTP."""
    return httpx.create_ssl_context()


def human_client(server: SandboxServer) -> HumanClient:
    return HumanClient(server.url, transport=httpx.HTTPTransport(verify=tls_context()))


@contextlib.contextmanager
def served_sandbox(
    root: Path, *, webhook_client: httpx.AsyncClient | None = None, **config: Any
) -> Iterator[SandboxServer]:
    """A new sandbox serving on loopback until the block ends; its state (git store) under `root`."""
    settings = SandboxConfig(public_key_pem=app_public_key(), app_id=APP_ID, state_dir=root / "sandbox", **config)
    server = SandboxServer(settings, webhook_client=webhook_client)
    server.start()
    try:
        yield server
    finally:
        # uvicorn takes 0.1 to 0.3 s to shut down (it polls for the request to stop, then gives open
        # connections time): the test that follows need not wait for that.
        threading.Thread(target=server.stop, name="sandbox-stop", daemon=True).start()


@dataclass(frozen=True)
class Readout:
    """What GitHub would show of one repository at one moment (the human API's read-out)."""

    data: dict[str, Any]

    def issue(self, number: int) -> dict[str, Any]:
        return next(issue for issue in self.data["issues"] + self.data["pulls"] if issue["number"] == number)

    def comments(self, number: int) -> list[dict[str, Any]]:
        """The issue's comments, oldest first: {id, user (login), body, by_app, reactions}."""
        return self.issue(number)["comments"]

    def labels(self, number: int) -> list[str]:
        return self.issue(number)["labels"]

    def pulls(self) -> list[dict[str, Any]]:
        """Pull requests: {number, title, body, state, pull_request: {head, base, draft, ...}}."""
        return self.data["pulls"]

    def check_runs(self) -> list[dict[str, Any]]:
        """Check runs in the order they were created: {name, head_sha, status, conclusion, output, actions, ...}."""
        return self.data["check_runs"]

    def checks_named(self, name: str) -> list[dict[str, Any]]:
        return [run for run in self.check_runs() if run["name"] == name]


class SandboxRepository:
    """One repository of a served sandbox: people acting on it, and what GitHub shows of it now."""

    def __init__(self, server: SandboxServer, human: HumanClient, summary: dict[str, Any]) -> None:
        self.server = server
        self.human = human
        self.full_name: str = summary["full_name"]
        self.owner, self.name = self.full_name.split("/")
        self.installation_id: int = summary["installation_id"]

    @classmethod
    def create(
        cls,
        server: SandboxServer,
        folder: Path,
        full_name: str,
        files: dict[str, str],
        *,
        first_commit: str | None = None,
        private: bool = True,
        organization: bool = False,
    ) -> SandboxRepository:
        """A repository whose default branch holds `files`, made from `folder` (which it fills). With
        `first_commit`, the project's own commit of that name is its whole history, as if pushed."""
        for path, content in files.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(content)
        human = human_client(server)
        summary = human.create_repository(full_name, folder, private=private, organization=organization)
        repository = cls(server, human, summary)
        if first_commit is not None:
            run_git("init", "--quiet", "--initial-branch=main", cwd=folder)
            run_git("add", "--all", cwd=folder)
            run_git("commit", "--quiet", "-m", first_commit, cwd=folder)
            run_git("push", "--quiet", "--force", str(repository.bare), "HEAD:refs/heads/main", cwd=folder)
        return repository

    def close(self) -> None:
        self.human.close()

    @property
    def sandbox(self) -> Sandbox:
        return self.server.sandbox

    @property
    def bare(self) -> Path:
        """The sandbox's git store of this repository: a real bare repository."""
        return self.sandbox.git.path(self.owner, self.name)

    # -- acting

    def open_issue(
        self, title: str, body: str, *, login: str, role: str | None = None, labels: list[str] | None = None
    ) -> int:
        return self.human.open_issue(self.full_name, login=login, role=role, title=title, body=body, labels=labels)[
            "number"
        ]

    def commit(self, files: dict[str, str], message: str, scratch: Path) -> None:
        """A commit of `files` on the default branch, pushed straight into the git store (as setup: the
        sandbox is not told, so no pull request follows it and no webhook is sent)."""
        run_git("clone", "--quiet", str(self.bare), str(scratch), cwd=scratch.parent)
        for path, content in files.items():
            (scratch / path).parent.mkdir(parents=True, exist_ok=True)
            (scratch / path).write_text(content)
        run_git("add", "--all", cwd=scratch)
        run_git("commit", "--quiet", "-m", message, cwd=scratch)
        run_git("push", "--quiet", "origin", "HEAD", cwd=scratch)

    # -- reading

    def readout(self) -> Readout:
        return Readout(self.human.state(self.full_name))

    def pulls(self) -> list[dict[str, Any]]:
        return self.readout().pulls()

    def checks_named(self, name: str) -> list[dict[str, Any]]:
        return self.readout().checks_named(name)

    def comments(self, number: int) -> list[dict[str, Any]]:
        return self.readout().comments(number)

    def labels(self, number: int) -> list[str]:
        return self.readout().labels(number)

    def label_colour(self, name: str) -> str | None:
        """The colour of the repository's label of that name (None when it has none)."""
        label = self.sandbox.state.repository(self.owner, self.name).label(name)
        return None if label is None else label.color

    def served(self, method: str, path: str) -> int:
        """How many requests the sandbox has served whose method is `method` and whose path matches
        the regular expression `path` (matched against the whole path)."""
        return sum(1 for m, p, _ in list(self.sandbox.served) if m == method and re.fullmatch(path, p))

    def api_requests(self) -> list[tuple[str, str, int]]:
        """(method, path, status) of every REST request so far: not git's, not the human API's."""
        return [
            (method, path, status)
            for method, path, status in list(self.sandbox.served)
            if not path.startswith("/_sandbox/") and ".git/" not in path
        ]


@dataclass
class WebhookInbox:
    """The App's webhook endpoint as the sandbox reaches it: each delivery (headers and body, as
    signed) is kept until the test hands it on to lanebot. Answers 202, as lanebot does."""

    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        kept = {
            name: request.headers[name]
            for name in ("Content-Type", "User-Agent", "X-GitHub-Event", "X-GitHub-Delivery", "X-Hub-Signature-256")
        }
        with self._lock:
            self.deliveries.append((kept, request.content))
        return httpx.Response(202)

    def client(self) -> httpx.AsyncClient:
        """The HTTP client the sandbox sends its deliveries with."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self))

    def take(self) -> list[tuple[dict[str, str], bytes]]:
        """Every delivery kept so far, oldest first, leaving none."""
        with self._lock:
            taken, self.deliveries = self.deliveries, []
        return taken


@contextlib.asynccontextmanager
async def recording_tokens() -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    """An HTTP client for lanebot's GitHubApp that notes every installation token GitHub hands out,
    so a test can look for them where they must never be; yields (client, tokens)."""
    tokens: list[str] = []

    async def note_token(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.request.url.path.endswith("/access_tokens"):
            await response.aread()
            if response.status_code == 201:
                tokens.append(response.json()["token"])

    async with httpx.AsyncClient(
        timeout=httpx.Timeout(30.0), verify=tls_context(), event_hooks={"response": [note_token]}
    ) as client:
        yield client, tokens
