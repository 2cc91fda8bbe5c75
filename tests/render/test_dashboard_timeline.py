"""The lanes on a time axis: the estimates' plan beside what happened, each attempt's agent and check,
the waits for a slot and to be merged, as well-formed SVG with nothing inline but attributes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from bot.core.graph import Graph, Unit
from bot.render.dashboard.timeline import (
    FAILED,
    AttemptTimes,
    LaneTimes,
    actual_rows,
    planned_rows,
    timeline_svg,
)

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
ALLOWED = {"svg", "title", "g", "line", "text", "rect", "path"}


def unit(unit_id: str, needs=(), estimate: float | None = 5) -> Unit:
    return Unit(unit_id, "a unit", tuple(needs), f"^{unit_id}/", "true", "brief", estimate)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def spans(row) -> list[tuple[str, float, float]]:
    return [(bar.kind, bar.start, bar.end) for bar in row.bars]


def test_the_plan_starts_each_unit_when_what_it_needs_ends_and_lasts_its_estimate():
    graph = Graph((unit("a", estimate=5), unit("b", ["a"], estimate=10), unit("c", estimate=3)))
    rows = {row.unit_id: row for row in planned_rows(graph) or []}
    assert [row.unit_id for row in planned_rows(graph) or []] == ["a", "b", "c"]  # the plan's order
    assert spans(rows["a"]) == [("planned", 0, 5)]
    assert spans(rows["b"]) == [("planned", 5, 15)]
    assert spans(rows["c"]) == [("planned", 0, 3)]


def test_without_an_estimate_for_every_unit_there_is_no_plan_to_draw():
    assert planned_rows(Graph((unit("a"), unit("b", estimate=None)))) is None


def test_a_lane_that_waited_for_a_slot_after_what_it_needs_merged_shows_the_wait_then_agent_then_check():
    lanes = [
        LaneTimes("a", attempts=(AttemptTimes(1, "succeeded", at(0), at(4), at(5)),), finished=at(5), merged=at(6)),
        LaneTimes(
            "b",
            needs=("a",),
            attempts=(AttemptTimes(1, "succeeded", at(9), at(11), at(12)),),
            finished=at(12),
            merged=at(12),
        ),
    ]
    a, b = actual_rows(lanes, T0, now=at(20))
    assert spans(a) == [("agent", 0, 240), ("check", 240, 300), ("to-merge", 300, 360)]
    assert a.merged == 360
    assert spans(b) == [("wait", 360, 540), ("agent", 540, 660), ("check", 660, 720)]  # from a's merge on
    assert b.merged == 720


def test_a_failed_attempt_is_outlined_red_and_its_retry_waits_from_its_end():
    lane = LaneTimes(
        "a",
        attempts=(
            AttemptTimes(2, "running", at(7)),
            AttemptTimes(1, "failed", at(1), at(3), at(4)),
        ),
    )
    [row] = actual_rows([lane], T0, now=at(10))
    assert spans(row) == [
        ("wait", 0, 60),
        ("agent", 60, 180),
        ("check", 180, 240),
        ("wait", 240, 420),
        ("agent", 420, 600),
    ]
    assert [bar.outline for bar in row.bars] == [None, FAILED, FAILED, None, None]
    assert row.merged is None  # a running attempt runs up to now, and nothing merged


def test_the_drawing_is_well_formed_has_a_bar_per_part_and_no_inline_style():
    graph = Graph((unit("a"), unit("b", ["a"])))
    lanes = [
        LaneTimes("a", attempts=(AttemptTimes(1, "succeeded", at(0), at(1), at(2)),), finished=at(2), merged=at(2))
    ]
    for svg in (
        timeline_svg(planned_rows(graph) or [], planned=True, label="planned <b>"),
        timeline_svg(actual_rows(lanes, None, now=at(3)), planned=False, label="actual"),
    ):
        root = ET.fromstring(svg)
        assert {element.tag.removeprefix(SVG) for element in root.iter()} <= ALLOWED
        assert not any("style" in element.attrib for element in root.iter())
        assert "<b>" not in svg
    actual = ET.fromstring(timeline_svg(actual_rows(lanes, None, now=at(3)), planned=False, label="actual"))
    kinds = [rect.get("data-kind") for rect in actual.iter(f"{SVG}rect") if rect.get("class") == "bar"]
    assert kinds == ["agent", "check"]
    assert [path.get("class") for path in actual.iter(f"{SVG}path")].count("merged") == 1
