"""lanebot's comments on an issue: the gate comment and the short answers. Pure rendering, no I/O.

The gate comment shows a human the unit graph before any lane runs: a Mermaid flowchart with
the critical path marked, a table of the units, the rounds, the estimated wall-clock against
one session doing everything, the session bound, the briefs, the questions a reviewer should
ask, and the commands valid now. Every comment starts with a hidden marker
(`<!-- lanebot:gate run=12 rev=2 -->`) so lanebot finds its own comments again instead of
posting a duplicate after a lost response.

All text that came from a plan or an issue is untrusted (anyone who can open an issue shapes
it), so it reaches a comment only through the escapers here:

- `markdown_text` / `markdown_cell`: prose and table cells. HTML and every character Markdown
  reads as syntax become character references, which CommonMark shows literally; `@` gets a
  zero-width space after it so a plan cannot ping people or teams on every revision.
- `code_span` (prose) and `cell_code` (tables, where a backtick span would still split on `|`).
- `code_block`: a fenced block whose fence is longer than any backtick run inside it.
- `mermaid_label`: every character outside letters, digits, space and `.,-_/` written as a
  Mermaid entity code `#NNN;`, which Mermaid turns into an HTML character reference: text
  shown, never parsed as diagram syntax, Markdown or HTML.

The templates enforce this: a `{{ ... }}` that prints a plain string (anything not produced by
an escaper) is a render error, not a silent injection.

GitHub refuses a comment over 65,536 characters, and Mermaid (as GitHub runs it) refuses a
diagram over 50,000 characters or 500 edges, so `render_gate` drops what matters least first:
briefs, then table rows (each cut is stated in the comment), then detail in the diagram.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jinja2

from bot.commands import COMMANDS
from bot.graph import Graph, Problem, SessionBudget
from bot.lifecycle import RunState, available_actions, describe_state
from bot.scheduler import Schedule, simulate

if TYPE_CHECKING:
    from bot.progress import LaneView

__all__ = [
    "COMMENT_LIMIT",
    "MERMAID_MAX_EDGES",
    "MERMAID_MAX_TEXT",
    "Escaped",
    "cell_code",
    "code_block",
    "code_span",
    "format_duration",
    "format_minutes",
    "markdown_cell",
    "markdown_text",
    "marker",
    "mermaid_flowchart",
    "mermaid_label",
    "parse_marker",
    "render_gate",
    "render_plan_failed",
    "render_refusal",
    "render_status",
    "render_superseded",
    "render_template",
    "shorten",
]

COMMENT_LIMIT = 65_536  # GitHub refuses a longer issue comment with 422
MERMAID_MAX_TEXT = 50_000  # Mermaid's default maxTextSize; GitHub shows an error above it
MERMAID_MAX_EDGES = 500  # Mermaid's default maxEdges

_TITLE_IN_DIAGRAM = 80  # characters of a title shown in its node
_TITLE_IN_TABLE = 300
_FILES_IN_TABLE = 300
_CHECK_IN_TABLE = 500
_BRIEF_CHARS = 8_000
_COMMAND_QUOTED = 200
_REASON_CHARS = 2_000
_PROBLEM_CHARS = 1_000

_TEMPLATES = Path(__file__).resolve().parent / "templates"


# --------------------------------------------------------------------------- escaping


class Escaped(str):
    """Text that is safe to print into a comment as it is: escaped, or written by lanebot."""


def _invisible(char: str) -> bool:
    """Control and format characters (bidi overrides, zero-width), except the emoji joiner."""
    category = unicodedata.category(char)
    return (category == "Cc" and char not in "\n\t") or (category == "Cf" and char != "\u200d")


_MAYBE_INVISIBLE = re.compile(r"[^\x20-\x7e\n\t]")


def visible(text: str) -> str:
    """`text` with line breaks normalised to `\\n` and invisible characters removed."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _MAYBE_INVISIBLE.sub(lambda match: "" if _invisible(match[0]) else match[0], text)


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in `…` when cut."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(text: str) -> str:
    return " ".join(visible(text).split())


# Characters Markdown (GitHub flavoured, with math) or HTML read as syntax inside a line.
_MARKDOWN_REFERENCES = {char: f"&#{ord(char)};" for char in "\\`*_[]|~$<>&!"}
_MARKDOWN_REFERENCES.update({"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def _markdown_escape(text: str, *, break_mentions: bool) -> str:
    out = "".join(_MARKDOWN_REFERENCES.get(char, char) for char in text)
    # A character reference does not stop GitHub's mention filter, which reads the rendered
    # text; a zero-width space between `@` and the name does.
    return out.replace("@", "@&#8203;") if break_mentions else out


def markdown_text(text: object) -> Escaped:
    """Untrusted text for a line of Markdown prose: shown literally, on one line."""
    if isinstance(text, Escaped):
        return text
    return Escaped(_markdown_escape(_one_line(str(text)), break_mentions=True))


def markdown_cell(text: object) -> Escaped:
    """Untrusted text for a Markdown table cell: shown literally, line breaks as `<br>`."""
    lines = [" ".join(line.split()) for line in visible(str(text)).split("\n")]
    escaped = (_markdown_escape(line, break_mentions=True) for line in lines)
    return Escaped("<br>".join(line for line in escaped if line))


def cell_code(text: object) -> Escaped:
    """Untrusted text as `<code>` that is safe in a table cell (a `|` cannot split it)."""
    lines = visible(str(text)).split("\n")
    escaped = "<br>".join(_markdown_escape(line, break_mentions=False) for line in lines)
    return Escaped(f"<code>{escaped}</code>")


def code_span(text: object) -> Escaped:
    """Untrusted text as a Markdown code span on one line (not for table cells)."""
    content = " ".join(visible(str(text)).split("\n"))
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    fence = "`" * (longest + 1)
    if content.startswith("`") or content.endswith("`") or (
        content.startswith(" ") and content.endswith(" ") and content.strip()
    ):
        content = f" {content} "
    return Escaped(f"{fence}{content}{fence}")


def code_block(text: object, info: str = "text") -> Escaped:
    """Untrusted text as a fenced code block that nothing inside it can close."""
    if not re.fullmatch(r"[a-z0-9+-]*", info):
        raise ValueError(f"a code block's info string must be a language name, got {info!r}")
    content = visible(str(text)).rstrip("\n")
    longest = max((len(run) for run in re.findall(r"`+", content)), default=0)
    fence = "`" * max(3, longest + 1)
    return Escaped(f"{fence}{info}\n{content}\n{fence}")


_MERMAID_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,-_/")


def mermaid_label(text: object) -> Escaped:
    """Text for inside a quoted Mermaid label `u0["..."]`: one line, every other character `#NNN;`.

    Mermaid replaces `#NNN;` with the HTML reference `&#NNN;` after parsing, so `"`, `#`, `;`,
    `%%`, brackets, backticks and `<script>` all reach the reader as text. `:` is coded too:
    Mermaid strips a trailing `;` from any line holding `style...:...#...;`.
    """
    # Mermaid writes entity codes as placeholders (`#60;` is `ﬂ°°60¶ß`) and decodes them once
    # more in its finished SVG, so a title holding `ﬂ°` or `¶ß` would show other characters
    # (seen in a browser: `ﬂ°°60¶ß` showed as `<`). A zero-width space splits both markers.
    line = _one_line(str(text))
    line = line.replace("\ufb02\xb0", "\ufb02\u200b\xb0").replace("\xb6\xdf", "\xb6\u200b\xdf")
    return Escaped("".join(char if char in _MERMAID_SAFE else f"#{ord(char)};" for char in line))


# --------------------------------------------------------------------------- markers

_KIND = re.compile(r"[a-z][a-z-]*")
_FIELD = re.compile(r"[a-z][a-z_]*")
_VALUE = re.compile(r"[A-Za-z0-9._/+]+")
_MARKER = re.compile(
    r"\A\s*<!-- lanebot:(?P<kind>[a-z][a-z-]*)(?P<fields>(?: [a-z][a-z_]*=[A-Za-z0-9._/+]+)*) -->"
)


def marker(kind: str, run_id: int | None, **fields: object) -> Escaped:
    """The hidden HTML comment that starts one of lanebot's comments.

    `marker("gate", 12, rev=2)` is `<!-- lanebot:gate run=12 rev=2 -->`. `run_id` None (an
    answer on an issue with no run) leaves `run` out. Values must be numbers or simple words.
    """
    if not _KIND.fullmatch(kind):
        raise ValueError(f"a marker kind is lower-case letters and dashes, got {kind!r}")
    pairs = {"run": run_id, **fields} if run_id is not None else dict(fields)
    parts = [f"lanebot:{kind}"]
    for name, value in pairs.items():
        text = str(value)
        if isinstance(value, bool) or not _FIELD.fullmatch(name) or not _VALUE.fullmatch(text):
            raise ValueError(
                f"marker field {name}={value!r}: names are lower-case words, values numbers"
                " or words of letters, digits and . _ / +"
            )
        parts.append(f"{name}={text}")
    return Escaped(f"<!-- {' '.join(parts)} -->")


def parse_marker(body: str) -> dict[str, Any] | None:
    """The marker fields of a comment lanebot wrote (`kind`, `run`, `rev`, ...), or None.

    Only a marker at the very start of the body counts, so quoting lanebot does not make a
    comment lanebot's own; the caller must still check that lanebot wrote the comment. Values
    made of digits come back as ints.
    """
    match = _MARKER.match(body or "")
    if match is None:
        return None
    found: dict[str, Any] = {"kind": match["kind"]}
    for pair in match["fields"].split():
        name, value = pair.split("=", 1)
        found[name] = int(value) if value.isdigit() else value
    return found


# --------------------------------------------------------------------------- templates


def _require_escaped(value: object) -> object:
    """Jinja's finalize: a template may print escaped text and numbers, never a raw string."""
    if isinstance(value, Escaped) or value is None:
        return "" if value is None else value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(
        f"template printed {type(value).__name__} {str(value)[:60]!r} unescaped;"
        " pass it through one of the escaping filters"
    )


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=False,  # Markdown, not HTML: escaping is done by the purpose-built filters
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=_require_escaped,
    )
    environment.filters.update(
        text=markdown_text,
        cell=markdown_cell,
        cell_code=cell_code,
        code=code_span,
        block=code_block,
    )
    return environment


def render_template(name: str, **context: Any) -> str:
    """Render one of lanebot's comment templates (`bot/templates/<name>`)."""
    return _environment().get_template(name).render(context)


# --------------------------------------------------------------------------- numbers


def format_minutes(minutes: float) -> Escaped:
    """`45 min`, `7.5 min`, `2 h 5 min`."""
    if not math.isfinite(minutes) or minutes < 0:
        raise ValueError(f"minutes must be a finite number >= 0, got {minutes!r}")
    if minutes < 60:
        return Escaped(f"{round(minutes, 1):g} min")
    hours, rest = divmod(round(minutes), 60)
    return Escaped(f"{hours} h" + (f" {rest} min" if rest else ""))


def format_duration(seconds: float) -> Escaped:
    """`42 s`, `3 min 5 s`, `1 h 2 min`."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    whole = round(seconds)
    if whole < 60:
        return Escaped(f"{whole} s")
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return Escaped(f"{minutes} min" + (f" {secs} s" if secs else ""))
    hours, minutes = divmod(minutes, 60)
    return Escaped(f"{hours} h" + (f" {minutes} min" if minutes else ""))


def _plural(count: int, word: str) -> Escaped:
    return Escaped(f"{count} {word}{'' if count == 1 else 's'}")


# --------------------------------------------------------------------------- the diagram


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
        title = _one_line(unit.title[: _TITLE_IN_DIAGRAM * 4])
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


def _diagram(graph: Graph, detail: Literal["titles", "ids", "none"]) -> _Diagram:
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
    ("Should it be split at all?",
     "One unit is a correct plan; every split costs sessions and an integration step."),
    ("Do the files overlap?",
     "Two units whose `files` could touch the same path will conflict when they merge."),
    ("Is every edge needed?",
     "An edge makes a unit wait for another's code; one that is not needed costs wall-clock."),
    ("Does each brief stand alone?",
     "A lane sees only its own brief, never the other units' briefs."),
)


@dataclass(frozen=True)
class _Layout:
    briefs: int  # how many units' briefs are shown, from the first
    rows: int  # how many table rows are shown, from the first
    detail: Literal["titles", "ids", "none"]


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
    superseded_by: int | None = None,
) -> str:
    """The gate comment for one plan revision, under GitHub's 65,536-character limit.

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
        run_id=run_id, revision=revision, graph=graph, budget=budget, state=state,
        issue_number=issue_number, repository=repository, plan_source=plan_source,
        schedule=chosen, max_lanes=max_lanes, superseded_by=superseded_by,
    )

    rows = [_row(unit) for unit in graph.units]
    briefs = [_brief(unit, issue_number) for unit in graph.units]
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
            briefs=briefs[: layout.briefs],
            hidden_briefs=len(briefs) - layout.briefs,
        )

    return _fit(render, len(graph)) or _minimal_gate(facts, len(graph))


def _fit(render: Any, count: int) -> str | None:
    """The most detailed rendering under the limit: all briefs, then fewer briefs, then fewer
    rows, then less diagram. None when even the barest layout does not fit."""
    for detail in ("titles", "ids", "none"):
        full = render(_Layout(count, count, detail))
        if len(full) <= COMMENT_LIMIT:
            return full
        no_briefs = render(_Layout(0, count, detail))
        if len(no_briefs) <= COMMENT_LIMIT:
            return largest_fitting_render(lambda briefs: render(_Layout(briefs, count, detail)), 0, count - 1, no_briefs)
        no_rows = render(_Layout(0, 0, detail))
        if len(no_rows) <= COMMENT_LIMIT:
            return largest_fitting_render(lambda rows: render(_Layout(0, rows, detail)), 0, count - 1, no_rows)
    return None


def largest_fitting_render(render: Any, low: int, high: int, fitting: str) -> str:
    """Binary search for the largest n in [low, high] whose rendering fits GitHub's comment limit;
    `fitting` is `render(low)`, known to fit."""
    best = fitting
    while low < high:
        middle = (low + high + 1) // 2
        text = render(middle)
        if len(text) <= COMMENT_LIMIT:
            best, low = text, middle
        else:
            high = middle - 1
    return best


def _gate_facts(
    *, run_id: int, revision: int, graph: Graph, budget: SessionBudget, state: RunState | str | None,
    issue_number: int, repository: str, plan_source: PlanSource, schedule: Schedule, max_lanes: int,
    superseded_by: int | None,
) -> dict[str, Any]:
    critical = graph.critical_path()
    return {
        "marker": marker("gate", run_id, rev=revision, **({"superseded": superseded_by} if superseded_by else {})),
        "run_id": run_id,
        "revision": revision,
        "superseded_by": superseded_by,
        "issue_ref": markdown_text(f"{repository}#{issue_number}"),
        "unit_count": _plural(len(graph), "unit"),
        "source": Escaped(
            "written by the planner agent" if plan_source == "agent"
            else "written by hand (a `lanebot-plan` block): no planner session ran"
        ),
        "rounds": [
            Escaped(", ".join(code_span(unit_id) for unit_id in unit_ids)) for unit_ids in graph.rounds()
        ],
        "critical_path": Escaped(" → ".join(code_span(unit_id) for unit_id in critical.units)),
        "critical_minutes": None if critical.minutes is None else format_minutes(critical.minutes),
        "estimate": _estimate(graph, schedule, max_lanes),
        "schedule": Escaped(schedule.value),
        "eager": schedule is Schedule.EAGER,
        "max_lanes": max_lanes,
        "session_bound": graph.session_bound(budget),
        "session_parts": _session_parts(graph, budget),
        "questions": [(Escaped(q), Escaped(why)) for q, why in _QUESTIONS],
        "commands": () if superseded_by else _command_lines(state),
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
    return [
        (code_span(COMMANDS[name].usage), Escaped(COMMANDS[name].description))
        for name in available_actions(state)
    ]


def _row(unit: Any) -> dict[str, Escaped]:
    return {
        "id": cell_code(unit.id),
        "title": markdown_cell(shorten(unit.title, _TITLE_IN_TABLE)),
        "needs": Escaped(", ".join(cell_code(need) for need in unit.needs) or "—"),
        "files": cell_code(shorten(unit.files, _FILES_IN_TABLE)),
        "check": cell_code(shorten(unit.check, _CHECK_IN_TABLE)),
        "estimate": Escaped("—") if unit.estimate is None else format_minutes(float(unit.estimate)),
    }


def _brief(unit: Any, issue_number: int) -> dict[str, Escaped]:
    text = unit.brief
    if len(text) > _BRIEF_CHARS:
        text = text[:_BRIEF_CHARS] + f"\n… ({len(unit.brief) - _BRIEF_CHARS} more characters not shown)"
    return {
        "id": code_span(unit.id),
        "title": markdown_text(shorten(unit.title, _TITLE_IN_TABLE)),
        "branch": code_span(f"lanebot-lanes/{issue_number}/{unit.id}"),
        "text": code_block(text),
    }


def _minimal_gate(facts: Mapping[str, Any], count: int) -> str:
    """The bare gate comment, for a plan too large to show in any other way."""
    lines = [
        facts["marker"],
        f"### lanebot plan · revision {facts['revision']}",
        "",
        f"This plan has {count} units: too many to show within GitHub's 65,536-character limit."
        " Ask for a smaller plan with `/replan <feedback>`.",
        "",
        f"Up to {facts['session_bound']} agent sessions.",
    ]
    if facts["commands"]:
        lines += ["", "Commands valid now: " + ", ".join(usage for usage, _ in facts["commands"])]
    return shorten("\n".join(lines) + "\n", COMMENT_LIMIT)


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
    rest = _BANNER.sub("", _MARKER.sub("", old, count=1).lstrip("\n"))
    pointer = (
        "<!-- lanebot:commands -->\n"
        f"_Superseded by revision {new_revision}: no commands apply to this revision._\n"
        "<!-- /lanebot:commands -->"
    )
    body = f"{head}\n{banner}{_COMMANDS_SECTION.sub(lambda _: pointer, rest)}"
    return body if len(body) <= COMMENT_LIMIT else short


# --------------------------------------------------------------------------- answers

_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def _valid_now(state: RunState | str | None) -> Escaped:
    return Escaped(", ".join(code_span(COMMANDS[name].usage) for name in available_actions(state)))


def render_refusal(
    login: str,
    command_line: str,
    reason: str,
    state: RunState | str | None,
    *,
    marker_text: str | None = None,
) -> str:
    """`@login: `/approve`: reason. Valid now: ...`, the answer to a refused or invalid command.

    `reason` is escaped unless it is `Escaped` already. `marker_text` (from `marker`) goes first
    when the caller needs to find this answer again.
    """
    if not _LOGIN.fullmatch(login):
        raise ValueError(f"{login!r} is not a GitHub login")
    quoted = code_span(shorten(command_line.strip(), _COMMAND_QUOTED))
    why = markdown_text(shorten(reason, _REASON_CHARS)) if not isinstance(reason, Escaped) else reason
    head = f"{marker_text}\n" if marker_text else ""
    valid = f"Valid now, for {describe_state(state)}: {_valid_now(state)}."
    return f"{head}@{login}: {quoted}: {why.rstrip('.')}. {valid}\n"


def render_plan_failed(
    problems: Iterable[Problem | str], attempts: int, *, marker_text: str | None = None
) -> str:
    """The comment for a run whose planner gave no valid plan: every problem of the last plan."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    items = [f"- {markdown_text(shorten(str(problem), _PROBLEM_CHARS))}" for problem in problems]
    head = (
        (f"{marker_text}\n" if marker_text else "")
        + f"**lanebot could not get a valid plan** after {_plural(attempts, 'attempt')}; the run has failed.\n\n"
        + ("The last plan was refused for:\n\n" if items else "The planner produced no plan at all.\n\n")
    )
    tail = (
        "\nComment `/plan [notes]` to try again, or write the plan yourself in a fenced"
        f" `lanebot-plan` block (JSONL). Valid now: {_valid_now(RunState.FAILED)}.\n"
    )
    return head + _list_within(items, COMMENT_LIMIT - len(head) - len(tail), "problems") + tail


def _list_within(items: Sequence[str], budget: int, noun: str) -> str:
    """As many `items` lines as fit in `budget` characters, then a line counting the rest."""
    shown: list[str] = []
    used = 0
    reserve = len(f"- … and {len(items)} more {noun}\n")
    for index, item in enumerate(items):
        cost = len(item) + 1
        room = budget - (reserve if index + 1 < len(items) else 0)
        if used + cost > room:
            shown.append(f"- … and {len(items) - index} more {noun}")
            break
        shown.append(item)
        used += cost
    return "".join(line + "\n" for line in shown)


def render_status(
    *,
    run_id: int | None,
    state: RunState | str | None,
    lanes: Sequence[LaneView] = (),
    plan_revision: int | None = None,
    approved_revision: int | None = None,
    pr_number: int | None = None,
    error: str | None = None,
    now: datetime | None = None,
    marker_text: str | None = None,
) -> str:
    """The answer to `/status`: the run's state, its plan revisions, its PR, and its lanes."""
    from bot.progress import lane_checklist  # progress imports this module's escapers

    head = f"{marker_text}\n" if marker_text else ""
    if run_id is None or state is None:
        return f"{head}This issue has no lanebot run. Valid now: {_valid_now(None)}.\n"
    facts = [f"**Run {run_id}** is {Escaped(RunState(state).value.replace('_', ' '))}"]
    if plan_revision:
        facts.append(f"plan revision {plan_revision}")
    if approved_revision:
        facts.append(f"approved revision {approved_revision}")
    if pr_number:
        facts.append(f"pull request #{pr_number}")
    lines = [head + " · ".join(facts) + "."]
    if error:
        lines += ["", code_block(shorten_tail(error, 2_000))]
    tail = f"\nValid now: {_valid_now(state)}.\n"
    budget = COMMENT_LIMIT - sum(len(line) + 1 for line in lines) - len(tail) - 2
    if lanes:
        lines += ["", lane_checklist(lanes, now=now, budget=budget).rstrip("\n")]
    return "\n".join(lines) + "\n" + tail


def shorten_tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text`, starting with `…` when cut."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return text if len(text) <= limit else "…" + text[len(text) - limit + 1 :]
