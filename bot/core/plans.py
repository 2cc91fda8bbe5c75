"""Plans as text: a plan found in an issue or an agent's message, validated into a unit graph.

The pure side of the plan step. A hand-written plan is a fenced `lanebot-plan` block in an issue or
a comment; an agent's plan is the file it wrote or a fenced block of its final message. Either is
parsed and validated by bot.core.graph; what the planner was shown of the repository is
`summarise_paths`, and the `plan` prompt's variables are `prompt_context`, untrusted text
sanitized (bot.core.text). Pure: no I/O.
"""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bot.core.graph import Graph, InvalidPlan, PlanSyntaxError, build_graph, parse_units
from bot.core.text import NEWLINES, sanitize_untrusted, strip_invisible
from bot.core.workflow import Workflow

HAND_PLAN_INFO = "lanebot-plan"


_MESSAGE_PLAN_INFOS = frozenset({"jsonl", "json", "ndjson", HAND_PLAN_INFO})


@dataclass(frozen=True)
class CommentText:
    """One comment on the issue, as the prompt shows it."""

    author: str
    body: str


@dataclass(frozen=True)
class IssueText:
    """The issue as the planner sees it. The caller chooses the comments (lanebot's own left out)."""

    number: int
    title: str
    body: str
    comments: tuple[CommentText, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "comments", tuple(self.comments))


_OPENING_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<marks>`{3,}|~{3,})(?P<info>.*)$")


_HTML_COMMENT_START = re.compile(r"^ {0,3}<!--")


@dataclass(frozen=True)
class _FencedBlock:
    info: str  # the first word of the info string, lowercased ("" when there is none)
    content: str


def _fenced_blocks(text: str) -> Iterator[_FencedBlock]:
    """The top-level fenced code blocks of Markdown `text`, as CommonMark reads them.

    A fence is 3 or more backticks or tildes indented by at most 3 spaces; it is closed by a line of
    the same character, at least as long, and nothing else; an unclosed block runs to the end.
    Fences inside an HTML comment block (a line starting with `<!--`, up to its `-->`) do not count:
    GitHub shows nothing of them.
    """
    lines = NEWLINES.sub("\n", text).split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if _HTML_COMMENT_START.match(line):
            index = _end_of_html_comment(lines, index) + 1
            continue
        opening = _OPENING_FENCE.match(line)
        if opening is None or (opening["marks"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        closing = _closing_fence_index(lines, index + 1, opening["marks"])
        indent = len(opening["indent"])
        content = [_outdent(body_line, indent) for body_line in lines[index + 1 : closing]]
        words = opening["info"].split()
        yield _FencedBlock(info=words[0].lower() if words else "", content="\n".join(content))
        index = closing + 1


def _end_of_html_comment(lines: list[str], start: int) -> int:
    first = lines[start]
    if "-->" in first[first.index("<!--") + 4 :]:
        return start
    for index in range(start + 1, len(lines)):
        if "-->" in lines[index]:
            return index
    return len(lines)


def _closing_fence_index(lines: list[str], start: int, marks: str) -> int:
    closing = re.compile(rf"^ {{0,3}}{re.escape(marks[0])}{{{len(marks)},}}[ \t]*$")
    for index in range(start, len(lines)):
        if closing.match(lines[index]):
            return index
    return len(lines)


def _outdent(line: str, indent: int) -> str:
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, indent) :]


def extract_hand_plan(text: str) -> str | None:
    """The content of the first fenced `lanebot-plan` block in `text` (an issue body or a /plan comment).

    Backtick or tilde fences of any length >= 3 are read as GitHub renders them; a block hidden in
    an HTML comment or quoted (`> `) is not taken. None when there is no such block.
    """
    for block in _fenced_blocks(text):
        if block.info == HAND_PLAN_INFO:
            return block.content
    return None


def plan_in_message(message: str) -> str | None:
    """The plan an agent put in its final message, or None when it holds none.

    In order: the last fenced block marked `jsonl`, `json`, `ndjson` or `lanebot-plan`; else the
    last unmarked fenced block that starts like JSON; else the whole message when it is a JSON
    array; else the message's lines that start with `{` (bare JSONL among prose).
    """
    blocks = list(_fenced_blocks(message))
    marked = [block.content for block in blocks if block.info in _MESSAGE_PLAN_INFOS]
    if marked:
        return marked[-1]
    unmarked = [block.content for block in blocks if not block.info and block.content.lstrip()[:1] in ("{", "[")]
    if unmarked:
        return unmarked[-1]
    stripped = message.strip()
    if stripped.startswith("["):
        return stripped
    objects = [line for line in message.split("\n") if line.lstrip().startswith("{")]
    return "\n".join(objects) if objects else None


def summarise_paths(paths: Sequence[str], limit: int = 400) -> list[str] | str:
    """The tracked paths for the prompt: all of them when there are at most `limit`, else a summary.

    The summary groups paths by directory, at the deepest level that still gives at most `limit`
    groups, each line naming the directory, how many paths it holds and a few of them. It has at
    most `limit` + 1 lines of bounded length, whatever the number of paths, and its counts add up
    to the number of paths.
    """
    if limit < 1:
        raise ValueError(f"the path limit must be at least 1, got {limit}")
    unique = sorted(set(paths))
    if len(unique) <= limit:
        return unique
    cuts = _deepest_cuts(unique, limit)
    counts = Counter(path[: cut + 1] for path, cut in zip(unique, cuts))
    if len(counts) <= limit:
        shown = sorted(counts)
    else:  # even the top level has too many entries: show the biggest, count the rest
        shown = sorted(heapq.nsmallest(limit - 1, counts, key=lambda name: (-counts[name], name)))
    samples = _samples(unique, cuts, set(shown))
    lines = [
        f"{len(unique)} tracked paths, too many to list: grouped by directory, each with how many"
        " paths it holds and a few of them. Look in the repository for the rest."
    ]
    lines += [_group_line(name, counts[name], samples.get(name, [])) for name in shown]
    if len(shown) < len(counts):
        hidden_paths = len(unique) - sum(counts[name] for name in shown)
        lines.append(f"... and {len(counts) - len(shown)} more entries holding {hidden_paths} paths")
    return "\n".join(lines)


_MAX_GROUP_DEPTH = 12


_SAMPLES_PER_GROUP = 3


_SHOWN_NAME_CHARS = 120


def _deepest_cuts(paths: list[str], limit: int) -> list[int]:
    """For each path, where its group's name ends (a slash, or the path's end), at the deepest
    directory level that gives at most `limit` groups (the top level when none does)."""
    cuts = [_next_cut(path, -1) for path in paths]
    for _ in range(2, _MAX_GROUP_DEPTH + 1):
        deeper = [_next_cut(path, cut) for path, cut in zip(paths, cuts)]
        if deeper == cuts or len({path[: cut + 1] for path, cut in zip(paths, deeper)}) > limit:
            break
        cuts = deeper
    return cuts


def _next_cut(path: str, after: int) -> int:
    slash = path.find("/", after + 1)
    return len(path) if slash < 0 else slash


def _samples(paths: list[str], cuts: list[int], wanted: set[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path, cut in zip(paths, cuts):
        name, rest = path[: cut + 1], path[cut + 1 :]
        if rest and name in wanted:
            kept = found.setdefault(name, [])
            if len(kept) < _SAMPLES_PER_GROUP:
                kept.append(rest)
    return found


def _group_line(name: str, count: int, samples: list[str]) -> str:
    if not samples:
        return _shortened(name)
    listed = ", ".join(_shortened(sample) for sample in samples)
    more = ", ..." if count > len(samples) else ""
    return f"{_shortened(name)} ({count} path{'s' * (count != 1)}: {listed}{more})"


def _shortened(text: str) -> str:
    if len(text) <= _SHOWN_NAME_CHARS:
        return text
    half = (_SHOWN_NAME_CHARS - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


@dataclass(frozen=True)
class PlanAttempt:
    """One planner session (or one hand-written plan): why it was refused, if it was."""

    attempt: int  # 1-based
    problems: tuple[str, ...]  # validation problems, and changes the session made to the checkout
    transcript: Path | None  # the session's transcript; None for a hand plan or a session never started
    error: str | None  # why the session itself failed (crash, timeout, missing binary), if it did

    @property
    def ok(self) -> bool:
        return not self.problems and self.error is None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the attempt failed, one line each: its problems, then its error."""
        failed = (f"the planner session failed: {self.error}",) if self.error else ()
        return self.problems + failed


@dataclass(frozen=True)
class PlanOutcome:
    """The result of planning: a valid graph, or every attempt with why it was refused."""

    graph: Graph | None
    units_jsonl: str | None  # the valid plan, normalised: one unit per line
    attempts: tuple[PlanAttempt, ...]
    source: Literal["agent", "hand"]

    @property
    def ok(self) -> bool:
        return self.graph is not None

    @property
    def problems(self) -> tuple[str, ...]:
        """The last attempt's reasons (problems, then its session error); empty when the plan is valid."""
        return self.attempts[-1].reasons if self.attempts else ()


def validate_plan_text(
    text: str,
    *,
    max_units: int,
    tracked_paths: Sequence[str],
    gate_problems: Callable[[Graph], Sequence[str]] | None = None,
) -> tuple[Graph | None, tuple[str, ...]]:
    """The graph of a plan written as JSONL or a JSON array, or every problem with it (its `files`
    matched against the tracked paths by RE2, in linear time: on 100,000 paths call it off the event loop).

    Invisible characters are stripped from every string of the plan but `check` and `files`,
    written literally or as a JSON escape, so that the lanes get exactly what the gate shows a
    reviewer; `check` and `files` run exactly as written, so the validation refuses them instead
    (bot.core.hiding). `gate_problems`, when given, is asked about the valid graph: the runner
    passes the gate's own size check (bot.render.gate), so a plan the gate cannot show whole is
    refused like any other invalid plan.
    """
    try:
        raw = parse_units(text)
    except PlanSyntaxError as error:
        return None, (f"the plan cannot be read: {error}",)
    try:
        graph = build_graph(_without_invisible(raw), max_units=max_units, tracked_paths=tracked_paths)
    except InvalidPlan as invalid:
        return None, tuple(str(problem) for problem in invalid.problems)
    shown = tuple(gate_problems(graph)) if gate_problems is not None else ()
    return (None, shown) if shown else (graph, ())


_EXACT_KEYS = frozenset({"check", "files"})  # validated as written (bot.core.graph refuses what hides text)


def _without_invisible(value: object) -> object:
    if isinstance(value, str):
        return strip_invisible(value)
    if isinstance(value, list):
        return [_without_invisible(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_invisible(key): item if key in _EXACT_KEYS else _without_invisible(item)
            for key, item in value.items()
        }
    return value


def plan_from_hand(
    text: str,
    *,
    workflow: Workflow,
    tracked_paths: Sequence[str],
    gate_problems: Callable[[Graph], Sequence[str]] | None = None,
) -> PlanOutcome:
    """A hand-written plan (the content `extract_hand_plan` found), validated; no agent session."""
    graph, problems = validate_plan_text(
        text, max_units=workflow.plan.max_units, tracked_paths=tracked_paths, gate_problems=gate_problems
    )
    attempt = PlanAttempt(attempt=1, problems=problems, transcript=None, error=None)
    return PlanOutcome(graph=graph, units_jsonl=graph.to_jsonl() if graph else None, attempts=(attempt,), source="hand")


def prompt_context(
    *,
    issue: IssueText,
    tracked_paths: Sequence[str],
    max_units: int,
    rules: Sequence[str] = (),
    feedback: str | None = None,
    previous_plan: str | None = None,
) -> dict[str, object]:
    """The `plan` template's variables (all but `failure`), untrusted text sanitized. Pure."""
    return {
        "issue": {
            "number": issue.number,
            "title": sanitize_untrusted(issue.title),
            "body": sanitize_untrusted(issue.body),
            "comments": [
                {"author": sanitize_untrusted(comment.author), "body": sanitize_untrusted(comment.body)}
                for comment in issue.comments
            ],
        },
        "tracked_paths": summarise_paths(tracked_paths),
        "max_units": max_units,
        "rules": list(rules),
        # A maintainer's words are instructions, but they are still text someone could have
        # pasted hidden characters into.
        "feedback": sanitize_untrusted(feedback) if feedback else None,
        "previous_plan": strip_invisible(previous_plan) if previous_plan else None,
    }
