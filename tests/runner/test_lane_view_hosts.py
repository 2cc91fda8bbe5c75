"""A lane's view carries the host of its latest lane session, and whether that is this machine."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.edges.store.models import AgentSession, Lane, Run
from bot.render.progress import LaneView
from bot.runner.orchestrator import _lane_view
from bot.runner.runtime import host_name

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def session(lane_id: int, host: str | None, *, kind: str = "lane") -> AgentSession:
    return AgentSession(run_id=1, lane_id=lane_id, kind=kind, attempt=1, host=host, started_at=T0)


def view(sessions: list[AgentSession]) -> LaneView:
    run = Run(id=1, installation_id=1, repository="o/r", issue_number=7, requested_by="m")
    lane = Lane(id=3, run_id=1, unit_id="api", round=1, state="running")
    return _lane_view(run, lane, {"api": "The API"}, sessions)


def test_the_host_is_that_of_the_lanes_latest_lane_session():
    taken_over = view(
        [session(3, "runner-1"), session(4, "runner-9"), session(3, "runner-2"), session(3, "x", kind="resolve")]
    )
    assert (taken_over.host, taken_over.host_is_here) == ("runner-2", False)


def test_a_lane_on_this_machine_is_marked_here_and_one_not_started_has_no_host():
    assert view([session(3, host_name())]).host_is_here
    assert view([]).host is None
