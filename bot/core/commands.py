"""Slash commands: parse a comment body into lanebot commands, and write the `/help` text.

Pure code, no I/O. Who may run a command, and what it does, is the handler's business; this
module only says what a comment asked for, in order, and what in it looked like a command but
was not one (a typo such as `/aprove`, or `/replan` without its feedback), so the handler can
answer instead of silently ignoring it.

What counts as a command line, following how GitHub (CommonMark) renders the comment — a
command must be something the reader sees as plain text in the author's own words:

- the line starts with `/name` after at most 3 spaces (4 or more, or a tab, is indented code);
- `name` is followed by the end of the line or whitespace; the rest of the line, stripped, is
  the arguments (`/approve.` or `/usr/bin/x` are not commands);
- names are case-insensitive (`/Approve` is `/approve`); an unknown name is reported only when
  it is lower-case letters and dashes (`/aprove`, `/re-plan`), so `/Etc` or `/TODO` stay prose;
- a command that takes no argument keeps any text after it as `args` (`/approve LGTM`) rather
  than being refused; only a missing required argument (`/replan`) is a usage problem;
- not inside a fenced code block (``` or ~~~, 3 or more, closed by a fence of the same
  character at least as long and with no info string; an unclosed fence runs to the end),
  including a fence that opens on a list item's line (`- ```` `);
- not on a block-quote line (`>` after at most 3 spaces, nested `> >` too). A line right after
  a quote that does not start with `>` is the author's own line and counts, although CommonMark
  would render it inside the quote as a lazy continuation;
- not inside an HTML comment (`<!-- ... -->`) or a `<pre>`, `<script>`, `<style>` or
  `<textarea>` block, which GitHub does not show as text.

Lines are split on `\\n`, `\\r\\n` and `\\r`; `Command.line` is 1-based.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass

from bot.core.lifecycle import ALL_COMMANDS, RunState, available_actions, describe_state, states_allowing


@dataclass(frozen=True)
class CommandSpec:
    name: str
    argument: str | None  # the argument's name in the usage line, or None when it takes none
    required: bool  # whether the command is refused without its argument
    description: str

    @property
    def usage(self) -> str:
        if self.argument is None:
            return f"/{self.name}"
        placeholder = f"<{self.argument}>" if self.required else f"[{self.argument}]"
        return f"/{self.name} {placeholder}"


_SPECS = (
    CommandSpec(
        "plan", "notes", False, "plan this issue: the planner splits it into units and posts them for approval"
    ),
    CommandSpec("approve", None, False, "approve the latest plan: run its units as lanes and open one pull request"),
    CommandSpec("reject", "why", False, "refuse the plan; the run ends"),
    CommandSpec("replan", "feedback", True, "ask for another plan that takes your feedback into account"),
    CommandSpec("retry", "unit", False, "retry the unit named (or every failed one) with its failure in the prompt"),
    CommandSpec("cancel", None, False, "stop the run and its agents; branches and transcripts are kept"),
    CommandSpec(
        "fix", "notes", False, "on lanebot's pull request: address the notes and the unresolved review comments"
    ),
    CommandSpec("update", None, False, "on lanebot's pull request: merge the default branch into it, verify, and push"),
    CommandSpec(
        "hold", "reason", False, "start no new agent session; running ones finish and finished lanes still merge"
    ),
    CommandSpec("unhold", None, False, "lift the hold: the run starts its sessions again"),
    CommandSpec("status", None, False, "show the run's state and its lanes"),
    CommandSpec("help", None, False, "show the commands valid now"),
)

# Every command lanebot knows, by name, in the order help lists them.
COMMANDS: dict[str, CommandSpec] = {spec.name: spec for spec in _SPECS}


@dataclass(frozen=True)
class Command:
    """A known command: its lower-case name, its arguments (stripped) and its 1-based line."""

    name: str
    args: str
    line: int


@dataclass(frozen=True)
class UnknownCommand:
    """A `/word` that looks like a lanebot command but is none; `suggestion` is the closest one."""

    name: str
    line: int
    suggestion: str | None

    @property
    def message(self) -> str:
        hint = f"did you mean `/{self.suggestion}`?" if self.suggestion else "see `/help`"
        return f"`/{self.name}` (line {self.line}) is not a lanebot command; {hint}"


@dataclass(frozen=True)
class InvalidUsage:
    """A known command written without an argument it requires."""

    name: str
    line: int

    @property
    def message(self) -> str:
        spec = COMMANDS[self.name]
        return f"`/{self.name}` (line {self.line}) needs its {spec.argument} on the same line: `{spec.usage}`"


@dataclass(frozen=True)
class ParsedComment:
    commands: tuple[Command, ...]  # known, well-formed commands, in order
    unknown: tuple[UnknownCommand, ...]  # lookalikes such as `/aprove`, in order
    invalid: tuple[InvalidUsage, ...]  # known commands missing a required argument, in order

    @property
    def problems(self) -> tuple[str, ...]:
        """One message per unknown or invalid command, in the order they appear."""
        found: list[UnknownCommand | InvalidUsage] = [*self.unknown, *self.invalid]
        found.sort(key=lambda item: item.line)
        return tuple(item.message for item in found)


def parse_commands(body: str) -> ParsedComment:
    """Every command line of a comment body (see the module docstring for the rules)."""
    commands: list[Command] = []
    unknown: list[UnknownCommand] = []
    invalid: list[InvalidUsage] = []
    for number, text in _plain_lines(body):
        match = _COMMAND_LINE.fullmatch(text)
        if match is None:
            continue
        word, args = match["name"], (match["args"] or "").strip()
        name = word.lower()
        spec = COMMANDS.get(name)
        if spec is not None and spec.required and not args:
            invalid.append(InvalidUsage(name, number))
        elif spec is not None:
            commands.append(Command(name, args, number))
        elif _LOOKS_LIKE_COMMAND.fullmatch(word):
            unknown.append(UnknownCommand(word, number, _closest_command(word)))
    return ParsedComment(tuple(commands), tuple(unknown), tuple(invalid))


def help_text(state: RunState | None, *, held: bool = False) -> str:
    """Markdown listing the commands valid in `state` (`held`: the run carries a hold), and when
    the others become valid."""
    valid_now = available_actions(state, held=held)
    lines = [f"**lanebot commands** valid now, for {describe_state(state)}:", ""]
    lines += [f"- `{COMMANDS[name].usage}` — {COMMANDS[name].description}" for name in valid_now]
    names_by_when: dict[str, list[str]] = {}
    for name in COMMANDS:
        if name not in valid_now:
            names_by_when.setdefault(_when_valid(name), []).append(f"`/{name}`")
    if names_by_when:
        others = "; ".join(f"{', '.join(names)} {when}" for when, names in names_by_when.items())
        lines += ["", f"Other commands: {others}."]
    return "\n".join(lines) + "\n"


# `/name` after at most 3 spaces, then whitespace or the end of the line.
_COMMAND_LINE = re.compile(r" {0,3}/(?P<name>[A-Za-z][A-Za-z-]*)(?:\s(?P<args>.*))?")
_LOOKS_LIKE_COMMAND = re.compile(r"[a-z][a-z-]*")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FENCE_OPEN = re.compile(r"(?P<fence>`{3,}|~{3,})(?P<info>.*)")
_LIST_MARKER = re.compile(r" {0,3}(?:[-+*]|\d{1,9}[.)])(?: {1,4})(?=`{3}|~{3})")
_HTML_BLOCKS = (
    (re.compile(r" {0,3}<!--"), re.compile(r"-->")),
    (
        re.compile(r" {0,3}<(?:pre|script|style|textarea)(?:[\s>]|$)", re.IGNORECASE),
        re.compile(r"</(?:pre|script|style|textarea)>", re.IGNORECASE),
    ),
)


def _plain_lines(body: str) -> Iterator[tuple[int, str]]:
    """(1-based number, text) of each line outside code, quotes and hidden HTML blocks."""
    lines = _LINE_BREAK.split(body)
    number = 0
    while number < len(lines):
        text = lines[number]
        skip_to = _end_of_hidden_block(lines, number)
        if skip_to is not None:
            number = skip_to
            continue
        if not _is_quote(text):
            yield number + 1, text
        number += 1


def _end_of_hidden_block(lines: list[str], start: int) -> int | None:
    """If a fence or hidden HTML block opens at `start`, the index of the first line after it."""
    text = lines[start]
    fence = _fence_opening(text)
    if fence is not None:
        char, length, content_indent = fence
        return _after_fence(lines, start + 1, char, length, content_indent)
    for opening, closing in _HTML_BLOCKS:
        if opening.match(text):
            return _after_html_block(lines, start, closing)
    return None


def _fence_opening(text: str) -> tuple[str, int, int] | None:
    """(fence character, fence length, indent of the block's container) if `text` opens a fence."""
    content_indent = 0
    marker = _LIST_MARKER.match(text)
    if marker is not None:
        content_indent = marker.end()
        rest = text[content_indent:]
    else:
        indent = _indent_width(text)
        if indent > 3:
            return None
        rest = text.lstrip(" ")
    match = _FENCE_OPEN.fullmatch(rest)
    if match is None:
        return None
    fence = match["fence"]
    if fence[0] == "`" and "`" in match["info"]:  # CommonMark: then it is inline code, not a fence
        return None
    return fence[0], len(fence), content_indent


def _after_fence(lines: list[str], start: int, char: str, length: int, content_indent: int) -> int:
    closing = re.compile(rf"{re.escape(char)}{{{length},}}[ \t]*")
    for index in range(start, len(lines)):
        text = lines[index]
        indent = _indent_width(text)
        if content_indent and text.strip() and indent < content_indent:
            return index  # the list item ended, and its fence with it; this line is read anew
        if indent - content_indent <= 3 and closing.fullmatch(text.lstrip(" \t")):
            return index + 1
    return len(lines)


def _after_html_block(lines: list[str], start: int, closing: re.Pattern[str]) -> int:
    for index in range(start, len(lines)):
        text = lines[index]
        # On the opening line the end marker must come after the opening tag itself.
        searched = text.lstrip(" ")[4:] if index == start else text
        if closing.search(searched):
            return index + 1
    return len(lines)


def _is_quote(text: str) -> bool:
    return _indent_width(text) <= 3 and text.lstrip(" ").startswith(">")


def _indent_width(text: str) -> int:
    """Columns of leading whitespace, tabs stopping at multiples of 4 as in CommonMark."""
    width = 0
    for char in text:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4 - width % 4
        else:
            break
    return width


def _closest_command(word: str) -> str | None:
    matches = difflib.get_close_matches(word, ALL_COMMANDS, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _when_valid(name: str) -> str:
    """`when the run is blocked`, generated from the lifecycle's table."""
    if name == "unhold":  # valid by the hold flag, not by a state alone
        return "when the run is held"
    states = states_allowing(name)
    run_states = _or_list([s.value.replace("_", " ") for s in states if s is not None])
    if name == "hold":
        return f"when the run is {run_states} and not held"
    if None not in states:
        return f"when the run is {run_states}"
    if not run_states:
        return "when the issue has no run"
    return f"when the issue has no run or its run is {run_states}"


def _or_list(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} or {items[-1]}"
