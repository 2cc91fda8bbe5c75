"""The adapters against the real Claude Code and Codex CLIs, where the CLI is what decides.

No model is involved: a loopback server answers every request with a 400 error, which both CLIs end
a session on at once. That is enough to prove what happens before and around the model call: which
credentials and endpoint reach the CLI, that the command lines lanebot builds are accepted, that a
repository's own `.claude/settings.json` hooks do not run, and that `bypassPermissions` starts as
root. (Sessions that use tools need the scripted model server, a later step.)

The CLIs are looked up in `$LANEBOT_REAL_CLI_BIN` (a folder, e.g. `node_modules/.bin` of
`npm install @anthropic-ai/claude-code @openai/codex`), then on PATH; without them these tests skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bot.edges.agents import AgentRequest
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings
from bot.edges.agents.codex import CodexAgent, CodexSettings


def real_cli(name: str) -> str | None:
    folder = os.environ.get("LANEBOT_REAL_CLI_BIN")
    return shutil.which(name, path=folder) if folder else shutil.which(name)


CLAUDE = real_cli("claude")
CODEX = real_cli("codex")
needs_claude = pytest.mark.skipif(
    CLAUDE is None, reason="the real `claude` CLI is not installed ($LANEBOT_REAL_CLI_BIN)"
)
needs_codex = pytest.mark.skipif(CODEX is None, reason="the real `codex` CLI is not installed ($LANEBOT_REAL_CLI_BIN)")


@dataclass
class RefusingServer:
    """A loopback HTTP server that records each request and refuses it with a 400."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[RefusingServer]:
    records: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            records.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": {key.lower(): value for key, value in self.headers.items()},
                }
            )
            body = json.dumps(
                {"type": "error", "error": {"type": "invalid_request_error", "message": "scripted refusal"}}
            ).encode()
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield RefusingServer(f"http://127.0.0.1:{httpd.server_address[1]}", records)
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git worktree whose own `.claude/settings.json` has hooks that leave marks; a private HOME."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CODEX_HOME", str(home / ".codex"))
    (home / ".codex").mkdir()
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    worktree = tmp_path / "worktree"
    (worktree / ".claude").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(worktree)], check=True)
    hook = {"hooks": [{"type": "command", "command": f"touch {tmp_path}/hook-ran"}]}
    (worktree / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"SessionStart": [hook], "UserPromptSubmit": [hook]}})
    )
    return worktree


def request(repo: Path, *, read_only: bool = False) -> AgentRequest:
    return AgentRequest(
        prompt="Say hello.", cwd=repo, transcript=repo.parent / "t.jsonl", timeout=90, read_only=read_only
    )


@needs_claude
@pytest.mark.parametrize("read_only", [False, True])
def test_real_claude_gets_its_key_and_endpoint_from_lanebots_environment_and_skips_the_repos_hooks(
    repo: Path, server: RefusingServer, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-lanebots-environment")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    assert CLAUDE is not None
    agent = ClaudeAgent(ClaudeSettings(binary=CLAUDE))

    result = asyncio.run(agent.run(request(repo, read_only=read_only)))

    assert not result.timed_out
    assert result.error is not None and "scripted refusal" in result.error
    assert server.requests, "no request reached ANTHROPIC_BASE_URL"
    assert {record["headers"].get("x-api-key") for record in server.requests} == {"sk-ant-from-lanebots-environment"}
    assert not (repo.parent / "hook-ran").exists(), "the repository's .claude/settings.json hooks ran"


@needs_claude
@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="the root rule applies to root only")
def test_real_claude_in_bypass_permissions_mode_starts_as_root(
    repo: Path, server: RefusingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.delenv("IS_SANDBOX", raising=False)
    assert CLAUDE is not None
    agent = ClaudeAgent(ClaudeSettings(binary=CLAUDE, permission_mode="bypassPermissions"))

    result = asyncio.run(agent.run(request(repo)))

    assert result.error is not None and "cannot be used with root" not in result.error
    assert server.requests


@needs_codex
def test_real_codex_accepts_lanebots_command_line_and_gets_its_key_from_lanebots_environment(
    repo: Path, server: RefusingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Codex 0.171 takes its endpoint from its config (`openai_base_url`), not from OPENAI_BASE_URL.
    monkeypatch.setenv("CODEX_API_KEY", "sk-codex-from-lanebots-environment")
    assert CODEX is not None
    settings = CodexSettings(
        binary=CODEX, sandbox="workspace-write", extra_args=("-c", f'openai_base_url="{server.url}/v1"')
    )

    result = asyncio.run(CodexAgent(settings).run(request(repo)))

    assert not result.timed_out
    assert result.error is not None and "scripted refusal" in result.error
    assert server.requests, "no request reached the configured endpoint"
    assert {record["path"] for record in server.requests} == {"/v1/responses"}
    assert {record["headers"].get("authorization") for record in server.requests} == {
        "Bearer sk-codex-from-lanebots-environment"
    }
