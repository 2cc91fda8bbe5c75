"""Extended regular expressions as `grep -E` reads them, and what matching one can cost.

A unit's `files` is a POSIX extended regular expression (what `grep -E` reads) matched against
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

`files` is untrusted (a planner or an issue wrote it) and Python's `re` backtracks with no
timeout, so a plan is also refused when its `files` could be slow to match (`files_hazard`:
nested or ambiguous repetitions, too many of them, too long an expression), and matching
`files` against many paths (the overlap check, a lane's ownership check) runs in a child process
that is killed at a deadline, whatever the expression (bot/matching.py).
"""

from __future__ import annotations

import functools
import re
import re._constants as _sre
import re._parser as _sre_parser
import string
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MAX_FILES_CHARS", "MAX_MATCH_WAYS", "MAX_WIDE_REPEATS", "RE_DUP_MAX", "compile_ere", "compiled_ere",
           "files_hazard", "shown"]

RE_DUP_MAX = 32767
_SHOWN_CHARS = 60


def shown(text: str) -> str:
    """`text` quoted, and shortened so that a huge value cannot flood the problem list."""
    return repr(text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "...")


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


compiled_ere = functools.lru_cache(maxsize=512)(compile_ere)  # plans repeat their expressions

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


# --------------------------------------------------------------------------- what matching can cost

MAX_FILES_CHARS = 500
MAX_WIDE_REPEATS = 3
MAX_MATCH_WAYS = 256
_NARROW_INTERVAL = 8  # a {m,n} with at most this many counts to try costs a constant factor
_SATURATED = 10**6  # counts are capped here: past every limit, and cheap to multiply
_LAST_CHAR = 0x10FFFF
_END_OF_PATH = _LAST_CHAR + 1  # `$` is read as this character, which only the end of a path has


def files_hazard(expression: str) -> str | None:
    """Why matching the ERE `expression` could take far longer than reading a path; None if it cannot.

    Python's `re` backtracks: it tries the ways a pattern could match one after another. A
    repetition of a part that can itself match in several ways, such as (a+)+$, (.*)*x or
    (a|a)*c, makes a path that nearly matches cost exponentially many tries; each repetition
    without a small bound (`.*.*.*.*x`) multiplies them by the path's length. The pattern is
    read as `re` parses it (`re._parser`, so what is judged is what runs), and each part gets
    a bound on the ways it can match from one place: refused are a repetition without upper
    bound of a part with more than one way, more than MAX_WIDE_REPEATS wide repetitions in
    combination, more than MAX_MATCH_WAYS ways besides, and more than MAX_FILES_CHARS
    characters. The bound is conservative: some harmless patterns such as (a|ab)* are refused,
    none of the kind plans use (prefixes, alternatives of paths, `.*` between them, classes,
    small intervals). `[^/]+/` counts as one way: the run cannot stop before a '/'.

    The text returned follows "files '<expression>' ". Raises ValueError, as compile_ere does,
    when `expression` is not a valid ERE.
    """
    source = compiled_ere(expression).pattern
    if len(expression) > MAX_FILES_CHARS:
        return (
            f"is {len(expression)} characters long, more than the {MAX_FILES_CHARS} allowed;"
            " name the directories the unit owns (^src/api/) rather than every file"
        )
    try:
        cost = _sequence_cost(list(_sre_parser.parse(source, re.DOTALL)), None)
    except _Exponential as found:
        read_as = "" if found.text in expression else " (as Python's re reads it)"
        return (
            f"can take exponential time to match: {shown(found.text)}{read_as} repeats, without an upper"
            " bound, a part that can itself match in more than one way from one place (a repetition, an"
            " optional part, or alternatives that can start with the same character), so a path that nearly"
            " matches makes the matcher try every way to split it; repeat only parts that match one way,"
            " e.g. ([^/]+/)* rather than (.*/)*"
        )
    except (_Unsupported, RecursionError):
        return "is too complex for lanebot to bound how long matching it takes; use fewer and shallower groups"
    if cost.wide > MAX_WIDE_REPEATS:
        return (
            f"combines {_counted(cost.wide)} repetitions without a small bound (*, +, {{m,}} or {{m,n}} with"
            f" more than {_NARROW_INTERVAL} counts), more than the {MAX_WIDE_REPEATS} allowed: matching time"
            " grows with a path's length to the power of their number; use fewer (one .* does the work of .*.*)"
        )
    if cost.ways > MAX_MATCH_WAYS:
        return (
            f"can match from one place in {_counted(cost.ways)} ways, more than the {MAX_MATCH_WAYS} allowed:"
            " its optional parts, intervals and alternatives that start with the same character multiply;"
            " factor them (^src/(a|b)/ rather than ^(src/a/|src/b/)) or use fewer"
        )
    return None


def _counted(count: int) -> str:
    return f"more than {_SATURATED:,}" if count >= _SATURATED else str(count)


class _Exponential(Exception):
    """An unbounded repetition of a part that can match in more than one way."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


class _Unsupported(Exception):
    """A construct the ERE translation never produces."""


@dataclass(frozen=True)
class _Chars:
    """A set of characters, as sorted, disjoint, inclusive ranges of code points."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, *ranges: tuple[int, int]) -> _Chars:
        merged: list[tuple[int, int]] = []
        for low, high in sorted(ranges):
            if merged and low <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
            else:
                merged.append((low, high))
        return cls(tuple(merged))

    def __or__(self, other: _Chars) -> _Chars:
        return _Chars.of(*self.ranges, *other.ranges)

    def isdisjoint(self, other: _Chars) -> bool:
        return not any(low <= other_high and other_low <= high
                       for low, high in self.ranges for other_low, other_high in other.ranges)

    def complement(self) -> _Chars:
        """Every character (not the end of the path) outside the set."""
        gaps, start = [], 0
        for low, high in self.ranges:
            if low > start:
                gaps.append((start, low - 1))
            start = high + 1
        if start <= _LAST_CHAR:
            gaps.append((start, _LAST_CHAR))
        return _Chars(tuple(gaps))


_NO_CHARS = _Chars()
_EVERY_CHAR = _Chars(((0, _LAST_CHAR),))
_END = _Chars(((_END_OF_PATH, _END_OF_PATH),))


@dataclass(frozen=True)
class _Cost:
    """At most `ways` * (n + 1) ** `wide` ways for a part to match from one place of an n-character path."""

    ways: int = 1
    wide: int = 0  # repetitions whose count the matcher may have to try from 0 up to n

    @property
    def one_way(self) -> bool:
        return self.ways == 1 and self.wide == 0

    def then(self, other: _Cost) -> _Cost:
        """The cost of this part followed by `other`: every way of one with every way of the other."""
        return _Cost(min(self.ways * other.ways, _SATURATED), min(self.wide + other.wide, _SATURATED))


def _sequence_cost(items: list, follow: _Chars | None) -> _Cost:
    """The cost of `items` in a row; `follow` holds what may come next (None: anything, or nothing)."""
    total = _Cost()
    after = follow
    for op, value in reversed(items):
        total = _node_cost(op, value, after).then(total)
        nullable, chars = _node_starts(op, value)
        after = chars if not nullable else None if after is None else chars | after
    return total


def _node_cost(op: object, value: object, follow: _Chars | None) -> _Cost:
    if _single_chars(op, value) is not None or op is _sre.AT:
        return _Cost()
    if op is _sre.SUBPATTERN:
        return _sequence_cost(list(value[3]), follow)  # type: ignore[index]
    if op is _sre.BRANCH:
        return _branch_cost([list(branch) for branch in value[1]], follow)  # type: ignore[index]
    if op is _sre.MAX_REPEAT:
        low, high, body = value  # type: ignore[misc]
        return _repeat_cost(low, high, list(body), follow)
    raise _Unsupported(str(op))


def _branch_cost(branches: list[list], follow: _Chars | None) -> _Cost:
    costs = [_sequence_cost(branch, follow) for branch in branches]
    if all(cost.one_way for cost in costs) and _exclusive([_starts(branch) for branch in branches]):
        return _Cost()  # the next character decides the alternative
    return _Cost(min(sum(cost.ways for cost in costs), _SATURATED), max(cost.wide for cost in costs))


def _exclusive(starts: list[tuple[bool, _Chars]]) -> bool:
    """Whether no alternative matches the empty string and no two can start with the same character."""
    seen = _NO_CHARS
    for nullable, chars in starts:
        if nullable or not seen.isdisjoint(chars):
            return False
        seen |= chars
    return True


def _repeat_cost(low: int, high: int, body: list, follow: _Chars | None) -> _Cost:
    run = _single_chars(*body[0]) if len(body) == 1 else None
    if run is not None and follow is not None and follow.isdisjoint(run):
        return _Cost()  # it takes the whole run of such characters: what follows cannot start inside it
    inner = _sequence_cost(body, None if follow is None else _starts(body)[1] | follow)
    if high == _sre.MAXREPEAT:
        if not inner.one_way:
            raise _Exponential(_node_text(_sre.MAX_REPEAT, (low, high, body)))
        return _Cost(wide=1)
    counts = high - low + 1
    choice = _Cost(ways=counts) if counts <= _NARROW_INTERVAL else _Cost(wide=1)
    repeated = _Cost(_capped_power(inner.ways, high), min(inner.wide * high, _SATURATED))
    return choice.then(repeated)


def _capped_power(base: int, exponent: int) -> int:
    if base <= 1 or exponent == 0:
        return 1 if exponent == 0 else base
    result = 1
    for _ in range(exponent):
        result *= base
        if result >= _SATURATED:
            return _SATURATED
    return result


def _starts(items: list) -> tuple[bool, _Chars]:
    """Whether `items` in a row can match the empty string, and the characters a match can start with."""
    first = _NO_CHARS
    for op, value in items:
        nullable, chars = _node_starts(op, value)
        first |= chars
        if not nullable:
            return False, first
    return True, first


def _node_starts(op: object, value: object) -> tuple[bool, _Chars]:
    chars = _single_chars(op, value)
    if chars is not None:
        return False, chars
    if op is _sre.AT:
        return (False, _END) if value is _sre.AT_END_STRING else (True, _NO_CHARS)
    if op is _sre.SUBPATTERN:
        return _starts(list(value[3]))  # type: ignore[index]
    if op is _sre.BRANCH:
        starts = [_starts(list(branch)) for branch in value[1]]  # type: ignore[index]
        return any(nullable for nullable, _ in starts), functools.reduce(_Chars.__or__, (c for _, c in starts))
    if op is _sre.MAX_REPEAT:
        low, _, body = value  # type: ignore[misc]
        nullable, chars = _starts(list(body))
        return nullable or low == 0, chars
    raise _Unsupported(str(op))


def _single_chars(op: object, value: object) -> _Chars | None:
    """The characters a one-character node matches; None for any other node."""
    if op is _sre.LITERAL:
        return _Chars.of((value, value))  # type: ignore[arg-type]
    if op is _sre.NOT_LITERAL:
        return _Chars.of((value, value)).complement()  # type: ignore[arg-type]
    if op is _sre.ANY:
        return _EVERY_CHAR
    if op is _sre.IN:
        return _set_chars(value)  # type: ignore[arg-type]
    return None


def _set_chars(items: list) -> _Chars:
    negated = bool(items) and items[0][0] is _sre.NEGATE
    ranges = []
    for op, value in items[negated:]:
        if op is _sre.LITERAL:
            ranges.append((value, value))
        elif op is _sre.RANGE:
            ranges.append(value)
        else:
            return _EVERY_CHAR  # a category, which ERE never produces: assume the widest
    chars = _Chars.of(*ranges)
    return chars.complement() if negated else chars


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def _node_text(op: object, value: object) -> str:
    """A node written back as an ERE, to show the author which part is meant."""
    if op is _sre.LITERAL:
        char = chr(value)  # type: ignore[arg-type]
        return "\\" + char if char in _ERE_SPECIAL else char
    if op is _sre.NOT_LITERAL:
        return f"[^{chr(value)}]"  # type: ignore[arg-type]
    if op is _sre.ANY:
        return "."
    if op is _sre.IN:
        return _set_text(value)  # type: ignore[arg-type]
    if op is _sre.AT:
        return "$" if value is _sre.AT_END_STRING else "^"
    if op is _sre.SUBPATTERN:
        return f"({_items_text(value[3])})"  # type: ignore[index]
    if op is _sre.BRANCH:
        return "(" + "|".join(_items_text(branch) for branch in value[1]) + ")"  # type: ignore[index]
    if op is _sre.MAX_REPEAT:
        low, high, body = value  # type: ignore[misc]
        body_text = _items_text(body)
        bare = len(body) == 1 and (body[0][0] in (_sre.SUBPATTERN, _sre.BRANCH)
                                   or _single_chars(*body[0]) is not None)
        return (body_text if bare else f"({body_text})") + _quantifier_text(low, high)
    return "…"


def _items_text(items: Iterable) -> str:
    return "".join(_node_text(op, value) for op, value in items)


def _set_text(items: list) -> str:
    negated = bool(items) and items[0][0] is _sre.NEGATE
    parts = [chr(value) if op is _sre.LITERAL else f"{chr(value[0])}-{chr(value[1])}" if op is _sre.RANGE else "…"
             for op, value in items[negated:]]
    return "[" + "^" * negated + "".join(parts) + "]"


def _quantifier_text(low: int, high: int) -> str:
    unbounded = high == _sre.MAXREPEAT
    named = {(0, True): "*", (1, True): "+"}.get((low, unbounded)) or ("?" if (low, high) == (0, 1) else None)
    if named:
        return named
    if unbounded:
        return f"{{{low},}}"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"
