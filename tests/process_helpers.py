"""Looking for a test's processes by a marker in their command line, on this host's /proc."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """The running (not zombie) processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and running(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def gone(marker: str, within: float = 10.0) -> bool:
    """Whether no process carries `marker`, allowing for the kernel to finish killing a jail's processes:
    it does so when the jail's init exits, a moment after bwrap itself has returned."""
    deadline = time.monotonic() + within
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def running(pid: int) -> bool:
    """Whether `pid` is alive: not gone, not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill_processes_under(folder: Path) -> None:
    """SIGKILL every process (but this one) whose command line names `folder`: what a killed lanebot
    of a test left running there (agents, checks)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass
