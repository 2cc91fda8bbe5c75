"""The project a sandbox test's repository starts from."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "README.md").write_text("# demo\n")
    (folder / "pkg" / "core.py").write_text("VALUE = 1\n")
    (folder / ".github").mkdir()
    (folder / ".github" / "lanebot.yml").write_text("max_units: 4\n")
    return folder
