"""A transcript read for people: Claude Code's and Codex's real streams, lanebot's annotations, folding."""

from __future__ import annotations

import json
from pathlib import Path

from bot.render.dashboard.transcript import FOLD_CHARS, MAX_ENTRIES, parse_transcript

FIXTURES = Path(__file__).resolve().parents[1] / "agents_fixtures"


def kinds(data: bytes) -> list[tuple[str, str]]:
    return [(entry.kind, entry.heading) for entry in parse_transcript(data).entries]


def test_claude_codes_stream():
    entries = parse_transcript((FIXTURES / "claude_stream_success.jsonl").read_bytes()).entries
    assert [e.kind for e in entries] == ["note", "message", "tool_call", "tool_result", "message", "note"]
    write = entries[2]
    assert write.heading == "Write" and "content:\n<!DOCTYPE html>" in write.text and write.folded
    assert entries[4].text == "ABRACADABRA"
    assert entries[5].heading == "session ended: success, $0.0901, 4 turns" and not entries[5].is_error


def test_codex_exec_json():
    found = kinds((FIXTURES / "codex_exec_command.jsonl").read_bytes())
    assert ("tool_call", "command") in found and ("tool_result", "output (exit 0)") in found
    assert ("message", "agent") in found and ("reasoning", "reasoning") in found
    failed = parse_transcript((FIXTURES / "codex_exec_turn_failed.jsonl").read_bytes()).entries
    assert any(entry.is_error for entry in failed)


def test_lanebots_annotations_and_lines_that_are_not_json():
    lines = [
        {"lanebot": "start", "agent": "claude", "argv": ["/usr/bin/claude", "-p"], "jailed": True, "env": ["HOME"]},
        {"lanebot": "stderr", "text": "warning: x"},
        {"lanebot": "timeout", "after_s": 30},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode() + b"\nnot json at all\n[1, 2]\n"
    entries = parse_transcript(data).entries
    assert entries[0].heading == "lanebot started claude in its jail" and "/usr/bin/claude -p" in entries[0].text
    assert (entries[1].kind, entries[1].is_error) == ("output", True)
    assert entries[2].heading == "lanebot: timeout" and entries[2].is_error
    assert [e.kind for e in entries[3:]] == ["raw", "raw"]


def test_long_entries_fold_and_the_counts_are_capped():
    long = json.dumps({"type": "item.completed", "item": {"type": "agent_message", "text": "x" * (FOLD_CHARS + 1)}})
    entry = parse_transcript(long.encode()).entries[0]
    assert entry.folded and entry.summary.endswith("…")
    many = ("\n".join(["plain line"] * (MAX_ENTRIES + 5))).encode()
    assert parse_transcript(many).omitted_entries == 5
    cut = parse_transcript(b'{"lanebot": "exit"}\n{"type": "assis', cut=True)
    assert cut.cut and len(cut.entries) == 1
