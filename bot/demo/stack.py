"""A sandbox GitHub and a lanebot App, as two real processes on loopback, in one folder.

`Stack` is what `lanebot demo` and the end-to-end tests stand on: it generates an App (key and
webhook secret), starts `lanebot sandbox serve` and `lanebot serve` pointed at each other, and
lets a caller act as people (`stack.human`, the sandbox's human API) and wait for what GitHub
would show. Nothing here reaches into either process: they talk HTTP, webhooks and git, as a
real installation does. The App's private key and secret reach the processes through files and
the environment, never argv.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from bot.sandbox.cli import HumanClient
from bot.sandbox.keys import generate_app_key

T = TypeVar("T")

SAMPLE_PROJECT = Path(__file__).resolve().parent / "sample"
APP_ID = 1
START_TIMEOUT_S = 30.0


class StepTimedOut(RuntimeError):
    """A step of the flow did not happen in time; the message says which and what was seen."""


@dataclass
class Stack:
    """Both servers of a demo or an end-to-end test, living under `root`."""

    root: Path
    lanebot_env: dict[str, str] = field(default_factory=dict)
    database: str = ""  # lanebot's DATABASE_URL; empty: a SQLite file under `root`
    # A shell command that starts `lanebot serve` instead of the default (it gets PORT in its
    # environment, and `lanebot` on PATH): the README's, as written, in its test.
    serve_command: str = ""
    # Turn the dashboard on: lanebot gets the sandbox App's OAuth client (GITHUB_CLIENT_ID and
    # GITHUB_CLIENT_SECRET, from `GET /_sandbox/app`) and LANEBOT_PUBLIC_URL, and the App's callback
    # URL is lanebot's /dashboard/oauth/callback, as `lanebot setup` would leave them.
    dashboard: bool = False
    sandbox_url: str = ""
    lanebot_url: str = ""
    human: HumanClient | None = None
    _sandbox: subprocess.Popen[bytes] | None = None
    _lanebot: subprocess.Popen[bytes] | None = None
    _lanebot_port: int = 0
    _secret: str = ""
    # `lanebot worker` processes started by `start_worker`, by name (none unless asked for).
    _workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # -- paths ------------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        return self.database or f"sqlite:///{self.root / 'lanebot.db'}"

    @property
    def request_log(self) -> Path:
        return self.root / "sandbox-requests.log"

    @property
    def workdir(self) -> Path:
        return self.root / "lanebot-work"

    # -- starting and stopping --------------------------------------------------------------

    def start(self) -> Stack:
        """Both servers up, or neither: a failed start stops whatever it had started."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> Stack:
        self.root.mkdir(parents=True, exist_ok=True)
        private_pem, public_pem = generate_app_key()
        (self.root / "app.private-key.pem").write_text(private_pem)
        (self.root / "app.public-key.pem").write_text(public_pem)
        self._secret = secrets.token_hex(20)
        secret_file = self.root / "webhook-secret"
        secret_file.write_text(self._secret)
        os.chmod(secret_file, 0o600)
        human = self._start_sandbox()
        self._lanebot_port = free_port()
        self.lanebot_url = f"http://127.0.0.1:{self._lanebot_port}"
        human.set_webhook(f"{self.lanebot_url}/api/github/webhooks")
        if self.dashboard:
            app = human.set_callback_urls([f"{self.lanebot_url}/dashboard/oauth/callback"])
            self.lanebot_env.update(
                {
                    "GITHUB_CLIENT_ID": app["client_id"],
                    "GITHUB_CLIENT_SECRET": app["client_secret"],
                    "LANEBOT_PUBLIC_URL": self.lanebot_url,
                }
            )
        self.start_lanebot()
        return self

    def _start_sandbox(self) -> HumanClient:
        argv = [
            sys.executable,
            "-m",
            "bot.cli",
            "sandbox",
            "serve",
            "--port",
            "0",
            "--state-dir",
            str(self.root / "sandbox"),
            "--request-log",
            str(self.request_log),
            "--delivery-log",
            str(self.root / "deliveries"),
            "--app-id",
            str(APP_ID),
            "--public-key",
            str(self.root / "app.public-key.pem"),
            "--webhook-secret-file",
            str(self.root / "webhook-secret"),
        ]
        log = open(self.root / "sandbox.log", "ab")
        self._sandbox = sandbox = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        assert sandbox.stdout is not None  # stdout=PIPE
        first_line = sandbox.stdout.readline().decode()
        if not first_line.startswith("Sandbox GitHub at "):
            raise StepTimedOut(f"the sandbox did not start; see {self.root / 'sandbox.log'}")
        # The rest of its stdout (uvicorn's access log) goes on to the log: a pipe nobody reads
        # fills after 64 KB, and the sandbox then blocks for ever on its next log line.
        threading.Thread(target=_copy_lines, args=(sandbox.stdout, log), daemon=True).start()
        self.sandbox_url = first_line.split()[3].rstrip(":")
        self.human = HumanClient(self.sandbox_url)
        return self.human

    def lanebot_environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith(("LANEBOT_", "GITHUB_"))}
        env.update(
            {
                "APP_ID": str(APP_ID),
                "PRIVATE_KEY_PATH": str(self.root / "app.private-key.pem"),
                "WEBHOOK_SECRET": self._secret,
                "GITHUB_API_URL": self.sandbox_url,
                "DATABASE_URL": self.database_url,
                "LANEBOT_WORKDIR": str(self.workdir),
                "LOG_LEVEL": "info",
            }
        )
        env.update(self.lanebot_env)
        return env

    def start_lanebot(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "bot.cli",
            "serve",
            "--port",
            str(self._lanebot_port),
            "--env-file",
            str(self.root / "no.env"),
        ]
        environment = self.lanebot_environment()
        if self.serve_command:
            argv = ["bash", "-c", self.serve_command]
            environment = {**environment, **_with_lanebot_on_path(environment), "PORT": str(self._lanebot_port)}
        log = open(self.root / "lanebot.log", "ab")
        self._lanebot = lanebot = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=self.root,
            start_new_session=True,
        )
        self.wait_for("lanebot answers /healthz", lambda: self._healthy(lanebot), timeout=START_TIMEOUT_S, poll=0.2)

    def _healthy(self, lanebot: subprocess.Popen[bytes]) -> bool:
        if lanebot.poll() is not None:
            raise StepTimedOut(f"lanebot exited with status {lanebot.returncode}; see {self.root / 'lanebot.log'}")
        try:
            return httpx.get(f"{self.lanebot_url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_workdir(self, name: str) -> Path:
        return self.root / f"worker-{name}-work"

    def start_worker(
        self, name: str, *, concurrency: int = 2, env: dict[str, str] | None = None, command: str = ""
    ) -> None:
        """Start `lanebot worker --name NAME` with lanebot's environment (LANEBOT_BROKER_URL among
        `lanebot_env`, or in `env`) and a work folder of its own, as another host would have; it
        runs until `stop`. Its log is worker-NAME.log under `root`. `command`: a shell command to
        run instead (with `lanebot` on PATH; it names the worker NAME itself)."""
        if name in self._workers:
            raise ValueError(f"a worker named {name!r} is already running")
        environment = {**self.lanebot_environment(), "LANEBOT_WORKDIR": str(self.worker_workdir(name)), **(env or {})}
        if command:
            environment.update(_with_lanebot_on_path(environment))
        argv = (
            ["bash", "-c", command]
            if command
            else [
                sys.executable,
                "-m",
                "bot.cli",
                "worker",
                "--name",
                name,
                "--concurrency",
                str(concurrency),
                "--env-file",
                str(self.root / "no.env"),
            ]
        )
        log = open(self.root / f"worker-{name}.log", "ab")
        self._workers[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.root, start_new_session=True
        )

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        return self._workers[name]

    def wait_for_workers(self, *, timeout: float = START_TIMEOUT_S) -> None:
        """Wait until every worker started answers Celery's ping on the broker (LANEBOT_BROKER_URL of
        `lanebot_env`); StepTimedOut naming a worker that exited, or those that never answered."""
        from bot.edges.executor.celery_executor import celery_app

        app = celery_app(self.lanebot_env["LANEBOT_BROKER_URL"], main="lanebot-demo")
        answered: set[str] = set()

        def ready() -> bool:
            self.check_workers()
            for reply in app.control.ping(timeout=1.0) or ():
                answered.update(node.split("@", 1)[0] for node in reply)
            return answered >= set(self._workers)

        try:
            self.wait_for(
                "the workers answer on the broker",
                ready,
                timeout=timeout,
                poll=0.2,
                seen=lambda: f"answered: {sorted(answered) or 'none'}",
            )
        finally:
            app.close()

    def check_workers(self) -> None:
        """StepTimedOut naming a worker that has exited (they run until `stop`)."""
        for name, process in self._workers.items():
            if process.poll() is not None:
                raise StepTimedOut(
                    f"worker {name} exited with status {process.returncode}; see {self.root / f'worker-{name}.log'}"
                )

    def kill_lanebot(self) -> None:
        """SIGKILL lanebot's whole process group: the App and every agent it started."""
        if self._lanebot is not None and self._lanebot.poll() is None:
            os.killpg(self._lanebot.pid, signal.SIGKILL)
            self._lanebot.wait()

    def stop(self) -> None:
        for process in (*self._workers.values(), self._lanebot, self._sandbox):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        if self.human is not None:
            self.human.close()

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- acting and looking -----------------------------------------------------------------

    def create_repository(
        self,
        full_name: str,
        *,
        config: str | None,
        source: Path = SAMPLE_PROJECT,
        maintainers: tuple[str, ...] = ("maintainer",),
        private: bool = False,
    ) -> dict[str, Any]:
        """A repository from `source` (with `config` as its .github/lanebot.yml), the App installed."""
        folder = self.root / "sources" / full_name.replace("/", "__")
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
        if config is not None:
            (folder / ".github").mkdir(exist_ok=True)
            (folder / ".github" / "lanebot.yml").write_text(config)
        assert self.human is not None, "start() the stack first"
        repository = self.human.create_repository(full_name, folder, private=private)
        for login in maintainers:
            self.human.add_collaborator(full_name, login, "maintain")
        return repository

    def repository(self, full_name: str) -> dict[str, Any]:
        assert self.human is not None, "start() the stack first"
        return self.human.state(full_name)

    def issue(self, full_name: str, number: int) -> dict[str, Any]:
        state = self.repository(full_name)
        return next(item for item in state["issues"] + state["pulls"] if item["number"] == number)

    def wait_for(
        self,
        step: str,
        probe: Callable[[], T | None],
        *,
        timeout: float,
        poll: float = 0.5,
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Poll `probe` until it returns something truthy; StepTimedOut naming `step` otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                detail = f"; {seen()}" if seen else ""
                raise StepTimedOut(f"timed out after {timeout:g} s waiting for: {step}{detail}")
            time.sleep(poll)

    def api_requests(self) -> list[str]:
        """The REST requests lanebot made (the sandbox's request log, without the human API and git)."""
        if not self.request_log.exists():
            return []
        lines = self.request_log.read_text().splitlines()
        return [line for line in lines if " /_sandbox/" not in line and ".git/" not in line]

    def bare_repository(self, full_name: str) -> Path:
        """The sandbox's bare git repository for `full_name` (read-only use: git log)."""
        matches = sorted((self.root / "sandbox").rglob(f"{full_name.split('/')[1]}.git"))
        if not matches:
            raise StepTimedOut(f"no git repository for {full_name} under {self.root / 'sandbox'}")
        return matches[0]


def _with_lanebot_on_path(environment: dict[str, str]) -> dict[str, str]:
    """PATH with the folder of this interpreter's `lanebot` first."""
    return {"PATH": os.pathsep.join([str(Path(sys.executable).parent), environment.get("PATH", os.defpath)])}


def _copy_lines(source: IO[bytes], target: IO[bytes]) -> None:
    for line in source:
        target.write(line)
        target.flush()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
