"""Tokens and cost as people see them: per lane and per run in the progress comment, the pull
request and `/status`, and the budget beside the session bound on the gate."""

from __future__ import annotations

from html import unescape

from bot.core.budget import BudgetCaps, Spent
from bot.core.graph import SessionBudget, build_graph
from bot.core.lifecycle import RunState
from bot.render.answers import render_status
from bot.render.gate import render_gate
from bot.render.progress import LaneView, render_progress
from bot.render.pull_request import LaneSummary, pr_body

UNITS = [
    {"id": "a", "title": "Do A", "needs": [], "files": "^a/", "check": "true", "brief": "A."},
    {"id": "b", "title": "Do B", "needs": ["a"], "files": "^b/", "check": "true", "brief": "B."},
]
GRAPH = build_graph(UNITS)
PAID = Spent(12_000, 3_400, 0.3)
UNPRICED = Spent(800, 90, None)


def lanes() -> list[LaneView]:
    return [
        LaneView("a", "Do A", "merged", 0, 1, None, None, "lanebot-lanes/1/a", spent=PAID),
        LaneView("b", "Do B", "pending", 1, 0, None, None, "lanebot-lanes/1/b"),
    ]


def test_the_progress_comment_shows_each_lanes_spending_and_the_runs():
    body = unescape(render_progress(1, RunState.RUNNING, lanes(), None, None, spent=Spent(12_800, 3_490, 0.3)))
    [line_a] = [line for line in body.splitlines() if line.startswith("- [x] `a`")]
    [line_b] = [line for line in body.splitlines() if line.startswith("- [ ] `b`")]
    assert "12,000 tokens in, 3,400 out, $0.30" in line_a
    assert "tokens" not in line_b  # no session yet: nothing to say
    assert "**Spent:** 12,800 tokens in, 3,490 out, $0.30 in all." in body


def test_a_run_whose_sessions_reported_no_cost_says_so_rather_than_zero_dollars():
    body = unescape(render_progress(1, RunState.RUNNING, lanes()[1:], None, None, spent=UNPRICED))
    assert "**Spent:** 800 tokens in, 90 out, no cost reported in all." in body
    assert "$0.00" not in body


def test_status_shows_what_the_run_spent_and_each_lane():
    text = unescape(render_status(run_id=1, state="running", lanes=lanes(), spent=PAID))
    assert "**Spent:** 12,000 tokens in, 3,400 out, $0.30 in all." in text
    assert "`a` Do A: merged" in text and "$0.30" in text.split("`a` Do A")[1]


def test_the_pull_request_shows_each_lanes_spending_and_the_runs():
    summaries = [
        LaneSummary("a", "Do A", "lanebot-lanes/1/a", 1, 60.0, 1, None, spent=PAID),
        LaneSummary("b", "Do B", "lanebot-lanes/1/b", 2, 30.0, 1, None, spent=UNPRICED),
    ]
    body = unescape(
        pr_body(
            integrator_body="",
            notes=[],
            issue_number=1,
            graph=GRAPH,
            lanes=summaries,
            schedule="barrier",
            wall_clock_s=None,
            sum_of_lanes_s=None,
            sessions={"lane": 2},
            spent=Spent(12_800, 3_490, 0.3),
        )
    )
    assert "| Unit | Title | Lane branch | Round | Duration | Attempts | Spent | Check |" in body
    assert "| 12,000 tokens in, 3,400 out, $0.30 |" in body
    assert "| 800 tokens in, 90 out, no cost reported |" in body
    assert "**Spent:** 12,800 tokens in, 3,490 out, $0.30 in all." in body


def gate(caps: BudgetCaps) -> str:
    return unescape(
        render_gate(
            run_id=1,
            revision=1,
            graph=GRAPH,
            budget=SessionBudget(lane_attempts=2),
            state=RunState.AWAITING_APPROVAL,
            issue_number=1,
            repository="acme/tasks",
            plan_source="hand",
            schedule="barrier",
            max_lanes=4,
            verify="make test",
            cost_caps=caps,
        )
    )


def test_the_gate_shows_the_budget_beside_the_session_bound():
    body = gate(BudgetCaps(max_cost_usd=5, daily_cost_usd=20))
    budget = body.split("**Sessions:** up to ", 1)[1].split("\n\n")[1]
    assert budget == (
        "**Budget:** at most $5.00 per run and $20.00 per repository per day (UTC) (`budget`): "
        "at the cap no new session starts, and the run waits for `/retry`."
    )


def test_the_gate_says_when_there_is_no_cost_cap():
    assert "**Budget:** no cost cap (`budget.max_cost_usd`, `budget.daily_cost_usd`)" in gate(BudgetCaps())
    assert "$0.00" not in gate(BudgetCaps())
