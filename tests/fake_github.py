"""A small stand-in for the part of GitHub's REST API the runner side touches, for tests.

Shapes follow GitHub's REST documentation (docs.github.com/rest): repositories, issues, issue
comments, labels, check runs (create, update, list for a ref), pull requests (list by head,
create, update; a second open PR for the same head is refused with 422), installation tokens,
`GET /app` and `GET /users/{login}`. Errors carry `{"message", "documentation_url"}`.

One `FakeGitHub` holds the state. In-process tests route httpx through it with respx
(`fake.respx_router()`); a child process reaches it over HTTP (`fake.serve()`), so its state
outlives the child.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import httpx
import respx

API = "https://api.github.test"
TOKEN = "ghs_Sup3rS3cretInstallationT0ken42"
APP_SLUG = "lanebot-test"
BOT_ID = 9001
DOCS = "https://docs.github.com/rest"


@dataclass
class FakeGitHub:
    owner: str
    repo: str
    clone_url: str
    issue: dict[str, Any]
    default_branch: str = "main"
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    check_runs: list[dict[str, Any]] = field(default_factory=list)
    pulls: list[dict[str, Any]] = field(default_factory=list)
    config_yaml: str | None = None
    _ids: Iterator[int] = field(default_factory=lambda: iter(range(1001, 10**9)))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repo}"

    # ----------------------------------------------------------------- transport

    def respx_router(self) -> respx.MockRouter:
        router = respx.mock(base_url=API, assert_all_called=False)
        router.route().mock(side_effect=self._respx)
        return router

    def _respx(self, request: httpx.Request) -> httpx.Response:
        status, body = self.handle(request.method, request.url.raw_path.decode(), request.content)
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    @contextmanager
    def serve(self) -> Iterator[str]:
        """Serve the fake over HTTP on loopback; yields its base URL."""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, body = fake.handle(self.command, self.path, self.rfile.read(length) if length else b"")
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _answer

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()

    # ----------------------------------------------------------------- routing

    def handle(self, method: str, raw_path: str, content: bytes) -> tuple[int, Any]:
        parts = urlsplit(raw_path)
        path, query = unquote(parts.path), {k: v[0] for k, v in parse_qs(parts.query).items()}
        body = json.loads(content) if content else None
        with self._lock:
            status, answer = self._route(method, path, query, body)
            self.requests.append((method, raw_path, status))
        return status, answer

    def _route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        repo = f"/repos/{self.owner}/{self.repo}"
        routes: list[tuple[str, str, Any]] = [
            ("POST", r"/app/installations/(\d+)/access_tokens", self._token),
            ("GET", r"/app", self._app),
            ("GET", r"/users/([^/]+)", self._user),
            ("GET", re.escape(repo), self._repository),
            ("GET", rf"/repos/[^/]+/[^/]+/contents/(.+)", self._contents),
            ("GET", rf"{repo}/issues/(\d+)", self._issue),
            ("GET", rf"{repo}/issues/(\d+)/comments", self._list_comments),
            ("POST", rf"{repo}/issues/(\d+)/comments", self._create_comment),
            ("GET", rf"{repo}/issues/comments/(\d+)", self._get_comment),
            ("PATCH", rf"{repo}/issues/comments/(\d+)", self._edit_comment),
            ("GET", rf"{repo}/issues/(\d+)/labels", self._list_labels),
            ("POST", rf"{repo}/issues/(\d+)/labels", self._add_labels),
            ("DELETE", rf"{repo}/issues/(\d+)/labels/(.+)", self._remove_label),
            ("POST", rf"{repo}/check-runs", self._create_check),
            ("PATCH", rf"{repo}/check-runs/(\d+)", self._update_check),
            ("GET", rf"{repo}/commits/([^/]+)/check-runs", self._list_checks),
            ("GET", rf"{repo}/pulls", self._list_pulls),
            ("POST", rf"{repo}/pulls", self._create_pull),
            ("PATCH", rf"{repo}/pulls/(\d+)", self._update_pull),
        ]
        for verb, pattern, handler in routes:
            match = re.fullmatch(pattern, path)
            if verb == method and match:
                return handler(*match.groups(), query=query, body=body)
        return _error(404, "Not Found")

    # ----------------------------------------------------------------- handlers

    def _token(self, installation: str, *, query: dict, body: Any) -> tuple[int, Any]:
        expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="seconds").replace("+00:00", "Z")
        return 201, {"token": TOKEN, "expires_at": expires, "permissions": {"contents": "write", "checks": "write"},
                     "repository_selection": "selected"}

    def _app(self, *, query: dict, body: Any) -> tuple[int, Any]:
        return 200, {"id": 4711, "slug": APP_SLUG, "name": "lanebot test", "owner": {"login": self.owner}}

    def _user(self, login: str, *, query: dict, body: Any) -> tuple[int, Any]:
        if login != f"{APP_SLUG}[bot]":
            return _error(404, "Not Found")
        return 200, {"login": login, "id": BOT_ID, "type": "Bot"}

    def _repository(self, *, query: dict, body: Any) -> tuple[int, Any]:
        return 200, {"id": 1296269, "name": self.repo, "full_name": self.full_name, "private": False,
                     "owner": {"login": self.owner, "type": "Organization"},
                     "html_url": f"https://github.test/{self.full_name}", "clone_url": self.clone_url,
                     "default_branch": self.default_branch}

    def _contents(self, path: str, *, query: dict, body: Any) -> tuple[int, Any]:
        if path == ".github/lanebot.yml" and self.config_yaml is not None:
            import base64

            return 200, {"type": "file", "encoding": "base64", "path": path,
                         "content": base64.b64encode(self.config_yaml.encode()).decode()}
        return _error(404, "Not Found")

    def _issue(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        if int(number) != self.issue["number"]:
            return _error(404, "Not Found")
        return 200, {**self.issue, "state": "open", "labels": [{"name": name} for name in self.labels]}

    def _list_comments(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        return 200, [comment for comment in self.comments if comment["issue"] == int(number)]

    def _create_comment(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        comment = {"id": next(self._ids), "issue": int(number), "body": body["body"],
                   "user": {"login": f"{APP_SLUG}[bot]", "type": "Bot"}, "edits": 0}
        self.comments.append(comment)
        return 201, comment

    def _get_comment(self, comment_id: str, *, query: dict, body: Any) -> tuple[int, Any]:
        found = [c for c in self.comments if c["id"] == int(comment_id)]
        return (200, found[0]) if found else _error(404, "Not Found")

    def _edit_comment(self, comment_id: str, *, query: dict, body: Any) -> tuple[int, Any]:
        for comment in self.comments:
            if comment["id"] == int(comment_id):
                comment["body"] = body["body"]
                comment["edits"] += 1
                return 200, comment
        return _error(404, "Not Found")

    def _list_labels(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        return 200, [{"name": name} for name in self.labels]

    def _add_labels(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        for name in body["labels"]:
            if name not in self.labels:
                self.labels.append(name)
        return 200, [{"name": name} for name in self.labels]

    def _remove_label(self, number: str, name: str, *, query: dict, body: Any) -> tuple[int, Any]:
        if name not in self.labels:
            return _error(404, "Label does not exist")
        self.labels.remove(name)
        return 200, [{"name": label} for label in self.labels]

    def _create_check(self, *, query: dict, body: Any) -> tuple[int, Any]:
        missing = [key for key in ("name", "head_sha") if key not in body]
        if missing:
            return _error(422, f"missing {missing}")
        check = {"id": next(self._ids), "status": "queued", "conclusion": None, "external_id": None, **body,
                 "html_url": f"https://github.test/{self.full_name}/runs/0"}
        check["html_url"] = f"https://github.test/{self.full_name}/runs/{check['id']}"
        self.check_runs.append(check)
        return 201, check

    def _update_check(self, check_id: str, *, query: dict, body: Any) -> tuple[int, Any]:
        for check in self.check_runs:
            if check["id"] == int(check_id):
                if body.get("status") == "completed" and body.get("conclusion") is None:
                    return _error(422, "conclusion is required when status is completed")
                if len((body.get("output") or {}).get("summary") or "") > 65_535:
                    return _error(422, "output.summary is too long (maximum is 65535 characters)")
                check.update(body)
                return 200, check
        return _error(404, "Not Found")

    def _list_checks(self, ref: str, *, query: dict, body: Any) -> tuple[int, Any]:
        found = [c for c in self.check_runs if c["head_sha"] == ref
                 and ("check_name" not in query or c["name"] == query["check_name"])]
        return 200, {"total_count": len(found), "check_runs": found}

    def _list_pulls(self, *, query: dict, body: Any) -> tuple[int, Any]:
        found = [p for p in self.pulls if query.get("state", "open") in ("all", p["state"])]
        if "head" in query:
            owner, _, ref = query["head"].partition(":")
            found = [p for p in found if p["head"]["ref"] == ref and owner == self.owner]
        return 200, found

    def _create_pull(self, *, query: dict, body: Any) -> tuple[int, Any]:
        if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in self.pulls):
            return 422, {"message": "Validation Failed", "documentation_url": DOCS,
                         "errors": [{"resource": "PullRequest", "code": "custom",
                                     "message": f"A pull request already exists for {self.owner}:{body['head']}."}]}
        number = len(self.pulls) + 100
        pull = {"number": number, "state": "open", "title": body["title"], "body": body.get("body"),
                "draft": bool(body.get("draft")), "head": {"ref": body["head"]}, "base": {"ref": body["base"]},
                "html_url": f"https://github.test/{self.full_name}/pull/{number}"}
        self.pulls.append(pull)
        return 201, pull

    def _update_pull(self, number: str, *, query: dict, body: Any) -> tuple[int, Any]:
        for pull in self.pulls:
            if pull["number"] == int(number):
                pull.update({key: body[key] for key in ("title", "body") if key in body})
                return 200, pull
        return _error(404, "Not Found")

    # ----------------------------------------------------------------- views for assertions

    def progress_comments(self, run_id: int) -> list[dict[str, Any]]:
        marker = f"<!-- lanebot:progress run={run_id} -->"
        return [c for c in self.comments if marker in c["body"]]

    def checks_named(self, name: str) -> list[dict[str, Any]]:
        return [c for c in self.check_runs if c["name"] == name]

    def to_json(self) -> dict[str, Any]:
        return {"comments": self.comments, "labels": self.labels, "check_runs": self.check_runs, "pulls": self.pulls,
                "requests": self.requests}


def _error(status: int, message: str) -> tuple[int, Any]:
    return status, {"message": message, "documentation_url": DOCS}
