"""A lane: one attempt at one unit of an approved plan, in its own worktree, on its own branch.

Its branch names are bot.core.names': the lane branch `lanebot-lanes/<issue>/<unit>`, merged into
the integration branch `lanebot/<issue>`.

An attempt (`run_lane`, one executor job identified by run, unit and attempt number):

1. a worktree of the mirror on the lane branch, cut from the lane's `base_sha` (the integration
   branch as pushed when the lane was started); a retry continues from the lane branch as the
   previous attempt pushed it, so the agent finds its earlier work;
2. the lane prompt: the issue, the unit, and on a retry the previous failure (its reason, the
   offending paths, the last 200 lines of output);
3. the agent (`build.agent`, `build.timeout`, the unit's brief for the recipe adapter) in its
   own jail (bot.runner.jailing.agent_jail), its transcript at
   `<workdir>/transcripts/<run>/<unit>/attempt-N.jsonl`, its pid (bwrap's) recorded;
4. a commit of whatever the agent left, as lanebot's commit identity;
5. ownership: every path changed since the base must match the unit's `files`; lanebot's
   scratch (`.lanebot/`) and `.github/workflows/` are refused unless `files` names them;
6. the unit's `check`, written to a file outside the worktree and run as `sh <file>` in it,
   in a jail (bot.runner.jailing: no network unless `build.network`), with the lane's timeout;
   the tail of its output is kept. Without a working jail (and no LANEBOT_UNJAILED=1) the
   attempt fails before its agent starts, saying why and how to install bubblewrap;
7. the lane branch pushed (also after a failure, so the next attempt and humans see it; after an
   agent that succeeded, while ownership and the check are judged), the head recorded, and the
   attempt's one check run `lanebot / <unit>` made, completed with its result, on the commit the
   attempt ended on (its new head, or its start when it committed nothing); a failure that
   leaves no retry offers the check run's `Retry lane` button. No check run is in progress
   meanwhile (the progress comment shows which lanes run), and an attempt the host interrupted
   reports nothing: the lane runs again and that attempt reports.

The outcome is written to the lane's row (compare-and-set from `running`): `finished`, or back
to `pending` with the failure while retries remain, or `failed`. The lane's state is written
before its session is closed, so a crash in between never makes a finished lane run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bot.core.checks import RETRY_LANE, CheckReport, external_id, lane_check_name
from bot.core.diffstat import FileChange, to_numstat
from bot.core.ere import match_paths
from bot.core.graph import Unit
from bot.core.lifecycle import is_held
from bot.core.names import lane_branch, lane_commit_message
from bot.edges.agents import AgentConfigError, AgentRequest, AgentResult, make_agent
from bot.edges.agents.process import child_environment, stop_process_group
from bot.edges.executor import Job
from bot.edges.files import write_private
from bot.edges.git import Mirror, RefNotFound, Worktree, git
from bot.edges.github.checks import finish_check, report_check
from bot.edges.jail import JailPolicy, bwrap_argv, find_bwrap
from bot.edges.logcontext import bind_log_context
from bot.edges.store import runs as store
from bot.edges.store.models import AgentSession, Lane, utc_now
from bot.render.checks import lane_report
from bot.render.prompts import render_prompt
from bot.runner.context import RuntimeContext
from bot.runner.faults import (
    MAX_INTERRUPTIONS,
    counts_against_the_cap,
    disk_full_in,
    host_fault,
    interruption_pause,
    work_disk_full,
)
from bot.runner.jailing import JailRefused, agent_jail, command_jail, jail_environment, jail_problem
from bot.runner.lane_setup import LanePorts, cache_folder, cache_key, held_cache, held_ports
from bot.runner.runtime import Runtime, add_worktree, db, host_name, load_runtime, remove_worktree

log = logging.getLogger(__name__)

__all__ = [
    "PROTECTED_DIRECTORIES",
    "FailureKind",
    "LaneFailure",
    "ScriptResult",
    "is_ancestor",
    "keep_tail",
    "ownership_violations",
    "remote_sha",
    "run_lane",
    "run_script",
]

PROTECTED_DIRECTORIES = (".lanebot/", ".github/workflows/")
INTERRUPTED = "interrupted: "  # how a session lost to a host fault begins its failure
OUTPUT_LINES = 200  # lines of a failed command's output kept for the retry's prompt
OUTPUT_BYTES = 256 * 1024  # what run_script holds of an output at most, from its end
SCRIPT_GRACE_S = 2.0
_POLL_S = 0.02


# --------------------------------------------------------------------------- ownership


def ownership_violations(unit: Unit, paths: Iterable[str]) -> list[str]:
    """The paths among `paths` that `unit` may not change, in the order given.

    Matched with RE2 (`bot.core.ere.match_paths`), in time linear in the paths whatever `unit.files`
    is. Raises ValueError when `unit.files` is not an expression bot/core/ere.py accepts.
    """
    paths = list(paths)
    open_to_unit = [path for path in paths if not _protected_from(unit, path)]
    (owned,) = match_paths([unit.files], open_to_unit)
    allowed = {open_to_unit[position] for position in owned}
    return [path for path in paths if path not in allowed]


def _protected_from(unit: Unit, path: str) -> bool:
    return any(
        path.startswith(directory) and not _names_directory(unit.files, directory)
        for directory in PROTECTED_DIRECTORIES
    )


def _names_directory(files: str, directory: str) -> bool:
    """Whether the expression spells the directory out (`\\.github/workflows/...`), as opposed to
    reaching it through a wildcard such as `.*`."""
    return directory.rstrip("/") in files.replace("\\", "")


# --------------------------------------------------------------------------- failures (pure)


class FailureKind(enum.StrEnum):
    AGENT = "agent"  # the agent session failed (exit status, timeout, missing binary, bad settings)
    OWNERSHIP = "ownership"  # it changed paths outside the unit's files
    CHECK = "check"  # the unit's check failed
    CONFLICT = "conflict"  # merging the lane conflicted (and no resolver made it clean)
    ERROR = "error"  # lanebot itself could not complete the attempt
    CANCELLED = "cancelled"  # stopped by /cancel
    SETUP = "setup"  # the repository's build.setup failed: no agent ran, and no retry would help
    VERIFY = "verify"  # verify first failed on its merge (bot.core.bisect): redone from the joined branch


@dataclass(frozen=True)
class LaneFailure:
    """Why a lane's last attempt failed, as its row keeps it (JSON in `lanes.failure`)."""

    kind: FailureKind
    reason: str  # one line
    attempt: int | None = None
    output: str = ""  # the tail of the failing command's output
    paths: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FailureKind(self.kind))
        object.__setattr__(self, "reason", " ".join(self.reason.split()) or "no reason given")
        object.__setattr__(self, "output", keep_tail(self.output))
        object.__setattr__(self, "paths", tuple(self.paths))

    def to_text(self) -> str:
        data = {
            "kind": self.kind.value,
            "reason": self.reason,
            "attempt": self.attempt,
            "output": self.output,
            "paths": list(self.paths),
        }
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_text(cls, text: str) -> LaneFailure:
        """The failure a row holds; plain text (written by something else) becomes an error's reason."""
        try:
            data = json.loads(text)
            return cls(
                kind=data["kind"],
                reason=data["reason"],
                attempt=data.get("attempt"),
                output=data.get("output") or "",
                paths=tuple(data.get("paths") or ()),
            )
        except (ValueError, TypeError, KeyError):
            first, _, rest = text.strip().partition("\n")
            return cls(kind=FailureKind.ERROR, reason=first, output=rest)

    def prompt(self) -> dict[str, Any]:
        """The lane prompt's `failure` block."""
        return {"reason": self.reason, "attempt": self.attempt, "paths": list(self.paths), "output": self.output}

    def describe(self) -> str:
        """For people (the progress comment): the reason, the paths, then the output."""
        lines = [f"attempt {self.attempt}: {self.reason}" if self.attempt else self.reason]
        lines += [f"  {path}" for path in self.paths]
        if self.output.strip():
            lines += ["", self.output.rstrip("\n")]
        return "\n".join(lines)


def keep_tail(text: str, lines: int = OUTPUT_LINES) -> str:
    """The last `lines` lines of `text`."""
    kept = text.splitlines()
    return "\n".join(kept[-lines:]) + ("\n" if kept and text.endswith("\n") else "")


# --------------------------------------------------------------------------- running a script


@dataclass(frozen=True)
class ScriptResult:
    exit_status: int | None  # None when it timed out
    output: str  # the end of its stdout and stderr together
    timed_out: bool
    timeout: float

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.exit_status == 0

    def describe(self, what: str) -> str:
        if self.timed_out:
            return f"{what} did not finish within {self.timeout:g} s and was stopped"
        if self.exit_status is not None and self.exit_status < 0:
            return f"{what} was killed by signal {-self.exit_status}"
        return f"{what} exited with status {self.exit_status}"


async def run_script(
    text: str, *, script: Path, cwd: Path, timeout: float, env: Mapping[str, str], jail: JailPolicy | None
) -> ScriptResult:
    """Write `text` to `script` and run `sh <script>` in `cwd`, in its own process group.

    Agent-written commands reach the shell only this way, never spliced into a command line.
    With a `jail` (bot.runner.jailing.command_jail) it runs inside it, `script` bound read-only
    and `env` (over the harmless part of lanebot's environment) all it gets; None runs it as a
    plain process (the operator opted out of the jail, or a test). On a timeout or a cancellation
    the whole process group is stopped, and with it the jail and everything in it.
    """
    await asyncio.to_thread(_write_script, script, text)
    if jail is None:
        argv, process_env = ["sh", str(script)], child_environment(env)
    else:
        policy = replace(
            jail, read_only=(*jail.read_only, script.absolute()), env=jail_environment(env), cwd=cwd.absolute()
        )
        bwrap = find_bwrap()
        if bwrap is None:
            raise JailRefused("bubblewrap (bwrap) is not installed")
        argv, process_env = bwrap_argv(policy, ["sh", str(script.absolute())], bwrap=bwrap), policy.environment()
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=process_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    tail = _Tail(OUTPUT_BYTES)
    reader = asyncio.ensure_future(_drain(process.stdout, tail))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(_exit(process), timeout)
        except TimeoutError:
            timed_out = True
    finally:
        cleanup = asyncio.ensure_future(_stop(process, reader))
        try:
            await asyncio.shield(cleanup)
        except asyncio.CancelledError:
            await cleanup
            raise
    return ScriptResult(None if timed_out else process.returncode, tail.text(), timed_out, timeout)


def _write_script(script: Path, text: str) -> None:
    write_private(script, text if text.endswith("\n") else text + "\n")  # 0600, its folders 0700


class _Tail:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * self._limit:
            del self._data[: len(self._data) - self._limit]

    def text(self) -> str:
        return bytes(self._data[-self._limit :]).decode("utf-8", errors="replace")


async def _drain(stream: asyncio.StreamReader | None, tail: _Tail) -> None:
    if stream is None:
        return
    while chunk := await stream.read(64 * 1024):
        tail.add(chunk)


async def _exit(process: asyncio.subprocess.Process) -> int:
    # Not process.wait() alone: that also waits for the pipes, which a left-behind child may hold
    # open. It answers at the exit in the usual case; the poll catches the other.
    waiter = asyncio.ensure_future(process.wait())
    try:
        while process.returncode is None and not waiter.done():
            await asyncio.wait({waiter}, timeout=_POLL_S)
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert process.returncode is not None
    return process.returncode


async def _stop(process: asyncio.subprocess.Process, reader: asyncio.Future[None]) -> None:
    await stop_process_group(process, SCRIPT_GRACE_S)
    done, pending = await asyncio.wait([reader], timeout=SCRIPT_GRACE_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*done, *pending, return_exceptions=True)


# --------------------------------------------------------------------------- git helpers


async def remote_sha(mirror: Mirror, branch: str) -> str | None:
    """Where `branch` is on the remote as last fetched, or None when it is not there."""
    try:
        return await mirror.resolve(branch)
    except RefNotFound:
        return None


async def is_ancestor(mirror: Mirror, ancestor: str, descendant: str) -> bool:
    """Whether commit `ancestor` is `descendant` or one of its ancestors."""
    found = await git("merge-base", "--is-ancestor", ancestor, descendant, cwd=mirror.path, check=False)
    if found.returncode not in (0, 1):
        raise RuntimeError(f"git merge-base --is-ancestor failed in {mirror.path}: {found.stderr.strip()}")
    return found.returncode == 0


# --------------------------------------------------------------------------- the lane job


@dataclass
class _Outcome:
    head: str | None = None
    failure: LaneFailure | None = None
    changed: list[str] = field(default_factory=list)
    detail: str | None = None  # for the session row only: an internal error's details
    diff: list[FileChange] = field(default_factory=list)
    check_output: str | None = None  # the end of it, whether the check passed or not
    agent: AgentResult | None = None  # for its tokens, cost and exit status

    def session_fields(self) -> dict[str, Any]:
        """What the session row keeps of the attempt besides its status and failure."""
        fields: dict[str, Any] = {"check_output": self.check_output, "diff_stat": to_numstat(self.diff) or None}
        if self.agent is not None:
            usage = self.agent.usage
            fields |= {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost_usd": usage.cost_usd,
                "exit_status": self.agent.exit_status,
            }
        return fields


async def run_lane(context: RuntimeContext, job: Job) -> None:
    """One attempt of lane `job.unit_id`; its result is written to the database."""
    bind_log_context(run_id=job.run_id, unit=job.unit_id)
    assert job.unit_id is not None
    rt = await load_runtime(context, job.run_id)
    lane = await db(store.get_lane, rt.engine, job.run_id, job.unit_id)
    if lane is None or not await _may_start(rt, lane, job):
        return
    await _Attempt(rt, lane, job).run()


async def _may_start(rt: Runtime, lane: Lane, job: Job) -> bool:
    """Only a lane marked running, in a running run, with no session of this attempt or later."""
    if rt.run.state != "running" or lane.state != "running":
        log.info("not starting %s: the run is %s and the lane %s", job.describe(), rt.run.state, lane.state)
        return False
    if is_held(rt.run.state, rt.run.held_at is not None):
        # Queued before the hold, not started: back to pending, it starts after `/unhold`.
        log.info("not starting %s: the run is held", job.describe())
        await db(store.set_lane_state, rt.engine, lane.id, "running", "pending")
        return False
    earlier = [s for s in await db(store.sessions, rt.engine, rt.run.id) if s.lane_id == lane.id and s.kind == "lane"]
    if any(s.status == "running" for s in earlier) or any(s.attempt >= job.attempt for s in earlier):
        log.info("not starting %s: that attempt has already started", job.describe())
        return False
    return True


class _AttemptInterrupted(Exception):
    """The attempt met a fault of the host and was recorded as interrupted (`_interrupted_by`)."""


class _Attempt:
    """The steps of one lane attempt; used only by `run_lane`."""

    def __init__(self, rt: Runtime, lane: Lane, job: Job) -> None:
        self.rt = rt
        self.lane = lane
        self.job = job
        self.unit = rt.graph[lane.unit_id]
        self.branch = lane_branch(rt.issue_number, self.unit.id)
        self.previous = LaneFailure.from_text(lane.failure) if lane.failure else None
        self.attempt = job.attempt
        self.session_id: int | None = None
        self.check_run_id: int | None = None  # this attempt's, once reported
        self.ended_on: str | None = None  # the commit on GitHub a report of this attempt goes on
        self.cache: Path | None = None  # the lane cache ($LANEBOT_CACHE), once the worktree is cut
        self.lane_env: dict[str, str] = {}
        self.lane_head_on_remote: asyncio.Future[str | None] | None = None  # what the push's lease expects
        self.pushing: asyncio.Future[None] | None = None  # the push begun once the agent succeeded

    @property
    def transcript(self) -> Path:
        return self.rt.transcript_path(self.unit.id, self.attempt)

    async def run(self) -> None:
        session = await db(
            store.start_session,
            self.rt.engine,
            run_id=self.rt.run.id,
            kind="lane",
            lane_id=self.lane.id,
            host=host_name(),
        )
        self.session_id, self.attempt = session.id, session.attempt
        await db(store.update_session, self.rt.engine, session.id, transcript_path=str(self.transcript))
        await db(store.update_lane, self.rt.engine, self.lane.id, started_at=utc_now(), branch=self.branch)
        try:
            try:
                outcome = await self._attempt()
            except asyncio.CancelledError:
                await _shielded(self._interrupted())
                raise
            except _AttemptInterrupted:
                return
            except Exception as error:
                fault = host_fault(error)
                if fault is not None and await self._interrupted_by(fault, interruption_pause(1, error)):
                    return
                log.exception(
                    "lane %r of run %d: attempt %d could not complete", self.unit.id, self.rt.run.id, self.attempt
                )
                failure = LaneFailure(
                    FailureKind.ERROR,
                    f"lanebot could not complete the attempt "
                    f"({fault or type(error).__name__}); the runner's log has the details",
                    self.attempt,
                )
                outcome = _Outcome(failure=failure, detail=f"{type(error).__name__}: {error}")
                await self._close_check("failure", failure.reason, offer_retry=self._is_last_attempt())
            await self._record(outcome)
        finally:
            # After the outcome is recorded: the merge need not wait for the clean-up.
            await _shielded(remove_worktree(self.rt.mirror, self.rt.worktree_path(self.unit.id)))

    async def _attempt(self) -> _Outcome:
        mirror = self.rt.mirror
        base = self.lane.base_sha
        if base is None:
            raise RuntimeError(f"lane {self.unit.id!r} has no base commit recorded; it was not started by reconcile")
        refused = await jail_problem(self.rt.context.settings)
        if refused is not None:  # before the agent: its work could not be checked
            return _Outcome(failure=LaneFailure(FailureKind.ERROR, refused, self.attempt))
        if self.attempt == 1 and await mirror.has_commits([base]):
            # A first attempt starts at its base whatever the remote holds, and the base is here (the
            # fetch that recorded it brought it): the cut waits for no fetch. The lane branch's remote
            # head, which the push's lease expects, comes from a fetch begun now, while the agent works.
            start = base
            worktree = await add_worktree(mirror, self.rt.worktree_path(self.unit.id), branch=self.branch, start=start)
            self.lane_head_on_remote = asyncio.ensure_future(self._remote_lane_head())
        else:
            pushed = await self._remote_lane_head()
            start = pushed if pushed and self.attempt > 1 and await is_ancestor(mirror, base, pushed) else base
            worktree = await add_worktree(mirror, self.rt.worktree_path(self.unit.id), branch=self.branch, start=start)
            self.lane_head_on_remote = asyncio.get_running_loop().create_future()
            self.lane_head_on_remote.set_result(pushed)
        self.ended_on = start
        try:
            async with held_ports(self.rt.workdir, self.rt.workflow.build.ports) as ports:
                await self._prepare_lane_env(worktree.path, ports)
                outcome, check_output = await self._build(worktree, base)
                await self._tear_down(worktree.path)
            if outcome.failure is not None and self._disk_was_full(outcome.failure):
                if self.pushing is not None:  # the commit is pushed whatever the check met
                    await asyncio.gather(self.pushing, return_exceptions=True)
                if await self._interrupted_by("the work disk is full", None):
                    raise _AttemptInterrupted
            await (self.pushing or self._push(worktree))
        finally:
            for task in (self.lane_head_on_remote, self.pushing):
                if task is not None and not task.done():
                    task.cancel()
            await asyncio.gather(*(t for t in (self.lane_head_on_remote, self.pushing) if t), return_exceptions=True)
        self.ended_on = outcome.head
        await self._report(outcome, check_output)
        return outcome

    async def _remote_lane_head(self) -> str | None:
        """The lane branch on the remote, fetched now."""
        await self.rt.mirror.fetch()
        return await remote_sha(self.rt.mirror, self.branch)

    async def _push(self, worktree: Worktree) -> None:
        """The lane branch pushed, replacing only what was on the remote when the attempt began."""
        assert self.lane_head_on_remote is not None
        try:
            pushed = await self.lane_head_on_remote
        except Exception:  # a blip while the agent worked must not lose its work: ask once more
            pushed = await self._remote_lane_head()
        await worktree.push(self.branch, expected=pushed or "")

    async def _build(self, worktree: Worktree, base: str) -> tuple[_Outcome, str | None]:
        """Set-up, the agent, its commit and the judgement: the outcome and the check's output."""
        set_up = await self._set_up(worktree.path)
        if set_up is not None:
            return _Outcome(head=await worktree.head(), failure=set_up), None
        result = await self._run_agent(worktree.path)
        head = await worktree.commit_all(self._commit_message(), self.rt.identity) or await worktree.head()
        if not isinstance(result, str) and result.ok:
            # Pushed while ownership and the check are judged: the push comes whatever they find.
            self.pushing = asyncio.ensure_future(self._push(worktree))
        diff = await worktree.diff_stat(base)
        outcome = _Outcome(head=head, changed=[change.path for change in diff], diff=diff)
        return outcome, await self._judge(result, outcome, worktree)

    async def _prepare_lane_env(self, worktree: Path, ports: LanePorts | None) -> None:
        """The lane's cache folder and ports, for every step of the attempt."""
        build = self.rt.workflow.build
        key = await asyncio.to_thread(cache_key, worktree, build.cache_key)
        self.cache = await asyncio.to_thread(cache_folder, self.rt.workdir, self.rt.run.repository, key)
        self.lane_env = {"LANEBOT_CACHE": str(self.cache), **(ports.env() if ports else {})}

    async def _set_up(self, worktree: Path) -> LaneFailure | None:
        """Run `build.setup` (holding the cache, with the network); why the lane fails, if it does."""
        build = self.rt.workflow.build
        if not build.setup.strip():
            return None
        assert self.cache is not None
        async with held_cache(self.cache):
            done = await self._lane_script(build.setup, worktree, "setup")
        if done.ok:
            return None
        return LaneFailure(
            FailureKind.SETUP,
            f"its set-up (build.setup) failed: {done.describe('build.setup')}; fix the script, then `/retry "
            f"{self.unit.id}`",
            self.attempt,
            output=done.output,
        )

    async def _tear_down(self, worktree: Path) -> None:
        """Run `build.teardown`; a failure is logged and noted on the run, the lane's result stays."""
        build = self.rt.workflow.build
        if not build.teardown.strip():
            return
        done = await self._lane_script(build.teardown, worktree, "teardown")
        if not done.ok:
            log.warning("lane %r of run %d: %s", self.unit.id, self.rt.run.id, done.describe("build.teardown"))
            await db(
                store.append_event,
                self.rt.engine,
                self.rt.run.id,
                "teardown_failed",
                {"unit": self.unit.id, "attempt": self.attempt, "why": done.describe("build.teardown")},
            )

    async def _lane_script(self, text: str, worktree: Path, step: str) -> ScriptResult:
        name = f"{self.unit.id}-attempt-{self.attempt}-{step}"
        assert self.cache is not None
        return await run_script(
            text,
            script=self.rt.script_path(name),
            cwd=worktree,
            timeout=float(self.rt.workflow.build.setup_timeout),
            env=self._env(),
            jail=await command_jail(self.rt, worktree=worktree, name=name, network=True, writable=(self.cache,)),
        )

    def _commit_message(self) -> str:
        return lane_commit_message(self.unit.id, self.unit.title, self.rt.issue_number, self.attempt)

    def _env(self) -> dict[str, str]:
        return {
            "LANEBOT_RUN": str(self.rt.run.id),
            "LANEBOT_ISSUE": str(self.rt.issue_number),
            "LANEBOT_UNIT": self.unit.id,
            "LANEBOT_ATTEMPT": str(self.attempt),
            **self.lane_env,
        }

    async def _run_agent(self, cwd: Path) -> AgentResult | str:
        """The agent's result, or why it could not run."""
        build = self.rt.workflow.build
        prompt = render_prompt(
            self.rt.workflow,
            "lane",
            issue=self.rt.issue_context(),
            unit=self.unit,
            branch=self.branch,
            failure=self.previous.prompt() if self.previous else None,
        )
        try:
            agent = make_agent(build.agent, getattr(self.rt.workflow.agents, build.agent))
            request = AgentRequest(
                prompt=prompt,
                cwd=cwd,
                transcript=self.transcript,
                timeout=float(build.timeout),
                env=self._env(),
                brief=self.unit.brief,
                jail=await agent_jail(
                    self.rt.context.settings,
                    agent=build.agent,
                    worktree=cwd,
                    folder=self.rt.scratch_path(f"jail/{self.unit.id}-attempt-{self.attempt}-agent"),
                    read_only=(self.cache,) if self.cache else (),
                ),
            )
            return await agent.run(request, on_start=self._record_pid)
        except (AgentConfigError, JailRefused) as error:
            return str(error)

    def _record_pid(self, pid: int) -> None:
        assert self.session_id is not None
        store.update_session(self.rt.engine, self.session_id, pid=pid)

    async def _judge(self, result: AgentResult | str, outcome: _Outcome, worktree: Worktree) -> str | None:
        """Set `outcome.failure` from the agent, ownership and the check; the check's output, if it ran."""
        if not isinstance(result, str):
            outcome.agent = result
        if isinstance(result, str) or not result.ok:
            reason = result if isinstance(result, str) else (result.error or "the agent session failed")
            output = "" if isinstance(result, str) else result.final_message
            outcome.failure = LaneFailure(FailureKind.AGENT, reason, self.attempt, output=output)
            return None
        try:
            offending = await asyncio.to_thread(ownership_violations, self.unit, outcome.changed)
        except ValueError as refused:  # a plan approved under older rules for files
            outcome.failure = LaneFailure(
                FailureKind.OWNERSHIP,
                f"its files {self.unit.files!r} cannot be matched: {refused}",
                self.attempt,
                paths=tuple(outcome.changed),
            )
            return None
        if offending:
            shown = ", ".join(offending[:5]) + (f" and {len(offending) - 5} more" if len(offending) > 5 else "")
            outcome.failure = LaneFailure(
                FailureKind.OWNERSHIP,
                f"changed {len(offending)} path{'s' * (len(offending) != 1)} outside its "
                f"files ({self.unit.files}): {shown}",
                self.attempt,
                paths=tuple(offending),
            )
            return None
        name = f"{self.unit.id}-attempt-{self.attempt}"
        await db(store.update_session, self.rt.engine, self.session_id, check_started_at=utc_now())
        check = await run_script(
            self.unit.check,
            script=self.rt.script_path(name),
            cwd=worktree.path,
            timeout=float(self.rt.workflow.build.timeout),
            env=self._env(),
            jail=await command_jail(
                self.rt, worktree=worktree.path, name=name, read_only=(self.cache,) if self.cache else ()
            ),
        )
        if not check.ok:
            outcome.failure = LaneFailure(
                FailureKind.CHECK, check.describe("its check"), self.attempt, output=check.output
            )
        outcome.check_output = check.output
        return check.output

    async def _report(self, outcome: _Outcome, check_output: str | None) -> None:
        failure = outcome.failure
        await self._report_check(
            lane_report(
                unit_id=self.unit.id,
                attempt=self.attempt,
                passed=failure is None,
                reason=failure.reason if failure else None,
                changed_paths=outcome.changed,
                offending_paths=failure.paths if failure else (),
                check_output=check_output,
                transcript=str(self.transcript),
                offer_retry=self._is_last_attempt(),
            )
        )

    async def _report_check(self, report: CheckReport) -> None:
        """The attempt's one check run, made completed with `report` on the commit it ended on."""
        assert self.ended_on is not None
        self.check_run_id = await report_check(
            self.rt.client,
            self.rt.run.repository,
            name=lane_check_name(self.unit.id),
            head_sha=self.ended_on,
            external=external_id(self.rt.run_id, self.unit.id),
            report=report,
            look_first=self._lived_before(),
        )
        await db(store.update_lane, self.rt.engine, self.lane.id, check_run_id=self.check_run_id)

    def _lived_before(self) -> bool:
        """Only an earlier session of this lane (one lanebot was killed in, or a failed attempt)
        can have made a check run the database does not know of."""
        return self.attempt > 1

    def _is_last_attempt(self) -> bool:
        """Whether a failure of this attempt leaves no retry (the lane fails and the run blocks)."""
        return self.lane.attempts_used + 1 >= 1 + self.rt.workflow.build.max_retries

    async def _record(self, outcome: _Outcome) -> None:
        engine, lane, failure = self.rt.engine, self.lane, outcome.failure
        used = lane.attempts_used + 1
        head = outcome.head or lane.head_sha
        if failure is None:
            moved = await db(
                store.set_lane_state,
                engine,
                lane.id,
                "running",
                "finished",
                head_sha=head,
                failure=None,
                attempts_used=used,
                while_session_runs=self.session_id,
            )
        else:
            final = self._is_last_attempt() or failure.kind is FailureKind.SETUP
            target = "failed" if final else "pending"
            moved = await db(
                store.set_lane_state,
                engine,
                lane.id,
                "running",
                target,
                head_sha=head,
                failure=failure.to_text(),
                attempts_used=used,
                while_session_runs=self.session_id,
            )
        status = ("succeeded" if failure is None else "failed") if moved else "cancelled"
        await db(
            store.finish_session,
            engine,
            self.session_id,
            status=status,
            failure=outcome.detail or (failure.reason if failure else None),
            **outcome.session_fields(),
        )

    async def _interrupted(self) -> None:
        """Cancelled: by /cancel (the run is cancelled), or by lanebot stopping (the attempt is lost
        and runs again at the next start without consuming a retry)."""
        engine = self.rt.engine
        run = await db(store.get_run, engine, self.rt.run.id)
        if run is not None and run.state == "cancelled":
            failure = LaneFailure(FailureKind.CANCELLED, "stopped by /cancel", self.attempt)
            await db(store.set_lane_state, engine, self.lane.id, "running", "failed", failure=failure.to_text())
            await db(store.finish_session, engine, self.session_id, status="cancelled", failure=failure.reason)
            await self._close_check("cancelled", failure.reason)
            return
        await db(
            store.finish_session,
            engine,
            self.session_id,
            status="lost",
            counts_as_retry=False,
            failure="lanebot stopped while the attempt ran",
        )
        await db(store.set_lane_state, engine, self.lane.id, "running", "pending")

    def _disk_was_full(self, failure: LaneFailure) -> bool:
        """Whether the agent or the check failed because the work disk was full (then the attempt
        was interrupted; it was not the work's failure)."""
        if failure.kind not in (FailureKind.AGENT, FailureKind.CHECK):
            return False
        return disk_full_in(failure.reason) or disk_full_in(failure.output) or work_disk_full(self.rt.workdir)

    async def _interrupted_by(self, fault: str, pause: float | None) -> bool:
        """The host failed this attempt (bot.runner.faults): it is lost, consumes no retry, and the
        lane runs again after a pause. False, to count it as the attempt's failure instead, once
        the lane's last MAX_INTERRUPTIONS attempts were all interrupted so."""
        engine = self.rt.engine
        try:
            earlier = _interruptions_in_a_row(await db(store.sessions, engine, self.rt.run.id), self.lane.id)
            if earlier >= MAX_INTERRUPTIONS and counts_against_the_cap(fault):
                return False
            if pause is None or counts_against_the_cap(fault):
                pause = interruption_pause(earlier + 1)
            log.warning(
                "lane %r of run %d: attempt %d interrupted (%s); it runs again in %g s without consuming a retry",
                self.unit.id,
                self.rt.run.id,
                self.attempt,
                fault,
                pause,
            )
            await asyncio.sleep(pause)
            failure = f"{INTERRUPTED}{fault}"
            await db(
                store.finish_session, engine, self.session_id, status="lost", counts_as_retry=False, failure=failure
            )
            await db(store.set_lane_state, engine, self.lane.id, "running", "pending")
            await db(store.append_event, engine, self.rt.run.id, "interrupted", {"unit": self.unit.id, "fault": fault})
        except Exception as error:
            if host_fault(error) is None:
                raise
            # The database is still away: the lane stays `running` with no job, which the next
            # reconcile recovers as lost work (bot.runner.orchestrator._recover_orphans).
            log.warning(
                "lane %r of run %d: could not record the interruption (%s)", self.unit.id, self.rt.run.id, error
            )
        return True

    async def _close_check(self, conclusion: str, reason: str, *, offer_retry: bool = False) -> None:
        """Report an attempt that ended without reaching its report (an error, /cancel) on the commit
        it got to; one that reported already has that check run say how it ended instead. Nothing
        for an attempt that failed before its worktree was cut: it got to no commit."""
        if self.ended_on is None:
            return
        report = CheckReport(
            conclusion,
            reason,
            f"Attempt {self.attempt} of lane `{self.unit.id}`: "
            f"{reason}.\n\nTranscript: `{self.transcript}` on the runner host.",
            (RETRY_LANE,) if offer_retry else (),
        )
        with contextlib.suppress(Exception):  # best effort: GitHub being unwell must not hide the outcome
            if self.check_run_id is not None:
                await finish_check(self.rt.client, self.rt.run.repository, self.check_run_id, report)
            else:
                await self._report_check(report)


def _interruptions_in_a_row(sessions: Iterable[AgentSession], lane_id: int | None) -> int:
    """How many of the lane's latest finished attempts the host interrupted, one after another."""
    count = 0
    for session in sorted((s for s in sessions if s.lane_id == lane_id and s.kind == "lane"), key=lambda s: -s.attempt):
        if session.status == "running":
            continue
        failure = session.failure or ""
        if session.status != "lost" or not failure.startswith(INTERRUPTED):
            break
        count += counts_against_the_cap(failure.removeprefix(INTERRUPTED))
    return count


async def _shielded(work: Awaitable[None]) -> None:
    """Finish `work` even though the calling task is being cancelled."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
