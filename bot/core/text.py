"""Text lanebot writes from untrusted input: escapers, hidden markers, and what a reader cannot see.

All text that came from a plan, an issue, a review or an agent is untrusted (anyone who can open
an issue shapes it), so it reaches a comment only through the escapers here:

- `markdown_text` / `markdown_cell`: prose and table cells. HTML and every character Markdown
  reads as syntax become character references, which CommonMark shows literally; `@` gets a
  zero-width space after it so a plan cannot ping people or teams on every revision.
- `code_span` (prose) and `cell_code` (tables, where a backtick span would still split on `|`).
- `code_block`: a fenced block whose fence is longer than any backtick run inside it.
- `mermaid_label`: every character outside letters, digits, space and `.,-_/` written as a
  Mermaid entity code `#NNN;`, which Mermaid turns into an HTML character reference: text
  shown, never parsed as diagram syntax, Markdown or HTML.

Every comment lanebot writes starts with a hidden marker (`<!-- lanebot:gate run=12 rev=2 -->`,
`marker` / `parse_marker`) so lanebot finds its own comments again instead of posting a duplicate
after a lost response. `sanitize_untrusted` removes what a reader on GitHub cannot see (HTML
comments, invisible characters) before text reaches an agent's prompt. Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any

COMMENT_LIMIT = 65_536  # GitHub refuses a longer issue comment with 422


COMMENT_LIMIT = 65_536  # GitHub refuses a longer issue comment with 422


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


def one_line(text: str) -> str:
    """`text` visible and on one line, its runs of whitespace one space."""
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
    return Escaped(_markdown_escape(one_line(str(text)), break_mentions=True))


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
    if (
        content.startswith("`")
        or content.endswith("`")
        or (content.startswith(" ") and content.endswith(" ") and content.strip())
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
    line = one_line(str(text))
    line = line.replace("\ufb02\xb0", "\ufb02\u200b\xb0").replace("\xb6\xdf", "\xb6\u200b\xdf")
    return Escaped("".join(char if char in _MERMAID_SAFE else f"#{ord(char)};" for char in line))


_KIND = re.compile(r"[a-z][a-z-]*")


_FIELD = re.compile(r"[a-z][a-z_]*")


_VALUE = re.compile(r"[A-Za-z0-9._/+]+")


MARKER = re.compile(r"\A\s*<!-- lanebot:(?P<kind>[a-z][a-z-]*)(?P<fields>(?: [a-z][a-z_]*=[A-Za-z0-9._/+]+)*) -->")


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
    match = MARKER.match(body or "")
    if match is None:
        return None
    found: dict[str, Any] = {"kind": match["kind"]}
    for pair in match["fields"].split():
        name, value = pair.split("=", 1)
        found[name] = int(value) if value.isdigit() else value
    return found


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


def plural(count: int, word: str) -> Escaped:
    return Escaped(f"{count} {word}{'' if count == 1 else 's'}")


def largest_fitting_render(render: Callable[[int], str], low: int, high: int, fitting: str) -> str:
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


def shorten_tail(text: str, limit: int) -> str:
    """The last `limit` characters of `text`, starting with `…` when cut."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return text if len(text) <= limit else "…" + text[len(text) - limit + 1 :]


# HTML comments are invisible on GitHub but not to an agent. `<!-->` and `<!--->` are complete
# (empty) comments in CommonMark; an unclosed one hides everything after it, so it goes to the end.
_HTML_COMMENT = re.compile(r"<!--(?:-?>|.*?-->)|<!--.*\Z", re.DOTALL)


# Characters that render as nothing (or as blank filler) although they are not format characters.
_INVISIBLE_RANGES = (
    (0x034F, 0x034F),  # combining grapheme joiner (Mn)
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers (Lo)
    (0x17B4, 0x17B5),  # Khmer inherent vowels (Mn)
    (0x180B, 0x180F),  # Mongolian free variation selectors (Mn) and vowel separator (Cf)
    (0x3164, 0x3164),  # Hangul filler (Lo)
    (0xFE00, 0xFE0F),  # variation selectors (Mn)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler (Lo)
    (0xE0000, 0xE007F),  # the tags block, unassigned code points included
    (0xE0100, 0xE01EF),  # variation selectors supplement (Mn)
)


# Cf: format characters - zero-width space/joiners, LRM/RLM, bidi embeddings and overrides
#     (U+202A-202E), isolates (U+2066-2069), word joiner, invisible operators, soft hyphen, BOM,
#     interlinear annotations, tag characters.
# Cc: control characters (tab and newline are kept; carriage returns become newlines first).
# Cs: lone surrogates, which cannot even be encoded into the prompt.
_REMOVED_CATEGORIES = frozenset({"Cf", "Cc", "Cs"})


NEWLINES = re.compile(r"\r\n?|[\u2028\u2029\x85]")


def sanitize_untrusted(text: str) -> str:
    """`text` without what a reader of it on GitHub cannot see: HTML comments and invisible characters.

    Removed: HTML comments (`<!-- ... -->`, also inside code, and an unclosed one to the end of the
    text), then every character `strip_invisible` removes. Kept: all visible text, spaces, tabs and
    newlines (CR, CRLF, NEL and the Unicode line/paragraph separators become newlines).
    """
    return strip_invisible(_HTML_COMMENT.sub("", text))


def strip_invisible(text: str) -> str:
    """`text` without invisible characters, its line breaks made `\\n`.

    Removed: Unicode categories Cf (format), Cc (control, except tab and newline) and Cs
    (surrogates), and the invisible characters of other categories listed in `_INVISIBLE_RANGES`
    (variation selectors, the whole tags block, Hangul fillers, the combining grapheme joiner).
    """
    return "".join(char for char in NEWLINES.sub("\n", text) if _is_kept(char))


@functools.lru_cache(maxsize=8192)
def _is_kept(char: str) -> bool:
    if char in "\n\t":
        return True
    code = ord(char)
    if any(low <= code <= high for low, high in _INVISIBLE_RANGES):
        return False
    return unicodedata.category(char) not in _REMOVED_CATEGORIES
