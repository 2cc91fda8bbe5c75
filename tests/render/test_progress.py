"""The progress comment (a checklist of lanes, edited in place) and the throttle on its edits."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.lifecycle import RunState
from bot.core.text import COMMENT_LIMIT, parse_marker
from bot.render.answers import render_status
from bot.render.progress import (
    LaneView,
    Throttle,
    failure_tail,
    lane_checklist,
    render_progress,
    shows_hosts,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def lane(
    unit_id: str,
    state: str,
    *,
    round: int = 0,
    attempts: int = 1,
    minutes: float | None = None,
    title: str | None = None,
    failure: str | None = None,
    started: bool = True,
) -> LaneView:
    started_at = T0 if started else None
    finished_at = T0 + timedelta(minutes=minutes) if minutes is not None else None
    return LaneView(
        unit_id,
        title or f"Do {unit_id}",
        state,
        round,
        attempts,
        started_at,
        finished_at,
        f"lanebot/42/{unit_id}",
        failure,
    )


def worked_example_lanes() -> list[LaneView]:
    return [
        lane("migration", "merged", minutes=10),
        lane("tui-rows", "running", attempts=2),
        lane("api-endpoint", "pending", round=1, attempts=0, started=False),
        lane("cli-flag", "finished", minutes=5),
    ]


def test_the_comment_carries_the_progress_marker_of_its_run():
    body = render_progress(12, RunState.RUNNING, worked_example_lanes(), 600, 900)
    assert parse_marker(body) == {"kind": "progress", "run": 12}


def test_each_lane_is_a_checklist_line_ticked_only_when_merged():
    body = render_progress(12, RunState.RUNNING, worked_example_lanes(), 600, 900, now=T0 + timedelta(minutes=12))
    lines = [line for line in body.splitlines() if line.startswith("- [")]
    assert lines == [
        "- [x] `migration` Do migration: merged · round 1 · 1 attempt · 10 min · branch `lanebot/42/migration`",
        "- [ ] `tui-rows` Do tui-rows: running · round 1 · 2 attempts · 12 min so far · branch `lanebot/42/tui-rows`",
        "- [ ] `api-endpoint` Do api-endpoint: waiting · round 2 · 0 attempts · branch `lanebot/42/api-endpoint`",
        "- [ ] `cli-flag` Do cli-flag: passed its check, waiting to merge · round 1 · 1 attempt · 5 min"
        " · branch `lanebot/42/cli-flag`",
    ]
    assert "1 of 4 lanes merged." in body


def test_without_a_clock_a_running_lane_shows_when_it_started():
    body = render_progress(1, "running", [lane("a", "running")], None, None)
    assert "started 12:00 UTC" in body


def test_the_wall_clock_is_shown_against_the_sum_of_the_lanes():
    body = render_progress(1, "running", worked_example_lanes(), 1800, 2700)
    assert "**Wall-clock:** 30 min, against 45 min for the lanes one after the other: 1.5× faster." in body


def test_lane_titles_are_escaped():
    body = render_progress(
        1, "running", [lane("a", "running", title="<img src=x> | `x` @octocat [l](http://e)")], None, None
    )
    line = next(line for line in body.splitlines() if line.startswith("- ["))
    assert "<img" not in line and "@octocat" not in line and "](" not in line


def test_a_blocked_run_names_the_failed_lane_and_shows_the_tail_of_why():
    failure = "".join(f"line {number}\n" for number in range(1, 201)) + "AssertionError: boom"
    lanes = [
        lane("migration", "merged", minutes=10),
        lane("api-endpoint", "failed", round=1, attempts=3, failure=failure),
    ]
    body = render_progress(3, RunState.BLOCKED, lanes, 900, 1200)
    assert "**Blocked:**" in body
    assert "Lane `api-endpoint` failed after 3 attempts; the end of its last failure:" in body
    assert "AssertionError: boom" in body and "line 200\n" in body
    assert "line 1\n" not in body and "(161 earlier lines not shown)" in body
    assert "`/retry api-endpoint` retries it" in body
    assert "Commands valid now: `/retry [unit]`, `/cancel`, `/status`, `/help`." in body


def test_a_failure_cannot_close_its_code_block():
    body = render_progress(3, "blocked", [lane("a", "failed", failure="```\n# not a heading\n<script>")], None, None)
    block = re.search(r"^(`{4,})text\n(.*?)\n\1$", body, re.DOTALL | re.MULTILINE)
    assert block and "```\n# not a heading\n<script>" in block[2]


def test_a_one_line_blocked_reason_is_escaped_prose_and_a_long_one_a_block():
    short = render_progress(3, "blocked", [], None, None, blocked_reason="merge of `a` conflicted <here>")
    assert "merge of &#96;a&#96; conflicted &lt;here&gt;" in short
    long = render_progress(3, "blocked", [], None, None, blocked_reason="conflicts in:\napp/a.py\napp/b.py")
    assert "```text\nconflicts in:\napp/a.py\napp/b.py\n```" in long


def test_a_run_that_is_not_blocked_shows_no_failure_section():
    body = render_progress(3, "running", [lane("a", "failed", failure="boom")], None, None)
    assert "Blocked" not in body and "boom" not in body


def test_hundreds_of_lanes_with_huge_failures_stay_under_the_limit_and_count_the_rest():
    lanes = [lane(f"unit-{index}", "failed", title="t" * 5_000, failure="x" * 100_000) for index in range(300)]
    body = render_progress(9, RunState.BLOCKED, lanes, 100, 200)
    assert len(body) <= COMMENT_LIMIT
    assert parse_marker(body) == {"kind": "progress", "run": 9}


def test_a_long_checklist_is_cut_with_a_count_of_the_lanes_not_shown():
    lanes = [lane(f"unit-{index}", "running", title="t" * 500) for index in range(400)]
    body = render_progress(9, "running", lanes, None, None)
    assert len(body) <= COMMENT_LIMIT
    shown = sum(1 for line in body.splitlines() if line.startswith("- [ ]"))
    cut = re.search(r"- … and (\d+) more lanes not shown", body)
    assert cut and shown + int(cut[1]) == 400


def test_lane_checklist_fits_the_budget_it_is_given():
    lanes = [lane(f"unit-{index}", "pending", started=False) for index in range(50)]
    text = lane_checklist(lanes, budget=1_000)
    assert len(text) <= 1_000 and "more lanes not shown" in text


def test_failure_tail_keeps_the_last_lines_and_characters():
    assert failure_tail("a\nb\nc\n", lines=2) == "… (1 earlier lines not shown)\nb\nc"
    assert failure_tail("x" * 50, chars=10) == "…" + "x" * 9
    assert failure_tail("short") == "short"


def test_a_lane_in_an_unknown_state_is_refused():
    with pytest.raises(ValueError):
        lane("a", "exploded")


# --------------------------------------------------------------------------- throttle


def test_the_first_change_edits_at_once():
    throttle = Throttle(5)
    assert throttle.should_edit(100.0)
    assert not throttle.pending


def test_changes_within_the_interval_are_deferred_to_one_edit():
    throttle = Throttle(5)
    assert throttle.should_edit(100.0)
    assert [throttle.should_edit(t) for t in (100.5, 101.0, 103.9)] == [False, False, False]
    assert throttle.pending
    assert throttle.next_allowed(103.9) == 105.0
    assert throttle.should_edit(105.0)
    assert not throttle.pending
    assert throttle.next_allowed(105.1) == 110.0


def test_next_allowed_is_now_once_the_interval_has_passed():
    throttle = Throttle(2)
    throttle.should_edit(10.0)
    assert throttle.next_allowed(30.0) == 30.0


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "5"])
def test_a_throttle_needs_a_positive_interval(interval):
    with pytest.raises(ValueError):
        Throttle(interval)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 30), st.lists(st.floats(0, 50), min_size=1, max_size=60))
def test_edits_are_at_least_an_interval_apart_however_many_changes_arrive(interval, gaps):
    throttle = Throttle(interval)
    now, edits = 0.0, []
    for gap in gaps:
        now += gap
        if throttle.should_edit(now):
            edits.append(now)
    assert edits and edits[0] == gaps[0]
    assert all(later >= earlier + interval for earlier, later in zip(edits, edits[1:]))
    # A deferred change is never lost: it is pending, and allowed at next_allowed.
    if throttle.pending:
        due = throttle.next_allowed(now)
        assert due == edits[-1] + interval and throttle.should_edit(due)


# --------------------------------------------------------------------------- which host ran a lane


def on(view: LaneView, host: str | None, *, here: bool = False) -> LaneView:
    return dataclasses.replace(view, host=host, host_is_here=here)


def test_lanes_that_all_ran_on_lanebots_own_machine_show_no_host():
    lanes = [on(lane("a", "merged", minutes=1), "box", here=True), lane("b", "pending", attempts=0, started=False)]
    body = render_progress(1, "running", lanes, None, None)
    assert not shows_hosts(lanes) and " on `" not in body


def test_lanes_on_two_hosts_each_name_theirs_and_a_lane_not_started_names_none():
    lanes = [
        on(lane("a", "merged", minutes=1), "runner-1"),
        on(lane("b", "running"), "runner-2"),
        on(lane("c", "merged", minutes=2), "box", here=True),
        lane("d", "pending", attempts=0, started=False),
    ]
    lines = [line for line in render_progress(1, "running", lanes, None, None).splitlines() if line.startswith("- [")]
    assert [line.split(" · branch")[0].rsplit(" · ", 1)[-1] for line in lines[:3]] == [
        "on `runner-1`",
        "on `runner-2`",
        "on `box`",
    ]
    assert " on `" not in lines[3]


def test_one_runner_host_that_is_not_lanebots_machine_is_named():
    assert "· on `runner-1` ·" in render_progress(1, "running", [on(lane("a", "running"), "runner-1")], None, None)


def test_status_names_the_hosts_by_the_same_rule():
    elsewhere = [on(lane("a", "merged", minutes=1), "runner-1"), on(lane("b", "running"), "runner-2")]
    here = [on(lane("a", "merged", minutes=1), "box", here=True)]
    assert "on `runner-1`" in render_status(run_id=7, state="running", lanes=elsewhere)
    assert "on `runner-2`" in render_status(run_id=7, state="running", lanes=elsewhere)
    assert " on `" not in render_status(run_id=7, state="running", lanes=here)


def test_a_host_name_is_shown_inert_and_short():
    hostile = "`x` @octocat [l](http://e) Closes #1 " + "h" * 200
    line = lane_checklist([on(lane("a", "running"), hostile)])
    # One code span (GitHub links, mentions and closes nothing inside one), cut to 64 characters.
    shown = re.fullmatch(
        r".* · on (``) (`x` @octocat \[l\]\(http://e\) Closes #1 h+…) \1 · branch `lanebot/42/a`\n", line
    )
    assert shown is not None and len(shown[2]) == 64
