"""What the verify check run says of a culprit (bot.render.checks.verify_report with a CulpritNote)."""

from __future__ import annotations

import re

from bot.core.checks import RERUN_VERIFY
from bot.render.checks import CulpritNote, verify_report

HOSTILE_OUTPUT = "FAILED test_b.py\n``` closes #1 cc @octo-org/everyone"
BLAME_B = CulpritNote(
    finding="verify first fails on 2222, where lane 'b' merged; it passes on 1111 before it",
    output=HOSTILE_OUTPUT,
    check_url="https://github.com/octo/widgets/runs/77",
    retry_unit="b",
)


def report(culprit: CulpritNote | None, *, last: bool = True):
    return verify_report(
        passed=False,
        command="make test",
        output="FAILED at the head",
        reason="verify exited with status 1",
        transcript=None,
        offer_rerun=last,
        culprit=culprit,
    )


def test_a_blocked_run_whose_culprit_is_a_lane_says_to_retry_that_lane_instead_of_offering_re_run_verify():
    blocked = report(BLAME_B)
    assert "**What broke it:**" in blocked.summary and "where lane 'b' merged" in blocked.summary
    assert "([its lane's check run](https://github.com/octo/widgets/runs/77))" in blocked.summary
    assert "`/retry b` on the issue redoes that lane" in blocked.summary
    assert blocked.actions == ()


def test_verify_output_on_the_culprit_merge_is_shown_as_data():
    summary = report(BLAME_B).summary
    assert "FAILED test_b.py" in summary
    assert not re.search(r"(?<![\w`])@[A-Za-z0-9]", summary) and "closes #1" not in summary


def test_while_repairs_remain_the_culprit_is_named_and_no_retry_is_asked_for():
    early = report(BLAME_B, last=False)
    assert "What broke it" in early.summary and "/retry b" not in early.summary and early.actions == ()


def test_a_culprit_that_is_no_lane_keeps_the_re_run_verify_button():
    base = CulpritNote(finding="verify fails on 1111 itself, the run's base, before any lane", output="red")
    blocked = report(base)
    assert "before any lane" in blocked.summary and "its lane's check run" not in blocked.summary
    assert blocked.actions == (RERUN_VERIFY,)


def test_a_passing_verify_names_no_culprit():
    passed = verify_report(passed=True, command="make test", output="ok", reason=None, transcript=None, culprit=BLAME_B)
    assert "What broke it" not in passed.summary
