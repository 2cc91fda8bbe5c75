"""The budget, asked before lanebot starts any new agent session of a run (bot.core.budget decides).

What the sessions cost comes from the store (what each CLI reported); the caps from the run's
workflow (`budget.max_cost_usd`, `budget.daily_cost_usd`). A run's workflow is read at its base
commit, so a cap raised on the default branch since would never reach it: when the run's caps stop
it, the default branch's `.github/lanebot.yml` is read again and its caps decide. That is how
"raise the cap, then `/retry`" continues a run.

`block_for_budget` moves the run to `blocked` saying what it spent and which command continues,
and posts that on the issue once: only the process whose compare-and-set moved the run posts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from bot.core.budget import BudgetCaps, Spent, budget_stop
from bot.core.lifecycle import Event, RunState, transition
from bot.core.text import code_span, markdown_text, marker
from bot.core.workflow import WorkflowError
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.store import runs as store
from bot.edges.store.models import Lane
from bot.runner.context import RuntimeContext
from bot.runner.repository_workflow import installation_workflow
from bot.runner.runtime import Runtime, db, load_runtime

log = logging.getLogger(__name__)

__all__ = ["block_for_budget", "budget_stop_for", "integrate_over_budget", "start_of_today"]

CURRENT_CAPS_TTL_S = 60.0
# (engine, run, the run row's updated_at) -> (when read, the default branch's caps then). A `/retry`
# moves the run, which changes updated_at: the caps are read afresh for it.
_CURRENT_CAPS: dict[tuple[int, int, datetime], tuple[float, BudgetCaps]] = {}


def start_of_today(now: datetime | None = None) -> datetime:
    """Midnight UTC of today: the daily cap counts the sessions started since."""
    return (now or datetime.now(UTC)).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


async def budget_stop_for(rt: Runtime) -> str | None:
    """Why no new session of the run may start ("run spent $X of $Y", "repository spent $X today
    of $Y"), or None when the budget allows one."""
    caps = rt.workflow.budget.caps()
    if caps == BudgetCaps():
        return None
    reason = await _stop(rt, caps)
    if reason is None:
        return None
    current = await _current_caps(rt)
    return reason if current == caps else await _stop(rt, current)


async def _stop(rt: Runtime, caps: BudgetCaps) -> str | None:
    if caps == BudgetCaps():
        return None
    run_spent, today_spent = await db(
        store.spent_usd, rt.engine, rt.run_id, repository=rt.run.repository, since=start_of_today()
    )
    return budget_stop(caps, run_spent=run_spent, today_spent=today_spent)


async def _current_caps(rt: Runtime) -> BudgetCaps:
    """The caps the default branch's workflow sets now; the run's own when it cannot be read."""
    key = (id(rt.engine), rt.run_id, rt.run.updated_at)
    cached = _CURRENT_CAPS.get(key)
    if cached is not None and time.monotonic() - cached[0] < CURRENT_CAPS_TTL_S:
        return cached[1]
    github = rt.context.github
    try:
        workflow = await installation_workflow(github, rt.run.installation_id, rt.run.repository)
        caps = workflow.budget.caps()
    except WorkflowError as error:
        log.warning("run %d: the default branch's workflow is not valid (%s); its own caps stand", rt.run_id, error)
        caps = rt.workflow.budget.caps()
    for stale in [known for known in _CURRENT_CAPS if known[:2] == key[:2]]:
        del _CURRENT_CAPS[stale]  # the run's row moved on: its earlier reads are never asked for again
    _CURRENT_CAPS[key] = (time.monotonic(), caps)
    return caps


async def integrate_over_budget(context: RuntimeContext, run_id: int) -> bool:
    """Before the integrate step of a run in `integrating`: whether the budget blocked the run instead."""
    rt = await load_runtime(context, run_id)
    reason = await budget_stop_for(rt)
    return reason is not None and await block_for_budget(rt, reason, state=RunState.INTEGRATING)


async def block_for_budget(rt: Runtime, reason: str, *, state: RunState, lanes: Sequence[Lane] = ()) -> bool:
    """Move the run from `state` (running, or integrating) to `blocked` for `reason`, and say so on
    the issue; whether this call moved it. Not while one of `lanes` runs: it finishes first (and
    the next reconcile asks again). Nothing else is touched: branches, transcripts and the lanes'
    rows stay as they are."""
    if any(lane.state == "running" for lane in lanes):
        return False
    event = Event.LANE_BLOCKED if state is RunState.RUNNING else Event.INTEGRATE_FAILED
    key = "daily_cost_usd" if reason.startswith("repository") else "max_cost_usd"
    error = (
        f"the budget is reached: {reason}. No new agent session starts; branches and transcripts are kept. "
        f"Raise budget.{key} in .github/lanebot.yml, then /retry continues."
    )
    moved = await db(store.transition, rt.engine, rt.run_id, state.value, transition(state, event).value, error=error)
    if not moved:
        return False
    stop = await db(store.append_event, rt.engine, rt.run_id, "budget_stop", {"reason": reason})
    try:
        await _say(rt, reason, key, stop.id or 0)
    except Exception:  # the run's state and the progress comment say it too
        log.warning("run %d: could not post that the budget stopped it", rt.run_id, exc_info=True)
    return True


async def _say(rt: Runtime, reason: str, key: str, stop_id: int) -> None:
    spent = Spent.of(await db(store.sessions, rt.engine, rt.run_id))
    head = marker("budget", rt.run_id, stop=stop_id)
    wait = " (or wait for the next UTC day)" if key == "daily_cost_usd" else ""
    body = (
        f"{head}\n**lanebot stopped at its budget:** {markdown_text(reason)}. "
        f"This run's sessions so far: {markdown_text(spent.describe())}.\n\n"
        "No new agent session starts (those running finish); every branch and transcript is kept.\n\n"
        f"To continue, raise {code_span('budget.' + key)} in {code_span('.github/lanebot.yml')} on the default "
        f"branch{wait}, then comment {code_span('/retry')}.\n"
    )
    await post_or_update_marked_comment(rt.client, rt.run.repository, rt.issue_number, body, marker=head)
