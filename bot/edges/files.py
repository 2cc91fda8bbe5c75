"""Files on the runner host: lanebot's own (private) and those a repository or an agent leaves.

- `read_worktree_file(root, relative)`: a file under `root` (a worktree) read as data: a regular
  file, reached without following any link, never outside `root`, at most `max_bytes`. Absent is
  None; anything else (a link anywhere on the path, a `..`, a FIFO, a directory, too large) raises
  `WorktreeFileError`, whose message names the file, never its content or where a link points.
- `write_worktree_file(root, relative, text)`: write such a file without following a link the
  repository committed there: links and non-directories on the way are removed and replaced.
- `remove_worktree_file(root, relative)`: remove it, never through a link.
- `private_dir(path)` creates the folders of `path` that are missing 0700; `write_private(path,
  text)` writes a file 0600; `create_private_file(path)` makes an empty one 0600 if absent.
- `read_transcript(workdir, recorded)`: a session's transcript as its row records it (the dashboard
  reads it), only when that path is a `.jsonl` under `<workdir>/transcripts/` as written (no `..`),
  reached without following a link; its first `max_bytes` and whether it goes on past them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from bot.edges.private import private_dir

__all__ = [
    "MAX_WORKTREE_FILE_BYTES",
    "WorktreeFileError",
    "create_private_file",
    "private_dir",
    "read_transcript",
    "read_worktree_file",
    "remove_worktree_file",
    "write_private",
    "write_worktree_file",
]

MAX_WORKTREE_FILE_BYTES = 1024 * 1024

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class WorktreeFileError(Exception):
    """A file lanebot reads as data is not a regular file inside the worktree."""


class TranscriptRefused(WorktreeFileError):
    """A recorded transcript path is not one lanebot reads: outside `<workdir>/transcripts`, or not a file there."""


def _parts(relative: str) -> list[str]:
    path = PurePosixPath(relative)
    parts = [part for part in path.parts if part not in ("", ".")]
    if path.is_absolute() or not parts or any(part == ".." for part in parts) or "\\" in relative:
        raise WorktreeFileError(f"`{relative}` is not a plain path inside the worktree; lanebot reads only those")
    return parts


def _open_dir(name: str, parent: int | None, relative: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise WorktreeFileError(
            f"`{relative}`: `{name}` on its path is a link or not a folder; lanebot reads only regular files there"
        ) from error


def read_worktree_file(root: Path, relative: str, *, max_bytes: int = MAX_WORKTREE_FILE_BYTES) -> bytes | None:
    """The bytes of `root/relative`, None when it (or a folder on its way) does not exist."""
    parts = _parts(relative)
    try:
        current = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        for name in parts[:-1]:
            try:
                following = _open_dir(name, current, relative)
            except FileNotFoundError:
                return None
            os.close(current)
            current = following
        try:
            info = os.lstat(parts[-1], dir_fd=current)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            raise WorktreeFileError(f"`{relative}` is a symlink; lanebot reads only regular files there")
        if not stat.S_ISREG(info.st_mode):
            raise WorktreeFileError(f"`{relative}` is not a regular file; lanebot reads only regular files there")
        try:
            descriptor = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=current)
        except OSError as error:
            raise WorktreeFileError(f"`{relative}` cannot be opened as a regular file: {error.strerror}") from error
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise WorktreeFileError(f"`{relative}` is not a regular file; lanebot reads only regular files there")
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise WorktreeFileError(f"`{relative}` is larger than {max_bytes} bytes; lanebot reads at most that")
        return data
    finally:
        os.close(current)


def write_worktree_file(root: Path, relative: str, text: str) -> None:
    """Write `text` to `root/relative` (0600), replacing any link or non-folder on the way, never following one."""
    parts = _parts(relative)
    current = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for name in parts[:-1]:
            _remove_unless(current, name, stat.S_ISDIR)
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=current)
            following = _open_dir(name, current, relative)
            os.close(current)
            current = following
        _remove_unless(current, parts[-1], stat.S_ISREG)
        descriptor = os.open(
            parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o600, dir_fd=current
        )
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
    finally:
        os.close(current)


def _remove_unless(parent: int, name: str, kind_ok: Callable[[int], bool] | None) -> None:
    """Remove `name` in the folder `parent` unless it is (not a link and) of the kind `kind_ok` accepts."""
    try:
        info = os.lstat(name, dir_fd=parent)
    except FileNotFoundError:
        return
    if kind_ok is not None and kind_ok(info.st_mode):
        return
    if stat.S_ISDIR(info.st_mode):
        descriptor = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
        try:
            for entry in os.listdir(descriptor):
                _remove_unless(descriptor, entry, None)
        finally:
            os.close(descriptor)
        os.rmdir(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)


def remove_worktree_file(root: Path, relative: str) -> None:
    """Remove `root/relative` (a folder with what it holds), never through a link: when a folder on its
    way is a link or not a folder, there is nothing of the worktree's to remove."""
    parts = _parts(relative)
    try:
        current = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except FileNotFoundError:
        return
    try:
        for name in parts[:-1]:
            try:
                following = _open_dir(name, current, relative)
            except (FileNotFoundError, WorktreeFileError):
                return
            os.close(current)
            current = following
        _remove_unless(current, parts[-1], None)
    finally:
        os.close(current)


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, 0600 (a link there is replaced, not followed); its missing folders 0700."""
    private_dir(path.parent)
    if path.is_symlink():
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def create_private_file(path: Path) -> None:
    """Create `path` empty and 0600 when it does not exist (its missing folders 0700)."""
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600))


MAX_TRANSCRIPT_READ_BYTES = 4 * 1024 * 1024
TRANSCRIPTS_FOLDER = "transcripts"


def read_transcript(
    workdir: Path, recorded: str, *, max_bytes: int = MAX_TRANSCRIPT_READ_BYTES
) -> tuple[bytes, bool] | None:
    """The first `max_bytes` of the transcript at `recorded` and whether the file goes on past them;
    None when it does not exist (on this host). Raises `TranscriptRefused` for a path that is not a
    `.jsonl` under `<workdir>/transcripts/` as written (absolute, no `..`), or that reaches a link, a
    FIFO or a folder on its way; the message never names where a link points."""
    path = PurePosixPath(recorded)
    root = PurePosixPath(os.fspath(workdir)) / TRANSCRIPTS_FOLDER
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise TranscriptRefused("the transcript's recorded path is not under this host's LANEBOT_WORKDIR") from None
    parts = list(relative.parts)
    if not path.is_absolute() or not parts or ".." in parts or not parts[-1].endswith(".jsonl"):
        raise TranscriptRefused("the transcript's recorded path is not a .jsonl file under LANEBOT_WORKDIR/transcripts")
    try:
        current = os.open(workdir / TRANSCRIPTS_FOLDER, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise TranscriptRefused("LANEBOT_WORKDIR/transcripts is a link or not a folder") from error
    try:
        for name in parts[:-1]:
            try:
                following = os.open(name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=current)
            except FileNotFoundError:
                return None
            except OSError as error:
                raise TranscriptRefused(f"`{name}` on the transcript's path is a link or not a folder") from error
            os.close(current)
            current = following
        try:
            descriptor = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=current)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise TranscriptRefused("the transcript is a link or cannot be opened as a regular file") from error
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise TranscriptRefused("the transcript is not a regular file")
            data = handle.read(max_bytes + 1)
        return data[:max_bytes], len(data) > max_bytes
    finally:
        os.close(current)
