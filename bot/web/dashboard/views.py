"""What the run and attempt pages show, assembled from the database's rows: plain values for the
templates (which escape every one), formatted by bot.render.dashboard so every page says them alike.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from markupsafe import Markup

from bot.core.graph import Graph, InvalidPlan, PlanSyntaxError, load_plan
from bot.core.text import format_duration, format_minutes, shorten
from bot.edges.store.models import AgentSession, Lane, Plan, Run, RunEvent
from bot.render.dashboard.links import check_run_url, issue_url, pull_url, repository_url
from bot.render.dashboard.runs import Ticking, cost_text, duration_between, state_words, ticking, tokens_text, when
from bot.render.dashboard.timeline import AttemptTimes, LaneTimes, actual_rows, planned_rows, timeline_svg
from bot.runner.lanes import LaneFailure

EVENT_DATA_CHARS = 600
# A stored plan is drawn whatever max_units its workflow allowed.
_ANY_SIZE = 10_000


@dataclass(frozen=True)
class AttemptView:
    number: int
    status: str
    host: str
    started: str
    duration: str
    tokens: str
    cost: str
    failure: str | None
    url: str


@dataclass(frozen=True)
class LaneView:
    unit_id: str
    title: str
    round: int
    state: str
    estimate: str
    started: str
    finished: str
    merged: str
    took: str
    host: str
    check_url: str | None
    attempts: list[AttemptView] = field(default_factory=list)
    ticking: Ticking | None = None  # `took` while the lane runs


@dataclass(frozen=True)
class SessionView:
    kind: str
    attempt: int
    status: str
    host: str
    started: str
    duration: str
    tokens: str
    cost: str


@dataclass(frozen=True)
class EventView:
    at: str
    kind: str
    data: str


@dataclass(frozen=True)
class Links:
    repository: str
    issue: str
    pull: str | None


def plan_graph(plan: Plan | None) -> Graph | None:
    """The plan's graph, or None when there is no plan or it cannot be read (a refused plan)."""
    if plan is None:
        return None
    try:
        return load_plan(plan.units_jsonl, max_units=_ANY_SIZE)
    except (PlanSyntaxError, InvalidPlan, ValueError):
        return None


def run_links(web: str, run: Run) -> Links:
    pull = pull_url(web, run.repository, run.pr_number) if run.pr_number else None
    return Links(repository_url(web, run.repository), issue_url(web, run.repository, run.issue_number), pull)


def attempt_url(run_id: int, unit_id: str, attempt: int) -> str:
    return f"/dashboard/runs/{run_id}/lanes/{unit_id}/attempts/{attempt}"


def _ended(session: AgentSession) -> datetime | None:
    return session.ended_at


def _duration(start: datetime | None, end: datetime | None, running: bool, now: datetime) -> str:
    return duration_between(start, end, now if running else None)


def lane_views(
    run: Run, graph: Graph | None, lanes: Sequence[Lane], sessions: Sequence[AgentSession], web: str, now: datetime
) -> list[LaneView]:
    units = {unit.id: unit for unit in graph} if graph else {}
    views = []
    for lane in lanes:
        unit = units.get(lane.unit_id)
        attempts = sorted((s for s in sessions if s.lane_id == lane.id and s.kind == "lane"), key=lambda s: s.attempt)
        failure = LaneFailure.from_text(lane.failure) if lane.failure else None
        attempt_views = [
            AttemptView(
                number=s.attempt,
                status=s.status,
                host=s.host or "—",
                started=when(s.started_at),
                duration=_duration(s.started_at, _ended(s), s.status == "running", now),
                tokens=tokens_text(s.input_tokens, s.output_tokens),
                cost=cost_text(s.cost_usd),
                failure=(failure.reason if failure and failure.attempt == s.attempt else None) or s.failure,
                url=attempt_url(run.id or 0, lane.unit_id, s.attempt),
            )
            for s in attempts
        ]
        views.append(
            LaneView(
                unit_id=lane.unit_id,
                title=unit.title if unit else "",
                round=lane.round,
                state=lane.state,
                estimate=format_minutes(unit.estimate) if unit and unit.estimate is not None else "—",
                started=when(lane.started_at),
                finished=when(lane.finished_at),
                merged=when(lane.merged_at),
                took=_duration(lane.started_at, lane.finished_at, lane.state == "running", now),
                host=attempts[-1].host or "—" if attempts else "—",
                check_url=check_run_url(web, run.repository, lane.check_run_id) if lane.check_run_id else None,
                attempts=attempt_views,
                ticking=ticking(lane.started_at, None, now) if lane.state == "running" else None,
            )
        )
    return views


def session_views(sessions: Sequence[AgentSession], now: datetime) -> list[SessionView]:
    """The run's sessions other than lane attempts: the planner, resolvers, integrate, verify, review."""
    return [
        SessionView(
            kind=s.kind,
            attempt=s.attempt,
            status=s.status,
            host=s.host or "—",
            started=when(s.started_at),
            duration=_duration(s.started_at, s.ended_at, s.status == "running", now),
            tokens=tokens_text(s.input_tokens, s.output_tokens),
            cost=cost_text(s.cost_usd),
        )
        for s in sessions
        if s.kind != "lane"
    ]


def event_views(events: Sequence[RunEvent]) -> list[EventView]:
    views = []
    for event in events:
        try:
            data = json.dumps(event.payload(), ensure_ascii=False, sort_keys=True)
        except ValueError:
            data = event.data
        views.append(EventView(f"{event.at:%Y-%m-%d %H:%M:%S}", event.kind, shorten(data, EVENT_DATA_CHARS)))
    return views


@dataclass(frozen=True)
class Timing:
    wall_clock: str
    sum_of_attempts: str
    planned_critical: str
    planned_sequential: str
    critical_path: str
    wall_clock_ticking: Ticking | None = None  # while a lane has not ended


@dataclass(frozen=True)
class Timelines:
    planned: Markup | None  # None: some unit has no estimate
    actual: Markup | None  # None: no lane has started


def building_since(events: Sequence[RunEvent]) -> datetime | None:
    """When the run first began building (its state became running, at `/approve`)."""
    for event in events:
        if event.kind == "state":
            try:
                moved_to = event.payload().get("to")
            except ValueError:
                continue
            if moved_to == "running":
                return event.at
    return None


def timelines(
    graph: Graph | None,
    lanes: Sequence[Lane],
    sessions: Sequence[AgentSession],
    events: Sequence[RunEvent],
    now: datetime,
) -> Timelines:
    """The lanes as the estimates planned them, and as they ran."""
    if graph is None:
        return Timelines(None, None)
    planned = planned_rows(graph)
    planned_svg = (
        Markup(timeline_svg(planned, planned=True, label="The lanes as the estimates plan them")) if planned else None
    )
    units = {unit.id: unit for unit in graph}
    times = [
        LaneTimes(
            unit_id=lane.unit_id,
            needs=units[lane.unit_id].needs if lane.unit_id in units else (),
            attempts=tuple(
                AttemptTimes(s.attempt, s.status, s.started_at, s.check_started_at, s.ended_at)
                for s in sessions
                if s.lane_id == lane.id and s.kind == "lane"
            ),
            finished=lane.finished_at,
            merged=lane.merged_at,
        )
        for lane in sorted(lanes, key=lambda lane: graph.ids.index(lane.unit_id) if lane.unit_id in units else 0)
    ]
    if not any(lane.attempts for lane in times):
        return Timelines(planned_svg, None)
    rows = actual_rows(times, building_since(events), now)
    return Timelines(planned_svg, Markup(timeline_svg(rows, planned=False, label="The lanes as they ran")))


def timing(graph: Graph | None, lanes: Sequence[Lane], sessions: Sequence[AgentSession], now: datetime) -> Timing:
    """The wall-clock of the lanes beside the sum of their attempts, and what the plan estimated."""
    starts = [lane.started_at for lane in lanes if lane.started_at]
    ends = [lane.merged_at or lane.finished_at for lane in lanes]
    still = any(lane.state == "running" for lane in lanes) or any(end is None for end in ends)
    wall = "—"
    if starts:
        last = now if still else max(end for end in ends if end is not None)
        wall = str(format_duration(max(0.0, (last - min(starts)).total_seconds())))
        wall += " so far" if still else ""
    attempt_seconds = [
        (s.ended_at - s.started_at).total_seconds() for s in sessions if s.kind == "lane" and s.ended_at is not None
    ]
    summed = str(format_duration(max(0.0, sum(attempt_seconds)))) if attempt_seconds else "—"
    critical = graph.critical_path() if graph else None
    sequential = graph.sequential_minutes() if graph else None
    return Timing(
        wall_clock=wall,
        sum_of_attempts=summed,
        planned_critical=format_minutes(critical.minutes) if critical and critical.minutes is not None else "—",
        planned_sequential=format_minutes(sequential) if sequential is not None else "—",
        critical_path=" → ".join(critical.units) if critical else "—",
        wall_clock_ticking=ticking(min(starts), None, now) if starts and still else None,
    )


__all__ = [
    "AttemptView",
    "EventView",
    "LaneView",
    "Links",
    "SessionView",
    "Timelines",
    "Timing",
    "attempt_url",
    "event_views",
    "lane_views",
    "plan_graph",
    "run_links",
    "session_views",
    "state_words",
    "timelines",
    "timing",
]
