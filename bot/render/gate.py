"""The gate comment: what a human sees of a plan before any lane runs. Pure rendering, no I/O.

It shows the unit graph as a Mermaid flowchart with the critical path marked, a table of the
units, the rounds, the estimated wall-clock against one session doing everything, the session
bound, the briefs, the questions a reviewer should ask, and the commands valid now. It starts
with a hidden marker (`<!-- lanebot:gate run=12 rev=2 -->`) so lanebot finds it again instead
of posting a duplicate after a lost response. Untrusted text reaches it only through
bot.core.text's escapers, which the templates enforce (bot.render.templates).

Everything that will run is shown whole: each unit's check, files and brief, and the repository's
`integrate.verify`, each in a fenced block nothing inside can close (folded in `<details>` when
long), with whatever would hide text from the reader written visibly (bot.core.hiding: the plan
validation refuses such a check or `files`; a brief or verify shows `⟨U+202E⟩`, `⟨400 spaces⟩`).

GitHub refuses a comment over 65,536 characters, and Mermaid (as GitHub runs it) refuses a
diagram over 50,000 characters or 500 edges, so `render_gate` drops what matters least first:
table rows (each cut is stated in the comment), then detail in the diagram; never any of the
text that runs. A plan whose text does not fit even then raises `GateTooLarge`, and
`gate_size_problems` turns that into the validation problem the planner (or the plan's author)
is shown, before any gate is posted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from bot.core.budget import BudgetCaps
from bot.core.commands import COMMANDS
from bot.core.graph import Graph, SessionBudget, Unit
from bot.core.hiding import made_visible
from bot.core.lifecycle import RunState, available_actions
from bot.core.scheduler import Schedule, simulate
from bot.core.text import (
    COMMENT_LIMIT,
    MARKER,
    Escaped,
    cell_code,
    code_block,
    code_span,
    format_minutes,
    largest_fitting_render,
    markdown_cell,
    markdown_text,
    marker,
    mermaid_label,
    one_line,
    parse_marker,
    plural,
    shorten,
)
from bot.render.templates import render_template

__all__ = [
    "MERMAID_MAX_EDGES",
    "MERMAID_MAX_TEXT",
    "GateTooLarge",
    "gate_size_problems",
    "mermaid_flowchart",
    "render_gate",
    "render_superseded",
]

MERMAID_MAX_TEXT = 50_000  # Mermaid's default maxTextSize; GitHub shows an error above it
MERMAID_MAX_EDGES = 500  # Mermaid's default maxEdges

_TITLE_IN_DIAGRAM = 80  # characters of a title shown in its node
_TITLE_IN_TABLE = 120  # the table is an overview; every unit's whole text follows it
_FILES_IN_TABLE = 120
_CHECK_IN_TABLE = 120
_INLINE_CHARS = 300  # a text longer than this, or of more lines, is folded in <details>
_INLINE_LINES = 5


# --------------------------------------------------------------------------- escaping


# --------------------------------------------------------------------------- markers


# --------------------------------------------------------------------------- templates


# --------------------------------------------------------------------------- numbers


# --------------------------------------------------------------------------- the diagram


_Detail = Literal["titles", "ids", "none"]  # how much of the diagram a layout shows


@dataclass(frozen=True)
class _Diagram:
    source: Escaped | None  # the flowchart, or None when not even ids fit Mermaid's limits
    note: Escaped | None  # what was left out, when something was


def mermaid_flowchart(graph: Graph, *, titles: bool = True) -> Escaped:
    """A Mermaid `flowchart TD`: edges run from a need to its dependent; the critical path is
    drawn thick (`==>`) and coloured. Node ids are generated (`u0`, `u1`, ...), never user text.
    """
    keys = {unit.id: f"u{index}" for index, unit in enumerate(graph.units)}
    critical = graph.critical_path().units
    critical_edges = set(zip(critical, critical[1:]))
    lines = ["flowchart TD"]
    for unit in graph.units:
        # Cut before cleaning so a huge title costs nothing; the table shows more of it.
        title = one_line(unit.title[: _TITLE_IN_DIAGRAM * 4])
        text = f"{unit.id}: {shorten(title, _TITLE_IN_DIAGRAM)}" if titles else unit.id
        lines.append(f'    {keys[unit.id]}["{mermaid_label(text)}"]')
    styled = []
    edges = [(need, unit.id) for unit in graph.units for need in unit.needs]
    for index, (need, dependent) in enumerate(edges):
        on_path = (need, dependent) in critical_edges
        lines.append(f"    {keys[need]} {'==>' if on_path else '-->'} {keys[dependent]}")
        if on_path:
            styled.append(str(index))
    # No `;` after colours: Mermaid would read `#b45309;` as an entity code.
    lines.append("    classDef critical fill:#fff4d6,stroke:#b45309,stroke-width:3px")
    lines.append(f"    class {','.join(keys[unit_id] for unit_id in critical)} critical")
    if styled:
        lines.append(f"    linkStyle {','.join(styled)} stroke:#b45309,stroke-width:3px")
    return Escaped("\n".join(lines))


def _diagram(graph: Graph, detail: _Detail) -> _Diagram:
    edge_count = sum(len(unit.needs) for unit in graph.units)
    if detail == "none" or edge_count > MERMAID_MAX_EDGES:
        why = (
            f"it has {edge_count} edges, more than Mermaid draws ({MERMAID_MAX_EDGES})"
            if edge_count > MERMAID_MAX_EDGES
            else "this comment would pass GitHub's 65,536-character limit"
        )
        return _Diagram(None, Escaped(f"The diagram is not shown: {why}. The rounds below order every unit."))
    if detail == "titles":
        source = mermaid_flowchart(graph, titles=True)
        if len(source) <= MERMAID_MAX_TEXT:
            return _Diagram(source, None)
    source = mermaid_flowchart(graph, titles=False)
    if len(source) > MERMAID_MAX_TEXT:
        return _Diagram(None, Escaped("The diagram is not shown: it is larger than Mermaid draws (50,000 characters)."))
    return _Diagram(source, Escaped("The diagram shows unit ids only, to stay within size limits."))


# --------------------------------------------------------------------------- the gate comment

PlanSource = Literal["agent", "hand"]

_QUESTIONS = (
    ("Should it be split at all?", "One unit is a correct plan; every split costs sessions and an integration step."),
    ("Do the files overlap?", "Two units whose `files` could touch the same path will conflict when they merge."),
    ("Is every edge needed?", "An edge makes a unit wait for another's code; one that is not needed costs wall-clock."),
    ("Does each brief stand alone?", "A lane sees only its own brief, never the other units' briefs."),
)


class _GateFacts(TypedDict):
    """What the gate template shows whatever the layout."""

    marker: Escaped
    run_id: int
    revision: int
    superseded_by: int | None
    issue_ref: Escaped
    unit_count: Escaped
    source: Escaped
    rounds: list[Escaped]
    critical_path: Escaped
    critical_minutes: Escaped | None
    estimate: dict[str, Escaped] | None
    schedule: Escaped
    eager: bool
    max_lanes: int
    session_bound: int
    session_parts: Escaped
    cost_caps: Escaped | None  # `budget.*` in words; None: no cap
    questions: list[tuple[Escaped, Escaped]]
    commands: Sequence[tuple[Escaped, Escaped]]  # usage and description
    unjailed: Escaped | None  # the warning that lanes will run without a jail
    units: list[dict[str, Escaped]]  # each unit's whole text: what its lane runs and is told
    verify: Escaped  # the repository's verify, whole
    setup: Escaped | None  # the repository's lane set-up and tear-down, whole; None when it has none
    teardown: Escaped | None


NO_CAPS = BudgetCaps()

UNJAILED_WARNING = Escaped(
    "> **Warning:** this lanebot runs agents, checks and verify without a jail (`LANEBOT_UNJAILED=1`): "
    "the lanes of this plan will be plain processes that can read the host's files and lanebot's own "
    "environment, key and database."
)


@dataclass(frozen=True)
class _Layout:
    rows: int  # how many table rows are shown, from the first
    detail: _Detail


class GateTooLarge(ValueError):
    """The plan's whole text does not fit in one comment, even without the diagram and the table."""

    def __init__(self, *, length: int, units: int, longest: Unit, longest_chars: int, verify_chars: int) -> None:
        self.over = length - COMMENT_LIMIT
        self.longest = longest.id
        super().__init__(
            f"the gate comment cannot show this plan whole: it would be {length:,} characters,"
            f" {self.over:,} over GitHub's {COMMENT_LIMIT:,}-character limit for a comment, even without"
            f" the diagram and the table. Of its {plural(units, 'unit')} the longest is '{longest.id}'"
            f" ({longest_chars:,} characters as shown: title, check, files and brief); the repository's"
            f" verify takes {verify_chars:,}."
            " Write fewer or shorter units: shorter briefs, checks and files"
        )


def render_gate(
    *,
    run_id: int,
    revision: int,
    graph: Graph,
    budget: SessionBudget,
    state: RunState | str | None,
    issue_number: int,
    repository: str,
    plan_source: PlanSource,
    schedule: Schedule | str,
    max_lanes: int,
    verify: str,
    superseded_by: int | None = None,
    unjailed: bool = False,
    setup: str = "",
    teardown: str = "",
    cost_caps: BudgetCaps = NO_CAPS,
) -> str:
    """The gate comment for one plan revision, under GitHub's 65,536-character limit; raises
    GateTooLarge when the plan's whole text (and `verify`, the repository's) cannot fit.

    `unjailed` (the operator set LANEBOT_UNJAILED=1) adds a one-line warning that the lanes will
    run without a jail. `cost_caps` (`budget.*`) are shown beside the session bound.

    A hand-written plan shows no planner sessions in the bound: none ran, and a `/replan`
    posts a new gate comment with its own bound. With `superseded_by`, the comment says so
    and lists no commands (`/approve` approves the latest revision only).
    """
    if plan_source not in ("agent", "hand"):
        raise ValueError(f"plan_source must be 'agent' or 'hand', got {plan_source!r}")
    if superseded_by is not None and superseded_by <= revision:
        raise ValueError(f"revision {revision} can only be superseded by a later one, not {superseded_by}")
    chosen = Schedule(schedule)
    if plan_source == "hand":
        budget = dataclasses.replace(budget, planner_attempts=0)
    facts = _gate_facts(
        run_id=run_id,
        revision=revision,
        graph=graph,
        budget=budget,
        state=state,
        issue_number=issue_number,
        repository=repository,
        plan_source=plan_source,
        schedule=chosen,
        max_lanes=max_lanes,
        superseded_by=superseded_by,
        unjailed=unjailed,
        verify=verify,
        setup=setup,
        teardown=teardown,
        cost_caps=cost_caps,
    )

    rows = [_row(unit) for unit in graph.units]
    diagrams = {detail: _diagram(graph, detail) for detail in ("titles", "ids", "none")}

    def render(layout: _Layout) -> str:
        diagram = diagrams[layout.detail]
        return render_template(
            "gate.md.j2",
            **facts,
            diagram=diagram.source,
            diagram_note=diagram.note,
            rows=rows[: layout.rows],
            hidden_rows=len(rows) - layout.rows,
        )

    fitted = _fit(render, len(graph))
    if fitted is None:
        raise _too_large(render, graph, facts)
    return fitted


def gate_size_problems(**gate: Any) -> tuple[str, ...]:
    """The reason the gate cannot show the plan whole (render_gate's arguments), or none.

    The plan validation asks this of every valid plan (bot.core.plans.validate_plan_text's
    `gate_problems`), so a plan too large to show is refused before any gate is posted.
    """
    try:
        render_gate(**gate)
    except GateTooLarge as too_large:
        return (str(too_large),)
    return ()


def _too_large(render: Callable[[_Layout], str], graph: Graph, facts: _GateFacts) -> GateTooLarge:
    sizes = [sum(map(len, section.values())) for section in facts["units"]]
    longest = max(range(len(sizes)), key=lambda index: sizes[index])
    return GateTooLarge(
        length=len(render(_Layout(0, "none"))),
        units=len(graph),
        longest=graph.units[longest],
        longest_chars=sizes[longest],
        verify_chars=len(facts["verify"]),
    )


def _fit(render: Callable[[_Layout], str], count: int) -> str | None:
    """The most detailed rendering under the limit: all rows, then fewer rows, then less
    diagram. None when even the barest layout does not fit."""
    details: tuple[_Detail, ...] = ("titles", "ids", "none")
    for detail in details:
        fitted = _fit_rows(render, count, detail)
        if fitted is not None:
            return fitted
    return None


def _fit_rows(render: Callable[[_Layout], str], count: int, detail: _Detail) -> str | None:
    full = render(_Layout(count, detail))
    if len(full) <= COMMENT_LIMIT:
        return full
    no_rows = render(_Layout(0, detail))
    if len(no_rows) <= COMMENT_LIMIT:
        return largest_fitting_render(lambda rows: render(_Layout(rows, detail)), 0, count - 1, no_rows)
    return None


def _gate_facts(
    *,
    run_id: int,
    revision: int,
    graph: Graph,
    budget: SessionBudget,
    state: RunState | str | None,
    issue_number: int,
    repository: str,
    plan_source: PlanSource,
    schedule: Schedule,
    max_lanes: int,
    superseded_by: int | None,
    unjailed: bool,
    verify: str,
    setup: str,
    teardown: str,
    cost_caps: BudgetCaps,
) -> _GateFacts:
    critical = graph.critical_path()
    return {
        "marker": marker("gate", run_id, rev=revision, **({"superseded": superseded_by} if superseded_by else {})),
        "run_id": run_id,
        "revision": revision,
        "superseded_by": superseded_by,
        "issue_ref": markdown_text(f"{repository}#{issue_number}"),
        "unit_count": plural(len(graph), "unit"),
        "source": Escaped(
            "written by the planner agent"
            if plan_source == "agent"
            else "written by hand (a `lanebot-plan` block): no planner session ran"
        ),
        "rounds": [Escaped(", ".join(code_span(unit_id) for unit_id in unit_ids)) for unit_ids in graph.rounds()],
        "critical_path": Escaped(" → ".join(code_span(unit_id) for unit_id in critical.units)),
        "critical_minutes": None if critical.minutes is None else format_minutes(critical.minutes),
        "estimate": _estimate(graph, schedule, max_lanes),
        "schedule": Escaped(schedule.value),
        "eager": schedule is Schedule.EAGER,
        "max_lanes": max_lanes,
        "session_bound": graph.session_bound(budget),
        "session_parts": _session_parts(graph, budget),
        "cost_caps": markdown_text(cost_caps.describe()) if cost_caps.describe() else None,
        "questions": [(Escaped(q), Escaped(why)) for q, why in _QUESTIONS],
        "commands": () if superseded_by else _command_lines(state),
        "unjailed": UNJAILED_WARNING if unjailed else None,
        "units": [_whole_unit(unit, issue_number) for unit in graph.units],
        "verify": shown_whole("The repository's verify, run with `sh` after every lane merged", verify, "sh"),
        "setup": shown_whole("Run with `sh` in each lane's new worktree before its agent (`build.setup`)", setup, "sh")
        if setup.strip()
        else None,
        "teardown": shown_whole("Run with `sh` after each lane attempt (`build.teardown`)", teardown, "sh")
        if teardown.strip()
        else None,
    }


def _estimate(graph: Graph, schedule: Schedule, max_lanes: int) -> dict[str, Escaped] | None:
    sequential = graph.sequential_minutes()
    if sequential is None:
        return None
    makespan = simulate(graph, None, schedule, max_lanes).makespan
    return {"wall_clock": format_minutes(makespan), "sequential": format_minutes(sequential)}


def _session_parts(graph: Graph, budget: SessionBudget) -> Escaped:
    lanes = len(graph)
    parts = [
        (budget.planner_attempts, f"planner {budget.planner_attempts}"),
        (lanes * budget.lane_attempts, f"lanes {lanes} × {budget.lane_attempts} attempts"),
        (lanes * budget.resolver_per_merge, f"merge resolvers {lanes} × {budget.resolver_per_merge}"),
        (budget.integrate_sessions, f"integrate {budget.integrate_sessions}"),
        (budget.verify_repairs, f"verify repairs {budget.verify_repairs}"),
        (budget.review_sessions, f"review {budget.review_sessions}"),
    ]
    return Escaped(" + ".join(text for count, text in parts if count))


def _command_lines(state: RunState | str | None) -> list[tuple[Escaped, Escaped]]:
    return [(code_span(COMMANDS[name].usage), Escaped(COMMANDS[name].description)) for name in available_actions(state)]


def _row(unit: Unit) -> dict[str, Escaped]:
    return {
        "id": cell_code(unit.id),
        "title": markdown_cell(shorten(unit.title, _TITLE_IN_TABLE)),
        "needs": Escaped(", ".join(cell_code(need) for need in unit.needs) or "—"),
        "files": cell_code(shorten(unit.files, _FILES_IN_TABLE)),
        "check": cell_code(shorten(unit.check, _CHECK_IN_TABLE)),
        "estimate": Escaped("—") if unit.estimate is None else format_minutes(float(unit.estimate)),
    }


def _whole_unit(unit: Unit, issue_number: int) -> dict[str, Escaped]:
    """A unit's whole text as the gate shows it: nothing cut, nothing hidden."""
    return {
        "id": code_span(unit.id),
        "title": markdown_text(unit.title),
        "branch": code_span(f"lanebot-lanes/{issue_number}/{unit.id}"),
        "check": shown_whole("Check, run with `sh` in the lane's worktree", unit.check, "sh"),
        "files": shown_whole("Files it may change (an extended regular expression)", unit.files, "text"),
        "brief": shown_whole("Brief, what the lane's agent is told", unit.brief, "text", fold=True),
    }


def shown_whole(label: str, text: str, info: str, *, fold: bool = False) -> Escaped:
    """`text` whole in a fenced block under `label` (lanebot's words), folded in `<details>` when
    long (or always, with `fold`). What would hide text is written visibly (bot.core.hiding)."""
    block = code_block(made_visible(text), info)
    lines = text.count("\n") + 1
    if not fold and len(text) <= _INLINE_CHARS and lines <= _INLINE_LINES:
        return Escaped(f"{label}:\n\n{block}")
    size = f"{plural(len(text), 'character')}, {plural(lines, 'line')}"
    return Escaped(f"<details>\n<summary>{label} ({size})</summary>\n\n{block}\n\n</details>")


# --------------------------------------------------------------------------- superseded

_COMMANDS_SECTION = re.compile(r"<!-- lanebot:commands -->.*?<!-- /lanebot:commands -->", re.DOTALL)
_BANNER = re.compile(r"<!-- lanebot:banner -->.*?<!-- /lanebot:banner -->\n?", re.DOTALL)


def render_superseded(old: str | Mapping[str, Any], new_revision: int) -> str:
    """A gate comment edited to say that plan revision `new_revision` replaced it.

    `old` is the comment's current body, or (when the body is lost) its marker fields. The
    marker is kept, with `superseded=R`, so the comment is still found; the commands are
    replaced by a pointer to the latest revision. Editing twice is safe.
    """
    fields = parse_marker(old) if isinstance(old, str) else dict(old)
    if not fields or fields.get("kind") != "gate" or not isinstance(fields.get("rev"), int):
        raise ValueError("not a lanebot gate comment: its body must start with <!-- lanebot:gate run=N rev=R -->")
    revision = fields["rev"]
    if new_revision <= revision:
        raise ValueError(f"revision {revision} can only be superseded by a later one, not {new_revision}")
    extra = {key: value for key, value in fields.items() if key not in ("kind", "run", "rev", "superseded")}
    head = marker("gate", fields.get("run"), rev=revision, **extra, superseded=new_revision)
    banner = (
        "<!-- lanebot:banner -->\n"
        f"> [!NOTE]\n> **Superseded:** plan revision {new_revision} replaced this revision {revision}."
        " `/approve` approves the latest revision only; see the newer comment below.\n"
        "<!-- /lanebot:banner -->\n"
    )
    short = f"{head}\n{banner}"
    if not isinstance(old, str):
        return short
    rest = _BANNER.sub("", MARKER.sub("", old, count=1).lstrip("\n"))
    pointer = (
        "<!-- lanebot:commands -->\n"
        f"_Superseded by revision {new_revision}: no commands apply to this revision._\n"
        "<!-- /lanebot:commands -->"
    )
    body = f"{head}\n{banner}{_COMMANDS_SECTION.sub(lambda _: pointer, rest)}"
    return body if len(body) <= COMMENT_LIMIT else short


# --------------------------------------------------------------------------- answers
