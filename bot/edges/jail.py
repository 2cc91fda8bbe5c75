"""The jail: what a command from a plan, a repository or an agent runs in (bubblewrap, `bwrap`).

"sandbox" names the stand-in GitHub (bot/sandbox); this is the other thing, so it is the jail.

A `JailPolicy` says what one command may see; `bwrap_argv` (pure) turns it and the command's argv
into bwrap's argv; `probe` runs bwrap once and says why it does not work, and what to do, or None.
What a jail gives, whatever the policy:

- its own PID namespace (`--unshare-pid`, a fresh `/proc`): lanebot's processes are invisible,
  and when the command ends its namespace ends with it, so nothing it started stays, children
  that called `setsid` or double-forked included (bwrap exits when the command does, its init
  dies with it, and the kernel kills the rest of the namespace); `--die-with-parent` ends it
  when bwrap is killed (a timeout, a cancellation);
- its own IPC, UTS and, where the kernel allows, cgroup namespaces; `--unshare-net` (only a
  loopback of its own) unless `network`; `--new-session` (no terminal to push input into);
- exactly `environment()` (the policy's `env`, plus `HOME` and `TMPDIR`, the private home and
  temp; bwrap adds `PWD`) as its environment, which is the environment bwrap itself must be started with: no
  variable is ever in bwrap's argv, where `/proc/<pid>/cmdline` would show an agent's API key
  to every user of the host, and `/proc/1/environ` inside (bwrap's own init) holds nothing else;
- a filesystem built from nothing: the system's read-only folders (`SYSTEM_READ_ONLY`), a fresh
  `/dev`, an empty `/tmp`, the private home and temp, the policy's `read_only` and
  `writable` paths and the worktree (writable, the working directory), each at its own path. No
  other path of the host exists inside: not lanebot's workdir, database, key or `.env`, not
  other worktrees or mirrors. `hidden` paths are masked (an empty folder, or /dev/null for a
  file) where they would otherwise show under a bound folder (a key kept under /etc).

A git worktree's `.git` is a file pointing into its mirror (`<mirror>/worktrees/<name>`):
`git_binds` finds the mirror (read-only, so no lane can write its config, hooks or objects),
the worktree's own admin folder (writable: the index, so `git status` and `git diff` work), the
files that tie them together (`.git`, `commondir`, `gitdir`: read-only, so a command cannot
point lanebot's own later git calls in that worktree somewhere else), and the mirror's other
worktrees' admin folders (hidden: other lanes' indexes and HEADs are none of its business).

An agent's CLI is wrapped the same way (bot.runner.jailing.agent_jail): `network=True`, its own
credentials in `env`, and its program bound read-only where it is installed (`program_binds`: an
npm package's whole `node_modules`, else the binary itself).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_BWRAP",
    "GitBinds",
    "INSTALL_HINT",
    "SYSTEM_READ_ONLY",
    "JailPolicy",
    "JailProblem",
    "bwrap_argv",
    "find_bwrap",
    "git_binds",
    "probe",
    "program_binds",
]

DEFAULT_BWRAP = "/usr/bin/bwrap"
INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap` on Debian and Ubuntu, `dnf install bubblewrap`)"
# Bound read-only when they exist (`--ro-bind-try`): programs, libraries, and the system's configuration.
SYSTEM_READ_ONLY = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# With the network on, what name resolution may need beside /etc (resolv.conf often links here).
NETWORK_READ_ONLY = ("/run/systemd/resolve",)
JAIL_TMP = "/tmp"
PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class JailPolicy:
    """What one command may see and do. Every path is absolute on the host and appears at the same
    path inside; the caller creates `worktree`, `home` and `tmp` (under the run's own folder)."""

    worktree: Path  # writable; the working directory unless `cwd` says otherwise
    home: Path  # writable, $HOME
    tmp: Path  # writable, $TMPDIR (/tmp itself is an empty tmpfs of the jail's own)
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden_dirs: tuple[Path, ...] = ()  # an empty folder instead, where a bound folder holds them
    hidden_files: tuple[Path, ...] = ()  # /dev/null instead, where a bound folder holds them
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None

    def environment(self) -> dict[str, str]:
        """Exactly the variables the command gets (and the ones to start bwrap with)."""
        env = {name: value for name, value in self.env.items() if name not in ("HOME", "TMPDIR")}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["HOME"] = str(self.home)
        env["TMPDIR"] = str(self.tmp)
        return env


@dataclass(frozen=True)
class JailProblem:
    """Why the jail does not work on this host, and what to do about it."""

    reason: str
    remedy: str

    def __str__(self) -> str:
        return f"{self.reason}; {self.remedy}"


def bwrap_argv(policy: JailPolicy, argv: Sequence[str], *, bwrap: str = DEFAULT_BWRAP) -> list[str]:
    """bwrap's argv that runs `argv` inside `policy` (pure: nothing is read or created). Start it
    with `policy.environment()` as its whole environment: that is what `argv` gets."""
    if not argv:
        raise ValueError("the jail needs a command to run")
    for path in (policy.worktree, policy.home, policy.tmp, *policy.read_only, *policy.writable):
        if not path.is_absolute():
            raise ValueError(f"a jail's paths must be absolute, not {str(path)!r}")
    out = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not policy.network:
        out.append("--unshare-net")
    # No --clearenv/--setenv: the environment is bwrap's own (`environment()`), never in argv.
    out += ["--die-with-parent", "--new-session", "--hostname", "lanebot-jail"]
    system = SYSTEM_READ_ONLY + (NETWORK_READ_ONLY if policy.network else ())
    bound = (*system, *(str(path) for path in (*policy.read_only, *policy.writable)))
    for folder in system:
        out += ["--ro-bind-try", folder, folder]
    out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", JAIL_TMP]
    # Parents before children, so a deeper bind (a worktree's admin folder in a read-only mirror,
    # a read-only `.git` in a writable worktree) lands on top of the one that holds it.
    mounts: list[tuple[Path, list[str]]] = [
        *((path, ["--tmpfs", str(path)]) for path in policy.hidden_dirs if _under(path, bound)),
        *((path, ["--ro-bind", "/dev/null", str(path)]) for path in policy.hidden_files if _under(path, bound)),
        (policy.home, ["--bind", str(policy.home), str(policy.home)]),
        (policy.tmp, ["--bind", str(policy.tmp), str(policy.tmp)]),
        (policy.worktree, ["--bind", str(policy.worktree), str(policy.worktree)]),
        *((path, ["--ro-bind", str(path), str(path)]) for path in policy.read_only),
        *((path, ["--bind", str(path), str(path)]) for path in policy.writable),
    ]
    mounts.sort(key=lambda mount: len(mount[0].parts))  # stable: equal depths keep the order above
    for _, arguments in mounts:
        out += arguments
    out += ["--chdir", str(policy.cwd or policy.worktree), "--", *argv]
    return out


def _under(path: Path, folders: Sequence[str]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def program_binds(executable: Path) -> tuple[Path, tuple[Path, ...]]:
    """How to start `executable` (absolute, as found on PATH) in a jail: the path to run, and what
    to bind read-only for it. A file of an npm package (found through its links) brings the
    outermost `node_modules` holding it: the package, the platform packages beside it (Codex's
    native binary) and their own dependencies; the path found runs when it lies inside. Any other
    program is run at its real path, and bound itself unless a system folder holds it."""
    found = executable.absolute()
    real = found.resolve()
    modules = [folder for folder in real.parents if folder.name == "node_modules"]
    if modules:
        package = modules[-1]
        runs = found if found.is_relative_to(package) else real
        return runs, () if _under(package, SYSTEM_READ_ONLY) else (package,)
    if _under(real, SYSTEM_READ_ONLY):
        return (found if _under(found, SYSTEM_READ_ONLY) else real), ()
    return real, (real,)


@dataclass(frozen=True)
class GitBinds:
    """What makes a worktree's git work inside a jail, for `JailPolicy`'s fields of the same names."""

    read_only: tuple[Path, ...] = ()  # the mirror; `.git`, `commondir` and `gitdir`
    writable: tuple[Path, ...] = ()  # the worktree's admin folder
    hidden_dirs: tuple[Path, ...] = ()  # the mirror's other worktrees' admin folders


def git_binds(worktree: Path) -> GitBinds:
    """The binds `worktree`'s git needs; none for a worktree whose `.git` is a folder (it is
    inside the worktree, which is bound anyway)."""
    dot_git = worktree / ".git"
    if not dot_git.is_file():
        return GitBinds()
    text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return GitBinds()
    admin = (worktree / text.removeprefix("gitdir:").strip()).resolve()
    commondir = admin / "commondir"
    common = (admin / commondir.read_text(encoding="utf-8").strip()).resolve() if commondir.is_file() else admin
    if admin == common:
        return GitBinds(read_only=(common, dot_git))
    read_only = [common, dot_git]
    read_only += [admin / name for name in ("commondir", "gitdir") if (admin / name).is_file()]
    hidden = (admin.parent,) if admin.parent.parent == common else ()
    return GitBinds(read_only=tuple(read_only), writable=(admin,), hidden_dirs=hidden)


def find_bwrap() -> str | None:
    """bwrap's path: /usr/bin/bwrap (Debian's package), else the first on PATH; None without it."""
    if os.access(DEFAULT_BWRAP, os.X_OK):
        return DEFAULT_BWRAP
    return shutil.which("bwrap")


def probe(bwrap: str | None = None) -> JailProblem | None:
    """Run a command in a jail once; None when it works, else why not and what to do."""
    path = bwrap or find_bwrap()
    if path is None or not os.access(path, os.X_OK):
        return JailProblem(f"bubblewrap is not installed (no executable {path or DEFAULT_BWRAP})", INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="lanebot-jail-probe-") as folder:
        root = Path(folder)
        policy = JailPolicy(worktree=root / "worktree", home=root / "home", tmp=root / "tmp")
        for made in (policy.worktree, policy.home, policy.tmp):
            made.mkdir()
        outside = root / "outside"
        outside.write_text("not for the jail\n", encoding="utf-8")
        argv = bwrap_argv(policy, ["/bin/sh", "-c", 'test -d /proc/self && test ! -e "$0"', str(outside)], bwrap=path)
        try:
            done = subprocess.run(
                argv,
                env=policy.environment(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return JailProblem(f"bubblewrap ({path}) could not be run: {error}", INSTALL_HINT)
    if done.returncode == 0:
        return None
    said = " ".join(done.stderr.decode("utf-8", errors="replace").split())[:500] or f"exit status {done.returncode}"
    if "namespace" in said.lower() or "permission" in said.lower() or "operation not permitted" in said.lower():
        return JailProblem(
            f"bubblewrap ({path}) cannot create its namespaces here: {said}",
            "allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 "
            "also `sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or run lanebot where they are "
            "allowed (a container needs them enabled by its runtime)",
        )
    return JailProblem(f"bubblewrap ({path}) failed to run a command: {said}", INSTALL_HINT)
