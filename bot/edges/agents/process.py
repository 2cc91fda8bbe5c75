"""Run an agent CLI as a subprocess: the shared runner of the `claude`, `codex` and `command` adapters.

The prompt goes to the process on stdin, never in argv and never through a shell. The process starts
in its own session, so it and everything it spawns share one process group; on a timeout, when the
calling task is cancelled, and when the agent exits leaving children behind, that whole group is
stopped (SIGTERM, a short grace, SIGKILL) and reaped. stdout is streamed line by line into the
transcript and to the adapter's parser; memory stays bounded whatever the agent prints (a line
longer than `MAX_LINE_BYTES` is recorded truncated, with its size).

The process gets a minimal environment: a few variables inherited from lanebot's own environment
(`INHERITED_ENV`, none of them secrets), the adapter's `passthrough` (the variables its CLI
documents for credentials, endpoints and proxies, and those `agents.<name>.env` names; lanebot's
own secrets are dropped even when named), then the request's `env` on top.

With the request's `jail` (bot.runner.jailing.agent_jail) the CLI runs inside it: the process
started is bwrap, whose argv holds no variable (the environment is bwrap's own), and the CLI
sees its worktree, its program, a private home and temp, and no other file of lanebot's. It then
inherits only `JAIL_INHERITED_ENV` (no variable that names a folder of the host: HOME, TMPDIR,
XDG_*, CODEX_HOME and CLAUDE_CONFIG_DIR are the jail's); an adapter whose CLI keeps its login in
files copies them into the private home first (`copy_login_files`). When the session ends (an
exit, a timeout, a cancellation) bwrap ends, and its PID namespace with everything the CLI
started in it, `setsid` children and daemons included.

A parser may say the session is over before the process exits (`session_over()`: Claude Code's
final `result` event). The process then gets `RESULT_EXIT_GRACE_S` to exit by itself; if it does
not, its group is stopped and the session ends as the parser concluded, not as a timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bot.core.workflow import is_lanebot_secret
from bot.edges.agents.base import AgentNotFound, AgentRequest, AgentResult, Usage, describe_seconds
from bot.edges.agents.transcript import Transcript, utc_timestamp

INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "TERM",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "CODEX_HOME",
    "CLAUDE_CONFIG_DIR",
)
# What a jailed CLI inherits: the same, less what names a folder of the host (the jail has its own).
JAIL_INHERITED_ENV = tuple(
    name
    for name in INHERITED_ENV
    if name not in ("HOME", "TMPDIR", "CODEX_HOME", "CLAUDE_CONFIG_DIR") and not name.startswith("XDG_")
)
# lanebot commits what a session leaves in its worktree, and a file outside the unit's `files` fails
# the lane: Python's bytecode caches, written by any check the agent runs, must not be among them.
WORKTREE_HYGIENE_ENV: Mapping[str, str] = {"PYTHONDONTWRITEBYTECODE": "1"}
DEFAULT_GRACE_S = 5.0
RESULT_EXIT_GRACE_S = 10.0
KILL_WAIT_S = 2.0
DRAIN_WAIT_S = 5.0
MAX_LINE_BYTES = 8 * 1024 * 1024
TRUNCATED_HEAD_CHARS = 4096
STDERR_TAIL_LINES = 5
STDERR_TAIL_CHARS = 600
_READ_CHUNK = 64 * 1024
_POLL_S = 0.02
_EXIT_POLL_S = 0.05


@dataclass(frozen=True)
class Conclusion:
    """What an adapter's parser made of the stream: the final message, usage, and any failure."""

    final_message: str
    usage: Usage
    error: str | None = None


class StreamParser(Protocol):
    """Reads an agent's stdout, one line at a time, keeping only what the result needs."""

    def feed(self, line: str, event: dict[str, Any] | None) -> None:
        """`line` as printed; `event` is that line parsed when it is a JSON object."""

    def conclude(self, exit_status: int) -> Conclusion:
        """The session's result once the process exited by itself with `exit_status`
        (0 when it was stopped after the parser said the session was over)."""


@dataclass(frozen=True)
class ProcessOutcome:
    exit_status: int | None
    timed_out: bool
    duration_s: float
    stderr_tail: tuple[str, ...]
    stopped_after_result: bool = False


def _session_over(parser: StreamParser) -> bool:
    """Whether `parser` saw the end of the session (parsers without `session_over` never say so)."""
    over = getattr(parser, "session_over", None)
    return bool(over()) if callable(over) else False


def passed_through(
    names: Sequence[str], prefixes: Sequence[str] = (), parent: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables of `parent` (lanebot's environment) named in `names` or starting with one of
    `prefixes`, without lanebot's own secrets, whatever the names say."""
    source = os.environ if parent is None else parent
    wanted = set(names)
    return {
        name: value
        for name, value in source.items()
        if (name in wanted or name.startswith(tuple(prefixes))) and not is_lanebot_secret(name)
    }


def child_environment(
    extra: Mapping[str, str], parent: Mapping[str, str] | None = None, *, jailed: bool = False
) -> dict[str, str]:
    """The environment an agent runs with: the harmless part of `parent` (less what names a folder
    of the host when `jailed`), then `extra` over it."""
    source = os.environ if parent is None else parent
    env = {name: source[name] for name in (JAIL_INHERITED_ENV if jailed else INHERITED_ENV) if name in source}
    env.setdefault("PATH", os.defpath)
    env.update(WORKTREE_HYGIENE_ENV)
    env.update(extra)
    return env


@dataclass(frozen=True)
class LoginCopy:
    """A host login file copied into a jail's home for one session."""

    source: Path
    target: Path
    original: bytes
    refreshable: bool  # a credentials file the CLI may rewrite when it refreshes its token


MAX_LOGIN_FILE_BYTES = 1024 * 1024


def copy_login_files(files: Sequence[tuple[Path, Path]], refreshable: Collection[str] = ()) -> list[LoginCopy]:
    """Copy each (source, target) whose source is a regular file: the target private (0600, its
    folder 0700), never through a link already at the target. `refreshable`: the file names the
    CLI rewrites when it refreshes its login (see `finish_login_copies`)."""
    copies = []
    for source, target in files:
        if not source.is_file():
            continue
        original = source.read_bytes()
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        _write_private(target, original)
        copies.append(LoginCopy(source, target, original, target.name in refreshable))
    return copies


@contextmanager
def login_copies(files: Sequence[tuple[Path, Path]], refreshable: Collection[str] = ()) -> Iterator[list[LoginCopy]]:
    """The login files copied for one session, finished (`finish_login_copies`) when it ends."""
    copies = copy_login_files(files, refreshable)
    try:
        yield copies
    finally:
        finish_login_copies(copies)


def finish_login_copies(copies: Sequence[LoginCopy]) -> None:
    """Remove a session's login copies. A credentials file the CLI refreshed inside the jail goes
    back to the host first (OAuth refresh tokens rotate: the host's old one may no longer work),
    only when it is still a regular file holding a JSON object of at most 1 MiB and the host's file
    is as it was copied (another session has not refreshed it since)."""
    for copy in copies:
        refreshed = _refreshed_login(copy) if copy.refreshable else None
        if refreshed is not None:
            _replace_private(copy.source, refreshed)
        copy.target.unlink(missing_ok=True)


def _refreshed_login(copy: LoginCopy) -> bytes | None:
    try:
        descriptor = os.open(copy.target, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read(MAX_LOGIN_FILE_BYTES + 1)
        current_host = copy.source.read_bytes()
    except OSError:
        return None
    if data == copy.original or len(data) > MAX_LOGIN_FILE_BYTES or current_host != copy.original:
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return data if isinstance(parsed, dict) else None


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def _replace_private(path: Path, data: bytes) -> None:
    """Replace `path` atomically with `data`, 0600 (a reader never sees half a file)."""
    staged = path.with_name(f".{path.name}.lanebot-{os.getpid()}")
    staged.unlink(missing_ok=True)
    _write_private(staged, data)
    os.replace(staged, path)


def find_executable(name: str, env: Mapping[str, str]) -> str | None:
    """`name` resolved the way the agent's process would find it, on the agent's own PATH."""
    return shutil.which(name, path=env.get("PATH", os.defpath))


async def run_cli_session(
    *,
    agent: str,
    argv: Sequence[str],
    request: AgentRequest,
    parser: StreamParser,
    not_found: str,
    on_start: Callable[[int], None] | None,
    stdin_data: bytes | None = None,
    extra_env: Mapping[str, str] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    passthrough: Sequence[str] = (),
    passthrough_prefixes: Sequence[str] = (),
    result_grace_s: float = RESULT_EXIT_GRACE_S,
) -> AgentResult:
    """Run one CLI agent session end to end and describe how it ended.

    `passthrough` and `passthrough_prefixes` name the variables of lanebot's environment this CLI
    gets (its credentials, endpoints and proxies); lanebot's own secrets never pass.

    Raises `AgentNotFound` (with `not_found` as its message) when `argv[0]` is not on the agent's
    PATH, and re-raises `CancelledError` after stopping the process group when cancelled.
    """
    inherited = passed_through(passthrough, passthrough_prefixes)
    jail = request.jail
    env = child_environment({**inherited, **request.env, **(extra_env or {})}, jailed=jail is not None)
    executable = find_executable(argv[0], env)
    if not request.cwd.is_dir():
        raise NotADirectoryError(f"the {agent} agent's working directory {request.cwd} does not exist")
    with Transcript(request.transcript) as transcript:
        if executable is None:
            transcript.annotate("not_found", agent=agent, binary=argv[0], message=not_found, at=utc_timestamp())
            raise AgentNotFound(not_found)
        resolved = [executable, *argv[1:]]
        transcript.annotate(
            "start",
            agent=agent,
            argv=resolved,
            cwd=str(request.cwd),
            at=utc_timestamp(),
            env=sorted(set(inherited) | set(request.env) | set(extra_env or {})),
            jailed=jail is not None,
        )
        started, started_env = (
            (resolved, env) if jail is None else jail.command(executable, argv[1:], env=env, cwd=request.cwd)
        )
        try:
            outcome = await run_process(
                started,
                cwd=request.cwd,
                env=started_env,
                stdin_data=request.prompt.encode("utf-8") if stdin_data is None else stdin_data,
                timeout=request.timeout,
                transcript=transcript,
                parser=parser,
                on_start=on_start,
                grace_s=grace_s,
                result_grace_s=result_grace_s,
            )
        except FileNotFoundError as missing:  # removed between the lookup and the start
            transcript.annotate("not_found", agent=agent, binary=argv[0], message=not_found, at=utc_timestamp())
            raise AgentNotFound(not_found) from missing
        result = _result(agent, request, outcome, parser)
        transcript.annotate(
            "outcome",
            ok=result.ok,
            error=result.error,
            final_message_chars=len(result.final_message),
            usage={
                "input_tokens": result.usage.input_tokens,
                "output_tokens": result.usage.output_tokens,
                "cost_usd": result.usage.cost_usd,
            },
        )
        return result


def _result(agent: str, request: AgentRequest, outcome: ProcessOutcome, parser: StreamParser) -> AgentResult:
    if outcome.stopped_after_result:
        return _result_after_stop(request, parser.conclude(0))
    status = outcome.exit_status if outcome.exit_status is not None else -signal.SIGKILL
    conclusion = parser.conclude(status)
    error = conclusion.error
    if outcome.timed_out:
        error = f"the {agent} agent timed out after {describe_seconds(request.timeout)} and was stopped"
    elif status < 0:
        error = f"the {agent} agent was killed by {_signal_name(-status)}"
    if error is not None and status != 0 and outcome.stderr_tail and not outcome.timed_out:
        error = f"{error}; its stderr ended with: {_tail_text(outcome.stderr_tail)}"
    return AgentResult(
        exit_status=outcome.exit_status,
        final_message=conclusion.final_message,
        usage=conclusion.usage,
        transcript=request.transcript,
        timed_out=outcome.timed_out,
        error=error,
    )


def _result_after_stop(request: AgentRequest, conclusion: Conclusion) -> AgentResult:
    """The session printed its end and was stopped because it did not exit: what it printed decides."""
    return AgentResult(
        exit_status=None,
        final_message=conclusion.final_message,
        usage=conclusion.usage,
        transcript=request.transcript,
        error=conclusion.error,
    )


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin_data: bytes,
    timeout: float,
    transcript: Transcript,
    parser: StreamParser,
    on_start: Callable[[int], None] | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    result_grace_s: float = RESULT_EXIT_GRACE_S,
) -> ProcessOutcome:
    """Run `argv` in its own process group, stream its output, and leave no process of it behind.

    When the parser says the session is over and the process has not exited `result_grace_s`
    later, the group is stopped and the outcome says so (`stopped_after_result`)."""
    loop = asyncio.get_running_loop()
    stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    started = loop.time()

    over = asyncio.Event()

    def on_stdout(text: str) -> None:
        parser.feed(text, transcript.agent_line(text))
        if not over.is_set() and _session_over(parser):
            over.set()

    def on_stderr(text: str) -> None:
        transcript.stderr_line(text)
        if text.strip():
            stderr_tail.append(text[:STDERR_TAIL_CHARS])

    readers = [
        asyncio.ensure_future(_pump_lines(process.stdout, on_stdout, _overlong_reporter(transcript, "stdout"))),
        asyncio.ensure_future(_pump_lines(process.stderr, on_stderr, _overlong_reporter(transcript, "stderr"))),
    ]
    writer = asyncio.ensure_future(_feed_stdin(process, stdin_data))
    timed_out = False
    stopped_after_result = False
    try:
        if on_start is not None:
            on_start(process.pid)
        exited = asyncio.ensure_future(_exit_of(process))
        ended = asyncio.ensure_future(over.wait())
        try:
            await asyncio.wait({exited, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done() and ended.done():
                await asyncio.wait({exited}, timeout=result_grace_s)
                if not exited.done():
                    stopped_after_result = True
                    transcript.annotate(
                        "note",
                        text=f"the session printed its result but did not exit within "
                        f"{describe_seconds(result_grace_s)}; its process group was stopped",
                    )
            elif not exited.done():
                timed_out = True
                transcript.annotate("timeout", after_s=timeout)
        finally:
            for waiter in (exited, ended):
                waiter.cancel()
            await asyncio.gather(exited, ended, return_exceptions=True)
    except BaseException as interruption:
        try:
            await _uninterruptibly(_finish(process, readers, writer, grace_s, transcript))
        finally:
            if isinstance(interruption, asyncio.CancelledError):
                transcript.annotate("cancelled")
            transcript.annotate("exit", status=process.returncode, duration_s=round(loop.time() - started, 3))
        raise
    await _uninterruptibly(_finish(process, readers, writer, grace_s, transcript))
    duration = round(loop.time() - started, 3)
    exit_status = None if timed_out or stopped_after_result else process.returncode
    transcript.annotate("exit", status=process.returncode, duration_s=duration)
    return ProcessOutcome(exit_status, timed_out, duration, tuple(stderr_tail), stopped_after_result)


async def _finish(
    process: asyncio.subprocess.Process,
    readers: Sequence[asyncio.Future[None]],
    writer: asyncio.Future[None],
    grace_s: float,
    transcript: Transcript,
) -> None:
    """Stop whatever is left of the process group, then let the output readers drain."""
    exited_alone = process.returncode is not None
    stopped = await stop_process_group(process, grace_s)
    if exited_alone and stopped:
        transcript.annotate("note", text="stopped processes the agent left running in its process group")
    writer.cancel()
    done, pending = await asyncio.wait(readers, timeout=DRAIN_WAIT_S)
    for reader in pending:
        reader.cancel()
    if pending:
        transcript.annotate(
            "note",
            text="output still open after the agent's process group was stopped; "
            "a descendant left the group and was not waited for",
        )
    await asyncio.gather(writer, *pending, return_exceptions=True)
    for reader in done:
        reader.result()


async def stop_process_group(process: asyncio.subprocess.Process, grace_s: float) -> bool:
    """SIGTERM the process's group, SIGKILL what is left after `grace_s`, reap the leader.

    Returns whether any process of the group was still alive.
    """
    group = process.pid
    alive = group_has_live_members(group) or process.returncode is None
    if alive:
        _signal(process, signal.SIGTERM)
        if not await _wait_group_gone(group, grace_s):
            _signal(process, signal.SIGKILL)
            await _wait_group_gone(group, KILL_WAIT_S)
    await _exit_of(process)
    return alive


async def _exit_of(process: asyncio.subprocess.Process) -> int:
    """The process's exit status once it exited.

    Not `process.wait()` alone: asyncio answers that only once the output pipes are closed too, and
    a child the agent left behind can hold them open long after the agent itself exited.
    """
    if process.returncode is None:
        # Woken by the exit itself in the usual case (its pipes close with it); polled otherwise.
        waiter = asyncio.ensure_future(process.wait())
        try:
            while process.returncode is None and not waiter.done():
                await asyncio.wait({waiter}, timeout=_EXIT_POLL_S)
        finally:
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
    assert process.returncode is not None
    return process.returncode


async def _wait_group_gone(group: int, within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while group_has_live_members(group):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


def _signal(process: asyncio.subprocess.Process, signum: int) -> None:
    """Signal the process's whole group, and the process itself should it have left the group."""
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass
    if process.returncode is None:
        try:
            process.send_signal(signum)
        except ProcessLookupError:
            pass


def group_has_live_members(group: int) -> bool:
    """Whether a process of `group` is still running (zombies, already dead, do not count)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    with os.scandir(proc) as entries:
        return any(entry.name.isdigit() and _is_live_member(Path(entry.path, "stat"), group) for entry in entries)


def _is_live_member(stat_file: Path, group: int) -> bool:
    try:
        stat = stat_file.read_text()
    except OSError:
        return False
    # Fields after the parenthesised command name: state, ppid, pgrp, ...
    fields = stat[stat.rfind(")") + 2 :].split()
    return len(fields) > 2 and fields[2] == str(group) and fields[0] not in ("Z", "X")


async def _uninterruptibly(work: Awaitable[None]) -> None:
    """Await `work` to its end even if this task is cancelled meanwhile (cleanup must finish);
    a cancellation that arrived meanwhile is raised once the work is done."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError


async def _feed_stdin(process: asyncio.subprocess.Process, data: bytes) -> None:
    stdin = process.stdin
    if stdin is None:
        return
    try:
        stdin.write(data)
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the agent exited without reading its prompt; its exit status says what happened
    finally:
        stdin.close()


async def _pump_lines(
    stream: asyncio.StreamReader | None,
    on_line: Callable[[str], None],
    on_overlong: Callable[[str, int], None],
) -> None:
    """Call `on_line` for every line of `stream`, holding at most `MAX_LINE_BYTES` of one line."""
    if stream is None:
        return
    line = bytearray()
    size = 0
    while chunk := await stream.read(_READ_CHUNK):
        start = 0
        while (newline := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:newline]
            size += len(piece)
            _keep(line, piece)
            _emit(line, size, on_line, on_overlong)
            line.clear()
            size = 0
            start = newline + 1
        piece = chunk[start:]
        size += len(piece)
        _keep(line, piece)
    if size:
        _emit(line, size, on_line, on_overlong)


def _keep(line: bytearray, piece: bytes) -> None:
    room = MAX_LINE_BYTES - len(line)
    if room > 0:
        line += piece[:room]


def _emit(line: bytearray, size: int, on_line: Callable[[str], None], on_overlong: Callable[[str, int], None]) -> None:
    text = line.decode("utf-8", errors="replace").removesuffix("\r")
    if size > MAX_LINE_BYTES:
        on_overlong(text[:TRUNCATED_HEAD_CHARS], size)
    else:
        on_line(text)


def _overlong_reporter(transcript: Transcript, stream: str) -> Callable[[str, int], None]:
    def report(head: str, size: int) -> None:
        transcript.annotate(stream, truncated=True, bytes=size, text=head)

    return report


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _tail_text(lines: Sequence[str]) -> str:
    text = " | ".join(line.strip() for line in lines)
    return text if len(text) <= STDERR_TAIL_CHARS else "…" + text[-STDERR_TAIL_CHARS:]
