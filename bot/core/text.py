"""Text lanebot writes from untrusted input: escapers, hidden markers, and what a reader cannot see.

All text that came from a plan, an issue, a review or an agent is untrusted (anyone who can open
an issue shapes it), so it reaches GitHub (comments, the pull request, commits, check runs) only
through `defuse` or the escapers here:

- `defuse(text, context=...)`: the one function that makes untrusted text inert and keeps its
  words: no mention, no closing keyword, no issue reference, no forged marker, no control
  character, and (`markdown`) no HTML or fence that leaves the block it is put in. For text shown
  as Markdown (the integrator's PR body) or as plain text (commit messages, titles); an escaper's
  output gets its word rules only.
- `markdown_text` / `markdown_cell`: prose and table cells. HTML and every character Markdown
  reads as syntax become character references, which CommonMark shows literally; `@` gets a
  zero-width space after it so a plan cannot ping people or teams on every revision, and the
  words are defused (closing keywords and issue references broken) as `defuse` does.
- `code_span` (prose) and `cell_code` (tables, where a backtick span would still split on `|`).
- `code_block`: a fenced block whose fence is longer than any backtick run inside it.
- `mermaid_label`: every character outside letters, digits, space and `.,-_/` written as a
  Mermaid entity code `#NNN;`, which Mermaid turns into an HTML character reference: text
  shown, never parsed as diagram syntax, Markdown or HTML; a closing keyword's first letter coded.

Every comment lanebot writes starts with a hidden marker (`<!-- lanebot:gate run=12 rev=2 -->`,
`marker` / `parse_marker`) so lanebot finds its own comments again instead of posting a duplicate
after a lost response. `sanitize_untrusted` removes what a reader on GitHub cannot see (HTML
comments, invisible characters) before text reaches an agent's prompt. Pure: no I/O.
"""

from __future__ import annotations

import functools
import html
import math
import re
import unicodedata
from collections.abc import Callable
from typing import Any, Literal, overload

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
    return Escaped(_defuse_words(_markdown_escape(one_line(str(text)), break_mentions=True)))


def markdown_cell(text: object) -> Escaped:
    """Untrusted text for a Markdown table cell: shown literally, line breaks as `<br>`."""
    lines = [" ".join(line.split()) for line in visible(str(text)).split("\n")]
    escaped = (_markdown_escape(line, break_mentions=True) for line in lines)
    return Escaped(_defuse_words("<br>".join(line for line in escaped if line)))


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
    Mermaid strips a trailing `;` from any line holding `style...:...#...;`. A closing keyword before
    a reference has its first letter coded too (see `_code_first_letter`).
    """
    # Mermaid writes entity codes as placeholders (`#60;` is `ﬂ°°60¶ß`) and decodes them once
    # more in its finished SVG, so a title holding `ﬂ°` or `¶ß` would show other characters
    # (seen in a browser: `ﬂ°°60¶ß` showed as `<`). A zero-width space splits both markers.
    line = one_line(str(text))
    line = line.replace("\ufb02\xb0", "\ufb02\u200b\xb0").replace("\xb6\xdf", "\xb6\u200b\xdf")
    coded = "".join(char if char in _MERMAID_SAFE else f"#{ord(char)};" for char in line)
    return Escaped(_CLOSING_KEYWORD.sub(_code_first_letter, coded))


def _code_first_letter(match: re.Match[str]) -> str:
    """A closing keyword in a Mermaid label (`Closes #35;1` is `Closes #1` coded) with its first letter
    coded, so the diagram's source closes nothing: `#67;loses #35;1`. (A zero-width space would not
    survive the code block the diagram goes in.)"""
    return f"#{ord(match[1][0])};{match[1][1:]}"


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


# --------------------------------------------------------------------------- defusing

Context = Literal["markdown", "plain"]


ZERO_WIDTH_SPACE = "\u200b"


# `@` before anything that could start a name (a login, `org/team`, a character reference that renders
# as one), unless a zero-width space (or the escapers' `&#8203;`) already follows it.
_MENTION = re.compile(r"@(?![\s\u200b]|&#8203;|\Z)")


# GitHub's closing keywords (any case) before an issue reference, a colon or not: `#1`, `GH-1`,
# `owner/repo#1`, an issue's URL. Zero spaces too: GitHub's parser is not documented that closely.
_CLOSING_KEYWORD = re.compile(
    r"\b(close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b(?=\s*:?\s*(?:#|gh-|[\w.-]+/[\w.-]+#|https?://))", re.IGNORECASE
)


# An issue reference GitHub links and backlinks (`#1`, `owner/repo#1`, `GH-1`). In Markdown not the `#`
# of a character reference (`&#124;` renders as `|`); in plain text `&#35;1` is shown as it is, so it is.
_REFERENCE = re.compile(r"#(?=\d)|\bGH-(?=\d)", re.IGNORECASE)
_MARKDOWN_REFERENCE = re.compile(r"(?<!&)#(?=\d)|\bGH-(?=\d)", re.IGNORECASE)


# What could start HTML in Markdown (a tag, a closing tag, a comment, a declaration); `<` followed by a
# zero-width space is text. Plain text needs only the comment opener broken: lanebot's markers.
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_COMMENT_START = re.compile(r"<(?=!--)")


# A character reference as CommonMark reads one: `&#64;`, `&#x40;`, `&commat;`.
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")


# A fence that certainly opens at the top level (column 0; a backtick fence's info has no backtick),
# and one that might open inside a container or indentation (after `>`, a list marker, or spaces).
_TOP_FENCE = re.compile(r"(`{3,})[^`]*|(~{3,}).*")
_NESTED_FENCE = re.compile(r"(?:[ \t]|>|[-+*](?=[ \t])|[0-9]{1,9}[.)](?=[ \t]))+(?=`{3}|~{3})")


@overload
def defuse(text: Escaped, *, context: Context = "markdown") -> Escaped: ...
@overload
def defuse(text: str, *, context: Context = "markdown") -> str: ...
def defuse(text: str, *, context: Context = "markdown") -> str:
    """Untrusted `text` made inert on GitHub, its visible words kept: one function for every place.

    Both contexts: invisible and control characters removed (`strip_invisible`); a zero-width space
    after `@` before a name (`@\u200balice`, `@\u200borg/team`), after a closing keyword before a
    reference (`Closes\u200b #1`, `fixes\u200b: o/r#2`, `resolved\u200b https://...`), and inside
    every issue reference (`#\u200b1`, `o/r#\u200b1`, `GH-\u200b1`), so nothing is mentioned,
    closed or backlinked; `<!--` broken, so no text forges lanebot's markers.

    `markdown` (comments, the PR body, check-run summaries: text shown as Markdown) also keeps the
    text from escaping its block: every `<` that could open HTML (a tag, `<details>`, a comment) is
    followed by a zero-width space; a character reference that renders as `@` or `#` is broken
    likewise, one for a letter, digit or `-` becomes that character (the word rules then see it),
    and one that renders as an invisible character is removed; a fence left open is closed,
    and one that might open inside a list or quote (where GitHub would close it at the container's
    end, not where this function can see) is broken. The rest of the Markdown is kept.

    `plain` (commit messages, titles: text no one renders as Markdown) needs only the words broken.

    `Escaped` text (an escaper's output: its markup is lanebot's) gets the word rules only and stays
    `Escaped`. Idempotent.
    """
    if isinstance(text, Escaped):
        return Escaped(_defuse_words(text))
    text = strip_invisible(text)
    if context == "plain":
        return _defuse_words(_COMMENT_START.sub("<" + ZERO_WIDTH_SPACE, text), references=_REFERENCE)
    text = _ENTITY.sub(_defuse_entity, text)
    text = _contain_fences(_TAG_START.sub("<" + ZERO_WIDTH_SPACE, text))
    return Escaped(_defuse_words(text))


def _defuse_words(text: str, references: re.Pattern[str] = _MARKDOWN_REFERENCE) -> str:
    text = _MENTION.sub("@" + ZERO_WIDTH_SPACE, text)
    text = _CLOSING_KEYWORD.sub(lambda match: match[1] + ZERO_WIDTH_SPACE, text)
    return references.sub(lambda match: match[0] + ZERO_WIDTH_SPACE, text)


def _defuse_entity(match: re.Match[str]) -> str:
    """A reference for `@` or `#` broken, one for a letter, digit or `-` written as that character
    (so `#&#49;` and `GH&#45;1` meet the word rules), one for an invisible character removed."""
    shown = html.unescape(match[0])
    if shown in ("@", "#"):
        return match[0] + ZERO_WIDTH_SPACE
    if len(shown) == 1 and shown.isascii() and (shown.isalnum() or shown == "-"):
        return shown
    return "" if len(shown) == 1 and not _is_kept(shown) else match[0]


def _contain_fences(text: str) -> str:
    """`text` with every fence it opens closed within it (see `defuse`)."""
    lines, fence = text.split("\n"), ""
    for number, line in enumerate(lines):
        if fence:
            if re.fullmatch(f" {{0,3}}{re.escape(fence)}{re.escape(fence[0])}*[ \t]*", line):
                fence = ""
        elif opened := _TOP_FENCE.fullmatch(line):
            fence = opened[1] or opened[2]
        elif nested := _NESTED_FENCE.match(line):
            cut = nested.end() + 1
            lines[number] = line[:cut] + ZERO_WIDTH_SPACE + line[cut:]
    return "\n".join(lines + [fence] if fence else lines)
