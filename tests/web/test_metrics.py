"""Prometheus metrics: `/metrics` of `lanebot serve`, the database's view, GitHub's rate limits, the worker's port.

Every exposition is read back with prometheus_client's own parser, never by matching strings.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from bot.cli import build_parser
from bot.edges.github.client import GitHubApp
from bot.edges.store import runs as store
from bot.runner.metrics import DatabaseCollector, serve_metrics, worker_registry
from bot.web.app import create_app
from tests.app_helpers import SECRET, WEBHOOK_PATH, as_app_delivery, delivery_headers, make_settings, payload_files

ISSUE_OPENED = as_app_delivery(next(path for path in payload_files() if path.match("issues/opened.payload.json")))
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
API = "https://github.example.test/api/v3"
TOKEN = "ghs_not-for-the-metrics-0123456789"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def scrape(collector: DatabaseCollector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def post(client: TestClient, payload: dict, *, delivery_id: str, secret: str = SECRET) -> int:
    body = json.dumps(payload).encode()
    headers = delivery_headers("issues", body, delivery_id=delivery_id, secret=secret)
    return client.post(WEBHOOK_PATH, content=body, headers=headers).status_code


def test_metrics_count_the_deliveries_by_outcome(engine):
    app = create_app(make_settings(str(engine.url)), engine=engine)
    with TestClient(app) as client:
        assert post(client, ISSUE_OPENED, delivery_id="stored-1") == 202
        assert post(client, ISSUE_OPENED, delivery_id="stored-1") == 200  # a redelivery
        assert post(client, {**ISSUE_OPENED, "n": 2}, delivery_id="forged-1", secret="not-the-secret") == 401
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    text = response.text
    counts = {
        outcome: value(text, "lanebot_webhook_deliveries_total", outcome=outcome)
        for outcome in ("stored", "duplicate", "replayed", "unsigned", "refused", "failed")
    }
    assert counts == {"stored": 1, "duplicate": 1, "replayed": 0, "unsigned": 1, "refused": 0, "failed": 0}
    assert value(text, "lanebot_metrics_database_up") == 1
    assert value(text, "lanebot_runs", state="planning") == 0
    for secret in (SECRET, make_settings().private_key.splitlines()[1], "stored-1", "forged-1"):
        assert secret not in text


def test_runs_lanes_and_durations_come_from_the_database(engine):
    first = store.create_run(engine, installation_id=7, repository="octo/one", issue_number=1, requested_by="ann")
    second = store.create_run(engine, installation_id=7, repository="octo/two", issue_number=2, requested_by="ann")
    store.create_run(engine, installation_id=7, repository="octo/three", issue_number=3, requested_by="ann")
    for run in (first, second):
        assert store.transition(engine, run.id, "planning", "awaiting_approval")
        assert store.transition(engine, run.id, "awaiting_approval", "running")
    a, b, c = store.create_lanes(engine, first.id, [["a", "b", "c"]])
    (d,) = store.create_lanes(engine, second.id, [["d"]])
    for lane in (a, b, d):
        assert store.set_lane_state(engine, lane.id, "pending", "running", now=T0)
    store.start_session(engine, run_id=first.id, kind="lane", lane_id=a.id, host="host-a", now=T0)
    earlier = store.start_session(engine, run_id=first.id, kind="lane", lane_id=b.id, host="host-a", now=T0)
    store.finish_session(engine, earlier.id, status="lost", now=T0 + timedelta(seconds=90))
    store.start_session(engine, run_id=first.id, kind="lane", lane_id=b.id, host="host-b", now=T0)  # taken over
    # d: running, but no session has started (its job waits for a worker); c: pending in a running run.
    plan = store.start_session(engine, run_id=second.id, kind="plan", host="host-b", now=T0)
    store.finish_session(engine, plan.id, status="succeeded", now=T0 + timedelta(seconds=45))

    text = scrape(DatabaseCollector(engine))

    assert value(text, "lanebot_runs", state="running") == 2
    assert value(text, "lanebot_runs", state="planning") == 1
    assert value(text, "lanebot_runs", state="done") == 0
    assert value(text, "lanebot_lanes", state="running", host="host-a") == 1
    assert value(text, "lanebot_lanes", state="running", host="host-b") == 1
    assert value(text, "lanebot_lanes", state="running", host="") == 1
    assert value(text, "lanebot_lanes", state="queued", host="") == 1
    lost = {"kind": "lane", "status": "lost"}
    assert value(text, "lanebot_agent_session_duration_seconds_bucket", le="60.0", **lost) == 0
    assert value(text, "lanebot_agent_session_duration_seconds_bucket", le="120.0", **lost) == 1
    assert value(text, "lanebot_agent_session_duration_seconds_bucket", le="+Inf", **lost) == 1
    assert value(text, "lanebot_agent_session_duration_seconds_count", **lost) == 1
    assert value(text, "lanebot_agent_session_duration_seconds_sum", **lost) == pytest.approx(90.0, abs=0.01)
    planned = {"kind": "plan", "status": "succeeded"}
    assert value(text, "lanebot_agent_session_duration_seconds_bucket", le="60.0", **planned) == 1
    assert value(text, "lanebot_agent_session_duration_seconds_count", kind="lane", status="running") is None


def test_lane_durations_by_outcome(engine):
    run = store.create_run(engine, installation_id=7, repository="octo/one", issue_number=1, requested_by="ann")
    store.transition(engine, run.id, "planning", "awaiting_approval")
    store.transition(engine, run.id, "awaiting_approval", "running")
    fast, slow, broken = store.create_lanes(engine, run.id, [["fast", "slow", "broken"]])
    for lane, seconds, end in ((fast, 20, "finished"), (slow, 700, "finished"), (broken, 50, "failed")):
        store.set_lane_state(engine, lane.id, "pending", "running", now=T0)
        store.set_lane_state(engine, lane.id, "running", end, now=T0 + timedelta(seconds=seconds))
    store.set_lane_state(engine, slow.id, "finished", "merged", now=T0 + timedelta(seconds=800))

    text = scrape(DatabaseCollector(engine))

    assert value(text, "lanebot_lane_duration_seconds_count", outcome="succeeded") == 2
    assert value(text, "lanebot_lane_duration_seconds_bucket", outcome="succeeded", le="30.0") == 1
    assert value(text, "lanebot_lane_duration_seconds_bucket", outcome="succeeded", le="1200.0") == 2
    assert value(text, "lanebot_lane_duration_seconds_sum", outcome="succeeded") == pytest.approx(720.0, abs=0.01)
    assert value(text, "lanebot_lane_duration_seconds_count", outcome="failed") == 1


def test_a_database_that_does_not_answer_is_a_metric_not_a_failed_scrape():
    from bot.edges.store import db

    unreachable = db.make_engine("postgresql://nobody@127.0.0.1:1/lanebot", connect_args={"connect_timeout": 2})
    text = scrape(DatabaseCollector(unreachable))
    assert value(text, "lanebot_metrics_database_up") == 0
    assert value(text, "lanebot_runs", state="running") is None


@respx.mock
def test_rate_limit_remaining_per_installation_after_an_answer_that_says_it(engine):
    respx.post(url__regex=rf"{API}/app/installations/\d+/access_tokens").mock(
        return_value=httpx.Response(201, json={"token": TOKEN, "expires_at": "2099-01-01T00:00:00Z"})
    )
    respx.get(f"{API}/repos/octo/one").mock(
        return_value=httpx.Response(
            200,
            json={"full_name": "octo/one"},
            headers={"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4321", "x-ratelimit-reset": "1900000000"},
        )
    )
    settings = make_settings(str(engine.url), github_api_url=API)
    github = GitHubApp(settings, httpx.AsyncClient())
    app = create_app(settings, engine=engine, github=github)
    with TestClient(app) as client:
        assert value(client.get("/metrics").text, "lanebot_github_rate_limit_remaining", installation="42") is None
        client.portal.call(github.installation_client(42, "octo/one").getitem, "/repos/octo/one")
        text = client.get("/metrics").text
    assert github.rate_limit_remaining(42) is not None and github.rate_limit_remaining(42).remaining == 4321
    assert value(text, "lanebot_github_rate_limit_remaining", installation="42") == 4321
    assert value(text, "lanebot_github_rate_limit_reset_timestamp_seconds", installation="42") == 1900000000
    assert value(text, "lanebot_github_rate_limit_observed_timestamp_seconds", installation="42") is not None
    assert TOKEN not in text and "octo/one" not in text


def test_a_worker_serves_the_database_view_on_its_metrics_port(engine):
    store.create_run(engine, installation_id=7, repository="octo/one", issue_number=1, requested_by="ann")
    server = serve_metrics(worker_registry(engine), host="127.0.0.1", port=0)
    try:
        response = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10)
    finally:
        server.shutdown()
        server.server_close()
    assert response.status_code == 200
    assert value(response.text, "lanebot_runs", state="planning") == 1
    assert value(response.text, "lanebot_lanes", state="queued", host="") == 0


def test_worker_metrics_port_is_an_option_off_by_default():
    parser = build_parser()
    assert parser.parse_args(["worker"]).metrics_port == 0
    assert parser.parse_args(["worker", "--metrics-port", "9464"]).metrics_port == 9464
    with pytest.raises(SystemExit):
        parser.parse_args(["worker", "--metrics-port", "70000"])
