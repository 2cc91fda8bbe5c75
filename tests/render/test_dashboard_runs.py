"""The runs list's rows and GitHub links: what a person reads of each run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.render.dashboard.links import check_run_url, issue_url, pull_url, web_url_for_api
from bot.render.dashboard.runs import RunSummary, held_words, run_row

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def summary(**fields) -> RunSummary:
    values = dict(run_id=3, repository="octo/one", issue_number=7, state="running", created_at=T0, updated_at=T0)
    values.update(fields)
    return RunSummary(**values)


def test_a_running_run_counts_its_time_so_far_and_its_lanes():
    row = run_row(
        summary(lanes_total=3, lanes_merged=1, sessions=4, input_tokens=1500, output_tokens=20),
        now=T0 + timedelta(minutes=5),
    )
    assert (row.started, row.duration, row.lanes, row.sessions) == (
        "2025-03-01 12:00 UTC",
        "5 min so far",
        "1 / 3",
        "4",
    )
    assert row.tokens == "1,500 in · 20 out" and row.cost == "—" and row.state_words == "running"


def test_an_ended_run_took_until_its_last_change_and_unreported_usage_is_not_zero():
    row = run_row(
        summary(state="done", updated_at=T0 + timedelta(hours=1, minutes=2), cost_usd=0.5), now=T0 + timedelta(days=3)
    )
    assert row.duration == "1 h 2 min" and row.tokens == "—" and row.cost == "$0.50" and row.lanes == "—"
    assert run_row(summary(state="awaiting_approval"), now=T0).state_words == "awaiting approval"


def test_links_are_built_on_the_web_address_and_refuse_what_is_not_a_repository():
    assert web_url_for_api("https://api.github.com") == "https://github.com"
    assert web_url_for_api("https://ghe.example/api/v3") == "https://ghe.example"
    assert web_url_for_api("http://127.0.0.1:9000") == "http://127.0.0.1:9000"
    web = "https://github.com"
    assert issue_url(web, "octo/one", 7) == "https://github.com/octo/one/issues/7"
    assert pull_url(web, "octo/one", 8) == "https://github.com/octo/one/pull/8"
    assert check_run_url(web, "octo/one", 555) == "https://github.com/octo/one/runs/555"
    for bad in ("octo/one/../../x", "//evil.example/x", "octo"):
        with pytest.raises(ValueError):
            issue_url(web, bad, 1)
    with pytest.raises(ValueError):
        pull_url(web, "octo/one", 0)


def test_a_held_run_says_who_holds_it_in_the_list_and_why_on_its_page():
    assert run_row(summary(held_by="octocat"), now=T0).state_words == "running, held by @octocat"
    assert run_row(summary(), now=T0).state_words == "running"
    assert held_words("octocat", T0, "the release is out") == (
        "Held by @octocat since 2025-03-01 12:00 UTC: the release is out. No new session starts until /unhold."
    )
    assert held_words(None, None, None) is None
