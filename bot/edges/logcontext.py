"""What a log line is about (the run, the unit, the delivery), and log lines as JSON (LOG_FORMAT=json).

The ids travel with the work in a `contextvars.ContextVar`: set where a delivery is dispatched
(`log_context(delivery_id=...)`), where a run is planned or driven and where a job or a lane attempt
runs (`bind_log_context(run_id=..., unit=...)`, for the rest of the current task). asyncio tasks
and anyio's worker threads start with a copy of their creator's context, so a step's threads and
sub-tasks log the ids of the step that started them. `JsonFormatter` writes one JSON object per
line: `time` (UTC, ISO 8601), `level`, `logger`, `message`, the ids known (`run_id`, `unit`,
`delivery_id`), and `exception` when the record carries one. `LogContextFilter` copies the ids
onto each record as it is emitted, so a handler that formats later (a queue) still has them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import IO

LOG_IDS = ("run_id", "unit", "delivery_id")

_IDS: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "lanebot_log_ids", default=MappingProxyType({})
)


def _merged(ids: Mapping[str, object]) -> Mapping[str, object]:
    unknown = sorted(set(ids) - set(LOG_IDS))
    if unknown:
        raise TypeError(f"log ids are {', '.join(LOG_IDS)}; not {', '.join(unknown)}")
    merged = {**_IDS.get(), **ids}
    return MappingProxyType({name: value for name, value in merged.items() if value is not None})


@contextlib.contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Within the block, log lines carry these ids (None forgets one); afterwards, what they carried before."""
    token = _IDS.set(_merged(ids))
    try:
        yield
    finally:
        _IDS.reset(token)


def bind_log_context(**ids: object) -> None:
    """From now on in this context (an asyncio task has its own), log lines carry these ids."""
    _IDS.set(_merged(ids))


def log_ids() -> dict[str, object]:
    """The ids log lines carry here, now."""
    return dict(_IDS.get())


class LogContextFilter(logging.Filter):
    """Puts the context's ids on each record (as `record.lanebot_ids`); lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "lanebot_ids"):
            record.lanebot_ids = log_ids()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the ids known, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = getattr(record, "lanebot_ids", None)
        entry.update(ids if isinstance(ids, dict) else log_ids())
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def json_handler(stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler (stderr by default) writing JSON lines with the context's ids."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(LogContextFilter())
    return handler
