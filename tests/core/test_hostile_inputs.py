"""1,000 hostile inputs at each parser of text lanebot did not write: hand-written plans (bot/core/plans.py),
comment commands (bot/core/commands.py) and repository settings (bot/core/workflow.py, through
bot/edges/workflow_files.load_workflow as production loads them).

The property each time: the parser never raises anything but its own refusal, and a refusal is a
clear message: some text, no traceback, no Python repr of an exception, of a bounded length.
Inputs mix arbitrary text (control and invisible characters, surrogate-free Unicode, huge
numbers, deep nesting) with near-misses of valid input, which reach deeper into each parser.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.commands import COMMANDS, parse_commands
from bot.core.plans import extract_hand_plan, validate_plan_text
from bot.core.workflow import WorkflowError, parse_yaml
from bot.edges.workflow_files import load_workflow

THOUSAND = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRACKED = ["README.md", "app/cli.py", "app/api/status.py", "migrations/001.sql", "docs/a b.md", "ünï/cödé.py"]
SOURCE = "octo-org/tasks/.github/lanebot.yml"
_PYTHON_NOISE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|<[a-zA-Z_.]+ object at 0x")

# Characters that break parsers and hide text: controls, bidi overrides, zero-width, BOM, line separators.
hostile_chars = st.sampled_from(
    ["\x00", "\x1b", "\r", "\n", "\t", "\u202e", "\u2066", "\u200b", "\u200d", "\ufeff", "\u2028", "\u00a0", "`", "~"]
)
hostile_text = st.text(alphabet=st.one_of(st.characters(exclude_categories=["Cs"]), hostile_chars), max_size=300)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | hostile_text
)


def json_like(keys: st.SearchStrategy[str]) -> st.SearchStrategy[object]:
    return st.recursive(
        scalars,
        lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=6),
        max_leaves=16,
    )


def assert_clear(message: object) -> None:
    assert isinstance(message, str), message
    assert message.strip(), "an empty refusal"
    assert len(message) < 5000, f"a refusal of {len(message)} characters"
    assert not _PYTHON_NOISE.search(message), message


# -- plans -------------------------------------------------------------------------------------------

UNIT_KEYS = ["id", "title", "needs", "files", "check", "brief", "estimate"]
unit_keys = st.sampled_from(UNIT_KEYS) | hostile_text
ids = st.sampled_from(["a", "b", "migration", "A", "-x", "a" * 41, "", "a/b", "../x"]) | hostile_text
regexes = (
    st.sampled_from(
        ["^app/", "(a+)+$", "[", "\\", "a{1001}", "(?P<x>", "[[:alpha:]]", "[é]", ".*", "", "^(", "x{,3}", "\\d"]
    )
    | hostile_text
)


@st.composite
def near_units(draw: st.DrawFn) -> dict[str, object]:
    unit: dict[str, object] = {
        "id": draw(ids),
        "title": draw(hostile_text),
        "needs": draw(st.lists(ids, max_size=3) | scalars),
        "files": draw(regexes),
        "check": draw(hostile_text),
        "brief": draw(hostile_text),
    }
    for key in draw(st.lists(st.sampled_from(UNIT_KEYS), max_size=2)):
        unit.pop(key, None)
    unit.update(draw(st.dictionaries(unit_keys, scalars, max_size=2)))
    return unit


@st.composite
def plan_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["jsonl", "array", "noise", "json"]))
    if kind == "noise":
        return draw(hostile_text)
    if kind == "json":
        return json.dumps(draw(json_like(unit_keys)), ensure_ascii=draw(st.booleans()))
    units = draw(st.lists(near_units(), max_size=8))
    if kind == "array":
        return json.dumps(units)
    lines = [json.dumps(unit, ensure_ascii=draw(st.booleans())) for unit in units]
    for _ in range(draw(st.integers(0, 2))):
        lines.insert(draw(st.integers(0, len(lines))), draw(hostile_text))
    return "\n".join(lines)


@THOUSAND
@given(plan_texts())
def test_a_hostile_plan_is_a_graph_or_refused_with_clear_reasons(text):
    graph, problems = validate_plan_text(text, max_units=6, tracked_paths=TRACKED)
    assert (graph is None) == bool(problems)
    for problem in problems:
        assert_clear(problem)


@st.composite
def issue_bodies(draw: st.DrawFn) -> str:
    fence = draw(st.sampled_from(["```", "~~~", "````", "``", "~~~~~"]))
    info = draw(st.sampled_from(["lanebot-plan", "LANEBOT-PLAN", "lanebot-plan x", "json", "", "lanebot-plan\u200b"]))
    indent = draw(st.sampled_from(["", "  ", "    ", "\t", "> "]))
    close = draw(st.sampled_from([fence, "", fence + "`", "<!--", "-->"]))
    inner = draw(plan_texts())
    parts = [draw(hostile_text), f"{indent}{fence}{info}", inner, f"{indent}{close}", draw(hostile_text)]
    return "\n".join(parts[: draw(st.integers(1, len(parts)))])


@THOUSAND
@given(issue_bodies())
def test_a_hostile_issue_body_yields_a_plan_text_or_none_and_that_text_validates_or_is_refused(body):
    found = extract_hand_plan(body)
    assert found is None or isinstance(found, str)
    if found is not None:
        graph, problems = validate_plan_text(found, max_units=6, tracked_paths=TRACKED)
        assert (graph is None) == bool(problems)
        for problem in problems:
            assert_clear(problem)


# -- commands ----------------------------------------------------------------------------------------


@st.composite
def comment_bodies(draw: st.DrawFn) -> str:
    names = [*COMMANDS, "aprove", "APPROVE", "approve\u200b", "retry", "", "/", "plan-x", "ap"]
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["command", "text", "fence", "comment", "quote"]))
        if kind == "command":
            lead = draw(st.sampled_from(["", " ", "   ", "\t", "\u00a0", "\u200b"]))
            gap = draw(st.sampled_from(["", " ", "  x", "\t"]))
            lines.append(f"{lead}/{draw(st.sampled_from(names))}{gap}{draw(hostile_text)}")
        elif kind == "fence":
            lines.append(draw(st.sampled_from(["```", "~~~", "    ```", "````"])))
        elif kind == "comment":
            lines.append(draw(st.sampled_from(["<!--", "-->", "<!-- /approve -->"])))
        elif kind == "quote":
            lines.append("> /" + draw(st.sampled_from(names)))
        else:
            lines.append(draw(hostile_text))
    return draw(st.sampled_from(["\n", "\r\n", "\r"])).join(lines)


@THOUSAND
@given(comment_bodies() | hostile_text)
def test_a_hostile_comment_parses_into_known_commands_and_clear_problems(body):
    parsed = parse_commands(body)
    for command in parsed.commands:
        assert command.name in COMMANDS and command.line >= 1
        assert "\n" not in command.args and "\r" not in command.args
    for problem in parsed.problems:
        assert_clear(problem)
        assert re.search(r"\(line \d+\)", problem), problem


# -- repository settings (.github/lanebot.yml) -------------------------------------------------------

SECTION_KEYS = [
    "trigger",
    "plan",
    "gate",
    "build",
    "integrate",
    "fix",
    "review",
    "pull_request",
    "cleanup",
    "agents",
    "_extends",
    "max_units",
    "agent",
    "verify",
    "max_retries",
    "timeout",
    "schedule",
    "approvers",
    "max_lanes",
    "enabled",
    "lenses",
    "network",
    "label",
    "draft",
    "env",
    "command",
]
setting_keys = st.sampled_from(SECTION_KEYS) | hostile_text


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["yaml", "near", "noise"]))
    if kind == "noise":
        return draw(hostile_text)
    document = draw(json_like(setting_keys))
    if kind == "near":
        section = draw(st.sampled_from(SECTION_KEYS[:10]))
        document = {section: draw(st.dictionaries(setting_keys, scalars | st.lists(scalars, max_size=3), max_size=4))}
    try:
        return yaml.safe_dump(document, allow_unicode=draw(st.booleans()))
    except yaml.YAMLError:
        return str(document)


@THOUSAND
@given(config_texts())
def test_a_hostile_repository_config_loads_or_is_refused_with_clear_problems(text):
    try:
        workflow = load_workflow([(SOURCE, parse_yaml(text, SOURCE))])
    except WorkflowError as refused:
        assert refused.problems
        for problem in refused.problems:
            assert_clear(problem)
    else:
        assert workflow.build.max_retries >= 0


# The YAML loader's own edges: tags, duplicate keys, directives, documents, aliases.
LOADER_EDGES = {
    "python-tag": "build: !!python/object/apply:os.system ['true']\n",
    "duplicate-key": "build: {}\nbuild: {}\n",
    "binary": "build:\n  timeout: !!binary aGVsbG8=\n",
    "complex-key": "? [a, b]\n: c\n",
    "huge-float": "build:\n  max_retries: 1e999\n",
    "directive": "%YAML 9.9\n---\nbuild: {}\n",
    "documents": "---\n...\n---\nbuild: {}\n",
    "shared-alias": "x: &x {max_retries: 1}\nbuild: *x\n",
    "laughs": "a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
    "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
}
SELF_REFERENCE = {
    "list-in-itself": "a: &a [*a]\n",
    "mapping-in-itself": "build: &x {env: *x}\n",
}


@pytest.mark.parametrize("text", LOADER_EDGES.values(), ids=LOADER_EDGES.keys())
def test_the_yaml_loaders_edges_load_or_are_refused_with_clear_problems(text):
    test_a_hostile_repository_config_loads_or_is_refused_with_clear_problems.hypothesis.inner_test(text)


@pytest.mark.parametrize("text", SELF_REFERENCE.values(), ids=SELF_REFERENCE.keys())
def test_a_config_that_contains_itself_is_refused_with_a_clear_problem(text):
    test_a_hostile_repository_config_loads_or_is_refused_with_clear_problems.hypothesis.inner_test(text)


LAUGHS = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]\n" for previous, name in zip("abcde", "bcdef")
)


def test_aliases_that_expand_to_millions_of_values_are_refused_before_anything_copies_them():
    with pytest.raises(WorkflowError) as refused:
        parse_yaml(LAUGHS, ".github/lanebot.yml")

    assert refused.value.problems == (
        ".github/lanebot.yml: with its aliases expanded it holds more than 20,000 values; write it out plainly",
    )


def test_a_config_that_contains_itself_says_so():
    with pytest.raises(WorkflowError) as refused:
        parse_yaml(SELF_REFERENCE["list-in-itself"], ".github/lanebot.yml")

    assert "an alias refers to a mapping or list that contains it" in refused.value.problems[0]


def test_aliases_that_only_share_a_value_still_load():
    assert parse_yaml("x: &v [1, 2]\ny: *v\n", "f") == {"x": [1, 2], "y": [1, 2]}
