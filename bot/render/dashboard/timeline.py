"""A run's lanes on a time axis, drawn as SVG on the server: what the plan's estimates foresaw beside
what happened. Pure.

Two drawings, one row per lane in the same order, each on its own axis (the estimates are minutes
of a person's work, the run's clock is seconds of agents'; one scale would flatten one of them):

- **Planned**: each unit starts when the units it needs end and lasts its estimate (no cap on
  lanes: the plan's own critical path sets the length). Drawn only when every unit has an estimate.
- **What happened**, from the run's rows: each attempt as its agent's part then its check's part
  (red outlined when it failed, grey when lost or cancelled); before it, the wait to start (a lane slot, the worktree's cut and set-up; from
  when the lane could start: the run building and every unit it needs merged, or its previous
  attempt's end for a retry); after the last, the wait to be merged and a diamond when it merged.

As in graph_svg: presentation attributes only (the dashboard's CSP allows no inline style), every
text through `markup_text`, and a `<title>` on each bar for its tooltip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.core.graph import Graph
from bot.core.scheduler import Schedule, simulate
from bot.core.text import format_duration, format_minutes
from bot.render.dashboard.markup import markup_text

__all__ = [
    "AttemptTimes",
    "Bar",
    "LaneTimes",
    "Row",
    "actual_rows",
    "planned_rows",
    "timeline_svg",
]

LABEL_WIDTH = 150
BAR_AREA = 640
ROW_HEIGHT = 22
BAR_HEIGHT = 14
MARGIN = 12
AXIS_HEIGHT = 22
LEGEND_HEIGHT = 26
TICKS = 5

# (fill, outline, what the legend calls it), by the kind of a bar.
KIND_COLOURS: Mapping[str, tuple[str, str, str]] = {
    "planned": ("#d0d7de", "#8c959f", "estimate"),
    "wait": ("#f6f8fa", "#8c959f", "waiting to start (a slot, the worktree)"),
    "agent": ("#54aeff", "#0969da", "agent"),
    "check": ("#c297ff", "#8250df", "check"),
    "to-merge": ("#fff8c5", "#9a6700", "waiting to merge"),
}
MERGED = "#1a7f37"
FAILED = "#cf222e"
ENDED_ELSEWISE = "#57606a"  # lost or cancelled


@dataclass(frozen=True)
class AttemptTimes:
    number: int
    status: str  # a session status: running, succeeded, failed, lost, cancelled
    started: datetime
    check_started: datetime | None = None
    ended: datetime | None = None


@dataclass(frozen=True)
class LaneTimes:
    unit_id: str
    needs: tuple[str, ...] = ()
    attempts: tuple[AttemptTimes, ...] = ()
    finished: datetime | None = None
    merged: datetime | None = None


@dataclass(frozen=True)
class Bar:
    kind: str  # a key of KIND_COLOURS
    start: float  # seconds (or minutes, when planned) from the drawing's origin
    end: float
    title: str
    outline: str | None = None  # instead of the kind's


@dataclass(frozen=True)
class Row:
    unit_id: str
    bars: tuple[Bar, ...] = ()
    merged: float | None = None
    merged_title: str = ""


@dataclass(frozen=True)
class _Axis:
    length: float
    label: Callable[[float], str]  # a point on the axis as its tick's text

    def tick(self, value: float) -> str:
        return self.label(value)


def planned_rows(graph: Graph) -> list[Row] | None:
    """Each unit as the estimates foresee it, in minutes from the start; None without estimates."""
    if any(unit.estimate is None for unit in graph):
        return None
    simulation = simulate(graph, None, Schedule.EAGER)
    return [
        Row(
            span.unit,
            (Bar("planned", span.start, span.end, f"{span.unit}: {format_minutes(span.end - span.start)} estimated"),),
        )
        for span in sorted(simulation.spans, key=lambda span: graph.ids.index(span.unit))
    ]


def actual_rows(lanes: Sequence[LaneTimes], building_since: datetime | None, now: datetime) -> list[Row]:
    """What happened to each lane, in seconds from `building_since` (when the run began building)."""
    starts = [attempt.started for lane in lanes for attempt in lane.attempts]
    origin = building_since or (min(starts) if starts else now)
    merged = {lane.unit_id: lane.merged for lane in lanes}
    return [_actual_row(lane, origin, merged, now) for lane in lanes]


def _actual_row(lane: LaneTimes, origin: datetime, merged: Mapping[str, datetime | None], now: datetime) -> Row:
    def at(moment: datetime) -> float:
        return max(0.0, (moment - origin).total_seconds())

    bars: list[Bar] = []
    needed = [moment for need in lane.needs if (moment := merged.get(need)) is not None]
    ready = max([origin, *needed])
    for attempt in sorted(lane.attempts, key=lambda attempt: attempt.number):
        if attempt.started > ready:
            bars.append(Bar("wait", at(ready), at(attempt.started), f"{_seconds(ready, attempt.started)} waiting"))
        ended = attempt.ended or now
        outline = (
            FAILED
            if attempt.status == "failed"
            else ENDED_ELSEWISE
            if attempt.status in ("lost", "cancelled")
            else None
        )
        checking = attempt.check_started if attempt.check_started and attempt.check_started <= ended else None
        what = f"attempt {attempt.number} ({attempt.status})"
        bars.append(
            Bar(
                "agent",
                at(attempt.started),
                at(checking or ended),
                f"{what}: the agent, {_seconds(attempt.started, checking or ended)}",
                outline,
            )
        )
        if checking is not None:
            bars.append(
                Bar("check", at(checking), at(ended), f"{what}: its check, {_seconds(checking, ended)}", outline)
            )
        ready = ended
    if lane.merged is not None and lane.finished is not None and lane.merged > lane.finished:
        bars.append(
            Bar(
                "to-merge",
                at(lane.finished),
                at(lane.merged),
                f"{_seconds(lane.finished, lane.merged)} waiting to merge",
            )
        )
    if lane.merged is None:
        return Row(lane.unit_id, tuple(bars))
    return Row(lane.unit_id, tuple(bars), at(lane.merged), f"merged {_seconds(origin, lane.merged)} after the start")


def _seconds(start: datetime, end: datetime) -> str:
    return str(format_duration(max(0.0, (end - start).total_seconds())))


def timeline_svg(rows: Sequence[Row], *, planned: bool, label: str, length: float | None = None) -> str:
    """The drawing of `rows`: in minutes when `planned`, else in seconds. `length` is the axis's end
    (by default the last bar's or merge's end)."""
    ends = [bar.end for row in rows for bar in row.bars] + [row.merged for row in rows if row.merged is not None]
    axis_end = max([length or 0.0, *ends, 1e-9])
    axis = _Axis(axis_end, format_minutes if planned else format_duration)
    width = 2 * MARGIN + LABEL_WIDTH + BAR_AREA
    height = 2 * MARGIN + AXIS_HEIGHT + len(rows) * ROW_HEIGHT + LEGEND_HEIGHT
    slug = "planned" if planned else "actual"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline timeline-{slug}" role="img" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}" aria-labelledby="timeline-{slug}-title">',
        f'<title id="timeline-{slug}-title">{markup_text(label)}</title>',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        _ticks(axis),
    ]
    for index, row in enumerate(rows):
        parts.append(_row(row, MARGIN + AXIS_HEIGHT + index * ROW_HEIGHT, axis))
    parts.append(_legend(height - LEGEND_HEIGHT + 6, planned))
    parts.append("</svg>")
    return "\n".join(parts)


def _x(value: float, axis: _Axis) -> float:
    return round(MARGIN + LABEL_WIDTH + BAR_AREA * min(value, axis.length) / axis.length, 1)


def _ticks(axis: _Axis) -> str:
    parts = ['<g class="axis">']
    top, bottom = MARGIN + AXIS_HEIGHT - 4, 10_000
    for step in range(TICKS + 1):
        value = axis.length * step / TICKS
        x = _x(value, axis)
        anchor = "start" if step == 0 else "end" if step == TICKS else "middle"
        parts.append(
            f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" stroke="#eaeef2" stroke-width="1"/>'
            f'<text x="{x}" y="{MARGIN + 10}" text-anchor="{anchor}" font-family="sans-serif" font-size="10"'
            f' fill="#57606a">{markup_text(axis.tick(value))}</text>'
        )
    parts.append("</g>")
    return "".join(parts)


def _row(row: Row, y: int, axis: _Axis) -> str:
    middle = y + ROW_HEIGHT // 2
    parts = [
        f'<g class="timeline-row" data-unit="{markup_text(row.unit_id)}">',
        f'<text x="{MARGIN}" y="{middle + 4}" font-family="sans-serif" font-size="12" fill="#1f2328">'
        f"{markup_text(row.unit_id)}</text>",
    ]
    top = middle - BAR_HEIGHT // 2
    for bar in row.bars:
        fill, outline, _ = KIND_COLOURS[bar.kind]
        x1, x2 = _x(bar.start, axis), _x(bar.end, axis)
        stroke_width = 2 if bar.outline else 1
        parts.append(
            f'<rect class="bar" data-kind="{bar.kind}" x="{x1}" y="{top}" width="{max(1.0, round(x2 - x1, 1))}"'
            f' height="{BAR_HEIGHT}" fill="{fill}" stroke="{bar.outline or outline}" stroke-width="{stroke_width}">'
            f"<title>{markup_text(bar.title)}</title></rect>"
        )
    if row.merged is not None:
        x = _x(row.merged, axis)
        parts.append(
            f'<path class="merged" d="M {x} {top - 2} L {x + 6} {middle} L {x} {top + BAR_HEIGHT + 2} L {x - 6} {middle} z"'
            f' fill="{MERGED}"><title>{markup_text(row.merged_title)}</title></path>'
        )
    parts.append("</g>")
    return "".join(parts)


def _legend(y: int, planned: bool) -> str:
    kinds = ["planned"] if planned else ["wait", "agent", "check", "to-merge"]
    items, x = [], MARGIN
    for kind in kinds:
        fill, outline, words = KIND_COLOURS[kind]
        items.append(
            f'<rect x="{x}" y="{y}" width="14" height="12" fill="{fill}" stroke="{outline}"/>'
            f'<text x="{x + 19}" y="{y + 10}" font-family="sans-serif" font-size="11" fill="#1f2328">{words}</text>'
        )
        x += 24 + 7 * len(words)
    if not planned:
        items.append(
            f'<path d="M {x + 6} {y} L {x + 12} {y + 6} L {x + 6} {y + 12} L {x} {y + 6} z" fill="{MERGED}"/>'
            f'<text x="{x + 17}" y="{y + 10}" font-family="sans-serif" font-size="11" fill="#1f2328">merged</text>'
        )
        x += 80
        items.append(
            f'<rect x="{x}" y="{y}" width="14" height="12" fill="#ffffff" stroke="{FAILED}" stroke-width="2"/>'
            f'<text x="{x + 19}" y="{y + 10}" font-family="sans-serif" font-size="11" fill="#1f2328">failed attempt</text>'
        )
    return '<g class="legend">' + "".join(items) + "</g>"
