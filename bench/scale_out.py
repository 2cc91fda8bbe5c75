"""Lanes on 1, 2 and 4 `lanebot worker`s against the embedded executor, with agents that sleep.

Through the real stack (bot/demo/stack.py: the sandbox GitHub and `lanebot serve` as processes) on
a throwaway PostgreSQL database (created on `--postgres` and dropped after, one per configuration)
and, for the workers, Redis as the broker (`--redis`, on a database number of its own, claimed as
tests/e2e/test_workers.py claims one, and flushed after). Each configuration, in turn in one session:

- `embedded`: `lanebot serve` alone, lanes as asyncio tasks in it (no broker);
- `N workers` for each N of `--workers`: `lanebot serve` with LANEBOT_BROKER_URL and N
  `lanebot worker --concurrency 1` processes, each with a work folder and a name of its own.

In each, `--runs` issues (8) in one repository, each with a hand-written plan of `--lanes`
independent units (4): recipe agents (no model) writing one file each, with the check
`sleep --sleep` (2 s), so that a lane's cost beyond the sleep is lanebot's. All the gates are
waited for, then every run is approved at once, and the bench waits until every run is done
(its pull request opened). The caps are the same for every configuration: LANEBOT_MAX_LANES
`--max-lanes` (default: the largest of `--workers`), LANEBOT_MAX_RUNS_PER_REPO = `--runs` (every
run builds at once), the workflow's `build.max_lanes` = `--lanes`, barrier schedule, no retries,
`verify: "true"`.

Figures, each also as a ratio against the embedded executor's in the same session:

- makespan: from the first `/approve` posted until the last run entered `done` (its `state` event);
- a run's PR: the median over the runs of the /approve posted until that run entered `done` (its
  pull request opened): the latency one maintainer sees while all the runs share the executor;
- lanes per minute: all lanes / makespan;
- parallelism P: the most lanes that can run at once: LANEBOT_MAX_LANES for the embedded executor,
  min(workers x 1, LANEBOT_MAX_LANES) for the workers;
- overhead per lane: (makespan - ideal) x P / lanes, ideal = ceil(lanes / P) x sleep: the wall
  clock a lane holds one of the P slots beyond its sleep, on average, everything lanebot does
  around the lanes (webhooks, merges, integrate, pull requests) included;
- queueing delay: a lane's `lane_start` event (the orchestrator submits it to the executor right
  after) until its agent session's row starts (`agent_sessions.started_at`, written when the job
  begins on its host), median and max over every lane; and the median over the lanes that had a
  free slot when they were submitted (fewer than P lanes submitted before them and not yet ended),
  which is what the executor adds by itself;
- lane session: the median span of the lanes' agent_sessions rows (worktree, agent, check, commit,
  push, check runs: the lane's own work, the sleep included), which grows when the lanes that run
  at once contend for the cores;
- scaling efficiency (workers): lanes per minute at N workers / (N' x lanes per minute at 1 worker),
  N' = min(N, LANEBOT_MAX_LANES); the issue's goal is at least 0.8 at 4 workers.

    .venv/bin/python bench/scale_out.py [--runs 8] [--lanes 4] [--sleep 2] [--workers 1,2,4] [--rounds 1]
    .venv/bin/python bench/scale_out.py --quick        # 2 runs of 2 lanes, 0.5 s, 1 and 2 workers

With `--rounds N` the configurations run N times in turn (embedded, 1, 2, 4, embedded, ...), each
ratio within its round, and a second table gives the medians and ranges over the rounds. Prints
Markdown tables. Not a test: the numbers depend on the machine and what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy.engine import Engine  # noqa: E402

from bot.demo.services import claimed_redis, throwaway_postgres  # noqa: E402
from bot.demo.stack import Stack  # noqa: E402
from bot.edges.store import db, runs  # noqa: E402
from bot.runner.plan import issue_run  # noqa: E402

REPO = "octo-org/scale"
MAINTAINER = "maintainer"
REDIS_URL = "redis://127.0.0.1:6379"
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
STEP_TIMEOUT_S = 300.0


def config(lanes: int) -> str:
    return (
        "build:\n  agent: recipe\n  schedule: barrier\n"
        f"  max_lanes: {lanes}\n  max_retries: 0\n  timeout: 10m\n"
        'integrate:\n  agent: recipe\n  verify: "true"\n  max_retries: 0\n'
        "pull_request:\n  draft: false\n"
        "review:\n  enabled: false\n"
    )


def plan_body(run: int | str, lanes: int, sleep: float) -> str:
    units = []
    for lane in range(lanes):
        path = f"scale/run{run}-lane{lane}.txt"
        units.append(
            {
                "id": f"lane-{lane}",
                "title": f"Lane {lane}",
                "needs": [],
                "files": "^" + path.replace(".", r"\.") + "$",
                "check": f"sleep {sleep:g}",
                "brief": f"Write the file below.\n\n```text path={path}\nrun {run}, lane {lane}\n```",
            }
        )
    jsonl = "".join(json.dumps(unit) + "\n" for unit in units)
    return f"Scale-out bench, run {run}.\n\n~~~lanebot-plan\n{jsonl}~~~\n"


@dataclass
class Measured:
    name: str
    workers: int  # 0: the embedded executor
    parallelism: int
    lanes: int
    sleep: float
    makespan: float = 0.0
    delays: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)  # lane sessions, started to ended
    latencies: list[float] = field(default_factory=list)  # each run: the /approve posted to done
    free_slot_delays: list[float] = field(default_factory=list)
    hosts: dict[str, int] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after
    wall: float = 0.0  # the whole configuration, stack start to stop
    notes: list[str] = field(default_factory=list)
    round: int = 1
    cold_delays: list[float] = field(default_factory=list)  # the warm-up run's lanes
    cold_hosts: dict[str, int] = field(default_factory=dict)

    @property
    def per_minute(self) -> float:
        return self.lanes / self.makespan * 60

    @property
    def ideal(self) -> float:
        return math.ceil(self.lanes / self.parallelism) * self.sleep

    @property
    def overhead(self) -> float:
        return (self.makespan - self.ideal) * self.parallelism / self.lanes


# --------------------------------------------------------------------------- the services


# --------------------------------------------------------------------------- one configuration


def measure(name: str, workers: int, args: argparse.Namespace, work: Path, broker: str | None) -> Measured:
    lanes = args.runs * args.lanes
    parallelism = args.max_lanes if workers == 0 else min(workers, args.max_lanes)
    result = Measured(name, workers, parallelism, lanes, args.sleep)
    clock = time.monotonic()
    result.load = (os.getloadavg()[0], 0.0)
    root = work / name.replace(" ", "-")
    with throwaway_postgres(args.postgres, user="bench/scale_out.py", prefix="lanebot_scale") as database:
        env = {
            "LANEBOT_MAX_LANES": str(args.max_lanes),
            "LANEBOT_MAX_RUNS_PER_REPO": str(args.runs),
            "LANEBOT_RECOVER_DELIVERIES": "0",
            "LOG_LEVEL": "info",
        }
        if broker is not None:
            env["LANEBOT_BROKER_URL"] = broker
        with Stack(root, lanebot_env=env, database=database) as stack:
            names = [f"w{index + 1}" for index in range(workers)]
            for worker in names:
                stack.start_worker(worker, concurrency=1)
            if broker is not None and names:
                stack.wait_for_workers(timeout=60)
            engine = db.make_engine(stack.database_url)
            try:
                drive(stack, engine, args, result)
            finally:
                engine.dispose()
    result.load = (result.load[0], os.getloadavg()[0])
    result.wall = time.monotonic() - clock
    return result


def drive(stack: Stack, engine: Engine, args: argparse.Namespace, result: Measured) -> None:
    human = stack.human
    assert human is not None
    stack.create_repository(REPO, config=config(args.lanes), maintainers=(MAINTAINER,))
    if args.warmup:
        warm_up(stack, engine, args, result)
    numbers = []
    for run in range(args.runs):
        issue = human.open_issue(
            REPO, login=MAINTAINER, title=f"Scale {run}", body=plan_body(run, args.lanes, args.sleep)
        )
        human.add_label(REPO, issue["number"], "lanebot", login=MAINTAINER)
        numbers.append(issue["number"])
    for number in numbers:
        stack.wait_for(
            f"the gate of #{number}",
            lambda number=number: (r := issue_run(engine, REPO, number)) is not None and r.state == "awaiting_approval",
            timeout=STEP_TIMEOUT_S,
            poll=0.2,
        )
    started = datetime.now(UTC)
    for number in numbers:
        human.comment(REPO, number, login=MAINTAINER, body="/approve")

    def all_ended() -> bool:
        states = [getattr(issue_run(engine, REPO, number), "state", None) for number in numbers]
        bad = [f"#{n}: {s}" for n, s in zip(numbers, states, strict=True) if s in ("blocked", "failed", "cancelled")]
        if bad:
            raise RuntimeError(f"runs did not finish: {', '.join(bad)}; see {stack.root}")
        return all(state == "done" for state in states)

    stack.wait_for("every run done", all_ended, timeout=STEP_TIMEOUT_S + result.lanes * args.sleep * 2, poll=0.2)
    ended = started
    for number in numbers:
        run = issue_run(engine, REPO, number)
        assert run is not None and run.id is not None
        events = runs.run_events(engine, run.id)
        done = [e.at for e in events if e.kind == "state" and json.loads(e.data).get("to") == "done"]
        ended = max([ended, *done])
        result.latencies += [(at - started).total_seconds() for at in done[:1]]
        collect(engine, run.id, events, result)
    result.makespan = (ended - started).total_seconds()
    free_slots(result)


def warm_up(stack: Stack, engine: Engine, args: argparse.Namespace, result: Measured) -> None:
    """One run of `--lanes` lanes, not measured: every worker process starts its loop, mints its
    tokens and clones its mirror (what the first job on a host pays once); its lanes' queueing
    delays are kept as the cold ones."""
    human = stack.human
    assert human is not None
    body = plan_body("warmup", args.lanes, args.sleep)
    number = human.open_issue(REPO, login=MAINTAINER, title="Warm-up", body=body)["number"]
    human.add_label(REPO, number, "lanebot", login=MAINTAINER)
    stack.wait_for(
        "the warm-up's gate",
        lambda: (r := issue_run(engine, REPO, number)) is not None and r.state == "awaiting_approval",
        timeout=STEP_TIMEOUT_S,
        poll=0.2,
    )
    human.comment(REPO, number, login=MAINTAINER, body="/approve")
    run = stack.wait_for(
        "the warm-up done",
        lambda: (r := issue_run(engine, REPO, number)) is not None and r.state == "done" and r,
        timeout=STEP_TIMEOUT_S,
        poll=0.2,
    )
    assert run.id is not None
    cold = Measured("warm-up", result.workers, result.parallelism, args.lanes, args.sleep)
    collect(engine, run.id, runs.run_events(engine, run.id), cold)
    _SPANS.pop(id(cold), None)
    result.cold_delays = cold.delays
    result.cold_hosts = cold.hosts


# (submitted, started, ended) of every lane of the configuration, for `free_slots`.
_SPANS: dict[int, list[tuple[datetime, datetime, datetime]]] = {}


def collect(engine: Engine, run_id: int, events: list[Any], result: Measured) -> None:
    submitted: dict[tuple[str, int], datetime] = {}
    for event in events:
        if event.kind == "lane_start":
            data = json.loads(event.data)
            submitted[(data["unit"], int(data["attempt"]))] = event.at
    units = {lane.id: lane.unit_id for lane in runs.lanes(engine, run_id)}
    spans = _SPANS.setdefault(id(result), [])
    for session in runs.sessions(engine, run_id):
        if session.kind != "lane" or session.lane_id is None:
            continue
        key = (units[session.lane_id], session.attempt)
        if key not in submitted:
            result.notes.append(f"run {run_id}: no lane_start event for {key}")
            continue
        result.delays.append((session.started_at - submitted[key]).total_seconds())
        if session.ended_at is not None:
            result.spans.append((session.ended_at - session.started_at).total_seconds())
        result.hosts[session.host or "?"] = result.hosts.get(session.host or "?", 0) + 1
        spans.append((submitted[key], session.started_at, session.ended_at or session.started_at))
        if session.status != "succeeded":
            result.notes.append(f"run {run_id}: lane {key} session {session.status}")


def free_slots(result: Measured) -> None:
    """The delays of the lanes submitted while fewer than P lanes submitted before them had not ended."""
    spans = sorted(_SPANS.pop(id(result), []))
    for index, (submitted, started, _) in enumerate(spans):
        ahead = sum(1 for other in spans[:index] if other[2] > submitted)
        if ahead < result.parallelism:
            result.free_slot_delays.append((started - submitted).total_seconds())


# --------------------------------------------------------------------------- the report


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base else "n/a"


def table(results: list[Measured], max_lanes: int) -> str:
    lines = [
        "| round | executor | P | makespan | ratio | a run's PR, median | ratio | lanes/min | ratio | scaling eff. | overhead/lane | ratio "
        "| lane session | queue delay, median (max) | ratio | with a free slot, median | ratio | lanes per host |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        base = next(b for b in results if b.round == r.round and b.workers == 0)
        one = next((b for b in results if b.round == r.round and b.workers == 1), None)
        delay = statistics.median(r.delays) if r.delays else float("nan")
        latency = statistics.median(r.latencies)
        free = statistics.median(r.free_slot_delays) if r.free_slot_delays else float("nan")
        base_delay = statistics.median(base.delays) if base.delays else 0.0
        base_free = statistics.median(base.free_slot_delays) if base.free_slot_delays else 0.0
        efficiency = ""
        if r.workers and one is not None:
            efficiency = f"{r.per_minute / (min(r.workers, max_lanes) * one.per_minute):.2f}"
        hosts = "/".join(str(count) for _, count in sorted(r.hosts.items())) if r.workers else "serve"
        lines.append(
            f"| {r.round} | {r.name} | {r.parallelism} | {r.makespan:.1f} s | {ratio(r.makespan, base.makespan)} "
            f"| {latency:.1f} s | {ratio(latency, statistics.median(base.latencies))} "
            f"| {r.per_minute:.1f} | {ratio(r.per_minute, base.per_minute)} | {efficiency} "
            f"| {r.overhead:.2f} s | {ratio(r.overhead, base.overhead)} "
            f"| {statistics.median(r.spans) if r.spans else float('nan'):.2f} s "
            f"| {delay:.2f} s ({max(r.delays, default=float('nan')):.2f}) | {ratio(delay, base_delay)} "
            f"| {free:.2f} s ({len(r.free_slot_delays)}) | {ratio(free, base_free)} | {hosts} |"
        )
    return "\n".join(lines)


def summary(results: list[Measured], max_lanes: int) -> str:
    """Per configuration over the rounds: medians (ranges) of the figures and of their ratios."""

    def spread(values: list[float], unit: str = "", digits: int = 2) -> str:
        middle = statistics.median(values)
        if len(values) == 1:
            return f"{middle:.{digits}f}{unit}"
        return f"{middle:.{digits}f}{unit} ({min(values):.{digits}f}–{max(values):.{digits}f})"

    def base(r: Measured, workers: int) -> Measured | None:
        return next((b for b in results if b.round == r.round and b.workers == workers), None)

    lines = [
        "| executor | rounds | makespan | a run's PR | lanes/min | lanes/min ratio | scaling eff. | overhead/lane | overhead ratio "
        "| free-slot queue delay | delay ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in dict.fromkeys(r.name for r in results):
        mine = [r for r in results if r.name == name]
        bases = [base(r, 0) for r in mine]
        ones = [base(r, 1) for r in mine]
        per_minute = [r.per_minute / b.per_minute for r, b in zip(mine, bases, strict=True) if b]
        overheads = [r.overhead / b.overhead for r, b in zip(mine, bases, strict=True) if b and b.overhead]
        free = [statistics.median(r.free_slot_delays) for r in mine if r.free_slot_delays]
        free_ratio = [
            statistics.median(r.free_slot_delays) / statistics.median(b.free_slot_delays)
            for r, b in zip(mine, bases, strict=True)
            if b and r.free_slot_delays and b.free_slot_delays
        ]
        efficiency = [
            r.per_minute / (min(r.workers, max_lanes) * o.per_minute)
            for r, o in zip(mine, ones, strict=True)
            if r.workers and o
        ]
        lines.append(
            f"| {name} | {len(mine)} | {spread([r.makespan for r in mine], ' s', 1)} "
            f"| {spread([statistics.median(r.latencies) for r in mine], ' s', 1)} "
            f"| {spread([r.per_minute for r in mine], '', 1)} | {spread(per_minute, '×')} "
            f"| {spread(efficiency) if efficiency else ''} | {spread([r.overhead for r in mine], ' s')} "
            f"| {spread(overheads, '×')} | {spread(free, ' s')} | {spread(free_ratio, '×')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=8, help="runs (issues), all approved at once (default 8)")
    parser.add_argument("--lanes", type=int, default=4, help="independent lanes per run (default 4)")
    parser.add_argument("--sleep", type=float, default=2.0, help="seconds each lane's check sleeps (default 2)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every configuration, in turn (default 1)")
    parser.add_argument("--max-lanes", type=int, default=0, help="LANEBOT_MAX_LANES (default: the most workers)")
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="measure from cold: no unmeasured run of --lanes lanes first (each worker then clones its mirror "
        "inside the measurement)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke check: 2 runs of 2 lanes, 0.5 s, 1,2 workers")
    parser.add_argument("--redis", default=REDIS_URL, help=f"the Redis server, no database number ({REDIS_URL})")
    parser.add_argument("--postgres", default=POSTGRES_URL, help="the PostgreSQL server (its database is not touched)")
    parser.add_argument("--keep", action="store_true", help="keep the stacks' folders (logs) and print where")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.lanes, args.sleep, args.workers = 2, 2, 0.5, "1,2"
    counts = [int(part) for part in args.workers.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        parser.error("--workers: whole numbers of at least 1, comma-separated")
    args.max_lanes = args.max_lanes or max(counts)

    # SIGTERM stops the bench as Ctrl-C does: the stacks, the database and the Redis number are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="lanebot-scale-"))
    began = datetime.now(UTC)
    clock = time.monotonic()
    results: list[Measured] = []
    try:
        with claimed_redis(args.redis, user="bench/scale_out.py") as broker:
            for round_ in range(1, args.rounds + 1):
                for workers in [0, *counts]:
                    name = "embedded" if workers == 0 else f"{workers} worker{'s' if workers > 1 else ''}"
                    print(f"… round {round_}: {name}", file=sys.stderr, flush=True)
                    result = measure(name, workers, args, work / f"round-{round_}", broker if workers else None)
                    result.round = round_
                    print(
                        f"  {name}: makespan {result.makespan:.1f} s, {result.wall:.0f} s in all",
                        file=sys.stderr,
                        flush=True,
                    )
                    results.append(result)
    finally:
        if args.keep:
            print(f"The stacks' folders: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    command = "python bench/scale_out.py " + " ".join(argv if argv is not None else sys.argv[1:])
    loads = [value for r in results for value in r.load]
    print(f"## Scale-out ({began:%Y-%m-%d %H:%M} UTC)\n")
    print(
        f"`{command.strip()}` on {os.cpu_count()} cores, {time.monotonic() - clock:.0f} s in all; "
        f"1-minute load average {min(loads):.1f}–{max(loads):.1f}\n"
    )
    print(
        f"{args.runs} runs × {args.lanes} lanes, check `sleep {args.sleep:g}`; LANEBOT_MAX_LANES={args.max_lanes}, "
        f"LANEBOT_MAX_RUNS_PER_REPO={args.runs}, build.max_lanes={args.lanes}, barrier, "
        "`lanebot worker --concurrency 1` each. Ratios against the embedded executor.\n"
    )
    print(table(results, args.max_lanes))
    if args.rounds > 1:
        print("\nOver the rounds, medians (ranges); ratios within each round:\n")
        print(summary(results, args.max_lanes))
    print()
    for r in results:
        print(
            f"- round {r.round}, {r.name}: ideal {r.ideal:.1f} s; load {r.load[0]:.1f} → {r.load[1]:.1f}; "
            f"hosts {dict(sorted(r.hosts.items()))}; {r.wall:.0f} s with start-up"
            + (
                f"; warm-up run: queue delays {', '.join(f'{d:.2f}' for d in sorted(r.cold_delays))} s, "
                f"hosts {dict(sorted(r.cold_hosts.items()))}"
                if r.cold_delays
                else ""
            )
        )
        for note in r.notes:
            print(f"  - {note}")
    return 0 if all(not r.notes for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
