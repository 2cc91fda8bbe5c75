"""A scripted model server on loopback: the Anthropic Messages API and the OpenAI Responses API,
answered by a responder (tests/model_server/script.py) instead of a model.

`ModelServer(responder)` is a context manager that runs a threaded HTTP server on 127.0.0.1 (a
random port) in a background thread; other processes (the real CLIs, a `lanebot serve`) reach it
at `.url`. Each request is recorded in `.requests`; each main-conversation request becomes a
`ModelCall` in `.calls` and is answered with what the responder says, in the wire format of the
API it came in on (tests/model_server/anthropic.py, tests/model_server/openai.py).

Protocol choices:

- One request per connection: every response says `Connection: close`. A streamed response uses
  chunked transfer encoding, so a complete stream ends with the terminating chunk and a `cut`
  one (the connection closed mid-way, without it) is a transport error to the client, never a
  short but apparently complete answer.
- The responder is called under a lock: scenarios are plain functions and need no locking of
  their own, although the CLIs do send requests concurrently.
- A responder that raises is answered with HTTP 400 `invalid_request_error` (which neither CLI
  retries) carrying the exception, and the exception is kept in `.errors`: a broken scenario
  fails fast and says why.
- A WebSocket upgrade (Codex tries one first with its built-in OpenAI provider) is refused with
  426, so the client falls back to plain HTTP at once.
- `hang` waits, sending nothing, until the client disconnects or the server closes; closing the
  server wakes every hanging handler and joins every handler thread, so none outlives it.
"""

from __future__ import annotations

import json
import select
import socket
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from tests.model_server import anthropic, openai
from tests.model_server.script import Fault, ModelCall, Reply, Responder
from tests.model_server.wire import Event, Wire, WireError

DUMMY_ANTHROPIC_KEY = "sk-ant-scripted-model-server"
DUMMY_OPENAI_KEY = "sk-scripted-model-server"
CODEX_PROVIDER = "scripted"
CODEX_KEY_ENV = "OPENAI_API_KEY"
CODEX_MODEL = "gpt-5.5"
HANG_POLL_S = 0.05
SHUTDOWN_POLL_S = 0.05
HANDLER_SOCKET_TIMEOUT_S = 60.0

# What keeps Claude Code from calling anything but ANTHROPIC_BASE_URL (all read by 2.1.197):
# nonessential traffic (release notes, model lists, feedback and survey endpoints), telemetry,
# error reporting, the auto-updater and update checks, the feature-flag service. Checked by making
# this server the session's HTTPS proxy: without them Claude Code connects to api.anthropic.com
# several times a session, with them to nothing but ANTHROPIC_BASE_URL.
CLAUDE_QUIET_ENV: Mapping[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_UPDATES": "1",
    "DISABLE_GROWTHBOOK": "1",
    "DISABLE_INSTALLATION_CHECKS": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it arrived: readable as `record.path` or `record["path"]`."""

    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: Any  # the JSON body, None when there was none or it was not JSON
    main: bool = False  # whether it reached the responder (a main-conversation request)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


@dataclass
class _Record:
    requests: list[RecordedRequest] = field(default_factory=list)
    calls: list[ModelCall] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins every handler thread

    def __init__(self, owner: ModelServer) -> None:
        self.owner = owner
        self.closing = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)


class ModelServer:
    """The scripted model server; see the module's docstring. `responder` may be swapped at any time."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self._record = _Record()
        self._responder_lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def __enter__(self) -> ModelServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> None:
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            name="model-server",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving, wake hanging handlers, and join every thread the server started."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        httpd.closing.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None

    # -- what tests read

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the model server is not running")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def calls(self) -> list[ModelCall]:
        with self._record.lock:
            return list(self._record.calls)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._record.lock:
            return list(self._record.requests)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions the responder raised (each was answered with a 400)."""
        with self._record.lock:
            return list(self._record.errors)

    @property
    def in_flight(self) -> int:
        """How many requests are being answered right now (a hanging one counts until it ends)."""
        with self._record.lock:
            return self._record.in_flight

    def anthropic_env(self) -> dict[str, str]:
        """The environment that points Claude Code at this server, and at nothing else."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": DUMMY_ANTHROPIC_KEY,
            **CLAUDE_QUIET_ENV,
        }

    def codex_config(
        self,
        codex_home: Path,
        *,
        request_max_retries: int = 2,
        stream_max_retries: int = 2,
        stream_idle_timeout_ms: int = 300_000,
        key: str = DUMMY_OPENAI_KEY,
        builtin_provider: bool = False,
    ) -> dict[str, str]:
        """Write `codex_home/config.toml` pointing Codex at this server, and return the environment
        to run Codex with: CODEX_HOME, the key variable, and TMPDIR when it must move (below).

        Codex 0.171 takes its endpoint from its config, not from OPENAI_BASE_URL. By default the
        config names a model provider of its own (`base_url = "<url>/v1"`, `wire_api =
        "responses"`, `env_key = "OPENAI_API_KEY"`, which lanebot's codex adapter passes from its
        environment), with few retries so faults end quickly and `stream_idle_timeout_ms`. With
        `builtin_provider`, it sets `openai_base_url` for Codex's own OpenAI provider instead, whose
        key is CODEX_API_KEY (its retries are not configurable).

        The model is one Codex 0.171 knows (`gpt-5.5`), so it offers its full tool set, apply_patch
        included. Update checks, analytics, feedback and plugins (which fetch catalogs from
        github.com and chatgpt.com at startup) are off: Codex then calls nothing but this server.

        Codex refuses to set up the helper its Linux sandbox runs commands with when CODEX_HOME is
        inside the temporary folder (every sandboxed command then fails with `bwrap: execvp
        codex-linux-sandbox`); a test's CODEX_HOME under /tmp gets a TMPDIR of its own inside
        CODEX_HOME, which it is then not inside."""
        codex_home.mkdir(parents=True, exist_ok=True)
        url = f"{self.url}/v1"
        settings = CodexSettings(request_max_retries, stream_max_retries, stream_idle_timeout_ms)
        toml = codex_builtin_config_toml(url) if builtin_provider else codex_config_toml(url, settings)
        (codex_home / "config.toml").write_text(toml)
        env = {"CODEX_HOME": str(codex_home), ("CODEX_API_KEY" if builtin_provider else CODEX_KEY_ENV): key}
        if codex_home.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve()):
            private_tmp = codex_home / "process-tmp"
            private_tmp.mkdir(exist_ok=True)
            env["TMPDIR"] = str(private_tmp)
        return env

    # -- what the handler calls

    def _count_in_flight(self, change: int) -> None:
        with self._record.lock:
            self._record.in_flight += change

    def _record_request(self, request: RecordedRequest) -> None:
        with self._record.lock:
            self._record.requests.append(request)

    def _answer(self, call: ModelCall) -> Reply | Fault:
        with self._responder_lock:
            with self._record.lock:
                self._record.calls.append(call)
            return self.responder(call)

    def _responder_failed(self, error: BaseException) -> None:
        with self._record.lock:
            self._record.errors.append(error)


@dataclass(frozen=True)
class CodexSettings:
    """The scripted provider's retry and timeout settings."""

    request_max_retries: int = 2
    stream_max_retries: int = 2
    stream_idle_timeout_ms: int = 300_000


CODEX_QUIET_TOML = """check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
"""


def codex_config_toml(base_url: str, settings: CodexSettings) -> str:
    """Codex's config.toml with the scripted model provider (see ModelServer.codex_config)."""
    return f"""model = "{CODEX_MODEL}"
model_provider = "{CODEX_PROVIDER}"
{CODEX_QUIET_TOML}
[model_providers.{CODEX_PROVIDER}]
name = "scripted model server"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{CODEX_KEY_ENV}"
request_max_retries = {settings.request_max_retries}
stream_max_retries = {settings.stream_max_retries}
stream_idle_timeout_ms = {settings.stream_idle_timeout_ms}
"""


def codex_builtin_config_toml(base_url: str) -> str:
    """Codex's config.toml with its own OpenAI provider sent to `base_url`."""
    return f"""model = "{CODEX_MODEL}"
openai_base_url = "{base_url}"
{CODEX_QUIET_TOML}"""


WIRES: Mapping[str, Wire] = {
    "/v1/messages": anthropic.MESSAGES,
    "/v1/messages/count_tokens": anthropic.COUNT_TOKENS,
    "/v1/responses": openai.RESPONSES,
}


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    timeout = HANDLER_SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_CONNECT = do_POST

    def _handle(self) -> None:
        self.close_connection = True
        owner = self.server.owner
        owner._count_in_flight(1)
        try:
            self._serve(owner)
        finally:
            owner._count_in_flight(-1)

    def _serve(self, owner: ModelServer) -> None:
        body = self._read_body()
        path = urlsplit(self.path).path.rstrip("/")
        wire = WIRES.get(path) if self.command == "POST" else None
        main = wire is not None and isinstance(body, dict) and wire.is_main(body)
        owner._record_request(RecordedRequest(self.command, self.path, self._headers(), body, main))
        if self.headers.get("upgrade", "").lower() == "websocket":
            # Codex's own OpenAI provider tries the Responses API over a WebSocket first: a 426
            # makes it fall back to HTTP at once (a 404 makes it retry the WebSocket for seconds).
            self._send_json(426, {"error": {"type": "invalid_request_error", "message": "no WebSockets here"}})
        elif wire is None or not isinstance(body, dict):
            error = {"type": "not_found_error", "message": f"{path}: no such route"}
            self._send_json(404, {"type": "error", "error": error})
        elif main:
            self._main(owner, wire, body)
        else:
            self._respond(wire, body, wire.side_reply(body))

    def _main(self, owner: ModelServer, wire: Wire, body: Mapping[str, Any]) -> None:
        try:
            answer = owner._answer(wire.parse(body))
        except Exception as error:  # the scenario is broken: say so, do not let the CLI retry
            owner._responder_failed(error)
            status, headers, payload = wire.error(WireError(400, f"the responder failed: {error!r}"))
            self._send_json(status, payload, headers)
            return
        self._respond(wire, body, answer)

    def _respond(self, wire: Wire, body: Mapping[str, Any], answer: Reply | Fault) -> None:
        if isinstance(answer, Fault):
            self._fault(wire, body, answer)
        elif wire.streams(body):
            self._stream(wire.events(body, answer))
        else:
            self._send_json(200, wire.message(body, answer))

    def _fault(self, wire: Wire, body: Mapping[str, Any], fault: Fault) -> None:
        if fault.kind in ("overloaded", "rate_limited"):
            status, headers, payload = wire.fault_response(fault)
            self._send_json(status, payload, headers)
            return
        events = wire.events(body, Reply(text="This answer is cut short by the scripted model server."))
        if fault.kind == "cut":
            self._stream(events[: wire.cut_after], end=False)
        else:
            self._stream(events[: wire.hang_after], end=False)
            self._hang()

    # -- the wire

    def _read_body(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def _headers(self) -> dict[str, str]:
        return {name.lower(): value for name, value in self.headers.items()}

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, events: Iterable[Event], *, end: bool = True) -> None:
        """Server-sent events in chunked encoding; without `end`, no terminating chunk (a cut)."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for event in events:
                self._chunk(f"event: {event.name}\ndata: {json.dumps(event.data)}\n\n".encode())
            if end:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away: nothing more to say
            return

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _hang(self) -> None:
        """Send nothing more until the client disconnects or the server closes."""
        connection: socket.socket = self.connection
        while not self.server.closing.wait(HANG_POLL_S):
            if _peer_closed(connection):
                return


def _peer_closed(connection: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        if not readable:
            return False
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
