"""`files` cannot hang lanebot: expressions that could backtrack for long are refused when the plan
is validated, and matching them against many paths runs in a child process with a deadline.

The paths given alongside the refused expressions would keep Python's `re` busy for hours, so
a check that stopped refusing them would show up as a test stuck at the deadline and failing on
its message, never as a pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot import matching as matching_module
from bot.demo.plan import UNITS as DEMO_UNITS
from bot.graph import (
    MAX_FILES_CHARS,
    MAX_MATCH_WAYS,
    MAX_WIDE_REPEATS,
    MatchTimeout,
    Unit,
    build_graph,
    files_hazard,
    match_paths,
    validate,
)
from bot.lanes import ownership_violations
from bot.planner import validate_plan_text

ROOT = Path(__file__).resolve().parents[1]
SHORT_DEADLINE = 0.5  # seconds: the inputs below take minutes or more, so any deadline this size is missed


def unit(unit_id: str, files: str) -> dict:
    return {"id": unit_id, "title": f"Do {unit_id}", "needs": [], "files": files, "check": "true", "brief": "b"}


def messages(raw: list[dict], **options: object) -> list[str]:
    return [str(problem) for problem in validate(raw, **options)]


# Python's re needs seconds for each at about 30 characters, and doubles that every few more:
# on the path beside it, each would take it longer than the suite may run.
EXPONENTIAL = [
    ("(a|a)*c", "a" * 64),
    ("(a+)+$", "a" * 64 + "!"),
    ("(.*)*x", "a" * 64),
    ("(a*)*b", "a" * 64),
    ("(.*/)*x", "/" * 64),
    ("(a|aa)+$", "a" * 100 + "!"),
    ("(x+x+)+y", "x" * 64),
    ("(a{1,3})*c", "a" * 100),
    ("(a|ab|b)*c", "ab" * 50),
    ("^(([a-z])+.)+[A-Z]([a-z])+$", "a" * 100 + "!"),
    ("^src/([a-z]+/?)*x", "src/" + "a" * 64),
    ("^(src/|[a-z/]+)*x", "src/" * 16),
]


# --------------------------------------------------------------------------- refused when validated


@pytest.mark.parametrize(("files", "path"), EXPONENTIAL)
def test_a_repetition_of_a_part_that_matches_in_several_ways_is_refused_before_any_path_is_matched(files, path):
    found = messages([unit("slow", files), unit("other", "^docs/")], tracked_paths=[path, "docs/x.md"])
    assert len(found) == 1, found
    assert found[0].startswith(f"unit 'slow': files {files!r} can take exponential time to match: ")
    assert "repeats, without an upper bound, a part that can itself match in more than one way" in found[0]


def test_the_refusal_shows_the_repeated_part():
    assert "'(a+)+' repeats" in files_hazard("^src/(a+)+$")
    assert "'(.*/)*' repeats" in files_hazard("^src/(.*/)*x")


def test_a_part_shown_as_python_rewrote_it_says_so():
    # re._parser factors the common 'a' out of (a|a): what it runs is (a(|))*.
    assert "'(a(|))*' (as Python's re reads it) repeats" in files_hazard("(a|a)*c")


@pytest.mark.parametrize(
    ("files", "count"),
    # The x forces the last run of a{1,100}: it must take every a before the x.
    [(".*.*.*.*.*.*x", 6), (".*a.*b.*c.*d", 4), ("(a+){4}", 4), ("a{1,100}" * 5 + "x", 4)],
)
def test_more_wide_repetitions_than_allowed_in_combination_are_refused(files, count):
    problem = messages([unit("wide", files)], tracked_paths=["a" * 3000])
    assert problem == [
        f"unit 'wide': files {files!r} combines {count} repetitions without a small bound (*, +, {{m,}} or"
        f" {{m,n}} with more than 8 counts), more than the {MAX_WIDE_REPEATS} allowed: matching time grows"
        " with a path's length to the power of their number; use fewer (one .* does the work of .*.*)"
    ]


def test_as_many_wide_repetitions_as_allowed_pass_the_static_check():
    assert files_hazard(".*" * MAX_WIDE_REPEATS + "x") is None
    assert files_hazard(".*" * (MAX_WIDE_REPEATS + 1) + "x") is not None


def test_a_run_that_must_stop_where_the_next_part_starts_costs_nothing():
    # [^/]+ cannot stop before a '/' and a{1,100} cannot stop before a 'b': one way each.
    assert files_hazard("^[^/]+/[^/]+/[^/]+/[^/]+/[^/]+$") is None
    assert files_hazard("a{1,100}b{1,100}c{1,100}d{1,100}e") is None
    assert files_hazard("([^/]+/)*x") is None
    assert files_hazard("[^/]+[^/]+[^/]+[^/]+x") is not None  # here each run can stop anywhere


def test_overlapping_alternatives_that_multiply_past_the_limit_are_refused():
    hazard = files_hazard("(a|a){9}")  # 2**9 ways to match the same nine characters
    assert hazard.startswith(f"can match from one place in 512 ways, more than the {MAX_MATCH_WAYS} allowed")
    assert files_hazard("(a|a){8}") is None


def test_counts_too_large_to_multiply_out_are_refused_without_computing_them():
    assert "more than 1,000,000 ways" in files_hazard("((a|a){32767}){32767}")
    assert "combines more than 1,000,000 repetitions" in files_hazard("((a{1,32767}){32767}){32767}")


def test_an_expression_longer_than_the_limit_is_refused():
    assert files_hazard("a" * MAX_FILES_CHARS) is None
    (problem,) = messages([unit("long", "a" * (MAX_FILES_CHARS + 1))])
    assert problem.startswith("unit 'long': files 'aaaa")
    assert problem.endswith(
        f"is {MAX_FILES_CHARS + 1} characters long, more than the {MAX_FILES_CHARS} allowed;"
        " name the directories the unit owns (^src/api/) rather than every file"
    )


def test_an_invalid_expression_is_reported_as_invalid_not_as_slow():
    with pytest.raises(ValueError, match="lazy"):
        files_hazard("a*?")
    (problem,) = messages([unit("bad", "(a+)+?")])
    assert "is not a valid POSIX extended regular expression" in problem


def test_a_slow_expression_does_not_hide_the_overlaps_of_the_others():
    raw = [unit("slow", "(a+)+$"), unit("api", "^src/"), unit("docs", r"\.md$")]
    found = messages(raw, tracked_paths=["a" * 64 + "!", "src/notes.md"])
    assert [problem.split(":")[0] for problem in found] == ["unit 'slow'", "unit 'api'"]
    assert "overlaps unit 'docs'" in found[1]


def test_a_hand_written_plan_in_an_issue_gets_the_refusal_as_its_problem():
    text = json.dumps(unit("slow", "(a|a)*c")) + "\n"
    graph, problems = validate_plan_text(text, max_units=6, tracked_paths=["a" * 64])
    assert graph is None
    assert problems[0].startswith("unit 'slow': files '(a|a)*c' can take exponential time to match")


# --------------------------------------------------------------------------- what plans write keeps working


def _template_examples() -> list[str]:
    template = (ROOT / "workflows" / "prompts" / "plan.md.j2").read_text(encoding="utf-8")
    return [json.loads(line)["files"] for line in template.splitlines() if line.startswith('{"id"')]


def _worked_example() -> list[str]:
    lines = (ROOT / "examples" / "worked-example.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["files"] for line in lines if line.strip()]


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


@pytest.mark.parametrize(
    "files",
    PLAN_PATTERNS + _template_examples() + _worked_example() + [unit["files"] for unit in DEMO_UNITS],
)
def test_expressions_plans_use_are_accepted(files):
    assert files_hazard(files) is None


def test_the_planner_is_told_the_limits_that_are_enforced():
    template = (ROOT / "workflows" / "prompts" / "plan.md.j2").read_text(encoding="utf-8")
    assert f"more than {MAX_WIDE_REPEATS} repetitions such as `.*`" in template
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
    tracked = ["app/api/x.py", "src/a/b.py", "lib/c.py", "docs/guide/intro.md", "README.md", "tools/run",
               ".github/workflows/ci.yml", "vendor/v12/mod.c", "docs/notes.txt", "src/data.json"]
    assert [unit.id for unit in build_graph(raw, tracked_paths=tracked)] == [u["id"] for u in raw]


# --------------------------------------------------------------------------- bounded whatever the expression


def test_an_expression_the_static_check_accepts_still_cannot_hang_validation():
    # Three .* pass files_hazard, but cost about n**4 steps on an n-character path without an x.
    raw = [unit("slow", ".*.*.*x"), unit("api", "^src/"), unit("docs", r"\.md$")]
    tracked = ["a" * 3000, "src/notes.md"]
    found = messages(raw, tracked_paths=tracked, match_timeout=SHORT_DEADLINE)
    assert found == [
        f"unit 'slow': matching files '.*.*.*x' against the 2 tracked paths took longer than {SHORT_DEADLINE:g} s;"
        " simplify it: anchor it with ^ and use fewer repetitions such as .*",
        "unit 'api': files '^src/' overlaps unit 'docs' (files '\\\\.md$'): both match the tracked path"
        " 'src/notes.md'; each path may belong to one unit only",
    ]


def test_the_worker_bounds_even_an_exponential_expression():
    with pytest.raises(MatchTimeout) as caught:
        match_paths(["^src/", "(a|a)*c", "^docs/"], ["src/x", "a" * 64], timeout=SHORT_DEADLINE)
    slow = caught.value
    assert (slow.position, slow.files, slow.done) == (1, "(a|a)*c", [[0]])
    assert str(slow) == (
        f"matching files '(a|a)*c' against 2 paths took longer than {SHORT_DEADLINE:g} s;"
        " simplify the expression: anchor it with ^ and use fewer repetitions such as .*"
    )


def test_match_paths_gives_the_positions_each_expression_matches_anywhere_in_a_path():
    paths = ["src/api/x.py", "docs/a.md", "lib/src/y.py", "README.md"]
    assert match_paths(["^src/", r"\.md$", "src/", "^nothing"], paths) == [[0], [1, 3], [0, 2], []]


def test_match_paths_starts_no_worker_when_there_is_nothing_to_match():
    assert match_paths([], ["a"]) == []
    assert match_paths(["(a|a)*c"], []) == [[]]


def test_match_paths_refuses_an_invalid_expression_or_deadline_before_matching():
    with pytest.raises(ValueError, match="no \\(\\?\\.\\.\\.\\) groups"):
        match_paths(["^ok/", "(?:x)"], ["ok/x"])
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        match_paths(["^ok/"], ["ok/x"], timeout=0)


def test_a_lanes_ownership_check_is_bounded_by_the_deadline_too():
    lane = Unit(id="slow", title="t", needs=(), files=".*.*.*x", check="true", brief="b")
    with pytest.raises(MatchTimeout) as caught:
        ownership_violations(lane, ["notes/x", "a" * 3000], timeout=SHORT_DEADLINE)
    assert caught.value.files == ".*.*.*x"


def test_a_lanes_ownership_check_still_keeps_lanebots_own_directories_out():
    lane = Unit(id="all", title="t", needs=(), files="^.*$", check="true", brief="b")
    changed = ["src/x.py", ".lanebot/units.jsonl", ".github/workflows/ci.yml", "src/x.py"]
    assert ownership_violations(lane, changed) == [".lanebot/units.jsonl", ".github/workflows/ci.yml"]


def test_paths_with_newlines_and_undecodable_bytes_reach_the_worker_intact():
    paths = ["docs/a\nb.md", "src/caf\udce9.py", "src/ok.py"]  # git paths may hold both
    assert match_paths([r"\.md$", "^src/", "a\nb"], paths) == [[0], [1, 2], [0]]


def test_a_worker_that_dies_is_an_error_that_says_how(monkeypatch):
    monkeypatch.setattr(matching_module, "_WORKER_SOURCE", "import sys; sys.exit('out of memory, say')")
    with pytest.raises(RuntimeError, match="exited with code 1: out of memory, say"):
        match_paths(["^src/"], ["src/x.py"])


def test_a_worker_that_never_reads_its_input_is_an_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(matching_module, "_WORKER_SOURCE", "import time; time.sleep(3600)")
    monkeypatch.setattr(matching_module, "_WORKER_INPUT_TIMEOUT_S", SHORT_DEADLINE)
    many = [f"src/{index:06}.py" for index in range(20_000)]  # more than a pipe holds unread
    with pytest.raises(RuntimeError, match=f"did not read its input within {SHORT_DEADLINE:g} s"):
        match_paths(["^src/"], many)
