"""lanebot's own folders on this host: created 0700, whatever the umask (a primitive that the adapters
share; it imports nothing of bot and is not an adapter of its own)."""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["private_dir"]


def private_dir(path: Path) -> Path:
    """Create the missing folders of `path`, each 0700 (whatever the umask); existing ones are left as they are."""
    missing: list[Path] = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
            folder.chmod(0o700)
    return path
