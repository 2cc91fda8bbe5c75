"""README's *Running lanebot on several machines*, run as written on one machine with two workers.

The section's `lanebot serve` block is what starts lanebot here, and its runner-host block is what
starts each of two workers (`runner-1` as written, `runner-2` with the one change the section asks of
the next host, its `--name`), each with a home folder of its own, so that `$HOME/lanebot-work` is a
work folder of its own as on two machines. Its settings block names example hosts: the test sets the
same two variables to the real Redis and PostgreSQL here (a Redis database number and a PostgreSQL
database of the test's own, bot/demo/services.py); when either is unreachable the test skips with the
reason, and under CI=true it fails. The sandbox GitHub stands in for GitHub. It ends in one pull
request whose lanes ran on both workers, and the progress comment and `/status` name the hosts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.plan import UNITS
from bot.demo.runner import repository_config
from bot.demo.services import DEFAULT_POSTGRES_URL, claimed_redis, throwaway_postgres
from bot.demo.stack import Stack
from bot.edges.store import db, runs
from tests.e2e.test_end_to_end import (
    MAINTAINER,
    REPO,
    merge_commits,
    open_and_label,
    plan_body,
    wait_for_comment,
    wait_for_pull,
)
from tests.services import borrowed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("LANEBOT_TEST_REDIS_URL", "redis://127.0.0.1:6379") + "/0"
POSTGRES_URL = os.environ.get("LANEBOT_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
HOSTS = ("runner-1", "runner-2")


def section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Running lanebot on several machines")
    return readme[start : readme.index("\n## ", start + 1)]


def block_with(text: str) -> str:
    """The section's one `sh` block that holds `text`."""
    [block] = [block for block in re.findall(r"```sh\n(.*?)```", section(), re.DOTALL) if text in block]
    return block


@pytest.fixture
def broker_url() -> Iterator[str]:
    yield from borrowed(claimed_redis(REDIS_URL, user="the README's test"))


@pytest.fixture
def database_url() -> Iterator[str]:
    yield from borrowed(throwaway_postgres(POSTGRES_URL, user="the README's test", prefix="lanebot_readme"))


def test_the_sections_settings_are_the_two_every_machine_shares() -> None:
    settings = block_with("export LANEBOT_BROKER_URL=")
    assert re.findall(r"^export ([A-Z_]+)=", settings, flags=re.MULTILINE) == ["LANEBOT_BROKER_URL", "DATABASE_URL"]
    assert "lanebot worker --name runner-1 --concurrency " in block_with("lanebot worker")
    assert "celery --broker=$LANEBOT_BROKER_URL flower" in block_with("flower")
    assert "lanebot demo --workers 2" in block_with("lanebot demo")


def test_the_sections_commands_on_one_machine_with_two_workers_make_one_pull_request(
    tmp_path: Path, broker_url: str, database_url: str
) -> None:
    serve, worker = block_with("lanebot serve"), block_with("lanebot worker")
    stack = Stack(
        tmp_path / "stack", lanebot_env={"LANEBOT_BROKER_URL": broker_url}, database=database_url, serve_command=serve
    )
    with stack:
        for name in HOSTS:
            home = tmp_path / f"home-{name}"
            home.mkdir()
            command = worker.replace("--name runner-1", f"--name {name}")
            stack.start_worker(name, command=command, env={"HOME": str(home)})
        stack.wait_for_workers(timeout=60)
        # Checks that take a moment, so that both workers have a lane to run.
        units = [dict(unit, check=f"sleep 2 && {unit['check']}") for unit in UNITS]
        number = open_and_label(stack, plan_body(units), cfg=repository_config("recipe"))
        assert stack.human is not None
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")

        wait_for_pull(stack, number)
        assert len(stack.repository(REPO)["pulls"]) == 1
        merges = merge_commits(stack, f"lanebot/{number}")
        assert sorted(merges) == sorted(f"Merge lane '{unit['id']}' of #{number}" for unit in UNITS)
        hosts = lane_hosts(stack, number)
        assert set(hosts.values()) == set(HOSTS), hosts
        for name in HOSTS:
            assert (tmp_path / f"home-{name}" / "lanebot-work").is_dir()  # $HOME/lanebot-work, as written
            assert stack.worker(name).poll() is None, f"worker {name} exited; see worker-{name}.log"

        # Which host ran which lane, in the progress comment and in /status.
        merged = f"{len(UNITS)} of {len(UNITS)} lanes merged."
        progress = wait_for_comment(stack, number, "<!-- lanebot:progress", contains=merged)
        stack.human.comment(REPO, number, login=MAINTAINER, body="/status")
        status = wait_for_comment(stack, number, "<!-- lanebot:answer", contains="**Run")
        for unit, host in hosts.items():
            for body in (progress["body"], status["body"]):
                [line] = [line for line in body.splitlines() if line.startswith(f"- [x] `{unit}` ")]
                assert f" · on `{host}` · " in line, line


def lane_hosts(stack: Stack, number: int) -> dict[str, str]:
    """unit -> the host of its lane's last session."""
    engine = db.make_engine(stack.database_url)
    try:
        run = runs.active_run(engine, REPO, number)
        assert run is not None and run.id is not None
        units = {lane.id: lane.unit_id for lane in runs.lanes(engine, run.id)}
        sessions = runs.sessions(engine, run.id)
        return {units[s.lane_id]: s.host or "" for s in sessions if s.kind == "lane" and s.lane_id in units}
    finally:
        engine.dispose()
