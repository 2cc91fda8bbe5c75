"""The transcript of one agent session: a JSONL file holding the agent's own stream verbatim and
lanebot's annotations.

Every line is one JSON object. A line the agent printed that is a JSON object is written exactly as
it came; anything else it printed is wrapped as `{"lanebot": "stdout", "text": ...}`, its stderr as
`{"lanebot": "stderr", "text": ...}`. lanebot's own lines carry a `"lanebot"` key naming what they
record (`start`, `exit`, `timeout`, `cancelled`, `outcome`, ...). An agent line that itself has a
`"lanebot"` key is wrapped too, so nothing the agent prints can pass for an annotation.

The file is opened for appending: a retried attempt written to the same path keeps the earlier one.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any

ANNOTATION_KEY = "lanebot"


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

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def __enter__(self) -> Transcript:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def agent_line(self, text: str) -> dict[str, Any] | None:
        """Record one line the agent printed on stdout; return it parsed when it is a JSON object."""
        if not text.strip():
            return None
        event = parse_json_object(text)
        if event is None or ANNOTATION_KEY in event:
            self.annotate("stdout", text=text)
            return None
        self._write(text)
        return event

    def agent_object(self, event: dict[str, Any]) -> None:
        """Record a JSON object the agent answered with (an HTTP response body) as one line."""
        if ANNOTATION_KEY in event:
            self.annotate("stdout", text=json.dumps(event, ensure_ascii=False))
        else:
            self._write(json.dumps(event, ensure_ascii=False, separators=(",", ":")))

    def stderr_line(self, text: str) -> None:
        if text.strip():
            self.annotate("stderr", text=text)

    def annotate(self, kind: str, **fields: Any) -> None:
        self._write(json.dumps({ANNOTATION_KEY: kind, **fields}, ensure_ascii=False))

    def _write(self, line: str) -> None:
        if self._file is None:
            raise RuntimeError(f"transcript {self.path} is not open")
        # Flushed per line: a transcript is read while its lane runs and after a crash.
        self._file.write(line + "\n")
        self._file.flush()
