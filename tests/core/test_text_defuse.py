"""bot.core.text.defuse: untrusted text reaches GitHub inert (no mention, no closing keyword, no issue
reference, no markup that leaves its block, no forged marker, no control character), its words kept."""

from __future__ import annotations

import html
import re
import unicodedata

import markdown_it
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.names import lane_commit_message
from bot.core.text import Escaped, code_block, defuse, markdown_cell, markdown_text, mermaid_label, strip_invisible

ZWSP = "\u200b"
CONTEXTS = ("markdown", "plain")
many = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# What GitHub would act on, read from the text as GitHub reads it (Markdown: character references
# decoded, since its mention and reference filters read the rendered text).
LIVE_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")
LIVE_CLOSING = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s*(?:(?:[\w.-]+/[\w.-]+)?#\d|gh-\d|https?://)", re.IGNORECASE
)
LIVE_REFERENCE = re.compile(r"#\d|\bgh-\d", re.IGNORECASE)
TAG = re.compile(r"<[A-Za-z/!?]")


def as_github_reads(text: str, context: str) -> str:
    return html.unescape(text) if context == "markdown" else text


# --------------------------------------------------------------------------- hostile strings

KEYWORDS = ["close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved"]
REFERENCES = ["#1", "octo/app#12", "https://github.com/octo/app/issues/3", "GH-4", "&#35;5", "#&#49;6"]
SEPARATORS = [" ", ": ", ":", "  ", "\u00a0", "", ":\t"]
FRAGMENTS = [
    "@alice",
    "@octo-org/everyone",
    "&#64;bob",
    "&commat;carol",
    "@&#8203;dave",
    "```",
    "````py",
    "~~~",
    "  ```",
    "- ```",
    "> ```",
    "<details>",
    "</details>",
    "<summary>x</summary>",
    "<!--",
    "-->",
    "<!-- lanebot:gate run=1 rev=2 -->",
    "<!-- lanebot:progress run=3 -->",
    "<img src=x>",
    "&#60;!-- lanebot:gate --&#62;",
    "\x00",
    "\x1b[31m",
    "\u202e",
    "\u200b",
    "\r",
    "\r\n",
    "\u2028",
    "&#8238;",
    "\n",
    "\n\n",
]
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=3, max_size=8)
closing = st.tuples(
    st.sampled_from(KEYWORDS).flatmap(lambda word: st.sampled_from([word, word.upper(), word.capitalize()])),
    st.sampled_from(SEPARATORS),
    st.sampled_from(REFERENCES),
).map("".join)
pieces = st.lists(st.one_of(words, closing, st.sampled_from(FRAGMENTS)), max_size=14)
hostile = st.tuples(pieces, st.lists(st.sampled_from([" ", "\n", ""]), min_size=14, max_size=14)).map(
    lambda parts: "".join(piece + glue for piece, glue in zip(parts[0], parts[1], strict=False))
)


@many
@given(hostile, st.sampled_from(CONTEXTS))
def test_defused_text_mentions_no_one_closes_and_references_no_issue(text, context):
    read = as_github_reads(defuse(text, context=context), context)
    assert not LIVE_MENTION.search(read)
    assert not LIVE_CLOSING.search(read)
    assert not LIVE_REFERENCE.search(read)


@many
@given(hostile, st.sampled_from(CONTEXTS))
def test_defused_text_holds_no_marker_and_no_invisible_character_but_its_own_spaces(text, context):
    defused = defuse(text, context=context)
    assert "<!--" not in defused  # no comment, so no marker (`&#60;!--` is text a reader sees)
    odd = {char for char in defused if unicodedata.category(char) in ("Cc", "Cf")} - {"\n", "\t", ZWSP}
    assert not odd


@many
@given(hostile)
def test_defused_markdown_opens_no_html(text):
    assert not TAG.search(defuse(text, context="markdown"))


@many
@given(hostile, st.sampled_from(CONTEXTS))
def test_defusing_keeps_every_visible_character_and_twice_is_once(text, context):
    defused = defuse(text, context=context)
    assert defuse(defused, context=context) == defused
    if context == "plain":
        assert defused.replace(ZWSP, "") == strip_invisible(text)  # it only added zero-width spaces
    else:  # as rendered: it only added zero-width spaces, and closed a fence
        shown, expected = html.unescape(defused).replace(ZWSP, ""), strip_invisible(html.unescape(text))
        assert shown.startswith(expected)
        assert re.fullmatch(r"(\n(`{3,}|~{3,}))?", shown[len(expected) :])


@many
@given(st.lists(words, min_size=1, max_size=6), st.sampled_from(FRAGMENTS + REFERENCES), st.sampled_from(CONTEXTS))
def test_the_words_of_hostile_text_survive_defusing(some, fragment, context):
    defused = defuse(f"{fragment} {' '.join(some)} {fragment}", context=context)
    for word in some:
        assert word in defused


@many
@given(hostile)
def test_defused_markdown_cannot_reach_the_text_after_it(text):
    """What follows the defused text (lanebot's section of the PR body) stays a paragraph of its own:
    no fence, `<details>` or comment the text opened swallows it."""
    rendered = markdown_it.MarkdownIt("commonmark").render(defuse(text, context="markdown") + "\n\nCloses #7\n")
    assert rendered.endswith("<p>Closes #7</p>\n")


# --------------------------------------------------------------------------- the rules, one by one


@pytest.mark.parametrize(
    ("text", "defused"),
    [
        ("Add notes. Closes #1 cc @octo-org/everyone", f"Add notes. Closes{ZWSP} #{ZWSP}1 cc @{ZWSP}octo-org/everyone"),
        ("FIXES: octo/app#2", f"FIXES{ZWSP}: octo/app#{ZWSP}2"),
        ("resolved https://github.com/o/r/issues/3", f"resolved{ZWSP} https://github.com/o/r/issues/3"),
        ("fix GH-4", f"fix{ZWSP} GH-{ZWSP}4"),
        ("mail a@b.org, see #9", f"mail a@{ZWSP}b.org, see #{ZWSP}9"),
        ("an @ alone, 100% fixed", "an @ alone, 100% fixed"),
        ("bell\x07 rtl\u202e zero\u200bwidth", "bell rtl zerowidth"),
    ],
)
@pytest.mark.parametrize("context", CONTEXTS)
def test_the_word_rules_are_the_same_in_both_contexts(text, defused, context):
    assert defuse(text, context=context) == defused


@pytest.mark.parametrize(
    ("text", "defused"),
    [
        ("<details><summary>x</summary>", f"<{ZWSP}details><{ZWSP}summary>x<{ZWSP}/summary>"),
        ("<!-- lanebot:gate run=1 -->", f"<{ZWSP}!-- lanebot:gate run=1 -->"),
        ("a < b and 1<2", "a < b and 1<2"),
        ("&#64;bob &num;3 &amp; &lt;", f"&#64;{ZWSP}bob &num;{ZWSP}3 &amp; &lt;"),
        ("hidden&#8238;&#x200B;text", "hiddentext"),
        ("```py\nprint('<b>')", f"```py\nprint('<{ZWSP}b>')\n```"),
        ("~~~~\n```\n", "~~~~\n```\n\n~~~~"),
        ("```\ncode\n```\nafter", "```\ncode\n```\nafter"),
        ("- item\n  ```\n  code", f"- item\n  `{ZWSP}``\n  code"),
        ("> ```\n> quoted", f"> `{ZWSP}``\n> quoted"),
    ],
)
def test_markdown_keeps_the_text_in_its_block(text, defused):
    assert defuse(text, context="markdown") == defused


def test_plain_text_keeps_markup_as_it_is_but_breaks_markers():
    assert defuse("<b>x</b> ``` <!-- lanebot:gate -->", context="plain") == f"<b>x</b> ``` <{ZWSP}!-- lanebot:gate -->"


def test_escaped_text_gets_the_word_rules_only_and_stays_escaped():
    escaped = code_block("fixes #12 @alice <img src=x>")
    defused = defuse(escaped)
    assert isinstance(defused, Escaped)
    assert defused == f"```text\nfixes{ZWSP} #{ZWSP}12 @{ZWSP}alice <img src=x>\n```"


def test_the_prose_escapers_defuse_their_words_and_keep_their_own_references():
    assert markdown_text("Closes #1 a|b @x") == f"Closes{ZWSP} #{ZWSP}1 a&#124;b @&#8203;x"
    assert markdown_cell("fix o/r#2\nGH-3") == f"fix{ZWSP} o/r#{ZWSP}2<br>GH-{ZWSP}3"


def test_a_mermaid_label_codes_the_first_letter_of_a_closing_keyword_before_a_reference():
    assert mermaid_label("Closes #1, fixes: o/r#2") == "#67;loses #35;1, #102;ixes#58; o/r#35;2"
    assert mermaid_label("close the door") == "close the door"
    assert code_block(mermaid_label("Closes #1")) == "```text\n#67;loses #35;1\n```"  # no invisible space to lose


# --------------------------------------------------------------------------- commit messages


def test_a_lanes_commit_message_closes_no_issue_and_notifies_no_one():
    message = lane_commit_message("notes", "Add notes. Closes #1 cc @octo-org/everyone\nsecond", 42, 2)
    subject, _, rest = message.partition("\n\n")
    assert subject == f"notes: Add notes. Closes{ZWSP} #{ZWSP}1 cc @{ZWSP}octo-org/everyone second"
    assert rest == "Lane 'notes' of #42, attempt 2, by lanebot.\n"  # lanebot's own reference stays
    assert not LIVE_CLOSING.search(message) and not LIVE_MENTION.search(message)
