"""Git on the runner host: a bare mirror cache per repository, worktrees cut from it, commits,
merges and pushes as the GitHub App installation.

Every git call goes through `git()`: `asyncio.create_subprocess_exec` with an argument list (no
shell), in an environment built from scratch so nothing of the user's or the system's git setup
leaks in (no global or system config, no inherited `GIT_DIR`/`GIT_TRACE`, no terminal prompts, no
hooks, no fsmonitor, `LC_ALL=C`). An installation token reaches git only as an
`http.<remote-url>.extraHeader` (GitHub's documented `x-access-token` Basic credentials) in a
global config file of that one call: 0600, in a fresh 0700 temporary folder, named by
`GIT_CONFIG_GLOBAL` and deleted when the call ends. So it is never in argv or in a process
environment (`/proc/<pid>/environ` of git and its `git-remote-http` child hold only the file's
path), the remote URL, a log line, an exception message or any `.git/config`.

Each call runs in its own process group; when the calling task is cancelled the whole group is
killed, so a `git-remote-http` stalled on a remote does not outlive the call.

Refs have one meaning throughout: a *ref* given to `Mirror.resolve`, `add_worktree`, `checkout`,
`changed_paths` and `merge_no_ff` is a branch name as it is on the remote (as last fetched, so
`fetch()` before cutting) or a commit sha. Local branches of the mirror are never read by name:
a stale local ref must not give a lane the wrong tree.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import logging
import os
import re
import shlex
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from bot.core.diffstat import FileChange, from_numstat_z
from bot.core.refnames import is_valid_ref_name
from bot.edges.private import private_dir

logger = logging.getLogger(__name__)

REMOTE = "origin"
FETCH_REFSPECS = ("+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*")
# Inherited from lanebot's environment: what git needs to find itself and to reach the network.
INHERITED_ENV = (
    "PATH",
    "TMPDIR",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
)
# Set by git() alone; a caller's env may not override them.
CONTROLLED_ENV = re.compile(
    r"GIT_CONFIG(_COUNT|_KEY_\d+|_VALUE_\d+|_GLOBAL|_NOSYSTEM|_PARAMETERS|_SYSTEM)?|GIT_TERMINAL_PROMPT"
    r"|GIT_ASKPASS|SSH_ASKPASS|LC_ALL"
)
# A transfer slower than this many bytes a second for this many seconds is abandoned, not waited on forever.
LOW_SPEED_LIMIT = "1000"
LOW_SPEED_TIME_S = "60"
LOCK_POLL_S = 0.05
# For commits and merges in worktrees: the mirror's `git maintenance run --auto` (gc --auto) is
# left to `fetch`, which every lane and every merge round starts with, rather than run after
# each of them as well.
NO_AUTO_MAINTENANCE = ("-c", "maintenance.auto=false")
# A worktree's checkout waits on the disk for each file it creates, not on a core: several
# `checkout--worker`s keep several creations in flight (docs/benchmarks.md, issue 17).
PARALLEL_CHECKOUT = ("-c", "checkout.workers=4")
STDERR_TAIL_LINES = 20
STDERR_TAIL_CHARS = 2000
HIDDEN = "***"

_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
_HEX = re.compile(r"[0-9a-f]{4,64}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/@]*@")
_AUTH_FAILURE = ("Authentication failed", "could not read Username", "could not read Password", "returned error: 403")
_OPENING_MARKER = b"<<<<<<< "
_CLOSING_MARKER = b">>>>>>> "


@dataclass(frozen=True)
class Identity:
    """Who commits and merges: author and committer both."""

    name: str
    email: str

    def __post_init__(self) -> None:
        for label, value in (("name", self.name), ("email", self.email)):
            if not value.strip() or any(c in value for c in "\n\r\0<>"):
                raise ValueError(
                    f"commit identity {label} {value!r} is empty or contains a newline, NUL, '<' or '>'; "
                    "git cannot record it"
                )

    @classmethod
    def for_app(cls, slug: str, bot_user_id: int) -> Identity:
        """The App's bot account, as GitHub shows its commits. `bot_user_id` is the id of the user
        `<slug>[bot]` (GET /users/<slug>[bot]), not the App ID."""
        return cls(name=f"{slug}[bot]", email=f"{bot_user_id}+{slug}[bot]@users.noreply.github.com")

    def env(self) -> dict[str, str]:
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }


@dataclass(frozen=True)
class Credentials:
    """An installation token for HTTPS remotes. `url` limits the header to requests under that URL
    (a `Mirror` sets it to its remote); None sends it with every HTTP request of the git call."""

    token: str | None = field(default=None, repr=False)
    url: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and (not self.token or any(c.isspace() or ord(c) < 32 for c in self.token)):
            raise ValueError("the installation token is empty or contains whitespace or control characters")

    def __repr__(self) -> str:
        shown = "None" if self.token is None else f"'{HIDDEN}'"
        return f"Credentials(token={shown}, url={self.url!r})"

    def secrets(self) -> tuple[str, ...]:
        """Every form in which the token could show up in git's output."""
        if self.token is None:
            return ()
        return (self.token, _basic_credentials(self.token))

    def config_file(self) -> str:
        """The git config file text that sends the token (empty without one)."""
        if self.token is None:
            return ""
        quoted = (self.url or "").replace("\\", "\\\\").replace('"', '\\"')
        section = f'[http "{quoted}"]' if self.url else "[http]"
        return f"{section}\n\textraHeader = Authorization: Basic {_basic_credentials(self.token)}\n"


def _basic_credentials(token: str) -> str:
    return base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass(frozen=True)
class CompletedGit:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class GitError(RuntimeError):
    """A git command failed. `argv` and `stderr` have every form of the token replaced by ***."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, *, cwd: Path | None = None, stdout: str = ""):
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.cwd = cwd
        super().__init__(self._describe(stdout))

    def _describe(self, stdout: str) -> str:
        output = self.stderr.strip() or stdout.strip()
        tail = "\n".join(output.splitlines()[-STDERR_TAIL_LINES:])[-STDERR_TAIL_CHARS:]
        where = f" in {self.cwd}" if self.cwd else ""
        message = f"`{shlex.join(self.argv)}` failed with exit status {self.returncode}{where}"
        message += f":\n{tail}" if tail else " and printed nothing"
        if any(sign in output for sign in _AUTH_FAILURE):
            message += (
                "\nThe remote refused the credentials: check that the installation token is current "
                "and that the App is installed on this repository with contents: write."
            )
        return message


class PushRejected(GitError):
    """A push the remote refused because its branch is no longer where the push expected it
    (`--force-with-lease` found it moved): fetch, then decide again."""


class RefNotFound(LookupError):
    """A ref named neither a branch on the remote (as last fetched) nor a commit in the mirror."""


@dataclass(frozen=True)
class MergeResult:
    ok: bool
    sha: str | None
    conflicted: tuple[str, ...] = ()


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, HIDDEN)
    return text


def git_environment(
    extra: Mapping[str, str] | None = None,
    parent: Mapping[str, str] | None = None,
    *,
    global_config: Path | None = None,
) -> dict[str, str]:
    """The environment of one git call: isolated from every git configuration but the repository's
    and `global_config` (the call's credentials file, or none)."""
    extra = dict(extra or {})
    refused = sorted(name for name in extra if CONTROLLED_ENV.fullmatch(name))
    if refused:
        raise ValueError(f"git() sets {', '.join(refused)} itself; pass credentials= for authentication")
    source = os.environ if parent is None else parent
    env = {name: source[name] for name in INHERITED_ENV if name in source}
    env.setdefault("PATH", os.defpath)
    env.update(
        LC_ALL="C",
        GIT_TERMINAL_PROMPT="0",
        GIT_CONFIG_GLOBAL=str(global_config) if global_config else "/dev/null",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_HTTP_LOW_SPEED_LIMIT=LOW_SPEED_LIMIT,
        GIT_HTTP_LOW_SPEED_TIME=LOW_SPEED_TIME_S,
    )
    # Repository content (hooks, attributes of the user's home) must never run or apply here.
    config = [
        ("core.hooksPath", "/dev/null"),
        ("core.attributesFile", "/dev/null"),
        ("core.excludesFile", "/dev/null"),
        ("commit.gpgSign", "false"),
        ("credential.helper", ""),
        ("core.fsmonitor", "false"),
    ]
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for index, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env.update(extra)
    return env


async def git(
    *args: str,
    cwd: Path,
    credentials: Credentials | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    input: bytes | None = None,
) -> CompletedGit:
    """Run `git *args` in `cwd`; raise `GitError` on a non-zero exit when `check`."""
    secrets = credentials.secrets() if credentials else ()
    argv = ("git", *args)
    shown = tuple(_scrub(arg, secrets) for arg in argv)
    logger.debug("%s (in %s)", shlex.join(shown), cwd)
    with _credentials_file(credentials) as global_config:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=git_environment(env, global_config=global_config),
            stdin=asyncio.subprocess.DEVNULL if input is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await process.communicate(input)
        except asyncio.CancelledError:
            # A git left running would keep holding index and ref locks after the task is gone, and
            # its transport child (git-remote-http) would keep waiting on the remote.
            _kill_group(process.pid)
            if process.returncode is None:
                await process.wait()
            raise
    assert process.returncode is not None
    result = CompletedGit(
        argv=shown,
        returncode=process.returncode,
        stdout=_scrub(out.decode("utf-8", "surrogateescape"), secrets),
        stderr=_scrub(err.decode("utf-8", "surrogateescape"), secrets),
    )
    if check and result.returncode != 0:
        raise GitError(shown, result.returncode, result.stderr, cwd=cwd, stdout=result.stdout)
    return result


@contextmanager
def _credentials_file(credentials: Credentials | None) -> Iterator[Path | None]:
    """A private global config file holding the token for one call, removed afterwards; None without a token."""
    text = credentials.config_file() if credentials else ""
    if not text:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="lanebot-git-"))  # 0700
    path = folder / "config"
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        yield path
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _nul_separated(text: str) -> list[str]:
    return [item for item in text.split("\0") if item]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _refuse_option(value: str, what: str) -> None:
    if not value or value.startswith("-"):
        raise ValueError(f"{what} {value!r} is empty or starts with '-'; git would read it as an option")


_TASK_LOCKS: dict[Path, asyncio.Lock] = {}
# Per mirror, in this process: fetches begun and the ticket of the last that succeeded.
_FETCHES_BEGUN: dict[Path, int] = {}
_FETCHES_DONE: dict[Path, int] = {}
# Per mirror and branch: the sha this process last pushed there (`Mirror.note_pushed`).
_PUSHED_HERE: dict[tuple[Path, str], str] = {}
# Per mirror: the config file's stamp when its remote URL was last found (or set) to be this URL.
_URL_CHECKED: dict[Path, tuple[tuple[int, int, int], str]] = {}


def _config_stamp(repo: Path) -> tuple[int, int, int]:
    status = (repo / "config").stat()
    return (status.st_ino, status.st_size, status.st_mtime_ns)


@asynccontextmanager
async def _file_lock(path: Path, sleep: Callable[[float], Awaitable[object]]) -> AsyncIterator[None]:
    """An exclusive fcntl lock on `path`, polled so a waiting task never blocks the event loop."""
    private_dir(path.parent)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(descriptor)  # releases the lock


class Mirror:
    """The bare mirror cache of one repository, `<workdir>/mirrors/<owner>/<name>.git`.

    Its remote branches live under refs/remotes/origin/ (pruned on fetch); lane and integration
    branches are local branches of the mirror, checked out in worktrees. Creating the mirror,
    fetching into it and pushing from it hold a per-mirror lock: an asyncio.Lock within this
    process and an fcntl lock on `<name>.lock` beside it for other processes.
    """

    def __init__(
        self,
        workdir: Path,
        repository: str,
        remote_url: str,
        credentials_provider: Callable[[], Awaitable[Credentials]] | None = None,
        *,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        owner, _, name = repository.partition("/")
        if not (_OWNER.fullmatch(owner) and _NAME.fullmatch(name) and name not in {".", ".."}):
            raise ValueError(f"repository {repository!r} is not 'owner/name' as GitHub spells it")
        if _URL_USERINFO.match(remote_url):
            raise ValueError("the remote URL carries credentials; give it without them and pass a credentials_provider")
        _refuse_option(remote_url, "remote URL")
        self.repository = repository
        self.remote_url = remote_url
        self.path = Path(workdir).absolute() / "mirrors" / owner / f"{name}.git"
        self._lock_path = self.path.with_name(f"{name}.lock")
        self._credentials_provider = credentials_provider
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"Mirror({self.repository!r}, path={str(self.path)!r})"

    async def ensure(self) -> None:
        """Create the mirror (init, configure, first fetch) unless it exists. Idempotent."""
        async with self._locked():
            await self._ensure_locked()

    async def fetch(self) -> None:
        """Bring every branch and tag of the remote into the mirror, pruning what the remote deleted.
        A fetch that began after this call and succeeded while it waited for the lock serves it too."""
        asked_after = _FETCHES_BEGUN.get(self.path, 0)
        async with self._locked():
            if _FETCHES_DONE.get(self.path, 0) > asked_after:
                return
            ticket = _FETCHES_BEGUN[self.path] = _FETCHES_BEGUN.get(self.path, 0) + 1
            if not await self._ensure_locked():
                await self._fetch_locked(self.path)
            _FETCHES_DONE[self.path] = ticket

    async def resolve(self, ref: str) -> str:
        """The commit sha of `ref`: a branch on the remote as last fetched, else a commit sha."""
        await self._ready()
        return await self._resolve(ref)

    async def has_commits(self, shas: Iterable[str]) -> bool:
        """Whether every full sha of `shas` names a commit in the mirror's object store."""
        shas = list(shas)
        if not all(isinstance(sha, str) and _FULL_SHA.fullmatch(sha) for sha in shas):
            return False
        if not shas:
            return True
        await self._ready()
        lookup = "".join(f"{sha}^{{commit}}\n" for sha in shas)
        found = await git("cat-file", "--batch-check=%(objecttype)", cwd=self.path, input=lookup.encode())
        return found.stdout.split() == ["commit"] * len(shas)

    def note_pushed(self, branch: str, sha: str) -> None:
        """Remember that this process pushed `branch` to `sha` (see `pushed_here`)."""
        _PUSHED_HERE[(self.path, branch)] = sha

    def pushed_here(self, branch: str) -> str | None:
        """The sha this process last pushed `branch` to (`note_pushed`), or None."""
        return _PUSHED_HERE.get((self.path, branch))

    async def tracked_paths(self, ref: str) -> list[str]:
        """Every file path in the tree of `ref`."""
        sha = await self.resolve(ref)
        listing = await git("ls-tree", "-r", "-z", "--name-only", sha, cwd=self.path)
        return _nul_separated(listing.stdout)

    async def first_parent_merges(self, base: str, head: str) -> list[tuple[str, str]]:
        """(sha, subject) of each merge commit on `head`'s first-parent chain since `base`, oldest first."""
        base_sha, head_sha = await self.resolve(base), await self.resolve(head)
        listing = await git(
            "log",
            "--first-parent",
            "--merges",
            "--reverse",
            "-z",
            "--format=%H %s",
            f"{base_sha}..{head_sha}",
            cwd=self.path,
        )
        return [
            (sha, subject) for sha, _, subject in (entry.partition(" ") for entry in _nul_separated(listing.stdout))
        ]

    async def add_worktree(self, path: Path, *, branch: str, start: str, reset: bool = True) -> Worktree:
        """A worktree at `path` on the local branch `branch`, created at `start`. With `reset`, an
        existing `branch` is moved to `start`; without, an existing `branch` is checked out where
        it is. Whatever a crashed attempt left at `path` is removed first."""
        await self._ready()
        self._check_branch_name(branch)
        # Under the mirror's lock: another lane's `worktree prune`, or a fetch, must not meet a
        # worktree half made.
        async with self._locked():
            sha = await self._resolve(start)
            path = await self._clear_for_worktree(path)
            if not reset and await self._has_local_branch(branch):
                await git(*PARALLEL_CHECKOUT, "worktree", "add", str(path), branch, cwd=self.path)
            else:
                await git(
                    *PARALLEL_CHECKOUT,
                    "worktree",
                    "add",
                    "-B" if reset else "-b",
                    branch,
                    str(path),
                    sha,
                    cwd=self.path,
                )
        return Worktree(path=path, branch=branch, mirror=self)

    async def checkout(self, path: Path, ref: str) -> Worktree:
        """A fresh detached worktree of `ref` at `path` (a read-only view for the planner)."""
        await self._ready()
        async with self._locked():
            sha = await self._resolve(ref)
            path = await self._clear_for_worktree(path)
            await git(*PARALLEL_CHECKOUT, "worktree", "add", "--detach", str(path), sha, cwd=self.path)
        return Worktree(path=path, branch=None, mirror=self)

    async def remove_worktree(self, path: Path) -> None:
        """Remove the worktree at `path` and its bookkeeping; nothing to do if it is already gone."""
        path = self._worktree_path(path)
        if not self._exists():
            if path.exists() or path.is_symlink():
                await asyncio.to_thread(shutil.rmtree, path)
            return
        async with self._locked():
            await self._remove_worktree_locked(path)

    async def _remove_worktree_locked(self, path: Path) -> None:
        # What `git worktree remove --force --force` does (the folder, then its bookkeeping),
        # without its process; `git worktree prune` only when some other worktree vanished.
        if path.exists() or path.is_symlink():
            await asyncio.to_thread(shutil.rmtree, path)
        for entry in self._admin_entries_of(path):
            await asyncio.to_thread(shutil.rmtree, entry, ignore_errors=True)
        with contextlib.suppress(OSError):  # as git leaves it: no `worktrees` folder once empty
            (self.path / "worktrees").rmdir()
        if any(_prunable(entry) for entry in _admin_entries(self.path)):
            await git("worktree", "prune", cwd=self.path)

    def _admin_entries_of(self, path: Path) -> list[Path]:
        """The mirror's bookkeeping folders (`worktrees/<id>`) of the worktree at `path`."""
        dot_git = {str(path / ".git"), os.path.realpath(path / ".git")}
        return [entry for entry in _admin_entries(self.path) if _gitdir(entry) in dot_git]

    async def credentials(self) -> Credentials | None:
        """The provider's credentials, scoped to this mirror's remote URL."""
        if self._credentials_provider is None:
            return None
        return replace(await self._credentials_provider(), url=self.remote_url)

    @asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        task_lock = _TASK_LOCKS.setdefault(self.path, asyncio.Lock())
        async with task_lock, _file_lock(self._lock_path, self._sleep):
            yield

    def _exists(self) -> bool:
        return (self.path / "HEAD").is_file()

    async def _ready(self) -> None:
        # The mirror appears by an atomic rename once complete, so its presence needs no lock.
        if not self._exists():
            await self.ensure()

    async def _ensure_locked(self) -> bool:
        """Create the mirror if absent; True when it was created (and so just fetched)."""
        if self._exists():
            await self._set_remote_url(self.path)
            return False
        building = self.path.with_name(f"{self.path.name}.building")
        for leftover in (building, self.path):  # left by a process that died creating it; we hold the lock
            if leftover.exists():
                await asyncio.to_thread(shutil.rmtree, leftover)
        private_dir(building.parent)
        await git("init", "--quiet", "--bare", str(building), cwd=building.parent)
        await git("config", f"remote.{REMOTE}.url", self.remote_url, cwd=building)
        for refspec in FETCH_REFSPECS:
            await git("config", "--add", f"remote.{REMOTE}.fetch", refspec, cwd=building)
        await self._fetch_locked(building)
        building.rename(self.path)
        _URL_CHECKED[self.path] = (_config_stamp(self.path), self.remote_url)
        logger.info("created the mirror of %s at %s", self.repository, self.path)
        return True

    async def _set_remote_url(self, repo: Path) -> None:
        # git rewrites its config file by renaming a new one over it, so an unchanged inode,
        # size and mtime mean the URL this process last saw or set there is still the one.
        if _URL_CHECKED.get(repo) == (_config_stamp(repo), self.remote_url):
            return
        current = await git("config", "--get", f"remote.{REMOTE}.url", cwd=repo, check=False)
        if current.stdout.strip() != self.remote_url:
            await git("config", f"remote.{REMOTE}.url", self.remote_url, cwd=repo)
        _URL_CHECKED[repo] = (_config_stamp(repo), self.remote_url)

    async def _fetch_locked(self, repo: Path) -> None:
        await self._drop_half_added_worktrees(repo)
        await git(
            "fetch",
            "--quiet",
            "--prune",
            "--no-recurse-submodules",
            REMOTE,
            cwd=repo,
            credentials=await self.credentials(),
        )

    async def _drop_half_added_worktrees(self, repo: Path) -> None:
        """Remove worktrees whose HEAD names no commit of the mirror. `git worktree add` writes a
        placeholder HEAD before its checkout; a process killed in between leaves one behind, and
        every later fetch then fails ("bad object worktrees/<name>/HEAD")."""
        for entry in _admin_entries(repo):
            head = (entry / "HEAD").read_text(errors="replace").strip() if (entry / "HEAD").is_file() else ""
            if head.startswith("ref: "):
                continue
            if _FULL_SHA.fullmatch(head) and set(head) != {"0"}:
                found = await git("cat-file", "-e", f"{head}^{{commit}}", cwd=repo, check=False)
                if found.returncode == 0:
                    continue
            gitdir = _gitdir(entry)
            logger.warning(
                "removing the worktree %s of %s: a killed `git worktree add` left its HEAD at %r",
                entry.name,
                self.repository,
                head[:64],
            )
            await asyncio.to_thread(shutil.rmtree, entry)
            if gitdir.endswith("/.git"):
                await asyncio.to_thread(shutil.rmtree, Path(gitdir).parent, ignore_errors=True)

    async def _resolve(self, ref: str) -> str:
        _refuse_option(ref, "ref")
        candidates = [f"refs/remotes/{REMOTE}/{ref}"]
        if _HEX.fullmatch(ref):
            candidates.append(ref)
        # One `cat-file --batch-check` answers for every candidate, in order; a line break would
        # split a name in two, and no ref or sha holds one.
        if not any(c in ref for c in "\n\r"):
            lookup = "".join(f"{candidate}^{{commit}}\n" for candidate in candidates)
            found = await git(
                "cat-file", "--batch-check=%(objecttype) %(objectname)", cwd=self.path, input=lookup.encode()
            )
            for answer in found.stdout.splitlines():
                kind, _, sha = answer.partition(" ")
                if kind == "commit" and _FULL_SHA.fullmatch(sha):
                    return sha
        raise RefNotFound(
            f"{ref!r} is neither a branch of {self.repository} as last fetched into {self.path} nor a "
            "commit there; fetch() first, and name a branch as on the remote (e.g. 'main') or a commit sha"
        )

    def _check_branch_name(self, branch: str) -> None:
        _refuse_option(branch, "branch name")
        if not is_valid_ref_name(f"refs/heads/{branch}"):
            raise ValueError(f"{branch!r} is not a valid git branch name")

    async def _has_local_branch(self, branch: str) -> bool:
        found = await git("rev-parse", "--quiet", "--verify", f"refs/heads/{branch}", cwd=self.path, check=False)
        return found.returncode == 0

    def _worktree_path(self, path: Path) -> Path:
        path = Path(path).absolute()
        if path == self.path or self.path.is_relative_to(path) or path.is_relative_to(self.path):
            raise ValueError(f"worktree path {path} overlaps the mirror at {self.path}; choose a path outside it")
        return path

    async def _clear_for_worktree(self, path: Path) -> Path:
        """Under the lock: whatever a crashed attempt left at `path` removed."""
        path = self._worktree_path(path)
        await self._remove_worktree_locked(path)
        private_dir(path.parent)
        return path


@dataclass
class Worktree:
    """A checkout of the mirror at `path`, on local branch `branch` (None when detached)."""

    path: Path
    branch: str | None
    mirror: Mirror

    async def head(self) -> str:
        return (await self._git("rev-parse", "--verify", "HEAD")).stdout.strip()

    async def commit_all(self, message: str, identity: Identity) -> str | None:
        """Stage everything (new, modified, deleted) and commit it as `identity`; the new sha, or
        None when nothing changed. While a merge is in progress this concludes it (a two-parent
        commit, even when the resolution changed nothing): check `unmerged_paths` and
        `files_with_conflict_markers` first, since staging hides unresolved conflicts."""
        await self._git("add", "--all")
        merging = await self._merge_in_progress()
        commit = await self._git(
            *NO_AUTO_MAINTENANCE,
            "-c",
            "status.showUntrackedFiles=no",  # what a commit with nothing staged prints, unread
            "commit",
            "--quiet",
            "--no-verify",
            "--file=-",
            env=identity.env(),
            input=message.encode(),
            check=False,
        )
        if commit.returncode != 0:
            unchanged = await self._git("diff", "--cached", "--quiet", check=False)
            if unchanged.returncode == 0 and not merging:
                return None
            raise GitError(commit.argv, commit.returncode, commit.stderr, cwd=self.path, stdout=commit.stdout)
        return await self.head()

    async def changed_paths(self, base: str) -> list[str]:
        """Paths committed on this branch since it left `base` (a rename counts as both paths)."""
        base_sha = await self.mirror.resolve(base)
        diff = await self._git("diff", "--name-only", "-z", "--no-renames", f"{base_sha}...HEAD")
        return _nul_separated(diff.stdout)

    async def diff_stat(self, base: str) -> list[FileChange]:
        """Each path committed on this branch since it left `base`, with its lines added and
        deleted (a rename counts as both paths): `changed_paths` with the counts, in one process."""
        base_sha = await self.mirror.resolve(base)
        diff = await self._git("diff", "--numstat", "-z", "--no-renames", f"{base_sha}...HEAD")
        return from_numstat_z(diff.stdout)

    async def merge_no_ff(self, branch_or_sha: str, message: str, identity: Identity) -> MergeResult:
        """Merge `branch_or_sha` with a merge commit carrying exactly `message`. On a conflict the
        merge stays in progress (for a resolver, or `abort_merge`) and the result names the
        conflicted paths. Already merged: ok, with the current head and no new commit."""
        sha = await self.mirror.resolve(branch_or_sha)
        merge = await self._git(
            *NO_AUTO_MAINTENANCE,
            "merge",
            "--no-ff",
            "--no-edit",
            "--no-verify",
            "--no-rerere-autoupdate",
            "-m",
            message,
            sha,
            env=identity.env(),
            check=False,
        )
        if merge.returncode == 0:
            return MergeResult(ok=True, sha=await self.head())
        conflicted = await self.unmerged_paths()
        if conflicted:
            return MergeResult(ok=False, sha=None, conflicted=tuple(conflicted))
        raise GitError(merge.argv, merge.returncode, merge.stderr, cwd=self.path, stdout=merge.stdout)

    async def move_to(self, ref: str) -> None:
        """Put this detached worktree at `ref`, as a fresh checkout of it: what a command left goes."""
        sha = await self.mirror.resolve(ref)
        await self._git("checkout", "--quiet", "--force", "--detach", sha)
        await self._git("clean", "-d", "--force", "--quiet", "-x")

    async def abort_merge(self) -> None:
        """Abandon a merge in progress, restoring the tree as it was; nothing to do if none is."""
        if await self._merge_in_progress():
            await self._git("merge", "--abort")

    async def unmerged_paths(self) -> list[str]:
        listing = await self._git("diff", "--name-only", "-z", "--diff-filter=U")
        return _unique(_nul_separated(listing.stdout))

    async def files_with_conflict_markers(self, paths: Iterable[str] | None = None) -> list[str]:
        """The files among `paths` whose contents hold a line starting with '<<<<<<< ' or '>>>>>>> '.
        By default: files differing from HEAD (staged or not) and untracked files, i.e. whatever a
        resolver touched before committing; pass the conflicted paths once the merge is committed."""
        candidates = list(paths) if paths is not None else await self._uncommitted_paths()
        files = {path: self._inside(path) for path in candidates}
        return await asyncio.to_thread(lambda: [path for path, file in files.items() if _has_conflict_marker(file)])

    async def push(self, branch: str, *, force: bool = False, expected: str | None = None) -> None:
        """Push local `branch` to the same branch on the remote as the installation. With `expected`
        the push replaces the remote branch only if it is still at that sha ('' for: does not
        exist yet); with `force` alone it replaces whatever is there. Raises `PushRejected` when
        the lease found the remote branch elsewhere."""
        self.mirror._check_branch_name(branch)
        ref = f"refs/heads/{branch}"
        options = []
        if expected is not None:
            if expected and not _FULL_SHA.fullmatch(expected):
                raise ValueError(f"expected {expected!r} is not a full commit sha (or '' for a new branch)")
            options.append(f"--force-with-lease={ref}:{expected}")
        refspec = f"+{ref}:{ref}" if force and expected is None else f"{ref}:{ref}"
        async with self.mirror._locked():
            pushed = await self._git(
                "push",
                "--quiet",
                "--no-verify",
                *options,
                REMOTE,
                refspec,
                credentials=await self.mirror.credentials(),
                check=False,
            )
        if pushed.returncode != 0:
            kind = PushRejected if expected is not None and "(stale info)" in pushed.stderr else GitError
            raise kind(pushed.argv, pushed.returncode, pushed.stderr, cwd=self.path, stdout=pushed.stdout)

    async def _git(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        input: bytes | None = None,
        credentials: Credentials | None = None,
    ) -> CompletedGit:
        return await git(*args, cwd=self.path, env=env, check=check, input=input, credentials=credentials)

    async def _merge_in_progress(self) -> bool:
        # `git commit` and `git merge --abort` look for this file; read from the mirror's
        # bookkeeping, not from the worktree's `.git` file, which the agent can rewrite.
        entries = self.mirror._admin_entries_of(self.path)
        if len(entries) == 1:
            return (entries[0] / "MERGE_HEAD").is_file()
        found = await self._git("rev-parse", "--quiet", "--verify", "MERGE_HEAD", check=False)
        return found.returncode == 0

    async def _uncommitted_paths(self) -> list[str]:
        changed = await self._git("diff", "--name-only", "-z", "--no-renames", "HEAD")
        untracked = await self._git("ls-files", "-z", "--others", "--exclude-standard")
        return _unique([*_nul_separated(changed.stdout), *_nul_separated(untracked.stdout)])

    def _inside(self, path: str) -> Path:
        relative = Path(path)
        if relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"path {path!r} is not a relative path inside the worktree {self.path}")
        return self.path / relative


def _admin_entries(repo: Path) -> list[Path]:
    admin = repo / "worktrees"
    return sorted(admin.iterdir()) if admin.is_dir() else []


def _gitdir(entry: Path) -> str:
    """Where the worktree of bookkeeping folder `entry` has its `.git` file, as git wrote it."""
    try:
        return (entry / "gitdir").read_text(errors="replace").strip()
    except OSError:
        return ""


def _prunable(entry: Path) -> bool:
    """Whether `git worktree prune` would remove `entry`: not locked, and its worktree is gone."""
    if not entry.is_dir():
        return True
    if (entry / "locked").exists():
        return False
    gitdir = _gitdir(entry)
    return not gitdir or not os.path.exists(gitdir)


def _has_conflict_marker(file: Path) -> bool:
    # Symlinks and directories (submodules) hold no text of their own; deleted files hold none at all.
    if file.is_symlink() or not file.is_file():
        return False
    content = file.read_bytes()
    return any(content.startswith(marker) or b"\n" + marker in content for marker in (_OPENING_MARKER, _CLOSING_MARKER))
