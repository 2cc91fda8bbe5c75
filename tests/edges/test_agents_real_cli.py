"""lanebot's `claude` and `codex` adapters driving the real, pinned CLIs against a scripted model
server on loopback (tests/model_server): no model API, no network.

What they prove, for each CLI: a session writes the file the scenario names, runs a command whose
output reaches the model, and ends with the model's last text as the final message, usage
reported; the credentials and endpoint come from lanebot's environment; a read-only session cannot
write; every fault ends in a clear state and never hangs (an overloaded or rate-limited API and a
cut stream are retried and the session succeeds, a persistent fault is a clear error, a stream
that hangs is stopped by lanebot's timeout) and no process of the session remains afterwards.
For Claude Code also: a repository's `.claude/settings.json` hooks do not run, and
`bypassPermissions` starts as root.

Each test has a private HOME (and CODEX_HOME) and a git worktree in its tmp_path. Without the CLIs
(`make agents`) the tests skip; under CI=true they fail (tests/agent_clis.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.edges.agents import AgentJail, AgentRequest, AgentResult
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings
from bot.edges.agents.codex import CodexAgent, CodexSettings
from bot.runner.jailing import agent_jail
from tests.agent_clis import require_real_cli
from tests.model_server.scenarios import always, faults_then, report_last_outcome, scripted, write_then_run
from tests.model_server.script import Fault, FaultKind, Reply, RunCommand, WriteFile
from tests.model_server.server import ModelServer
from tests.process_helpers import processes_with, running

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_S = 60.0
HANG_TIMEOUT_S = 8.0
RECOVERED = "Recovered after the fault."
# Few retries, so a persistent fault ends in seconds (Claude Code's default is 10, with backoff).
CLAUDE_RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "2"}
LANEBOTS_OWN = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CODEX_HOME",
    "CODEX_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "IS_SANDBOX",
)


@dataclass(frozen=True)
class Session:
    """What a test runs a session in: its worktree, its private home, and where the hooks leave marks."""

    worktree: Path
    home: Path
    hook_mark: Path

    @property
    def codex_home(self) -> Path:
        return self.home / ".codex"


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Session:
    """A git worktree whose own `.claude/settings.json` has hooks that leave a mark; a private HOME;
    none of the host's agent credentials or settings in lanebot's environment."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in LANEBOTS_OWN:
        monkeypatch.delenv(name, raising=False)
    worktree = tmp_path / "worktree"
    (worktree / ".claude").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(worktree)], check=True)
    mark = tmp_path / "hook-ran"
    hook = {"hooks": [{"type": "command", "command": f"touch {mark}"}]}
    (worktree / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"SessionStart": [hook], "UserPromptSubmit": [hook], "PreToolUse": [hook]}})
    )
    return Session(worktree, home, mark)


@pytest.fixture
def claude() -> str:
    return require_real_cli("claude")


@pytest.fixture
def codex() -> str:
    return require_real_cli("codex")


def run(
    agent: ClaudeAgent | CodexAgent,
    session: Session,
    env: Mapping[str, str],
    *,
    read_only: bool = False,
    timeout: float = SESSION_TIMEOUT_S,
    prompt: str = "Do what the script says.",
    jail: AgentJail | None = None,
) -> tuple[AgentResult, list[int]]:
    """Run one session; the result, and the pid of the agent's process (its process group's id)."""
    started: list[int] = []
    request = AgentRequest(
        prompt=prompt,
        cwd=session.worktree,
        transcript=session.worktree.parent / "transcript.jsonl",
        timeout=timeout,
        env=dict(env),
        read_only=read_only,
        jail=jail,
    )
    return asyncio.run(agent.run(request, on_start=started.append)), started


def group_members(group: int) -> list[int]:
    """The live processes whose process group or session is `group`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if group in (int(fields[2]), int(fields[3])) and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def assert_nothing_left(started: list[int], marker: str | None = None) -> None:
    """No process of the session remains: none in its process group, none carrying `marker`."""
    assert len(started) == 1, "on_start was not called exactly once"
    deadline = time.monotonic() + 3
    while group_members(started[0]) or (marker is not None and processes_with(marker)):
        left = sorted({*group_members(started[0]), *(processes_with(marker) if marker else [])})
        assert time.monotonic() < deadline, f"processes of the session remain: {left}"
        time.sleep(0.05)


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[str]:
    """A word that names this test's background processes; any still running at the end are killed."""
    word = f"lanebot-test-{tmp_path.name}-{os.getpid()}"
    yield word
    for pid in processes_with(word):  # and their children: each leads a process group of its own
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)


def background_command(marker: str) -> str:
    """A command that leaves a process running in the background, named by `marker`."""
    return f"nohup sh -c 'sleep 120; :' {marker} >/dev/null 2>&1 & echo started"


def assert_wrote_and_ran(server: ModelServer, session: Session, result: AgentResult, tool: str) -> None:
    assert result.ok, result.error
    assert (session.worktree / "notes" / "hello.txt").read_text() == "hello from the script\n"
    outcomes = server.calls[-1].outcomes
    assert [outcome.is_error for outcome in outcomes] == [False, False], outcomes
    assert outcomes[-1].name == tool and "ran-42" in outcomes[-1].output
    assert result.final_message == "The command printed: ran-42"
    assert result.usage.input_tokens and result.usage.output_tokens


WRITE_AND_RUN = ("notes/hello.txt", "hello from the script\n", "echo ran-$((40 + 2))")


# ---------------------------------------------------------------------------------------- Claude Code


def test_claude_writes_a_file_runs_a_command_and_ends_with_the_models_last_text(
    claude: str, session: Session, model_server: ModelServer
) -> None:
    # lanebot's default permission mode (acceptEdits, Bash allowed) is what a lane runs with.
    model_server.responder = write_then_run(*WRITE_AND_RUN, final=report_last_outcome())

    result, started = run(ClaudeAgent(ClaudeSettings(binary=claude)), session, model_server.anthropic_env())

    assert_wrote_and_ran(model_server, session, result, "Bash")
    assert model_server.calls[-1].outcomes[0].name == "Write"  # at the path the system prompt names
    assert [call.prompt for call in model_server.calls] == ["Do what the script says."] * 3
    assert [call.turns for call in model_server.calls] == [0, 1, 2]
    assert not session.hook_mark.exists(), "the repository's .claude/settings.json hooks ran"
    assert_nothing_left(started)


@pytest.mark.parametrize("read_only", [False, True], ids=["writing", "read-only"])
def test_claude_gets_its_key_and_endpoint_from_lanebots_environment_and_skips_the_repos_hooks(
    claude: str, session: Session, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    env = model_server.anthropic_env()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", env.pop("ANTHROPIC_BASE_URL"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-lanebots-environment")
    del env["ANTHROPIC_API_KEY"]
    model_server.responder = scripted(Reply(text="Hello from the scripted model."))

    result, _ = run(ClaudeAgent(ClaudeSettings(binary=claude)), session, env, read_only=read_only)

    assert result.ok, result.error
    assert result.final_message == "Hello from the scripted model."
    posts = [record for record in model_server.requests if record.method == "POST"]
    assert posts, "no request reached ANTHROPIC_BASE_URL"
    assert {record.headers.get("x-api-key") for record in posts} == {"sk-ant-from-lanebots-environment"}
    assert not session.hook_mark.exists(), "the repository's .claude/settings.json hooks ran"


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="the root rule applies to root only")
def test_claude_in_bypass_permissions_mode_starts_as_root_and_works(
    claude: str, session: Session, model_server: ModelServer
) -> None:
    model_server.responder = write_then_run(*WRITE_AND_RUN, final=report_last_outcome())
    agent = ClaudeAgent(ClaudeSettings(binary=claude, permission_mode="bypassPermissions"))

    result, _ = run(agent, session, model_server.anthropic_env())

    assert_wrote_and_ran(model_server, session, result, "Bash")


def test_a_read_only_claude_session_cannot_write_or_run_commands(
    claude: str, session: Session, model_server: ModelServer
) -> None:
    model_server.responder = scripted(
        Reply(text="Writing.", actions=(WriteFile("plan.txt", "written\n"),)),
        Reply(text="Running.", actions=(RunCommand("touch ran.txt"),)),
        final=Reply(text="The plan, as text."),
    )

    result, _ = run(ClaudeAgent(ClaudeSettings(binary=claude)), session, model_server.anthropic_env(), read_only=True)

    assert result.ok, result.error
    assert result.final_message == "The plan, as text."
    assert not (session.worktree / "plan.txt").exists() and not (session.worktree / "ran.txt").exists()
    first = model_server.calls[0]
    assert "Write" not in first.tools and "Bash" not in first.tools
    assert [outcome.is_error for outcome in model_server.calls[-1].outcomes] == [True, True]


@pytest.mark.parametrize("kind", ["overloaded", "rate_limited", "cut"])
def test_claude_retries_a_passing_fault_and_the_session_succeeds(
    claude: str, session: Session, model_server: ModelServer, kind: FaultKind
) -> None:
    model_server.responder = faults_then([kind], Reply(text=RECOVERED))

    result, started = run(
        ClaudeAgent(ClaudeSettings(binary=claude)), session, {**model_server.anthropic_env(), **CLAUDE_RETRIES}
    )

    assert result.ok, result.error
    assert result.final_message == RECOVERED
    assert len(model_server.calls) == 2
    if kind != "cut":  # see the next test
        assert result.usage.input_tokens and result.usage.output_tokens
    assert_nothing_left(started)


def test_claude_reports_usage_after_a_cut_stream_was_retried(
    claude: str, session: Session, model_server: ModelServer
) -> None:
    model_server.responder = faults_then(["cut"], Reply(text=RECOVERED))

    result, _ = run(ClaudeAgent(ClaudeSettings(binary=claude)), session, model_server.anthropic_env())

    assert result.ok, result.error
    assert model_server.requests[-1].body.get("stream") is None  # the retry did not stream
    assert result.usage.cost_usd
    assert result.usage.input_tokens and result.usage.output_tokens


@pytest.mark.parametrize(
    ("kind", "says"),
    [("overloaded", "529"), ("rate_limited", "429"), ("cut", "connection")],
)
def test_a_persistent_fault_ends_the_claude_session_with_a_clear_error(
    claude: str, session: Session, model_server: ModelServer, kind: FaultKind, says: str
) -> None:
    model_server.responder = always(Fault(kind))

    result, started = run(
        ClaudeAgent(ClaudeSettings(binary=claude)), session, {**model_server.anthropic_env(), **CLAUDE_RETRIES}
    )

    assert not result.timed_out
    assert result.error is not None and says in result.error.lower()
    assert 2 <= len(model_server.calls) <= 3  # the first try and at most CLAUDE_CODE_MAX_RETRIES more
    assert_nothing_left(started)


def test_a_hanging_stream_is_stopped_by_lanebots_timeout_with_every_claude_process(
    claude: str, session: Session, model_server: ModelServer
) -> None:
    # Claude Code's own stream idle timeout cannot go below 5 minutes: lanebot's timeout stops it.
    model_server.responder = always(Fault("hang"))
    agent = ClaudeAgent(ClaudeSettings(binary=claude), grace_s=2)

    begun = time.monotonic()
    result, started = run(agent, session, model_server.anthropic_env(), timeout=HANG_TIMEOUT_S)

    assert result.timed_out and not result.ok
    assert result.error == f"the claude agent timed out after {HANG_TIMEOUT_S:g} s and was stopped"
    assert time.monotonic() - begun < HANG_TIMEOUT_S + 10
    assert_nothing_left(started)


def test_a_background_process_claude_started_outlives_an_unjailed_session_but_not_a_jailed_one(
    claude: str, session: Session, model_server: ModelServer, marker: str, tmp_path: Path
) -> None:
    """Claude Code runs each Bash command in a session of its own, so a process the agent leaves in
    the background is outside the process group lanebot stops: only the jail's PID namespace ends it."""
    agent = ClaudeAgent(ClaudeSettings(binary=claude), grace_s=2)
    model_server.responder = scripted(Reply(actions=(RunCommand(background_command(marker)),)), final=Fault("hang"))
    jail = asyncio.run(
        agent_jail(jail_settings(tmp_path), agent="claude", worktree=session.worktree, folder=tmp_path / "jail")
    )

    result, started = run(agent, session, model_server.anthropic_env(), timeout=HANG_TIMEOUT_S, jail=jail)

    assert result.timed_out
    assert model_server.calls[-1].outcomes[-1].output.strip() == "started"
    assert_nothing_left(started, marker)


def jail_settings(tmp_path: Path) -> SimpleNamespace:
    """What bot.runner.jailing.agent_jail reads of lanebot's settings."""
    return SimpleNamespace(
        unjailed=False, jail_read_only=(), workdir=tmp_path / "work", database_url="", private_key_path=None
    )


# ---------------------------------------------------------------------------------------- Codex


def codex_agent(codex: str, *, sandbox: str = "workspace-write") -> CodexAgent:
    return CodexAgent(CodexSettings(binary=codex, sandbox=sandbox), grace_s=2)


def test_codex_writes_a_file_runs_a_command_and_ends_with_the_models_last_text(
    codex: str, session: Session, model_server: ModelServer
) -> None:
    model_server.responder = write_then_run(*WRITE_AND_RUN, final=report_last_outcome())
    env = model_server.codex_config(session.codex_home)

    result, started = run(codex_agent(codex), session, env)

    assert_wrote_and_ran(model_server, session, result, "exec_command")
    assert model_server.calls[-1].outcomes[0].name == "apply_patch"
    assert [call.prompt for call in model_server.calls] == ["Do what the script says."] * 3
    assert [call.turns for call in model_server.calls] == [0, 1, 2]
    assert_nothing_left(started)


@pytest.mark.parametrize("builtin_provider", [False, True], ids=["own-provider", "openai-provider"])
def test_codex_gets_its_key_from_lanebots_environment(
    codex: str, session: Session, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch, builtin_provider: bool
) -> None:
    # Codex 0.171 takes its endpoint from its config (a provider's base_url, or openai_base_url),
    # not from OPENAI_BASE_URL; CODEX_HOME and the key come from lanebot's environment.
    env = model_server.codex_config(session.codex_home, builtin_provider=builtin_provider)
    key_variable = "CODEX_API_KEY" if builtin_provider else "OPENAI_API_KEY"
    del env[key_variable]
    monkeypatch.setenv(key_variable, "sk-codex-from-lanebots-environment")
    monkeypatch.setenv("CODEX_HOME", env.pop("CODEX_HOME"))
    model_server.responder = scripted(Reply(text="Hello from the scripted model."))

    result, _ = run(codex_agent(codex), session, env)

    assert result.ok, result.error
    assert result.final_message == "Hello from the scripted model."
    assert {record.path for record in model_server.requests} == {"/v1/responses"}
    assert {record.headers.get("authorization") for record in model_server.requests} == {
        "Bearer sk-codex-from-lanebots-environment"
    }


def test_a_read_only_codex_session_cannot_write_or_run_commands_that_write(
    codex: str, session: Session, model_server: ModelServer
) -> None:
    model_server.responder = scripted(
        Reply(text="Writing.", actions=(WriteFile("plan.txt", "written\n"),)),
        Reply(text="Running.", actions=(RunCommand("touch ran.txt"),)),
        final=Reply(text="The plan, as text."),
    )
    env = model_server.codex_config(session.codex_home)

    result, _ = run(codex_agent(codex, sandbox="workspace-write"), session, env, read_only=True)

    assert result.ok, result.error
    assert result.final_message == "The plan, as text."
    assert not (session.worktree / "plan.txt").exists() and not (session.worktree / "ran.txt").exists()
    patch, command = model_server.calls[-1].outcomes
    # Codex answers a refused patch with a sentence (no exit code); the command fails.
    assert patch.name == "apply_patch" and "read-only sandbox" in patch.output
    assert command.is_error and "Read-only file system" in command.output


@pytest.mark.parametrize("kind", ["overloaded", "rate_limited", "cut", "hang"])
def test_codex_retries_a_passing_fault_and_the_session_succeeds(
    codex: str, session: Session, model_server: ModelServer, kind: FaultKind
) -> None:
    model_server.responder = faults_then([kind], Reply(text=RECOVERED))
    env = model_server.codex_config(session.codex_home, stream_idle_timeout_ms=2000)

    result, started = run(codex_agent(codex), session, env)

    assert result.ok, result.error
    assert result.final_message == RECOVERED
    assert len(model_server.calls) == 2
    assert_nothing_left(started)


@pytest.mark.parametrize(
    ("kind", "says"),
    [
        ("overloaded", "capacity"),
        ("rate_limited", "429"),
        ("cut", "stream disconnected"),
        ("hang", "idle timeout"),
    ],
)
def test_a_persistent_fault_ends_the_codex_session_with_a_clear_error(
    codex: str, session: Session, model_server: ModelServer, kind: FaultKind, says: str
) -> None:
    model_server.responder = always(Fault(kind))
    env = model_server.codex_config(
        session.codex_home, request_max_retries=1, stream_max_retries=1, stream_idle_timeout_ms=1500
    )

    result, started = run(codex_agent(codex), session, env)

    assert not result.timed_out
    assert result.error is not None and says in result.error
    assert len(model_server.calls) == 2  # the first try and one retry
    assert_nothing_left(started)


def test_a_hanging_stream_is_stopped_by_lanebots_timeout_with_every_codex_process(
    codex: str, session: Session, model_server: ModelServer, marker: str
) -> None:
    # The hang comes after a command that left a process in the background.
    model_server.responder = scripted(Reply(actions=(RunCommand(background_command(marker)),)), final=Fault("hang"))
    env = model_server.codex_config(session.codex_home)  # Codex's own idle timeout: 5 minutes

    begun = time.monotonic()
    result, started = run(codex_agent(codex), session, env, timeout=HANG_TIMEOUT_S)

    assert result.timed_out and not result.ok
    assert time.monotonic() - begun < HANG_TIMEOUT_S + 10
    assert "started" in model_server.calls[-1].outcomes[-1].output
    assert_nothing_left(started, marker)
