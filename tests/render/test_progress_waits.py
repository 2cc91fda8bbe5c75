"""The progress comment says why a run waits: held by whom since when and why, a full lane cap,
GitHub's rate limit until when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.core.lifecycle import RunState
from bot.core.waiting import Held, NoLaneSlot, RateLimited
from bot.render.progress import RateLimitNote, render_progress, wait_line
from tests.render.test_progress import worked_example_lanes

SINCE = datetime(2026, 12, 2, 17, 45, tzinfo=UTC)


def test_a_hold_names_who_held_the_run_since_when_and_why_and_what_lifts_it():
    line = wait_line(Held("maintainer", SINCE, "the CI is down"))
    assert line == (
        "**Held** by @&#8203;maintainer since 2026-12-02 17:45 UTC: the CI is down. "
        "No new agent session starts until `/unhold`; the running ones finish."
    )


def test_a_hold_without_a_reason_says_so_without_one():
    assert "since 2026-12-02 17:45 UTC. No new agent session" in wait_line(Held("maintainer", SINCE))


def test_the_reason_given_for_a_hold_is_untrusted_and_cannot_mention_or_format():
    line = wait_line(Held("maintainer", SINCE, "@everyone see #12 **now**\nand more"))
    assert "@everyone" not in line and "**now**" not in line and "\n" not in line


def test_lanes_waiting_for_a_slot_are_named_with_the_cap_that_keeps_them():
    assert wait_line(NoLaneSlot(("cli-flag", "tui-rows"), 2)) == (
        "**Waiting** for a lane slot: `cli-flag`, `tui-rows` may start, but 2 lanes run already (`build.max_lanes`)."
    )
    assert "but 1 lane runs already" in wait_line(NoLaneSlot(("a",), 1))


def test_a_rate_limit_says_until_when():
    until = SINCE + timedelta(minutes=20)
    assert wait_line(RateLimited(until)) == "**Waiting** for GitHub's rate limit until 18:05 UTC."


def test_a_held_run_shows_its_hold_and_offers_unhold_instead_of_hold():
    hold = Held("maintainer", SINCE, "the CI is down")
    body = render_progress(7, RunState.RUNNING, worked_example_lanes(), 60, 90, waits=[hold], held=True)
    assert wait_line(hold) in body
    assert "`/unhold`, `/status`" in body.splitlines()[-1] and "/hold" not in body.splitlines()[-1]


def test_a_run_that_is_not_held_offers_hold_and_says_nothing_of_waiting():
    body = render_progress(7, RunState.RUNNING, worked_example_lanes(), 60, 90)
    assert "`/hold [reason]`" in body.splitlines()[-1]
    assert "**Held**" not in body and "**Waiting**" not in body


def test_a_rate_limit_being_waited_for_is_said_once():
    until = SINCE + timedelta(minutes=20)
    note = RateLimitNote(waits=1, seconds=60, until=until, waiting=True)
    body = render_progress(
        7, RunState.RUNNING, worked_example_lanes(), 60, 90, rate_limit=note, waits=[RateLimited(until)]
    )
    assert body.count("rate limit") == 1
