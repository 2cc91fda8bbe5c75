"""Extended regular expressions as `grep -E` reads them, matched with RE2 against the bytes of paths.

A unit's `files` is a POSIX extended regular expression (what `grep -E` reads) matched against
repository paths. `compile_ere` translates it into an RE2 pattern with the same meaning and
refuses what ERE does not have, so a plan means the same thing here as in a shell. (RE2's own
POSIX mode is not that translation: it reads `[\\d]`, `[[.-.]]` and `a{,3}` otherwise.)

- Refused: `(?...)` groups, lazy or possessive quantifiers (`*?`, `+?`, `*+`) and any other
  repetition operator directly after another, Perl escapes (`\\d \\w \\s \\b`, back-references,
  any backslash before a letter or digit), a repetition with nothing to repeat (`*a`, `(*a)`,
  `^*`), a `{` that does not start an interval `{m}`, `{m,}`, `{m,n}` (GNU's `{,n}` included),
  an unmatched `)` (POSIX reads it as a literal; here it must be written `\\)` since it is
  nearly always a typo), ranges that run backwards or that touch a character class or another
  range (`[a-c-e]`, as GNU grep refuses), unknown `[:class:]` names, multi-character collating
  elements, `[:alpha:]` without the outer brackets (POSIX reads it as a set of letters; GNU grep
  refuses it as the mistake it nearly always is), a character of more than one byte inside
  brackets (see below), and the empty expression (it would match every path; write `.*`).
- Translated: bracket expressions (a backslash inside brackets is a literal, as in POSIX),
  the POSIX classes in the C locale (`[[:alpha:]]` is `[a-zA-Z]`), single-character
  `[.x.]` and `[=x=]`, `$` (end of the path, never before a trailing newline) and `.` (any
  byte, a newline included). A backslash before punctuation is that character, literally.
- Accepted as GNU grep does: empty groups `()` and empty alternatives `a|`.

Paths are matched as bytes, as git stores them, with RE2's Latin-1 encoding: a character is a
byte, as for `LC_ALL=C grep -E`. `.`, a bracket expression and a POSIX class match one byte, and
the classes hold ASCII only. A `str` path becomes bytes the way lanebot's git module decoded
git's output, reversed: UTF-8 with `surrogateescape` (`path_bytes`), so a byte that is not UTF-8
is matched as itself. A non-ASCII character written in `files` stands for its UTF-8 bytes (a
surrogate U+DC80-U+DCFF for the one byte it escapes), and a repetition after it repeats the
whole character. Inside brackets such a character would be a set of separate bytes, so it is
refused there: write `(é|è)` for a choice of them.

RE2 does not backtrack: a match costs time linear in the path's length (and in the size of the
compiled expression) whatever its shape, so `(a+)+$` and `.*.*.*x` are as safe as `^src/`.
The limits are lanebot's and RE2's, each refused with a `FilesLimitError` (a ValueError) that
says which: at most MAX_FILES_CHARS characters; interval counts up to MAX_REPEAT (RE2 refuses
`{1001}`), and nested intervals' counts multiplied up to MAX_REPEAT as well (`(a{10}){101}` is
over); a compiled program within MAX_MEM bytes (`[^/]{1000}` thirty times in a row is over).

`match_paths` matches many expressions against many paths in one pass, with an `re2.Set`.
Pure code: no I/O, no processes, in this interpreter.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import re2

__all__ = [
    "MAX_FILES_CHARS",
    "MAX_MEM",
    "MAX_REPEAT",
    "Ere",
    "FilesLimitError",
    "compile_ere",
    "compiled_ere",
    "match_paths",
    "path_bytes",
    "shown",
]

MAX_FILES_CHARS = 500
MAX_REPEAT = 1000  # RE2's own limit on an interval's counts, and on nested ones multiplied
MAX_MEM = 1 << 20  # RE2's memory budget for one expression: its program and the DFAs that run it
# A Set's DFA needs room for 20 states of its whole program (else RE2 refuses to build it); more
# only costs more when its states never repeat: an expression written against the DFA,
# `[a-f].{20}$` on paths of random hex, took 4.1 s over 100,000 paths with 8 MiB, 2.2 s with this.
_SET_MEM_BASE = 256 << 10
_SET_MEM_PER_INSTRUCTION = 256
_SHOWN_CHARS = 60


def shown(text: str) -> str:
    """`text` quoted, and shortened so that a huge value cannot flood the problem list."""
    return repr(text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "...")


class FilesLimitError(ValueError):
    """A valid ERE that lanebot does not match: too long, counts too large, or too big a program.

    The text follows "files '<expression>' ".
    """


def path_bytes(path: str | bytes) -> bytes:
    """The bytes `path` stands for: bytes as given; a str encoded as lanebot's git module decodes git.

    That is UTF-8 with `surrogateescape`, so the bytes git gave come back, a byte that is not
    UTF-8 included. A str that no bytes decode to (a lone surrogate outside U+DC80-U+DCFF) is
    encoded with `surrogatepass` rather than refused: it equals no git path either way.
    """
    if isinstance(path, bytes):
        return path
    try:
        return path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogatepass")


class Ere:
    """A `files` expression compiled for RE2."""

    __slots__ = ("_regexp", "expression", "source")

    def __init__(self, expression: str, source: bytes, regexp: Any) -> None:
        self.expression = expression
        self.source = source  # the RE2 pattern, read as Latin-1
        self._regexp = regexp

    @property
    def program_size(self) -> int:
        """The instructions of RE2's compiled program."""
        return int(self._regexp.programsize)

    def search(self, path: str | bytes) -> object | None:
        """The first match anywhere in the bytes of `path` (`path_bytes`), or None (`grep -E`'s question).

        The match is RE2's, on bytes: its offsets count bytes.
        """
        match: object | None = self._regexp.search(path_bytes(path))
        return match

    def __repr__(self) -> str:
        return f"Ere({self.expression!r})"


def compile_ere(expression: str) -> Ere:
    """The RE2 matcher for exactly what the POSIX extended regex `expression` matches.

    Raises ValueError saying why when `expression` is not a valid ERE (see the module docstring
    for what is refused), FilesLimitError (a ValueError) when it is one beyond the limits.
    """
    if expression == "":
        raise ValueError("the expression is empty, which would match every path; write '.*' if that is meant")
    if len(expression) > MAX_FILES_CHARS:
        raise FilesLimitError(
            f"is {len(expression)} characters long, more than the {MAX_FILES_CHARS} allowed;"
            " name the directories the unit owns (^src/api/) rather than every file"
        )
    source = _EreTranslator(expression).translate()
    try:
        regexp = re2.compile(source, _options(MAX_MEM))
    except re2.error as error:
        raise _refusal(error) from None
    return Ere(expression, source, regexp)


compiled_ere = functools.lru_cache(maxsize=128)(compile_ere)  # plans repeat their expressions


def match_paths(expressions: Sequence[str], paths: Iterable[str | bytes]) -> list[list[int]]:
    """For each ERE in `expressions`, the ascending positions of the `paths` it matches somewhere.

    One pass over the paths (as `path_bytes`) with an `re2.Set` of every expression, which tells
    for each path which expressions match it: time linear in the paths' total length, in this
    process. Raises ValueError (FilesLimitError included) when `compile_ere` refuses one.
    """
    compiled = [compiled_ere(expression) for expression in expressions]
    encoded = _all_bytes(list(paths))
    found: list[list[int]] = [[] for _ in compiled]
    if not compiled or not encoded:
        return found
    matcher = _set_matcher(compiled)
    if matcher is None:
        return [[position for position, path in enumerate(encoded) if ere.search(path)] for ere in compiled]
    for position, path in enumerate(encoded):
        for index in matcher(path) or ():
            found[index].append(position)
    return found


def _all_bytes(paths: list[str | bytes]) -> list[bytes]:
    """`path_bytes` of each path; a fifth of the overlap check's time went to calling it per path."""
    try:  # read all as str; the except below catches the bytes
        return [path.encode("utf-8", "surrogateescape") for path in cast("list[str]", paths)]
    except (AttributeError, UnicodeEncodeError):  # bytes among them, or a str no bytes decode to
        return [path_bytes(path) for path in paths]


def _set_matcher(compiled: list[Ere]) -> Callable[[bytes], list[int] | None] | None:
    """The `Match` of an `re2.Set` of the expressions, indexed as `compiled`; None if RE2 cannot build it.

    A Set runs on RE2's DFA alone, with no NFA to fall back on. Compile refuses a Set whose
    DFA has too little memory to run, and a Set's DFA never gives up as too slow (it clears
    its cache and goes on), so a Set that compiled answers every path. The budget makes a
    refusal all but impossible; the fallback, one expression at a time, is as exact and slower.
    """
    matcher = re2.Set.SearchSet(_options(_set_budget(compiled)))
    for ere in compiled:
        matcher.Add(ere.source)  # Add numbers the patterns 0, 1, ... in the order given
    try:
        matcher.Compile()
    except re2.error:
        return None
    match: Callable[[bytes], list[int] | None] = matcher.Match
    return match


def _set_budget(compiled: list[Ere]) -> int:
    return _SET_MEM_BASE + _SET_MEM_PER_INSTRUCTION * sum(ere.program_size for ere in compiled)


def _options(max_mem: int) -> re2.Options:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1  # one byte, one character: paths need not be UTF-8
    options.dot_nl = True
    options.never_capture = True
    options.log_errors = False  # a refusal is a FilesLimitError or ValueError, not a line on stderr
    options.max_mem = max_mem
    return options


def _refusal(refused: re2.error) -> ValueError:
    """What RE2's refusal of a translated pattern means for the expression."""
    error = refused.args[0].decode("latin-1") if isinstance(refused.args[0], bytes) else str(refused)
    if error.startswith("invalid repetition size"):
        at = error.partition(": ")[2]
        return FilesLimitError(
            f"repeats a part more than {MAX_REPEAT} times in all (at the interval {at}): the counts of"
            f" nested intervals multiply, and RE2 allows {MAX_REPEAT}; use smaller counts, or + and *"
        )
    if error.startswith("pattern too large"):
        return FilesLimitError(
            f"compiles to a larger program than the {MAX_MEM / (1 << 20):g} MiB RE2 is given for one expression;"
            " use fewer or smaller intervals ([^/]+ rather than [^/]{1,900})"
        )
    return ValueError(f"RE2 cannot compile its translation: {error}")  # not expected: the translation is RE2's syntax


# --------------------------------------------------------------------------- reading ERE

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
    """A single left-to-right pass over an ERE that writes the equivalent RE2 pattern (ASCII text)."""

    def __init__(self, expression: str) -> None:
        self.text = expression
        self.pos = 0
        self.out: list[str] = []
        self.open_groups: list[int] = []
        self.last = _START

    def translate(self) -> bytes:
        while self.pos < len(self.text):
            self._step(self.text[self.pos])
        if self.open_groups:
            raise ValueError(f"the '(' at character {self.open_groups[-1] + 1} is never closed")
        return "".join(self.out).encode("ascii")

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
        translations = {"|": ("|", _START), "^": ("^", _ANCHOR), "$": (r"\z", _ANCHOR), ".": (".", _ATOM)}
        source, kind = translations.get(char) or (self._literal(char), _ATOM)
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
        self._emit(self._literal(char, at=self.pos + 1), _ATOM, width=2)

    def _literal(self, char: str, at: int | None = None) -> str:
        """`char` as one RE2 atom matching its bytes, so that a repetition repeats all of them."""
        encoded = self._bytes_of(char, self.pos if at is None else at)
        source = "".join(_byte_source(byte) for byte in encoded)
        return source if len(encoded) == 1 else f"(?:{source})"

    def _bytes_of(self, char: str, at: int) -> bytes:
        try:
            return char.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raise ValueError(
                f"character {at + 1} is the lone surrogate U+{ord(char):04X}, which stands for no bytes of a path"
            ) from None

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
            raise ValueError(f"the interval {match.group(0)} at character {self.pos + 1} has its bounds reversed")
        self._repeat(match.group(0))

    def _count(self, digits: str) -> int:
        if len(digits) > len(str(MAX_REPEAT)) or int(digits) > MAX_REPEAT:
            raise FilesLimitError(
                f"has the count {digits[:12]} in the interval at character {self.pos + 1}, more than the"
                f" {MAX_REPEAT} RE2 allows; use a smaller count, or + or * for no bound"
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
                f"'[{content}]' at character {opened + 1} is a set of characters; write [[{content}]] for a class"
            )
        self.pos += 1
        self.out.append("[" + "^" * negated + "".join(items) + "]")
        self.last = _ATOM

    def _bracket_item(self) -> str:
        start = self.pos
        low = self._bracket_element()
        if not self._at_range_dash():
            return _class_source(low) if isinstance(low, _NamedClass) else _byte_source(low)
        self.pos += 1
        high = self._bracket_element()
        if isinstance(low, _NamedClass) or isinstance(high, _NamedClass):
            raise ValueError(f"the range at character {start + 1} starts or ends at a character class")
        if low > high:
            raise ValueError(f"the range {chr(low)}-{chr(high)} at character {start + 1} runs backwards")
        if self._at_range_dash():
            raise ValueError(
                f"the '-' at character {self.pos + 1} follows the range {chr(low)}-{chr(high)};"
                " put a literal '-' first or last"
            )
        return f"{_byte_source(low)}-{_byte_source(high)}"

    def _bracket_element(self) -> int | _NamedClass:
        for opener in ("[:", "[.", "[="):
            if self.text.startswith(opener, self.pos):
                return self._bracket_term(opener)
        self.pos += 1
        return self._bracket_byte(self.text[self.pos - 1], self.pos - 1)

    def _bracket_term(self, opener: str) -> int | _NamedClass:
        closer = opener[1] + "]"
        end = self.text.find(closer, self.pos + 2)
        if end < 0:
            raise ValueError(f"the '{opener}' at character {self.pos + 1} is never closed with '{closer}'")
        content = self.text[self.pos + 2 : end]
        where = f"'{opener}{content}{closer}' at character {self.pos + 1}"
        at = self.pos + 2
        self.pos = end + 2
        if opener == "[:":
            if content not in _POSIX_CLASSES:
                classes = ", ".join(_POSIX_CLASSES)
                raise ValueError(f"{where} is not a character class; the classes are {classes}")
            return _NamedClass(content)
        if len(content) != 1:
            raise ValueError(f"{where}: only single-character collating elements are supported")
        return self._bracket_byte(content, at)

    def _bracket_byte(self, char: str, at: int) -> int:
        encoded = self._bytes_of(char, at)
        if len(encoded) != 1:
            raise ValueError(
                f"{char!r} at character {at + 1} is {len(encoded)} bytes in UTF-8, and a bracket expression"
                f" matches one byte; write a choice of characters as a group, e.g. ({char}|x)"
            )
        return encoded[0]

    def _at_range_dash(self) -> bool:
        return self._peek() == "-" and self._peek(1) not in ("]", None)

    def _peek(self, ahead: int = 0) -> str | None:
        index = self.pos + ahead
        return self.text[index] if index < len(self.text) else None


def _byte_source(byte: int) -> str:
    """One byte as RE2 source, the same inside brackets and out: `\\xHH` unless a letter or digit."""
    char = chr(byte)
    return char if char.isascii() and char.isalnum() else f"\\x{byte:02x}"


def _class_source(named: _NamedClass) -> str:
    return "".join(
        _byte_source(ord(first)) if first == last else f"{_byte_source(ord(first))}-{_byte_source(ord(last))}"
        for first, last in _POSIX_CLASSES[named.name]
    )
