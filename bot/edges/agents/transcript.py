"""The transcript of one agent session: a JSONL file holding the agent's own stream verbatim and
lanebot's annotations.

Every line is one JSON object. A line the agent printed that is a JSON object is written exactly as
it came; anything else it printed is wrapped as `{"lanebot": "stdout", "text": ...}`, its stderr as
`{"lanebot": "stderr", "text": ...}`. lanebot's own lines carry a `"lanebot"` key naming what they
record (`start`, `exit`, `timeout`, `cancelled`, `outcome`, ...). An agent line that itself has a
`"lanebot"` key is wrapped too, so nothing the agent prints can pass for an annotation.

The file is opened for appending: a retried attempt written to the same path keeps the earlier one.

What the agent prints is capped at `MAX_TRANSCRIPT_BYTES` per session: past it, one
`{"lanebot": "truncated", ...}` line says the transcript was cut, the agent's further lines are
not written (the session goes on, and its result is still read from them), and lanebot's own
annotations (`exit`, `outcome`, ...) are still recorded.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

ANNOTATION_KEY = "lanebot"
MAX_TRANSCRIPT_BYTES = 64 * 1024 * 1024


def utc_timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object on `text`, or `None` when the line is not one (strict JSON: no NaN)."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class Transcript:
    """An open transcript file; use as a context manager."""

    def __init__(self, path: Path, *, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = MAX_TRANSCRIPT_BYTES if max_bytes is None else max_bytes
        self._file: IO[str] | None = None
        self._agent_bytes = 0
        self._dropped_lines = 0

    def __enter__(self) -> Transcript:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        self._file = os.fdopen(descriptor, "a", encoding="utf-8")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self.close_note()
            self._file.close()
            self._file = None

    def agent_line(self, text: str) -> dict[str, Any] | None:
        """Record one line the agent printed on stdout; return it parsed when it is a JSON object."""
        if not text.strip():
            return None
        event = parse_json_object(text)
        if event is None or ANNOTATION_KEY in event:
            self._agent_write(_annotation("stdout", text=text))
            return None
        self._agent_write(text)
        return event

    def agent_object(self, event: dict[str, Any]) -> None:
        """Record a JSON object the agent answered with (an HTTP response body) as one line."""
        if ANNOTATION_KEY in event:
            self._agent_write(_annotation("stdout", text=json.dumps(event, ensure_ascii=False)))
        else:
            self._agent_write(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    def stderr_line(self, text: str) -> None:
        if text.strip():
            self._agent_write(_annotation("stderr", text=text))

    def annotate(self, kind: str, **fields: Any) -> None:
        self._write(_annotation(kind, **fields))

    @property
    def truncated(self) -> bool:
        """Whether the agent's output reached the cap and later lines were left out."""
        return self._dropped_lines > 0

    def _agent_write(self, line: str) -> None:
        """Write a line of the agent's output, unless the session's output reached the cap."""
        size = len(line.encode("utf-8", errors="replace")) + 1
        if self._dropped_lines or self._agent_bytes + size > self.max_bytes:
            if not self._dropped_lines:
                self.annotate(
                    "truncated",
                    after_bytes=self._agent_bytes,
                    text=f"the agent's output reached the transcript's cap of {self.max_bytes} bytes; "
                    "later lines are not recorded (the session went on)",
                )
            self._dropped_lines += 1
            return
        self._agent_bytes += size
        self._write(line)

    def close_note(self) -> None:
        """Say how many lines the cap left out (called once, before the file closes)."""
        if self._dropped_lines:
            self.annotate("truncated", dropped_lines=self._dropped_lines)

    def _write(self, line: str) -> None:
        if self._file is None:
            raise RuntimeError(f"transcript {self.path} is not open")
        # Flushed per line: a transcript is read while its lane runs and after a crash.
        self._file.write(line + "\n")
        self._file.flush()


def _annotation(kind: str, **fields: Any) -> str:
    return json.dumps({ANNOTATION_KEY: kind, **fields}, ensure_ascii=False)
