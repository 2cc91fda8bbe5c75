"""Agent sessions as rows, and stopping what a previous life of lanebot left running.

`RecordedAgent` wraps any adapter (bot/edges/agents/): before a session starts it writes a `running`
row (kind, lane, host, transcript), the process id as soon as the process exists, and at the end
how it ended, with its exit status, tokens and cost. A session that could not start is `failed`
with the reason; one cut short by cancellation is `cancelled`. Recovery finds a session that
was running when lanebot died by these rows, and stops its process group by the recorded pid
(`stop_session_process`, `abandon_running`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from anyio import to_thread
from sqlalchemy.engine import Engine

from bot.edges.agents import Agent, AgentConfigError, AgentRequest, AgentResult
from bot.edges.agents.process import group_has_live_members
from bot.edges.store import runs as store
from bot.edges.store.models import AgentSession

KILL_GRACE_S = 3.0
_T = TypeVar("_T")


@functools.cache
def host_name() -> str:
    """This runner host's name, recorded on the agent sessions it starts: `lanebot worker --name`,
    else the machine's host name."""
    return _HOST_NAME or socket.gethostname()


def name_this_host(name: str) -> None:
    """Record `name` as this process's host on the sessions it starts from now on."""
    global _HOST_NAME
    _HOST_NAME = name


_HOST_NAME: str | None = None


class RecordedAgent:
    """`agent`, with each session a row of run `run_id` of `kind` (and `lane_id`) on `host`."""

    def __init__(
        self, agent: Agent, engine: Engine, *, run_id: int, kind: str, host: str, lane_id: int | None = None
    ) -> None:
        self.agent = agent
        self.engine = engine
        self.run_id = run_id
        self.kind = kind
        self.host = host
        self.lane_id = lane_id
        self.name = agent.name

    async def run(self, request: AgentRequest, *, on_start: Callable[[int], None] | None = None) -> AgentResult:
        session = await _db(
            store.start_session,
            self.engine,
            run_id=self.run_id,
            kind=self.kind,
            lane_id=self.lane_id,
            host=self.host,
            transcript_path=str(request.transcript),
        )
        session_id = session.id
        assert session_id is not None

        def started(pid: int) -> None:
            store.update_session(self.engine, session_id, pid=pid)
            if on_start is not None:
                on_start(pid)

        try:
            result = await self.agent.run(request, on_start=started)
        except AgentConfigError as error:
            await _db(store.finish_session, self.engine, session_id, status="failed", failure=str(error))
            raise
        except BaseException:
            await _db(store.finish_session, self.engine, session_id, status="cancelled")
            raise
        await _db(store.finish_session, self.engine, session_id, **outcome_fields(result))
        return result


def outcome_fields(result: AgentResult | str) -> dict[str, Any]:
    """How a session ended, as `finish_session` takes it; a string is why it could not run."""
    if isinstance(result, str):
        return {"status": "failed", "failure": result}
    return {
        "status": "succeeded" if result.ok else "failed",
        "failure": None if result.ok else result.error,
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
        "cost_usd": result.usage.cost_usd,
        "exit_status": result.exit_status,
    }


async def stop_session_process(session: AgentSession) -> None:
    """Stop what is left of a session's agent on this host: its process group (it leads one)."""
    pid = session.pid
    if pid is None or session.host not in (None, host_name()) or not _leads_group(pid):
        return
    for signum in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signum)
        deadline = time.monotonic() + KILL_GRACE_S
        while group_has_live_members(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not group_has_live_members(pid):
            return


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


async def abandon_running(engine: Engine, run_id: int, kinds: Collection[str], why: str) -> int:
    """Sessions of `kinds` the rows call running although nothing in this process runs them (a
    previous life of lanebot did): their process groups stopped, the rows `lost` (no retry spent)."""
    count = 0
    for session in await _db(store.running_sessions, engine, run_id):
        if session.kind in kinds:
            await stop_session_process(session)
            count += await _db(
                store.finish_session, engine, session.id, status="lost", counts_as_retry=False, failure=why
            )
    return count


async def _db(function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    return await to_thread.run_sync(functools.partial(function, *args, **kwargs))
