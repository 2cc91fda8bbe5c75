"""The unit graph: read a plan, refuse it with every reason, and derive what the gate shows.

A plan is a list of units (JSON objects with `id`, `title`, `needs`, `files`, `check`,
`brief` and an optional `estimate` in minutes), written as a JSON array or as JSONL.
`validate` lists every problem with the unit it concerns; `build_graph` turns a valid plan
into a `Graph`, from which the rounds (topological layers), the critical path and the
session bound follow. Pure code.

`files` is a POSIX extended regular expression (what `grep -E` reads), compiled for RE2 by
bot/core/ere.py (`compile_ere`, with its limits); the overlap check matches every unit's `files`
against the tracked paths in one pass (`match_paths`, an RE2 set), in time linear in the paths.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, cast

from bot.core.ere import MAX_FILES_CHARS, MAX_REPEAT, FilesLimitError, compile_ere, compiled_ere, match_paths
from bot.core.ere import shown as _shown
from bot.core.hiding import hiding_spots

__all__ = [
    "DEFAULT_MAX_UNITS",
    "MAX_FILES_CHARS",
    "MAX_REPEAT",
    "OPTIONAL_KEYS",
    "REQUIRED_KEYS",
    "SLUG",
    "CriticalPath",
    "FilesLimitError",
    "Graph",
    "InvalidPlan",
    "PlanSyntaxError",
    "Problem",
    "SessionBudget",
    "Unit",
    "UnitJson",
    "build_graph",
    "compile_ere",
    "is_slug",
    "load_plan",
    "match_paths",
    "parse_units",
    "validate",
]

# Use `is_slug` (or SLUG.fullmatch): Python's `$` also matches before a trailing newline.
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
REQUIRED_KEYS = ("id", "title", "needs", "files", "check", "brief")
OPTIONAL_KEYS = ("estimate",)
DEFAULT_MAX_UNITS = 6

_TEXT_KEYS = ("title", "files", "check", "brief")


def is_slug(text: str) -> bool:
    """Whether `text` is a valid unit id."""
    return SLUG.fullmatch(text) is not None


# --------------------------------------------------------------------------- units


class UnitJson(TypedDict):
    """A unit as a plan writes it (the JSON object `validate` accepts)."""

    id: str
    title: str
    needs: list[str]
    files: str
    check: str
    brief: str
    estimate: NotRequired[float | None]


@dataclass(frozen=True)
class Unit:
    """One unit of work: it becomes one lane."""

    id: str
    title: str
    needs: tuple[str, ...]
    files: str
    check: str
    brief: str
    estimate: float | None = None  # minutes

    def __post_init__(self) -> None:
        # A list is accepted for convenience; a need listed twice is one need.
        object.__setattr__(self, "needs", tuple(dict.fromkeys(self.needs)))

    @classmethod
    def from_json(cls, data: UnitJson) -> Unit:
        """The unit an already validated JSON object describes."""
        return cls(
            id=data["id"],
            title=data["title"],
            needs=tuple(data["needs"]),
            files=data["files"],
            check=data["check"],
            brief=data["brief"],
            estimate=data.get("estimate"),
        )

    def owns(self, path: str) -> bool:
        """Whether the unit may create or modify `path` (its `files` matches somewhere in it).

        For one path; `match_paths` matches many in one pass.
        """
        return compiled_ere(self.files).search(path) is not None

    def to_json(self) -> UnitJson:
        data: UnitJson = {
            "id": self.id,
            "title": self.title,
            "needs": list(self.needs),
            "files": self.files,
            "check": self.check,
            "brief": self.brief,
        }
        if self.estimate is not None:
            data["estimate"] = self.estimate
        return data


@dataclass(frozen=True)
class Problem:
    """One reason a plan is refused."""

    unit: str | None  # the unit's id, "#<1-based index>" when it has no usable id, None plan-wide
    message: str

    def __str__(self) -> str:
        if self.unit is None:
            return self.message
        return f"{_unit_ref(self.unit)}: {self.message}"


class PlanSyntaxError(ValueError):
    """The text is neither a JSON array nor JSONL (or holds no unit at all)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


class InvalidPlan(ValueError):
    """The plan parsed but breaks rules; `problems` lists every one."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


# --------------------------------------------------------------------------- parsing

_PLAN_FORMS = "write the plan as a JSON array of unit objects, or as JSONL (one unit object per line)"


def parse_units(text: str) -> list[object]:
    """The raw units of a plan written as a JSON array, or as JSONL (blank lines ignored).

    Raises PlanSyntaxError, naming the line, when the text is neither, and when it holds no unit.
    """
    body = text.removeprefix("\ufeff")
    if not body.strip():
        raise PlanSyntaxError(f"the plan is empty: {_PLAN_FORMS}")
    units = _parse_array(body) if body.lstrip().startswith("[") else _parse_lines(body)
    if not units:
        raise PlanSyntaxError("the plan is an empty JSON array: a plan needs at least one unit", line=1)
    return units


def _parse_array(body: str) -> list[object]:
    context = "the plan starts with '[', so it is read as one JSON array"
    try:
        units: list[object] = json.loads(body)  # text starting with '[' that parses is an array
        return units
    except json.JSONDecodeError as error:
        raise PlanSyntaxError(
            f"line {error.lineno}, column {error.colno}: {error.msg} ({context})", line=error.lineno
        ) from None
    except RecursionError:
        raise PlanSyntaxError(f"the JSON array is nested too deeply to read ({context})") from None
    except ValueError as error:  # e.g. an integer longer than Python converts
        raise PlanSyntaxError(f"the JSON array cannot be read: {error}") from None


def _parse_lines(body: str) -> list[object]:
    units: list[object] = []
    for number, line in enumerate(body.split("\n"), start=1):
        if line.strip():
            units.append(_parse_line(line, number))
    return units


def _parse_line(line: str, number: int) -> object:
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        reason = f"column {error.colno}: {error.msg}"
    except RecursionError:
        reason = "nested too deeply to read"
    except ValueError as error:
        reason = str(error)
    raise PlanSyntaxError(
        f"line {number}, {reason}; in JSONL every line holds one whole unit object"
        " (to spread units over several lines, write the plan as a JSON array)",
        line=number,
    )


# --------------------------------------------------------------------------- validation


@dataclass
class _Entry:
    """What validation could make of one raw unit, for the checks across units."""

    index: int  # 1-based
    label: str  # the id when it is a slug, else "#<index>"
    unit_id: str | None  # the id when it is a string at all
    needs: tuple[str, ...] | None = None  # the string entries of needs, when needs is a list
    files: str | None = None  # when it is a usable expression: valid, and within the limits


def validate(
    raw: object,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    tracked_paths: Iterable[str] = (),
) -> list[Problem]:
    """Every problem with the plan `raw` (a parsed JSON value), each naming its unit.

    Never raises on a JSON value. An empty list means `build_graph` will succeed. Beyond the
    design card's rules: title, files, check and brief must not be blank; `"estimate": null`
    means no estimate; a need listed twice counts once. Each cycle (strongly connected set of
    units) is reported once, as the shortest cycle through its first declared unit, following
    `needs` (`a -> b` reads "a needs b").

    `files` must also be within the limits of bot/core/ere.py (`FilesLimitError`: its length, its
    interval counts, RE2's program size); the overlap check matches in this process, with RE2.
    """
    if max_units < 1:
        raise ValueError(f"max_units must be at least 1, got {max_units}")
    if not isinstance(raw, list):
        return [Problem(None, f"a plan must be a JSON array of unit objects, got {_describe(raw)}")]
    problems = _size_problems(len(raw), max_units)
    entries: list[_Entry] = []
    for index, item in enumerate(raw, start=1):
        entry, shape_problems = _check_unit(index, item)
        entries.append(entry)
        problems += shape_problems
    problems += _duplicate_problems(entries)
    problems += _needs_problems(entries)
    problems += _overlap_problems(entries, tracked_paths)
    problems += _cycle_problems(entries)
    return problems


def _size_problems(count: int, max_units: int) -> list[Problem]:
    if count == 0:
        return [Problem(None, "the plan has no units; it needs at least one")]
    if count > max_units:
        return [
            Problem(
                None,
                f"the plan has {count} units, more than max_units ({max_units});"
                " merge units or raise max_units in the workflow",
            )
        ]
    return []


def _check_unit(index: int, item: object) -> tuple[_Entry, list[Problem]]:
    if not isinstance(item, dict):
        label = f"#{index}"
        shape = f"is {_describe(item)}, not a JSON object with the keys {', '.join(REQUIRED_KEYS)}"
        return _Entry(index, label, None), [Problem(label, shape)]
    unit_id = item.get("id")
    label = unit_id if isinstance(unit_id, str) and is_slug(unit_id) else f"#{index}"
    entry = _Entry(index, label, unit_id if isinstance(unit_id, str) else None)
    messages = _key_messages(item)
    messages += _id_messages(item)
    messages += [message for key in _TEXT_KEYS if key in item for message in _text_messages(key, item[key])]
    messages += _hiding_messages("check", item.get("check"))
    messages += _needs_messages(item)
    messages += _estimate_messages(item)
    entry.needs = _string_needs(item.get("needs"))
    files_messages = _files_messages(item.get("files")) or _hiding_messages("files", item.get("files"))
    entry.files = _usable_files(item.get("files"), files_messages)
    messages += files_messages
    return entry, [Problem(entry.label, message) for message in messages]


def _key_messages(item: Mapping[str, object]) -> list[str]:
    allowed = REQUIRED_KEYS + OPTIONAL_KEYS
    missing = [f"missing key '{key}'" for key in REQUIRED_KEYS if key not in item]
    unknown = [
        f"unknown key {_shown(str(key))}; the keys are {', '.join(allowed)}" for key in item if key not in allowed
    ]
    return missing + unknown


def _id_messages(item: Mapping[str, object]) -> list[str]:
    if "id" not in item:
        return []
    unit_id = item["id"]
    if not isinstance(unit_id, str):
        return [f"id must be a string, got {_describe(unit_id)}"]
    if not is_slug(unit_id):
        return [
            f"id {_shown(unit_id)} is not a slug: use 1-40 lowercase letters, digits and '-',"
            " starting with a letter or digit"
        ]
    return []


def _text_messages(key: str, value: object) -> list[str]:
    if not isinstance(value, str):
        return [f"{key} must be a string, got {_describe(value)}"]
    if not value.strip():
        return [f"{key} is empty"]
    return []


def _hiding_messages(key: str, value: object) -> list[str]:
    """A check runs, and `files` matches, exactly as written: refuse what a reviewer could not see."""
    if not isinstance(value, str):
        return []
    spots = list(hiding_spots(value))
    if not spots:
        return []
    first = spots[0]
    line = value.count("\n", 0, first.start) + 1
    column = first.start - (value.rfind("\n", 0, first.start) + 1) + 1
    more = f" (and {len(spots) - 1} more such spot{'s' * (len(spots) > 2)})" if len(spots) > 1 else ""
    return [
        f"{key} holds {first.what} at line {line}, column {column}{more}: the gate could not show it"
        f" as it would run; write {key} in visible characters, with no run of more than 32 spaces or tabs"
    ]


def _needs_messages(item: Mapping[str, object]) -> list[str]:
    needs = item.get("needs", [])
    if not isinstance(needs, list):
        return [f"needs must be a list of unit ids, got {_describe(needs)}"]
    return [
        f"needs[{position}] must be a unit id string, got {_describe(need)}"
        for position, need in enumerate(needs)
        if not isinstance(need, str)
    ]


def _estimate_messages(item: Mapping[str, object]) -> list[str]:
    estimate = item.get("estimate")
    if estimate is None:  # absent, or null: no estimate
        return []
    wanted = f"estimate must be a positive number of minutes, got {_describe(estimate)}"
    if isinstance(estimate, bool) or not isinstance(estimate, (int, float)):
        return [wanted]
    try:
        minutes = float(estimate)
    except OverflowError:
        return [f"estimate is too large, got {_describe(estimate)}"]
    return [] if math.isfinite(minutes) and minutes > 0 else [wanted]


def _files_messages(files: object) -> list[str]:
    if not isinstance(files, str) or not files.strip():
        return []  # the type and emptiness are reported with the other text keys
    try:
        compiled_ere(files)
    except FilesLimitError as beyond:
        return [f"files {_shown(files)} {beyond}"]
    except ValueError as error:
        return [f"files {_shown(files)} is not a valid POSIX extended regular expression: {error}"]
    return []


def _usable_files(files: object, files_messages: list[str]) -> str | None:
    return files if isinstance(files, str) and files.strip() and not files_messages else None


def _string_needs(needs: object) -> tuple[str, ...] | None:
    if not isinstance(needs, list):
        return None
    return tuple(dict.fromkeys(need for need in needs if isinstance(need, str)))


def _duplicate_problems(entries: list[_Entry]) -> list[Problem]:
    by_id: dict[str, list[_Entry]] = {}
    for entry in entries:
        if entry.unit_id is not None and entry.label == entry.unit_id:
            by_id.setdefault(entry.unit_id, []).append(entry)
    return [
        Problem(
            unit_id,
            f"id '{unit_id}' is used by {len(same)} units"
            f" ({', '.join(f'#{entry.index}' for entry in same)}); ids must be unique",
        )
        for unit_id, same in by_id.items()
        if len(same) > 1
    ]


def _needs_problems(entries: list[_Entry]) -> list[Problem]:
    known = {entry.unit_id for entry in entries if entry.unit_id is not None}
    problems = []
    for entry in entries:
        for need in entry.needs or ():
            if need == entry.unit_id:
                problems.append(Problem(entry.label, f"needs itself ('{need}'); remove it from needs"))
            elif need not in known:
                message = f"needs {_shown(need)}, which names no unit in the plan"
                problems.append(Problem(entry.label, message))
    return problems


def _overlap_problems(entries: list[_Entry], tracked_paths: Iterable[str]) -> list[Problem]:
    owning = [(entry, entry.files) for entry in entries if entry.files is not None]
    if len(owning) < 2:
        return []  # nothing to overlap with
    paths = list(tracked_paths)
    matched = [set(found) for found in match_paths([files for _, files in owning], paths)]
    problems = []
    for first, second in itertools.combinations(range(len(owning)), 2):
        shared = matched[first] & matched[second]
        if shared:
            problems.append(_overlap_problem(owning[first], owning[second], paths[min(shared)], len(shared)))
    return problems


def _overlap_problem(first: tuple[_Entry, str], second: tuple[_Entry, str], path: str, count: int) -> Problem:
    (entry, files), (other, other_files) = first, second
    more = f" and {count - 1} more tracked path{'s' * (count > 2)}" if count > 1 else ""
    return Problem(
        entry.label,
        f"files {_shown(files)} overlaps {_unit_ref(other.label)} (files {_shown(other_files)}):"
        f" both match the tracked path {_shown(path)}{more}; each path may belong to one unit only",
    )


def _cycle_problems(entries: list[_Entry]) -> list[Problem]:
    nodes: dict[str, _Entry] = {}
    for entry in entries:
        if entry.unit_id is not None:
            nodes.setdefault(entry.unit_id, entry)
    edges = {
        unit_id: tuple(need for need in entry.needs or () if need in nodes and need != unit_id)
        for unit_id, entry in nodes.items()
    }
    problems = []
    for component in _strongly_connected(list(nodes), edges):
        if len(component) > 1:
            start = min(component, key=lambda unit_id: nodes[unit_id].index)
            cycle = _shortest_cycle(start, edges, set(component))
            problems.append((nodes[start].index, Problem(nodes[start].label, _cycle_message(cycle))))
    return [problem for _, problem in sorted(problems, key=lambda pair: pair[0])]


def _cycle_message(cycle: list[str]) -> str:
    return "Dependency cycle detected: " + " -> ".join(cycle)


def _strongly_connected(nodes: list[str], edges: Mapping[str, tuple[str, ...]]) -> list[list[str]]:
    """Kosaraju's algorithm, iterative so that a long chain cannot exhaust the stack."""
    finished: list[str] = []
    seen: set[str] = set()
    for root in nodes:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(edges[root]))]
        while stack:
            node, children = stack[-1]
            child = next((child for child in children if child not in seen), None)
            if child is None:
                stack.pop()
                finished.append(node)
            else:
                seen.add(child)
                stack.append((child, iter(edges[child])))
    reverse: dict[str, list[str]] = {node: [] for node in nodes}
    for node in nodes:
        for child in edges[node]:
            reverse[child].append(node)
    assigned: set[str] = set()
    components = []
    for root in reversed(finished):
        if root in assigned:
            continue
        assigned.add(root)
        component, pending = [], [root]
        while pending:
            node = pending.pop()
            component.append(node)
            fresh = [parent for parent in reverse[node] if parent not in assigned]
            assigned.update(fresh)
            pending += fresh
        components.append(component)
    return components


def _shortest_cycle(start: str, edges: Mapping[str, tuple[str, ...]], component: set[str]) -> list[str]:
    """The shortest path start -> ... -> start, following needs in the order they are listed."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if start in edges[node]:
            path = [node]
            while (parent := came_from[path[-1]]) is not None:
                path.append(parent)
            return [*reversed(path), start]
        for child in edges[node]:
            if child in component and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def _unit_ref(label: str) -> str:
    return f"unit {label}" if label.startswith("#") else f"unit '{label}'"


def _describe(value: object) -> str:
    """What a JSON value is, for messages about the wrong type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the number {value}" if value.bit_length() <= 64 else f"a {value.bit_length()}-bit integer"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' * (len(value) != 1)}"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def build_graph(
    raw: object,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    tracked_paths: Iterable[str] = (),
) -> Graph:
    """The graph of a valid plan; raises InvalidPlan listing every problem otherwise."""
    problems = validate(raw, max_units=max_units, tracked_paths=tracked_paths)
    if problems:
        raise InvalidPlan(problems)
    units = cast("list[UnitJson]", raw)  # validate found no problem: a list of valid unit objects
    return Graph(tuple(Unit.from_json(item) for item in units))


def load_plan(
    text: str,
    *,
    max_units: int = DEFAULT_MAX_UNITS,
    tracked_paths: Iterable[str] = (),
) -> Graph:
    """parse_units, then build_graph."""
    return build_graph(parse_units(text), max_units=max_units, tracked_paths=tracked_paths)


# --------------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class CriticalPath:
    units: tuple[str, ...]  # in dependency order: each unit needs the one before it
    minutes: float | None  # sum of estimates along it; None unless every unit carries an estimate


@dataclass(frozen=True)
class SessionBudget:
    """How many agent sessions each step may start; the workflow module builds it."""

    planner_attempts: int = 1
    lane_attempts: int = 1
    resolver_per_merge: int = 0  # 1 when on_conflict is "agent"
    integrate_sessions: int = 1
    verify_repairs: int = 0
    review_sessions: int = 0

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"SessionBudget.{name} must be a whole number >= 0, got {value!r}")


@dataclass(frozen=True)
class Graph:
    """A valid unit graph. Units keep their declared order, which breaks every tie."""

    units: tuple[Unit, ...]
    _by_id: dict[str, Unit] = field(init=False, repr=False, compare=False)
    _dependents: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _rounds: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        units = tuple(self.units)
        object.__setattr__(self, "units", units)
        entries = [_Entry(index, unit.id, unit.id, unit.needs) for index, unit in enumerate(units, start=1)]
        problems = (
            _size_problems(len(units), max_units=len(units) or 1)
            + _duplicate_problems(entries)
            + _needs_problems(entries)
            + _cycle_problems(entries)
        )
        if problems:
            raise InvalidPlan(problems)
        object.__setattr__(self, "_by_id", {unit.id: unit for unit in units})
        object.__setattr__(self, "_dependents", self._find_dependents())
        object.__setattr__(self, "_rounds", self._longest_chains())

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(unit.id for unit in self.units)

    def __getitem__(self, unit_id: str) -> Unit:
        try:
            return self._by_id[unit_id]
        except KeyError:
            raise KeyError(f"no unit {unit_id!r} in the plan (units: {', '.join(self.ids)})") from None

    def __len__(self) -> int:
        return len(self.units)

    def __iter__(self) -> Iterator[Unit]:
        return iter(self.units)

    def dependents(self, unit_id: str) -> tuple[str, ...]:
        """The units that need `unit_id`, in declared order."""
        return self._dependents[self[unit_id].id]

    def rounds(self) -> tuple[tuple[str, ...], ...]:
        """Round k holds the units whose longest chain of needs has k links, in declared order."""
        count = max(self._rounds.values()) + 1
        return tuple(
            tuple(unit.id for unit in self.units if self._rounds[unit.id] == round_index)
            for round_index in range(count)
        )

    def round_of(self, unit_id: str) -> int:
        """The 0-based round of `unit_id`."""
        return self._rounds[self[unit_id].id]

    def critical_path(self) -> CriticalPath:
        """The longest chain by estimate (a unit without one weighs 1 for choosing it).

        Ties go to the unit declared first, both for where the path ends and at each step back.
        """
        position = {unit.id: index for index, unit in enumerate(self.units)}
        total: dict[str, float] = {}
        previous: dict[str, str | None] = {}
        for unit in self._topological_order():
            heaviest = max(unit.needs, key=lambda need: (total[need], -position[need]), default=None)
            previous[unit.id] = heaviest
            total[unit.id] = _weight(unit) + (total[heaviest] if heaviest else 0.0)
        end: str | None = max(self.ids, key=lambda unit_id: (total[unit_id], -position[unit_id]))
        chain = []
        while end is not None:
            chain.append(end)
            end = previous[end]
        path = tuple(reversed(chain))
        return CriticalPath(path, self._minutes(path))

    def sequential_minutes(self) -> float | None:
        """The sum of every estimate: one session doing all units. None unless all carry one."""
        return self._minutes(self.ids)

    def session_bound(self, budget: SessionBudget) -> int:
        """The most agent sessions a run of this graph may start."""
        lanes = len(self.units)
        return (
            budget.planner_attempts
            + lanes * budget.lane_attempts
            + lanes * budget.resolver_per_merge
            + budget.integrate_sessions
            + budget.verify_repairs
            + budget.review_sessions
        )

    def to_jsonl(self) -> str:
        return "".join(json.dumps(unit.to_json(), ensure_ascii=False) + "\n" for unit in self.units)

    def _minutes(self, unit_ids: Iterable[str]) -> float | None:
        estimates = {unit.id: unit.estimate for unit in self.units if unit.estimate is not None}
        if len(estimates) < len(self.units):
            return None
        return sum(float(estimates[unit_id]) for unit_id in unit_ids)

    def _find_dependents(self) -> dict[str, tuple[str, ...]]:
        found: dict[str, list[str]] = {unit.id: [] for unit in self.units}
        for unit in self.units:
            for need in unit.needs:
                found[need].append(unit.id)
        return {unit_id: tuple(dependents) for unit_id, dependents in found.items()}

    def _longest_chains(self) -> dict[str, int]:
        links: dict[str, int] = {}
        for unit in self._topological_order():
            links[unit.id] = max((links[need] + 1 for need in unit.needs), default=0)
        return links

    def _topological_order(self) -> list[Unit]:
        waiting = {unit.id: len(unit.needs) for unit in self.units}
        ready = deque(unit for unit in self.units if not unit.needs)
        order = []
        while ready:
            unit = ready.popleft()
            order.append(unit)
            for dependent in self._dependents[unit.id]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    ready.append(self._by_id[dependent])
        return order


def _weight(unit: Unit) -> float:
    return 1.0 if unit.estimate is None else float(unit.estimate)
