"""Slash-command parsing and the /help text, as a specification."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.commands import COMMANDS, Command, InvalidUsage, UnknownCommand, help_text, parse_commands
from bot.core.lifecycle import ALL_COMMANDS, RunState, available_actions


def names(body: str) -> list[str]:
    return [command.name for command in parse_commands(body).commands]


# --- the command table ---------------------------------------------------------------------


def test_the_command_table_holds_exactly_the_lifecycle_commands_in_its_order():
    assert tuple(COMMANDS) == ALL_COMMANDS


@pytest.mark.parametrize(
    ("name", "usage"),
    [
        ("plan", "/plan [notes]"),
        ("approve", "/approve"),
        ("reject", "/reject [why]"),
        ("replan", "/replan <feedback>"),
        ("retry", "/retry [unit]"),
        ("cancel", "/cancel"),
        ("status", "/status"),
        ("help", "/help"),
        ("fix", "/fix [notes]"),
        ("hold", "/hold [reason]"),
        ("unhold", "/unhold"),
    ],
)
def test_each_command_has_its_usage_line_and_a_one_line_description(name, usage):
    assert COMMANDS[name].usage == usage
    assert COMMANDS[name].description and "\n" not in COMMANDS[name].description


# --- what a command line is ----------------------------------------------------------------


def test_a_command_is_a_line_starting_with_slash_and_its_name():
    assert parse_commands("/approve").commands == (Command("approve", "", 1),)


def test_the_rest_of_the_line_is_the_arguments_stripped():
    parsed = parse_commands("/reject   the files overlap  ")
    assert parsed.commands == (Command("reject", "the files overlap", 1),)


def test_hold_takes_its_reason_from_the_rest_of_the_line_and_needs_none():
    assert parse_commands("/hold the CI is down until 3pm").commands == (
        Command("hold", "the CI is down until 3pm", 1),
    )
    assert parse_commands("/hold\n/Unhold").commands == (Command("hold", "", 1), Command("unhold", "", 2))


def test_a_misspelt_hold_is_reported_with_the_command_meant():
    [unknown] = parse_commands("/unhodl").unknown
    assert unknown.suggestion == "unhold"


def test_arguments_stop_at_the_end_of_the_line():
    parsed = parse_commands("/plan keep it small\nand this is prose")
    assert parsed.commands == (Command("plan", "keep it small", 1),)


@pytest.mark.parametrize("spaces", ["", " ", "  ", "   "])
def test_up_to_three_leading_spaces_are_allowed(spaces):
    assert names(f"{spaces}/cancel") == ["cancel"]


@pytest.mark.parametrize("indent", ["    ", "      ", "\t", " \t"])
def test_four_columns_of_indentation_is_indented_code_not_a_command(indent):
    assert parse_commands(f"{indent}/cancel") == parse_commands("")


@pytest.mark.parametrize("written", ["/APPROVE", "/Approve", "/aPpRoVe"])
def test_command_names_are_case_insensitive(written):
    assert parse_commands(written).commands == (Command("approve", "", 1),)


def test_arguments_keep_their_case():
    assert parse_commands("/Retry API-Endpoint").commands == (Command("retry", "API-Endpoint", 1),)


def test_a_command_in_the_middle_of_a_line_is_prose():
    assert names("please /approve this") == []


@pytest.mark.parametrize("text", ["/approve.", "/approve!", "/approve,", "/approve:yes", "/approve2"])
def test_a_name_followed_by_anything_but_space_or_end_of_line_is_not_a_command(text):
    assert parse_commands(text) == parse_commands("")


def test_a_tab_after_the_name_separates_the_arguments():
    assert parse_commands("/retry\tcli-flag").commands == (Command("retry", "cli-flag", 1),)


def test_list_items_are_not_commands():
    assert names("- /approve\n* /approve\n1. /approve") == []


def test_line_numbers_count_from_one_including_blank_lines():
    parsed = parse_commands("hello\n\n/status")
    assert parsed.commands == (Command("status", "", 3),)


@pytest.mark.parametrize("newline", ["\r\n", "\r", "\n"])
def test_crlf_and_cr_line_endings_split_lines_and_never_reach_arguments(newline):
    body = newline.join(["thanks!", "/reject too big", "/status"])
    assert parse_commands(body).commands == (
        Command("reject", "too big", 2),
        Command("status", "", 3),
    )


def test_several_commands_in_one_body_are_all_returned_in_order():
    body = "/status\nsome prose\n/replan split the api unit\n  /cancel\n/help"
    assert parse_commands(body).commands == (
        Command("status", "", 1),
        Command("replan", "split the api unit", 3),
        Command("cancel", "", 4),
        Command("help", "", 5),
    )


def test_every_known_command_parses():
    body = "\n".join(f"/{name} x" for name in ALL_COMMANDS)
    assert names(body) == list(ALL_COMMANDS)


# --- fenced code ---------------------------------------------------------------------------


@pytest.mark.parametrize("fence", ["```", "~~~", "````", "~~~~~"])
def test_commands_inside_a_fenced_block_are_ignored(fence):
    body = f"{fence}\n/approve\n{fence}\n/status"
    assert parse_commands(body).commands == (Command("status", "", 4),)


def test_an_info_string_does_not_stop_a_fence_opening():
    assert names("```shell\n/approve\n```\n/status") == ["status"]


def test_a_tilde_fence_info_string_may_contain_backticks():
    assert names("~~~ a`b\n/approve\n~~~\n/status") == ["status"]


def test_a_backtick_line_with_backticks_in_its_info_string_is_inline_code_not_a_fence():
    assert names("``` a`b\n/approve") == ["approve"]


def test_a_shorter_fence_does_not_close_a_longer_one():
    assert names("`````\n```\n/approve\n`````\n/status") == ["status"]


def test_the_other_fence_character_does_not_close_a_fence():
    assert names("```\n~~~\n/approve\n```\n/status") == ["status"]


def test_a_closing_fence_may_be_longer_and_carry_trailing_spaces():
    assert names("```\n/approve\n`````   \n/status") == ["status"]


def test_a_fence_with_text_after_it_does_not_close():
    assert names("```\n``` not a close\n/approve\n```\n/status") == ["status"]


def test_an_unclosed_fence_runs_to_the_end():
    assert names("/status\n```\n/approve\n\n/cancel") == ["status"]


def test_a_fence_may_be_indented_up_to_three_spaces_and_closed_the_same_way():
    assert names("   ```\n/approve\n  ```\n/status") == ["status"]


def test_a_four_space_indented_fence_is_indented_code_and_opens_nothing():
    assert names("    ```\n/approve") == ["approve"]


def test_a_two_backtick_line_is_not_a_fence():
    assert names("``\n/approve\n``") == ["approve"]


def test_a_fence_opened_on_a_list_item_line_hides_its_commands():
    assert names("- ```\n  /approve\n  ```\n/status") == ["status"]


def test_a_list_item_fence_ends_with_its_item():
    assert names("1. ```\n   code\n/status") == ["status"]


def test_a_quote_marker_inside_a_fence_is_code():
    assert names("```\n> x\n/approve\n```") == []


# --- block quotes, hidden HTML -------------------------------------------------------------


@pytest.mark.parametrize("quoted", ["> /approve", ">/approve", "   > /approve", "> > /approve", ">> /approve"])
def test_quoted_lines_are_never_commands(quoted):
    assert parse_commands(quoted) == parse_commands("")


def test_the_authors_line_after_a_quote_is_a_command():
    body = "> @alice wrote: /approve when ready\n> /approve\n/approve"
    assert parse_commands(body).commands == (Command("approve", "", 3),)


def test_a_fence_opened_inside_a_quote_does_not_hide_the_lines_after_the_quote():
    assert names("> ```\n> /cancel\n/status") == ["status"]


def test_commands_inside_an_html_comment_are_hidden_and_ignored():
    assert names("<!--\n/approve\n-->\n/status") == ["status"]


def test_a_one_line_html_comment_hides_nothing_after_it():
    assert names("<!-- note -->\n/status") == ["status"]


def test_commands_inside_a_pre_block_are_ignored():
    assert names("<pre>\n/approve\n</pre>\n/status") == ["status"]


# --- unknown commands and usage problems ---------------------------------------------------


def test_a_lookalike_is_reported_with_the_closest_command():
    parsed = parse_commands("thanks\n/aprove")
    assert parsed.commands == ()
    assert parsed.unknown == (UnknownCommand("aprove", 2, "approve"),)
    assert parsed.problems == ("`/aprove` (line 2) is not a lanebot command; did you mean `/approve`?",)


@pytest.mark.parametrize(
    ("typo", "suggestion"),
    [
        ("/re-plan please", "replan"),
        ("/cancle", "cancel"),
        ("/stauts", "status"),
        ("/retyr", "retry"),
    ],
)
def test_typos_suggest_the_intended_command(typo, suggestion):
    assert parse_commands(typo).unknown[0].suggestion == suggestion


def test_a_lookalike_far_from_every_command_is_reported_without_a_suggestion():
    parsed = parse_commands("/deploy now")
    assert parsed.unknown == (UnknownCommand("deploy", 1, None),)
    assert parsed.problems == ("`/deploy` (line 1) is not a lanebot command; see `/help`",)


@pytest.mark.parametrize(
    "text",
    [
        "/usr/bin/x",
        "/path/to/file.py",
        "/etc/lanebot.yml is read",
        "https://example.com/approve",
        "//approve",
        "/",
        "/ approve",
        "/123",
        "/approve-it.",
        "/Deploy now",
    ],
)
def test_paths_urls_and_other_slashes_are_neither_commands_nor_unknown(text):
    assert parse_commands(text) == parse_commands("")


def test_unknown_lookalikes_in_code_or_quotes_are_not_reported():
    assert parse_commands("```\n/aprove\n```\n> /aprove\n    /aprove").unknown == ()


def test_replan_without_feedback_is_a_usage_problem_not_a_command():
    parsed = parse_commands("/replan\n/replan   ")
    assert parsed.commands == ()
    assert parsed.invalid == (InvalidUsage("replan", 1), InvalidUsage("replan", 2))
    assert parsed.problems[0] == ("`/replan` (line 1) needs its feedback on the same line: `/replan <feedback>`")


def test_text_after_a_command_that_takes_no_argument_is_kept_not_refused():
    assert parse_commands("/approve LGTM").commands == (Command("approve", "LGTM", 1),)


def test_commands_with_optional_arguments_are_valid_without_them():
    assert names("/plan\n/reject\n/retry\n/fix") == ["plan", "reject", "retry", "fix"]


def test_problems_are_listed_in_the_order_they_appear():
    parsed = parse_commands("/replan\n/aprove\n/approve")
    assert [p.split(" ")[0] for p in parsed.problems] == ["`/replan`", "`/aprove`"]
    assert names("/replan\n/aprove\n/approve") == ["approve"]


def test_a_body_without_commands_has_nothing_to_report():
    parsed = parse_commands("Looks good to me.\n\nThanks!")
    assert (parsed.commands, parsed.unknown, parsed.invalid, parsed.problems) == ((), (), (), ())


# --- help text -----------------------------------------------------------------------------

ALL_STATES = (None, *RunState)


def _listed_commands(markdown: str) -> list[str]:
    return re.findall(r"^- `/([a-z]+)", markdown, flags=re.MULTILINE)


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_help_lists_exactly_the_commands_valid_now_with_usage_and_description(state):
    text = help_text(state)
    assert _listed_commands(text) == list(available_actions(state))
    for name in available_actions(state):
        assert f"`{COMMANDS[name].usage}` — {COMMANDS[name].description}" in text


@pytest.mark.parametrize("state", ALL_STATES, ids=lambda s: str(s or "no-run"))
def test_help_names_every_other_command_once_in_its_closing_line(state):
    others_line = help_text(state).strip().splitlines()[-1]
    assert others_line.startswith("Other commands: ")
    for name in ALL_COMMANDS:
        expected = 0 if name in available_actions(state) else 1
        assert others_line.count(f"`/{name}`") == expected, name


def test_help_says_when_the_other_commands_become_valid():
    text = help_text(RunState.RUNNING)
    assert "`/retry` when the run is blocked" in text
    assert "`/approve`, `/reject`, `/replan` when the run is awaiting approval" in text
    assert "`/plan` when the issue has no run or its run is rejected, cancelled or failed" in text


def test_help_of_a_held_run_offers_unhold_and_says_when_hold_and_unhold_are_valid():
    held = help_text(RunState.RUNNING, held=True)
    assert _listed_commands(held) == ["cancel", "unhold", "status", "help"]
    assert "`/hold` when the run is running or integrating and not held" in held
    assert "`/unhold` when the run is held" in help_text(RunState.RUNNING)


def test_help_names_the_state_it_was_asked_in():
    assert "for a run that is awaiting approval:" in help_text(RunState.AWAITING_APPROVAL)
    assert "for an issue with no run yet:" in help_text(None)


# --- properties ----------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "/approve",
        "/APPROVE",
        "/replan",
        "/replan fix it",
        "/aprove",
        "/usr/bin",
        "/",
        "/x-",
        "```",
        "````",
        "~~~",
        "``` a`b",
        "> ",
        ">",
        "    ",
        "   ",
        " ",
        "\t",
        "- ",
        "1. ",
        "<!--",
        "-->",
        "<pre>",
        "</pre>",
        "\n",
        "\r\n",
        "\r",
        "text",
        "`",
        "~",
    ]
)
BODIES = st.one_of(st.text(), st.lists(st.one_of(FRAGMENTS, st.text(max_size=5))).map("".join))


@settings(max_examples=400, deadline=None)
@given(BODIES)
def test_parsing_never_raises_and_every_command_is_on_a_line_starting_with_it(body):
    parsed = parse_commands(body)
    lines = re.split(r"\r\n|\r|\n", body)
    for command in parsed.commands:
        assert command.name in COMMANDS
        text = lines[command.line - 1]
        assert len(text) - len(text.lstrip(" ")) <= 3
        head = text.lstrip(" ")
        assert head.lower().startswith("/" + command.name)
        rest = head[len(command.name) + 1 :]
        assert rest == "" or rest[0].isspace()
        assert command.args == rest.strip()
    for found in (*parsed.commands, *parsed.unknown, *parsed.invalid):
        assert 1 <= found.line <= len(lines)
    assert list(parsed.commands) == sorted(parsed.commands, key=lambda c: c.line)


@settings(max_examples=200, deadline=None)
@given(BODIES)
def test_text_inside_a_closed_fence_never_yields_commands(body):
    fenced = "~~~~~~~~~~\n" + body.replace("~", "") + "\n~~~~~~~~~~"
    assert parse_commands(fenced) == parse_commands("")
