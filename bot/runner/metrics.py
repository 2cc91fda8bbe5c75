"""Prometheus collectors that read, at scrape time, what every process shares: the database, and GitHub's
rate limits as this process last saw them.

`DatabaseCollector` asks the database (bot/edges/store/stats.py) on every scrape, so what it shows is
right across `lanebot serve` and every worker process, and after restarts, without Prometheus's
multiprocess mode (Celery's prefork children would each hold their own counts otherwise). Every
target that serves it (serve, each worker) shows the same values: aggregate with `max`, not `sum`.

  lanebot_runs{state}                                runs in each state (every state, zeros included)
  lanebot_lanes{state="running",host}                running lanes by the host of their latest lane
                                                     session ("" before one started on a host)
  lanebot_lanes{state="queued",host=""}              pending lanes of running runs
  lanebot_agent_session_duration_seconds{kind,status}  histogram of every finished agent session
  lanebot_lane_duration_seconds{outcome}             histogram of every lane that ended (succeeded,
                                                     failed), from its latest start
  lanebot_metrics_database_up                        1, or 0 when the database did not answer the scrape

The histograms are counted in SQL over all finished rows (rows are never deleted, so the buckets only
grow, as a Prometheus histogram's must, and `rate()` and `histogram_quantile` work on them). A window
such as "the last hour" would shrink as sessions leave it, which Prometheus reads as counter resets;
Histograms observed where sessions end would need the multiprocess mode on the workers and would start
again from zero at every restart.

`RateLimitCollector` shows what GitHub's latest answer to this process said of each installation's
limit (`x-ratelimit-remaining`, `x-ratelimit-reset`; bot.edges.github.client), labelled by
installation id (`app` for the App's own requests):

  lanebot_github_rate_limit_remaining{installation}
  lanebot_github_rate_limit_reset_timestamp_seconds{installation}
  lanebot_github_rate_limit_observed_timestamp_seconds{installation}  when that answer came

GitHub's limit belongs to the installation, not to a process, so any process's reading is a reading of
the same budget; `observed` says how old it is. `lanebot serve` serves it (its GitHub client plans,
comments and labels for every run).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from bot.edges.github.client import RateLimitReading
from bot.edges.store import stats

log = logging.getLogger(__name__)

# Agent sessions and lanes take seconds (a scripted agent) to hours (a real one on a large unit).
DURATION_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)


class DatabaseCollector(Collector):
    """Runs by state, lanes per host, session and lane durations: read from the database at each scrape."""

    def __init__(self, engine: Engine, *, buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        self._engine = engine
        self._buckets = tuple(buckets)

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("lanebot_metrics_database_up", "1 when the database answered this scrape, else 0")
        try:
            metrics = list(self._read())
        except Exception as error:  # a scrape says the database is away; it does not fail
            log.warning("metrics: the database did not answer (%s)", type(error).__name__)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from metrics

    def describe(self) -> Iterable[Metric]:
        return ()  # read at scrape time only: registering must not query the database

    def _read(self) -> Iterator[Metric]:
        runs = GaugeMetricFamily("lanebot_runs", "Runs in each state", labels=["state"])
        for state, count in stats.runs_by_state(self._engine).items():
            runs.add_metric([state], float(count))
        yield runs
        lanes = GaugeMetricFamily(
            "lanebot_lanes",
            "Lanes running, by the host of their latest session, and queued (pending in running runs)",
            labels=["state", "host"],
        )
        for each in stats.lanes_by_host(self._engine):
            lanes.add_metric([each.state, each.host], float(each.count))
        yield lanes
        yield _histogram(
            "lanebot_agent_session_duration_seconds",
            "Durations of finished agent sessions",
            ["kind", "status"],
            stats.session_durations(self._engine, self._buckets),
        )
        yield _histogram(
            "lanebot_lane_duration_seconds",
            "Durations of lanes that ended, from their latest start",
            ["outcome"],
            stats.lane_durations(self._engine, self._buckets),
        )


def _histogram(name: str, documentation: str, labels: list[str], rows: list[stats.Buckets]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for row in rows:
        buckets = [(repr(float(bound)), float(count)) for bound, count in zip(row.bounds, row.counts, strict=True)]
        family.add_metric(list(row.labels), [*buckets, ("+Inf", float(row.count))], sum_value=row.total)
    return family


class RateLimitReadings(Protocol):
    """What the collector needs of the GitHub client (bot.edges.github.client.GitHubApp has it)."""

    def rate_limit_readings(self) -> dict[int | None, RateLimitReading]: ...


class RateLimitCollector(Collector):
    """GitHub's rate limit per installation, as the latest answer to this process gave it."""

    def __init__(self, github: RateLimitReadings) -> None:
        self._github = github

    def collect(self) -> Iterator[Metric]:
        labels = ["installation"]
        remaining = GaugeMetricFamily(
            "lanebot_github_rate_limit_remaining",
            "Requests left in the installation's rate-limit window",
            labels=labels,
        )
        reset = GaugeMetricFamily(
            "lanebot_github_rate_limit_reset_timestamp_seconds",
            "When the installation's rate-limit window starts again (Unix time)",
            labels=labels,
        )
        observed = GaugeMetricFamily(
            "lanebot_github_rate_limit_observed_timestamp_seconds",
            "When GitHub's answer these readings come from arrived (Unix time)",
            labels=labels,
        )
        readings = self._github.rate_limit_readings()
        for installation, reading in sorted(readings.items(), key=lambda item: (item[0] is not None, item[0] or 0)):
            label = ["app" if installation is None else str(installation)]
            remaining.add_metric(label, float(reading.remaining))
            if reading.reset is not None:
                reset.add_metric(label, reading.reset)
            observed.add_metric(label, reading.observed_at)
        yield remaining
        yield reset
        yield observed

    def describe(self) -> Iterable[Metric]:
        return ()


def worker_registry(engine: Engine) -> CollectorRegistry:
    """What `lanebot worker --metrics-port` serves: the database's view (the same on every target)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(engine))
    return registry


def serve_metrics(registry: CollectorRegistry, *, host: str, port: int) -> WSGIServer:
    """Serve `registry` at http://host:port/metrics from a daemon thread of this process (port 0: any
    free one, `server_port` says which); `shutdown()` stops it."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    log.info("metrics at http://%s:%d/metrics", host, server.server_port)
    return server
