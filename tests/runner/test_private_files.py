"""lanebot's own folders are 0700 and its files 0600, whatever the umask: scripts, transcripts, scratch."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from bot.edges.agents.transcript import Transcript
from bot.edges.store.models import Run
from bot.runner.jailing import _prepare
from bot.runner.lanes import _write_script
from bot.runner.runtime import Runtime


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    run = Run(id=12, installation_id=1, repository="octo/app", issue_number=5, requested_by="m")
    return Runtime(
        context=SimpleNamespace(settings=SimpleNamespace(workdir=tmp_path / "work")),
        run=run,
        repository=None,
        workflow=None,
        graph=None,
        issue=None,
        client=None,
        mirror=None,
        identity=None,
    )


def test_a_check_script_is_written_0600_in_folders_0700(runtime: Runtime, tmp_path: Path) -> None:
    script = runtime.script_path("check-api")
    _write_script(script, "make test")

    assert script.read_text(encoding="utf-8") == "make test\n"
    assert mode(script) == 0o600
    for folder in (tmp_path / "work", tmp_path / "work" / "scripts", script.parent):
        assert mode(folder) == 0o700, folder


def test_a_transcript_is_written_0600_in_folders_0700(runtime: Runtime, tmp_path: Path) -> None:
    path = runtime.transcript_path("api", 1)
    with Transcript(path) as transcript:
        transcript.annotate("started")

    assert mode(path) == 0o600 and path.read_text(encoding="utf-8")
    for folder in (tmp_path / "work", tmp_path / "work" / "transcripts", path.parent.parent, path.parent):
        assert mode(folder) == 0o700, folder


def test_the_jails_scratch_home_and_tmp_are_0700(runtime: Runtime, tmp_path: Path) -> None:
    folder = runtime.scratch_path("jail/check-api")
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").mkdir()
    _prepare(worktree, folder / "home", folder / "tmp")

    for made in (tmp_path / "work" / "scratch", folder, folder / "home", folder / "tmp"):
        assert mode(made) == 0o700, made
