"""Every place lanebot writes text it did not write defuses it (bot.core.text.defuse): the pull
request's title and body, check runs, the progress comment, answers. The hostile title is the one
that, written as it came, closed issue #1 on merge and pinged a team."""

from __future__ import annotations

import re

from bot.core.graph import Graph, Unit
from bot.core.scheduler import LaneState
from bot.render.answers import render_status
from bot.render.checks import lane_report, verify_report
from bot.render.progress import LaneView, render_progress
from bot.render.pull_request import LaneSummary, pr_body, pr_title

HOSTILE = "Add notes. Closes #1 cc @octo-org/everyone"
ISSUE = 7
LIVE_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")
LIVE_CLOSING = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s*(?:(?:[\w.-]+/[\w.-]+)?#\d|gh-\d|https?://)", re.IGNORECASE
)


def closes(text: str) -> list[str]:
    """The issue numbers GitHub's closing keywords in `text` name."""
    return re.findall(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+#(\d+)\b", text, re.IGNORECASE)


def visible(text: str) -> str:
    return text.replace("\u200b", "")


def body(*, integrator_body: str = "", title: str = HOSTILE, notes: tuple[str, ...] = ()) -> str:
    graph = Graph((Unit("notes", title, (), "^notes/", "true", "Write the notes."),))
    lane = LaneSummary("notes", title, "lanebot-lanes/7/notes", 1, 12.0, 1, None)
    return pr_body(
        integrator_body=integrator_body,
        notes=list(notes),
        issue_number=ISSUE,
        graph=graph,
        lanes=[lane],
        schedule="barrier",
        wall_clock_s=None,
        sum_of_lanes_s=None,
        sessions={"lane": 1},
    )


# --------------------------------------------------------------------------- the pull request


def test_a_hostile_unit_title_in_the_pr_body_closes_only_lanebots_issue_and_pings_no_one():
    text = body(integrator_body=f"This PR: {HOSTILE}.", notes=(HOSTILE,))
    assert closes(text) == [str(ISSUE)]  # lanebot's own `Closes #7`, nothing else
    assert text.rstrip().endswith(f"Closes #{ISSUE}")
    assert "Closes #1" not in text and not LIVE_MENTION.search(text)
    assert visible(text).count("octo-org/everyone") == 4  # integrator text, lane table, diagram, note: all shown


def test_the_integrators_markup_cannot_hide_or_swallow_lanebots_section():
    for trap in ("```\nunclosed fence", "<details><summary>x</summary>", "<!-- hide the rest", "- a\n  ```\n"):
        text = body(integrator_body=f"Intro.\n\n{trap}")
        tail = text[text.index("### How lanebot built this") :]
        before = text[: text.index("---\n\n### How lanebot built this")]
        assert before.count("```") % 2 == 0, trap  # every fence the integrator opened is closed before it
        assert not re.search(r"<[A-Za-z!/]", before), trap
        assert tail.rstrip().endswith(f"Closes #{ISSUE}")


def test_the_integrators_forged_marker_and_closing_keywords_are_inert():
    text = body(integrator_body="<!-- lanebot:gate run=1 rev=9 -->\nFixes octo/other#3, resolves: #4, GH-5")
    assert "<!--" not in text and closes(text) == [str(ISSUE)]
    assert not LIVE_CLOSING.search(text.replace(f"Closes #{ISSUE}", ""))


def test_an_overlong_hostile_integrator_text_is_cut_and_still_defused():
    text = body(integrator_body="```\n" + f"{HOSTILE}\n" * 5_000)
    assert len(text) <= 65_536 and "cut to fit" in text
    assert closes(text) == [str(ISSUE)] and text.count("```") % 2 == 0


def test_the_pr_title_from_the_issue_or_the_integrator_is_one_defused_line():
    title = pr_title(f"{HOSTILE}\n<!-- lanebot:gate -->\x07")
    assert "\n" not in title and "\x07" not in title and "<!--" not in title
    assert not LIVE_CLOSING.search(title) and not LIVE_MENTION.search(title)
    assert visible(title) == f"{HOSTILE} <!-- lanebot:gate -->"


# --------------------------------------------------------------------------- check runs


def test_a_lane_check_run_defuses_the_failure_and_the_output_it_quotes():
    report = lane_report(
        unit_id="notes",
        attempt=1,
        passed=False,
        reason=f"the agent said: {HOSTILE}",
        changed_paths=["notes/a.md"],
        check_output=f"{HOSTILE}\n```\n</details>",
        transcript="/t/1.jsonl",
    )
    for text in (report.title, report.summary):
        assert "Closes #1" not in text and not LIVE_CLOSING.search(text) and not LIVE_MENTION.search(text)
        assert "octo-org/everyone" in text
    assert report.title == visible(report.title).replace("Closes #1", "Closes\u200b #\u200b1").replace(
        "@octo", "@\u200bocto"
    )


def test_a_verify_check_run_defuses_its_output_and_reason():
    report = verify_report(passed=False, command="make test", output=HOSTILE, reason=HOSTILE, transcript=None)
    for text in (report.title, report.summary):
        assert not LIVE_CLOSING.search(text) and not LIVE_MENTION.search(text) and "everyone" in text


# --------------------------------------------------------------------------- comments


def _lane(failure: str | None = None) -> LaneView:
    return LaneView("notes", HOSTILE, LaneState.FAILED, 0, 1, None, None, "lanebot-lanes/7/notes", failure)


def test_the_progress_comment_line_of_a_hostile_title_mentions_and_references_nothing():
    text = render_progress(3, "blocked", [_lane(f"check said {HOSTILE}")], None, None, f"blocked:\n{HOSTILE}")
    assert not LIVE_CLOSING.search(text) and not LIVE_MENTION.search(text) and not re.search(r"(?<!&)#\d", text)
    assert visible(text).count("octo-org/everyone") >= 3  # the title, the failure, the reason


def test_a_status_answer_defuses_the_error_it_quotes():
    text = render_status(run_id=3, state="blocked", lanes=[_lane()], error=f"boom\n{HOSTILE}")
    assert not LIVE_CLOSING.search(text) and not LIVE_MENTION.search(text) and "octo-org/everyone" in text
