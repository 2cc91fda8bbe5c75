"""The whole stack for each end-to-end test: the sandbox GitHub and `lanebot serve`, as `lanebot demo` runs them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.stack import Stack


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with Stack(tmp_path / "stack") as running:
        yield running
