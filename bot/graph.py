"""The unit graph: read a plan, refuse it with every reason, and derive what the gate shows.

A plan is a list of units (JSON objects with `id`, `title`, `needs`, `files`, `check`,
`brief` and an optional `estimate` in minutes), written as a JSON array or as JSONL.
`validate` lists every problem with the unit it concerns; `build_graph` turns a valid plan
into a `Graph`, from which the rounds (topological layers), the critical path and the
session bound follow. Pure code: no I/O.

`files` is a POSIX extended regular expression (what `grep -E` reads) matched against
repository paths. `compile_ere` translates it into an equivalent Python pattern and refuses
what ERE does not have, so a plan means the same thing here as in a shell:

- Refused: `(?...)` groups, lazy or possessive quantifiers (`*?`, `+?`, `*+`) and any other
  repetition operator directly after another, Perl escapes (`\\d \\w \\s \\b`, back-references,
  any backslash before a letter or digit), a repetition with nothing to repeat (`*a`, `(*a)`,
  `^*`), a `{` that does not start an interval `{m}`, `{m,}`, `{m,n}` (GNU's `{,n}` included),
  counts above 32767 (glibc's RE_DUP_MAX), an unmatched `)` (POSIX reads it as a literal;
  here it must be written `\\)` since it is nearly always a typo), ranges that run backwards or
  that touch a character class or another range (`[a-c-e]`, as GNU grep refuses), unknown
  `[:class:]` names, multi-character collating elements, `[:alpha:]` without the outer
  brackets (POSIX reads it as a set of letters; GNU grep refuses it as the mistake it nearly
  always is), and the empty expression (it would match every path; write `.*` if meant).
- Translated: bracket expressions (a backslash inside brackets is a literal, as in POSIX),
  the POSIX classes in the C locale (`[[:alpha:]]` is `[a-zA-Z]`), single-character
  `[.x.]` and `[=x=]`, `$` (end of the path, never before a trailing newline) and `.` (any
  character). A backslash before punctuation is that character, literally.
- Accepted as GNU grep does: empty groups `()` and empty alternatives `a|`.

For the syntax they share, ERE and Python agree on which strings contain a match (they differ
only in which match they report), so `Unit.owns` matches with Python's `re` soundly.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import string
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_MAX_UNITS",
    "OPTIONAL_KEYS",
    "REQUIRED_KEYS",
    "SLUG",
    "CriticalPath",
    "Graph",
    "InvalidPlan",
    "PlanSyntaxError",
    "Problem",
    "SessionBudget",
    "Unit",
    "build_graph",
    "compile_ere",
    "is_slug",
    "load_plan",
    "parse_units",
    "validate",
]

# Use `is_slug` (or SLUG.fullmatch): Python's `$` also matches before a trailing newline.
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
REQUIRED_KEYS = ("id", "title", "needs", "files", "check", "brief")
OPTIONAL_KEYS = ("estimate",)
DEFAULT_MAX_UNITS = 6
RE_DUP_MAX = 32767

_TEXT_KEYS = ("title", "files", "check", "brief")
_SHOWN_CHARS = 60


def is_slug(text: str) -> bool:
    """Whether `text` is a valid unit id."""
    return SLUG.fullmatch(text) is not None


# --------------------------------------------------------------------------- units


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
    def from_json(cls, data: Mapping[str, object]) -> Unit:
        """The unit an already validated JSON object describes."""
        return cls(
            id=data["id"],  # type: ignore[arg-type]
            title=data["title"],  # type: ignore[arg-type]
            needs=tuple(data["needs"]),  # type: ignore[arg-type]
            files=data["files"],  # type: ignore[arg-type]
            check=data["check"],  # type: ignore[arg-type]
            brief=data["brief"],  # type: ignore[arg-type]
            estimate=data.get("estimate"),  # type: ignore[arg-type]
        )

    def owns(self, path: str) -> bool:
        """Whether the unit may create or modify `path` (its `files` matches somewhere in it)."""
        return _compiled_ere(self.files).search(path) is not None

    def to_json(self) -> dict:
        data: dict[str, object] = {
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
        return json.loads(body)
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


# --------------------------------------------------------------------------- ERE


def compile_ere(expression: str) -> re.Pattern[str]:
    """The Python pattern that matches exactly what the POSIX extended regex `expression` does.

    Raises ValueError saying why when `expression` is not a valid ERE (see the module docstring
    for what is refused). Use `.search`: `grep -E` semantics, the match may be anywhere.
    """
    if expression == "":
        raise ValueError("the expression is empty, which would match every path; write '.*' if that is meant")
    source = _EreTranslator(expression).translate()
    try:
        return re.compile(source, re.DOTALL)
    except RecursionError:
        raise ValueError("the expression is nested too deeply") from None


_compiled_ere = functools.lru_cache(maxsize=512)(compile_ere)

# Character classes in the C locale, as (first, last) ranges.
_POSIX_CLASSES: dict[str, tuple[tuple[str, str], ...]] = {
    "alpha": (("a", "z"), ("A", "Z")),
    "digit": (("0", "9"),),
    "alnum": (("a", "z"), ("A", "Z"), ("0", "9")),
    "upper": (("A", "Z"),),
    "lower": (("a", "z"),),
    "space": tuple((char, char) for char in " \t\n\r\f\v"),
    "blank": ((" ", " "), ("\t", "\t")),
    "punct": tuple((char, char) for char in string.punctuation),
    "print": ((" ", "~"),),
    "graph": (("!", "~"),),
    "cntrl": (("\x00", "\x1f"), ("\x7f", "\x7f")),
    "xdigit": (("0", "9"), ("A", "F"), ("a", "f")),
}

_ESCAPE_HINTS = {
    "d": "write [0-9] or [[:digit:]]",
    "D": "write [^0-9]",
    "w": "write [[:alnum:]_]",
    "W": "write [^[:alnum:]_]",
    "s": "write [[:space:]]",
    "S": "write [^[:space:]]",
    "b": "ERE has no word boundaries",
    "B": "ERE has no word boundaries",
    "A": "write ^ for the start of the path",
    "Z": "write $ for the end of the path",
    "z": "write $ for the end of the path",
}

_INTERVAL = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")

# What came last, for deciding whether a repetition operator has something to repeat.
_START, _ANCHOR, _ATOM, _REPEAT = "start", "anchor", "atom", "repeat"


@dataclass(frozen=True)
class _NamedClass:
    name: str


class _EreTranslator:
    """A single left-to-right pass over an ERE that writes the equivalent Python pattern."""

    def __init__(self, expression: str) -> None:
        self.text = expression
        self.pos = 0
        self.out: list[str] = []
        self.open_groups: list[int] = []
        self.last = _START

    def translate(self) -> str:
        while self.pos < len(self.text):
            self._step(self.text[self.pos])
        if self.open_groups:
            raise ValueError(f"the '(' at character {self.open_groups[-1] + 1} is never closed")
        return "".join(self.out)

    def _step(self, char: str) -> None:
        if char == "\\":
            self._escape()
        elif char == "[":
            self._bracket()
        elif char == "(":
            self._open_group()
        elif char == ")":
            self._close_group()
        elif char in "*+?":
            self._repeat(char)
        elif char == "{":
            self._interval()
        else:
            self._plain(char)

    def _plain(self, char: str) -> None:
        translations = {"|": ("|", _START), "^": ("^", _ANCHOR), "$": (r"\Z", _ANCHOR), ".": (".", _ATOM)}
        source, kind = translations.get(char, (re.escape(char), _ATOM))
        self._emit(source, kind, width=1)

    def _emit(self, source: str, kind: str, width: int) -> None:
        self.out.append(source)
        self.last = kind
        self.pos += width

    def _escape(self) -> None:
        if self.pos + 1 >= len(self.text):
            raise ValueError(r"the expression ends with a lone backslash; write \\ to match a backslash")
        char = self.text[self.pos + 1]
        if char.isascii() and char.isalnum():
            hint = _ESCAPE_HINTS.get(char) or (
                "ERE has no back-references"
                if char.isdigit()
                else "ERE escapes only its special characters, such as \\. or \\*"
            )
            raise ValueError(f"'\\{char}' at character {self.pos + 1} is not POSIX ERE: {hint}")
        self._emit(re.escape(char), _ATOM, width=2)

    def _open_group(self) -> None:
        if self.text.startswith("(?", self.pos):
            raise ValueError(
                f"'(?' at character {self.pos + 1}: ERE has no (?...) groups"
                " (non-capturing, named, lookaround or flags); use a plain group (...)"
            )
        self.open_groups.append(self.pos)
        self._emit("(?:", _START, width=1)

    def _close_group(self) -> None:
        if not self.open_groups:
            raise ValueError(
                f"the ')' at character {self.pos + 1} has no matching '('; write \\) to match a parenthesis"
            )
        self.open_groups.pop()
        self._emit(")", _ATOM, width=1)

    def _repeat(self, operator: str) -> None:
        where = f"'{operator}' at character {self.pos + 1}"
        if self.last == _REPEAT:
            raise ValueError(
                f"{where} follows another repetition operator; ERE has no lazy (*?) or possessive (*+)"
                " quantifiers (group the first repetition, e.g. (a*)?, if two are meant)"
            )
        if self.last in (_START, _ANCHOR):
            raise ValueError(f"{where} has nothing to repeat; write \\{operator[0]} to match it literally")
        self._emit(operator, _REPEAT, width=len(operator))

    def _interval(self) -> None:
        match = _INTERVAL.match(self.text, self.pos)
        if match is None:
            raise ValueError(
                f"the '{{' at character {self.pos + 1} does not start an interval {{m}}, {{m,}} or {{m,n}};"
                " write \\{ to match a brace"
            )
        low = self._count(match.group(1))
        high = self._count(match.group(3)) if match.group(3) else None
        if high is not None and high < low:
            raise ValueError(
                f"the interval {match.group(0)} at character {self.pos + 1} has its bounds reversed"
            )
        self._repeat(match.group(0))

    def _count(self, digits: str) -> int:
        if len(digits) > len(str(RE_DUP_MAX)) or int(digits) > RE_DUP_MAX:
            raise ValueError(
                f"the repetition count {digits[:12]} at character {self.pos + 1} exceeds {RE_DUP_MAX}"
            )
        return int(digits)

    def _bracket(self) -> None:
        opened = self.pos
        self.pos += 1
        negated = self._peek() == "^"
        self.pos += int(negated)
        items: list[str] = []
        content_start = self.pos
        while self._peek() != "]" or not items:
            if self._peek() is None:
                raise ValueError(f"the '[' at character {opened + 1} is never closed with ']'")
            items.append(self._bracket_item())
        content = self.text[content_start : self.pos]
        if len(content) > 2 and content[0] == content[-1] == ":" and content.strip(":"):
            # POSIX reads [:alpha:] as a set of letters; it is nearly always a mistake, as GNU grep says too.
            raise ValueError(
                f"'[{content}]' at character {opened + 1} is a set of characters;"
                f" write [[{content}]] for a class"
            )
        self.pos += 1
        self.out.append("[" + "^" * negated + "".join(items) + "]")
        self.last = _ATOM

    def _bracket_item(self) -> str:
        start = self.pos
        low = self._bracket_element()
        if not self._at_range_dash():
            return _class_source(low) if isinstance(low, _NamedClass) else re.escape(low)
        self.pos += 1
        high = self._bracket_element()
        if isinstance(low, _NamedClass) or isinstance(high, _NamedClass):
            raise ValueError(f"the range at character {start + 1} starts or ends at a character class")
        if ord(low) > ord(high):
            raise ValueError(f"the range {low}-{high} at character {start + 1} runs backwards")
        if self._at_range_dash():
            raise ValueError(
                f"the '-' at character {self.pos + 1} follows the range {low}-{high};"
                " put a literal '-' first or last"
            )
        return f"{re.escape(low)}-{re.escape(high)}"

    def _bracket_element(self) -> str | _NamedClass:
        for opener in ("[:", "[.", "[="):
            if self.text.startswith(opener, self.pos):
                return self._bracket_term(opener)
        char = self.text[self.pos]
        self.pos += 1
        return char

    def _bracket_term(self, opener: str) -> str | _NamedClass:
        closer = opener[1] + "]"
        end = self.text.find(closer, self.pos + 2)
        if end < 0:
            raise ValueError(f"the '{opener}' at character {self.pos + 1} is never closed with '{closer}'")
        content = self.text[self.pos + 2 : end]
        where = f"'{opener}{content}{closer}' at character {self.pos + 1}"
        self.pos = end + 2
        if opener == "[:":
            if content not in _POSIX_CLASSES:
                classes = ", ".join(_POSIX_CLASSES)
                raise ValueError(f"{where} is not a character class; the classes are {classes}")
            return _NamedClass(content)
        if len(content) != 1:
            raise ValueError(f"{where}: only single-character collating elements are supported")
        return content

    def _at_range_dash(self) -> bool:
        return self._peek() == "-" and self._peek(1) not in ("]", None)

    def _peek(self, ahead: int = 0) -> str | None:
        index = self.pos + ahead
        return self.text[index] if index < len(self.text) else None


def _class_source(named: _NamedClass) -> str:
    return "".join(
        re.escape(first) if first == last else f"{re.escape(first)}-{re.escape(last)}"
        for first, last in _POSIX_CLASSES[named.name]
    )


# --------------------------------------------------------------------------- validation


@dataclass
class _Entry:
    """What validation could make of one raw unit, for the checks across units."""

    index: int  # 1-based
    label: str  # the id when it is a slug, else "#<index>"
    unit_id: str | None  # the id when it is a string at all
    needs: tuple[str, ...] | None = None  # the string entries of needs, when needs is a list
    files: str | None = None
    pattern: re.Pattern[str] | None = None  # files, compiled, when valid


def validate(
    raw: object, *, max_units: int = DEFAULT_MAX_UNITS, tracked_paths: Iterable[str] = ()
) -> list[Problem]:
    """Every problem with the plan `raw` (a parsed JSON value), each naming its unit.

    Never raises on a JSON value. An empty list means `build_graph` will succeed. Beyond the
    design card's rules: title, files, check and brief must not be blank; `"estimate": null`
    means no estimate; a need listed twice counts once. Each cycle (strongly connected set of
    units) is reported once, as the shortest cycle through its first declared unit, following
    `needs` (`a -> b` reads "a needs b").
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
    usable = isinstance(unit_id, str) and is_slug(unit_id)
    entry = _Entry(index, unit_id if usable else f"#{index}", unit_id if isinstance(unit_id, str) else None)
    messages = _key_messages(item)
    messages += _id_messages(item)
    messages += [message for key in _TEXT_KEYS if key in item for message in _text_messages(key, item[key])]
    messages += _needs_messages(item)
    messages += _estimate_messages(item)
    entry.needs = _string_needs(item.get("needs"))
    entry.files, entry.pattern = _files_pattern(item.get("files"))
    messages += _files_messages(item.get("files"))
    return entry, [Problem(entry.label, message) for message in messages]


def _key_messages(item: dict) -> list[str]:
    allowed = REQUIRED_KEYS + OPTIONAL_KEYS
    missing = [f"missing key '{key}'" for key in REQUIRED_KEYS if key not in item]
    unknown = [
        f"unknown key {_shown(str(key))}; the keys are {', '.join(allowed)}"
        for key in item
        if key not in allowed
    ]
    return missing + unknown


def _id_messages(item: dict) -> list[str]:
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


def _needs_messages(item: dict) -> list[str]:
    needs = item.get("needs", [])
    if not isinstance(needs, list):
        return [f"needs must be a list of unit ids, got {_describe(needs)}"]
    return [
        f"needs[{position}] must be a unit id string, got {_describe(need)}"
        for position, need in enumerate(needs)
        if not isinstance(need, str)
    ]


def _estimate_messages(item: dict) -> list[str]:
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
        _compiled_ere(files)
    except ValueError as error:
        return [f"files {_shown(files)} is not a valid POSIX extended regular expression: {error}"]
    return []


def _string_needs(needs: object) -> tuple[str, ...] | None:
    if not isinstance(needs, list):
        return None
    return tuple(dict.fromkeys(need for need in needs if isinstance(need, str)))


def _files_pattern(files: object) -> tuple[str | None, re.Pattern[str] | None]:
    if not isinstance(files, str) or not files.strip():
        return None, None
    try:
        return files, _compiled_ere(files)
    except ValueError:
        return files, None


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
    owning = [entry for entry in entries if entry.pattern is not None]
    first_path: dict[tuple[int, int], str] = {}  # keyed by positions in `owning`, first < second
    shared = Counter[tuple[int, int]]()
    for path in tracked_paths:
        owners = [
            position
            for position, entry in enumerate(owning)
            if entry.pattern.search(path)  # type: ignore[union-attr]
        ]
        for pair in itertools.combinations(owners, 2):
            first_path.setdefault(pair, path)
            shared[pair] += 1
    return [
        _overlap_problem(owning[first], owning[second], first_path[first, second], shared[first, second])
        for first, second in sorted(shared)
    ]


def _overlap_problem(first: _Entry, second: _Entry, path: str, count: int) -> Problem:
    more = f" and {count - 1} more tracked path{'s' * (count > 2)}" if count > 1 else ""
    return Problem(
        first.label,
        f"files {_shown(first.files)} overlaps {_unit_ref(second.label)} (files {_shown(second.files)}):"
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
            while came_from[path[-1]] is not None:
                path.append(came_from[path[-1]])  # type: ignore[arg-type]
            return [*reversed(path), start]
        for child in edges[node]:
            if child in component and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def _unit_ref(label: str) -> str:
    return f"unit {label}" if label.startswith("#") else f"unit '{label}'"


def _shown(text: str) -> str:
    """`text` quoted, and shortened so that a huge value cannot flood the problem list."""
    return repr(text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "...")


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
    raw: object, *, max_units: int = DEFAULT_MAX_UNITS, tracked_paths: Iterable[str] = ()
) -> Graph:
    """The graph of a valid plan; raises InvalidPlan listing every problem otherwise."""
    problems = validate(raw, max_units=max_units, tracked_paths=tracked_paths)
    if problems:
        raise InvalidPlan(problems)
    return Graph(tuple(Unit.from_json(item) for item in raw))  # type: ignore[union-attr]


def load_plan(text: str, *, max_units: int = DEFAULT_MAX_UNITS, tracked_paths: Iterable[str] = ()) -> Graph:
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
        if any(unit.estimate is None for unit in self.units):
            return None
        return sum(float(self._by_id[unit_id].estimate) for unit_id in unit_ids)  # type: ignore[arg-type]

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
