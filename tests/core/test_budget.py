"""The budget: what sessions cost added up, and whether the caps let another session start."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from bot.core.budget import BudgetCaps, Spent, budget_stop, lane_spent, usd


@dataclass
class Row:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    lane_id: int | None = None


def test_spent_adds_up_tokens_and_the_costs_that_were_reported():
    spent = Spent.of([Row(1_000, 200, 0.25), Row(None, None, None), Row(500, 50, 0.5)])
    assert spent == Spent(1_500, 250, 0.75)
    assert spent.describe() == "1,500 tokens in, 250 out, $0.75"


def test_sessions_that_reported_no_cost_say_so_rather_than_zero_dollars():
    spent = Spent.of([Row(10, 2, None), Row()])
    assert spent.cost_usd is None
    assert spent.dollars == 0.0
    assert spent.describe() == "10 tokens in, 2 out, no cost reported"
    assert Spent.of([]).describe() == "0 tokens in, 0 out, no cost reported"


def test_a_reported_cost_of_zero_is_shown_as_zero():
    assert Spent.of([Row(1, 1, 0.0)]).describe() == "1 tokens in, 1 out, $0.00"


def test_a_lane_spent_what_its_own_sessions_did_and_nothing_before_its_first():
    sessions = [Row(5, 1, 0.1, lane_id=None), Row(10, 2, 0.2, lane_id=1), Row(20, 4, 0.3, lane_id=1)]
    assert lane_spent(sessions, 1) == Spent(30, 6, 0.5)
    assert lane_spent(sessions, 2) is None


@pytest.mark.parametrize(
    ("amount", "shown"),
    [(0, "$0.00"), (0.004, "$0.0040"), (0.42, "$0.42"), (12, "$12.00"), (1234.5, "$1,234.50")],
)
def test_dollars_keep_a_small_cost_visible(amount, shown):
    assert usd(amount) == shown


def test_without_caps_every_session_may_start():
    assert budget_stop(BudgetCaps(), run_spent=1_000.0, today_spent=1_000.0) is None


def test_a_run_below_its_cap_may_start_another_session():
    assert budget_stop(BudgetCaps(max_cost_usd=1.0), run_spent=0.99, today_spent=0.99) is None


@pytest.mark.parametrize("spent", [1.0, 1.3])
def test_a_run_at_or_above_its_cap_starts_nothing_new_and_says_what_it_spent(spent):
    reason = budget_stop(BudgetCaps(max_cost_usd=1.0), run_spent=spent, today_spent=spent)
    assert reason == f"run spent {usd(spent)} of $1.00"


def test_a_repository_at_its_days_cap_starts_nothing_new_whatever_the_run_spent():
    caps = BudgetCaps(max_cost_usd=5.0, daily_cost_usd=10.0)
    assert budget_stop(caps, run_spent=0.5, today_spent=10.25) == "repository spent $10.25 today of $10.00"
    assert budget_stop(caps, run_spent=0.5, today_spent=9.5) is None


def test_the_runs_own_cap_is_named_first_when_both_are_reached():
    caps = BudgetCaps(max_cost_usd=1.0, daily_cost_usd=1.0)
    assert budget_stop(caps, run_spent=2.0, today_spent=3.0) == "run spent $2.00 of $1.00"


def test_the_caps_in_words():
    assert BudgetCaps().describe() is None
    assert BudgetCaps(max_cost_usd=2).describe() == "$2.00 per run"
    assert BudgetCaps(daily_cost_usd=30).describe() == "$30.00 per repository per day (UTC)"
