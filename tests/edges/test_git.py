"""bot.edges.git against real git: a bare repository on disk plays GitHub, and for the token rules a bare
repository served over smart HTTP by `git http-backend` that demands the installation token."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.edges.git import Credentials, GitError, Identity, Mirror, PushRejected, RefNotFound, git, git_environment
from tests.process_helpers import gone, processes_with

pytestmark = pytest.mark.anyio

REAL_GIT = shutil.which("git") or "git"
LANEBOT = Identity("lanebot[bot]", "41898282+lanebot[bot]@users.noreply.github.com")
SOMEONE_ELSE = {
    "GIT_AUTHOR_NAME": "Someone Else",
    "GIT_AUTHOR_EMAIL": "someone@example.com",
    "GIT_COMMITTER_NAME": "Someone Else",
    "GIT_COMMITTER_EMAIL": "someone@example.com",
}


def run_git(*args: str, cwd: Path) -> str:
    """git as a human beside lanebot would run it (isolated from this machine's config)."""
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    done = subprocess.run([REAL_GIT, *args], cwd=cwd, env={**env, **SOMEONE_ELSE}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Remote:
    """A bare repository standing in for GitHub, and a clone of it where someone else works."""

    def __init__(self, root: Path) -> None:
        self.path = root / "remote.git"
        self.clone = root / "elsewhere"
        run_git("init", "--quiet", "--bare", "--initial-branch=main", str(self.path), cwd=root)
        run_git("clone", "--quiet", str(self.path), str(self.clone), cwd=root)
        run_git("checkout", "--quiet", "-b", "main", cwd=self.clone)

    def commit(self, files: dict[str, str | None], message: str, *, branch: str = "main") -> str:
        """Someone else commits `files` (None deletes) on `branch` and pushes it."""
        run_git("fetch", "--quiet", "origin", cwd=self.clone)
        run_git(
            "checkout", "--quiet", "-B", branch, *([f"origin/{branch}"] if self.has(branch) else []), cwd=self.clone
        )
        for name, content in files.items():
            target = self.clone / name
            if content is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content)
        run_git("add", "--all", cwd=self.clone)
        run_git("commit", "--quiet", "-m", message, cwd=self.clone)
        run_git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=self.clone)
        return self.sha(branch)

    def has(self, branch: str) -> bool:
        listing = run_git("ls-remote", "--heads", str(self.path), branch, cwd=self.clone)
        return bool(listing)

    def sha(self, branch: str) -> str:
        return run_git("rev-parse", f"refs/heads/{branch}", cwd=self.path)


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    remote = Remote(tmp_path)
    remote.commit({"README.md": "widgets\n", "src/app.py": "print('hi')\n", "docs/guide.md": "guide\n"}, "first")
    return remote


@pytest.fixture
def mirror(tmp_path: Path, remote: Remote) -> Mirror:
    return Mirror(tmp_path / "work", "octo/widgets", str(remote.path))


def log_of(path: Path, *args: str) -> str:
    return run_git("log", *args, cwd=path)


# --- the mirror -------------------------------------------------------------------------------


async def test_ensure_creates_a_bare_mirror_under_workdir_mirrors_owner_name(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    await mirror.ensure()

    assert mirror.path == tmp_path / "work" / "mirrors" / "octo" / "widgets.git"
    assert run_git("rev-parse", "--is-bare-repository", cwd=mirror.path) == "true"
    assert await mirror.resolve("main") == remote.sha("main")


async def test_the_mirror_its_lock_and_the_worktrees_parent_folders_are_lanebots_alone(mirror: Mirror, tmp_path: Path):
    previous = os.umask(0o022)
    try:
        await mirror.ensure()
        lane = tmp_path / "work" / "worktrees" / "octo" / "widgets" / "run-1" / "lane-a"
        await mirror.add_worktree(lane, branch="lanebot/lane-a", start="main")
        view = tmp_path / "work" / "worktrees" / "octo" / "widgets" / "run-1" / "_plan"
        await mirror.checkout(view, "main")
    finally:
        os.umask(previous)

    work = tmp_path / "work"
    for folder in (work, work / "mirrors", work / "mirrors" / "octo", work / "worktrees", lane.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE((work / "mirrors" / "octo" / "widgets.lock").stat().st_mode) == 0o600


async def test_ensure_is_idempotent(mirror: Mirror, remote: Remote):
    await mirror.ensure()
    await mirror.ensure()

    assert await mirror.resolve("main") == remote.sha("main")


async def test_fetch_picks_up_a_commit_someone_else_pushed_after_the_mirror_was_made(mirror: Mirror, remote: Remote):
    await mirror.ensure()
    before = await mirror.resolve("main")
    newer = remote.commit({"src/app.py": "print('newer')\n"}, "someone else's change")

    assert await mirror.resolve("main") == before  # as last fetched: a stale base until fetched
    await mirror.fetch()
    assert await mirror.resolve("main") == newer != before


async def test_fetch_brings_new_branches_and_prunes_deleted_ones(mirror: Mirror, remote: Remote):
    remote.commit({"feature.txt": "f\n"}, "feature", branch="feature")
    await mirror.ensure()
    assert await mirror.resolve("feature") == remote.sha("feature")

    run_git("push", "--quiet", "origin", "--delete", "feature", cwd=remote.clone)
    await mirror.fetch()

    with pytest.raises(RefNotFound, match="'feature' is neither a branch"):
        await mirror.resolve("feature")


async def test_resolve_accepts_a_commit_sha_and_names_what_it_could_not_find(mirror: Mirror, remote: Remote):
    first = remote.sha("main")
    await mirror.ensure()

    assert await mirror.resolve(first) == first
    assert await mirror.resolve(first[:12]) == first
    with pytest.raises(RefNotFound) as raised:
        await mirror.resolve("no-such-branch")
    assert "fetch() first" in str(raised.value) and "octo/widgets" in str(raised.value)


async def test_a_ref_that_looks_like_an_option_is_refused(mirror: Mirror):
    with pytest.raises(ValueError, match="starts with '-'"):
        await mirror.resolve("--output=/tmp/x")


async def test_two_tasks_ensuring_at_once_create_the_mirror_once(remote: Remote, tmp_path: Path, monkeypatch):
    argv_log = install_git_shim(tmp_path, monkeypatch)
    polls: list[float] = []

    async def poll(seconds: float) -> None:
        polls.append(seconds)
        await asyncio.sleep(0)

    mirror = Mirror(tmp_path / "work", "octo/widgets", str(remote.path), sleep=poll)
    twin = Mirror(tmp_path / "work", "octo/widgets", str(remote.path), sleep=poll)

    await asyncio.gather(mirror.ensure(), twin.ensure())

    inits = [argv for argv in read_argv_log(argv_log) if argv[:1] == ["init"]]
    assert len(inits) == 1
    assert polls == []  # tasks of one process queue on an asyncio lock; only other processes are polled for
    assert await twin.resolve("main") == remote.sha("main")


async def test_ensure_waits_for_another_process_holding_the_mirror_lock(remote: Remote, tmp_path: Path):
    waits: list[float] = []
    lock_path = tmp_path / "work" / "mirrors" / "octo" / "widgets.lock"
    lock_path.parent.mkdir(parents=True)
    other_process = os.open(lock_path, os.O_RDWR | os.O_CREAT)  # its own open file: a separate flock holder
    fcntl.flock(other_process, fcntl.LOCK_EX)

    async def other_process_finishes_while_we_wait(seconds: float) -> None:
        waits.append(seconds)
        os.close(other_process)

    mirror = Mirror(tmp_path / "work", "octo/widgets", str(remote.path), sleep=other_process_finishes_while_we_wait)
    await mirror.ensure()

    assert len(waits) == 1
    assert await mirror.resolve("main") == remote.sha("main")


async def test_a_mirror_half_built_by_a_dead_process_is_rebuilt(mirror: Mirror, remote: Remote):
    half_built = mirror.path.with_name("widgets.git.building")
    half_built.mkdir(parents=True)
    (half_built / "garbage").write_text("left by a crash")

    broken = mirror.path
    broken.mkdir()
    (broken / "objects").mkdir()

    await mirror.ensure()

    assert not half_built.exists()
    assert await mirror.resolve("main") == remote.sha("main")


async def test_tracked_paths_lists_every_file_even_with_odd_names(mirror: Mirror, remote: Remote):
    remote.commit({"odd dir/new\nline.txt": "x\n", "ünïcode.md": "u\n"}, "odd names")
    await mirror.fetch()

    paths = await mirror.tracked_paths("main")

    assert sorted(paths) == sorted(["README.md", "src/app.py", "docs/guide.md", "odd dir/new\nline.txt", "ünïcode.md"])


def test_repository_must_be_owner_slash_name(tmp_path: Path):
    with pytest.raises(ValueError, match="not 'owner/name'"):
        Mirror(tmp_path, "../etc", "https://github.com/octo/widgets.git")


def test_a_remote_url_carrying_credentials_is_refused_without_echoing_them(tmp_path: Path):
    with pytest.raises(ValueError) as raised:
        Mirror(tmp_path, "octo/widgets", "https://x-access-token:ghs_secret@github.com/octo/widgets.git")
    assert "ghs_secret" not in str(raised.value)
    assert "credentials_provider" in str(raised.value)


# --- worktrees --------------------------------------------------------------------------------


async def test_add_worktree_cuts_a_new_branch_at_a_remote_branch(mirror: Mirror, remote: Remote, tmp_path: Path):
    remote.commit({"lane-base.txt": "integration\n"}, "integration work", branch="lanebot/5")
    await mirror.fetch()

    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lanebot/5-a", start="lanebot/5")

    assert tree.branch == "lanebot/5-a"
    assert await tree.head() == remote.sha("lanebot/5")
    assert run_git("symbolic-ref", "HEAD", cwd=tree.path) == "refs/heads/lanebot/5-a"
    assert (tree.path / "lane-base.txt").read_text() == "integration\n"


async def test_add_worktree_cuts_from_the_remote_branch_not_a_stale_local_one(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    await mirror.ensure()
    old = await mirror.add_worktree(tmp_path / "lanes" / "old", branch="main", start="main")
    await mirror.remove_worktree(old.path)  # a local 'main' now lingers in the mirror at the old commit
    newer = remote.commit({"src/app.py": "print('newer')\n"}, "newer")
    await mirror.fetch()

    tree = await mirror.add_worktree(tmp_path / "lanes" / "b", branch="lane-b", start="main")

    assert await tree.head() == newer


async def test_reset_moves_an_existing_branch_to_start_and_no_reset_keeps_it(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    await mirror.ensure()
    first = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (first.path / "work.txt").write_text("attempt 1\n")
    attempt = await first.commit_all("attempt 1", LANEBOT)
    await mirror.remove_worktree(first.path)

    kept = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main", reset=False)
    assert await kept.head() == attempt
    await mirror.remove_worktree(kept.path)

    fresh = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    assert await fresh.head() == remote.sha("main")
    assert not (fresh.path / "work.txt").exists()


async def test_a_worktree_path_left_by_a_crashed_attempt_is_cleared_and_re_added(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    path = tmp_path / "lanes" / "a"
    crashed = await mirror.add_worktree(path, branch="lane-a", start="main")
    (crashed.path / "half-written.py").write_text("def broken(\n")
    admin = Path(run_git("rev-parse", "--git-dir", cwd=crashed.path))
    (admin / "locked").write_text("initializing")  # what a `worktree add` killed mid-way leaves

    again = await mirror.add_worktree(path, branch="lane-a", start="main")

    assert again.path == path
    assert not (path / "half-written.py").exists()
    assert await again.head() == remote.sha("main")
    assert run_git("status", "--porcelain", cwd=path) == ""


async def test_a_worktree_whose_add_was_killed_before_its_checkout_no_longer_breaks_fetch(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    half = await mirror.add_worktree(tmp_path / "lanes" / "half", branch="lane-half", start="main")
    whole = await mirror.checkout(tmp_path / "lanes" / "whole", "main")
    admin = Path(run_git("rev-parse", "--git-dir", cwd=half.path))
    (admin / "HEAD").write_text("0" * 40 + "\n")  # the placeholder `git worktree add` writes first
    with pytest.raises(GitError, match="bad object"):
        await git("fetch", "--quiet", "origin", cwd=mirror.path)

    await mirror.fetch()

    assert not admin.exists() and not half.path.exists()
    assert await whole.head() == remote.sha("main")
    again = await mirror.add_worktree(tmp_path / "lanes" / "half", branch="lane-half", start="main")
    assert await again.head() == remote.sha("main")


async def test_a_plain_directory_at_the_worktree_path_is_replaced(mirror: Mirror, remote: Remote, tmp_path: Path):
    path = tmp_path / "lanes" / "a"
    path.mkdir(parents=True)
    (path / "junk").write_text("not a worktree")

    tree = await mirror.add_worktree(path, branch="lane-a", start="main")

    assert not (path / "junk").exists()
    assert await tree.head() == remote.sha("main")


async def test_a_branch_held_by_a_deleted_worktree_elsewhere_can_be_cut_again(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    gone = await mirror.add_worktree(tmp_path / "host-1" / "a", branch="lane-a", start="main")
    shutil.rmtree(gone.path)

    tree = await mirror.add_worktree(tmp_path / "host-2" / "a", branch="lane-a", start="main")

    assert await tree.head() == remote.sha("main")


async def test_remove_worktree_removes_it_and_never_fails_when_already_gone(mirror: Mirror, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "dirty.txt").write_text("uncommitted\n")

    await mirror.remove_worktree(tree.path)
    await mirror.remove_worktree(tree.path)
    await mirror.remove_worktree(tmp_path / "never-existed")

    assert not tree.path.exists()
    assert str(tree.path) not in run_git("worktree", "list", cwd=mirror.path)


async def test_a_worktree_path_overlapping_the_mirror_is_refused(mirror: Mirror, tmp_path: Path):
    await mirror.ensure()
    for path in (mirror.path / "inside", tmp_path / "work"):
        with pytest.raises(ValueError, match="overlaps the mirror"):
            await mirror.add_worktree(path, branch="lane-a", start="main")
    assert await mirror.resolve("main")


async def test_an_invalid_branch_name_is_refused(mirror: Mirror, tmp_path: Path):
    with pytest.raises(ValueError, match="not a valid git branch name"):
        await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane..a", start="main")


async def test_checkout_is_a_detached_fresh_worktree_of_the_ref(mirror: Mirror, remote: Remote, tmp_path: Path):
    tree = await mirror.checkout(tmp_path / "plan", "main")

    assert tree.branch is None
    assert await tree.head() == remote.sha("main")
    assert run_git("rev-parse", "--abbrev-ref", "HEAD", cwd=tree.path) == "HEAD"
    assert (tree.path / "src" / "app.py").is_file()


# --- commits ----------------------------------------------------------------------------------


def install_failing_hooks(hooks: Path, witness: Path) -> None:
    hooks.mkdir(parents=True, exist_ok=True)
    for hook in (
        "pre-commit",
        "commit-msg",
        "prepare-commit-msg",
        "post-commit",
        "pre-merge-commit",
        "pre-push",
        "post-checkout",
    ):
        script = hooks / hook
        script.write_text(f"#!/bin/sh\necho {hook} >> '{witness}'\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


async def test_commit_all_commits_everything_as_the_identity_and_runs_no_hooks(mirror: Mirror, tmp_path: Path):
    await mirror.ensure()
    witness = tmp_path / "hooks-ran"
    install_failing_hooks(mirror.path / "hooks", witness)
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "new.py").write_text("x = 1\n")
    (tree.path / "README.md").write_text("changed\n")
    (tree.path / "docs" / "guide.md").unlink()

    sha = await tree.commit_all("Add new.py\n\nCloses #5", LANEBOT)

    assert sha == await tree.head()
    assert log_of(tree.path, "-1", "--format=%an|%ae|%cn|%ce") == (
        "lanebot[bot]|41898282+lanebot[bot]@users.noreply.github.com|"
        "lanebot[bot]|41898282+lanebot[bot]@users.noreply.github.com"
    )
    assert log_of(tree.path, "-1", "--format=%B") == "Add new.py\n\nCloses #5"
    assert run_git("status", "--porcelain", cwd=tree.path) == ""
    assert not witness.exists()


async def test_commit_all_returns_none_when_nothing_changed(mirror: Mirror, remote: Remote, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")

    assert await tree.commit_all("nothing", LANEBOT) is None
    assert await tree.head() == remote.sha("main")


def test_the_app_identity_is_the_bot_account_github_shows():
    identity = Identity.for_app("lanebot", 41898282)

    assert identity == Identity("lanebot[bot]", "41898282+lanebot[bot]@users.noreply.github.com")


def test_an_identity_git_cannot_record_is_refused():
    with pytest.raises(ValueError, match="email"):
        Identity("lanebot", "a\nb@example.com")


async def test_changed_paths_names_added_modified_deleted_and_both_sides_of_a_rename(mirror: Mirror, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "added.py").write_text("new\n")
    (tree.path / "README.md").write_text("modified\n")
    (tree.path / "docs" / "guide.md").unlink()
    (tree.path / "src" / "app.py").rename(tree.path / "src" / "main.py")
    await tree.commit_all("lane work", LANEBOT)

    changed = await tree.changed_paths("main")

    assert sorted(changed) == ["README.md", "added.py", "docs/guide.md", "src/app.py", "src/main.py"]


async def test_changed_paths_ignores_what_the_base_gained_since_the_cut(mirror: Mirror, remote: Remote, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "mine.py").write_text("mine\n")
    await tree.commit_all("lane work", LANEBOT)
    remote.commit({"theirs.py": "theirs\n"}, "sibling merged")
    await mirror.fetch()

    assert await tree.changed_paths("main") == ["mine.py"]


# --- merges -----------------------------------------------------------------------------------


async def lane_branch(remote: Remote, name: str, files: dict[str, str | None]) -> str:
    run_git("fetch", "--quiet", "origin", cwd=remote.clone)
    run_git("checkout", "--quiet", "-B", name, "origin/main", cwd=remote.clone)
    return remote.commit(files, f"work of {name}", branch=name)


async def test_merge_no_ff_makes_a_two_parent_commit_with_exactly_the_message(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    lane_head = await lane_branch(remote, "lanebot-5-a", {"a.py": "a\n"})
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "integration", branch="lanebot/5", start="main")
    base = await tree.head()

    result = await tree.merge_no_ff("lanebot-5-a", "Merge lane 'a' of #5", LANEBOT)

    assert result.ok and result.conflicted == ()
    assert result.sha == await tree.head()
    assert log_of(tree.path, "-1", "--format=%P") == f"{base} {lane_head}"
    assert log_of(tree.path, "-1", "--format=%B") == "Merge lane 'a' of #5"
    assert log_of(tree.path, "-1", "--format=%an %cn") == "lanebot[bot] lanebot[bot]"


async def test_merging_a_lane_already_merged_changes_nothing(mirror: Mirror, remote: Remote, tmp_path: Path):
    await lane_branch(remote, "lane-a", {"a.py": "a\n"})
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "integration", branch="lanebot/5", start="main")
    first = await tree.merge_no_ff("lane-a", "Merge lane 'a' of #5", LANEBOT)

    again = await tree.merge_no_ff("lane-a", "Merge lane 'a' of #5", LANEBOT)

    assert again.ok and again.sha == first.sha


async def conflicting_merge(mirror: Mirror, remote: Remote, tmp_path: Path):
    await lane_branch(remote, "lane-a", {"README.md": "from lane a\n", "a.py": "a\n"})
    await lane_branch(remote, "lane-b", {"README.md": "from lane b\n", "b.py": "b\n"})
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "integration", branch="lanebot/5", start="main")
    assert (await tree.merge_no_ff("lane-a", "Merge lane 'a' of #5", LANEBOT)).ok
    return tree, await tree.head()


async def test_a_conflicting_merge_names_the_paths_and_abort_restores_the_tree(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    tree, before = await conflicting_merge(mirror, remote, tmp_path)

    result = await tree.merge_no_ff("lane-b", "Merge lane 'b' of #5", LANEBOT)

    assert not result.ok and result.sha is None
    assert result.conflicted == ("README.md",)
    assert await tree.unmerged_paths() == ["README.md"]
    await tree.abort_merge()
    assert await tree.head() == before
    assert run_git("status", "--porcelain", cwd=tree.path) == ""
    assert (tree.path / "README.md").read_text() == "from lane a\n"
    await tree.abort_merge()  # nothing in progress: nothing to do


async def test_a_resolver_that_stages_a_file_still_holding_markers_is_caught(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    tree, _ = await conflicting_merge(mirror, remote, tmp_path)
    await tree.merge_no_ff("lane-b", "Merge lane 'b' of #5", LANEBOT)
    (tree.path / "b.py").write_text("b = 'resolved'\n")
    run_git("add", "README.md", "b.py", cwd=tree.path)  # markers still in README.md, now hidden from the index

    assert await tree.unmerged_paths() == []
    assert await tree.files_with_conflict_markers() == ["README.md"]
    assert await tree.files_with_conflict_markers(["README.md", "b.py", "gone.txt"]) == ["README.md"]


async def test_a_resolved_merge_is_concluded_by_commit_all_with_two_parents(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    tree, before = await conflicting_merge(mirror, remote, tmp_path)
    await tree.merge_no_ff("lane-b", "Merge lane 'b' of #5", LANEBOT)
    (tree.path / "README.md").write_text("from lane a\nfrom lane b\n")

    assert await tree.files_with_conflict_markers() == []
    sha = await tree.commit_all("Merge lane 'b' of #5", LANEBOT)

    assert log_of(tree.path, "-1", "--format=%P") == f"{before} {remote.sha('lane-b')}"
    assert sha == await tree.head()


async def test_a_merge_resolved_to_the_tree_it_started_from_is_still_concluded(
    mirror: Mirror, remote: Remote, tmp_path: Path
):
    await lane_branch(remote, "lane-a", {"README.md": "from lane a\n"})
    await lane_branch(remote, "lane-b", {"README.md": "from lane b\n"})
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "integration", branch="lanebot/5", start="main")
    await tree.merge_no_ff("lane-a", "Merge lane 'a' of #5", LANEBOT)
    before = await tree.head()
    assert not (await tree.merge_no_ff("lane-b", "Merge lane 'b' of #5", LANEBOT)).ok
    (tree.path / "README.md").write_text("from lane a\n")  # the resolver keeps our side entirely

    sha = await tree.commit_all("Merge lane 'b' of #5", LANEBOT)

    assert sha is not None and sha != before
    assert log_of(tree.path, "-1", "--format=%P") == f"{before} {remote.sha('lane-b')}"


def test_marker_scan_needs_a_marker_at_the_start_of_a_line(tmp_path: Path):
    from bot.edges.git import _has_conflict_marker

    cases = {
        "opening.txt": "ok\n<<<<<<< HEAD\nx\n",
        "closing-only.txt": "x\n>>>>>>> lane-b\n",
        "first-line.txt": "<<<<<<< HEAD\n",
        "quoted.txt": "the marker looks like '<<<<<<< HEAD'\n",
        "rst-heading.txt": "Title\n=======\n",
        "arrows.txt": "a <<<<<<<< b\n>>>>>>>>\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)

    flagged = sorted(name for name in cases if _has_conflict_marker(tmp_path / name))

    assert flagged == ["closing-only.txt", "first-line.txt", "opening.txt"]


async def test_marker_scan_refuses_paths_outside_the_worktree(mirror: Mirror, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")

    with pytest.raises(ValueError, match="not a relative path inside"):
        await tree.files_with_conflict_markers(["../../etc/passwd"])


# --- pushes -----------------------------------------------------------------------------------


async def test_push_puts_the_lane_branch_on_the_remote(mirror: Mirror, remote: Remote, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lanebot/5-a", start="main")
    (tree.path / "a.py").write_text("a\n")
    sha = await tree.commit_all("lane a", LANEBOT)

    await tree.push("lanebot/5-a")

    assert remote.sha("lanebot/5-a") == sha
    assert await mirror.resolve("lanebot/5-a") == sha  # the mirror knows what it pushed


async def test_push_refuses_to_overwrite_work_it_has_not_seen(mirror: Mirror, remote: Remote, tmp_path: Path):
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="main", start="main")
    seen = await tree.head()
    (tree.path / "ours.txt").write_text("ours\n")
    ours = await tree.commit_all("ours", LANEBOT)
    theirs = remote.commit({"theirs.txt": "theirs\n"}, "someone else pushed meanwhile")

    with pytest.raises(GitError, match="rejected") as plain:
        await tree.push("main")
    assert not isinstance(plain.value, PushRejected)  # no lease: a refusal of another kind
    with pytest.raises(PushRejected, match="stale info"):
        await tree.push("main", expected=seen)
    assert remote.sha("main") == theirs

    await tree.push("main", expected=theirs)
    assert remote.sha("main") == ours


async def test_force_push_replaces_the_remote_branch(mirror: Mirror, remote: Remote, tmp_path: Path):
    remote.commit({"old.txt": "old\n"}, "an older attempt", branch="lane-a")
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "new.txt").write_text("new\n")
    retry = await tree.commit_all("the retry", LANEBOT)

    await tree.push("lane-a", force=True)

    assert remote.sha("lane-a") == retry


async def test_push_with_an_empty_expectation_only_creates(mirror: Mirror, remote: Remote, tmp_path: Path):
    remote.commit({"x.txt": "x\n"}, "already there", branch="lane-a")
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")

    new = await mirror.add_worktree(tmp_path / "lanes" / "new", branch="lane-new", start="main")

    with pytest.raises(GitError, match="stale info"):
        await tree.push("lane-a", expected="")
    await new.push("lane-new", expected="")
    assert remote.sha("lane-new") == await new.head()
    with pytest.raises(ValueError, match="not a full commit sha"):
        await tree.push("lane-a", expected="abc")


async def test_has_commits_says_whether_every_commit_is_in_the_mirror(mirror: Mirror, remote: Remote):
    await mirror.fetch()
    known = await mirror.resolve("main")
    unfetched = remote.commit({"later.txt": "later\n"}, "pushed after the fetch")

    assert await mirror.has_commits([known])
    assert await mirror.has_commits([])
    assert not await mirror.has_commits([known, unfetched])
    assert not await mirror.has_commits(["main"])  # names are not commits here: only full shas
    await mirror.fetch()
    assert await mirror.has_commits([known, unfetched])


async def test_what_this_process_pushed_is_remembered_per_mirror_and_branch(mirror: Mirror, tmp_path: Path):
    assert mirror.pushed_here("lanebot/5") is None
    mirror.note_pushed("lanebot/5", "a" * 40)

    assert mirror.pushed_here("lanebot/5") == "a" * 40
    assert mirror.pushed_here("lanebot/6") is None
    other = Mirror(tmp_path / "other-work", "octo/repo", str(tmp_path / "remote.git"))
    assert other.pushed_here("lanebot/5") is None


# --- the environment --------------------------------------------------------------------------


async def test_the_users_and_the_systems_git_config_never_apply(tmp_path: Path, monkeypatch):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".gitconfig").write_text("[leak]\n\thome = yes\n")
    (home / ".config" / "git" / "config").write_text("[leak]\n\txdg = yes\n")
    (tmp_path / "global").write_text("[leak]\n\tglobal = yes\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'leak.parameters=yes'")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))

    listing = await git("config", "--list", "--show-origin", cwd=tmp_path)

    assert "leak" not in listing.stdout
    assert "core.hookspath=/dev/null" in listing.stdout


def test_the_git_environment_disables_prompts_and_forces_the_c_locale():
    env = git_environment(parent={"PATH": "/usr/bin", "GIT_ASKPASS": "/bin/echo", "GIT_TRACE": "1", "LANG": "de_DE"})

    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["LC_ALL"] == "C"
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert "GIT_ASKPASS" not in env and "GIT_TRACE" not in env


def test_a_caller_cannot_override_the_security_settings():
    with pytest.raises(ValueError, match="GIT_CONFIG_COUNT"):
        git_environment(extra={"GIT_CONFIG_COUNT": "0"})


async def test_a_failing_command_says_which_and_why(tmp_path: Path):
    with pytest.raises(GitError) as raised:
        await git("rev-parse", "--verify", "no-such-ref", cwd=tmp_path)

    error = raised.value
    assert error.argv == ("git", "rev-parse", "--verify", "no-such-ref")
    assert error.returncode == 128
    assert "not a git repository" in error.stderr
    assert str(error).startswith("`git rev-parse --verify no-such-ref` failed with exit status 128")
    assert "not a git repository" in str(error)


async def test_check_false_returns_the_failure_instead_of_raising(tmp_path: Path):
    result = await git("rev-parse", "--verify", "HEAD", cwd=tmp_path, check=False)

    assert result.returncode == 128 and "not a git repository" in result.stderr


async def test_a_token_that_git_echoes_back_is_hidden_in_the_error_and_the_log(tmp_path: Path, caplog):
    run_git("init", "--quiet", str(tmp_path / "repo"), cwd=tmp_path)
    token = "ghs_EchoedBack0123456789"
    caplog.set_level(logging.DEBUG, logger="bot.edges.git")

    with pytest.raises(GitError) as raised:
        await git("show", token, cwd=tmp_path / "repo", credentials=Credentials(token))

    error = raised.value
    assert token not in str(error) and token not in error.stderr and token not in " ".join(error.argv)
    assert "***" in error.stderr
    assert token not in caplog.text


def test_credentials_never_show_their_token():
    credentials = Credentials("ghs_NeverShown")

    assert "ghs_NeverShown" not in repr(credentials) and "ghs_NeverShown" not in str(credentials)
    with pytest.raises(ValueError) as raised:
        Credentials("ghs_bad\nInjected: header")
    assert "ghs_bad" not in str(raised.value)


# --- the token, over HTTP ---------------------------------------------------------------------


def install_git_shim(tmp_path: Path, monkeypatch) -> Path:
    """Put a `git` first on PATH that records its argv (NUL after each argument, RS after each call)
    and runs the real git."""
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir(exist_ok=True)
    argv_log = tmp_path / "argv.log"
    shim = shim_dir / "git"
    shim.write_text(
        "#!/bin/sh\n"
        f"for arg in \"$@\"; do printf '%s\\0' \"$arg\" >> '{argv_log}'; done\n"
        f"printf '\\036' >> '{argv_log}'\n"
        f"cat /proc/$$/environ >> '{argv_log}.environ'\n"
        f"exec '{REAL_GIT}' \"$@\"\n"
    )
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    return argv_log


def read_argv_log(argv_log: Path) -> list[list[str]]:
    if not argv_log.exists():
        return []
    return [call.split("\0")[:-1] for call in argv_log.read_text().split("\036") if call]


class SmartHTTP(ThreadingHTTPServer):
    """git http-backend behind HTTP Basic auth that accepts only x-access-token:<token>."""

    daemon_threads = True

    def __init__(self, project_root: Path, token: str) -> None:
        super().__init__(("127.0.0.1", 0), GitBackendHandler)
        self.project_root = project_root
        self.expected_authorization = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class GitBackendHandler(BaseHTTPRequestHandler):
    server: SmartHTTP

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:
        pass  # the test reads self.server.requests instead

    def _serve(self) -> None:
        self.server.requests.append((self.command, self.path, dict(self.headers.items())))
        if self.headers.get("Authorization") != self.server.expected_authorization:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, headers, body = self._run_backend(self._request_body())
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _request_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks = []
        while size := int(self.rfile.readline().split(b";")[0], 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        self.rfile.readline()
        return b"".join(chunks)

    def _run_backend(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        path, _, query = self.path.partition("?")
        env = {
            "PATH": os.environ["PATH"],
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(self.server.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
        }
        done = subprocess.run([REAL_GIT, "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value))
        return status, headers, payload


@pytest.fixture
def http_remote(tmp_path: Path, remote: Remote) -> Iterator[tuple[SmartHTTP, str]]:
    token = "ghs_InstallationToken0123456789abcdef"
    server = SmartHTTP(tmp_path, token)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server, token
    server.shutdown()
    server.server_close()
    thread.join()


def files_holding(root: Path, needles: list[bytes]) -> list[Path]:
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and any(needle in path.read_bytes() for needle in needles)
    ]


async def test_the_token_reaches_the_remote_only_as_a_header_and_leaves_no_trace(
    http_remote: tuple[SmartHTTP, str], remote: Remote, tmp_path: Path, monkeypatch, caplog
):
    server, token = http_remote
    argv_log = install_git_shim(tmp_path, monkeypatch)
    caplog.set_level(logging.DEBUG, logger="bot.edges.git")

    async def installation_token() -> Credentials:
        return Credentials(token)

    mirror = Mirror(tmp_path / "work", "octo/widgets", f"{server.url}/remote.git", installation_token)
    await mirror.fetch()
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lanebot/5-a", start="main")
    (tree.path / "a.py").write_text("a\n")
    sha = await tree.commit_all("lane a", LANEBOT)
    await tree.push("lanebot/5-a")

    assert remote.sha("lanebot/5-a") == sha
    assert server.requests and all(
        headers.get("Authorization") == server.expected_authorization for _, _, headers in server.requests
    )
    secrets = [token, base64.b64encode(f"x-access-token:{token}".encode()).decode()]
    assert all(secret not in path for _, path, _ in server.requests for secret in secrets)
    calls = read_argv_log(argv_log)
    assert any(call[:1] == ["push"] for call in calls) and any(call[:1] == ["fetch"] for call in calls)
    assert not [call for call in calls if any(secret in arg for arg in call for secret in secrets)]
    environments = Path(f"{argv_log}.environ").read_bytes()
    assert b"GIT_CONFIG_GLOBAL=/" in environments
    assert not [secret for secret in secrets if secret.encode() in environments], "the token was in git's environment"
    assert not [record for record in caplog.records if any(secret in record.getMessage() for secret in secrets)]
    traces = [secret.encode() for secret in secrets]
    assert files_holding(mirror.path, traces) == []
    assert files_holding(tree.path / ".git", traces) == [] and (tree.path / ".git").is_file()
    assert run_git("config", "--get", "remote.origin.url", cwd=mirror.path) == f"{server.url}/remote.git"


async def test_the_credentials_file_exists_only_while_its_git_call_runs(
    http_remote: tuple[SmartHTTP, str], remote: Remote, tmp_path: Path, monkeypatch
):
    server, token = http_remote
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile caches the folder it found first

    async def installation_token() -> Credentials:
        return Credentials(token)

    mirror = Mirror(tmp_path / "work", "octo/widgets", f"{server.url}/remote.git", installation_token)
    await mirror.fetch()

    assert list((tmp_path / "tmp").iterdir()) == []


async def test_cancelling_a_git_call_against_a_stalled_remote_stops_its_transport_too(tmp_path: Path):
    stalled = socket.socket()
    stalled.bind(("127.0.0.1", 0))
    stalled.listen(8)  # accepts connections (the kernel does) and never answers
    marker = f"127.0.0.1:{stalled.getsockname()[1]}/stalled-{uuid.uuid4().hex[:8]}.git"
    run_git("init", "--quiet", str(tmp_path / "repo"), cwd=tmp_path)
    try:
        call = asyncio.ensure_future(git("fetch", f"http://{marker}", cwd=tmp_path / "repo"))
        deadline = time.monotonic() + 10
        while not any("remote-http" in cmdline(pid) for pid in processes_with(marker)):
            assert time.monotonic() < deadline, "git-remote-http never started"
            await asyncio.sleep(0.05)

        call.cancel()
        # Without its transport stopped, the call would end only when git gives up on the remote (a minute).
        done, _ = await asyncio.wait({call}, timeout=10)
        assert done, "the cancelled git call did not end"
        assert call.cancelled()

        assert await asyncio.to_thread(gone, marker, 5.0), "git's transport outlived the cancelled call"
    finally:
        stalled.close()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


async def test_a_wrong_token_fails_the_push_with_a_clear_error_that_hides_it(
    http_remote: tuple[SmartHTTP, str], remote: Remote, tmp_path: Path, caplog
):
    server, token = http_remote
    current = Credentials(token)

    async def installation_token() -> Credentials:
        return current

    mirror = Mirror(tmp_path / "work", "octo/widgets", f"{server.url}/remote.git", installation_token)
    tree = await mirror.add_worktree(tmp_path / "lanes" / "a", branch="lane-a", start="main")
    (tree.path / "a.py").write_text("a\n")
    await tree.commit_all("lane a", LANEBOT)
    wrong = "ghs_RevokedToken9876543210"
    current = Credentials(wrong)
    caplog.set_level(logging.DEBUG, logger="bot.edges.git")

    with pytest.raises(GitError) as raised:
        await tree.push("lane-a")

    error = raised.value
    assert error.argv[:2] == ("git", "push")
    assert "the remote refused the credentials" in str(error).lower()
    for secret in (wrong, base64.b64encode(f"x-access-token:{wrong}".encode()).decode()):
        assert secret not in str(error) and secret not in error.stderr and secret not in caplog.text
    assert not remote.has("lane-a")
