"""The sandbox's git repositories: bare repositories under one root, one per GitHub repository.

Synchronous `git` subprocesses (call them from a worker thread in async code). Refs and names
reach git only as arguments after validation, never through a shell. The root's layout is the
one `git http-backend` serves: `<root>/<owner>/<name>.git`.

A pull request's diff is read as GitHub shows it (`base...head`, three lines of context) and
parsed, without I/O, into `FileDiff`s: the lines a review comment may be put on, per side, and
the hunk text (`diff_hunk`) and `position` GitHub gives such a comment.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_SHA = re.compile(r"^[0-9a-f]{40}$")
_COMMIT_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}
EMPTY_SHA = "0" * 40
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")
Side = str  # "LEFT" (the base's lines) or "RIGHT" (the head's)
# One commit of `git log`: an RS before each commit, a US after each field (control characters that
# commit messages do not hold in practice).
_LOG_FORMAT = "%x1e" + "%x1f".join(("%H", "%T", "%an", "%ae", "%cn", "%ce", "%cI", "%B")) + "%x1f"


class GitError(Exception):
    """A git command failed; the message carries git's own words."""


class MergeConflict(GitError):
    """The head does not merge into the base without conflicts."""


def valid_name(name: str) -> bool:
    return bool(_NAME.match(name)) and name not in (".", "..") and not name.endswith(".git")


def valid_ref_name(ref: str) -> bool:
    """What git check-ref-format accepts for a branch, checked without a subprocess."""
    if not ref or ref.startswith(("-", "/")) or ref.endswith(("/", ".", ".lock")) or "@{" in ref or ".." in ref:
        return False
    return not any(ch in ref for ch in " ~^:?*[\\\x7f") and all(ord(ch) >= 32 for ch in ref) and "//" not in ref


@dataclass(frozen=True)
class FileEntry:
    path: str
    name: str
    sha: str
    size: int
    kind: str  # "file", "dir", "symlink" or "submodule"
    content: bytes | None = None


@dataclass(frozen=True)
class DiffLine:
    """One line of a hunk: its mark (' ', '+' or '-'), its numbers in the old and new file, its text."""

    mark: str
    old: int | None
    new: int | None
    text: str

    def number_on(self, side: Side) -> int | None:
        return self.old if side == "LEFT" else self.new


@dataclass(frozen=True)
class Hunk:
    header: str
    lines: tuple[DiffLine, ...]
    position: int  # GitHub's position of the header: 0 for a file's first hunk, then counting on

    def index_of(self, line: int, side: Side) -> int | None:
        return next((i for i, entry in enumerate(self.lines) if entry.number_on(side) == line), None)

    def text_through(self, index: int) -> str:
        """The hunk from its header down to line `index`: what GitHub stores as a comment's diff_hunk."""
        return "\n".join([self.header, *(entry.mark + entry.text for entry in self.lines[: index + 1])])


@dataclass(frozen=True)
class LinePlace:
    """Where a line sits in a file's diff."""

    hunk: Hunk
    index: int

    @property
    def position(self) -> int:
        return self.hunk.position + self.index + 1

    @property
    def diff_hunk(self) -> str:
        return self.hunk.text_through(self.index)


@dataclass(frozen=True)
class FileDiff:
    path: str  # the head's path (the base's for a deleted file)
    hunks: tuple[Hunk, ...]

    def find(self, line: int, side: Side) -> LinePlace | None:
        """The place of `line` on `side`, if the diff shows it there (as an added, removed or context line)."""
        for hunk in self.hunks:
            index = hunk.index_of(line, side)
            if index is not None:
                return LinePlace(hunk, index)
        return None

    def at_position(self, position: int) -> tuple[Side, int] | None:
        """The (side, line) GitHub's deprecated `position` names, or None for a header or past the end."""
        for hunk in self.hunks:
            index = position - hunk.position - 1
            if 0 <= index < len(hunk.lines):
                entry = hunk.lines[index]
                return ("LEFT", entry.old) if entry.mark == "-" else ("RIGHT", entry.new)  # type: ignore[return-value]
        return None


def parse_diff(text: str) -> dict[str, FileDiff]:
    """The files of a `git diff` (unified, with ---/+++ lines), by path; binary files have no hunks."""
    files: dict[str, FileDiff] = {}
    old_path: str | None = None
    path: str | None = None
    hunks: list[Hunk] = []
    header: str | None = None
    lines: list[DiffLine] = []
    old = new = position = 0

    def close_hunk() -> None:
        nonlocal header, lines, position
        if header is not None:
            hunks.append(Hunk(header, tuple(lines), position))
            position += len(lines) + 1
        header, lines = None, []

    def close_file() -> None:
        nonlocal hunks, position
        close_hunk()
        name = path or old_path
        if name is not None:
            files[name] = FileDiff(name, tuple(hunks))
        hunks, position = [], 0

    for raw in text.split("\n"):
        if raw.startswith("diff --git "):
            close_file()
            old_path = path = None
        elif header is None and raw.startswith("--- "):
            old_path = _diff_path(raw[4:])
        elif header is None and raw.startswith("+++ "):
            path = _diff_path(raw[4:])
        elif raw.startswith("@@"):
            close_hunk()
            match = _HUNK_HEADER.match(raw)
            if match is None:
                continue
            header, old, new = raw, int(match.group(1)), int(match.group(2))
        elif header is not None and raw[:1] in (" ", "+", "-"):
            mark = raw[0]
            lines.append(DiffLine(mark, old if mark != "+" else None, new if mark != "-" else None, raw[1:]))
            old += mark != "+"
            new += mark != "-"
    close_file()
    return files


def _diff_path(raw: str) -> str | None:
    """The path of a ---/+++ line ('a/x', 'b/x' or /dev/null); git adds a tab after names with spaces."""
    name = raw.rstrip("\t")
    if name == "/dev/null":
        return None
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    return name[2:] if name[:2] in ("a/", "b/") else name


class GitStore:
    """Bare repositories under `root`."""

    def __init__(self, root: Path, *, git: str = "git") -> None:
        self.root = root
        self.git = git
        root.mkdir(parents=True, exist_ok=True)

    def path(self, owner: str, name: str) -> Path:
        return self.root / owner.lower() / f"{name.lower()}.git"

    def path_info(self, owner: str, name: str) -> str:
        """The repository's path below the root, as `git http-backend` wants it in PATH_INFO."""
        return f"/{owner.lower()}/{name.lower()}.git"

    def _run(
        self,
        repository: Path | None,
        *args: str,
        env: dict[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        command = [self.git]
        if repository is not None:
            command += ["--git-dir", str(repository)]
        full_env = {**os.environ, **_COMMIT_ENVIRONMENT, **(env or {})}
        result = subprocess.run([*command, *args], capture_output=True, env=full_env, cwd=cwd, check=False)
        if check and result.returncode != 0:
            words = result.stderr.decode(errors="replace").strip() or result.stdout.decode(errors="replace").strip()
            verb = next((arg for arg in args if not arg.startswith("-") and "=" not in arg), args[0])
            raise GitError(f"git {verb} failed: {words}")
        return result

    def create_from_folder(
        self,
        owner: str,
        name: str,
        folder: Path,
        *,
        branch: str,
        author: str,
        email: str,
        message: str = "Initial commit",
    ) -> str:
        """A new bare repository whose `branch` holds one commit of everything in `folder`
        (honouring its .gitignore); the folder itself is left untouched. Returns the commit SHA."""
        repository = self.path(owner, name)
        if repository.exists():
            raise GitError(f"{repository} already exists")
        repository.parent.mkdir(parents=True, exist_ok=True)
        self._run(None, "init", "--bare", "--quiet", f"--initial-branch={branch}", str(repository))
        self._run(repository, "config", "http.receivepack", "true")
        with tempfile.TemporaryDirectory() as scratch:
            env = {
                "GIT_INDEX_FILE": str(Path(scratch) / "index"),
                "GIT_WORK_TREE": str(folder),
                "GIT_AUTHOR_NAME": author,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": author,
                "GIT_COMMITTER_EMAIL": email,
            }
            self._run(repository, "add", "--all", ".", env=env, cwd=folder)
            tree = self._run(repository, "write-tree", env=env).stdout.decode().strip()
            commit = self._run(repository, "commit-tree", tree, "-m", message, env=env).stdout.decode().strip()
        self._run(repository, "update-ref", f"refs/heads/{branch}", commit)
        return commit

    def branches(self, owner: str, name: str) -> dict[str, str]:
        output = self._run(
            self.path(owner, name), "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/heads"
        ).stdout.decode()
        return dict(line.split(" ", 1) for line in output.splitlines() if line)

    def refs(self, owner: str, name: str) -> dict[str, str]:
        output = self._run(self.path(owner, name), "for-each-ref", "--format=%(refname) %(objectname)").stdout.decode()
        return dict(line.split(" ", 1) for line in output.splitlines() if line)

    def resolve(self, owner: str, name: str, ref: str) -> str | None:
        """The commit a branch, tag or SHA names, or None."""
        if not ref or ref.startswith("-"):
            return None
        candidates = [ref] if _SHA.match(ref) else [f"refs/heads/{ref}", f"refs/tags/{ref}", ref]
        for candidate in candidates:
            result = self._run(
                self.path(owner, name), "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", check=False
            )
            if result.returncode == 0:
                return result.stdout.decode().strip()
        return None

    def parent(self, owner: str, name: str, sha: str) -> str:
        result = self._run(self.path(owner, name), "rev-parse", "--verify", "--quiet", f"{sha}^", check=False)
        return result.stdout.decode().strip() if result.returncode == 0 else EMPTY_SHA

    def branch_at(self, owner: str, name: str, sha: str) -> str | None:
        """A branch whose tip is this commit (the first by name when several are), or None."""
        tips = [branch for branch, tip in self.branches(owner, name).items() if tip == sha]
        return sorted(tips)[0] if tips else None

    def commit_files(
        self, owner: str, name: str, branch: str, files: dict[str, str], *, message: str, author: str, email: str
    ) -> str:
        """A new commit on `branch` (which must exist) writing `files` over its tree, as a person's
        push makes one; the branch moves only if no one moved it meanwhile. Returns the commit SHA."""
        repository = self.path(owner, name)
        tip = self.resolve(owner, name, branch)
        if tip is None or not valid_ref_name(branch):
            raise GitError(f"there is no branch {branch!r}")
        with tempfile.TemporaryDirectory() as scratch:
            env = {
                "GIT_INDEX_FILE": str(Path(scratch) / "index"),
                "GIT_AUTHOR_NAME": author,
                "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": author,
                "GIT_COMMITTER_EMAIL": email,
            }
            self._run(repository, "read-tree", tip, env=env)
            for path, text in files.items():
                source = Path(scratch) / "blob"
                source.write_text(text)
                blob = self._run(repository, "hash-object", "-w", str(source)).stdout.decode().strip()
                self._run(repository, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._run(repository, "write-tree", env=env).stdout.decode().strip()
            commit = self._run(repository, "commit-tree", tree, "-p", tip, "-m", message, env=env).stdout.decode()
        self._run(repository, "update-ref", f"refs/heads/{branch}", commit.strip(), tip)
        return commit.strip()

    def head_commit(self, owner: str, name: str, sha: str) -> dict[str, Any]:
        """The commit as a `check_suite` webhook's `head_commit` shows it: id, tree, message, when, who."""
        fields = "%x00".join(("%H", "%T", "%an", "%ae", "%cn", "%ce", "%cI", "%B"))
        raw = self._run(self.path(owner, name), "show", "-s", f"--format={fields}", sha).stdout.decode()
        commit, tree, author, author_email, committer, committer_email, when, message = raw.split("\0", 7)
        return {
            "id": commit,
            "tree_id": tree,
            "message": message.strip(),
            "timestamp": when.strip(),
            "author": {"name": author, "email": author_email},
            "committer": {"name": committer, "email": committer_email},
        }

    def pushed_commits(
        self, owner: str, name: str, old: str | None, new: str, tips: list[str], *, limit: int
    ) -> list[dict[str, Any]]:
        """The commits a push of `new` onto a ref that held `old` (None: the push created it) brought,
        as a `push` webhook lists them: oldest first, the newest `limit` of them, each `distinct` when
        no ref held it before the push (`tips`: every ref's commit then). A new ref brings only what no
        ref held, so a branch made at an existing commit brings none."""
        repository = self.path(owner, name)
        exclude = [f"^{tip}" for tip in sorted(set(tips))]
        fresh = set(self._run(repository, "rev-list", new, *exclude, "--").stdout.decode().split())
        listed = self._log(repository, "-n", str(limit), new, *(exclude if old is None else [f"^{old}"]))
        return [{**commit, "distinct": commit["id"] in fresh} for commit in listed]

    def commit_details(self, owner: str, name: str, sha: str) -> dict[str, Any]:
        """One commit as `pushed_commits` shows it, without `distinct`."""
        [commit] = self._log(self.path(owner, name), "-n", "1", sha)
        return commit

    def _log(self, repository: Path, *revisions: str) -> list[dict[str, Any]]:
        """Commits oldest first: id, tree, message, when, who, and the paths added, removed and
        modified against the first parent (a merge's too, as GitHub lists them)."""
        output = self._run(
            repository,
            "-c",
            "core.quotepath=false",
            "log",
            "--reverse",
            "--no-renames",
            "--diff-merges=first-parent",
            "--name-status",
            f"--format={_LOG_FORMAT}",
            *revisions,
            "--",
        ).stdout.decode(errors="replace")
        commits = []
        for record in output.split("\x1e")[1:]:
            commit, tree, author, author_email, committer, committer_email, when, rest = record.split("\x1f", 7)
            message, _, changes = rest.rpartition("\x1f")
            paths: dict[str, list[str]] = {"added": [], "removed": [], "modified": []}
            for line in changes.splitlines():
                status, _, path = line.partition("\t")
                if path:
                    paths[{"A": "added", "D": "removed"}.get(status[:1], "modified")].append(path)
            commits.append(
                {
                    "id": commit,
                    "tree_id": tree,
                    "message": message.strip(),
                    "timestamp": when,
                    "author": {"name": author, "email": author_email},
                    "committer": {"name": committer, "email": committer_email},
                    **paths,
                }
            )
        return commits

    def commits_between(self, owner: str, name: str, base: str, head: str) -> int:
        output = self._run(self.path(owner, name), "rev-list", "--count", f"{base}..{head}").stdout.decode()
        return int(output.strip() or 0)

    def diff_stats(self, owner: str, name: str, base: str, head: str) -> tuple[int, int, int]:
        """(additions, deletions, changed files) of head against its merge base with base."""
        output = self._run(self.path(owner, name), "diff", "--numstat", f"{base}...{head}").stdout.decode()
        additions = deletions = files = 0
        for line in output.splitlines():
            added, deleted, _ = line.split("\t", 2)
            files += 1
            additions += int(added) if added.isdigit() else 0
            deletions += int(deleted) if deleted.isdigit() else 0
        return additions, deletions, files

    def diff(self, owner: str, name: str, base: str, head: str) -> dict[str, FileDiff]:
        """The diff GitHub shows for a pull request at `head`: against its merge base with `base`."""
        output = self._run(
            self.path(owner, name),
            "-c",
            "core.quotepath=false",
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--unified=3",
            f"{base}...{head}",
        ).stdout
        return parse_diff(output.decode(errors="replace"))

    def changed_paths(self, owner: str, name: str, old: str, new: str) -> set[str]:
        """The paths whose content differs between two commits."""
        output = self._run(
            self.path(owner, name), "-c", "core.quotepath=false", "diff", "--name-only", "--no-renames", old, new
        ).stdout.decode(errors="replace")
        return {line for line in output.splitlines() if line}

    def is_ancestor(self, owner: str, name: str, ancestor: str, descendant: str) -> bool:
        result = self._run(self.path(owner, name), "merge-base", "--is-ancestor", ancestor, descendant, check=False)
        return result.returncode == 0

    def mergeable(self, owner: str, name: str, base: str, head: str) -> bool:
        """Whether head merges into base without conflicts (git merge-tree, nothing written to refs)."""
        result = self._run(self.path(owner, name), "merge-tree", "--write-tree", base, head, check=False)
        return result.returncode == 0

    def merge(
        self,
        owner: str,
        name: str,
        base_branch: str,
        head: str,
        *,
        message: str,
        author: str,
        email: str,
        committer: tuple[str, str] = ("GitHub", "noreply@github.com"),
    ) -> str:
        """A merge commit of `head` into `base_branch` (as GitHub's "Create a merge commit" makes it:
        the base tip, then the head, as parents), moved onto the branch only if the branch has not
        moved meanwhile. Its SHA. Raises MergeConflict when the two do not merge cleanly."""
        repository = self.path(owner, name)
        base = (
            self._run(
                repository, "rev-parse", "--verify", "--quiet", f"refs/heads/{base_branch}^{{commit}}", check=False
            )
            .stdout.decode()
            .strip()
        )
        if not base:
            raise GitError(f"no branch {base_branch!r} to merge into")
        merged = self._run(repository, "merge-tree", "--write-tree", base, head, check=False)
        if merged.returncode != 0:
            raise MergeConflict(f"merging {head[:12]} into {base_branch} conflicts")
        tree = merged.stdout.decode().splitlines()[0].strip()
        env = {
            "GIT_AUTHOR_NAME": author,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": committer[0],
            "GIT_COMMITTER_EMAIL": committer[1],
        }
        commit = (
            self._run(repository, "commit-tree", tree, "-p", base, "-p", head, "-m", message, env=env)
            .stdout.decode()
            .strip()
        )
        self._run(repository, "update-ref", f"refs/heads/{base_branch}", commit, base)
        return commit

    def delete_ref(self, owner: str, name: str, ref: str) -> str | None:
        """Delete the full ref (`refs/heads/x`, `refs/tags/x`); the SHA it held, or None if there was none."""
        repository = self.path(owner, name)
        held = self._run(repository, "rev-parse", "--verify", "--quiet", ref, check=False).stdout.decode().strip()
        if not held or not ref.startswith(("refs/heads/", "refs/tags/")):
            return None
        self._run(repository, "update-ref", "-d", ref, held)
        return held

    def read(self, owner: str, name: str, commit: str, path: str) -> FileEntry | list[FileEntry] | None:
        """The file at `path` in `commit` (with its bytes), the entries of a directory, or None."""
        repository = self.path(owner, name)
        clean = path.strip("/")
        if not clean:
            return self._list_tree(repository, commit, "")
        listing = self._run(repository, "ls-tree", "--long", "-z", commit, "--", clean, check=False)
        entries = [entry for entry in listing.stdout.split(b"\0") if entry]
        if listing.returncode != 0 or not entries:
            return None
        entry = self._parse_ls_tree(entries[0])
        if entry.path != clean:
            return None
        if entry.kind == "dir":
            return self._list_tree(repository, commit, clean)
        content = (
            self._run(repository, "cat-file", "blob", entry.sha).stdout if entry.kind in ("file", "symlink") else None
        )
        return FileEntry(entry.path, entry.name, entry.sha, entry.size, entry.kind, content)

    def _list_tree(self, repository: Path, commit: str, directory: str) -> list[FileEntry]:
        spec = f"{commit}:{directory}" if directory else f"{commit}^{{tree}}"
        listing = self._run(repository, "ls-tree", "--long", "-z", spec, check=False)
        prefix = f"{directory}/" if directory else ""
        entries = []
        for raw in listing.stdout.split(b"\0"):
            if raw:
                entry = self._parse_ls_tree(raw)
                entries.append(FileEntry(prefix + entry.path, entry.name, entry.sha, entry.size, entry.kind))
        return entries

    @staticmethod
    def _parse_ls_tree(raw: bytes) -> FileEntry:
        meta, _, path_bytes = raw.partition(b"\t")
        mode, kind, sha, size = meta.decode().split()
        path = path_bytes.decode(errors="surrogateescape")
        file_kind = {"tree": "dir", "commit": "submodule"}.get(kind, "symlink" if mode == "120000" else "file")
        return FileEntry(path, path.rsplit("/", 1)[-1], sha, int(size) if size.isdigit() else 0, file_kind)
