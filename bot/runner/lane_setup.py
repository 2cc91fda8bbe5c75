"""What a lane's worktree gets besides its agent: the repository's set-up and tear-down scripts
(`build.setup`, `build.teardown`), a cache folder set-up may fill and later lanes reuse, and ports
of its own.

- **The cache** is `<workdir>/cache/<owner>/<repo>/<key>/`, where the key is a digest of the
  contents of the files `build.cache_key` names, read from the lane's worktree (a file missing
  counts as missing, so adding it later keys a new cache). It is `$LANEBOT_CACHE` in every step of
  the lane; set-up may write it, agents and checks only read it. Set-ups of one cache hold its
  lock (`<key>.lock`) while they run, so the first fills it and the next ones find it filled,
  never half-written by a neighbour.
- **Ports:** a lane holds slot N (a lock file `<workdir>/ports/slot-N.lock`, taken with flock for
  as long as the attempt runs, so a crash frees it) and gets ports
  `PORTS_START + N * build.ports` up to `build.ports` of them. Lanes of every run on this host take
  slots from the one folder, so two lanes side by side never share a port.
- **Set-up and tear-down** are the repository's text: they reach the shell only as files, through
  `run_script`, in the lane's command jail with the network on and the cache writable.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.edges.files import private_dir

__all__ = [
    "PORTS_END",
    "PORTS_START",
    "LanePorts",
    "NoPortsLeft",
    "cache_folder",
    "cache_key",
    "held_cache",
    "held_ports",
]

PORTS_START = 20_000
PORTS_END = 30_000  # exclusive
_LOCK_POLL_S = 0.2


class NoPortsLeft(RuntimeError):
    """Every port slot of this host is held by a running lane."""


@dataclass(frozen=True)
class LanePorts:
    base: int
    count: int

    def env(self) -> dict[str, str]:
        return {"LANEBOT_PORT_BASE": str(self.base), "LANEBOT_PORT_COUNT": str(self.count)}


def cache_key(worktree: Path, files: Sequence[str]) -> str:
    """A digest of the contents of `files` in `worktree` (sorted, each with its name); "shared"
    when none are named. A file outside the worktree (through a link) counts as missing."""
    if not files:
        return "shared"
    digest = hashlib.sha256()
    root = worktree.resolve()
    for name in sorted(files):
        digest.update(name.encode("utf-8") + b"\0")
        path = (worktree / name).resolve()
        if path.is_relative_to(root) and path.is_file():
            digest.update(b"file\0" + hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(b"missing\0")
    return digest.hexdigest()[:24]


def cache_folder(workdir: Path, repository: str, key: str) -> Path:
    owner, _, name = repository.partition("/")
    folder = workdir / "cache" / owner / name / key
    private_dir(folder)
    return folder


@contextlib.asynccontextmanager
async def held_cache(folder: Path) -> AsyncIterator[None]:
    """Hold `folder`'s lock while a set-up writes it (waiting for another set-up holding it)."""
    async with _held(folder.parent / f"{folder.name}.lock", wait=True):
        yield


@contextlib.asynccontextmanager
async def held_ports(workdir: Path, count: int) -> AsyncIterator[LanePorts | None]:
    """Ports of the caller's own while the block runs, or None when `count` is 0."""
    if count <= 0:
        yield None
        return
    folder = workdir / "ports"
    await asyncio.to_thread(private_dir, folder)
    for slot in range((PORTS_END - PORTS_START) // count):
        async with _held(folder / f"slot-{slot}-of-{count}.lock", wait=False) as held:
            if held and await asyncio.to_thread(_no_overlap, folder, slot, count):
                yield LanePorts(PORTS_START + slot * count, count)
                return
    raise NoPortsLeft(
        f"all {(PORTS_END - PORTS_START) // count} port slots of {count} on this host are held by running lanes"
    )


def _no_overlap(folder: Path, slot: int, count: int) -> bool:
    """Whether a slot held under another `build.ports` covers any of this slot's ports: runs of
    different repositories may ask for different counts."""
    start, end = PORTS_START + slot * count, PORTS_START + (slot + 1) * count
    for lock in folder.glob("slot-*-of-*.lock"):
        other_slot, _, other_count = lock.stem.removeprefix("slot-").partition("-of-")
        if not (other_slot.isdigit() and other_count.isdigit()) or int(other_count) == count:
            continue
        other_start = PORTS_START + int(other_slot) * int(other_count)
        if other_start < end and start < other_start + int(other_count) and _is_held(lock):
            return False
    return True


def _is_held(lock: Path) -> bool:
    try:
        descriptor = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # closing drops a lock this call took
    return False


@contextlib.asynccontextmanager
async def _held(lock: Path, *, wait: bool) -> AsyncIterator[bool]:
    """flock `lock` for the block: True when held; with `wait`, until it is."""
    descriptor = await asyncio.to_thread(os.open, lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if not wait:
                    held = False
                    break
                await asyncio.sleep(_LOCK_POLL_S)
        yield held
    finally:
        os.close(descriptor)
