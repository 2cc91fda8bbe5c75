"""What `/fix` on a pull request takes as its notes (the handler's flow is tested end to end in
tests/e2e/test_end_to_end_fix.py)."""

from __future__ import annotations

import pytest

from bot.core.commands import parse_commands
from bot.web.handlers.pull_comment import PullConversation


def notes(body: str) -> str:
    comment = {"id": 1, "body": body, "user": {"login": "mona"}}
    conversation = PullConversation(None, None, comment, parse_commands(body))  # type: ignore[arg-type]
    [fix] = [command for command in conversation.parsed.commands if command.name == "fix"]
    return conversation.notes_of(fix)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/fix", ""),
        ("/fix rename `total`", "rename `total`"),
        ("Thanks!\n/fix rename `total`\nand update `docs/api.md` too", "rename `total`\nand update `docs/api.md` too"),
        ("/fix\r\nonly the lines below", "only the lines below"),
        ("/fix one thing\n\n/status\nnot a note", "one thing"),
        ("/fix one thing\n/aprove\nnot a note either", "one thing"),
    ],
)
def test_the_notes_are_the_rest_of_the_line_and_the_lines_below_up_to_the_next_command(body, expected):
    assert notes(body) == expected
