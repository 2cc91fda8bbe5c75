"""`files` cannot hang lanebot: RE2 matches without backtracking, so the expressions a backtracking
matcher chokes on are accepted, and answered at once, whatever the path.

The near misses given alongside them would keep a backtracking matcher (Python's `re`) busy for
hours, so a regression would show up as a test that hangs, never as a pass; no test here
measures a time. The limits that remain are lanebot's and RE2's: the length of `files`,
interval counts, and the size of the compiled program.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.core import ere
from bot.core.graph import (
    MAX_FILES_CHARS,
    MAX_REPEAT,
    FilesLimitError,
    Unit,
    build_graph,
    compile_ere,
    match_paths,
    validate,
)
from bot.core.plans import validate_plan_text
from bot.demo.plan import UNITS as DEMO_UNITS
from bot.runner.lanes import ownership_violations

ROOT = Path(__file__).resolve().parents[2]


def unit(unit_id: str, files: str) -> dict:
    return {"id": unit_id, "title": f"Do {unit_id}", "needs": [], "files": files, "check": "true", "brief": "b"}


def messages(raw: list[dict], **options: object) -> list[str]:
    return [str(problem) for problem in validate(raw, **options)]


def one_by_one(expressions: list[str], paths: list) -> list[list[int]]:
    return [[position for position, path in enumerate(paths) if compile_ere(e).search(path)] for e in expressions]


# Each expression, a near miss that a backtracking matcher would try every way to split (Python's
# re needs seconds at about 30 characters and doubles that every few more), and a path it matches.
EXPONENTIAL = [
    ("(a|a)*c", "a" * 5000, "a" * 5000 + "c"),
    ("(a+)+$", "a" * 5000 + "b", "b" + "a" * 5000),
    ("(.*)*x", "a" * 5000, "a" * 5000 + "x"),
    ("(a*)*b", "a" * 5000, "a" * 5000 + "b"),
    ("(.*/)*x", "/" * 5000, "/" * 5000 + "x"),
    ("(a|aa)+$", "a" * 5000 + "!", "!" + "a" * 5000),
    ("(x+x+)+y", "x" * 5000, "x" * 5000 + "y"),
    ("(a{1,3})*c", "a" * 5000, "a" * 5000 + "c"),
    ("(a|ab|b)*c", "ab" * 2500, "ab" * 2500 + "c"),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "a" * 5000 + "!", "a" * 5000 + "Abc"),
    ("^src/([a-z]+/?)*x", "src/" + "a" * 5000, "src/" + "a" * 5000 + "x"),
    ("^(src/|[a-z/]+)*x", "src/" * 1250, "src/" * 1250 + "x"),
    (".*.*.*.*.*.*x", "a" * 5000, "a" * 5000 + "x"),
    ("(.*a){12}$", "a" * 5000 + "b", "b" + "a" * 5000),
]


# --------------------------------------------------------------------------- accepted, and fast


@pytest.mark.parametrize(("files", "near_miss", "matching"), EXPONENTIAL, ids=[files for files, _, _ in EXPONENTIAL])
def test_an_expression_a_backtracking_matcher_chokes_on_is_accepted_and_matched_at_once(files, near_miss, matching):
    assert messages([unit("wild", files), unit("readme", "^README$")], tracked_paths=[near_miss, "README"]) == []
    assert compile_ere(files).search(near_miss) is None
    assert compile_ere(files).search(matching) is not None
    assert match_paths([files, "^README$"], [near_miss, matching, "README"]) == [[1], [2]]


def test_the_overlap_check_finds_the_path_such_an_expression_shares_with_another_unit():
    raw = [unit("wild", "(a+)+$"), unit("x", "^x")]
    (problem,) = messages(raw, tracked_paths=["a" * 5000 + "b", "x" + "a" * 5000, "docs/x.md"])
    assert problem.startswith(
        "unit 'wild': files '(a+)+$' overlaps unit 'x' (files '^x'): both match the tracked path 'xaaaa"
    )
    assert problem.endswith("...'; each path may belong to one unit only")


def test_a_hand_written_plan_in_an_issue_may_use_such_an_expression():
    text = json.dumps(unit("wild", "(a|a)*c")) + "\n"
    graph, problems = validate_plan_text(text, max_units=6, tracked_paths=["a" * 5000])
    assert problems == ()
    assert graph is not None and graph["wild"].owns("a" * 5000 + "c")


def test_a_lanes_ownership_check_answers_at_once_too():
    lane = Unit(id="wild", title="t", needs=(), files=".*.*.*x", check="true", brief="b")
    assert ownership_violations(lane, ["notes/x", "a" * 5000]) == ["a" * 5000]


def test_a_lanes_ownership_check_still_keeps_lanebots_own_directories_out():
    lane = Unit(id="all", title="t", needs=(), files="^.*$", check="true", brief="b")
    changed = ["src/x.py", ".lanebot/units.jsonl", ".github/workflows/ci.yml", "src/x.py"]
    assert ownership_violations(lane, changed) == [".lanebot/units.jsonl", ".github/workflows/ci.yml"]


# --------------------------------------------------------------------------- the limits


def test_an_interval_count_up_to_the_limit_is_accepted_and_counts_exactly():
    files = f"^a{{{MAX_REPEAT}}}$"
    assert messages([unit("many", files)]) == []
    assert match_paths([files], ["a" * MAX_REPEAT, "a" * (MAX_REPEAT - 1), "a" * (MAX_REPEAT + 1)]) == [[0]]


@pytest.mark.parametrize("files", [f"a{{{MAX_REPEAT + 1}}}", f"a{{2,{MAX_REPEAT + 1}}}", f"a{{{MAX_REPEAT + 1},}}"])
def test_an_interval_count_over_the_limit_is_refused_saying_the_limit(files):
    (problem,) = messages([unit("many", files)])
    assert problem == (
        f"unit 'many': files {files!r} has the count {MAX_REPEAT + 1} in the interval at character 2, more than"
        f" the {MAX_REPEAT} RE2 allows; use a smaller count, or + or * for no bound"
    )


def test_nested_intervals_multiply_up_to_the_limit():
    assert messages([unit("nested", "(a{10}){100}")]) == []
    (problem,) = messages([unit("nested", "(a{10}){101}")])
    assert problem == (
        "unit 'nested': files '(a{10}){101}' repeats a part more than 1000 times in all (at the interval {101}):"
        " the counts of nested intervals multiply, and RE2 allows 1000; use smaller counts, or + and *"
    )


def test_an_expression_whose_program_is_too_large_for_re2_is_a_problem_not_an_exception():
    assert messages([unit("big", "[^/]{1000}" * 10)]) == []
    files = "[^/]{1000}" * 45
    (problem,) = messages([unit("big", files), unit("docs", "^docs/")], tracked_paths=["docs/x.md"])
    assert problem == (
        f"unit 'big': files {ere.shown(files)} compiles to a larger program than the 1 MiB RE2 is given for one"
        " expression; use fewer or smaller intervals ([^/]+ rather than [^/]{1,900})"
    )
    with pytest.raises(FilesLimitError):
        compile_ere(files)


def test_an_expression_longer_than_the_limit_is_refused():
    assert messages([unit("long", "a" * MAX_FILES_CHARS)]) == []
    (problem,) = messages([unit("long", "a" * (MAX_FILES_CHARS + 1))])
    assert problem.startswith("unit 'long': files 'aaaa")
    assert problem.endswith(
        f"is {MAX_FILES_CHARS + 1} characters long, more than the {MAX_FILES_CHARS} allowed;"
        " name the directories the unit owns (^src/api/) rather than every file"
    )


def test_an_invalid_expression_is_reported_as_invalid_not_as_over_a_limit():
    (problem,) = messages([unit("bad", "(a+)+?")])
    assert "is not a valid POSIX extended regular expression" in problem
    assert "lazy" in problem


# --------------------------------------------------------------------------- bytes


def test_paths_are_matched_as_bytes_and_a_str_path_as_git_gave_its_bytes():
    assert ere.path_bytes("src/caf\udce9.py") == b"src/caf\xe9.py"  # as bot/git.py decodes it
    assert ere.path_bytes("src/café.py") == "src/café.py".encode()
    assert ere.path_bytes("\ud800") == "\ud800".encode("utf-8", "surrogatepass")  # no bytes decode to it


def test_paths_that_are_not_utf8_match_byte_for_byte():
    paths = ["docs/a\nb.md", "src/caf\udce9.py", b"src/caf\xe9.py", "src/ok.py", "src/café.py"]
    expressions = [r"\.md$", "^src/", "a\nb", "caf\udce9", r"^src/caf.\.py$", "é", r"^src/caf..\.py$"]
    assert match_paths(expressions, paths) == [[0], [1, 2, 3, 4], [0], [1, 2], [1, 2], [4], [4]]
    assert match_paths(expressions, paths) == one_by_one(expressions, paths)


def test_a_repetition_after_a_non_ascii_character_repeats_the_whole_character():
    assert match_paths(["^é+$"], ["éé", b"\xc3\xa9\xa9", "é"]) == [[0, 2]]


def test_a_bracket_expression_holds_single_bytes_only():
    with pytest.raises(ValueError, match=r"'é' at character 2 is 2 bytes in UTF-8, and a bracket expression"):
        compile_ere("[é]")
    assert match_paths(["[\udce9]", "[^a]"], [b"\xe9", "a", "é"]) == [[0], [0, 2]]


def test_a_lone_surrogate_in_files_is_refused_as_no_bytes_of_a_path():
    (problem,) = messages([unit("odd", "src/\ud800")])
    assert "is the lone surrogate U+D800, which stands for no bytes of a path" in problem


# --------------------------------------------------------------------------- many expressions at once

PLAN_PATTERNS = [
    "^app/api/",
    r"^(src|lib)/.*\.py$",
    r"^docs/.+\.md$",
    r"^(README\.md|docs/)",
    r"\.github/",
    r"^\.github/workflows/ci\.yml$",
    "(api|cli)/",
    "^docs/[[:alpha:]]+[[:digit:]]{2}\\.md$",
    "^src/v[0-9]{1,3}/",
    r"^app/.*/tests/.*_test\.py$",
    r"^(app|lib)/[a-z_]+(/[a-z_]+)*\.py$",
    r"^([^/]+/)*[^/]+\.md$",
    r"^src/[^/]+/[^/]+\.(py|pyi)$",
    r"^docs/(.*/)?index\.md$",
    "^(" + "|".join(f"src/module{index}/file{index}\\.py" for index in range(12)) + ")$",
]
PATHS = [
    "app/api/x.py",
    "src/a/b.py",
    "lib/c.py",
    "docs/guide/intro.md",
    "docs/intro01.md",
    "README.md",
    "tools/run",
    ".github/workflows/ci.yml",
    "src/v12/mod.c",
    "app/x/tests/y_test.py",
    "app/a_b/c.py",
    "src/module3/file3.py",
    "docs/index.md",
    "docs/a/b/index.md",
    "src/p/q.pyi",
    "cli/main.py",
    "",
    "a" * 5000 + "b",
]


def test_the_set_of_every_expression_agrees_with_each_expression_alone():
    expressions = PLAN_PATTERNS + [files for files, _, _ in EXPONENTIAL]
    found = match_paths(expressions, PATHS)
    assert found == one_by_one(expressions, PATHS)
    assert found[0] == [0] and found[1] == [1, 2, 11]


def test_an_expression_given_twice_gets_its_paths_twice():
    assert match_paths(["^src/", r"\.py$", "^src/"], ["src/a.py", "lib/b.py"]) == [[0], [0, 1], [0]]


def test_without_a_set_the_paths_are_matched_one_expression_at_a_time_with_the_same_answer(monkeypatch):
    monkeypatch.setattr(ere, "_set_budget", lambda compiled: 1)  # no room: RE2 refuses to build the Set
    expressions = PLAN_PATTERNS + [files for files, _, _ in EXPONENTIAL]
    assert ere._set_matcher([compile_ere(files) for files in expressions]) is None
    assert match_paths(expressions, PATHS) == one_by_one(expressions, PATHS)


def test_match_paths_with_nothing_to_match():
    assert match_paths([], ["a"]) == []
    assert match_paths(["(a|a)*c"], []) == [[]]


def test_match_paths_refuses_an_invalid_expression_before_matching():
    with pytest.raises(ValueError, match="no \\(\\?\\.\\.\\.\\) groups"):
        match_paths(["^ok/", "(?:x)"], ["ok/x"])


# --------------------------------------------------------------------------- what plans write keeps working


def _template_examples() -> list[str]:
    template = (ROOT / "workflows" / "prompts" / "plan.md.j2").read_text(encoding="utf-8")
    return [json.loads(line)["files"] for line in template.splitlines() if line.startswith('{"id"')]


def _worked_example() -> list[str]:
    lines = (ROOT / "examples" / "worked-example.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["files"] for line in lines if line.strip()]


@pytest.mark.parametrize(
    "files",
    PLAN_PATTERNS + _template_examples() + _worked_example() + [unit["files"] for unit in DEMO_UNITS],
)
def test_expressions_plans_use_are_accepted(files):
    assert messages([unit("any", files)]) == []


def test_the_planner_is_told_the_length_limit():
    template = (ROOT / "workflows" / "prompts" / "plan.md.j2").read_text(encoding="utf-8")
    assert f"longer than {MAX_FILES_CHARS} characters" in template


def test_a_plan_with_every_kind_of_real_expression_is_built_against_tracked_paths():
    raw = [
        unit("api", "^app/api/"),
        unit("core", r"^(src|lib)/.*\.py$"),
        unit("docs", r"^docs/.+\.md$"),
        unit("readme", r"^(README\.md|tools/)"),
        unit("ci", r"\.github/"),
        unit("versions", "^vendor/v[0-9]{1,3}/"),
    ]
    tracked = [
        "app/api/x.py",
        "src/a/b.py",
        "lib/c.py",
        "docs/guide/intro.md",
        "README.md",
        "tools/run",
        ".github/workflows/ci.yml",
        "vendor/v12/mod.c",
        "docs/notes.txt",
        "src/data.json",
    ]
    assert [unit.id for unit in build_graph(raw, tracked_paths=tracked)] == [u["id"] for u in raw]
