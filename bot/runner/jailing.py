"""Which jail a command or an agent session of a run gets (bot.edges.jail), and whether they may run at all.

Every command that comes from a plan, a repository or an agent (a unit's `check`, the
repository's `verify`, in the integrate step and in a fix lane) runs through
`bot.runner.lanes.run_script` in a jail built by `command_jail`: its worktree writable, the
worktree's git admin folder writable and its mirror read-only, a private home and temp under
`<workdir>/scratch/<run>/jail/<name>/`, the network only with the workflow's `build.network`.

Every agent session in a worktree (a lane, the planner, the integrate session and its verify
repairs, the merge resolver, a fix lane, the review lenses) runs in a jail built by `agent_jail`
(an `AgentJail` for the adapters, bot.edges.agents.base): the same worktree and git binds, its
own private home and temp per session, the network on (an agent reaches its model), the CLI's
install folder read-only (`bot.edges.jail.program_binds`), and only the variables its adapter
passes (its credentials among them) as its environment, never in an argv. Agents that start no
process (`recipe`, `http`) get none. In both, lanebot's workdir, `.env`, SQLite database and
private key (`settings.private_key_path`) are not there.

No jail, no sessions: when bubblewrap does not work on this host, `jail_problem` says why and how
to install it, and the steps refuse before they start an agent (a lane fails with that reason,
the integrate step blocks the run with it, a fix lane fails with it); `agent_jail` raises
`JailRefused` with it, so a session that asks anyway (the planner, a review lens) fails with it.
The operator may opt out with LANEBOT_UNJAILED=1 (`settings.unjailed`); commands and agents then
run as plain processes, the log says so once, and the gate comment warns. LANEBOT_JAIL_READ_ONLY
(`settings.jail_read_only`) names more host folders to show read-only (a toolchain outside the
system's folders, such as pyenv's or nvm's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from bot.core.workflow import Workflow
from bot.edges.agents import AgentJail
from bot.edges.agents.process import WORKTREE_HYGIENE_ENV, child_environment
from bot.edges.files import private_dir
from bot.edges.jail import GitBinds, JailPolicy, JailProblem, bwrap_argv, find_bwrap, git_binds, probe, program_binds
from bot.runner.context import RuntimeContext

log = logging.getLogger(__name__)

__all__ = [
    "BwrapAgentJail",
    "JailRefused",
    "agent_jail",
    "command_jail",
    "jail_environment",
    "jail_problem",
    "unjailed",
]

UNJAILED_SETTING = "LANEBOT_UNJAILED"
# What a jailed command inherits from lanebot's environment: nothing that names a path of the host.
_INHERITED = ("PATH", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
# The host's secrets under /etc, which the jail shows read-only for the system's configuration: password
# hashes (readable inside as root), SSH host keys, TLS private keys.
HOST_SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/security/opasswd")
HOST_SECRET_DIRS = ("/etc/ssl/private",)
# Adapters that run in-process and start no program: nothing to jail.
PROCESSLESS_AGENTS = frozenset({"recipe", "http"})

_probed: list[JailProblem | None] = []  # the probe's answer, once per process
_warned: list[bool] = []


class RunFolders(Protocol):
    """What `command_jail` reads of a run's `bot.runner.runtime.Runtime` (not imported: the runtime
    loads the plan step, which asks this module for the planner's jails)."""

    @property
    def context(self) -> RuntimeContext: ...

    @property
    def workflow(self) -> Workflow: ...

    @property
    def workdir(self) -> Path: ...

    def scratch_path(self, name: str) -> Path: ...


class JailRefused(RuntimeError):
    """Commands may not run: the jail does not work here and the operator did not opt out."""


def unjailed(settings: object) -> bool:
    """Whether the operator opted out of the jail (LANEBOT_UNJAILED=1)."""
    return bool(getattr(settings, "unjailed", False))


async def jail_problem(settings: object) -> str | None:
    """Why commands may not run on this host (with what to do), or None when they may."""
    if unjailed(settings):
        if not _warned:
            _warned.append(True)
            log.warning(
                "%s=1: agent sessions, checks and verify run WITHOUT a jail; they can read lanebot's "
                "environment, key and files",
                UNJAILED_SETTING,
            )
        return None
    if not _probed:
        _probed.append(await asyncio.to_thread(probe))
    problem = _probed[0]
    if problem is None:
        return None
    return (
        f"agents and commands cannot run in a jail on this host: {problem.reason}; {problem.remedy}, "
        f"or set {UNJAILED_SETTING}=1 to run them without one"
    )


async def command_jail(
    rt: RunFolders,
    *,
    worktree: Path,
    name: str,
    network: bool | None = None,
    read_only: Sequence[Path] = (),
    writable: Sequence[Path] = (),
) -> JailPolicy | None:
    """The jail for one command of `rt`'s run in `worktree`; None when the operator opted out.
    `network` (by default the workflow's `build.network`), and more folders to show (the lane cache).

    Raises `JailRefused` when the jail does not work here (the steps ask `jail_problem` first)."""
    settings = rt.context.settings
    problem = await jail_problem(settings)
    if problem is not None:
        raise JailRefused(problem)
    if unjailed(settings):
        return None
    folder = rt.scratch_path(f"jail/{name}")
    policy = await _policy(
        settings,
        worktree,
        folder,
        workdir=rt.workdir,
        network=rt.workflow.build.network if network is None else network,
    )
    return replace(
        policy,
        read_only=(*policy.read_only, *(path.absolute() for path in read_only)),
        writable=(*policy.writable, *(path.absolute() for path in writable)),
    )


@dataclass(frozen=True)
class BwrapAgentJail:
    """An `AgentJail` on bubblewrap: `policy` (no `env` yet) plus, per command, its program's binds."""

    policy: JailPolicy
    bwrap: str

    @property
    def home(self) -> Path:
        return self.policy.home

    @property
    def tmp(self) -> Path:
        return self.policy.tmp

    def command(
        self, executable: str, arguments: Sequence[str], *, env: Mapping[str, str], cwd: Path
    ) -> tuple[list[str], dict[str, str]]:
        program, binds = program_binds(Path(executable))
        policy = replace(self.policy, read_only=(*self.policy.read_only, *binds), env=dict(env), cwd=cwd.absolute())
        return bwrap_argv(policy, [str(program), *arguments], bwrap=self.bwrap), policy.environment()


async def agent_jail(
    settings: object, *, agent: str, worktree: Path, folder: Path, read_only: Sequence[Path] = ()
) -> AgentJail | None:
    """The jail of one session of `agent` in `worktree`, its home and temp in `folder` (a folder of
    its own under the run's scratch); None when the operator opted out or `agent` starts no process.

    Raises `JailRefused` (with `jail_problem`'s reason) when the jail does not work here."""
    if agent in PROCESSLESS_AGENTS:
        return None
    problem = await jail_problem(settings)
    if problem is not None:
        raise JailRefused(problem)
    if unjailed(settings):
        return None
    bwrap = find_bwrap()
    if bwrap is None:  # the probe found it; it went away since
        raise JailRefused("bubblewrap (bwrap) is not installed")
    workdir = Path(getattr(settings, "workdir", ".lanebot-work")).absolute()
    policy = await _policy(settings, worktree, folder, workdir=workdir, network=True)
    extra = tuple(path.absolute() for path in read_only)
    return BwrapAgentJail(replace(policy, read_only=(*policy.read_only, *extra)), bwrap)


async def _policy(settings: object, worktree: Path, folder: Path, *, workdir: Path, network: bool) -> JailPolicy:
    """The jail of a run's command or session in `worktree`, with its private home and temp made in `folder`."""
    home, tmp = folder.absolute() / "home", folder.absolute() / "tmp"
    git = await asyncio.to_thread(_prepare, worktree.absolute(), home, tmp)
    hidden_files, hidden_dirs = await asyncio.to_thread(_existing_secrets, _lanebot_files(settings))
    return JailPolicy(
        worktree=worktree.absolute(),
        home=home,
        tmp=tmp,
        read_only=(*git.read_only, *getattr(settings, "jail_read_only", ())),
        writable=git.writable,
        hidden_dirs=(workdir, *git.hidden_dirs, *hidden_dirs),
        hidden_files=hidden_files,
        network=network,
    )


def jail_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A jailed command's environment: the harmless, path-free part of lanebot's, then `env`."""
    inherited = child_environment({})
    return {**{name: inherited[name] for name in _INHERITED if name in inherited}, **WORKTREE_HYGIENE_ENV, **env}


def _prepare(worktree: Path, home: Path, tmp: Path) -> GitBinds:
    for folder in (home, tmp):
        private_dir(folder)
    return git_binds(worktree)


def _existing_secrets(lanebot_files: tuple[Path, ...]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """The secret files and folders to mask that exist on this host (a mask needs its target to
    exist): lanebot's own, and the host's under the /etc the jail shows read-only."""
    files = [*lanebot_files, *map(Path, HOST_SECRET_FILES), *Path("/etc/ssh").glob("ssh_host_*_key")]
    return tuple(path for path in files if path.is_file()), tuple(
        Path(folder) for folder in HOST_SECRET_DIRS if Path(folder).is_dir()
    )


def _lanebot_files(settings: object) -> tuple[Path, ...]:
    """lanebot's own files, masked should one lie under a folder the jail shows (a key in /etc)."""
    files = [Path.cwd() / ".env"]
    url = str(getattr(settings, "database_url", "") or "")
    if url.startswith("sqlite:///"):
        files.append(Path(url.removeprefix("sqlite:///").partition("?")[0]))
    key = getattr(settings, "private_key_path", None)
    if key:
        files.append(Path(key))
    return tuple(path.absolute() for path in files)
