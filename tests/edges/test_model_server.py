"""The scripted model server's wire formats (tests/model_server), without the CLIs: what a client of
the Anthropic Messages API or the OpenAI Responses API reads from it, and what it makes of requests."""

from __future__ import annotations

import http.client
import json
import threading
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.model_server.scenarios import always, faults_then, scripted
from tests.model_server.script import Fault, ModelCall, Reply, RunCommand, ToolUse, WriteFile
from tests.model_server.server import ModelServer

TOOLS = [{"name": "Bash", "input_schema": {}}, {"name": "Write", "input_schema": {}}]
SYSTEM = [
    {"type": "text", "text": "You are Claude Code."},
    {"type": "text", "text": " - Primary working directory: /work/tree"},
]


def anthropic_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 1000,
        "system": SYSTEM,
        "tools": TOOLS,
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>\ncontext\n</system-reminder>"},
                    {"type": "text", "text": "Do the thing."},
                ],
            }
        ],
    }
    return {**body, **fields}


def openai_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "gpt-test",
        "instructions": "You are Codex.",
        "stream": True,
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {}},
            {"type": "custom", "name": "apply_patch", "format": {}},
        ],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Do the thing."}]},
        ],
    }
    return {**body, **fields}


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer(scripted()) as running:
        yield running


def post(
    server: ModelServer, path: str, body: Mapping[str, Any], *, timeout: float = 5
) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
    connection = http.client.HTTPConnection(urlsplit(server.url).netloc, timeout=timeout)
    connection.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
    return connection.getresponse(), connection


def events(response: http.client.HTTPResponse) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of a complete response: (event name, data)."""
    found = []
    for frame in response.read().decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


def tool_inputs(stream: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Any]]:
    """Each tool_use block's (name, input), put together from its input_json_delta events."""
    names: dict[int, str] = {}
    parts: dict[int, str] = {}
    for name, data in stream:
        if name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            names[data["index"]] = data["content_block"]["name"]
        elif name == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            parts[data["index"]] = parts.get(data["index"], "") + data["delta"]["partial_json"]
    return [(names[index], json.loads(parts[index])) for index in sorted(names)]


# ------------------------------------------------------------------------------------- Anthropic


def test_a_streamed_message_follows_anthropics_event_flow_and_carries_the_actions_as_claude_codes_tools(
    server: ModelServer,
) -> None:
    server.responder = scripted(Reply(text="On it.", actions=(WriteFile("a/b.txt", "x\n"), RunCommand("make"))))

    response, _ = post(server, "/v1/messages?beta=true", anthropic_body())
    stream = events(response)

    assert response.status == 200 and response.getheader("content-type") == "text/event-stream"
    names = [name for name, _ in stream]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[1:-2] == ["content_block_start", "content_block_delta", "content_block_stop"] * 3
    assert stream[2][1]["delta"] == {"type": "text_delta", "text": "On it."}
    assert tool_inputs(stream) == [
        ("Write", {"file_path": "/work/tree/a/b.txt", "content": "x\n"}),
        ("Bash", {"command": "make", "description": "Run the scripted command"}),
    ]
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert stream[-2][1]["usage"]["output_tokens"] > 0 and stream[0][1]["message"]["usage"]["input_tokens"] > 0
    (call,) = server.calls
    assert (call.api, call.prompt, call.turns, call.tools) == ("anthropic", "Do the thing.", 0, ("Bash", "Write"))
    assert "You are Claude Code." in call.system


def test_without_a_working_directory_in_the_system_prompt_a_file_is_written_with_bash(server: ModelServer) -> None:
    server.responder = scripted(Reply(actions=(WriteFile("dir/it's.txt", "a 'quoted'\nline\n"),)))

    stream = events(post(server, "/v1/messages", anthropic_body(system="You are Claude Code."))[0])

    ((name, tool_input),) = tool_inputs(stream)
    assert name == "Bash"
    assert (
        tool_input["command"] == "mkdir -p dir && printf '%s' 'a '\"'\"'quoted'\"'\"'\nline\n' > 'dir/it'\"'\"'s.txt'"
    )


def test_a_final_reply_ends_the_turn_and_a_non_streamed_request_gets_one_message(server: ModelServer) -> None:
    server.responder = always(Reply(text="Done."))

    response, _ = post(server, "/v1/messages", anthropic_body(stream=False))
    message = json.loads(response.read())

    assert message["content"] == [{"type": "text", "text": "Done."}]
    assert message["stop_reason"] == "end_turn" and message["usage"]["output_tokens"] > 0


def test_tool_results_become_outcomes_named_after_their_tool_use(server: ModelServer) -> None:
    messages = [
        *anthropic_body()["messages"],
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "out"}]}],
        },
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "Write", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "no", "is_error": True}]},
    ]

    post(server, "/v1/messages", anthropic_body(messages=messages))[0].read()

    (call,) = server.calls
    assert call.turns == 2 and call.prompt == "Do the thing."
    assert [(o.name, o.output, o.is_error) for o in call.outcomes] == [("Bash", "out", False), ("Write", "no", True)]


@pytest.mark.parametrize(
    "body",
    [anthropic_body(tools=[]), anthropic_body(max_tokens=1)],
    ids=["no tools", "max_tokens 1"],
)
def test_side_requests_get_a_short_text_without_the_responder(server: ModelServer, body: dict[str, Any]) -> None:
    server.responder = always(Fault("overloaded"))

    stream = events(post(server, "/v1/messages", body)[0])

    assert [data["delta"]["text"] for name, data in stream if name == "content_block_delta"] == ["OK"]
    assert server.calls == [] and [record.main for record in server.requests] == [False]


def test_count_tokens_answers_and_other_paths_are_404_and_recorded(server: ModelServer) -> None:
    counted = json.loads(post(server, "/v1/messages/count_tokens", anthropic_body())[0].read())
    missing, _ = post(server, "/v1/other", {"a": 1})

    assert counted["input_tokens"] > 0
    assert missing.status == 404 and json.loads(missing.read())["error"]["type"] == "not_found_error"
    assert [(r.method, r.path, r["body"]) for r in server.requests][1] == ("POST", "/v1/other", {"a": 1})
    assert server.requests[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "body", "kind", "status", "error"),
    [
        ("/v1/messages", anthropic_body(), "overloaded", 529, "overloaded_error"),
        ("/v1/messages", anthropic_body(), "rate_limited", 429, "rate_limit_error"),
        ("/v1/responses", openai_body(), "overloaded", 503, "server_error"),
        ("/v1/responses", openai_body(), "rate_limited", 429, "requests"),
    ],
)
def test_overloaded_and_rate_limited_faults_answer_as_the_api_does(
    server: ModelServer, path: str, body: dict[str, Any], kind: Any, status: int, error: str
) -> None:
    server.responder = faults_then([kind], retry_after_s=3)

    response, _ = post(server, path, body)

    assert response.status == status
    assert json.loads(response.read())["error"]["type"] == error
    assert response.getheader("retry-after") == ("3" if kind == "rate_limited" else None)
    assert post(server, path, body)[0].status == 200


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_a_cut_stream_starts_and_then_breaks_off(server: ModelServer, path: str) -> None:
    server.responder = always(Fault("cut"))
    body = anthropic_body() if path == "/v1/messages" else openai_body()

    response, _ = post(server, path, body)

    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as broken:
        response.read()
    assert b"event: " in broken.value.partial


def test_a_hanging_stream_sends_nothing_more_and_closing_the_server_ends_it_and_its_thread() -> None:
    before = set(threading.enumerate())
    with ModelServer(always(Fault("hang"))) as server:
        response, _ = post(server, "/v1/messages", anthropic_body(), timeout=0.5)
        assert response.status == 200
        with pytest.raises(TimeoutError):
            response.read()
        begun = time.monotonic()
    assert time.monotonic() - begun < 2
    assert set(threading.enumerate()) <= before


def test_a_hanging_stream_ends_when_the_client_goes_away(server: ModelServer) -> None:
    server.responder = always(Fault("hang"))
    response, connection = post(server, "/v1/responses", openai_body())
    assert response.status == 200
    connection.close()
    response.close()

    deadline = time.monotonic() + 3
    while server.in_flight:
        assert time.monotonic() < deadline, "the handler still hangs after the client left"
        time.sleep(0.05)


def test_a_responder_that_raises_is_answered_with_a_400_and_kept(server: ModelServer) -> None:
    def broken(call: ModelCall) -> Reply:
        raise ValueError("no such step")

    server.responder = broken

    response, _ = post(server, "/v1/messages", anthropic_body())

    assert response.status == 400 and "no such step" in json.loads(response.read())["error"]["message"]
    assert [repr(error) for error in server.errors] == ["ValueError('no such step')"]


# ------------------------------------------------------------------------------------- OpenAI


def test_a_streamed_response_follows_the_responses_event_flow_with_codexs_tools(server: ModelServer) -> None:
    server.responder = scripted(Reply(text="On it.", actions=(WriteFile("a.txt", "x\ny\n"), RunCommand("make"))))

    stream = events(post(server, "/v1/responses", openai_body())[0])

    names = [name for name, _ in stream]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert "response.output_text.delta" in names and "response.custom_tool_call_input.delta" in names
    done = [data["item"] for name, data in stream if name == "response.output_item.done"]
    assert [item["type"] for item in done] == ["message", "custom_tool_call", "function_call"]
    assert done[0]["content"][0]["text"] == "On it."
    assert done[1]["name"] == "apply_patch"
    assert done[1]["input"] == "*** Begin Patch\n*** Add File: a.txt\n+x\n+y\n*** End Patch\n"
    assert (done[2]["name"], json.loads(done[2]["arguments"])) == ("exec_command", {"cmd": "make"})
    assert stream[-1][1]["response"]["output"] == done
    assert stream[-1][1]["response"]["usage"]["input_tokens"] > 0
    assert [data["sequence_number"] for _, data in stream] == list(range(len(stream)))
    (call,) = server.calls
    assert (call.api, call.prompt, call.turns) == ("openai", "Do the thing.", 0)
    assert call.tools == ("exec_command", "apply_patch") and "Be careful." in call.system


def test_without_apply_patch_a_file_is_written_with_the_shell_tool_and_tool_use_passes_through(
    server: ModelServer,
) -> None:
    body = openai_body(tools=[{"type": "function", "name": "shell_command", "parameters": {}}])
    server.responder = scripted(Reply(actions=(WriteFile("a.txt", "x"), ToolUse("view_image", {"path": "p"}))))

    stream = events(post(server, "/v1/responses", body)[0])

    done = [data["item"] for name, data in stream if name == "response.output_item.done"]
    assert [(item["name"], json.loads(item["arguments"])) for item in done] == [
        ("shell_command", {"command": "printf '%s' x > a.txt"}),
        ("view_image", {"path": "p"}),
    ]


def test_tool_outputs_become_outcomes_without_codexs_header(server: ModelServer) -> None:
    history = [
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 2\nOutput:\nboom\n",
        },
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hmm."}]},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Exit code: 0\nOutput:\nSuccess.\n"},
    ]
    body = openai_body()
    body["input"] = [*body["input"], *history]

    post(server, "/v1/responses", body)[0].read()

    (call,) = server.calls
    assert call.turns == 2
    assert [(o.name, o.output, o.is_error) for o in call.outcomes] == [
        ("exec_command", "boom\n", True),
        ("apply_patch", "Success.\n", False),
    ]


def test_a_websocket_upgrade_is_refused_so_codex_falls_back_to_http(server: ModelServer) -> None:
    connection = http.client.HTTPConnection(urlsplit(server.url).netloc, timeout=5)
    connection.request("GET", "/v1/responses", headers={"upgrade": "websocket", "connection": "Upgrade"})

    assert connection.getresponse().status == 426
    assert server.requests[0].headers["upgrade"] == "websocket"


# ------------------------------------------------------------------------------------- the CLIs' settings


def test_the_codex_config_points_a_provider_at_the_server(server: ModelServer, tmp_path: Path) -> None:
    env = server.codex_config(tmp_path / "codex", stream_idle_timeout_ms=1234)

    config = tomllib.loads((tmp_path / "codex" / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == f"{server.url}/v1" and provider["wire_api"] == "responses"
    assert provider["stream_idle_timeout_ms"] == 1234 and env[provider["env_key"]]
    assert config["features"]["plugins"] is False
    assert env["CODEX_HOME"] == str(tmp_path / "codex")
    assert Path(env["TMPDIR"]).is_dir() and Path(env["TMPDIR"]).parent == tmp_path / "codex"


def test_the_builtin_provider_config_sets_openai_base_url(server: ModelServer, tmp_path: Path) -> None:
    env = server.codex_config(tmp_path, builtin_provider=True)

    config = tomllib.loads((tmp_path / "config.toml").read_text())
    assert config["openai_base_url"] == f"{server.url}/v1" and "model_provider" not in config
    assert env["CODEX_API_KEY"]


def test_the_anthropic_env_points_at_the_server_and_turns_off_other_traffic(server: ModelServer) -> None:
    env = server.anthropic_env()

    assert env["ANTHROPIC_BASE_URL"] == server.url and env["ANTHROPIC_API_KEY"]
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1" and env["DISABLE_TELEMETRY"] == "1"
