"""Agent sessions as rows (bot/runner/sessions.py): what a session leaves in `agent_sessions`, and how the
sessions a previous life of lanebot left running are stopped and marked lost.

The wrapped adapter here is a stand-in with the adapters' interface (bot/edges/agents/base.py `Agent`);
the real adapters' sessions are recorded the same way in tests/web/test_issue_flow.py.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from bot.edges.agents import AgentConfigError, AgentRequest, AgentResult
from bot.edges.agents.base import Usage
from bot.edges.agents.process import group_has_live_members
from bot.edges.store import runs
from bot.runner.sessions import RecordedAgent, abandon_running, host_name
from tests.edges.test_store import new_run


class StandIn:
    name = "stand-in"

    def __init__(self, *, ok: bool = True, raises: BaseException | None = None) -> None:
        self.ok, self.raises = ok, raises

    async def run(self, request: AgentRequest, *, on_start=None) -> AgentResult:
        if self.raises is not None:
            raise self.raises
        on_start(4242)
        return AgentResult(
            exit_status=0 if self.ok else 3,
            final_message="done",
            usage=Usage(10, 20, 0.5),
            transcript=request.transcript,
            error=None if self.ok else "it exited with status 3",
        )


def request(tmp_path: Path) -> AgentRequest:
    return AgentRequest(prompt="plan it", cwd=tmp_path, transcript=tmp_path / "plan-attempt-1.jsonl", timeout=5.0)


def recorded(engine, run_id: int, agent) -> RecordedAgent:
    return RecordedAgent(agent, engine, run_id=run_id, kind="plan", host="runner-1")


@pytest.mark.anyio
async def test_a_session_is_a_row_from_start_to_end_with_its_pid_usage_and_transcript(engine, tmp_path):
    run = new_run(engine)
    pids = []
    await recorded(engine, run.id, StandIn()).run(request(tmp_path), on_start=pids.append)

    [session] = runs.sessions(engine, run.id)
    assert (session.kind, session.status, session.pid, session.host, session.exit_status) == (
        "plan",
        "succeeded",
        4242,
        "runner-1",
        0,
    )
    assert (session.input_tokens, session.output_tokens, session.cost_usd) == (10, 20, 0.5)
    assert session.transcript_path == str(tmp_path / "plan-attempt-1.jsonl") and session.ended_at is not None
    assert pids == [4242]


@pytest.mark.anyio
async def test_a_failed_session_keeps_why_and_one_that_could_not_start_says_so(engine, tmp_path):
    run = new_run(engine)
    await recorded(engine, run.id, StandIn(ok=False)).run(request(tmp_path))
    with pytest.raises(AgentConfigError):
        await recorded(engine, run.id, StandIn(raises=AgentConfigError("no `claude` on PATH"))).run(request(tmp_path))

    assert [(s.status, s.failure) for s in runs.sessions(engine, run.id)] == [
        ("failed", "it exited with status 3"),
        ("failed", "no `claude` on PATH"),
    ]


@pytest.mark.anyio
async def test_a_session_cut_short_by_cancellation_is_cancelled(engine, tmp_path):
    run = new_run(engine)
    with pytest.raises(asyncio.CancelledError):
        await recorded(engine, run.id, StandIn(raises=asyncio.CancelledError())).run(request(tmp_path))

    assert [s.status for s in runs.sessions(engine, run.id)] == ["cancelled"]


@pytest.mark.anyio
async def test_abandoning_stops_the_left_running_agents_of_those_kinds_and_marks_them_lost(engine):
    run = new_run(engine)
    agent = subprocess.Popen(["sleep", "60"], start_new_session=True)  # noqa: ASYNC220 - a stand-in left-running agent
    try:
        planner = runs.start_session(engine, run_id=run.id, kind="plan", host=host_name(), pid=agent.pid)
        lane = runs.start_session(engine, run_id=run.id, kind="lane", host=host_name())

        assert await abandon_running(engine, run.id, ("plan",), "lanebot restarted") == 1

        assert agent.wait(timeout=10) is not None and not group_has_live_members(agent.pid)
        statuses = {s.id: (s.status, s.failure, s.counts_as_retry) for s in runs.sessions(engine, run.id)}
        assert statuses[planner.id] == ("lost", "lanebot restarted", False)
        assert statuses[lane.id][0] == "running"
    finally:
        agent.kill()
        agent.wait()
