"""The pull request's text: the title and body the integrator wrote, and lanebot's section below it. Pure.

The body is the integrator's text (from `.lanebot/pr.md`, defused and cut to fit), then how lanebot
built the change: the lanes in a table, the unit graph as Mermaid, the wall-clock against the lanes
one after the other, the sessions it took and what they spent (tokens, cost), and `Closes #<issue>`,
all under GitHub's 65,536-character cap. The integrator's text and title and the plan's unit titles are untrusted (bot.core.text.defuse):
they mention no one, close and reference no issue, and cannot reach lanebot's section; the one
closing keyword that works is lanebot's own `Closes #<issue>`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.budget import Spent
from bot.core.graph import Graph
from bot.core.text import COMMENT_LIMIT, cell_code, code_block, defuse, format_duration, markdown_cell, one_line
from bot.render.gate import mermaid_flowchart

PR_BODY_LIMIT = COMMENT_LIMIT


_SESSION_WORDS = {
    "plan": "planner",
    "lane": "lane",
    "resolve": "merge resolver",
    "integrate": "integrator",
    "verify": "verify repair",
    "review": "review",
}


def split_pr_text(text: str) -> tuple[str, str]:
    """(title, body) of `.lanebot/pr.md`: the first non-empty line (a leading `#` dropped), the rest."""
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return "", ""
    title = lines[0].strip().lstrip("#").strip()
    return title, "\n".join(lines[1:]).strip("\n")


def pr_title(text: str) -> str:
    """A pull request title made from untrusted text (the issue's, the integrator's): one line, defused."""
    return defuse(one_line(text), context="plain")


@dataclass(frozen=True)
class LaneSummary:
    """One lane as the PR body shows it."""

    unit_id: str
    title: str
    branch: str
    round: int  # 1-based
    duration_s: float | None  # the time its attempts ran, together
    attempts: int
    check_url: str | None
    spent: Spent | None = None  # what its sessions used (tokens, cost)


def pr_body(
    *,
    integrator_body: str,
    notes: Sequence[str],
    issue_number: int,
    graph: Graph,
    lanes: Sequence[LaneSummary],
    schedule: str,
    wall_clock_s: float | None,
    sum_of_lanes_s: float | None,
    sessions: Mapping[str, int],
    spent: Spent | None = None,
) -> str:
    """The pull request's body: the integrator's text, then lanebot's section, under GitHub's cap.
    `spent`: what every session of the run used so far, the integrator's and verify's included."""
    section = _generated_section(
        notes, issue_number, graph, lanes, schedule, wall_clock_s, sum_of_lanes_s, sessions, spent
    )
    text = _fitted(defuse(integrator_body.strip(), context="markdown"), PR_BODY_LIMIT - len(section) - 2)
    return f"{text}\n\n{section}" if text else section


_CUT_NOTE = "\n\n… (cut to fit GitHub's limit)"


def _fitted(text: str, room: int) -> str:
    """Defused `text` within `room` characters: cut, defused again (a fence the cut opened is closed)."""
    cut = room - len(_CUT_NOTE)
    while len(text) > room and cut > 0:
        fitted = defuse(text[:cut], context="markdown") + _CUT_NOTE
        if len(fitted) <= room:
            return fitted
        cut -= len(fitted) - room
    return text if len(text) <= room else ""


def _generated_section(
    notes: Sequence[str],
    issue_number: int,
    graph: Graph,
    lanes: Sequence[LaneSummary],
    schedule: str,
    wall_clock_s: float | None,
    sum_of_lanes_s: float | None,
    sessions: Mapping[str, int],
    spent: Spent | None,
) -> str:
    rounds = len(graph.rounds())
    parts = [
        "---",
        "### How lanebot built this",
        f"{len(lanes)} lane{'s' * (len(lanes) != 1)} in {rounds} round{'s' * (rounds != 1)} ({schedule} schedule), "
        "each its own agent session on its own branch, merged into this branch in order, then integrated and "
        "verified.",
        _lane_table(lanes),
        code_block(mermaid_flowchart(graph), "mermaid"),
    ]
    timing = _timing(wall_clock_s, sum_of_lanes_s)
    if timing:
        parts.append(timing)
    parts.append(_sessions_line(sessions))
    if spent is not None:
        parts.append(f"**Spent:** {markdown_cell(spent.describe())} in all.")
    parts += [markdown_cell(note) for note in notes]
    parts.append(f"Closes #{issue_number}")
    return "\n\n".join(parts) + "\n"


def _lane_table(lanes: Sequence[LaneSummary]) -> str:
    rows = [
        "| Unit | Title | Lane branch | Round | Duration | Attempts | Spent | Check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lane in lanes:
        duration = format_duration(lane.duration_s) if lane.duration_s is not None else "–"
        check = f"[lanebot / {lane.unit_id}]({lane.check_url})" if lane.check_url else "–"
        spent = markdown_cell(lane.spent.describe()) if lane.spent is not None else "–"
        rows.append(
            f"| {cell_code(lane.unit_id)} | {markdown_cell(lane.title)} | {cell_code(lane.branch)} | "
            f"{lane.round} | {duration} | {lane.attempts} | {spent} | {check} |"
        )
    return "\n".join(rows)


def _timing(wall_clock_s: float | None, sum_of_lanes_s: float | None) -> str | None:
    if wall_clock_s is None or not math.isfinite(wall_clock_s):
        return None
    line = f"**Wall-clock:** {format_duration(max(0.0, wall_clock_s))} from the first lane to this pull request"
    if sum_of_lanes_s:
        line += f", against {format_duration(sum_of_lanes_s)} for the lanes one after the other"
        if 0 < wall_clock_s < sum_of_lanes_s:
            line += f": {sum_of_lanes_s / wall_clock_s:.1f}× faster"
    return line + "."


def _sessions_line(sessions: Mapping[str, int]) -> str:
    total = sum(sessions.values())
    detail = ", ".join(
        f"{count} {_SESSION_WORDS.get(kind, kind)}{'s' * (count != 1)}" for kind, count in sessions.items()
    )
    return f"**Sessions:** {total} agent session{'s' * (total != 1)}" + (f" ({detail})." if detail else ".")
