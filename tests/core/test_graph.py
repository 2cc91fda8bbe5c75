"""The unit graph: reading a plan, refusing it with every reason, and what a valid one implies."""

from __future__ import annotations

import json

import pytest

from bot.core.graph import (
    DEFAULT_MAX_UNITS,
    SLUG,
    CriticalPath,
    Graph,
    InvalidPlan,
    PlanSyntaxError,
    Problem,
    SessionBudget,
    Unit,
    build_graph,
    compile_ere,
    is_slug,
    load_plan,
    parse_units,
    validate,
)


def unit(unit_id: object, **fields: object) -> dict:
    base = {
        "id": unit_id,
        "title": f"Do {unit_id}",
        "needs": [],
        "files": f"^src/{unit_id}/",
        "check": f"test -d src/{unit_id}",
        "brief": f"Write {unit_id}.",
    }
    return base | fields


def problems(raw: object, **options: object) -> list[str]:
    return [str(problem) for problem in validate(raw, **options)]


def only_problem(raw: object, **options: object) -> Problem:
    found = validate(raw, **options)
    assert len(found) == 1, found
    return found[0]


WORKED_EXAMPLE = [
    unit("migration", estimate=10),
    unit("tui-rows", estimate=30),
    unit("api-endpoint", estimate=15, needs=["migration"]),
    unit("cli-flag", estimate=5),
]


# --------------------------------------------------------------------------- the worked example


@pytest.fixture
def example() -> Graph:
    return build_graph(WORKED_EXAMPLE)


def test_rounds_are_topological_layers_in_declared_order(example):
    assert example.rounds() == (("migration", "tui-rows", "cli-flag"), ("api-endpoint",))
    assert [example.round_of(unit_id) for unit_id in example.ids] == [0, 0, 1, 0]


def test_critical_path_is_the_heaviest_chain_by_estimate(example):
    # tui-rows alone (30) outweighs migration -> api-endpoint (25)
    assert example.critical_path() == CriticalPath(("tui-rows",), 30.0)


def test_sequential_minutes_is_the_sum_of_every_estimate(example):
    assert example.sequential_minutes() == 60


def test_graph_keeps_declared_order_and_finds_units_by_id(example):
    assert example.ids == ("migration", "tui-rows", "api-endpoint", "cli-flag")
    assert len(example) == 4
    assert [u.id for u in example] == list(example.ids)
    assert example["api-endpoint"].needs == ("migration",)
    assert example.dependents("migration") == ("api-endpoint",)
    assert example.dependents("tui-rows") == ()


def test_asking_for_a_unit_not_in_the_graph_names_it(example):
    with pytest.raises(KeyError, match="nosuch"):
        example["nosuch"]
    with pytest.raises(KeyError, match="nosuch"):
        example.round_of("nosuch")


# --------------------------------------------------------------------------- derived facts


def test_rounds_follow_the_longest_chain_of_needs():
    graph = build_graph([unit("c", needs=["a", "b"]), unit("b", needs=["a"]), unit("a"), unit("d", needs=["a"])])
    assert graph.rounds() == (("a",), ("b", "d"), ("c",))


def test_critical_path_lists_units_in_dependency_order():
    graph = build_graph(
        [
            unit("top", needs=["mid"], estimate=1),
            unit("mid", needs=["base"], estimate=1),
            unit("base", estimate=1),
        ]
    )
    assert graph.critical_path() == CriticalPath(("base", "mid", "top"), 3.0)


def test_critical_path_ties_go_to_the_unit_declared_first():
    graph = build_graph([unit("b", estimate=5), unit("a", estimate=5), unit("c", needs=["a", "b"], estimate=1)])
    assert graph.critical_path().units == ("b", "c")
    assert build_graph([unit("y"), unit("x")]).critical_path().units == ("y",)


def test_units_without_estimates_weigh_one_and_give_no_minutes():
    graph = build_graph([unit("a", estimate=50), unit("b"), unit("c", needs=["b"])])
    assert graph.critical_path() == CriticalPath(("a",), None)
    assert graph.sequential_minutes() is None
    unestimated = build_graph([unit("a"), unit("b"), unit("c", needs=["b"])])
    assert unestimated.critical_path().units == ("b", "c")


def test_session_bound_adds_every_kind_of_session():
    graph = build_graph([unit("a"), unit("b"), unit("c", needs=["a"])])
    budget = SessionBudget(
        planner_attempts=2,
        lane_attempts=3,
        resolver_per_merge=1,
        integrate_sessions=1,
        verify_repairs=2,
        review_sessions=4,
    )
    assert graph.session_bound(budget) == 2 + 3 * 3 + 3 * 1 + 1 + 2 + 4
    assert graph.session_bound(SessionBudget()) == 1 + 3 + 0 + 1


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_session_budget_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError, match="lane_attempts"):
        SessionBudget(lane_attempts=bad)


def test_to_jsonl_round_trips_through_load_plan(example):
    text = example.to_jsonl()
    assert text.count("\n") == 4
    assert json.loads(text.splitlines()[2]) == WORKED_EXAMPLE[2]
    assert load_plan(text) == example


def test_unit_to_json_leaves_out_a_missing_estimate():
    data = build_graph([unit("a")])["a"].to_json()
    assert data == unit("a")
    assert "estimate" not in data


def test_a_graph_built_directly_from_units_is_checked_too():
    looping = [Unit("a", "A", ("b",), "^a", "true", "b"), Unit("b", "B", ("a",), "^b", "true", "b")]
    with pytest.raises(InvalidPlan, match="Dependency cycle detected: a -> b -> a"):
        Graph(tuple(looping))
    with pytest.raises(InvalidPlan, match="'ghost', which names no unit"):
        Graph((Unit("a", "A", ("ghost",), "^a", "true", "b"),))


# --------------------------------------------------------------------------- parsing


def test_a_plan_may_be_a_json_array():
    assert parse_units(json.dumps(WORKED_EXAMPLE, indent=2)) == WORKED_EXAMPLE


def test_a_plan_may_be_jsonl_with_blank_lines_and_crlf():
    text = "\n" + json.dumps(WORKED_EXAMPLE[0]) + "\r\n\n   \n" + json.dumps(WORKED_EXAMPLE[1]) + "\n"
    assert parse_units(text) == WORKED_EXAMPLE[:2]


def test_load_plan_parses_and_builds():
    text = "\n".join(json.dumps(u) for u in WORKED_EXAMPLE)
    assert load_plan(text).ids == ("migration", "tui-rows", "api-endpoint", "cli-flag")


@pytest.mark.parametrize("text", ["", "  \n\n\t", "\ufeff"])
def test_an_empty_plan_is_a_syntax_error(text):
    with pytest.raises(PlanSyntaxError, match="empty"):
        parse_units(text)


def test_an_empty_json_array_is_a_syntax_error():
    with pytest.raises(PlanSyntaxError, match="at least one unit"):
        parse_units(" [ ] ")


def test_a_bad_jsonl_line_is_named_by_its_number():
    text = json.dumps(unit("a")) + "\n\n" + '{"id": "b",'
    with pytest.raises(PlanSyntaxError, match=r"^line 3, column 12: ") as caught:
        parse_units(text)
    assert caught.value.line == 3
    assert "every line holds one whole unit object" in str(caught.value)


def test_a_bad_json_array_is_named_by_its_line():
    text = '[\n  {"id": "a"},\n  {"id" "b"}\n]'
    with pytest.raises(PlanSyntaxError, match=r"^line 3, column 9: Expecting ':' delimiter") as caught:
        parse_units(text)
    assert caught.value.line == 3


def test_a_pretty_printed_unit_in_jsonl_says_to_use_an_array():
    with pytest.raises(PlanSyntaxError, match="write the plan as a JSON array") as caught:
        parse_units(json.dumps(unit("a"), indent=2))
    assert caught.value.line == 1


def test_jsonl_lines_that_are_not_objects_are_left_to_validation():
    raw = parse_units('42\n"text"\n')
    assert raw == [42, "text"]
    assert problems(raw)[0].startswith("unit #1: is the number 42, not a JSON object")


# --------------------------------------------------------------------------- validation rules


def test_a_single_unit_is_a_correct_plan():
    assert validate([unit("only")]) == []


def test_a_plan_that_is_not_a_list_is_refused_as_a_whole():
    problem = only_problem({"units": []})
    assert problem.unit is None
    assert "JSON array" in problem.message and "an object" in problem.message


def test_a_plan_without_units_is_refused():
    assert problems([]) == ["the plan has no units; it needs at least one"]


def test_more_units_than_max_units_is_refused():
    raw = [unit(f"u{index}") for index in range(DEFAULT_MAX_UNITS + 1)]
    problem = only_problem(raw)
    assert problem.unit is None
    assert "7 units" in problem.message and "max_units (6)" in problem.message
    assert validate(raw, max_units=7) == []


def test_a_unit_that_is_not_an_object_is_named_by_position():
    assert problems([unit("a"), ["b"]]) == [
        "unit #2: is a list of 1 item, not a JSON object with the keys id, title, needs, files, check, brief"
    ]


def test_a_missing_key_is_named():
    raw = unit("api")
    del raw["check"]
    assert problems([raw]) == ["unit 'api': missing key 'check'"]


def test_a_unit_without_an_id_is_named_by_position():
    raw = unit("api")
    del raw["id"]
    assert problems([unit("a"), raw]) == ["unit #2: missing key 'id'"]


def test_an_unknown_key_is_named_with_the_allowed_keys():
    assert problems([unit("api", owner="me")]) == [
        "unit 'api': unknown key 'owner'; the keys are id, title, needs, files, check, brief, estimate"
    ]


@pytest.mark.parametrize("key", ["title", "files", "check", "brief"])
@pytest.mark.parametrize(("value", "described"), [(3, "the number 3"), (None, "null"), (["x"], "a list of 1 item")])
def test_text_keys_must_be_strings(key, value, described):
    assert problems([unit("api", **{key: value})]) == [f"unit 'api': {key} must be a string, got {described}"]


@pytest.mark.parametrize("key", ["title", "files", "check", "brief"])
def test_text_keys_must_not_be_blank(key):
    assert problems([unit("api", **{key: "  "})]) == [f"unit 'api': {key} is empty"]


def test_an_id_must_be_a_string():
    assert problems([unit(7)]) == ["unit #1: id must be a string, got the number 7"]


@pytest.mark.parametrize("bad_id", ["Api", "-api", "api_v2", "a" * 41, "api\n", "", "api endpoint"])
def test_an_id_must_be_a_slug(bad_id):
    problem = only_problem([unit(bad_id, files="^x", title="t", check="c", brief="b")])
    assert problem.unit == "#1"
    assert repr(bad_id) in problem.message and "not a slug" in problem.message


@pytest.mark.parametrize("good_id", ["a", "0", "api-v2", "a" * 40, "9-lives"])
def test_slugs_are_lowercase_letters_digits_and_dashes(good_id):
    assert is_slug(good_id) and SLUG.match(good_id)
    assert validate([unit(good_id)]) == []


def test_needs_must_be_a_list_of_strings():
    assert problems([unit("a"), unit("api", needs="a")]) == [
        "unit 'api': needs must be a list of unit ids, got the string 'a'"
    ]
    assert problems([unit("a"), unit("api", needs=["a", 2])]) == [
        "unit 'api': needs[1] must be a unit id string, got the number 2"
    ]


@pytest.mark.parametrize(
    ("estimate", "described"),
    [
        (True, "the boolean true"),
        ("10", "the string '10'"),
        (0, "the number 0"),
        (-5.5, "the number -5.5"),
        (float("inf"), "the number inf"),
        ([10], "a list of 1 item"),
    ],
)
def test_an_estimate_must_be_a_positive_number_of_minutes(estimate, described):
    assert problems([unit("api", estimate=estimate)]) == [
        f"unit 'api': estimate must be a positive number of minutes, got {described}"
    ]


def test_a_huge_estimate_is_refused_without_printing_it():
    (message,) = problems([unit("api", estimate=10**400)])
    assert message.startswith("unit 'api': estimate is too large") and len(message) < 100


def test_a_null_estimate_means_no_estimate():
    graph = build_graph([unit("api", estimate=None)])
    assert graph["api"].estimate is None


def test_a_fractional_estimate_is_accepted():
    assert build_graph([unit("api", estimate=2.5)]).sequential_minutes() == 2.5


def test_a_duplicate_id_names_both_positions():
    assert problems([unit("api"), unit("db"), unit("api", files="^other/")]) == [
        "unit 'api': id 'api' is used by 2 units (#1, #3); ids must be unique"
    ]


def test_a_need_that_names_no_unit_is_refused():
    assert problems([unit("migration"), unit("api", needs=["migration", "x"])]) == [
        "unit 'api': needs 'x', which names no unit in the plan"
    ]


def test_a_need_naming_a_broken_unit_is_not_also_unknown():
    broken = unit("db", title=5)
    assert problems([broken, unit("api", needs=["db"])]) == ["unit 'db': title must be a string, got the number 5"]


def test_a_unit_that_needs_itself_is_refused():
    assert problems([unit("api", needs=["api"])]) == ["unit 'api': needs itself ('api'); remove it from needs"]


def test_a_need_listed_twice_counts_once():
    graph = build_graph([unit("a"), unit("b", needs=["a", "a"])])
    assert graph["b"].needs == ("a",)


def test_files_must_be_a_posix_extended_regex():
    (message,) = problems([unit("api", files=r"^src/\d+")])
    assert message.startswith(r"unit 'api': files '^src/\\d+' is not a valid POSIX extended regular expression")
    assert "[0-9]" in message


def test_files_overlapping_on_a_tracked_path_names_the_path_and_both_units():
    raw = [unit("api", files="^src/"), unit("docs", files=r"\.md$"), unit("cli", files="^bin/")]
    tracked = ["README.md", "src/api.py", "src/notes.md", "src/more.md", "src/last.md", "bin/lanebot"]
    assert problems(raw, tracked_paths=tracked) == [
        "unit 'api': files '^src/' overlaps unit 'docs' (files '\\\\.md$'): both match the tracked path"
        " 'src/notes.md' and 2 more tracked paths; each path may belong to one unit only"
    ]


def test_each_overlapping_pair_is_one_problem():
    raw = [unit("a", files="x"), unit("b", files="x"), unit("c", files="x")]
    found = validate(raw, tracked_paths=(f"x{index}" for index in range(1000)))
    assert [(p.unit, p.message.split("overlaps ")[1].split(" (")[0]) for p in found] == [
        ("a", "unit 'b'"),
        ("a", "unit 'c'"),
        ("b", "unit 'c'"),
    ]
    assert all("'x0' and 999 more" in p.message for p in found)


def test_files_that_share_no_tracked_path_do_not_overlap():
    raw = [unit("api", files="^src/api/"), unit("cli", files="^src/cli/")]
    assert validate(raw, tracked_paths=["src/api/x.py", "src/cli/y.py", "src/apix"]) == []


def test_a_two_unit_cycle_is_reported_by_its_path():
    problem = only_problem([unit("a", needs=["b"]), unit("b", needs=["a"])])
    assert problem == Problem("a", "Dependency cycle detected: a -> b -> a")


def test_a_cycle_starts_at_its_first_declared_unit():
    raw = [unit("x"), unit("c", needs=["a"]), unit("b", needs=["c", "x"]), unit("a", needs=["b"])]
    assert only_problem(raw) == Problem("c", "Dependency cycle detected: c -> a -> b -> c")


def test_each_cycle_is_reported_once():
    raw = [
        unit("a", needs=["b"]),
        unit("b", needs=["a", "c"]),
        unit("c", needs=["b"]),
        unit("d", needs=["e"]),
        unit("e", needs=["d"]),
    ]
    assert problems(raw) == [
        "unit 'a': Dependency cycle detected: a -> b -> a",
        "unit 'd': Dependency cycle detected: d -> e -> d",
    ]


def test_a_broken_unit_does_not_hide_the_problems_of_the_others():
    raw = ["junk", unit("a", needs=["b", "ghost"]), unit("b", needs=["a"]), unit("c", estimate=-1)]
    assert problems(raw) == [
        "unit #1: is the string 'junk', not a JSON object with the keys id, title, needs, files, check, brief",
        "unit 'c': estimate must be a positive number of minutes, got the number -1",
        "unit 'a': needs 'ghost', which names no unit in the plan",
        "unit 'a': Dependency cycle detected: a -> b -> a",
    ]


def test_every_problem_of_one_unit_is_listed():
    raw = {"id": "Bad Id", "needs": "x", "estimate": False, "files": "(?i)x", "colour": "red"}
    found = problems([raw])
    assert len(found) == 8
    assert all(message.startswith("unit #1: ") for message in found)


def test_a_huge_value_is_shortened_in_messages():
    (message,) = problems([unit("api", title="t" * 100_000, check=["c"] * 100_000)])
    assert len(message) < 200


def test_build_graph_raises_with_every_problem_one_per_line():
    with pytest.raises(InvalidPlan) as caught:
        build_graph([unit("a", needs=["b"]), unit("b", needs=["a"]), unit("Bad")])
    assert len(caught.value.problems) == 2
    assert str(caught.value).splitlines() == [str(problem) for problem in caught.value.problems]


def test_problem_text_names_the_unit_or_its_position():
    assert str(Problem("api", "m")) == "unit 'api': m"
    assert str(Problem("#3", "m")) == "unit #3: m"
    assert str(Problem(None, "m")) == "m"


# --------------------------------------------------------------------------- extended regular expressions


@pytest.mark.parametrize(
    ("expression", "matching", "not_matching"),
    [
        (r"^src/api/.*\.py$", ["src/api/x.py", "src/api/a/b.py"], ["lib/src/api/x.py", "src/api/x.pyc"]),
        ("(api|cli)/", ["bot/api/x", "cli/y"], ["bot/ap/x"]),
        ("^docs/[[:alpha:]]+[[:digit:]]{2}\\.md$", ["docs/intro01.md"], ["docs/intro1.md", "docs/é01.md"]),
        (r"[\d]", ["a\\b", "d"], ["1"]),  # a backslash inside brackets is literal
        ("[]a-]x", ["]x", "-x", "ax"], ["bx"]),
        ("[^]a]x", ["bx"], ["]x", "ax"]),
        ("a{2,3}", ["aa", "aaa"], ["a"]),
        ("x$", ["x"], ["x\n"]),
        ("a.b", ["a\nb"], ["ab"]),
        (r"\(\)\{\}\|\/", ["(){}|/"], ["()"]),
        ("[[.-.]]", ["-"], ["."]),
        ("[[=e=]]", ["e"], ["é"]),
        ("a|", ["anything"], []),
    ],
)
def test_ere_matches_what_grep_e_matches(expression, matching, not_matching):
    pattern = compile_ere(expression)
    assert [bool(pattern.search(path)) for path in matching] == [True] * len(matching)
    assert [bool(pattern.search(path)) for path in not_matching] == [False] * len(not_matching)


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "empty"),
        ("(?:src)/", "no (?...) groups"),
        ("(?=x)", "no (?...) groups"),
        ("a*?", "lazy"),
        ("a+?", "lazy"),
        ("a*+", "possessive"),
        ("a{2}{3}", "follows another repetition"),
        (r"\d+", "[0-9]"),
        (r"\w", "[[:alnum:]_]"),
        (r"\s", "[[:space:]]"),
        (r"\bword", "word boundaries"),
        (r"(a)\1", "back-references"),
        (r"x\q", "escapes only its special characters"),
        ("*.py", "nothing to repeat"),
        ("(+a)", "nothing to repeat"),
        ("a|*b", "nothing to repeat"),
        ("^*", "nothing to repeat"),
        ("a{,3}", "does not start an interval"),
        ("a{x}", "does not start an interval"),
        ("a{3,2}", "bounds reversed"),
        ("a{40000}", "more than the 1000 RE2 allows"),
        pytest.param("a{" + "9" * 400 + "}", "more than the 1000 RE2 allows", id="400-digit-count"),
        ("(src", "never closed"),
        ("src)", "no matching '('"),
        ("[abc", "never closed"),
        ("[z-a]", "runs backwards"),
        ("[a-c-e]", "follows the range"),
        ("[[:alpha:]-z]", "character class"),
        ("[[:word:]]", "not a character class"),
        ("[[:alpha:]", "never closed"),
        ("[[.ab.]]", "single-character"),
        ("[:alpha:]", "write [[:alpha:]]"),
        ("src\\", "lone backslash"),
        pytest.param("(" * 5000 + ")" * 5000, "more than the 500 allowed", id="5000-nested-groups"),
    ],
)
def test_what_ere_does_not_have_is_refused_with_the_reason(expression, reason):
    with pytest.raises(ValueError) as caught:
        compile_ere(expression)
    assert reason in str(caught.value)


def test_unit_owns_the_paths_its_files_match_anywhere():
    api = build_graph([unit("api", files="api/")])["api"]
    assert api.owns("src/api/x.py")
    assert not api.owns("src/cli/x.py")
