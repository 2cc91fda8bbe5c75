"""The unit graph drawn as SVG on the server: layered by round, an edge for each `needs`, the critical
path marked, each node coloured by its lane's state. Pure.

Layout: round k is column k (left to right, as work flows); a round's units stack top to bottom in
declared order. An edge runs from the right side of a needed unit to the left side of the unit that
needs it, a curve with an arrowhead. The critical path (bot.core.graph `Graph.critical_path`: the
longest chain by the units' estimates, each unit without one weighing 1, so by count when none has
one) is drawn with thick dark-orange outlines and edges, and named in the SVG's description.

Everything is presentation attributes: no `style` attribute, no `<style>` element, no font or
stylesheet fetched (the dashboard's Content-Security-Policy allows none inline), no script. Unit
titles are untrusted: each passes through `markup_text` (bot.render.dashboard.markup), in a
`<text>` shortened and whole in the node's `<title>` (the tooltip); unit ids are slugs.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

from bot.core.graph import Graph
from bot.core.text import format_minutes, one_line, shorten
from bot.render.dashboard.markup import markup_text

__all__ = ["NODE_HEIGHT", "NODE_WIDTH", "STATE_COLOURS", "NodeBox", "graph_svg", "layout"]

NODE_WIDTH = 200
NODE_HEIGHT = 58
GAP_X = 72
GAP_Y = 18
MARGIN = 16
LEGEND_HEIGHT = 34
TITLE_CHARS = 27  # of a unit's title shown in its node; the tooltip holds all of it
CRITICAL_STROKE = "#bc4c00"
EDGE_STROKE = "#6e7781"

# (fill, outline, what the legend calls it), by lane state; "planned" is a unit with no lane yet.
STATE_COLOURS: Mapping[str, tuple[str, str, str]] = {
    "planned": ("#ffffff", "#8c959f", "planned"),
    "pending": ("#f6f8fa", "#57606a", "waiting"),
    "running": ("#ddf4ff", "#0969da", "running"),
    "finished": ("#fff8c5", "#9a6700", "passed, to merge"),
    "merged": ("#dafbe1", "#1a7f37", "merged"),
    "failed": ("#ffebe9", "#cf222e", "failed"),
}


@dataclass(frozen=True)
class NodeBox:
    """Where a unit's node is drawn: its top-left corner."""

    unit_id: str
    x: int
    y: int
    round: int


def layout(graph: Graph) -> tuple[dict[str, NodeBox], int, int]:
    """Each unit's box, and the drawing's width and height (the legend's band included)."""
    rounds = graph.rounds()
    boxes: dict[str, NodeBox] = {}
    for column, units in enumerate(rounds):
        for row, unit_id in enumerate(units):
            x = MARGIN + column * (NODE_WIDTH + GAP_X)
            y = MARGIN + row * (NODE_HEIGHT + GAP_Y)
            boxes[unit_id] = NodeBox(unit_id, x, y, column)
    tallest = max(len(units) for units in rounds)
    width = 2 * MARGIN + len(rounds) * NODE_WIDTH + (len(rounds) - 1) * GAP_X
    height = 2 * MARGIN + tallest * NODE_HEIGHT + (tallest - 1) * GAP_Y + LEGEND_HEIGHT
    return boxes, max(width, _legend_width()), height


def _legend_width() -> int:
    return 2 * MARGIN + sum(_legend_step(words) for *_, words in STATE_COLOURS.values()) + _legend_step("critical path")


def _legend_step(words: str) -> int:
    """How far the next legend item starts: the swatch, the words (about 7 px a character at 11 px
    sans-serif, wide enough for any font's) and a gap; at least 110 so short words line up."""
    return max(110, 20 + 7 * len(words) + 14)


def _state_key(state: str | None) -> str:
    return state if state is not None and state in STATE_COLOURS else "planned"


def graph_svg(
    graph: Graph,
    lane_states: Mapping[str, str],
    *,
    label: str = "The unit graph",
    link_prefix: str | None = "#lane-",
) -> str:
    """The SVG of `graph`, each node coloured by `lane_states[unit id]` (a lane state; a unit missing
    from it is drawn as planned). `label` names the drawing for screen readers; with `link_prefix`
    each node links to `<link_prefix><unit id>` (the lane's row on the run page)."""
    boxes, width, height = layout(graph)
    critical = graph.critical_path()
    on_path = set(critical.units)
    path_edges = set(zip(critical.units, critical.units[1:], strict=False))
    path_words = " → ".join(critical.units)
    if critical.minutes is not None:
        path_words += f" ({format_minutes(critical.minutes)} by the estimates)"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="unit-graph" role="img" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" aria-labelledby="unit-graph-title unit-graph-desc">',
        f'<title id="unit-graph-title">{markup_text(label)}</title>',
        f'<desc id="unit-graph-desc">{len(graph)} units in {len(graph.rounds())} rounds;'
        f" the critical path: {markup_text(path_words)}.</desc>",
        "<defs>",
        _arrowhead("unit-graph-arrow", EDGE_STROKE),
        _arrowhead("unit-graph-arrow-critical", CRITICAL_STROKE),
        "</defs>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    for unit in graph:
        for need in unit.needs:
            parts.append(_edge(boxes[need], boxes[unit.id], critical=(need, unit.id) in path_edges))
    for unit in graph:
        state = lane_states.get(unit.id)
        parts.append(_node(boxes[unit.id], unit.title, state, unit.estimate, unit.id in on_path, link_prefix))
    parts.append(_legend(height - LEGEND_HEIGHT + 8))
    parts.append("</svg>")
    return "\n".join(parts)


def _arrowhead(marker_id: str, colour: str) -> str:
    return (
        f'<marker id="{marker_id}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8"'
        f' orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
    )


def _edge(need: NodeBox, unit: NodeBox, *, critical: bool) -> str:
    x1, y1 = need.x + NODE_WIDTH, need.y + NODE_HEIGHT // 2
    x2, y2 = unit.x, unit.y + NODE_HEIGHT // 2
    bend = GAP_X // 2
    colour, width, marker = (
        (CRITICAL_STROKE, 3, "unit-graph-arrow-critical") if critical else (EDGE_STROKE, 1.5, "unit-graph-arrow")
    )
    data_critical = ' data-critical="true"' if critical else ""
    return (
        f'<path class="edge" data-from="{markup_text(need.unit_id)}" data-to="{markup_text(unit.unit_id)}"{data_critical}'
        f' d="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}"'
        f' fill="none" stroke="{colour}" stroke-width="{width}" marker-end="url(#{marker})"/>'
    )


def _node(
    box: NodeBox, title: str, state: str | None, estimate: float | None, critical: bool, link_prefix: str | None
) -> str:
    key = _state_key(state)
    fill, outline, words = STATE_COLOURS[key]
    stroke, stroke_width = (CRITICAL_STROKE, 3) if critical else (outline, 1.5)
    shown_title = shorten(one_line(title), TITLE_CHARS)
    status = words + (f" · est. {format_minutes(estimate)}" if estimate is not None else "")
    tooltip = f"{box.unit_id}: {one_line(title)} ({words}{', on the critical path' if critical else ''})"
    data_critical = ' data-critical="true"' if critical else ""
    node = [
        f'<g class="node" data-unit="{markup_text(box.unit_id)}" data-state="{key}"{data_critical}>',
        f"<title>{markup_text(tooltip)}</title>",
        f'<rect x="{box.x}" y="{box.y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6" ry="6"'
        f' fill="{fill}" stroke="{stroke}" stroke-width="{stroke_width}"/>',
        f'<text x="{box.x + 10}" y="{box.y + 18}" font-family="sans-serif" font-size="13" font-weight="bold"'
        f' fill="#1f2328">{markup_text(shorten(box.unit_id, TITLE_CHARS))}</text>',
        f'<text x="{box.x + 10}" y="{box.y + 34}" font-family="sans-serif" font-size="11"'
        f' fill="#1f2328">{markup_text(shown_title)}</text>',
        f'<text x="{box.x + 10}" y="{box.y + 49}" font-family="sans-serif" font-size="10"'
        f' fill="{outline}">{markup_text(status)}</text>',
        "</g>",
    ]
    if link_prefix is None:
        return "".join(node)
    return f'<a href="{markup_text(link_prefix + urllib.parse.quote(box.unit_id, safe=""))}">{"".join(node)}</a>'


def _legend(y: int) -> str:
    items = []
    x = MARGIN
    for fill, outline, words in STATE_COLOURS.values():
        items.append(
            f'<rect x="{x}" y="{y}" width="14" height="14" rx="3" fill="{fill}" stroke="{outline}" stroke-width="1.5"/>'
            f'<text x="{x + 20}" y="{y + 11}" font-family="sans-serif" font-size="11" fill="#1f2328">{words}</text>'
        )
        x += _legend_step(words)
    items.append(
        f'<rect x="{x}" y="{y}" width="14" height="14" rx="3" fill="#ffffff" stroke="{CRITICAL_STROKE}"'
        f' stroke-width="3"/><text x="{x + 20}" y="{y + 11}" font-family="sans-serif" font-size="11"'
        ' fill="#1f2328">critical path</text>'
    )
    return '<g class="legend">' + "".join(items) + "</g>"
