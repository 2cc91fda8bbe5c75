"""A commit range's changes per file, as `git diff --numstat` counts them. Pure.

git writes each file as `added<TAB>deleted<TAB>path` (with `-z`, each record ends in NUL), and
`-` for both counts of a binary file. lanebot keeps the lines as text (one per file) on a lane
attempt's session; the dashboard reads them back with `parse_numstat`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["FileChange", "from_numstat_z", "parse_numstat", "to_numstat", "totals"]


@dataclass(frozen=True)
class FileChange:
    path: str
    added: int | None  # None: a binary file (git counts no lines)
    deleted: int | None


def from_numstat_z(output: str) -> list[FileChange]:
    """The records of `git diff --numstat -z --no-renames`: NUL-terminated, one file each."""
    return [change for record in output.split("\0") if record and (change := _record(record)) is not None]


def to_numstat(changes: Iterable[FileChange]) -> str:
    """One line per file; a newline inside a path is written as `\\n` so a path stays one line."""
    return "\n".join(
        f"{_count(c.added)}\t{_count(c.deleted)}\t{c.path.replace(chr(10), chr(92) + 'n')}" for c in changes
    )


def parse_numstat(text: str | None) -> list[FileChange]:
    """What `to_numstat` wrote; a line that does not read as one is skipped."""
    if not text:
        return []
    return [change for line in text.split("\n") if (change := _record(line)) is not None]


def totals(changes: Sequence[FileChange]) -> tuple[int, int]:
    """Lines added and deleted over the text files."""
    return sum(c.added or 0 for c in changes), sum(c.deleted or 0 for c in changes)


def _record(record: str) -> FileChange | None:
    parts = record.split("\t", 2)
    if len(parts) != 3 or not parts[2]:
        return None
    if parts[0] == parts[1] == "-":
        return FileChange(parts[2], None, None)
    added, deleted = _number(parts[0]), _number(parts[1])
    if added is None or deleted is None:
        return None
    return FileChange(parts[2], added, deleted)


def _number(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)
