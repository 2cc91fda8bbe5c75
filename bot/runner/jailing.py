"""Which jail a command of a run gets (bot.edges.jail), and whether commands may run at all.

Every command that comes from a plan, a repository or an agent (a unit's `check`, the
repository's `verify`, in the integrate step and in a fix lane) runs through
`bot.runner.lanes.run_script` in a jail built here: its worktree writable, the worktree's git
admin folder writable and its mirror read-only, a private home and temp under
`<workdir>/scratch/<run>/jail/<name>/`, the network only with the workflow's `build.network`.

No jail, no lanes: when bubblewrap does not work on this host, `jail_problem` says why and how to
install it, and the steps refuse before they start an agent (a lane fails with that reason, the
integrate step blocks the run with it, a fix lane fails with it). The operator may opt out with
LANEBOT_UNJAILED=1 (`settings.unjailed`); commands then run as plain processes, and the log says
so once. LANEBOT_JAIL_READ_ONLY (`settings.jail_read_only`) names more host folders to show
read-only (a toolchain outside the system's folders, such as pyenv's or nvm's).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from bot.edges.agents.process import child_environment
from bot.edges.files import private_dir
from bot.edges.jail import GitBinds, JailPolicy, JailProblem, git_binds, probe
from bot.runner.runtime import Runtime

log = logging.getLogger(__name__)

__all__ = ["JailRefused", "command_jail", "jail_environment", "jail_problem", "unjailed"]

UNJAILED_SETTING = "LANEBOT_UNJAILED"
# What a jailed command inherits from lanebot's environment: nothing that names a path of the host.
_INHERITED = ("PATH", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM")

_probed: list[JailProblem | None] = []  # the probe's answer, once per process
_warned: list[bool] = []


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
                "%s=1: checks and verify run WITHOUT a jail; they can read lanebot's environment, key and files",
                UNJAILED_SETTING,
            )
        return None
    if not _probed:
        _probed.append(await asyncio.to_thread(probe))
    problem = _probed[0]
    if problem is None:
        return None
    return (
        f"commands cannot run in a jail on this host: {problem.reason}; {problem.remedy}, "
        f"or set {UNJAILED_SETTING}=1 to run them without one"
    )


async def command_jail(rt: Runtime, *, worktree: Path, name: str) -> JailPolicy | None:
    """The jail for one command of `rt`'s run in `worktree`; None when the operator opted out.

    Raises `JailRefused` when the jail does not work here (the steps ask `jail_problem` first)."""
    settings = rt.context.settings
    problem = await jail_problem(settings)
    if problem is not None:
        raise JailRefused(problem)
    if unjailed(settings):
        return None
    folder = rt.scratch_path(f"jail/{name}")
    home, tmp = folder / "home", folder / "tmp"
    git = await asyncio.to_thread(_prepare, worktree.absolute(), home, tmp)
    return JailPolicy(
        worktree=worktree.absolute(),
        home=home,
        tmp=tmp,
        read_only=(*git.read_only, *getattr(settings, "jail_read_only", ())),
        writable=git.writable,
        hidden_dirs=(rt.workdir, *git.hidden_dirs),
        hidden_files=_lanebot_files(settings),
        network=rt.workflow.build.network,
    )


def jail_environment(env: Mapping[str, str]) -> dict[str, str]:
    """A jailed command's environment: the harmless, path-free part of lanebot's, then `env`."""
    inherited = child_environment({})
    return {**{name: inherited[name] for name in _INHERITED if name in inherited}, **env}


def _prepare(worktree: Path, home: Path, tmp: Path) -> GitBinds:
    for folder in (home, tmp):
        private_dir(folder)
    return git_binds(worktree)


def _lanebot_files(settings: object) -> tuple[Path, ...]:
    """lanebot's own files, masked should one lie under a folder the jail shows (a key in /etc)."""
    files = [Path.cwd() / ".env"]
    url = str(getattr(settings, "database_url", "") or "")
    if url.startswith("sqlite:///"):
        files.append(Path(url.removeprefix("sqlite:///").partition("?")[0]))
    key = os.environ.get("PRIVATE_KEY_PATH", "").strip()
    if key:
        files.append(Path(key))
    return tuple(path.absolute() for path in files)
