"""What lanebot's dispatcher costs per delivery, apart from the intake.

    .venv/bin/python bench/dispatcher_cost.py [--deliveries 5000] [--rounds 3] [--database-url URL]

Stores `--deliveries` deliveries (bench/intake.py's mix: the example payloads, each with an
`installation`, under fresh ids) in a throwaway database, then starts lanebot's dispatcher as
`lanebot serve` builds it (`create_app`, its handlers, a GitHub that refuses connections and is
not tried again, so that no back-off holds a lane; logging at info into a file) and measures, from `start` until it is idle, the process's CPU time and the wall
time per delivery. No HTTP and no intake: the CPU a delivery's handling and its record cost, the
share of the core a flat-out intake loses to the dispatcher beside it. Prints Markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import intake as bench  # (the intake bench's payloads, throwaway App and database)

STORE_BATCH = 64


async def one_round(args: argparse.Namespace, work_dir: Path, label: str) -> tuple[float, float, dict[str, int]]:
    from bot.cli.serve import configure_logging
    from bot.edges.github.client import RetryPolicy
    from bot.edges.settings import Settings
    from bot.edges.store import db, deliveries
    from bot.web.app import create_app

    RetryPolicy.after_transport_error = lambda *_args, **_options: None  # type: ignore[method-assign]

    app_identity = bench.ThrowawayApp.create()
    mix = bench.payload_mix(args.payloads)
    with bench.throwaway_database(args.database_url, work_dir, label) as database_url:
        environment = app_identity.environment(database_url, "info", work_dir, unique_bodies=False, dispatcher=True)
        os.environ.update(environment)
        configure_logging("info")
        log_file = logging.FileHandler(work_dir / f"{label}.log")
        logging.getLogger().handlers = [log_file]  # as production logs, but not onto this report
        settings = Settings.load(environ=environment, env_file=None)
        app = create_app(settings)
        engine = app.state.engine
        db.migrate(engine)
        new = [
            deliveries.NewDelivery(
                delivery_id=str(uuid.uuid4()),
                event=event,
                action=payload.get("action"),
                installation_id=payload["installation"]["id"],
                repository=(payload.get("repository") or {}).get("full_name"),
                body=bench.json.dumps(payload).encode(),
            )
            for number in range(args.deliveries)
            for event, payload in [mix[number % len(mix)]]
        ]
        for start in range(0, len(new), STORE_BATCH):
            deliveries.record_many(engine, new[start : start + STORE_BATCH])
        dispatcher = app.state.dispatcher
        real_start, dispatcher.start = dispatcher.start, lambda: None
        async with app.router.lifespan_context(app):
            cpu, wall = time.process_time(), time.perf_counter()
            real_start()
            await dispatcher.wait_idle()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            dispatcher.start = real_start
        statuses = bench.stored_deliveries(database_url)[1]
    return cpu * 1000 / args.deliveries, wall * 1000 / args.deliveries, statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None, help="a PostgreSQL server URL (default: SQLite)")
    parser.add_argument("--payloads", type=Path, default=bench.DEFAULT_PAYLOADS)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="lanebot-dispatcher-bench-") as folder:
        for number in range(1, args.rounds + 1):
            cpu, wall, statuses = asyncio.run(one_round(args, Path(folder), f"round{number}"))
            rows.append((cpu, wall))
            print(f"| {number} | {cpu:.3f} | {wall:.3f} | {statuses} |")
    print(f"\nCPU ms per delivery: median {statistics.median(cpu for cpu, _ in rows):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
