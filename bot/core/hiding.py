"""What hides text from a reader of the gate: invisible characters and long runs of blank space.

A check runs exactly as written, so a reviewer must see exactly what runs. GitHub shows a fenced
code block's text as it is, but not everything in it can be seen: a bidi override (U+202E)
reorders what follows, a zero-width character shows nothing, a carriage return or a no-break space
looks like something it is not to `sh`, and 500 spaces push the rest of a line out of view (a code
block scrolls sideways). `hiding_spots` finds each of these; the plan validation refuses a check or
`files` that holds one (bot.core.graph), and `made_visible` writes each one as a visible token
(`⟨U+202E⟩`, `⟨400 spaces⟩`) in text that is shown rather than refused (a brief, the repository's
verify). Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from bot.core.text import strip_invisible

__all__ = ["LONGEST_BLANK_RUN", "Spot", "hiding_spots", "made_visible"]

LONGEST_BLANK_RUN = 32  # spaces and tabs in a row; more would push text out of a reviewer's view

_BLANK_RUN = re.compile(rf"[ \t]{{{LONGEST_BLANK_RUN + 1},}}")
_SUSPECT = re.compile(r"[^\x20-\x7e\n\t]")  # only these can hide anything


@dataclass(frozen=True)
class Spot:
    """One place in a text that hides something: where it starts (0-based), how long, what it is."""

    start: int
    length: int
    what: str  # e.g. "U+202E (RIGHT-TO-LEFT OVERRIDE)" or "a run of 400 spaces"
    token: str  # how `made_visible` writes it, e.g. "⟨U+202E⟩" or "⟨400 spaces⟩"


def hiding_spots(text: str) -> Iterator[Spot]:
    """Every spot of `text` that would hide text from a reader, in order.

    A character hides text when it is invisible (Unicode Cc but tab and newline, Cf, Cs, Co, the
    invisible fillers and selectors `strip_invisible` removes), a line or paragraph separator, or a
    space other than U+0020 (`sh` does not split words at a no-break space); a run of more than
    `LONGEST_BLANK_RUN` spaces and tabs hides what follows it on the line.
    """
    spots = [_character_spot(index, char) for index, char in _suspects(text)]
    spots += [_run_spot(match) for match in _BLANK_RUN.finditer(text)]
    yield from sorted((spot for spot in spots if spot is not None), key=lambda spot: spot.start)


def made_visible(text: str) -> str:
    """`text` with every hiding spot written as its visible token; unchanged when it has none."""
    pieces, end = [], 0
    for spot in hiding_spots(text):
        pieces += [text[end : spot.start], spot.token]
        end = spot.start + spot.length
    return "".join(pieces) + text[end:]


def _suspects(text: str) -> Iterator[tuple[int, str]]:
    for match in _SUSPECT.finditer(text):
        yield match.start(), match[0]


def _character_spot(index: int, char: str) -> Spot | None:
    category = unicodedata.category(char)
    hides = strip_invisible(char) != char or category in ("Co", "Zl", "Zp") or (category == "Zs" and char != " ")
    if not hides:
        return None
    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "")
    return Spot(index, 1, f"{code} ({name})" if name else code, f"⟨{code}⟩")


def _run_spot(match: re.Match[str]) -> Spot:
    run = match[0]
    kinds = "spaces" if set(run) == {" "} else "tabs" if set(run) == {"\t"} else "spaces and tabs"
    return Spot(match.start(), len(run), f"a run of {len(run)} {kinds}", f"⟨{len(run)} {kinds}⟩")
