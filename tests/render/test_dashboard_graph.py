"""The unit graph as SVG: layered by round, edges for needs, the critical path marked, nodes coloured by
their lane's state, and no markup a unit title can smuggle out of the drawing."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from bot.core.graph import Graph, Unit
from bot.render.dashboard.graph_svg import NODE_WIDTH, STATE_COLOURS, graph_svg, layout

SVG = "{http://www.w3.org/2000/svg}"
ALLOWED = {"svg", "title", "desc", "defs", "marker", "path", "rect", "g", "text", "a"}


def unit(unit_id: str, needs=(), title: str = "a unit", estimate: float | None = None) -> Unit:
    return Unit(unit_id, title, tuple(needs), f"^{unit_id}/", "true", "brief", estimate)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed XML, or this raises


def nodes(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-unit"): g for g in root.iter(f"{SVG}g") if g.get("class") == "node"}


def test_rounds_are_columns_and_each_need_is_an_edge():
    graph = Graph((unit("a"), unit("b"), unit("c", ["a", "b"]), unit("d", ["c"])))
    boxes, width, _height = layout(graph)
    assert boxes["a"].x == boxes["b"].x < boxes["c"].x < boxes["d"].x
    assert boxes["a"].y < boxes["b"].y
    assert width >= boxes["d"].x + NODE_WIDTH
    root = parse(graph_svg(graph, {}))
    edges = {(p.get("data-from"), p.get("data-to")) for p in root.iter(f"{SVG}path") if p.get("class") == "edge"}
    assert edges == {("a", "c"), ("b", "c"), ("c", "d")}


def test_the_critical_path_goes_by_estimate_and_by_count_without_one():
    by_estimate = Graph((unit("a", estimate=5), unit("b", estimate=30), unit("c", ["a", "b"], estimate=1)))
    root = parse(graph_svg(by_estimate, {}))
    marked = {name for name, g in nodes(root).items() if g.get("data-critical") == "true"}
    assert marked == {"b", "c"}
    assert "b → c (31 min by the estimates)" in root.find(f"{SVG}desc").text
    by_count = Graph((unit("x"), unit("y", ["x"]), unit("z", ["y"]), unit("lone")))
    marked = {name for name, g in nodes(parse(graph_svg(by_count, {}))).items() if g.get("data-critical") == "true"}
    assert marked == {"x", "y", "z"}


@pytest.mark.parametrize("state", ["pending", "running", "finished", "merged", "failed"])
def test_each_node_is_coloured_by_its_lanes_state(state):
    root = parse(graph_svg(Graph((unit("a"), unit("b", ["a"]))), {"a": state}))
    found = nodes(root)
    assert found["a"].get("data-state") == state and found["b"].get("data-state") == "planned"
    assert found["a"].find(f"{SVG}rect").get("fill") == STATE_COLOURS[state][0]


HOSTILE = [
    "</text></svg><script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "<![CDATA[ ]]> <!-- x --> &amp; &#x3C;",
    "\x00\x01\x1b[31m\u202e\ufffe\ud800 control",
    "<foreignObject><iframe src=javascript:alert(1)>",
    "' onmouseover='alert(1)",
]


@pytest.mark.parametrize("title", HOSTILE)
def test_a_hostile_title_stays_text(title):
    svg = graph_svg(Graph((unit("a", title=title), unit("b", ["a"], title=title * 3))), {"a": "running"}, label=title)
    root = parse(svg)
    tags = {element.tag.removeprefix(SVG) for element in root.iter()}
    assert tags <= ALLOWED
    for element in root.iter():
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on") and name != "style"
            assert "javascript:" not in value.lower()
    assert "<script" not in svg and "<img" not in svg and "<iframe" not in svg and "<foreignObject" not in svg
    tooltip = nodes(root)["a"].find(f"{SVG}title").text
    visible = "".join(ch for ch in title if ch.isprintable() and ch not in "\u202e\ufffe\ud800")
    assert visible.split()[0] in tooltip  # the title is there, as text


def test_no_style_no_script_no_external_reference():
    svg = graph_svg(Graph((unit("a"),)), {})
    assert (
        "style" not in svg
        and "<script" not in svg
        and "http" not in svg.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    assert 'href="#lane-a"' in svg
