"""A lane attempt's transcript read for people: its JSONL lines made into entries. Pure.

A transcript (bot/edges/agents/transcript.py) holds the agent's own stream verbatim and lanebot's
annotations (`{"lanebot": "<kind>", ...}`). `parse_transcript` reads the bytes (the web side reads
the file) and gives one `Entry` per thing a person wants to see:

- Claude Code's stream-json: the agent's text (`message`), its thinking (`reasoning`), each
  `tool_use` (`tool_call`: the tool's name, its input) and each `tool_result` (`tool_result`, marked
  when it is an error), the session's start and its `result` (`note`).
- Codex's `exec --json`: `agent_message`, `reasoning`, each `command_execution` (a call: the command;
  a result: its output and exit code), `file_change`, MCP and web-search calls, `turn.completed`'s
  usage, and `turn.failed` and `error` (`error`).
- lanebot's annotations (`note`; the agent's stdout and stderr that were not JSON, `output`).
- any other line, as it was (`raw`).

An entry whose text is long (`FOLD_CHARS`, `FOLD_LINES`) is `folded`: the page shows it in a
`<details>` with its first line as the summary. Texts and the number of entries are capped, each cut
said. Nothing here is trusted: the templates escape every string.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bot.core.text import one_line, shorten

__all__ = ["FOLD_CHARS", "FOLD_LINES", "Entry", "EntryKind", "Transcript", "parse_transcript"]

EntryKind = Literal["message", "reasoning", "tool_call", "tool_result", "note", "output", "error", "raw"]

FOLD_CHARS = 800
FOLD_LINES = 12
ENTRY_CHARS = 50_000
MAX_ENTRIES = 2_000
SUMMARY_CHARS = 120


@dataclass(frozen=True)
class Entry:
    kind: EntryKind
    heading: str  # who or what: "agent", "Bash", "result (error)", "lanebot: exit"
    text: str
    is_error: bool = False

    @property
    def folded(self) -> bool:
        return len(self.text) > FOLD_CHARS or self.text.count("\n") >= FOLD_LINES

    @property
    def summary(self) -> str:
        """The first line of the text, shortened: a folded entry's `<summary>`."""
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        return shorten(one_line(first), SUMMARY_CHARS) if first else ""


@dataclass(frozen=True)
class Transcript:
    entries: tuple[Entry, ...]
    omitted_entries: int = 0  # past MAX_ENTRIES
    cut: bool = False  # the bytes given were the file's beginning only


def parse_transcript(data: bytes, *, cut: bool = False) -> Transcript:
    """The entries of a transcript's bytes; `cut` says the bytes stop before the file's end (then a
    last partial line is dropped)."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if cut and lines:
        lines = lines[:-1]
    entries: list[Entry] = []
    omitted = 0
    for line in lines:
        if not line.strip():
            continue
        for entry in _entries(line):
            if len(entries) < MAX_ENTRIES:
                entries.append(_capped(entry))
            else:
                omitted += 1
    return Transcript(tuple(entries), omitted, cut)


def _capped(entry: Entry) -> Entry:
    if len(entry.text) <= ENTRY_CHARS:
        return entry
    rest = len(entry.text) - ENTRY_CHARS
    return Entry(
        entry.kind, entry.heading, f"{entry.text[:ENTRY_CHARS]}\n… ({rest:,} more characters not shown)", entry.is_error
    )


def _entries(line: str) -> Iterator[Entry]:
    try:
        event = json.loads(line)
    except ValueError:
        yield Entry("raw", "line", line)
        return
    if not isinstance(event, dict):
        yield Entry("raw", "line", line)
    elif "lanebot" in event:
        yield from _annotation(event)
    elif isinstance(event.get("type"), str):
        yield from _typed(event, line)
    else:
        yield Entry("raw", "line", line)


def _annotation(event: Mapping[str, Any]) -> Iterator[Entry]:
    kind = str(event.get("lanebot"))
    rest = {key: value for key, value in event.items() if key != "lanebot"}
    if kind in ("stdout", "stderr"):
        yield Entry("output", kind, _string(rest.get("text")), is_error=kind == "stderr")
    elif kind == "start":
        argv = rest.get("argv")
        command = " ".join(str(part) for part in argv) if isinstance(argv, list) else ""
        jailed = " in its jail" if rest.get("jailed") else ""
        heading = f"lanebot started {_string(rest.get('agent')) or 'the agent'}{jailed}"
        details = {key: value for key, value in rest.items() if key not in ("argv", "agent", "jailed")}
        yield Entry("note", heading, "\n".join(filter(None, [command, _json(details) if details else ""])))
    else:
        error = kind in ("not_found", "not_configured", "timeout") or rest.get("ok") is False
        yield Entry("note", f"lanebot: {kind}", _json(rest) if rest else "", is_error=error)


def _typed(event: Mapping[str, Any], line: str) -> Iterator[Entry]:
    kind = event["type"]
    if kind == "system":
        model = _string(event.get("model"))
        yield Entry("note", f"session {_string(event.get('subtype')) or 'event'}", f"model {model}" if model else "")
    elif kind in ("assistant", "user"):
        yield from _claude_message(kind, event.get("message"))
    elif kind == "result":
        yield _claude_result(event)
    elif kind == "item.completed":
        yield from _codex_item(event.get("item"))
    elif kind in ("item.started", "item.updated", "turn.started"):
        return
    elif kind == "thread.started":
        yield Entry("note", "session started", f"thread {_string(event.get('thread_id'))}")
    elif kind == "turn.completed":
        yield Entry("note", "turn completed", _usage(event.get("usage")))
    elif kind in ("turn.failed", "error"):
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else event.get("message")
        yield Entry("error", kind, _string(message) or line, is_error=True)
    else:
        yield Entry("raw", kind, line)


def _claude_message(role: str, message: object) -> Iterator[Entry]:
    if not isinstance(message, dict):
        return
    content = message.get("content")
    if isinstance(content, str):
        yield Entry("message", "agent" if role == "assistant" else "prompt", content)
        return
    if not isinstance(content, list):
        return
    for item in content:
        if not isinstance(item, dict):
            continue
        part = item.get("type")
        if part == "text":
            yield Entry("message", "agent" if role == "assistant" else "prompt", _string(item.get("text")))
        elif part == "thinking":
            yield Entry("reasoning", "thinking", _string(item.get("thinking")))
        elif part == "tool_use":
            yield Entry("tool_call", _string(item.get("name")) or "tool", _tool_input(item.get("input")))
        elif part == "tool_result":
            error = item.get("is_error") is True
            heading = "result (error)" if error else "result"
            yield Entry("tool_result", heading, _result_text(item.get("content")), is_error=error)


def _claude_result(event: Mapping[str, Any]) -> Entry:
    subtype = _string(event.get("subtype")) or "result"
    facts = [subtype]
    cost = event.get("total_cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        facts.append(f"${cost:.4f}")
    turns = event.get("num_turns")
    if isinstance(turns, int) and not isinstance(turns, bool):
        facts.append(f"{turns} turns")
    failed = subtype != "success" or event.get("is_error") is True
    text = "\n".join(filter(None, [_usage(event.get("usage")), _string(event.get("result"))]))
    return Entry("note", "session ended: " + ", ".join(facts), text, is_error=failed)


def _codex_item(item: object) -> Iterator[Entry]:
    if not isinstance(item, dict):
        return
    kind = item.get("type")
    if kind == "agent_message":
        yield Entry("message", "agent", _string(item.get("text")))
    elif kind == "reasoning":
        yield Entry("reasoning", "reasoning", _string(item.get("text")))
    elif kind == "command_execution":
        yield Entry("tool_call", "command", _string(item.get("command")))
        code = item.get("exit_code")
        failed = isinstance(code, int) and code != 0
        heading = f"output (exit {code})" if isinstance(code, int) else "output"
        yield Entry("tool_result", heading, _string(item.get("aggregated_output")), is_error=failed)
    elif kind == "file_change":
        changes = item.get("changes")
        listed = [
            f"{_string(change.get('kind'))} {_string(change.get('path'))}"
            for change in changes or ()
            if isinstance(change, dict)
        ]
        yield Entry("tool_call", "file change", "\n".join(listed))
    elif kind in ("mcp_tool_call", "web_search"):
        details = {key: value for key, value in item.items() if key not in ("id", "type")}
        yield Entry("tool_call", str(kind).replace("_", " "), _json(details))
    elif kind == "error":
        yield Entry("error", "error", _string(item.get("message")), is_error=True)
    else:
        details = {key: value for key, value in item.items() if key != "id"}
        yield Entry("raw", _string(kind) or "item", _json(details))


def _tool_input(value: object) -> str:
    """A tool call's input for reading: a shell command as it is; otherwise one `key: value` per
    field, a text spanning lines written out under its key (a file's content reads as the file)."""
    if isinstance(value, dict) and set(value) <= {"command", "description", "timeout"} and "command" in value:
        return _string(value["command"])
    if not isinstance(value, dict):
        return _json(value) if value is not None else ""
    lines = []
    for key, item in value.items():
        if isinstance(item, str) and "\n" in item:
            lines += [f"{key}:", item]
        else:
            lines.append(f"{key}: {item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)}")
    return "\n".join(lines)


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            _string(part.get("text")) if isinstance(part, dict) and part.get("type") == "text" else _json(part)
            for part in content
        ]
        return "\n".join(texts)
    return "" if content is None else _json(content)


def _usage(usage: object) -> str:
    if not isinstance(usage, dict):
        return ""
    counts = [
        f"{key.replace('_', ' ')}: {value:,}"
        for key, value in usage.items()
        if isinstance(value, int) and not isinstance(value, bool)
    ]
    return ", ".join(counts)


def _string(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _json(value)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
