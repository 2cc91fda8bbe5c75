"""bot.edges.files: files a repository or an agent leaves under `.lanebot/` are data; lanebot's own are private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bot.edges.files import (
    WorktreeFileError,
    create_private_file,
    private_dir,
    read_worktree_file,
    remove_worktree_file,
    write_private,
    write_worktree_file,
)

SECRET = b"-----BEGIN RSA PRIVATE KEY----- the App's key"


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    tree = tmp_path / "worktree"
    (tree / ".lanebot").mkdir(parents=True)
    return tree


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "host" / "key.pem"
    outside.parent.mkdir()
    outside.write_bytes(SECRET)
    return outside


def _refusal(worktree: Path, relative: str, **options: int) -> str:
    with pytest.raises(WorktreeFileError) as raised:
        read_worktree_file(worktree, relative, **options)
    message = str(raised.value)
    assert "RSA" not in message and "host" not in message  # never the content, nor where a link points
    return message


def test_a_regular_file_is_read_and_an_absent_one_is_none(worktree: Path) -> None:
    (worktree / ".lanebot" / "pr.md").write_text("Title\n\nBody\n", encoding="utf-8")

    assert read_worktree_file(worktree, ".lanebot/pr.md") == b"Title\n\nBody\n"
    assert read_worktree_file(worktree, ".lanebot/fix.json") is None
    assert read_worktree_file(worktree / "gone", ".lanebot/pr.md") is None
    assert read_worktree_file(worktree, "missing/.lanebot/pr.md") is None


def test_a_symlink_to_a_secret_file_outside_is_refused_naming_the_file(worktree: Path, secret: Path) -> None:
    (worktree / ".lanebot" / "pr.md").symlink_to(secret)

    message = _refusal(worktree, ".lanebot/pr.md")

    assert message == "`.lanebot/pr.md` is a symlink; lanebot reads only regular files there"


def test_a_symlink_inside_the_worktree_is_refused_too(worktree: Path) -> None:
    (worktree / "README.md").write_text("hello\n", encoding="utf-8")
    (worktree / ".lanebot" / "fix.json").symlink_to("../README.md")

    assert "is a symlink" in _refusal(worktree, ".lanebot/fix.json")


def test_a_symlinked_lanebot_folder_is_refused(worktree: Path, secret: Path) -> None:
    (worktree / ".lanebot").rmdir()
    (worktree / ".lanebot").symlink_to(secret.parent)

    message = _refusal(worktree, ".lanebot/key.pem")

    assert "`.lanebot/key.pem`" in message and "`.lanebot` on its path is a link" in message


def test_a_lanebot_that_is_a_file_is_refused(worktree: Path) -> None:
    (worktree / ".lanebot").rmdir()
    (worktree / ".lanebot").write_text("not a folder\n", encoding="utf-8")

    assert "is a link or not a folder" in _refusal(worktree, ".lanebot/pr.md")


@pytest.mark.parametrize(
    "relative", ["../host/key.pem", ".lanebot/../../host/key.pem", ".lanebot/./../../host/key.pem", "/etc/passwd"]
)
def test_a_path_that_leaves_the_worktree_is_refused(worktree: Path, secret: Path, relative: str) -> None:
    with pytest.raises(WorktreeFileError, match="not a plain path inside the worktree"):
        read_worktree_file(worktree, relative)
    with pytest.raises(WorktreeFileError):
        write_worktree_file(worktree, relative, "overwritten")
    assert secret.read_bytes() == SECRET


def test_a_fifo_is_refused_without_blocking(worktree: Path) -> None:
    os.mkfifo(worktree / ".lanebot" / "findings.json")

    assert _refusal(worktree, ".lanebot/findings.json") == (
        "`.lanebot/findings.json` is not a regular file; lanebot reads only regular files there"
    )


def test_a_folder_in_place_of_the_file_is_refused(worktree: Path) -> None:
    (worktree / ".lanebot" / "verdicts.json").mkdir()

    assert "is not a regular file" in _refusal(worktree, ".lanebot/verdicts.json")


def test_an_oversized_file_is_refused(worktree: Path) -> None:
    (worktree / ".lanebot" / "units.jsonl").write_bytes(b"x" * 101)

    assert read_worktree_file(worktree, ".lanebot/units.jsonl", max_bytes=101) == b"x" * 101
    assert _refusal(worktree, ".lanebot/units.jsonl", max_bytes=100) == (
        "`.lanebot/units.jsonl` is larger than 100 bytes; lanebot reads at most that"
    )


def test_writing_replaces_a_committed_symlink_and_never_writes_through_it(worktree: Path, secret: Path) -> None:
    (worktree / ".lanebot" / "diff.patch").symlink_to(secret)

    write_worktree_file(worktree, ".lanebot/diff.patch", "diff --git a/x b/x\n")

    target = worktree / ".lanebot" / "diff.patch"
    assert not target.is_symlink() and target.read_text(encoding="utf-8") == "diff --git a/x b/x\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert secret.read_bytes() == SECRET


def test_writing_replaces_a_symlinked_lanebot_folder(worktree: Path, secret: Path) -> None:
    (worktree / ".lanebot").rmdir()
    (worktree / ".lanebot").symlink_to(secret.parent)

    write_worktree_file(worktree, ".lanebot/key.pem", "lanebot's own\n")
    write_worktree_file(worktree, ".lanebot/threads.json", "[]\n")

    assert not (worktree / ".lanebot").is_symlink() and (worktree / ".lanebot").is_dir()
    assert secret.read_bytes() == SECRET
    assert sorted(p.name for p in secret.parent.iterdir()) == ["key.pem"]
    assert read_worktree_file(worktree, ".lanebot/threads.json") == b"[]\n"


def test_writing_replaces_a_fifo_and_a_folder(worktree: Path) -> None:
    os.mkfifo(worktree / ".lanebot" / "pr.md")
    (worktree / ".lanebot" / "findings-to-check.json").mkdir()
    (worktree / ".lanebot" / "findings-to-check.json" / "inner").write_text("x", encoding="utf-8")

    write_worktree_file(worktree, ".lanebot/pr.md", "Title\n")
    write_worktree_file(worktree, ".lanebot/findings-to-check.json", "{}\n")

    assert read_worktree_file(worktree, ".lanebot/pr.md") == b"Title\n"
    assert read_worktree_file(worktree, ".lanebot/findings-to-check.json") == b"{}\n"


def test_removing_never_goes_through_a_link(worktree: Path, secret: Path) -> None:
    (worktree / ".lanebot").rmdir()
    (worktree / ".lanebot").symlink_to(secret.parent)

    remove_worktree_file(worktree, ".lanebot/key.pem")

    assert secret.read_bytes() == SECRET
    (worktree / ".lanebot").unlink()
    (worktree / ".lanebot").mkdir()
    (worktree / ".lanebot" / "pr.md").symlink_to(secret)
    remove_worktree_file(worktree, ".lanebot/pr.md")
    assert not (worktree / ".lanebot" / "pr.md").is_symlink() and secret.read_bytes() == SECRET
    remove_worktree_file(worktree, ".lanebot/pr.md")  # absent: nothing to do


def test_private_folders_and_files_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        tmp_path.chmod(0o755)
        folder = private_dir(tmp_path / "work" / "scripts" / "7")
        write_private(folder / "check.sh", "true\n")
        create_private_file(tmp_path / "db" / "lanebot.db")
        create_private_file(tmp_path / "db" / "lanebot.db")  # exists: left as it is
    finally:
        os.umask(previous)

    for made in (tmp_path / "work", tmp_path / "work" / "scripts", folder, tmp_path / "db"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    assert stat.S_IMODE((folder / "check.sh").stat().st_mode) == 0o600
    assert (folder / "check.sh").read_text(encoding="utf-8") == "true\n"
    assert stat.S_IMODE((tmp_path / "db" / "lanebot.db").stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # an existing folder is not changed


def test_write_private_replaces_a_link_instead_of_following_it(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "script.sh").symlink_to(secret)

    write_private(tmp_path / "script.sh", "echo hi\n")

    assert secret.read_bytes() == SECRET
    assert not (tmp_path / "script.sh").is_symlink()
