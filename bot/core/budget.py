"""What a run's agent sessions cost, and whether the budget lets another one start. Pure, no I/O.

The costs are what each agent CLI reported for its session (`AgentSession.cost_usd`); a session
whose CLI reports no cost (the recipe and command adapters, a session cut short) adds nothing and
is not counted as reporting one, so a run where no session did says "no cost reported", never $0.

`budget_stop` is the decision lanebot makes before it starts any new session of a run: a run at
its cap (`budget.max_cost_usd`) or a repository at its day's cap (`budget.daily_cost_usd`, the UTC
day) starts nothing new. A cap is reached when the spending is at or above it: sessions already
running finish, so a run may end a little above its cap, never start a session beyond it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["BudgetCaps", "Reported", "Spent", "budget_stop", "lane_spent", "usd"]


class Reported(Protocol):
    """What a session row says of its usage (bot.edges.store.models.AgentSession has these)."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cost_usd(self) -> float | None: ...


@dataclass(frozen=True)
class Spent:
    """The tokens and cost of some sessions, added up."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None: no session reported a cost

    @classmethod
    def of(cls, sessions: Iterable[Reported]) -> Spent:
        input_tokens = output_tokens = 0
        costs: list[float] = []
        for session in sessions:
            input_tokens += session.input_tokens or 0
            output_tokens += session.output_tokens or 0
            if session.cost_usd is not None:
                costs.append(session.cost_usd)
        return cls(input_tokens, output_tokens, sum(costs) if costs else None)

    @property
    def dollars(self) -> float:
        """The cost, 0 when none was reported (what a cap compares against)."""
        return self.cost_usd or 0.0

    def describe(self) -> str:
        """One line: "12,345 tokens in, 678 out, $0.42", or "…, no cost reported"."""
        cost = usd(self.cost_usd) if self.cost_usd is not None else "no cost reported"
        return f"{self.input_tokens:,} tokens in, {self.output_tokens:,} out, {cost}"


class LaneSession(Reported, Protocol):
    @property
    def lane_id(self) -> int | None: ...


def lane_spent(sessions: Iterable[LaneSession], lane_id: int | None) -> Spent | None:
    """What the lane's sessions (its attempts, a resolver of its merge) used; None before it had one."""
    own = [session for session in sessions if session.lane_id == lane_id]
    return Spent.of(own) if own else None


@dataclass(frozen=True)
class BudgetCaps:
    """`budget.max_cost_usd` (per run) and `budget.daily_cost_usd` (per repository, UTC day); None: no cap."""

    max_cost_usd: float | None = None
    daily_cost_usd: float | None = None

    def describe(self) -> str | None:
        """The caps in words, None when there is none."""
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"{usd(self.max_cost_usd)} per run")
        if self.daily_cost_usd is not None:
            parts.append(f"{usd(self.daily_cost_usd)} per repository per day (UTC)")
        return " and ".join(parts) or None


def budget_stop(caps: BudgetCaps, *, run_spent: float, today_spent: float) -> str | None:
    """Why no new session of the run may start, or None when the caps allow it.

    `run_spent` is what the run's sessions cost so far; `today_spent` what the repository's
    sessions started today (UTC) cost, every run's together."""
    if caps.max_cost_usd is not None and run_spent >= caps.max_cost_usd:
        return f"run spent {usd(run_spent)} of {usd(caps.max_cost_usd)}"
    if caps.daily_cost_usd is not None and today_spent >= caps.daily_cost_usd:
        return f"repository spent {usd(today_spent)} today of {usd(caps.daily_cost_usd)}"
    return None


def usd(amount: float) -> str:
    """Dollars for people: two decimals, four under a cent ($0.0042), so a small cost never shows $0.00."""
    if 0 < abs(amount) < 0.01:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"
