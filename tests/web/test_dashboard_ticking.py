"""Durations still growing carry what live.js needs to advance them each second: when they started
and their seconds when the server rendered the page; the text is right without the script, and a
duration that has ended carries neither."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from bot.edges.store import runs as store
from bot.render.dashboard.runs import Ticking, ticking
from bot.web.dashboard import dashboard_routes
from tests.web.test_dashboard import T0, seed, settings_for
from tests.web.test_dashboard_live import FakeUsers, client_of, signed_in

pytestmark = pytest.mark.anyio

NOW = T0 + timedelta(minutes=10, seconds=5)
TICKING = re.compile(r'<span class="ticking" data-since="([^"]+)" data-seconds="(\d+)">([^<]*)</span>')


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def app_at(engine: Engine, workdir: Path) -> Starlette:
    routes = dashboard_routes(settings_for(engine, workdir), engine, users=FakeUsers(), clock=NOW.timestamp)
    return Starlette(routes=routes)


async def test_a_running_run_and_lane_render_their_start_and_seconds_so_far(engine: Engine, workdir: Path) -> None:
    ids = seed(engine, workdir)  # octo/one: running since T0; lane api merged, lane ui pending
    lanes = {lane.unit_id: lane for lane in store.lanes(engine, ids["octo/one"])}
    ui = lanes["ui"].id
    assert ui is not None
    store.set_lane_state(engine, ui, "pending", "running", now=T0 + timedelta(minutes=9))
    async with client_of(app_at(engine, workdir)) as client:
        await signed_in(client)
        runs = await client.get("/dashboard")
        run = await client.get(f"/dashboard/runs/{ids['octo/one']}")

    assert TICKING.findall(runs.text) == [("2025-03-01T12:00:00Z", "605", "10 min 5 s so far")]
    lane_row = run.text.split('id="lane-ui"')[1].split("</tr>")[0]
    assert TICKING.findall(lane_row) == [("2025-03-01T12:09:00Z", "65", "1 min 5 s so far")]
    wall_clock = run.text.split("Wall-clock of the lanes</dt>")[1].split("</dd>")[0]
    assert TICKING.findall(wall_clock) == [("2025-03-01T12:00:00Z", "605", "10 min 5 s so far")]
    merged_row = run.text.split('id="lane-api"')[1].split("</tr>")[0]
    assert "ticking" not in merged_row and "8 min" in merged_row  # it ended: its duration stands


async def test_an_ended_run_does_not_tick(engine: Engine, workdir: Path) -> None:
    ids = seed(engine, workdir)
    store.transition(engine, ids["octo/one"], "running", "failed", now=T0 + timedelta(minutes=3))
    async with client_of(app_at(engine, workdir)) as client:
        await signed_in(client)
        runs = await client.get("/dashboard")
    assert runs.status_code == 200 and "ticking" not in runs.text and "3 min" in runs.text


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (T0, None, Ticking("2025-03-01T12:00:00Z", 605)),
        (T0.replace(tzinfo=None), None, Ticking("2025-03-01T12:00:00Z", 605)),  # the database's naive UTC
        (T0.astimezone(timezone(timedelta(hours=2))), None, Ticking("2025-03-01T12:00:00Z", 605)),
        (NOW + timedelta(seconds=3), None, Ticking(f"{NOW + timedelta(seconds=3):%Y-%m-%dT%H:%M:%S}Z", 0)),
        (T0, T0 + timedelta(minutes=1), None),  # ended: nothing moves
        (None, None, None),  # never started
    ],
)
def test_ticking_is_the_start_in_utc_and_the_whole_seconds_to_now(
    start: datetime | None, end: datetime | None, expected: Ticking | None
) -> None:
    assert ticking(start, end, NOW) == expected
