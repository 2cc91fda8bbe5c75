"""Agent sessions in the jail: what a jailed CLI can see, what it gets, and that nothing of it outlives it.

The jail is the one the runner gives every session (bot.runner.jailing.agent_jail) around the
adapters' process runner (bot.edges.agents.process); the agents are the `command` adapter running
`sh` scripts, fake `claude` and `codex` scripts, and, where installed, the real CLIs against a
loopback server that refuses every request.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bot.edges.agents import AgentJail, AgentRequest, AgentResult
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings, claude_login_files
from bot.edges.agents.codex import CodexAgent, CodexSettings, codex_login_files
from bot.edges.agents.command import CommandAgent, CommandSettings
from bot.runner import jailing
from tests.agent_clis import require_real_cli
from tests.model_server.scenarios import report_last_outcome, scripted
from tests.model_server.script import Reply, RunCommand
from tests.model_server.server import ModelServer
from tests.process_helpers import gone, processes_with

SECRET = "lanebot-webhook-secret-5d1e"
TOKEN = "agent-token-9b27"


@pytest.fixture(autouse=True)
def _jail_works(bwrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the jail: it must work here (the fixture skips otherwise), and is probed afresh."""
    monkeypatch.setattr(jailing, "_probed", [])


class Host:
    """lanebot's files as a host has them: its workdir (with a run's worktrees), database, key, .env."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workdir = root / "work"
        self.worktree = self.workdir / "worktrees" / "acme" / "tasks" / "run-1" / "api"
        self.other_worktree = self.workdir / "worktrees" / "acme" / "tasks" / "run-1" / "ui"
        self.keys = root / "keys"
        self.key = self.keys / "app.private-key.pem"
        self.database = root / "lanebot.db"
        for folder in (self.worktree, self.other_worktree, self.keys):
            folder.mkdir(parents=True)
        (self.other_worktree / "notes.txt").write_text("another lane's work\n")
        (self.workdir / "lanebot-workdir.txt").write_text("lanebot's own\n")
        self.key.write_text("-----BEGIN PRIVATE KEY----- lanebot's\n")
        self.database.write_text("SQLite format 3\n")

    def settings(self, **overrides: Any) -> SimpleNamespace:
        values: dict[str, Any] = {
            "workdir": self.workdir,
            "database_url": f"sqlite:///{self.database}",
            "private_key_path": self.key,
            "jail_read_only": (self.keys,),  # the key's folder shown on purpose: the key itself stays masked
            "unjailed": False,
        }
        return SimpleNamespace(**{**values, **overrides})

    async def jail(self, name: str = "session-1", **overrides: Any) -> AgentJail | None:
        return await jailing.agent_jail(
            self.settings(**overrides),
            agent="command",
            worktree=self.worktree,
            folder=self.workdir / "scratch" / "1" / "jail" / name,
        )

    def request(self, jail: AgentJail | None, *, timeout: float = 60, prompt: str = "do the work") -> AgentRequest:
        return AgentRequest(
            prompt=prompt,
            cwd=self.worktree,
            transcript=self.root / f"{uuid.uuid4().hex}.jsonl",
            timeout=timeout,
            jail=jail,
        )


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def shell_agent(script: str, *, env: tuple[str, ...] = ()) -> CommandAgent:
    return CommandAgent(CommandSettings(argv=("sh", "-c", script), env=env), grace_s=1)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# --------------------------------------------------------------------------- what a jailed agent sees


def test_a_jailed_agent_cannot_read_lanebots_environment_key_database_workdir_or_other_worktrees(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("MY_AGENT_TOKEN", TOKEN)
    script = (
        "{ env; cat /proc/1/environ | tr '\\0' '\\n';"
        f" for f in {host.key} {host.database} {host.other_worktree}/notes.txt {host.workdir}/lanebot-workdir.txt;"
        ' do if [ -s "$f" ]; then echo "OPENED $f"; else echo "ABSENT $f"; fi; done;'
        ' echo "token=$MY_AGENT_TOKEN"; echo "prompt=$(cat "$LANEBOT_PROMPT_FILE")"; } > seen.txt 2>&1'
    )
    result = run(shell_agent(script, env=("MY_AGENT_TOKEN",)).run(host.request(run(host.jail()))))

    assert result.ok, result.error
    seen = (host.worktree / "seen.txt").read_text()
    assert SECRET not in seen and "WEBHOOK_SECRET" not in seen
    assert "OPENED" not in seen
    assert seen.count("ABSENT ") == 4
    assert f"token={TOKEN}" in seen  # the variable the adapter passes does arrive
    assert "prompt=do the work" in seen  # the prompt file is in the jail's own temp


@pytest.mark.skipif(not Path("/etc/shadow").is_file(), reason="this host has no /etc/shadow")
def test_a_jailed_agent_sees_the_systems_configuration_but_not_the_hosts_password_hashes(host: Host) -> None:
    script = "{ test -s /etc/passwd && echo passwd-shown; test -s /etc/shadow || echo shadow-empty; } > seen.txt"

    result = run(shell_agent(script).run(host.request(run(host.jail()))))

    assert result.ok, result.error
    assert (host.worktree / "seen.txt").read_text().split() == ["passwd-shown", "shadow-empty"]


def test_a_jailed_agent_has_a_private_home_and_temp_of_its_own_and_no_host_path_in_its_environment(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(host.root / "lanebot-config"))
    jail = run(host.jail("session-7"))
    assert jail is not None
    result = run(shell_agent('echo "$HOME $TMPDIR ${XDG_CONFIG_HOME-unset}" > where.txt').run(host.request(jail)))

    assert result.ok, result.error
    assert (host.worktree / "where.txt").read_text().split() == [str(jail.home), str(jail.tmp), "unset"]
    assert jail.home.is_relative_to(host.workdir / "scratch" / "1" / "jail" / "session-7")
    assert stat.S_IMODE(jail.home.stat().st_mode) == 0o700


def test_no_variable_of_a_jailed_session_is_in_any_process_argv(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_AGENT_TOKEN", TOKEN)
    argvs: list[bytes] = []

    def started(pid: int) -> None:  # bwrap, as soon as it exists: what /proc/<pid>/cmdline shows every user
        argvs.append(Path(f"/proc/{pid}/cmdline").read_bytes())

    agent = shell_agent("sleep 0.3; echo done", env=("MY_AGENT_TOKEN",))
    result = run(agent.run(host.request(run(host.jail())), on_start=started))

    assert result.ok, result.error
    assert argvs and b"bwrap" in argvs[0]
    assert TOKEN.encode() not in argvs[0] and b"MY_AGENT_TOKEN" not in argvs[0]


# --------------------------------------------------------------------------- nothing outlives a session

LEFT_BEHIND = (
    "setsid sh -c 'sleep 300; : {marker}-setsid' &\nsh -c \"(sh -c 'sleep 300; : {marker}-daemon' &) &\"\nsleep 0.3\n"
)


def test_when_a_jailed_agent_exits_its_setsid_children_and_daemons_are_gone(host: Host) -> None:
    marker = f"lanebot-left-{uuid.uuid4().hex}"
    result = run(shell_agent(LEFT_BEHIND.format(marker=marker) + "echo bye").run(host.request(run(host.jail()))))

    assert result.ok, result.error
    assert gone(marker), processes_with(marker)


def test_when_a_jailed_agent_times_out_everything_it_started_is_gone(host: Host) -> None:
    marker = f"lanebot-hung-{uuid.uuid4().hex}"
    script = LEFT_BEHIND.format(marker=marker) + "sleep 300"
    result = run(shell_agent(script).run(host.request(run(host.jail()), timeout=1.5)))

    assert result.timed_out
    assert gone(marker), processes_with(marker)


def test_when_a_jailed_session_is_cancelled_everything_it_started_is_gone(host: Host) -> None:
    marker = f"lanebot-cancelled-{uuid.uuid4().hex}"
    script = LEFT_BEHIND.format(marker=marker) + "sleep 300"

    async def cancel_midway() -> None:
        session = asyncio.ensure_future(shell_agent(script).run(host.request(await host.jail())))
        for _ in range(200):
            if len(processes_with(marker)) >= 2:
                break
            await asyncio.sleep(0.02)
        assert len(processes_with(marker)) >= 2, "the agent never started its children"
        session.cancel()
        with pytest.raises(asyncio.CancelledError):
            await session

    run(cancel_midway())
    assert gone(marker), processes_with(marker)


# --------------------------------------------------------------------------- refusal and the opt-out


def test_without_a_working_jail_a_session_is_refused_with_the_reason_and_the_opt_out(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jailing, "_probed", [jailing.JailProblem("bubblewrap is not installed", "install it")])
    with pytest.raises(jailing.JailRefused, match="bubblewrap is not installed.*LANEBOT_UNJAILED=1"):
        run(host.jail())
    assert run(host.jail(unjailed=True)) is None  # the operator opted out: a plain process


def test_agents_that_start_no_process_get_no_jail(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jailing, "_probed", [jailing.JailProblem("bubblewrap is not installed", "install it")])
    for agent in ("recipe", "http"):
        jail = run(jailing.agent_jail(host.settings(), agent=agent, worktree=host.worktree, folder=host.root / "j"))
        assert jail is None


# --------------------------------------------------------------------------- logins copied into the home

FAKE_CLAUDE = """#!/bin/sh
cat > /dev/null
mode=$(stat -c %a "$CLAUDE_CONFIG_DIR/.credentials.json")
login=$(cat "$CLAUDE_CONFIG_DIR/.credentials.json" "$CLAUDE_CONFIG_DIR/.claude.json" | tr '\\n' ' ')
echo "{\\"type\\":\\"result\\",\\"subtype\\":\\"success\\",\\"is_error\\":false,\\"result\\":\\"$mode $login\\"}"
"""

FAKE_CODEX = """#!/bin/sh
cat > /dev/null
while [ "$#" -gt 0 ]; do [ "$1" = --output-last-message ] && out="$2"; shift; done
cat "$CODEX_HOME/auth.json" "$CODEX_HOME/config.toml" | tr '\\n' ' ' > "$out"
echo '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}'
"""


def _install(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)


def test_claudes_host_login_is_copied_into_the_jails_home_privately_for_the_session_alone(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = host.root / "lanebot-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text("oauth-login\n")
    (home / ".claude.json").write_text("onboarded\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    _install(host.root / "bin", "claude", FAKE_CLAUDE)
    jail = run(host.jail())
    assert jail is not None
    agent = ClaudeAgent(ClaudeSettings(binary=str(host.root / "bin" / "claude")), grace_s=1)

    result = run(agent.run(host.request(jail)))

    assert result.ok, result.error
    assert result.final_message.split() == ["600", "oauth-login", "onboarded"]
    assert not (jail.home / ".claude" / ".credentials.json").exists()  # removed when the session ended
    assert (home / ".claude" / ".credentials.json").read_text() == "oauth-login\n"


REFRESHING_CLAUDE = """#!/bin/sh
cat > /dev/null
printf '%s' "$REFRESHED" > "$CLAUDE_CONFIG_DIR/.credentials.json"
printf 'rewritten state' > "$CLAUDE_CONFIG_DIR/.claude.json"
echo '{"type":"result","subtype":"success","is_error":false,"result":"refreshed"}'
"""


@pytest.mark.parametrize(
    ("refreshed", "host_after"),
    [
        ('{"claudeAiOauth": {"refreshToken": "rotated"}}', '{"claudeAiOauth": {"refreshToken": "rotated"}}'),
        ("not json: an agent's scribble", '{"claudeAiOauth": {"refreshToken": "first"}}'),
    ],
    ids=["a-refreshed-login-goes-back", "anything-else-does-not"],
)
def test_a_login_the_cli_refreshed_in_the_jail_goes_back_to_the_host_and_nothing_else_does(
    host: Host, monkeypatch: pytest.MonkeyPatch, refreshed: str, host_after: str
) -> None:
    home = host.root / "lanebot-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": {"refreshToken": "first"}}')
    (home / ".claude" / ".credentials.json").chmod(0o600)
    (home / ".claude.json").write_text("onboarded\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    _install(host.root / "bin", "claude", REFRESHING_CLAUDE)
    agent = ClaudeAgent(ClaudeSettings(binary=str(host.root / "bin" / "claude"), env=("REFRESHED",)), grace_s=1)
    monkeypatch.setenv("REFRESHED", refreshed)

    result = run(agent.run(host.request(run(host.jail()))))

    assert result.ok, result.error
    assert (home / ".claude" / ".credentials.json").read_text() == host_after
    assert (home / ".claude" / ".credentials.json").stat().st_mode & 0o777 == 0o600
    assert (home / ".claude.json").read_text() == "onboarded\n"  # the CLI's state is the session's alone


def test_codex_writes_its_last_message_in_the_jails_temp_with_its_host_login_copied(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex_home = host.root / "codex-home"
    codex_home.mkdir()
    (codex_home / "auth.json").write_text("codex-login\n")
    (codex_home / "config.toml").write_text("model = 'x'\n")
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    _install(host.root / "bin", "codex", FAKE_CODEX)
    jail = run(host.jail())
    assert jail is not None
    agent = CodexAgent(CodexSettings(binary=str(host.root / "bin" / "codex")), grace_s=1)

    result = run(agent.run(host.request(jail)))

    assert result.ok, result.error
    assert result.final_message.split() == ["codex-login", "model", "=", "'x'"]  # read from the jail's temp
    assert list(jail.tmp.iterdir()) == [] and not (jail.home / ".codex" / "auth.json").exists()


def test_login_files_come_from_the_configured_folders_when_lanebot_names_them(tmp_path: Path) -> None:
    jail = SimpleNamespace(home=tmp_path / "jail-home", tmp=tmp_path / "jail-tmp")
    claude = claude_login_files(jail, {"CLAUDE_CONFIG_DIR": "/srv/claude", "HOME": "/home/bot"})  # type: ignore[arg-type]
    assert claude == [
        (Path("/srv/claude/.credentials.json"), jail.home / ".claude" / ".credentials.json"),
        (Path("/srv/claude/.claude.json"), jail.home / ".claude" / ".claude.json"),
    ]
    assert claude_login_files(jail, {"HOME": "/home/bot"})[1][0] == Path("/home/bot/.claude.json")  # type: ignore[arg-type]
    codex = codex_login_files(jail, {"HOME": "/home/bot"})  # type: ignore[arg-type]
    assert [source for source, _ in codex] == [Path("/home/bot/.codex/auth.json"), Path("/home/bot/.codex/config.toml")]
    assert codex_login_files(jail, {"CODEX_HOME": "/srv/codex"})[0][0] == Path("/srv/codex/auth.json")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the real CLIs


class _Refusing(http.server.BaseHTTPRequestHandler):
    """Refuses every request, and remembers its path."""

    paths: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.paths.append(self.path)
        body = json.dumps({"error": {"type": "invalid_request_error", "message": "refused by the test"}}).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[int, list[str]]]:
    paths: list[str] = []
    handler = type("Handler", (_Refusing,), {"paths": paths})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], paths
    finally:
        server.shutdown()
        server.server_close()


def _ended_by_the_server(result: AgentResult) -> None:
    assert not result.timed_out and not result.ok
    assert result.exit_status is not None or result.error


def test_the_real_claude_starts_in_the_jail_and_reaches_its_model(
    host: Host, refusing_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = require_real_cli("claude")
    port, paths = refusing_server
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    agent = ClaudeAgent(ClaudeSettings(binary=binary), grace_s=1)

    result = run(agent.run(host.request(run(host.jail()), timeout=90)))

    _ended_by_the_server(result)
    assert any(path.startswith("/v1/messages") for path in paths), result.error


def test_the_real_codex_starts_in_the_jail_with_its_copied_config_and_reaches_its_model(
    host: Host, refusing_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = require_real_cli("codex")
    port, paths = refusing_server
    codex_home = host.root / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "gpt-test"\nmodel_provider = "refusing"\n[model_providers.refusing]\nname = "refusing"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\nwire_api = "responses"\nenv_key = "OPENAI_API_KEY"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = CodexAgent(CodexSettings(binary=binary, extra_args=("--skip-git-repo-check",)), grace_s=1)

    result = run(agent.run(host.request(run(host.jail()), timeout=90)))

    _ended_by_the_server(result)
    assert "/v1/responses" in paths, result.error
    assert "refused by the test" in (result.error or "")
    assert sorted(path.name for path in codex_home.iterdir()) == ["config.toml"]


# --------------------------------------------------------------------------- the real CLIs at work, jailed


def test_the_real_claude_runs_its_shell_tool_inside_the_jail(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    binary = require_real_cli("claude")
    command = f'echo "$HOME" > where.txt; test -e {host.other_worktree} && echo sees-other || echo blind-other'
    with ModelServer(scripted(Reply(actions=(RunCommand(command),)), final=report_last_outcome())) as server:
        for name, value in server.anthropic_env().items():
            monkeypatch.setenv(name, value)
        jail = run(host.jail())
        assert jail is not None
        result = run(ClaudeAgent(ClaudeSettings(binary=binary), grace_s=1).run(host.request(jail, timeout=120)))

    assert result.ok, result.error
    assert (host.worktree / "where.txt").read_text().strip() == str(jail.home)
    assert "blind-other" in result.final_message


@pytest.mark.parametrize("read_only", [False, True], ids=["workspace-write", "read-only"])
def test_the_real_codex_keeps_its_own_sandbox_inside_the_jail(
    host: Host, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    binary = require_real_cli("codex")
    command = "echo inside > made.txt && echo wrote || echo refused"
    with ModelServer(scripted(Reply(actions=(RunCommand(command),)), final=report_last_outcome())) as server:
        for name, value in server.codex_config(host.root / "codex-home").items():
            if name != "TMPDIR":  # the jail has its own
                monkeypatch.setenv(name, value)
        jail = run(host.jail())
        assert jail is not None
        agent = CodexAgent(CodexSettings(binary=binary, extra_args=("--skip-git-repo-check",)), grace_s=1)
        request = AgentRequest(
            prompt="make the file",
            cwd=host.worktree,
            transcript=host.root / "codex.jsonl",
            timeout=120,
            read_only=read_only,
            jail=jail,
        )
        result = run(agent.run(request))

    assert result.ok, result.error
    # Codex's sandbox runs its commands nested in the jail: the worktree is writable only with workspace-write.
    assert (host.worktree / "made.txt").exists() is not read_only
    assert ("refused" if read_only else "wrote") in result.final_message
