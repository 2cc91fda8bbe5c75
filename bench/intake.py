"""Benchmark of the webhook intake: lanebot's real intake against a bare signature check.

    .venv/bin/python bench/intake.py [--duration 20 --connections 64 --database-url URL ...]

Signed deliveries (the real payloads under /work/shared/github/webhooks, each with an
`installation` added, every request a fresh X-GitHub-Delivery) go at a fixed number of
concurrent connections to two servers, one after the other, with the same uvicorn settings and
the same load generator:

  bare     a Starlette endpoint that only verifies the signature with gidgethub's
           `sansio.Event.from_http` and answers 202 (the floor: HTTP + HMAC + JSON parsing);
  lanebot  `bot.web.app:create_app` for a throwaway App, with its dispatcher running as in
           production, on SQLite in a temporary folder (or, with --database-url postgresql://...,
           in a throwaway database created on that server and dropped afterwards).

Each server runs in its own process (this script, re-invoked with the hidden --serve), one
uvicorn worker; the load generator is `wrk` with a Lua script (or, without wrk, this script
re-invoked with the hidden --generate), never in the server's process. With `taskset` and two
or more cores, the server is pinned to core 0 and the generator to core 1.

A run has a load window (--duration) and then a drain: no new request starts after the window,
the ones in flight are awaited, so every delivery sent is either answered or reported. After the
lanebot server has stopped, the rows in its `deliveries` table are compared with the deliveries
answered 2xx: the two sets must be equal. Any difference, any non-2xx answer or any socket
error is printed loudly and the exit status is 1. Issue 17's goal is reported (flat out, lanebot
at >= 80% of the bare endpoint's requests per second; paced with --rate, its p99 under 20 ms);
with --require-goal a miss exits 2.

--rounds N runs the targets in turn N times (medians and ranges are printed), so that a busy
machine slows both alike; --rate R paces the load to R requests per second in all, for the
latency at a load the server keeps up with. --no-dispatcher leaves lanebot's dispatcher
stopped (the intake's cost alone); --unique-bodies gives every request its own body and leaves
lanebot's replay check on, as users run it. bench/README.md says what each column means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent
if str(REPOSITORY) not in sys.path:  # run as a script: `bot` is importable from the checkout
    sys.path.insert(0, str(REPOSITORY))

DEFAULT_PAYLOADS = Path("/work/shared/github/webhooks")
WEBHOOK_PATH = "/api/github/webhooks"
HOST = "127.0.0.1"
# Deliveries to a GitHub App carry the installation; octokit's examples mostly do not.
BENCH_INSTALLATION = {"id": 4242, "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI0Mg=="}
BENCH_APP_ID = "4711"
DELIVERY_ID_LENGTH = 36  # a GUID, as GitHub sends in X-GitHub-Delivery
# GitHub gives up on a delivery after 10 s; a request still unanswered after this is a failure.
DRAIN_LIMIT_SECONDS = 15
SERVER_START_LIMIT_SECONDS = 60
SERVER_STOP_LIMIT_SECONDS = 60
SERVER_CORE, GENERATOR_CORE = 0, 1
# Issue 17's goals: flat out, at least 80% of the bare endpoint's requests per second; paced, p99 under 20 ms.
GOAL_RATIO = 0.8
GOAL_PACED_P99_MS = 20.0
# Flat out, the bare endpoint is the floor only if it had its core: below this share, something
# else limited it and the throughput ratio is not judged.
MIN_BARE_CORE_SHARE = 0.8
# --unique-bodies: each body carries its request's delivery id here, so that no body repeats.
UNIQUE_BODY_FIELD = "bench_delivery"
UNIQUE_BODY_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"
# Only these reach the lanebot server's Settings.load: nothing else from the caller's environment.
LANEBOT_SETTINGS = (
    "APP_ID",
    "PRIVATE_KEY",
    "WEBHOOK_SECRET",
    "WEBHOOK_PATH",
    "DATABASE_URL",
    "GITHUB_API_URL",
    "LOG_LEVEL",
    "LANEBOT_REPLAY_WINDOW",
)
# A closed port: should a handler call GitHub, it fails at once instead of reaching github.com.
UNREACHABLE_API_URL = "http://127.0.0.1:9"
TARGETS = ("bare", "lanebot")
TARGET_TITLES = {"bare": "bare endpoint (signature check only)", "lanebot": "lanebot intake"}


# -- requests: signed deliveries with a slot for a fresh delivery id ---------------------------


@dataclass(frozen=True)
class RequestTemplate:
    """One signed delivery as raw HTTP: `prefix + delivery_id + suffix` is the whole request.

    The signature covers the body only, so the X-GitHub-Delivery header can change per request
    without re-signing.
    """

    prefix: bytes
    suffix: bytes

    def with_delivery_id(self, delivery_id: str) -> bytes:
        if len(delivery_id) != DELIVERY_ID_LENGTH:
            raise ValueError(f"a delivery id is a {DELIVERY_ID_LENGTH}-character GUID, got {delivery_id!r}")
        return self.prefix + delivery_id.encode("ascii") + self.suffix

    def with_unique_body(self, delivery_id: str, secret: str) -> bytes:
        """The request with `delivery_id` also in its body (see `payload_mix`), signed again:
        a body no other request carries, so lanebot's replay check stores every one."""
        separator = self.suffix.index(b"\r\n\r\n") + 4
        body = self.suffix[separator:].replace(UNIQUE_BODY_PLACEHOLDER.encode("ascii"), delivery_id.encode("ascii"), 1)
        head = self.prefix.replace(
            _signature_in(self.prefix).encode("ascii"), signature(body, secret).encode("ascii"), 1
        )
        return head + delivery_id.encode("ascii") + self.suffix[:separator] + body


def _signature_in(head: bytes) -> str:
    line = next(line for line in head.split(b"\r\n") if line.startswith(b"X-Hub-Signature-256: "))
    return line.partition(b": ")[2].decode("ascii")


def signature(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def signed_request(event: str, payload: Mapping[str, Any], secret: str) -> RequestTemplate:
    """A POST to the webhook path shaped like GitHub's: its headers, compact JSON, signed."""
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    head = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\n"
        f"Host: {HOST}\r\n"
        "Accept: */*\r\n"
        "User-Agent: GitHub-Hookshot/lanebot-bench\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"X-GitHub-Event: {event}\r\n"
        "X-GitHub-Hook-ID: 1\r\n"
        f"X-GitHub-Hook-Installation-Target-ID: {BENCH_APP_ID}\r\n"
        "X-GitHub-Hook-Installation-Target-Type: integration\r\n"
        f"X-Hub-Signature-256: {signature(body, secret)}\r\n"
        "X-GitHub-Delivery: "
    )
    return RequestTemplate(prefix=head.encode("ascii"), suffix=b"\r\n\r\n" + body)


def payload_mix(folder: Path, unique_bodies: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """Every example payload under `folder` as (event, payload), with an `installation` added
    (and, for `unique_bodies`, a field the generator fills with each request's delivery id)."""
    files = sorted(folder.glob("*/*.json"))
    if not files:
        raise SystemExit(f"no webhook payloads under {folder}; pass --payloads FOLDER (one folder per event)")
    mix = []
    for path in files:
        payload = json.loads(path.read_text(encoding="utf-8"))
        payload.setdefault("installation", BENCH_INSTALLATION)
        if unique_bodies:
            payload[UNIQUE_BODY_FIELD] = UNIQUE_BODY_PLACEHOLDER
        mix.append((path.parent.name, payload))
    return mix


def encode_templates(templates: list[RequestTemplate]) -> bytes:
    """The file both load generators read: a count, then `len(prefix) len(suffix)` and the bytes."""
    parts = [b"%d\n" % len(templates)]
    for template in templates:
        parts += [b"%d %d\n" % (len(template.prefix), len(template.suffix)), template.prefix, template.suffix]
    return b"".join(parts)


def decode_templates(data: bytes) -> list[RequestTemplate]:
    count_line, _, rest = data.partition(b"\n")
    templates, position = [], 0
    for _ in range(int(count_line)):
        line_end = rest.index(b"\n", position)
        prefix_length, suffix_length = map(int, rest[position:line_end].split())
        start = line_end + 1
        middle = start + prefix_length
        templates.append(RequestTemplate(rest[start:middle], rest[middle : middle + suffix_length]))
        position = middle + suffix_length
    return templates


# -- what a load run measured -------------------------------------------------------------------


@dataclass
class LoadResult:
    """What one load generator run saw: counts, latency (ms) and the ids answered 2xx."""

    generator: str
    seconds: float
    sent: int
    statuses: Counter[int]
    answered_ids: set[str]
    latency_ms: dict[str, float]
    socket_errors: dict[str, int]
    seconds_elapsed: float = 0.0  # the whole run, drain included (set by whoever timed it)

    @property
    def answered(self) -> int:
        return sum(self.statuses.values())

    @property
    def answered_2xx(self) -> int:
        return sum(count for status, count in self.statuses.items() if 200 <= status < 300)

    @property
    def requests_per_second(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def merged(self, other: LoadResult) -> LoadResult:
        """Two runs against one server (warm-up and measured) as one, for counting deliveries."""
        return LoadResult(
            self.generator,
            self.seconds + other.seconds,
            self.sent + other.sent,
            self.statuses + other.statuses,
            self.answered_ids | other.answered_ids,
            {},
            dict(Counter(self.socket_errors) + Counter(other.socket_errors)),
        )


def parse_result_file(text: str, generator: str, seconds: float) -> LoadResult:
    """Read the result file a load generator wrote: `key value` lines and `id GUID` lines."""
    statuses: Counter[int] = Counter()
    ids: set[str] = set()
    latency: dict[str, float] = {}
    errors: dict[str, int] = {}
    sent = 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "sent":
            sent = int(value)
        elif key == "status":
            status, count = value.split()
            statuses[int(status)] += int(count)
        elif key == "id":
            ids.add(value)
        elif key.startswith("latency_"):
            latency[key.removeprefix("latency_")] = float(value) / 1000.0  # microseconds to ms
        elif key.startswith("error_"):
            errors[key.removeprefix("error_")] = int(value)
    return LoadResult(generator, seconds, sent, statuses, ids, latency, errors)


@dataclass(frozen=True)
class Reconciliation:
    """The deliveries answered 2xx against the rows stored; `equal` is the no-loss property."""

    answered_2xx: int
    stored: int
    lost: frozenset[str]  # answered 2xx, not in the database
    unanswered: frozenset[str]  # in the database, never answered 2xx (e.g. in flight at a cut-off)
    unmatched_2xx: int  # 2xx answers without a delivery id of their own (none, or one seen before)

    @property
    def equal(self) -> bool:
        return self.answered_2xx == self.stored and not self.lost and not self.unanswered and not self.unmatched_2xx


def reconcile(load: LoadResult, stored_ids: set[str]) -> Reconciliation:
    return Reconciliation(
        answered_2xx=load.answered_2xx,
        stored=len(stored_ids),
        lost=frozenset(load.answered_ids - stored_ids),
        unanswered=frozenset(stored_ids - load.answered_ids),
        unmatched_2xx=load.answered_2xx - len(load.answered_ids),
    )


@dataclass
class TargetResult:
    name: str
    measured: LoadResult
    total: LoadResult  # warm-up and measured together: what the database should hold
    stored_by_status: dict[str, int] = field(default_factory=dict)
    reconciliation: Reconciliation | None = None
    server_cpu_seconds: float | None = None  # CPU the server used while measured (drain included)

    @property
    def server_cpu(self) -> float | None:
        """The share of one core the server used while measured: well under 1 flat out means
        something else had the core."""
        if self.server_cpu_seconds is None or not self.measured.seconds_elapsed:
            return None
        return self.server_cpu_seconds / self.measured.seconds_elapsed

    @property
    def cpu_ms_per_request(self) -> float | None:
        """The server's CPU time per answer: steadier than req/s when others share the machine."""
        if self.server_cpu_seconds is None or not self.measured.answered:
            return None
        return self.server_cpu_seconds * 1000 / self.measured.answered

    def problems(self) -> list[str]:
        """Everything that makes the run a failure, each said plainly."""
        found = []
        non_2xx = {status: count for status, count in self.total.statuses.items() if not 200 <= status < 300}
        if non_2xx:
            found.append(f"{self.name}: non-2xx answers {dict(sorted(non_2xx.items()))}")
        if any(self.total.socket_errors.values()):
            found.append(f"{self.name}: socket errors {self.total.socket_errors}")
        if self.total.sent != self.total.answered:
            found.append(
                f"{self.name}: {self.total.sent} requests sent but {self.total.answered} answered "
                f"(the rest were unanswered after the {DRAIN_LIMIT_SECONDS} s drain)"
            )
        check = self.reconciliation
        if check is not None and not check.equal:
            found.append(
                f"{self.name}: {check.answered_2xx} deliveries answered 2xx but {check.stored} stored; "
                f"LOST (2xx, not stored): {len(check.lost)} {sorted(check.lost)[:5]}; "
                f"stored without a 2xx answer: {len(check.unanswered)}; "
                f"2xx answers without a delivery id of their own: {check.unmatched_2xx}"
            )
        return found


# -- the report ---------------------------------------------------------------------------------

Round = dict[str, TargetResult]  # one result per target, in the order they ran


def ratio(round_: Round) -> float | None:
    """lanebot's requests per second as a share of the bare endpoint's, in one round."""
    if "bare" not in round_ or "lanebot" not in round_:
        return None
    bare = round_["bare"].measured.requests_per_second
    return round_["lanebot"].measured.requests_per_second / bare if bare else None


def cost_ratio(round_: Round) -> float | None:
    """The bare endpoint's CPU per request as a share of lanebot's: the throughput ratio both would
    reach with a core each to themselves, and steadier than req/s when others share the machine."""
    if "bare" not in round_ or "lanebot" not in round_:
        return None
    bare, lanebot = round_["bare"].cpu_ms_per_request, round_["lanebot"].cpu_ms_per_request
    return bare / lanebot if bare and lanebot else None


def bare_core_share(rounds: list[Round]) -> float | None:
    """The median share of its core the bare endpoint had: flat out it should be nearly all of it."""
    shares = [share for round_ in rounds if "bare" in round_ and (share := round_["bare"].server_cpu) is not None]
    return statistics.median(shares) if shares else None


def spread(values: list[float], unit: str = "", digits: int = 0) -> str:
    """`median (min-max)`, or the one value."""

    def text(value: float) -> str:
        return f"{value:,.{digits}f}{unit}"

    if len(values) == 1:
        return text(values[0])
    return f"{text(statistics.median(values))} ({text(min(values))}-{text(max(values))})"


def goal_verdict(rounds: list[Round], paced: bool) -> tuple[bool, str]:
    """Issue 17's goal, on the medians over the rounds, and (in every round) not one delivery
    unaccounted for. Flat out: lanebot at >= 80% of the bare endpoint's throughput. Paced, both
    servers answer what is offered, so the latency is judged instead: lanebot's p99 under 20 ms.
    """
    shares = [share for round_ in rounds if (share := ratio(round_)) is not None]
    if not shares:
        return False, "goal not judged: it needs both targets"
    share = statistics.median(shares)
    p99 = statistics.median(round_["lanebot"].measured.latency_ms.get("p99", float("inf")) for round_ in rounds)
    lossless = not any(round_["lanebot"].problems() for round_ in rounds)
    core = bare_core_share(rounds)
    if paced:
        met = p99 < GOAL_PACED_P99_MS and lossless
        judged = f"lanebot p99 {p99:.1f} ms (goal < {GOAL_PACED_P99_MS:.0f} ms when paced)"
    elif core is not None and core < MIN_BARE_CORE_SHARE:
        # The bare endpoint was held back (by the load generator or by other processes): its req/s
        # is not the floor, and a ratio against it says nothing.
        met = False
        judged = (
            f"throughput NOT JUDGED: the bare endpoint had only {core:.0%} of its core "
            f"(under {MIN_BARE_CORE_SHARE:.0%}: the load generator or other processes held it back; "
            f"the ratio {share:.0%} is not the intake's), lanebot p99 {p99:.1f} ms (not judged)"
        )
    else:
        met = share >= GOAL_RATIO and lossless
        judged = f"throughput ratio {share:.0%} (goal >= {GOAL_RATIO:.0%}), lanebot p99 {p99:.1f} ms (not judged)"
    costs = [cost for round_ in rounds if (cost := cost_ratio(round_)) is not None]
    if costs:
        judged += f"; bare / lanebot CPU per request {statistics.median(costs):.0%}"
    return met, (
        f"goal {'MET' if met else 'MISSED'}: {judged}, "
        f"{'no delivery lost' if lossless else 'deliveries NOT accounted for'}"
    )


def render_runs(rounds: list[Round], database: str) -> str:
    """Every run, one row each."""
    rows = [
        "| round | target | req/s | p50 ms | p90 ms | p99 ms | max ms | server CPU | CPU ms/req | answered 2xx "
        "| stored | stored = 2xx |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for number, round_ in enumerate(rounds, 1):
        for name, result in round_.items():
            load, check = result.measured, result.reconciliation
            title = TARGET_TITLES[name] + (f" ({database})" if name == "lanebot" else "")
            latency = load.latency_ms
            rows.append(
                f"| {number} | {title} | {load.requests_per_second:,.0f} | {latency.get('p50', 0):.1f} "
                f"| {latency.get('p90', 0):.1f} | {latency.get('p99', 0):.1f} | {latency.get('max', 0):.1f} "
                f"| {f'{result.server_cpu:.0%}' if result.server_cpu is not None else 'n/a'} "
                f"| {f'{result.cpu_ms_per_request:.2f}' if result.cpu_ms_per_request is not None else 'n/a'} "
                f"| {result.total.answered_2xx:,} | {check.stored if check else 'n/a'} "
                f"| {('yes' if check.equal else '**NO**') if check else 'n/a'} |"
            )
    return "\n".join(rows)


def render_summary(rounds: list[Round]) -> str:
    """Per target, the median over the rounds with the range; then the ratio."""
    rows = ["| target | req/s | p50 ms | p99 ms | CPU ms/req |", "|---|---:|---:|---:|---:|"]
    for name in rounds[0]:
        loads = [round_[name].measured for round_ in rounds]
        costs = [cost for round_ in rounds if (cost := round_[name].cpu_ms_per_request) is not None]
        rows.append(
            f"| {TARGET_TITLES[name]} | {spread([load.requests_per_second for load in loads])} "
            f"| {spread([load.latency_ms.get('p50', 0) for load in loads], digits=1)} "
            f"| {spread([load.latency_ms.get('p99', 0) for load in loads], digits=1)} "
            f"| {spread(costs, digits=2) if costs else 'n/a'} |"
        )
    shares = [share * 100 for round_ in rounds if (share := ratio(round_)) is not None]
    if shares:
        rows.append(f"\nlanebot / bare throughput: **{spread(shares, '%')}**")
    costs = [cost * 100 for round_ in rounds if (cost := cost_ratio(round_)) is not None]
    if costs:
        rows.append(f"bare / lanebot CPU per request: {spread(costs, '%')}")
    return "\n".join(rows)


# -- processes: pinning, servers, load generators -----------------------------------------------


def pinning_available() -> bool:
    return shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2


def pinned(command: list[str], core: int, pin: bool) -> list[str]:
    return ["taskset", "-c", str(core), *command] if pin else command


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + SERVER_START_LIMIT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"the server exited with status {process.returncode} before listening; "
                f"its log:\n{log_path.read_text(errors='replace')[-4000:]}"
            )
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return
        time.sleep(0.1)
    raise SystemExit(f"the server did not listen on port {port} within {SERVER_START_LIMIT_SECONDS} s; see {log_path}")


@contextlib.contextmanager
def running_server(
    target: str, port: int, environment: dict[str, str], log_path: Path, pin: bool
) -> Iterator[subprocess.Popen[bytes]]:
    """This script as `--serve target` in its own process; stopped (gracefully) on leaving."""
    command = pinned(
        [sys.executable, str(Path(__file__).resolve()), "--serve", target, "--port", str(port)], SERVER_CORE, pin
    )
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT, cwd=REPOSITORY)
    try:
        wait_for_port(port, process, log_path)
        yield process
    finally:
        stop_process(process)


def cpu_seconds(pid: int) -> float | None:
    """The CPU time a process (all its threads) has used, from /proc; None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown: the lifespan stops the dispatcher
        try:
            process.wait(SERVER_STOP_LIMIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            print(
                f"warning: the server did not stop within {SERVER_STOP_LIMIT_SECONDS} s and was killed", file=sys.stderr
            )


@dataclass(frozen=True)
class LoadPlan:
    """How to drive one load run; `phase` keeps delivery ids of separate runs apart."""

    label: str  # names this run's files: target and phase
    port: int
    connections: int
    seconds: float
    threads: int
    phase: int
    rate: float  # requests per second offered in all; 0: as fast as answers come
    templates_path: Path
    work_dir: Path
    pin: bool
    signing_secret: str | None = None  # --unique-bodies: the generator signs each body itself


def run_wrk(plan: LoadPlan) -> LoadResult:
    """wrk with the Lua script below; interrupted as soon as every thread has drained."""
    script = plan.work_dir / "intake.lua"
    script.write_text(WRK_SCRIPT, encoding="utf-8")
    marker = plan.work_dir / f"drained-{plan.label}"
    result_path = plan.work_dir / f"wrk-result-{plan.label}.txt"
    command = pinned(
        [
            "wrk",
            "--threads",
            str(plan.threads),
            "--connections",
            str(plan.connections),
            "--duration",
            f"{int(plan.seconds) + DRAIN_LIMIT_SECONDS}s",
            "--timeout",
            f"{DRAIN_LIMIT_SECONDS}s",
            "--script",
            str(script),
            f"http://{HOST}:{plan.port}{WEBHOOK_PATH}",
            "--",
            str(plan.templates_path),
            str(plan.seconds),
            str(plan.phase),
            str(marker),
            str(result_path),
            str(plan.rate / plan.threads),
        ],
        GENERATOR_CORE,
        plan.pin,
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + plan.seconds + DRAIN_LIMIT_SECONDS + 5
    while process.poll() is None and time.monotonic() < deadline:
        if all(Path(f"{marker}-{number}").exists() for number in range(plan.threads)):
            process.send_signal(signal.SIGINT)  # wrk then stops at once and runs the script's done()
            break
        time.sleep(0.05)
    output, errors = process.communicate(timeout=DRAIN_LIMIT_SECONDS + 30)
    if process.returncode != 0 or not result_path.exists():
        raise SystemExit(
            f"wrk failed (status {process.returncode}):\n{errors.decode(errors='replace')}"
            f"{output.decode(errors='replace')}"
        )
    if errors.strip():
        raise SystemExit(f"the wrk script failed:\n{errors.decode(errors='replace')}")
    return parse_result_file(result_path.read_text(), "wrk", plan.seconds)


def run_python_generator(plan: LoadPlan) -> LoadResult:
    """The fallback without wrk: this script as `--generate`, in its own process."""
    result_path = plan.work_dir / f"python-result-{plan.label}.txt"
    command = pinned(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--generate",
            "--port",
            str(plan.port),
            "--connections",
            str(plan.connections),
            "--duration",
            str(plan.seconds),
            "--rate",
            str(plan.rate),
            "--templates",
            str(plan.templates_path),
            "--result",
            str(result_path),
        ],
        GENERATOR_CORE,
        plan.pin,
    )
    environment = dict(os.environ)
    if plan.signing_secret is not None:
        environment["BENCH_SIGNING_SECRET"] = plan.signing_secret
    completed = subprocess.run(
        command, capture_output=True, env=environment, timeout=plan.seconds + DRAIN_LIMIT_SECONDS + 60
    )
    if completed.returncode != 0:
        raise SystemExit(f"the Python load generator failed:\n{completed.stderr.decode(errors='replace')}")
    return parse_result_file(result_path.read_text(), "python (asyncio)", plan.seconds)


# -- the Python load generator (only without wrk) ----------------------------------------------


@dataclass
class GeneratorTally:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    answered_ids: list[str] = field(default_factory=list)
    latencies_us: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        ordered = sorted(self.latencies_us)
        lines = [f"sent {self.sent}", *(f"status {status} {count}" for status, count in self.statuses.items())]
        if ordered:
            for name, share in (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999)):
                lines.append(f"latency_{name} {ordered[min(len(ordered) - 1, int(share * len(ordered)))]:.0f}")
            lines += [f"latency_max {ordered[-1]:.0f}", f"latency_mean {sum(ordered) / len(ordered):.0f}"]
        lines += [f"error_{kind} {count}" for kind, count in self.errors.items()]
        lines += [f"id {delivery_id}" for delivery_id in self.answered_ids]
        return lines


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readuntil(b"\r\n")
    status = int(status_line.split()[1])
    length = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


@dataclass
class Pacer:
    """Hands out send times `interval` apart to whichever connection asks next (none when 0)."""

    interval: float
    next_slot: float

    async def wait_turn(self) -> None:
        if self.interval <= 0:
            return
        loop = asyncio.get_running_loop()
        slot, self.next_slot = self.next_slot, self.next_slot + self.interval
        await asyncio.sleep(max(0.0, slot - loop.time()))


async def drive_connection(
    templates: list[RequestTemplate],
    start: int,
    port: int,
    deadline: float,
    pacer: Pacer,
    tally: GeneratorTally,
    secret: str | None,
) -> None:
    """One keep-alive connection sending deliveries until the deadline, paced by `pacer`; with
    `secret`, each body made unique and signed again (`RequestTemplate.with_unique_body`)."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(HOST, port)
    index = start
    try:
        while True:
            await pacer.wait_turn()
            if loop.time() >= deadline:
                break
            template, delivery_id = templates[index % len(templates)], str(uuid.uuid4())
            request = (
                template.with_delivery_id(delivery_id)
                if secret is None
                else template.with_unique_body(delivery_id, secret)
            )
            index += 1
            began = time.perf_counter()
            tally.sent += 1
            try:
                writer.write(request)
                await writer.drain()
                status, body = await read_response(reader)
            except (OSError, asyncio.IncompleteReadError) as error:
                tally.errors["read" if isinstance(error, asyncio.IncompleteReadError) else "write"] += 1
                writer.close()
                reader, writer = await asyncio.open_connection(HOST, port)
                continue
            tally.latencies_us.append((time.perf_counter() - began) * 1e6)
            tally.statuses[status] += 1
            if 200 <= status < 300:
                tally.answered_ids.append(json.loads(body)["delivery"])
    finally:
        writer.close()


async def generate_load(
    templates: list[RequestTemplate],
    port: int,
    connections: int,
    seconds: float,
    rate: float,
    secret: str | None = None,
) -> GeneratorTally:
    tally = GeneratorTally()
    now = asyncio.get_running_loop().time()
    pacer = Pacer(interval=1 / rate if rate > 0 else 0.0, next_slot=now)
    await asyncio.gather(
        *(
            drive_connection(templates, number, port, now + seconds, pacer, tally, secret)
            for number in range(connections)
        )
    )
    return tally


# -- the servers (run in their own process with --serve) ---------------------------------------


def bare_app(secret: str) -> Any:
    """The floor: read the body, verify it with gidgethub, answer 202 with the delivery id."""
    import gidgethub
    from gidgethub import sansio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def receive(request: Request) -> JSONResponse:
        body = await request.body()
        try:
            event = sansio.Event.from_http(request.headers, body, secret=secret)
        except gidgethub.ValidationFailure:
            return JSONResponse({"message": "the signature does not match the body"}, status_code=401)
        except (gidgethub.BadRequest, KeyError) as error:
            return JSONResponse({"message": f"malformed delivery: {error!r}"}, status_code=400)
        return JSONResponse({"delivery": event.delivery_id}, status_code=202)

    return Starlette(routes=[Route(WEBHOOK_PATH, receive, methods=["POST"])])


def lanebot_app(work_dir: Path) -> Any:
    """lanebot as `lanebot serve` builds it, from settings read the production way; with
    BENCH_DISPATCHER=off (--no-dispatcher), its dispatcher is never started, so the deliveries only
    pile up, stored: what the intake costs without the handling beside it."""
    from bot.edges.settings import Settings
    from bot.web.app import create_app

    environ = {name: os.environ[name] for name in LANEBOT_SETTINGS if name in os.environ}
    app = create_app(Settings.load(environ=environ, env_file=None))
    if os.environ.get("BENCH_DISPATCHER") == "off":
        app.state.dispatcher.start = _leave_stopped
    return app


def _leave_stopped() -> None:
    pass


def serve(target: str, port: int) -> None:
    """Serve one target the way `lanebot serve` does: its logging set-up, then `uvicorn.run`."""
    import uvicorn

    from bot.cli.serve import configure_logging, server_implementation

    log_level = os.environ["LOG_LEVEL"]
    configure_logging(log_level)
    if target == "bare":
        app = bare_app(os.environ["WEBHOOK_SECRET"])
    else:
        app = lanebot_app(Path(os.environ["BENCH_WORK_DIR"]))
    # The same call for both targets, and the one `lanebot serve` makes (one worker, its http and loop).
    implementation = server_implementation()
    uvicorn.run(app, host=HOST, port=port, log_level=log_level, http=implementation.http, loop=implementation.loop)


# -- databases: a throwaway one for lanebot, counted after the run ------------------------------


@contextlib.contextmanager
def throwaway_database(database_url: str | None, work_dir: Path, label: str) -> Iterator[str]:
    """The URL of an empty database: SQLite in `work_dir`, or a new PostgreSQL database on the
    server of `database_url`, dropped on leaving."""
    if database_url is None:
        yield f"sqlite:///{work_dir / f'lanebot-{label}.db'}"
        return
    from sqlalchemy import create_engine, text

    from bot.edges.store.db import normalise_url

    server = normalise_url(database_url)
    if server.get_backend_name() != "postgresql":
        raise SystemExit("--database-url is for PostgreSQL (postgresql://...); SQLite is the default")
    name = f"lanebot_bench_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def stored_deliveries(database_url: str) -> tuple[set[str], dict[str, int]]:
    """The delivery ids in the database, and how many rows are in each status."""
    from sqlalchemy import func, select

    from bot.edges.store.db import make_engine
    from bot.edges.store.models import Delivery

    table = Delivery.__table__  # type: ignore[attr-defined]
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            ids = set(connection.execute(select(table.c.delivery_id)).scalars())
            counts = select(table.c.status, func.count()).group_by(table.c.status)
            by_status = dict(connection.execute(counts).all())
    finally:
        engine.dispose()
    return ids, by_status


# -- the benchmark -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThrowawayApp:
    """Settings for an App that exists only for this run."""

    secret: str
    private_key: str

    @classmethod
    def create(cls) -> ThrowawayApp:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        return cls(secret=secrets.token_hex(20), private_key=pem)

    def environment(
        self, database_url: str, log_level: str, work_dir: Path, *, unique_bodies: bool, dispatcher: bool
    ) -> dict[str, str]:
        """The server process's whole environment: secrets travel here, never in argv."""
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "APP_ID": BENCH_APP_ID,
            "PRIVATE_KEY": self.private_key,
            "WEBHOOK_SECRET": self.secret,
            "WEBHOOK_PATH": WEBHOOK_PATH,
            "DATABASE_URL": database_url,
            "GITHUB_API_URL": UNREACHABLE_API_URL,
            "LOG_LEVEL": log_level,
            "BENCH_WORK_DIR": str(work_dir),
            "BENCH_DISPATCHER": "on" if dispatcher else "off",
        }
        if not unique_bodies:
            # The load repeats the same example bodies under fresh delivery ids, which lanebot's
            # replay window would answer 200 without storing: off, so every delivery is stored.
            # --unique-bodies leaves it on, as users run lanebot.
            environment["LANEBOT_REPLAY_WINDOW"] = "0"
        return environment


def bench_target(
    target: str, label: str, args: argparse.Namespace, app: ThrowawayApp, work_dir: Path, pin: bool
) -> TargetResult:
    """Start the target's server, load it (warm-up, then measured), stop it, count what it stored."""
    generator = run_wrk if args.load_generator == "wrk" else run_python_generator
    port = free_port()
    plans = [
        LoadPlan(
            f"{label}-{phase}",
            port,
            args.connections,
            seconds,
            args.threads,
            phase,
            args.rate,
            work_dir / "requests.bin",
            work_dir,
            pin,
            app.secret if args.unique_bodies else None,
        )
        for phase, seconds in enumerate((args.warmup, args.duration))
        if seconds > 0
    ]
    with throwaway_database(args.database_url, work_dir, label) as database_url:
        environment = app.environment(
            database_url, args.log_level, work_dir, unique_bodies=args.unique_bodies, dispatcher=not args.no_dispatcher
        )
        with running_server(target, port, environment, work_dir / f"{label}-server.log", pin) as server:
            runs = [generator(plan) for plan in plans[:-1]]
            cpu_before, began = cpu_seconds(server.pid), time.monotonic()
            runs.append(generator(plans[-1]))
            cpu_after, elapsed = cpu_seconds(server.pid), time.monotonic() - began
        runs[-1].seconds_elapsed = elapsed
        result = TargetResult(target, runs[-1], runs[0].merged(runs[1]) if len(runs) == 2 else runs[0])
        if cpu_before is not None and cpu_after is not None:
            result.server_cpu_seconds = cpu_after - cpu_before
        if target == "lanebot":
            stored_ids, result.stored_by_status = stored_deliveries(database_url)
            result.reconciliation = reconcile(result.total, stored_ids)
    print(
        f"  {label}: {result.measured.requests_per_second:,.0f} req/s, "
        f"p99 {result.measured.latency_ms.get('p99', 0):.1f} ms, server CPU {result.server_cpu or 0:.0%}",
        file=sys.stderr,
    )
    return result


def environment_summary(args: argparse.Namespace, pin: bool, database: str, load_before: str) -> list[str]:
    import starlette
    import uvicorn

    from bot.cli.serve import server_implementation

    implementation = server_implementation()
    commit = (
        subprocess.run(
            ["git", "-C", str(REPOSITORY), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )
    return [
        f"date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}; commit {commit} (plus the working tree)",
        f"machine: {platform.machine()}, {os.cpu_count()} cores ({_cpu_model()}), Linux {platform.release()}",
        f"python {platform.python_version()}, uvicorn {uvicorn.__version__} "
        f"(http={implementation.http}, loop={implementation.loop}, 1 worker), starlette {starlette.__version__}",
        "lanebot: dispatcher "
        + ("never started (--no-dispatcher)" if args.no_dispatcher else "running, as in production")
        + "; replay check "
        + (
            "on (LANEBOT_REPLAY_WINDOW's default), every body unique (--unique-bodies)"
            if args.unique_bodies
            else "off (LANEBOT_REPLAY_WINDOW=0: the example bodies repeat)"
        ),
        f"load: {args.load_generator}, {args.connections} connections, {args.threads} thread(s), "
        + (f"paced at {args.rate:g} req/s, " if args.rate else "unpaced (each connection sends on each answer), ")
        + f"{args.warmup:g} s warm-up then {args.duration:g} s measured per target and round, "
        f"{args.rounds} round(s) alternating the targets; both servers at log level {args.log_level}",
        (
            "pinning: server on core 0, load generator on core 1 (taskset)"
            if pin
            else "pinning: none (no taskset, fewer than 2 cores, or --no-pin)"
        ),
        f"database: {database}",
        f"machine load average (1 min) before / after: {load_before} / {os.getloadavg()[0]:.2f}",
    ]


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run_benchmark(args: argparse.Namespace) -> int:
    pin = pinning_available() and not args.no_pin
    load_before = f"{os.getloadavg()[0]:.2f}"
    app = ThrowawayApp.create()
    templates = [
        signed_request(event, payload, app.secret) for event, payload in payload_mix(args.payloads, args.unique_bodies)
    ]
    database = "PostgreSQL" if args.database_url else "SQLite"
    print(
        f"{len(templates)} payloads; targets {', '.join(args.targets)}; database {database}; {args.rounds} round(s)",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(prefix="lanebot-bench-") as folder:
        work_dir = Path(folder)
        (work_dir / "requests.bin").write_bytes(encode_templates(templates))
        rounds = [
            {target: bench_target(target, f"{target}-{number}", args, app, work_dir, pin) for target in args.targets}
            for number in range(1, args.rounds + 1)
        ]
    print("\n".join(f"- {line}" for line in environment_summary(args, pin, database, load_before)))
    print()
    print(render_runs(rounds, database))
    if args.rounds > 1:
        print()
        print(render_summary(rounds))
    elif (share := ratio(rounds[0])) is not None:
        print(f"\nlanebot / bare throughput: **{share:.0%}**")
    for number, round_ in enumerate(rounds, 1):
        if "lanebot" in round_:
            print(
                f"\nround {number}: lanebot's deliveries after the run, by status: "
                f"{round_['lanebot'].stored_by_status}",
                end="",
            )
    print()
    return report_outcome(rounds, paced=args.rate > 0, require_goal=args.require_goal)


def report_outcome(rounds: list[Round], *, paced: bool, require_goal: bool) -> int:
    problems = [problem for round_ in rounds for result in round_.values() for problem in result.problems()]
    met, verdict = goal_verdict(rounds, paced)
    print(verdict)
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    if problems:
        print("!!! FAILED: not every delivery is accounted for; see above", file=sys.stderr)
        return 1
    return 2 if require_goal and not met else 0


# -- the command line ------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=20, help="measured seconds per target (default 20)")
    parser.add_argument("--warmup", type=float, default=2, help="warm-up seconds per target, not measured (default 2)")
    parser.add_argument("--connections", type=int, default=64, help="concurrent connections (default 64)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default 1: the generator has one core)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds; each runs every target once, so noise hits both alike (default 1)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="offer this many requests per second in all instead of sending on each answer; "
        "measures latency at a load the server keeps up with (default 0: unpaced)",
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server URL; lanebot then uses a throwaway database created there "
        "and dropped afterwards (default: SQLite in a temporary folder)",
    )
    parser.add_argument(
        "--targets",
        type=lambda text: text.split(","),
        default=list(TARGETS),
        help="comma-separated, from: bare,lanebot (default both, in that order)",
    )
    parser.add_argument(
        "--load-generator",
        choices=("wrk", "python"),
        default="wrk" if shutil.which("wrk") else "python",
        help="wrk when installed (default), else a Python generator in its own process",
    )
    parser.add_argument("--log-level", default="info", help="both servers' log level (default info, as in production)")
    parser.add_argument(
        "--payloads", type=Path, default=DEFAULT_PAYLOADS, help="folder of example payloads, one folder per event"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin server and generator to separate cores")
    parser.add_argument(
        "--no-dispatcher",
        action="store_true",
        help="never start lanebot's dispatcher: the intake alone, to tell its cost from the handling's",
    )
    parser.add_argument(
        "--unique-bodies",
        action="store_true",
        help="give every request a body of its own (signed by the generator; Python generator only) and "
        "leave lanebot's replay check on, as users run it (default: the example bodies repeat, the check is off)",
    )
    parser.add_argument("--require-goal", action="store_true", help="exit 2 when the goal of issue 17 is missed")
    parser.add_argument("--serve", choices=TARGETS, help=argparse.SUPPRESS)
    parser.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--templates", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.targets) - set(TARGETS)
    if unknown:
        parser.error(f"unknown target(s) {', '.join(sorted(unknown))}; choose from {', '.join(TARGETS)}")
    if args.connections < args.threads or args.threads < 1:
        parser.error("--connections must be at least --threads, and --threads at least 1")
    if args.duration <= 0 or args.rounds < 1 or args.rate < 0:
        parser.error("--duration must be positive, --rounds at least 1 and --rate not negative")
    if args.unique_bodies and args.load_generator != "python":
        parser.error("--unique-bodies signs each request, which wrk's script cannot: add --load-generator python")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.serve:
        serve(args.serve, args.port)
        return 0
    if args.generate:
        templates = decode_templates(args.templates.read_bytes())
        secret = os.environ.get("BENCH_SIGNING_SECRET")  # set for --unique-bodies; never in argv
        tally = asyncio.run(generate_load(templates, args.port, args.connections, args.duration, args.rate, secret))
        args.result.write_text("\n".join(tally.lines()) + "\n")
        return 0
    return run_benchmark(args)


# The wrk side: fresh delivery ids over pre-signed bodies, a load window, then a drain. wrk runs
# request/response/delay in each thread's own Lua state and done() in the main one; `args` are
# the words after `--` on wrk's command line.
WRK_SCRIPT = r"""
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock_id, bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local IDLE_MS = 3600 * 1000
local clock = ffi.new("bench_timespec")

local function now()
  ffi.C.clock_gettime(CLOCK_MONOTONIC, clock)
  return tonumber(clock.tv_sec) + tonumber(clock.tv_nsec) * 1e-9
end

local function read_templates(path)
  local file = assert(io.open(path, "rb"))
  local data = file:read("*a")
  file:close()
  local line_end = data:find("\n", 1, true)
  local count, position, list = tonumber(data:sub(1, line_end - 1)), line_end + 1, {}
  for i = 1, count do
    line_end = data:find("\n", position, true)
    local a, b = data:sub(position, line_end - 1):match("^(%d+) (%d+)$")
    a, b = tonumber(a), tonumber(b)
    position = line_end + 1
    list[i] = {
      prefix = data:sub(position, position + a - 1),
      suffix = data:sub(position + a, position + a + b - 1),
    }
    position = position + a + b
  end
  return list
end

-- main state: number the threads, and after the run write what they saw
local threads = {}
function setup(thread)
  thread:set("thread_no", #threads)
  table.insert(threads, thread)
end

-- thread state
thread_no = thread_no or 0
-- inflight: sends reserved or made, not yet answered; closed: the window is over for this thread
sent, inflight, counter = 0, 0, 0
statuses, answered = {}, {}
local templates, deadline, phase, marker, next_template, interval, next_slot
local running, closed, drained = false, false, false

function init(args)
  templates = read_templates(args[1])
  deadline = now() + tonumber(args[2])
  phase = tonumber(args[3])
  marker = args[4] .. "-" .. thread_no
  result_path = args[5]
  next_template = thread_no % #templates + 1
  local rate = tonumber(args[6])
  interval = rate > 0 and 1 / rate or 0
  next_slot = now()
  math.randomseed(os.time() * 1000 + thread_no * 7919 + phase)
end

-- Tell the driver (through a file) that this thread has nothing in flight and will send no more.
local function check_drained()
  if closed and inflight == 0 and not drained then
    drained = true
    assert(io.open(marker, "w")):close()
  end
end

-- Random like GitHub's GUIDs, unique by construction: the last group is phase, thread, counter.
local function delivery_id()
  counter = counter + 1
  return string.format("%04x%04x-%04x-4%03x-%04x-%x%x%010x", math.random(0, 65535), math.random(0, 65535),
    math.random(0, 65535), math.random(0, 4095), 32768 + math.random(0, 16383), phase % 16, thread_no % 16, counter)
end

-- Called before every request: when to send it (ms from now), or never once the window is over.
-- Paced, each call takes the next free send time (`interval` apart); unpaced, it sends at once.
function delay()
  running = true  -- wrk calls request() once before the run to check it; that one is not sent
  local t = now()
  local slot = t
  if interval > 0 then
    slot, next_slot = next_slot, next_slot + interval
  end
  if closed or slot >= deadline then
    closed = true
    check_drained()
    return IDLE_MS
  end
  inflight = inflight + 1
  return math.max(0, (slot - t) * 1000)
end

function request()
  local template = templates[next_template]
  next_template = next_template % #templates + 1
  if running then sent = sent + 1 end
  return template.prefix .. delivery_id() .. template.suffix
end

function response(status, headers, body)
  inflight = inflight - 1
  statuses[status] = (statuses[status] or 0) + 1
  if status >= 200 and status < 300 then
    local id = body:match('"delivery"%s*:%s*"([^"]+)"')
    if id then answered[#answered + 1] = id end
  end
  check_drained()
end

function done(summary, latency, requests)
  local out = assert(io.open(threads[1]:get("result_path"), "w"))
  local sent_total, by_status = 0, {}
  for _, thread in ipairs(threads) do
    sent_total = sent_total + thread:get("sent")
    for status, count in pairs(thread:get("statuses")) do by_status[status] = (by_status[status] or 0) + count end
    for _, id in ipairs(thread:get("answered")) do out:write("id ", id, "\n") end
  end
  out:write("sent ", sent_total, "\n")
  for status, count in pairs(by_status) do out:write("status ", status, " ", count, "\n") end
  for _, p in ipairs({ {"p50", 50}, {"p90", 90}, {"p99", 99}, {"p999", 99.9} }) do
    out:write("latency_", p[1], " ", latency:percentile(p[2]), "\n")
  end
  out:write("latency_max ", latency.max, "\n", "latency_mean ", latency.mean, "\n")
  for kind, count in pairs(summary.errors) do
    if kind ~= "status" then out:write("error_", kind, " ", count, "\n") end
  end
  out:close()
end
"""


if __name__ == "__main__":
    sys.exit(main())
