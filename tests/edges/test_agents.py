"""Agent adapters, as specifications of behaviour.

The CLI adapters run real subprocesses: `tests/agents_fixtures/fake_agent.py`, installed under the
binary name an adapter looks for, records its argv, stdin and environment and replays output that the
real CLIs printed (samples copied from public repositories, see `agents_fixtures/*.source.md`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import respx

from bot.core.workflow import CLAUDE_ENV, CLAUDE_ENV_PREFIXES, NETWORK_ENV
from bot.edges.agents import AGENT_NAMES, AgentConfigError, AgentNotFound, AgentRequest, make_agent
from bot.edges.agents import process as agent_process
from bot.edges.agents import transcript as agent_transcript
from bot.edges.agents.claude import ClaudeAgent, ClaudeSettings, ClaudeStreamParser, claude_argv, claude_usage
from bot.edges.agents.codex import CodexAgent, CodexSettings, CodexStreamParser
from bot.edges.agents.recipe import parse_recipe

FIXTURES = Path(__file__).resolve().parents[1] / "agents_fixtures"
FAKE_AGENT = FIXTURES / "fake_agent.py"
PROMPT = (
    "Implement unit `alpha`.\nPROMPT-MARKER-7f3a: this text must never reach argv; "
    "it has 'quotes', \"doubles\", $(a subshell) and `backticks`."
)
HAS_PROC = Path("/proc/self/stat").exists()


@dataclass
class Bench:
    """A scratch worktree, a bin directory for fake agents, and what the fake recorded."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def cwd(self) -> Path:
        return self.root / "worktree"

    @property
    def record(self) -> Path:
        return self.root / "record.json"

    @property
    def pidfile(self) -> Path:
        return self.root / "child.pid"

    @property
    def transcript(self) -> Path:
        return self.root / "transcripts" / "attempt-1.jsonl"

    def install(self, name: str) -> None:
        wrapper = self.bin / name
        wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_AGENT))} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def env(
        self, *, mode: str = "replay", replay: str | None = None, exit_status: int = 0, **extra: str
    ) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
            "FAKE_RECORD": str(self.record),
            "FAKE_PIDFILE": str(self.pidfile),
            "FAKE_MODE": mode,
            "FAKE_EXIT": str(exit_status),
            **extra,
        }
        if replay is not None:
            env["FAKE_REPLAY"] = str(FIXTURES / replay)
        return env

    def request(
        self,
        env: dict[str, str],
        *,
        prompt: str = PROMPT,
        timeout: float = 30,
        read_only: bool = False,
        brief: str | None = None,
    ) -> AgentRequest:
        return AgentRequest(
            prompt=prompt,
            cwd=self.cwd,
            transcript=self.transcript,
            timeout=timeout,
            env=env,
            read_only=read_only,
            brief=brief,
        )

    def recorded(self) -> dict[str, Any]:
        return json.loads(self.record.read_text())

    def transcript_lines(self) -> list[str]:
        return self.transcript.read_text().splitlines()

    def transcript_events(self) -> list[dict[str, Any]]:
        events = [json.loads(line) for line in self.transcript_lines()]
        assert all(isinstance(event, dict) for event in events)
        return events

    def annotations(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.transcript_events() if event.get("lanebot") == kind]


@pytest.fixture
def bench(tmp_path: Path) -> Bench:
    bench = Bench(tmp_path)
    bench.bin.mkdir()
    bench.cwd.mkdir()
    return bench


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def sample_lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def live_members_of_group(group: int) -> list[int]:
    """Processes of `group` that are not dead (a zombie is dead, only not yet reaped)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if fields[2] == str(group) and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def is_running(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


async def until_exists(path: Path) -> None:
    """Wait for the fake agent to reach a point it marks with a file (a condition, not a duration)."""
    for _ in range(1000):
        if path.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


# --- claude ---------------------------------------------------------------------------------------


def test_claude_replaying_a_recorded_success_gives_its_result_usage_and_cost(bench: Bench) -> None:
    bench.install("claude")
    agent = make_agent("claude", {})

    result = run(agent.run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    assert result.ok, result.error
    assert result.exit_status == 0
    assert result.final_message == "ABRACADABRA"
    assert result.usage.input_tokens == 11 + 489 + 29482  # input + cache writes + cache reads
    assert result.usage.output_tokens == 235
    assert result.usage.cost_usd == pytest.approx(0.09007774999999998)
    assert result.transcript == bench.transcript


def test_claude_gets_the_prompt_on_stdin_and_never_in_argv(bench: Bench) -> None:
    bench.install("claude")
    run(make_agent("claude", None).run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    recorded = bench.recorded()
    assert recorded["stdin"] == PROMPT
    assert recorded["argv"] == [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--setting-sources",
        "user",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Bash",
    ]
    assert not any("PROMPT-MARKER" in argument for argument in recorded["argv"])
    assert Path(recorded["cwd"]).resolve() == bench.cwd.resolve()
    (start,) = bench.annotations("start")
    assert start["argv"][0] == str(bench.bin / "claude")
    assert "PROMPT-MARKER" not in bench.transcript.read_text()


def test_claude_settings_choose_mode_model_and_extra_arguments(bench: Bench) -> None:
    bench.install("claude")
    agent = make_agent(
        "claude",
        {"permission_mode": "bypassPermissions", "model": "claude-sonnet-4-5", "extra_args": ["--max-turns", "40"]},
    )
    run(agent.run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    assert bench.recorded()["argv"] == [
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--setting-sources",
        "user",
        "--permission-mode",
        "bypassPermissions",
        "--model",
        "claude-sonnet-4-5",
        "--max-turns",
        "40",
    ]
    assert bench.recorded()["env"]["IS_SANDBOX"] == "1"


def test_claude_read_only_runs_in_plan_mode_with_editing_and_shell_tools_denied(bench: Bench) -> None:
    bench.install("claude")
    agent = make_agent("claude", {"permission_mode": "bypassPermissions"})
    run(agent.run(bench.request(bench.env(replay="claude_stream_success.jsonl"), read_only=True)))

    argv = bench.recorded()["argv"]
    assert argv[argv.index("--permission-mode") + 1] == "plan"
    denied = argv[argv.index("--disallowedTools") + 1].split(",")
    assert {"Bash", "Edit", "MultiEdit", "Write", "NotebookEdit", "ExitPlanMode"} <= set(denied)


def test_claude_error_result_is_a_failure_named_by_its_subtype_even_when_is_error_is_false(bench: Bench) -> None:
    bench.install("claude")
    result = run(
        make_agent("claude", {}).run(bench.request(bench.env(replay="claude_stream_error_during_execution.jsonl")))
    )

    assert not result.ok
    assert "error_during_execution" in result.error
    assert result.usage.cost_usd == pytest.approx(0.21045915)
    assert result.usage.output_tokens == 4075


def test_claude_reporting_success_but_exiting_non_zero_is_a_failure(bench: Bench) -> None:
    bench.install("claude")
    result = run(
        make_agent("claude", {}).run(bench.request(bench.env(replay="claude_stream_success.jsonl", exit_status=2)))
    )

    assert not result.ok
    assert result.exit_status == 2
    assert "exited with status 2" in result.error


def test_claude_crash_without_a_result_event_says_so_with_its_stderr(bench: Bench) -> None:
    bench.install("claude")
    result = run(make_agent("claude", {}).run(bench.request(bench.env(mode="crash"))))

    assert not result.ok
    assert result.exit_status == 3
    assert "status 3" in result.error and "without a result event" in result.error
    assert "something broke in the fake agent" in result.error
    assert {"lanebot": "stderr", "text": "fatal: something broke in the fake agent"} in bench.transcript_events()


def test_missing_claude_binary_raises_agent_not_found_naming_the_binary_and_the_setting(bench: Bench) -> None:
    agent = make_agent("claude", {"binary": "claude-not-installed"})

    with pytest.raises(AgentNotFound) as raised:
        run(agent.run(bench.request({"PATH": str(bench.bin)})))

    assert "`claude-not-installed`" in str(raised.value)
    assert "agents.claude.binary" in str(raised.value)
    assert bench.annotations("not_found")


def test_claude_stream_parser_ignores_unknown_events_and_non_json_lines() -> None:
    parser = ClaudeStreamParser()
    for line in (
        '{"type":"rate_limit_event","rate_limit_info":{"status":"allowed"}}',
        "not json",
        '{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":50,'
        '"errors":["Reached maximum number of turns (50)"]}',
    ):
        parser.feed(line, json.loads(line) if line.startswith("{") else None)

    conclusion = parser.conclude(1)

    assert conclusion.error == "claude ended with error_max_turns: Reached maximum number of turns (50)"
    assert conclusion.usage.input_tokens is None and conclusion.usage.cost_usd is None


def test_claude_usage_all_zero_after_a_retried_stream_gives_way_to_the_per_model_counts() -> None:
    result = {
        "usage": {"input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0},
        "modelUsage": {
            "claude-opus-4-8": {"inputTokens": 120, "cacheReadInputTokens": 30, "outputTokens": 12},
            "claude-haiku-4-5": {"inputTokens": 5, "outputTokens": 1},
        },
        "total_cost_usd": 0.0042,
    }

    usage = claude_usage(result)

    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (155, 13, 0.0042)


def test_claude_usage_prefers_the_sessions_own_count_when_it_has_one() -> None:
    result = {
        "usage": {"input_tokens": 7, "output_tokens": 3},
        "modelUsage": {"m": {"inputTokens": 99, "outputTokens": 99}},
    }

    assert (claude_usage(result).input_tokens, claude_usage(result).output_tokens) == (7, 3)


# --- codex ----------------------------------------------------------------------------------------


def test_codex_replaying_a_recorded_session_gives_the_last_agent_message_and_usage(bench: Bench) -> None:
    bench.install("codex")
    result = run(make_agent("codex", {}).run(bench.request(bench.env(replay="codex_exec_command.jsonl"))))

    assert result.ok, result.error
    assert result.final_message == "`sample.txt` contains:\n\ntest content"
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.cost_usd) == (6032, 114, None)


def test_codex_reads_the_prompt_from_stdin_via_dash_and_writes_in_a_workspace_sandbox(bench: Bench) -> None:
    bench.install("codex")
    run(make_agent("codex", {}).run(bench.request(bench.env(replay="codex_exec_file_change.jsonl"))))

    recorded = bench.recorded()
    argv = recorded["argv"]
    assert argv[:4] == ["exec", "--json", "--sandbox", "workspace-write"]
    assert argv[4] == "--output-last-message" and not Path(argv[5]).is_relative_to(bench.root)
    assert argv[6:] == ["-"]
    assert not Path(argv[5]).parent.exists()  # the folder of the last message is removed afterwards
    assert recorded["stdin"] == PROMPT


def test_codex_read_only_uses_the_read_only_sandbox_and_the_configured_model(bench: Bench) -> None:
    bench.install("codex")
    agent = make_agent("codex", SimpleNamespace(binary="codex", model="gpt-5-codex", extra_args=["--ephemeral"]))
    result = run(agent.run(bench.request(bench.env(replay="codex_exec_file_change.jsonl"), read_only=True)))

    argv = bench.recorded()["argv"]
    assert argv[:6] == ["exec", "--json", "--model", "gpt-5-codex", "--sandbox", "read-only"]
    assert argv[6] == "--output-last-message"
    assert argv[8:] == ["--ephemeral", "-"]
    assert result.final_message.startswith("Created `new.txt`")


def test_codex_failed_turn_is_a_failure_carrying_codex_message(bench: Bench) -> None:
    bench.install("codex")
    result = run(make_agent("codex", {}).run(bench.request(bench.env(replay="codex_exec_turn_failed.jsonl"))))

    assert not result.ok
    assert "shared rollout token budget exhausted" in result.error
    assert result.final_message == "ok"


def test_codex_transient_error_followed_by_a_completed_turn_is_a_success() -> None:
    parser = _feed(
        CodexStreamParser(),
        [
            '{"type":"thread.started","thread_id":"t1"}',
            '{"type":"error","message":"Reconnecting... 1/5 (stream disconnected before completion)"}',
            '{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Falling back to HTTPS."}}',
            '{"type":"item.completed","item":{"id":"item_1","type":"agent_message","text":"done"}}',
            '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":5,"output_tokens":3}}',
        ],
    )

    conclusion = parser.conclude(0)

    assert conclusion.error is None
    assert conclusion.final_message == "done"
    assert (conclusion.usage.input_tokens, conclusion.usage.output_tokens) == (10, 3)


def test_codex_error_never_followed_by_a_completed_turn_is_a_failure() -> None:
    parser = _feed(
        CodexStreamParser(),
        [
            '{"type":"turn.started"}',
            '{"type":"error","message":"unexpected status 401 Unauthorized"}',
        ],
    )

    assert parser.conclude(1).error == "codex reported an error: unexpected status 401 Unauthorized"


def test_codex_session_without_turn_completed_is_a_failure() -> None:
    parser = _feed(CodexStreamParser(), ['{"type":"thread.started","thread_id":"t1"}', '{"type":"turn.started"}'])

    assert parser.conclude(0).error == "codex exited with status 0 without a turn.completed event"


def test_codex_older_msg_shaped_stream_is_read_too() -> None:
    parser = _feed(
        CodexStreamParser(),
        [
            '{"id":"0","msg":{"type":"task_started"}}',
            '{"id":"0","msg":{"type":"agent_message","message":"legacy"}}',
            '{"id":"0","msg":{"type":"token_count","info":{"total_token_usage":{"input_tokens":7,"output_tokens":2}}}}',
            '{"id":"0","msg":{"type":"task_complete","last_agent_message":"Legacy final."}}',
        ],
    )

    conclusion = parser.conclude(0)

    assert conclusion.error is None
    assert conclusion.final_message == "Legacy final."
    assert (conclusion.usage.input_tokens, conclusion.usage.output_tokens) == (7, 2)


def test_missing_codex_binary_names_the_setting(bench: Bench) -> None:
    with pytest.raises(AgentNotFound, match="agents.codex.binary"):
        run(make_agent("codex", {}).run(bench.request({"PATH": str(bench.bin)})))


def _feed(parser: Any, lines: list[str]) -> Any:
    for line in lines:
        parser.feed(line, json.loads(line))
    return parser


# --- command --------------------------------------------------------------------------------------


def test_command_gets_the_prompt_on_stdin_and_in_a_temporary_file_removed_afterwards(bench: Bench) -> None:
    bench.install("my-agent")
    agent = make_agent("command", {"argv": ["my-agent", "--flag", "value"]})

    result = run(agent.run(bench.request(bench.env(replay="codex_exec_command.jsonl"))))

    recorded = bench.recorded()
    assert recorded["argv"] == ["--flag", "value"]
    assert recorded["stdin"] == PROMPT
    assert recorded["prompt_file_text"] == PROMPT
    prompt_file = Path(recorded["prompt_file"])
    assert not prompt_file.resolve().is_relative_to(bench.cwd.resolve())
    assert not prompt_file.exists()
    assert recorded["env"]["LANEBOT_READ_ONLY"] == "0"
    assert result.ok
    assert result.final_message == sample_lines("codex_exec_command.jsonl")[-1]


class RecordingJail:
    """An AgentJail that records what it was asked to wrap and starts the command as it was given."""

    def __init__(self, root: Path) -> None:
        self.home, self.tmp = root / "jail-home", root / "jail-tmp"
        self.tmp.mkdir(parents=True)
        self.asked: list[tuple[str, list[str], dict[str, str], Path]] = []

    def command(self, executable: str, arguments: Any, *, env: Any, cwd: Path) -> tuple[list[str], dict[str, str]]:
        self.asked.append((executable, list(arguments), dict(env), cwd))
        return [executable, *arguments], {**env, "HOME": str(self.home), "TMPDIR": str(self.tmp)}


def test_with_a_jail_the_session_starts_what_the_jail_says_with_no_host_folder_in_its_environment(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    bench.install("my-agent")
    for name in ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.setenv(name, f"/host/{name.lower()}")
    jail = RecordingJail(bench.root)
    request = dataclasses.replace(bench.request(bench.env(replay="codex_exec_command.jsonl")), jail=jail)

    result = run(make_agent("command", {"argv": ["my-agent", "--flag"]}).run(request))

    assert result.ok, result.error
    [(executable, arguments, env, cwd)] = jail.asked
    assert executable == str(bench.bin / "my-agent") and arguments == ["--flag"] and cwd == bench.cwd
    assert not {"HOME", "TMPDIR", "XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR"} & set(env)
    assert Path(env["LANEBOT_PROMPT_FILE"]).parent == jail.tmp  # the prompt file is where the jail can read it
    assert bench.annotations("start")[0]["jailed"] is True


def test_command_final_message_is_the_last_json_result_when_the_tool_prints_one(bench: Bench) -> None:
    bench.install("my-agent")
    result = run(
        make_agent("command", {"argv": ["my-agent"]}).run(
            bench.request(bench.env(replay="claude_stream_success.jsonl"), read_only=True)
        )
    )

    assert result.final_message == "ABRACADABRA"
    assert bench.recorded()["env"]["LANEBOT_READ_ONLY"] == "1"


def test_command_exit_status_decides_success(bench: Bench) -> None:
    bench.install("my-agent")
    result = run(
        make_agent("command", {"argv": ["my-agent"]}).run(
            bench.request(bench.env(replay="codex_exec_command.jsonl", exit_status=4))
        )
    )

    assert not result.ok
    assert result.exit_status == 4
    assert result.error == "the command agent exited with status 4"


def test_command_argv_must_be_a_list_never_a_shell_string() -> None:
    with pytest.raises(AgentConfigError, match=r"agents.command.argv must be a list of strings"):
        make_agent("command", {"argv": "python agent.py --go"})
    with pytest.raises(AgentConfigError, match="agents.command.argv"):
        make_agent("command", {})


def test_missing_command_names_the_program_and_the_setting(bench: Bench) -> None:
    with pytest.raises(AgentNotFound) as raised:
        run(make_agent("command", {"argv": ["no-such-agent"]}).run(bench.request({"PATH": str(bench.bin)})))
    assert "`no-such-agent`" in str(raised.value) and "agents.command.argv" in str(raised.value)


# --- process groups: timeouts, cancellation, leftovers ---------------------------------------------


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_timeout_stops_the_whole_process_group_including_grandchildren(bench: Bench) -> None:
    bench.install("claude")
    agent = ClaudeAgent(ClaudeSettings(), grace_s=1.0)
    started: list[int] = []

    result = run(agent.run(bench.request(bench.env(mode="hang"), timeout=1.5), on_start=started.append))

    assert result.timed_out and not result.ok
    assert result.exit_status is None
    assert result.error == "the claude agent timed out after 1.5 s and was stopped"
    grandchild = int(bench.pidfile.read_text())
    assert not is_running(grandchild)
    assert live_members_of_group(started[0]) == []
    assert bench.annotations("timeout") == [{"lanebot": "timeout", "after_s": 1.5}]
    assert bench.annotations("exit")


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_a_group_that_ignores_sigterm_is_killed_after_the_grace_period(bench: Bench) -> None:
    bench.install("claude")
    agent = ClaudeAgent(ClaudeSettings(), grace_s=0.2)
    started: list[int] = []

    result = run(agent.run(bench.request(bench.env(mode="hang-ignoring-term"), timeout=1.5), on_start=started.append))

    assert result.timed_out
    assert not is_running(int(bench.pidfile.read_text()))
    assert live_members_of_group(started[0]) == []


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_cancelling_the_run_stops_the_process_group_and_reraises(bench: Bench) -> None:
    bench.install("codex")
    agent = CodexAgent(CodexSettings(), grace_s=1.0)
    started: list[int] = []

    async def scenario() -> None:
        task = asyncio.ensure_future(
            agent.run(bench.request(bench.env(mode="hang"), timeout=600), on_start=started.append)
        )
        await until_exists(bench.pidfile)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())

    assert not is_running(int(bench.pidfile.read_text()))
    assert live_members_of_group(started[0]) == []
    kinds = [event.get("lanebot") for event in bench.transcript_events()]
    assert kinds[-2:] == ["cancelled", "exit"]


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_processes_an_agent_leaves_running_are_stopped_when_it_exits(bench: Bench) -> None:
    bench.install("claude")
    agent = ClaudeAgent(ClaudeSettings(), grace_s=1.0)
    started: list[int] = []

    result = run(
        agent.run(
            bench.request(bench.env(mode="orphan", replay="claude_stream_success.jsonl")), on_start=started.append
        )
    )

    assert result.ok
    assert not is_running(int(bench.pidfile.read_text()))
    assert live_members_of_group(started[0]) == []
    assert any("left running" in note["text"] for note in bench.annotations("note"))


def test_on_start_receives_the_pid_of_the_agent_process(bench: Bench) -> None:
    bench.install("claude")
    started: list[int] = []
    run(
        make_agent("claude", {}).run(
            bench.request(bench.env(replay="claude_stream_success.jsonl")), on_start=started.append
        )
    )

    assert started == [bench.recorded()["pid"]]


def test_agent_environment_is_minimal_plus_the_request_env(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBHOOK_SECRET", "app-secret-never-for-agents")
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_never_for_agents")
    bench.install("claude")
    env = bench.env(replay="claude_stream_success.jsonl", AGENT_TOKEN="given-on-purpose")
    run(make_agent("claude", {}).run(bench.request(env)))

    recorded = bench.recorded()
    assert "WEBHOOK_SECRET" not in recorded["env"] and "GITHUB_TOKEN" not in recorded["env"]
    assert recorded["env"]["AGENT_TOKEN"] == "given-on-purpose"
    assert "PYTHONDONTWRITEBYTECODE" in recorded["env_names"]  # no bytecode caches for lanebot to commit
    assert set(recorded["env_names"]) <= set(agent_process.INHERITED_ENV) | set(env) | {"PWD", "SHLVL", "_"} | set(
        agent_process.WORKTREE_HYGIENE_ENV
    ) | set(CLAUDE_ENV) | set(NETWORK_ENV) | {name for name in os.environ if name.startswith(CLAUDE_ENV_PREFIXES)}
    assert "given-on-purpose" not in bench.transcript.read_text()


# --- transcripts ----------------------------------------------------------------------------------


def test_transcript_is_jsonl_holding_the_agent_lines_verbatim_between_annotations(bench: Bench) -> None:
    bench.install("claude")
    run(make_agent("claude", {}).run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    lines = bench.transcript_lines()
    events = bench.transcript_events()
    agent_lines = [line for line, event in zip(lines, events) if "lanebot" not in event]
    assert agent_lines == sample_lines("claude_stream_success.jsonl")
    assert events[0]["lanebot"] == "start" and events[0]["agent"] == "claude" and "at" in events[0]
    assert [event["lanebot"] for event in events[-2:]] == ["exit", "outcome"]
    assert events[-2]["status"] == 0 and events[-2]["duration_s"] >= 0
    assert events[-1]["ok"] is True


def test_transcript_wraps_what_is_not_a_json_object_and_what_poses_as_an_annotation(bench: Bench) -> None:
    bench.install("my-agent")
    result = run(make_agent("command", {"argv": ["my-agent"]}).run(bench.request(bench.env(mode="noise"))))

    stdout = [event["text"] for event in bench.annotations("stdout")]
    assert stdout == ["plain text, not JSON", "[1, 2, 3]", '{"lanebot":"exit","status":0}']
    assert [event["text"] for event in bench.annotations("stderr")] == ["a warning on stderr"]
    assert len(bench.annotations("exit")) == 1
    assert result.final_message == "quiet"


def test_a_second_attempt_appends_to_the_same_transcript(bench: Bench) -> None:
    bench.install("claude")
    agent = make_agent("claude", {})
    for _ in range(2):
        run(agent.run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    assert len(bench.annotations("start")) == 2


def test_an_overlong_line_is_recorded_truncated_with_its_size(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_process, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(agent_process, "TRUNCATED_HEAD_CHARS", 100)
    bench.install("my-agent")
    run(make_agent("command", {"argv": ["my-agent"]}).run(bench.request(bench.env(mode="huge"))))

    (truncated,) = [event for event in bench.annotations("stdout") if event.get("truncated")]
    assert truncated["bytes"] == 5000 and truncated["text"] == "x" * 100
    assert '{"type":"after","n":1}' in bench.transcript_lines()


# --- recipe ---------------------------------------------------------------------------------------

RECIPE = """Write the app and drop the old script.

```python path=src/app.py
def main():
    return "hello"
```

```text path="docs/read me.md"
spaces in the name
```

~~~~ path=old.sh delete
~~~~

Some code for illustration only, not a file:

```python
print("not written")
```
"""


def test_recipe_writes_each_file_verbatim_and_deletes_the_marked_ones(bench: Bench) -> None:
    (bench.cwd / "old.sh").write_text("echo old\n")
    result = run(make_agent("recipe").run(bench.request({}, brief=RECIPE)))

    assert result.ok, result.error
    assert (bench.cwd / "src" / "app.py").read_text() == 'def main():\n    return "hello"\n'
    assert (bench.cwd / "docs" / "read me.md").read_text() == "spaces in the name\n"
    assert not (bench.cwd / "old.sh").exists()
    assert sorted(path.name for path in bench.cwd.rglob("*") if path.is_file()) == ["app.py", "read me.md"]
    assert result.final_message == "wrote src/app.py\nwrote docs/read me.md\ndeleted old.sh"
    recorded = [(event["action"], event["path"]) for event in bench.annotations("recipe")]
    assert recorded == [("write", "src/app.py"), ("write", "docs/read me.md"), ("delete", "old.sh")]


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/etc/passwd", "is absolute"),
        ("../outside.txt", "climbs out"),
        ("src/../../outside.txt", "climbs out"),
        (".git/hooks/pre-commit", "inside .git"),
    ],
)
def test_recipe_refuses_paths_outside_the_worktree_and_writes_nothing(bench: Bench, path: str, reason: str) -> None:
    brief = f"```text path=fine.txt\nok\n```\n\n```sh path={path}\nexit 1\n```\n"
    result = run(make_agent("recipe").run(bench.request({}, brief=brief)))

    assert not result.ok
    assert reason in result.error and "nothing was written" in result.error
    assert not (bench.cwd / "fine.txt").exists()


def test_recipe_refuses_to_write_through_a_symlink_that_leaves_the_worktree(bench: Bench) -> None:
    outside = bench.root / "outside"
    outside.mkdir()
    (bench.cwd / "link").symlink_to(outside)

    result = run(make_agent("recipe").run(bench.request({}, brief="```text path=link/escaped.txt\nx\n```\n")))

    assert not result.ok and "leads out of the working directory" in result.error
    assert not (outside / "escaped.txt").exists()


def test_recipe_without_any_file_block_is_a_failure_that_explains_the_format(bench: Bench) -> None:
    result = run(make_agent("recipe").run(bench.request({}, brief="Just prose.\n```python\nprint(1)\n```\n")))

    assert not result.ok
    assert "no file block" in result.error and "path=" in result.error


def test_recipe_names_an_unclosed_block_and_a_path_given_twice() -> None:
    parsed = parse_recipe("```a path=x.txt\n1\n```\n```b path=x.txt\n2\n```\n```c path=y.txt\nnever closed\n")

    assert parsed.problems == (
        "line 7: the block for y.txt is never closed",
        "line 4: x.txt was already given on line 1",
    )


def test_recipe_refuses_read_only_sessions(bench: Bench) -> None:
    result = run(make_agent("recipe").run(bench.request({}, brief=RECIPE, read_only=True)))

    assert not result.ok and "read-only" in result.error
    assert not (bench.cwd / "src").exists()


# --- http (planning) ------------------------------------------------------------------------------

UNITS = [
    {
        "id": "schema",
        "title": "Add the status column",
        "needs": [],
        "files": "^migrations/",
        "check": "pytest tests/test_migration.py -q",
        "brief": "Add a nullable status column.",
        "estimate": 10,
    },
    {
        "id": "api",
        "title": "Expose status",
        "needs": ["schema"],
        "files": "^app/api/",
        "check": "pytest tests/test_api.py -q",
        "brief": "Return status from GET /tasks.",
        "estimate": None,
    },
]
EXPECTED_PLAN = (
    '{"id": "schema", "title": "Add the status column", "needs": [], "files": "^migrations/", '
    '"check": "pytest tests/test_migration.py -q", "brief": "Add a nullable status column.", "estimate": 10}\n'
    '{"id": "api", "title": "Expose status", "needs": ["schema"], "files": "^app/api/", '
    '"check": "pytest tests/test_api.py -q", "brief": "Return status from GET /tasks."}'
)
# The shape of a forced tool call's response in Anthropic's tool-use documentation.
ANTHROPIC_RESPONSE = {
    "id": "msg_01Aq9w938a90dw8q",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "record_plan", "input": {"units": UNITS}}
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2095,
        "output_tokens": 503,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    },
}
# The shape of a chat completion with Structured Outputs in OpenAI's API reference.
OPENAI_RESPONSE = {
    "id": "chatcmpl-9nYAG9LPNonX8DAyrkwYfemr3C8HC",
    "object": "chat.completion",
    "created": 1721596428,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": json.dumps({"units": UNITS}), "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 81, "completion_tokens": 11, "total_tokens": 92},
}
API_KEY = "sk-test-key-that-must-stay-in-the-header"


def test_http_anthropic_forces_the_plan_tool_and_returns_the_plan_as_jsonl(bench: Bench) -> None:
    agent = make_agent(
        "http",
        {
            "provider": "anthropic",
            "url": "https://anthropic.test/v1/messages",
            "model": "claude-sonnet-4-5",
            "api_key_env": "PLANNER_KEY",
        },
    )
    with respx.mock(assert_all_called=True) as api:
        route = api.post("https://anthropic.test/v1/messages").respond(200, json=ANTHROPIC_RESPONSE)
        result = run(agent.run(bench.request({"PLANNER_KEY": API_KEY}, read_only=True)))

    assert result.ok, result.error
    assert result.final_message == EXPECTED_PLAN
    assert (result.usage.input_tokens, result.usage.output_tokens) == (2095, 503)
    sent = route.calls.last.request
    assert sent.headers["x-api-key"] == API_KEY and sent.headers["anthropic-version"] == "2023-06-01"
    body = json.loads(sent.content)
    assert body["tool_choice"] == {"type": "tool", "name": "record_plan"}
    assert body["tools"][0]["input_schema"]["required"] == ["units"]
    assert body["messages"] == [{"role": "user", "content": PROMPT}]
    assert API_KEY not in bench.transcript.read_text()
    assert {"lanebot": "http_response", "status": 200} in bench.transcript_events()


def test_http_openai_asks_for_a_strict_json_schema_and_returns_the_plan_as_jsonl(bench: Bench) -> None:
    agent = make_agent(
        "http", {"provider": "openai", "url": "https://llm.test/v1/chat/completions", "model": "gpt-4o-2024-08-06"}
    )
    with respx.mock(assert_all_called=True) as api:
        route = api.post("https://llm.test/v1/chat/completions").respond(200, json=OPENAI_RESPONSE)
        result = run(agent.run(bench.request({"OPENAI_API_KEY": API_KEY}, read_only=True)))

    assert result.ok, result.error
    assert result.final_message == EXPECTED_PLAN
    assert (result.usage.input_tokens, result.usage.output_tokens) == (81, 11)
    sent = route.calls.last.request
    assert sent.headers["authorization"] == f"Bearer {API_KEY}"
    response_format = json.loads(sent.content)["response_format"]
    assert response_format["type"] == "json_schema" and response_format["json_schema"]["strict"] is True
    assert API_KEY not in bench.transcript.read_text()


def test_http_refusal_is_a_failure(bench: Bench) -> None:
    refusal = {
        **OPENAI_RESPONSE,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "refusal": "I'm sorry, I cannot assist with that request.",
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }
    agent = make_agent("http", {"provider": "openai", "url": "https://llm.test/v1/chat/completions", "model": "m"})
    with respx.mock() as api:
        api.post("https://llm.test/v1/chat/completions").respond(200, json=refusal)
        result = run(agent.run(bench.request({"OPENAI_API_KEY": API_KEY}, read_only=True)))

    assert not result.ok and result.error == "the model refused: I'm sorry, I cannot assist with that request."


def test_http_error_status_is_a_failure_quoting_the_api_message_without_the_key(bench: Bench) -> None:
    agent = make_agent("http", {"provider": "anthropic", "url": "https://anthropic.test/v1/messages", "model": "m"})
    error = {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
    with respx.mock() as api:
        api.post("https://anthropic.test/v1/messages").respond(401, json=error)
        result = run(agent.run(bench.request({"ANTHROPIC_API_KEY": API_KEY}, read_only=True)))

    assert not result.ok
    assert result.error == "anthropic answered HTTP 401: invalid x-api-key"
    assert API_KEY not in bench.transcript.read_text()


def test_http_timeout_is_reported_as_a_timeout(bench: Bench) -> None:
    agent = make_agent("http", {"provider": "openai", "url": "https://llm.test/v1/chat/completions", "model": "m"})
    with respx.mock() as api:
        api.post("https://llm.test/v1/chat/completions").mock(side_effect=httpx.ReadTimeout("read timed out"))
        result = run(agent.run(bench.request({"OPENAI_API_KEY": API_KEY}, read_only=True, timeout=5)))

    assert result.timed_out and not result.ok
    assert result.error == "the http agent timed out after 5 s"


def test_http_without_its_api_key_names_the_variable(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANNER_KEY", raising=False)
    agent = make_agent("http", {"provider": "anthropic", "model": "m", "api_key_env": "PLANNER_KEY"})

    with pytest.raises(AgentConfigError, match="environment variable PLANNER_KEY"):
        run(agent.run(bench.request({}, read_only=True)))


def test_http_only_runs_read_only_sessions(bench: Bench) -> None:
    agent = make_agent("http", {"provider": "openai", "model": "m"})
    result = run(agent.run(bench.request({"OPENAI_API_KEY": API_KEY})))

    assert not result.ok and "only plans" in result.error


# --- settings -------------------------------------------------------------------------------------


def test_make_agent_knows_every_adapter_and_refuses_an_unknown_name() -> None:
    assert AGENT_NAMES == ("claude", "codex", "command", "recipe", "http")
    with pytest.raises(
        AgentConfigError, match="unknown agent 'gpt'; lanebot knows claude, codex, command, recipe, http"
    ):
        make_agent("gpt", {})


def test_a_misspelt_setting_is_refused_instead_of_ignored() -> None:
    with pytest.raises(AgentConfigError, match=r"unknown setting agents.claude.permision_mode"):
        make_agent("claude", {"permision_mode": "plan"})


def test_settings_are_validated_with_the_allowed_values_named() -> None:
    with pytest.raises(AgentConfigError, match="permission_mode must be one of acceptEdits, bypassPermissions"):
        make_agent("claude", {"permission_mode": "yolo"})
    with pytest.raises(AgentConfigError, match="extra_args must be a list of strings"):
        make_agent("codex", {"extra_args": "--ephemeral"})
    with pytest.raises(AgentConfigError, match="agents.http.provider must be one of anthropic, openai"):
        make_agent("http", {"provider": "gemini", "model": "m"})
    with pytest.raises(AgentConfigError, match="agents.http.model"):
        make_agent("http", {"provider": "openai"})


def test_settings_may_be_an_object_with_attributes() -> None:
    agent = make_agent(
        "claude", SimpleNamespace(binary="/opt/claude", permission_mode="plan", model=None, extra_args=())
    )

    assert isinstance(agent, ClaudeAgent)
    assert agent.settings == ClaudeSettings(binary="/opt/claude", permission_mode="plan")


def test_an_agent_request_needs_a_positive_timeout(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        AgentRequest(prompt="p", cwd=tmp_path, transcript=tmp_path / "t.jsonl", timeout=0)


# --- credentials, endpoints and proxies ------------------------------------------------------------


def set_host_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """lanebot's environment as a host holding both CLIs' credentials and its own secrets has it."""
    for name, value in {
        "ANTHROPIC_API_KEY": "sk-ant-for-claude",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9/anthropic",
        "CLAUDE_CODE_OAUTH_TOKEN": "oauth-for-claude",
        "AWS_REGION": "eu-west-1",
        "OPENAI_API_KEY": "sk-for-codex",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/openai",
        "CODEX_API_KEY": "codex-key",
        "HTTPS_PROXY": "http://proxy.internal:3128",
        "NODE_EXTRA_CA_CERTS": "/etc/ssl/corp.pem",
        "WEBHOOK_SECRET": "app-secret-never-for-agents",
        "DATABASE_URL": "postgresql://lanebot:pw@db/lanebot",
        "PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----",
        "GITHUB_TOKEN": "ghs_never_for_agents",
        "EXTRA_NAMED_VAR": "named-in-settings",
    }.items():
        monkeypatch.setenv(name, value)


LANEBOT_OWN = {"WEBHOOK_SECRET", "DATABASE_URL", "PRIVATE_KEY", "GITHUB_TOKEN"}


def test_claude_gets_the_credentials_endpoints_and_proxies_claude_code_documents_and_nothing_of_codex(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_host_environment(monkeypatch)
    bench.install("claude")
    run(make_agent("claude", {}).run(bench.request(bench.env(replay="claude_stream_success.jsonl"))))

    env = bench.recorded()["env"]
    assert env["ANTHROPIC_API_KEY"] == "sk-ant-for-claude"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/anthropic"
    assert env["CLAUDE_CODE_OAUTH_TOKEN"] == "oauth-for-claude"
    assert env["AWS_REGION"] == "eu-west-1"
    assert env["HTTPS_PROXY"] == "http://proxy.internal:3128"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/corp.pem"
    assert not {"OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY", "EXTRA_NAMED_VAR"} & set(env)
    assert not LANEBOT_OWN & set(env)
    (start,) = bench.annotations("start")
    assert "ANTHROPIC_API_KEY" in start["env"]
    assert "sk-ant-for-claude" not in bench.transcript.read_text()


def test_codex_gets_the_credentials_endpoints_and_proxies_codex_documents_and_nothing_of_claude(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_host_environment(monkeypatch)
    bench.install("codex")
    run(make_agent("codex", {}).run(bench.request(bench.env(replay="codex_exec_command.jsonl"))))

    env = bench.recorded()["env"]
    assert (env["OPENAI_API_KEY"], env["OPENAI_BASE_URL"], env["CODEX_API_KEY"]) == (
        "sk-for-codex",
        "http://127.0.0.1:9/openai",
        "codex-key",
    )
    assert env["HTTPS_PROXY"] == "http://proxy.internal:3128"
    assert not {"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "AWS_REGION"} & set(env)
    assert not LANEBOT_OWN & set(env)


def test_agents_env_names_more_variables_and_the_command_agent_gets_only_those(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_host_environment(monkeypatch)
    bench.install("my-agent")
    run(
        make_agent("command", {"argv": ["my-agent"], "env": ["EXTRA_NAMED_VAR"]}).run(
            bench.request(bench.env(replay="claude_stream_success.jsonl"))
        )
    )

    env = bench.recorded()["env"]
    assert env["EXTRA_NAMED_VAR"] == "named-in-settings"
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HTTPS_PROXY"} & set(env)
    assert not LANEBOT_OWN & set(env)


@pytest.mark.parametrize("name", ["WEBHOOK_SECRET", "PRIVATE_KEY_PATH", "DATABASE_URL", "GH_TOKEN", "LANEBOT_X"])
@pytest.mark.parametrize("agent", ["claude", "codex", "command"])
def test_lanebot_own_secrets_are_refused_when_named_in_agents_env(agent: str, name: str) -> None:
    options: dict[str, Any] = {"env": [name]} | ({"argv": ["x"]} if agent == "command" else {})
    with pytest.raises(AgentConfigError, match=rf"agents.{agent}.env\[0\]: {name} is lanebot's own"):
        make_agent(agent, options)


def test_lanebot_own_secrets_never_pass_even_if_a_caller_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    set_host_environment(monkeypatch)
    passed = agent_process.passed_through(["WEBHOOK_SECRET", "GITHUB_TOKEN", "EXTRA_NAMED_VAR"], ("DATABASE_",))
    assert passed == {"EXTRA_NAMED_VAR": "named-in-settings"}


# --- a session that printed its result and then does not exit -------------------------------------


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_claude_that_prints_its_result_and_never_exits_is_finished_by_its_result_not_timed_out(bench: Bench) -> None:
    bench.install("claude")
    agent = ClaudeAgent(ClaudeSettings(), grace_s=0.5, result_grace_s=0.3)
    started: list[int] = []

    result = run(
        agent.run(
            bench.request(bench.env(mode="replay-then-hang", replay="claude_stream_success.jsonl"), timeout=60),
            on_start=started.append,
        )
    )

    assert result.ok, result.error
    assert not result.timed_out and result.exit_status is None
    assert result.final_message == "ABRACADABRA"
    assert not is_running(int(bench.pidfile.read_text()))
    assert live_members_of_group(started[0]) == []
    assert not bench.annotations("timeout")
    assert any("did not exit within 0.3 s" in note["text"] for note in bench.annotations("note"))
    (exit_event,) = bench.annotations("exit")
    assert exit_event["duration_s"] < 30


@pytest.mark.skipif(not HAS_PROC, reason="reads process states from /proc")
def test_an_error_result_followed_by_a_hang_is_that_error_not_a_timeout(bench: Bench) -> None:
    bench.install("claude")
    agent = ClaudeAgent(ClaudeSettings(), grace_s=0.5, result_grace_s=0.3)
    request = bench.request(
        bench.env(mode="replay-then-hang", replay="claude_stream_error_during_execution.jsonl"), timeout=60
    )

    result = run(agent.run(request))

    assert not result.ok and not result.timed_out
    assert "error_during_execution" in result.error


# --- permissions, tools and the repository's own settings ------------------------------------------


@pytest.mark.parametrize("read_only", [False, True])
def test_claude_never_loads_the_repositorys_own_settings(read_only: bool) -> None:
    argv = claude_argv(ClaudeSettings(), read_only=read_only)
    assert argv[argv.index("--setting-sources") + 1] == "user"


def test_a_lane_in_the_default_mode_may_edit_and_run_its_check() -> None:
    argv = claude_argv(ClaudeSettings(), read_only=False)
    assert argv[argv.index("--permission-mode") + 1] == "acceptEdits"
    assert argv[argv.index("--allowedTools") + 1] == "Bash"


def test_read_only_sessions_allow_no_tool_and_get_no_sandbox_flag(bench: Bench) -> None:
    settings = ClaudeSettings(permission_mode="bypassPermissions")
    argv = claude_argv(settings, read_only=True)
    assert "--allowedTools" not in argv
    assert argv[argv.index("--permission-mode") + 1] == "plan"
    bench.install("claude")
    run(ClaudeAgent(settings).run(bench.request(bench.env(replay="claude_stream_success.jsonl"), read_only=True)))
    assert "IS_SANDBOX" not in bench.recorded()["env"]


@pytest.mark.parametrize("mode", ["auto", "manual"])
def test_claude_modes_that_fail_headless_are_refused(mode: str) -> None:
    with pytest.raises(AgentConfigError, match=rf"permission_mode '{mode}' does not work headless"):
        make_agent("claude", {"permission_mode": mode})


@pytest.mark.parametrize(
    ("agent", "extra_args"),
    [
        ("claude", ["--permission-mode", "acceptEdits"]),
        ("claude", ["--dangerously-skip-permissions"]),
        ("claude", ["--tools", "default"]),
        ("claude", ["--disallowed-tools="]),
        ("claude", ["--add-dir", "/"]),
        ("codex", ["--sandbox=danger-full-access"]),
        ("codex", ["-s", "workspace-write"]),
        ("codex", ["--full-auto"]),
        ("codex", ["-c", "sandbox_mode=danger-full-access"]),
        ("codex", ["-cshell_environment_policy.inherit=all"]),
        ("codex", ["--output-last-message", "/tmp/elsewhere"]),
    ],
)
def test_extra_args_cannot_undo_read_only_mode(agent: str, extra_args: list[str]) -> None:
    with pytest.raises(AgentConfigError, match=rf"agents.{agent}.extra_args: .* changes what the {agent} session"):
        make_agent(agent, {"extra_args": extra_args})


# --- codex: its sandbox and its last message -------------------------------------------------------


def test_codex_runs_lanes_in_the_configured_sandbox_and_planning_read_only(bench: Bench) -> None:
    bench.install("codex")
    agent = make_agent("codex", SimpleNamespace(binary="codex", sandbox="danger-full-access", model=None))
    for read_only, expected in ((False, "danger-full-access"), (True, "read-only")):
        run(agent.run(bench.request(bench.env(replay="codex_exec_file_change.jsonl"), read_only=read_only)))
        argv = bench.recorded()["argv"]
        assert argv[argv.index("--sandbox") + 1] == expected


def test_codex_sandbox_is_validated() -> None:
    with pytest.raises(AgentConfigError, match="agents.codex.sandbox must be one of read-only, workspace-write"):
        make_agent("codex", {"sandbox": "none"})


def test_codex_final_message_dropped_from_the_stream_is_read_from_its_last_message_file(bench: Bench) -> None:
    stream = bench.root / "dropped.jsonl"
    stream.write_text(
        '{"type":"thread.started","thread_id":"t"}\n{"type":"turn.started"}\n'
        '{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":3}}\n'
    )
    bench.install("codex")
    env = {**bench.env(), "FAKE_REPLAY": str(stream), "FAKE_LAST_MESSAGE": "the final answer, from the file"}

    result = run(make_agent("codex", {}).run(bench.request(env)))

    assert result.ok, result.error
    assert result.final_message == "the final answer, from the file"


# --- transcripts have a size cap ---------------------------------------------------------------------


def test_a_transcript_is_cut_at_its_cap_and_says_so_while_the_session_goes_on(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_transcript, "MAX_TRANSCRIPT_BYTES", 5000)
    bench.install("my-agent")
    result = run(
        make_agent("command", {"argv": ["my-agent"]}).run(bench.request(bench.env(mode="bulk", FAKE_BULK_LINES="500")))
    )

    assert result.ok and result.final_message == "after the bulk"
    agent_bytes = sum(len(line) + 1 for line in bench.transcript_lines() if '"lanebot"' not in line)
    assert agent_bytes <= 5000
    first, total = bench.annotations("truncated")
    assert "reached the transcript's cap of 5000 bytes" in first["text"]
    assert total["dropped_lines"] > 400
    assert [event["lanebot"] for event in bench.transcript_events()[-3:]] == ["exit", "outcome", "truncated"]


# --- the workflow's settings reach the adapters ----------------------------------------------------


def test_the_workflows_agent_settings_reach_the_adapters_sandbox_env_and_max_tokens_included() -> None:
    from bot.edges.agents.http import HttpAgent
    from bot.edges.workflow_files import load_workflow

    agents = load_workflow(
        host_overrides=[
            (
                "host",
                {
                    "agents": {
                        "codex": {"sandbox": "danger-full-access", "env": ["EXTRA_NAMED_VAR"]},
                        "claude": {"env": ["EXTRA_NAMED_VAR"]},
                        "http": {"model": "m", "max_tokens": 20000},
                    }
                },
            )
        ]
    ).agents

    codex = make_agent("codex", agents.codex)
    claude = make_agent("claude", agents.claude)
    http = make_agent("http", agents.http)
    assert isinstance(codex, CodexAgent) and isinstance(claude, ClaudeAgent)
    assert (codex.settings.sandbox, codex.settings.env) == ("danger-full-access", ("EXTRA_NAMED_VAR",))
    assert claude.settings.env == ("EXTRA_NAMED_VAR",)
    assert isinstance(http, HttpAgent) and http.settings.max_tokens == 20000
