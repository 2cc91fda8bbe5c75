"""The whole stack for each end-to-end test: the sandbox GitHub and `lanebot serve`, as `lanebot demo` runs them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.stack import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    """The stack; checks and verify see `shared_folder` (read-only) beside their worktree, nothing else of the test's."""
    with Stack(tmp_path / "stack", lanebot_env={"LANEBOT_JAIL_READ_ONLY": str(shared_folder(tmp_path))}) as running:
        yield running


def shared_folder(tmp_path: Path) -> Path:
    """Where a test leaves files for a check or verify to find (the jail shows nothing else of tmp_path)."""
    folder = tmp_path / "shared"
    folder.mkdir(exist_ok=True)
    return folder
