"""`GET /metrics` of `lanebot serve`: Prometheus's text exposition format, no authentication.

Nothing in it is secret: counts, durations, states, host names and installation ids; never a token,
a repository's name or contents, a payload or a login. What it holds, each on the app's own registry
(so that two apps in one process, as in the tests, count apart):

  lanebot_webhook_deliveries_total{outcome}   deliveries the intake answered, by outcome:
      stored (202), duplicate (200, a redelivery of a stored id), replayed (200, a stored body under
      a new id), unsigned (401: no or a wrong signature), refused (other 4xx: malformed, too large),
      failed (5xx: not stored; GitHub shows it failed)
  the database's view and GitHub's rate limits (bot/runner/metrics.py), and process_* of this process.

The deliveries counter lives in this process (one intake per deployment); everything else is read at
scrape time. The scrape runs in a worker thread: the database's queries must not hold the event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, ProcessCollector, generate_latest
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from bot.runner.metrics import DatabaseCollector, RateLimitCollector, RateLimitReadings

DELIVERY_OUTCOMES = ("stored", "duplicate", "replayed", "unsigned", "refused", "failed")


class ServeMetrics:
    """The registry `GET /metrics` serves, and the intake's counter of deliveries."""

    def __init__(self, engine: Engine, github: RateLimitReadings) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._deliveries = Counter(
            "lanebot_webhook_deliveries",
            "Webhook deliveries the intake answered, by outcome",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in DELIVERY_OUTCOMES:  # every outcome is shown from the start, at 0
            self._deliveries.labels(outcome)
        self.registry.register(DatabaseCollector(engine))
        self.registry.register(RateLimitCollector(github))
        ProcessCollector(registry=self.registry)

    def delivery(self, outcome: str) -> None:
        """Count one delivery the intake answered (`outcome`: one of DELIVERY_OUTCOMES)."""
        if outcome not in DELIVERY_OUTCOMES:
            raise ValueError(f"a delivery's outcome is one of {', '.join(DELIVERY_OUTCOMES)}, not {outcome!r}")
        self._deliveries.labels(outcome).inc()

    def endpoint(self) -> Callable[[Request], Awaitable[Response]]:
        async def metrics(_request: Request) -> Response:
            body = await run_in_threadpool(generate_latest, self.registry)
            return Response(body, media_type=CONTENT_TYPE_LATEST)

        return metrics
