"""A sandbox served on a loopback port from a background thread: for tests and the demo, which
need real HTTP (git clients, a separately running lanebot) while they go on doing other things."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from types import TracebackType

import httpx
import uvicorn

from bot.sandbox.app import create_app
from bot.sandbox.core import Sandbox, SandboxConfig
from bot.sandbox.state import utc_now

STARTUP_LIMIT_SECONDS = 20.0  # a hang guard for a server that never comes up


class SandboxServer:
    """`with SandboxServer(config) as server:` serves a new sandbox at `server.url` until the block ends.

    The port is chosen by the system unless given; the sandbox's public URL (in clone URLs and
    payloads) is set to the address actually bound.
    """

    def __init__(
        self,
        config: SandboxConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], datetime] = utc_now,
        webhook_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # else no TCP_NODELAY
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, port))
        self.host, self.port = self._listener.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.sandbox = Sandbox(replace(config, public_url=self.url), clock=clock, webhook_client=webhook_client)
        self._server = uvicorn.Server(uvicorn.Config(create_app(self.sandbox), log_level="warning", lifespan="on"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._listener]}, name="sandbox-server", daemon=True
        )

    def start(self) -> SandboxServer:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_LIMIT_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STARTUP_LIMIT_SECONDS)
        self._listener.close()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
