"""The git helpers the culprit search uses (bot.runner.culprit), against real git: the merge commits
of a branch's first-parent chain, and a detached scratch worktree moved from commit to commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.edges.git import Mirror
from tests.edges.test_git import LANEBOT, Remote, lane_branch

pytestmark = pytest.mark.anyio


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path)
    remote.commit({"README.md": "widgets\n"}, "first")
    return remote


@pytest.fixture
def mirror(tmp_path: Path, remote: Remote) -> Mirror:
    return Mirror(tmp_path / "work", "octo/widgets", str(remote.path))


async def joined_branch(mirror: Mirror, remote: Remote, tmp_path: Path) -> tuple[str, list[str], str]:
    """`lanebot/5`: main, the merges of lanes a and b, then a commit of the integrator's.
    (base, [merge of a, merge of b], head)."""
    await lane_branch(remote, "lane-a", {"a.py": "a\n"})
    await lane_branch(remote, "lane-b", {"b.py": "b\n"})
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "integration", branch="lanebot/5", start="main")
    base = await tree.head()
    merges = [
        (await tree.merge_no_ff(lane, f"Merge lane '{lane[-1]}' of #5", LANEBOT)).sha for lane in ("lane-a", "lane-b")
    ]
    (tree.path / "glue.py").write_text("import a, b\n")
    head = await tree.commit_all("Integrate the lanes of #5", LANEBOT)
    assert head is not None
    return base, [sha for sha in merges if sha], head


async def test_first_parent_merges_lists_each_merge_since_the_base_oldest_first_and_nothing_else(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    base, merges, head = await joined_branch(mirror, remote, tmp_path)

    listed = await mirror.first_parent_merges(base, head)

    assert listed == [(merges[0], "Merge lane 'a' of #5"), (merges[1], "Merge lane 'b' of #5")]
    assert await mirror.first_parent_merges(merges[0], head) == [(merges[1], "Merge lane 'b' of #5")]
    assert await mirror.first_parent_merges(head, head) == []


async def test_a_scratch_worktree_moves_to_each_commit_as_a_fresh_checkout_of_it(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    base, merges, head = await joined_branch(mirror, remote, tmp_path)
    scratch = await mirror.checkout(tmp_path / "scratch", base)
    (scratch.path / "left-by-verify.log").write_text("output\n")
    (scratch.path / "README.md").write_text("changed by a command\n")

    await scratch.move_to(merges[0])

    assert await scratch.head() == merges[0]
    assert sorted(p.name for p in scratch.path.iterdir() if p.name != ".git") == ["README.md", "a.py"]
    assert (scratch.path / "README.md").read_text() == "widgets\n"
    await scratch.move_to(head)
    assert (scratch.path / "glue.py").is_file() and await scratch.head() == head
