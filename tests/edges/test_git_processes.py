"""How many git processes bot.edges.git starts for a lane: a `git` first on PATH logs each call
lanebot makes (its git environment inherits PATH alone) and runs the real one."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from bot.edges.git import Mirror
from tests.edges.test_git import LANEBOT, Remote, run_git

pytestmark = pytest.mark.anyio


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path)
    remote.commit({"README.md": "widgets\n", "src/app.py": "print('hi')\n"}, "first")
    return remote


@pytest.fixture
def mirror(tmp_path: Path, remote: Remote) -> Mirror:
    return Mirror(tmp_path / "work", "octo/widgets", str(remote.path))


class GitCalls:
    """The git subcommands lanebot ran since the last `take()`, `-c` options left out."""

    def __init__(self, root: Path) -> None:
        self.log = root / "calls.log"
        wrapper = root / "bin" / "git"
        wrapper.parent.mkdir()
        wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{self.log}"\nexec "{shutil.which("git")}" "$@"\n')
        wrapper.chmod(0o755)
        self.bin = wrapper.parent

    def take(self) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        self.log.unlink(missing_ok=True)
        return [_subcommand(line.split()) for line in lines]


def _subcommand(argv: list[str]) -> str:
    while argv[0] == "-c":
        argv = argv[2:]
    return " ".join(argv[:2]) if argv[0] == "worktree" else argv[0]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    calls = GitCalls(tmp_path)
    monkeypatch.setenv("PATH", f"{calls.bin}{os.pathsep}{os.environ['PATH']}")
    return calls


async def test_a_lane_cut_commit_diff_push_and_removal_take_nine_git_calls(
    mirror: Mirror, remote: Remote, calls: GitCalls, tmp_path: Path
):
    await mirror.fetch()  # the first fetch checks the mirror's remote URL; later ones trust it
    calls.take()

    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start=remote.sha("main"))
    (tree.path / "new.py").write_text("print('new')\n")
    head = await tree.commit_all("lane a", LANEBOT)
    changed = await tree.changed_paths("main")
    await tree.push("lane-a", expected="")
    await mirror.remove_worktree(tree.path)

    assert calls.take() == [
        "fetch",
        "cat-file",  # the start commit
        "worktree add",
        "add",
        "commit",
        "rev-parse",  # the new head
        "cat-file",  # the base
        "diff",
        "push",
    ]
    assert changed == ["new.py"] and head == remote.sha("lane-a")
    assert not tree.path.exists() and not (mirror.path / "worktrees").exists()


async def test_a_commit_with_nothing_to_commit_is_told_apart_from_a_failed_one(
    mirror: Mirror, calls: GitCalls, tmp_path: Path
):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    calls.take()

    assert await tree.commit_all("nothing", LANEBOT) is None
    assert calls.take() == ["add", "commit", "diff"]


async def test_fetches_waiting_on_one_another_are_served_by_one_that_began_after_they_asked(
    mirror: Mirror, remote: Remote, calls: GitCalls
):
    await mirror.fetch()
    calls.take()
    newest = remote.commit({"later.txt": "later\n"}, "later")

    await asyncio.gather(mirror.fetch(), mirror.fetch(), mirror.fetch())

    # The first fetch was under way when the other two asked; the second serves the third.
    assert calls.take() == ["fetch", "fetch"]
    assert await mirror.resolve("main") == newest


async def test_a_changed_remote_url_is_still_followed_after_the_mirror_remembered_the_old_one(
    tmp_path: Path, remote: Remote
):
    first = Mirror(tmp_path / "work", "octo/widgets", str(remote.path))
    await first.fetch()
    moved = tmp_path / "moved.git"
    shutil.copytree(remote.path, moved)
    run_git("update-ref", "refs/heads/moved", remote.sha("main"), cwd=moved)

    await Mirror(tmp_path / "work", "octo/widgets", str(moved)).fetch()

    assert run_git("config", "--get", "remote.origin.url", cwd=first.path) == str(moved)
    assert await first.resolve("moved") == remote.sha("main")
