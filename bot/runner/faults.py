"""Faults of the host, not of the work: a database that dropped its connections, a work disk that
filled up. A step that meets one was interrupted, as if lanebot had been restarted under it: the
step runs again (a lane's attempt does not consume a retry), after a pause that grows with each
interruption, and only after `MAX_INTERRUPTIONS` of them in a row is the fault counted as the
step's failure, naming it, so that a disk that stays full blocks the run instead of looping.

What counts (`host_fault`): GitHub's rate limit lasting longer than a call waits (the step then
pauses until it lifts, and that never counts towards the cap), SQLAlchemy's errors for a connection that was lost or could not be
made (PostgreSQL restarted or its backends terminated, SQLite locked past its busy timeout), and a
full disk: `ENOSPC`/`EDQUOT` from the OS, or their message in a command's output (git, the check,
the agent: lanebot cannot tell which wrote it, and a false positive only costs a re-run).
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import exc as sqlalchemy_errors

from bot.edges.github.client import RateLimitTooLong

__all__ = [
    "MAX_INTERRUPTIONS",
    "counts_against_the_cap",
    "disk_full_in",
    "host_fault",
    "interruption_pause",
    "work_disk_full",
]

MAX_INTERRUPTIONS = 3
# GitHub's rate limit longer than a call waits in all (LANEBOT_MAX_RATE_LIMIT_WAIT) interrupts the
# step until the limit lifts (an hour at most, as GitHub's primary limit resets hourly).
RATE_LIMITED = "GitHub rate-limited "
MAX_RATE_LIMIT_PAUSE_S = 3_600.0
# Seconds to wait before a step runs again after its n-th interruption (the last for any later one).
PAUSES_S = (2.0, 5.0, 15.0)
# A work disk with less free than this is full for lanebot's purposes: a checkout, a commit or
# a transcript would fail on it.
LOW_DISK_BYTES = 8 * 1024 * 1024
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
_DISK_FULL_SIGNS = ("No space left on device", "Disk quota exceeded")


def host_fault(error: BaseException) -> str | None:
    """Why `error` is the host's fault rather than the work's, or None when it is not."""
    for link in _chain(error):
        if isinstance(link, RateLimitTooLong):
            return f"{RATE_LIMITED}{link.who} until {link.until:%H:%M:%S} UTC"
        if isinstance(link, sqlalchemy_errors.DBAPIError) and (
            link.connection_invalidated or isinstance(link, sqlalchemy_errors.OperationalError)
        ):
            return "the database connection was lost"
        if isinstance(link, sqlalchemy_errors.TimeoutError):
            return "no database connection was free in time"
        if isinstance(link, OSError) and link.errno in _DISK_FULL_ERRNOS:
            return "the work disk is full"
        if disk_full_in(str(link)) or disk_full_in(getattr(link, "stderr", None)):
            return "the work disk is full"
    return None


def disk_full_in(text: object) -> bool:
    """Whether a command's output says the disk was full."""
    return isinstance(text, str) and any(sign in text for sign in _DISK_FULL_SIGNS)


def work_disk_full(path: Path) -> bool:
    """Whether the disk that holds `path` (or its nearest existing parent) is full now."""
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free < LOW_DISK_BYTES
            except OSError:
                return False
    return False


def interruption_pause(interruptions: int, error: BaseException | None = None) -> float:
    """The pause before a step runs again after its `interruptions`-th interruption in a row; for
    GitHub's rate limit, until it lifts."""
    for link in _chain(error) if error is not None else ():
        if isinstance(link, RateLimitTooLong):
            return min(max((link.until - datetime.now(UTC)).total_seconds(), 0.0) + 1.0, MAX_RATE_LIMIT_PAUSE_S)
    return PAUSES_S[min(max(interruptions, 1), len(PAUSES_S)) - 1]


def counts_against_the_cap(reason: str) -> bool:
    """Whether an interruption counts towards MAX_INTERRUPTIONS: a rate limit always lifts, so no."""
    return not reason.startswith(RATE_LIMITED)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__
