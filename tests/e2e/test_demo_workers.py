"""`lanebot demo --workers N`: the demo's lanes on N `lanebot worker` processes over the real Redis
and PostgreSQL here (LANEBOT_TEST_REDIS_URL, LANEBOT_TEST_POSTGRES_URL; skipped with the reason when
unreachable, failed under CI=true), its table of lanes with a `host` column; a clear error saying
what to start when either is unreachable; and without --workers, no host column."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.cli import main as cli_main
from bot.demo.runner import DemoResult, report
from bot.demo.services import DEFAULT_POSTGRES_URL, ServiceUnavailable, claimed_redis, throwaway_postgres
from bot.edges.store import db
from bot.edges.store.models import Lane
from tests.services import unavailable

REDIS_URL = os.environ.get("LANEBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/0"
POSTGRES_URL = os.environ.get("LANEBOT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # port 1: nothing listens there
UNREACHABLE_POSTGRES = "postgresql://postgres@127.0.0.1:1/test"


def require_services() -> None:
    try:
        with claimed_redis(REDIS_URL), throwaway_postgres(POSTGRES_URL):
            pass
    except ServiceUnavailable as error:
        unavailable(str(error))


def lanes_table(printed: str) -> list[list[str]]:
    """The rows of the demo's table of lanes, header first, split on blanks."""
    start = printed.index("The lanes\n")
    lines = printed[start:].splitlines()[2:]
    return [line.split() for line in lines[: next(i for i, line in enumerate(lines) if line.startswith("Wall-clock"))]]


@pytest.mark.slow
def test_the_demo_on_two_workers_prints_each_lanes_host_two_hosts_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_services()
    monkeypatch.setenv("LANEBOT_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("DATABASE_URL", POSTGRES_URL)

    status = cli_main(["demo", "--workers", "2", "--dir", str(tmp_path / "demo")])

    printed = capsys.readouterr().out
    assert status == 0, printed[-3000:]
    assert "Starting 2 lanebot workers (runner-1, runner-2)" in printed
    header, *rows = lanes_table(printed)
    assert header == ["unit", "round", "start", "end", "duration", "merged", "host"]
    assert len(rows) == 4 and {row[-1] for row in rows} == {"runner-1", "runner-2"}, rows
    assert re.search(r"Pull request #2: ", printed)
    for name in ("runner-1", "runner-2"):
        assert (tmp_path / "demo" / f"worker-{name}-work").is_dir()
    # Given back: the demo's database is dropped.
    database = re.search(r"PostgreSQL at \S+/(lanebot_demo_[0-9a-f]+) ", printed)
    assert database is not None
    server = db.make_engine(POSTGRES_URL)
    try:
        with server.connect() as connection:
            names = connection.execute(text("SELECT datname FROM pg_database")).scalars().all()
    finally:
        server.dispose()
    assert database[1] not in names


def test_without_redis_the_demo_says_what_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LANEBOT_BROKER_URL", UNREACHABLE_REDIS)

    status = cli_main(["demo", "--workers", "2", "--dir", str(tmp_path / "demo")])

    printed = capsys.readouterr().out
    assert status == 2
    assert "Redis at redis://127.0.0.1:1/0 (LANEBOT_BROKER_URL) cannot be reached" in printed
    assert "Start Redis (`redis-server`" in printed
    assert not (tmp_path / "demo").exists()  # nothing started


def test_without_postgresql_the_demo_says_what_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        with claimed_redis(REDIS_URL):
            pass
    except ServiceUnavailable as error:
        unavailable(str(error))
    monkeypatch.setenv("LANEBOT_BROKER_URL", REDIS_URL)
    monkeypatch.setenv("DATABASE_URL", UNREACHABLE_POSTGRES)

    status = cli_main(["demo", "--workers", "2", "--dir", str(tmp_path / "demo")])

    printed = capsys.readouterr().out
    assert status == 2
    assert "PostgreSQL at postgresql://postgres@127.0.0.1:1/test (DATABASE_URL) cannot be reached" in printed
    assert "Start PostgreSQL" in printed
    assert not (tmp_path / "demo").exists()


def test_a_database_url_that_is_not_postgresql_is_refused_for_workers() -> None:
    with pytest.raises(ServiceUnavailable, match="needs PostgreSQL"):
        with throwaway_postgres("sqlite:///lanebot.db"):
            pass
    with pytest.raises(ServiceUnavailable, match="runs over Redis"):
        with claimed_redis("amqp://guest:secret@127.0.0.1:5672//"):
            pass


def test_a_password_in_a_service_url_is_not_printed() -> None:
    with pytest.raises(ServiceUnavailable) as raised:
        with claimed_redis("redis://:hunter2@127.0.0.1:1/0"):
            pass
    assert "hunter2" not in str(raised.value) and "redis://:***@127.0.0.1:1/0" in str(raised.value)


def test_without_workers_the_table_of_lanes_has_no_host_column() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    lane = Lane(run_id=1, unit_id="a", round=1, state="merged", started_at=t0, finished_at=t0 + timedelta(seconds=1))
    result = DemoResult(
        gate_comment="gate",
        pull={"number": 2, "title": "t", "body": "b", "pull_request": {"head": "lanebot/1"}},
        check_runs=[],
        lanes=[lane],
        wall_clock_s=1.0,
        graph_log="",
        api_requests=0,
    )
    plain = report(result)
    assert "duration    merged\n" in plain and "host" not in plain
    with_hosts = report(DemoResult(**{**result.__dict__, "hosts": {"a": "runner-1"}}))
    assert "merged  host\n" in with_hosts and with_hosts.rstrip().count("runner-1") == 1
