"""lanebot's own review, as a specification: findings and their validation, refutation and the
majority rule, the lines a diff lets GitHub comment on, and the review that is posted."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.core.findings import (
    FINDINGS_FILE,
    LENSES,
    SEVERITIES,
    VERDICTS_FILE,
    Finding,
    Verdict,
    commentable_lines,
    findings_to_check,
    parse_findings,
    parse_verdicts,
    review_payload,
    survivors,
)
from bot.core.text import COMMENT_LIMIT, marker, parse_marker

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MARKER = marker("self-review", 4, head=COMMIT)
modest = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GITHUB_CLOSING = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+(?:[\w.-]+/[\w.-]+)?#\d", re.I)
GITHUB_MENTION = re.compile(r"(?<![\w`])@[A-Za-z0-9]")


def item(**changes: object) -> dict:
    data = {"file": "src/app.py", "line": 3, "claim": "off by one", "evidence": "range(n + 1)", "severity": "medium"}
    data.update(changes)
    return data


def findings_text(*items: dict, looked_at: object = None) -> str:
    document: dict = {"findings": list(items)}
    if looked_at is not None:
        document["looked_at"] = looked_at
    return json.dumps(document)


def finding(finding_id: str, file: str = "src/app.py", line: int = 3, **changes: object) -> Finding:
    data = {
        "id": finding_id,
        "lens": finding_id.rsplit("-", 1)[0],
        "file": file,
        "line": line,
        "claim": "claim",
        "evidence": "evidence",
        "severity": "high",
    }
    data.update(changes)
    return Finding(**data)


def refute(finding_id: str, reason: str = "not so") -> Verdict:
    return Verdict(finding_id, True, reason)


def uphold(finding_id: str) -> Verdict:
    return Verdict(finding_id, False, "agreed")


# =========================================================================== lenses


def test_the_lenses_are_correctness_security_and_checks():
    assert list(LENSES) == ["correctness", "security", "checks"]


@pytest.mark.parametrize("lens", list(LENSES))
def test_each_lens_has_a_one_paragraph_description(lens):
    description = LENSES[lens]
    assert len(description) > 100 and "\n" not in description


def test_severities_go_from_low_to_high():
    assert SEVERITIES == ("low", "medium", "high")


# =========================================================================== findings


def test_valid_findings_get_ids_by_lens_and_position():
    text = findings_text(item(), item(file="docs/a.md", line=9, severity="low"), looked_at=["src/", "docs/a.md"])
    found, looked_at, problems = parse_findings(text, "security", max_findings=10)
    assert found == [
        Finding("security-1", "security", "src/app.py", 3, "off by one", "range(n + 1)", "medium"),
        Finding("security-2", "security", "docs/a.md", 9, "off by one", "range(n + 1)", "low"),
    ]
    assert looked_at == ("src/", "docs/a.md") and problems == []


def test_no_findings_is_a_valid_answer():
    assert parse_findings(findings_text(), "checks", max_findings=3) == ([], (), [])


def test_looked_at_missing_or_empty_means_the_whole_diff():
    assert parse_findings(findings_text(item()), "checks", max_findings=3)[1] == ()
    assert parse_findings(findings_text(item(), looked_at=[]), "checks", max_findings=3)[1] == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, f"the session did not write {FINDINGS_FILE}"),
        ("{", f"{FINDINGS_FILE} is not valid JSON: line 1, column 2"),
        ("[]", f"{FINDINGS_FILE} must hold a JSON object with a 'findings' list, not a list"),
        ('{"looked_at": []}', f"{FINDINGS_FILE} must hold a 'findings' list (missing)"),
        ('{"findings": {}}', f"{FINDINGS_FILE} must hold a 'findings' list (not a list)"),
    ],
)
def test_a_missing_or_unreadable_file_gives_nothing_and_one_problem(text, problem):
    found, looked_at, problems = parse_findings(text, "correctness", max_findings=10)
    assert (found, looked_at) == ([], ())
    assert len(problems) == 1 and problems[0].startswith(problem)


def test_a_file_too_large_to_read_gives_nothing():
    found, _, [problem] = parse_findings(" " * 1_000_001, "correctness", max_findings=10)
    assert found == [] and "more than the 1000000" in problem


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"file": ""}, "file"),
        ({"file": "   "}, "file"),
        ({"file": "/etc/passwd"}, "file"),
        ({"file": "../outside.py"}, "file"),
        ({"file": "src/../../x.py"}, "file"),
        ({"file": "src//x.py"}, "file"),
        ({"file": "src\\x.py"}, "file"),
        ({"file": 5}, "file"),
        ({"line": 0}, "line"),
        ({"line": -2}, "line"),
        ({"line": "3"}, "line"),
        ({"line": 3.0}, "line"),
        ({"line": True}, "line"),
        ({"line": None}, "line"),
        ({"claim": ""}, "claim"),
        ({"claim": "  \n "}, "claim"),
        ({"claim": "c" * 2_001}, "claim"),
        ({"evidence": ""}, "evidence"),
        ({"evidence": "e" * 4_001}, "evidence"),
        ({"severity": "critical"}, "severity"),
        ({"severity": "HIGH"}, "severity"),
    ],
)
def test_an_invalid_finding_is_dropped_with_a_problem_naming_its_index_and_field(changes, field):
    text = findings_text(item(claim="kept"), item(**changes))
    found, _, problems = parse_findings(text, "correctness", max_findings=10)
    assert [f.claim for f in found] == ["kept"]
    assert len(problems) == 1 and problems[0].startswith(f"findings[1] dropped: {field}: ")


@pytest.mark.parametrize("key", ["file", "line", "claim", "evidence", "severity"])
def test_a_finding_missing_a_key_is_dropped_naming_it(key):
    broken = item()
    del broken[key]
    found, _, [problem] = parse_findings(findings_text(broken), "correctness", max_findings=10)
    assert found == [] and problem == f"findings[0] dropped: {key}: field required"


def test_a_finding_that_is_not_an_object_is_dropped():
    text = findings_text("just text")  # type: ignore[arg-type]
    found, _, [problem] = parse_findings(text, "correctness", max_findings=10)
    assert found == [] and problem.startswith("findings[0] dropped: ")


def test_the_longest_allowed_texts_are_kept():
    text = findings_text(item(claim="c" * 2_000, evidence="e" * 4_000))
    [kept], _, problems = parse_findings(text, "correctness", max_findings=1)
    assert (len(kept.claim), len(kept.evidence), problems) == (2_000, 4_000, [])


def test_texts_and_paths_are_stripped_and_a_leading_dot_slash_dropped():
    text = findings_text(item(file=" ./src/app.py ", claim=" c \n", evidence="\te"))
    [kept], _, _ = parse_findings(text, "correctness", max_findings=1)
    assert (kept.file, kept.claim, kept.evidence) == ("src/app.py", "c", "e")


def test_keys_the_schema_does_not_know_are_ignored():
    [kept], _, problems = parse_findings(findings_text(item(confidence=0.9)), "checks", max_findings=1)
    assert kept.claim == "off by one" and problems == []


def test_ids_count_only_the_findings_kept():
    text = findings_text(item(claim="a"), item(line=0), item(claim="b"))
    found, _, _ = parse_findings(text, "checks", max_findings=10)
    assert [(f.id, f.claim) for f in found] == [("checks-1", "a"), ("checks-2", "b")]


def test_past_max_findings_the_first_ones_are_kept_and_the_cut_recorded():
    text = findings_text(*(item(claim=f"c{n}") for n in range(1, 6)))
    found, _, problems = parse_findings(text, "correctness", max_findings=3)
    assert [f.claim for f in found] == ["c1", "c2", "c3"] and [f.id for f in found][-1] == "correctness-3"
    assert problems == ["the session reported 5 valid findings; only the first 3 are kept (review.max_findings)"]


def test_exactly_max_findings_is_no_problem():
    found, _, problems = parse_findings(findings_text(item(), item()), "correctness", max_findings=2)
    assert len(found) == 2 and problems == []


def test_looked_at_paths_are_kept_once_each_invalid_ones_dropped_with_a_problem():
    text = findings_text(looked_at=["src/", "./docs/a.md", "src/", "/abs", 5, "../x", "tests"])
    _, looked_at, problems = parse_findings(text, "correctness", max_findings=1)
    assert looked_at == ("src/", "docs/a.md", "tests")
    assert [p.split(" dropped")[0] for p in problems] == ["looked_at[3]", "looked_at[4]", "looked_at[5]"]


def test_looked_at_that_is_no_list_is_read_as_the_whole_diff_with_a_problem():
    _, looked_at, [problem] = parse_findings(findings_text(looked_at="src/"), "correctness", max_findings=1)
    assert looked_at == () and problem.startswith("looked_at must be a list of paths")


@pytest.mark.parametrize(
    ("lens", "max_findings", "message"),
    [("style", 3, "unknown lens 'style'"), ("checks", 0, "max_findings must be at least 1")],
)
def test_parse_findings_refuses_a_wrong_call(lens, max_findings, message):
    with pytest.raises(ValueError, match=message):
        parse_findings("{}", lens, max_findings=max_findings)


@modest
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "file": st.sampled_from(["a.py", "", "/x", "src/b.py", "../c"]),
                "line": st.one_of(st.integers(-2, 5), st.just("1")),
                "claim": st.sampled_from(["c", ""]),
                "evidence": st.just("e"),
                "severity": st.sampled_from(["low", "medium", "high", "none"]),
            }
        ),
        max_size=12,
    ),
    st.integers(1, 6),
)
def test_findings_are_the_valid_items_in_order_numbered_from_one_and_at_most_max(items, max_findings):
    found, _, problems = parse_findings(json.dumps({"findings": items}), "security", max_findings=max_findings)
    valid = [
        i
        for i in items
        if i["file"] in ("a.py", "src/b.py")
        and isinstance(i["line"], int)
        and i["line"] >= 1
        and i["claim"]
        and i["severity"] != "none"
    ]
    assert [(f.file, f.line) for f in found] == [(i["file"], i["line"]) for i in valid][:max_findings]
    assert [f.id for f in found] == [f"security-{n}" for n in range(1, len(found) + 1)]
    assert len(problems) == len(items) - len(valid) + (len(valid) > max_findings)


# =========================================================================== findings to check


def test_a_lens_checks_only_the_other_lenses_findings():
    findings = [finding("correctness-1"), finding("security-1", file="b.py", line=7), finding("checks-1")]
    assert json.loads(findings_to_check(findings, "correctness")) == {
        "findings": [
            {
                "id": "security-1",
                "lens": "security",
                "file": "b.py",
                "line": 7,
                "severity": "high",
                "claim": "claim",
                "evidence": "evidence",
            },
            {
                "id": "checks-1",
                "lens": "checks",
                "file": "src/app.py",
                "line": 3,
                "severity": "high",
                "claim": "claim",
                "evidence": "evidence",
            },
        ]
    }


def test_findings_to_check_is_pretty_printed_and_stable():
    text = findings_to_check([finding("security-1")], "checks")
    assert text == findings_to_check([finding("security-1")], "checks") and text.endswith("}\n") and "\n  " in text


def test_findings_to_check_refuses_an_unknown_lens():
    with pytest.raises(ValueError, match="unknown lens"):
        findings_to_check([], "style")


# =========================================================================== verdicts


def verdicts_text(*verdicts: dict) -> str:
    return json.dumps({"verdicts": list(verdicts)})


def test_verdicts_are_read_by_finding_id():
    text = verdicts_text(
        {"finding": "security-1", "refute": True, "reason": "the input is checked on line 4"},
        {"finding": "checks-2", "refute": False, "reason": "right"},
    )
    assert parse_verdicts(text, {"security-1", "checks-2"}) == (
        {
            "security-1": Verdict("security-1", True, "the input is checked on line 4"),
            "checks-2": Verdict("checks-2", False, "right"),
        },
        [],
    )


def test_a_verdict_on_a_finding_this_lens_was_not_given_is_dropped():
    text = verdicts_text({"finding": "correctness-1", "refute": True, "reason": "mine"})
    assert parse_verdicts(text, {"security-1"}) == (
        {},
        ["verdicts[0] dropped: 'correctness-1' is not one of the findings to check"],
    )


def test_a_second_verdict_on_one_finding_is_dropped_the_first_counts():
    text = verdicts_text(
        {"finding": "security-1", "refute": False, "reason": "a"},
        {"finding": "security-1", "refute": True, "reason": "b"},
    )
    verdicts, problems = parse_verdicts(text, {"security-1"})
    assert verdicts == {"security-1": Verdict("security-1", False, "a")}
    assert problems == ["verdicts[1] dropped: a second verdict on security-1; the first counts"]


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"finding": "security-1", "refute": "yes", "reason": "r"}, "refute"),
        ({"finding": "security-1", "refute": 1, "reason": "r"}, "refute"),
        ({"finding": "security-1", "refute": True, "reason": " "}, "reason"),
        ({"finding": "security-1", "refute": True}, "reason"),
        ({"finding": 1, "refute": True, "reason": "r"}, "finding"),
        ({"refute": True, "reason": "r"}, "finding"),
    ],
)
def test_an_invalid_verdict_is_dropped_naming_its_index_and_field(bad, field):
    verdicts, [problem] = parse_verdicts(verdicts_text(bad), {"security-1"})
    assert verdicts == {} and problem.startswith(f"verdicts[0] dropped: {field}: ")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, f"the session did not write {VERDICTS_FILE}"),
        ("nope", f"{VERDICTS_FILE} is not valid JSON"),
        ('{"findings": []}', f"{VERDICTS_FILE} must hold a 'verdicts' list (missing)"),
    ],
)
def test_a_missing_or_unreadable_verdicts_file_gives_no_verdicts(text, problem):
    verdicts, [found] = parse_verdicts(text, {"security-1"})
    assert verdicts == {} and found.startswith(problem)


# =========================================================================== the majority


def test_with_one_lens_every_finding_survives():
    findings = [finding("correctness-1"), finding("correctness-2")]
    assert survivors(findings, {}, {}, judged=[]) == (findings, [])


def test_with_two_lenses_one_refutation_drops_a_finding():
    target = finding("correctness-1")
    kept, dropped = survivors(
        [target], {"security": {"correctness-1": refute("correctness-1")}}, {}, judged=["correctness", "security"]
    )
    assert kept == [] and dropped == [(target, [refute("correctness-1")])]


def test_with_two_lenses_an_upheld_finding_survives():
    target = finding("correctness-1")
    kept, _ = survivors(
        [target], {"security": {"correctness-1": uphold("correctness-1")}}, {}, judged=["correctness", "security"]
    )
    assert kept == [target]


def test_with_three_lenses_one_refutation_is_outvoted():
    target = finding("checks-1")
    verdicts = {"security": {"checks-1": refute("checks-1")}, "correctness": {"checks-1": uphold("checks-1")}}
    assert survivors([target], verdicts, {}, judged=list(LENSES)) == ([target], [])


def test_with_three_lenses_two_refutations_drop_a_finding_and_both_are_given():
    target = finding("checks-1")
    verdicts = {"security": {"checks-1": refute("checks-1", "b")}, "correctness": {"checks-1": refute("checks-1", "a")}}
    kept, dropped = survivors([target], verdicts, {}, judged=["security", "checks", "correctness"])
    assert kept == [] and dropped == [(target, [refute("checks-1", "a"), refute("checks-1", "b")])]


def test_a_voter_with_no_verdict_did_not_refute():
    target = finding("checks-1")
    verdicts = {"security": {"checks-1": refute("checks-1")}}  # correctness said nothing about it
    assert survivors([target], verdicts, {}, judged=list(LENSES))[0] == [target]


def test_a_lens_whose_second_session_failed_does_not_vote():
    target = finding("checks-1")
    verdicts = {"security": {"checks-1": refute("checks-1")}, "correctness": {"checks-1": uphold("checks-1")}}
    # correctness failed phase 2: voters are checks and security, and one of the two refutes.
    assert survivors([target], verdicts, {}, judged=["checks", "security"])[0] == []


def test_a_lens_that_did_not_look_at_the_file_does_not_vote():
    target = finding("checks-1", file="src/app.py")
    verdicts = {"security": {"checks-1": refute("checks-1")}, "correctness": {"checks-1": uphold("checks-1")}}
    looked_at = {"correctness": ["docs/"]}  # so the voters are checks and security
    assert survivors([target], verdicts, looked_at, judged=list(LENSES))[0] == []


@pytest.mark.parametrize("paths", [[], ["src/app.py"], ["src/"], ["src"], ["docs/", "src/"]])
def test_a_lens_that_looked_at_the_file_or_its_directory_votes(paths):
    target = finding("checks-1", file="src/app.py")
    verdicts = {"security": {"checks-1": refute("checks-1")}, "correctness": {"checks-1": refute("checks-1")}}
    kept, _ = survivors([target], verdicts, {"correctness": paths}, judged=list(LENSES))
    assert kept == []


def test_a_directory_prefix_is_not_a_segment_prefix():
    target = finding("checks-1", file="srcx/app.py")
    verdicts = {"security": {"checks-1": refute("checks-1")}, "correctness": {"checks-1": refute("checks-1")}}
    # correctness looked at src/ only, so it does not vote: checks and security, one refutes.
    assert survivors([target], verdicts, {"correctness": ["src"]}, judged=list(LENSES))[0] == []
    verdicts["security"] = {"checks-1": uphold("checks-1")}
    assert survivors([target], verdicts, {"correctness": ["src"]}, judged=list(LENSES))[0] == [target]


def test_a_lens_never_refutes_its_own_finding():
    target = finding("security-1")
    verdicts = {"security": {"security-1": refute("security-1")}}
    assert survivors([target], verdicts, {}, judged=["security", "checks"])[0] == [target]


def test_survivors_and_dropped_keep_the_findings_order():
    findings = [finding("correctness-1"), finding("correctness-2"), finding("correctness-3")]
    verdicts = {"security": {"correctness-2": refute("correctness-2")}}
    kept, dropped = survivors(findings, verdicts, {}, judged=["security"])
    assert [f.id for f in kept] == ["correctness-1", "correctness-3"]
    assert [f.id for f, _ in dropped] == ["correctness-2"]


@st.composite
def elections(draw):
    lenses = list(LENSES)
    own = draw(st.sampled_from(lenses))
    target = finding(f"{own}-1", file=draw(st.sampled_from(["a/x.py", "b/y.py"])))
    judged = draw(st.lists(st.sampled_from(lenses), unique=True))
    looked_at = draw(st.dictionaries(st.sampled_from(lenses), st.lists(st.sampled_from(["a/", "b/y.py", "c"]))))
    verdicts = draw(
        st.dictionaries(
            st.sampled_from(lenses),
            st.one_of(st.just({}), st.booleans().map(lambda r: {target.id: Verdict(target.id, r, "why")})),
        )
    )
    return target, verdicts, looked_at, judged


def covers(paths, file) -> bool:
    return not paths or any(file == p.rstrip("/") or file.startswith(p.rstrip("/") + "/") for p in paths)


@modest
@given(elections())
def test_a_finding_survives_iff_fewer_than_half_of_its_voters_refute_it(election):
    target, verdicts, looked_at, judged = election
    others = [lens for lens in judged if lens != target.lens and covers(looked_at.get(lens, []), target.file)]
    refusals = sum(1 for lens in others if verdicts.get(lens, {}).get(target.id, uphold(target.id)).refute)
    voters = len(others) + 1
    kept, dropped = survivors([target], verdicts, looked_at, judged)
    assert (kept == [target]) == (refusals < voters / 2)
    assert len(kept) + len(dropped) == 1
    if dropped:
        assert all(v.refute for v in dropped[0][1]) and len(dropped[0][1]) == refusals


@modest
@given(elections(), st.sampled_from(list(LENSES)))
def test_one_more_refutation_never_saves_a_finding(election, lens):
    target, verdicts, looked_at, judged = election
    before = survivors([target], verdicts, looked_at, judged)[0]
    more = {**verdicts, lens: {target.id: refute(target.id)}}
    after = survivors([target], more, looked_at, judged)[0]
    assert not (after and not before)


# =========================================================================== commentable lines

# `git diff` of a real repository (git 2.x): binary change, a UTF-8 name git quotes, a modified
# file, a new file, a change at a missing final newline, a deleted file, a rename with a change,
# a name with a tab (quoted) and a name with a space (unquoted, a tab after it on ---/+++).
REAL_DIFF = (
    "diff --git a/bin.dat b/bin.dat\nindex bdc955b..8835708 100644\nBinary files a/bin.dat and b/bin.dat differ\n"
    'diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"\nindex 7898192..6178079 100644\n'
    '--- "a/caf\\303\\251.txt"\n+++ "b/caf\\303\\251.txt"\n@@ -1 +1 @@\n-a\n+b\n'
    "diff --git a/keep.txt b/keep.txt\nindex 4cb29ea..6addb9b 100644\n--- a/keep.txt\n+++ b/keep.txt\n"
    "@@ -1,3 +1,4 @@\n one\n-two\n+TWO\n three\n+four\n"
    "diff --git a/new.txt b/new.txt\nnew file mode 100644\nindex 0000000..3e75765\n--- /dev/null\n+++ b/new.txt\n"
    "@@ -0,0 +1 @@\n+new\n"
    "diff --git a/nonl.txt b/nonl.txt\nindex 1a9d148..7adf2e5 100644\n--- a/nonl.txt\n+++ b/nonl.txt\n"
    "@@ -1 +1 @@\n-nonl\n\\ No newline at end of file\n+nonl2\n\\ No newline at end of file\n"
    "diff --git a/old.txt b/old.txt\ndeleted file mode 100644\nindex 286c5f5..0000000\n--- a/old.txt\n"
    "+++ /dev/null\n@@ -1 +0,0 @@\n-gone\n"
    "diff --git a/ren.txt b/renamed.txt\nsimilarity index 80%\nrename from ren.txt\nrename to renamed.txt\n"
    "index 0ec1772..27d4162 100644\n--- a/ren.txt\n+++ b/renamed.txt\n@@ -2,4 +2,4 @@ r1\n r2\n r3\n r4\n-r5\n+R5\n"
    'diff --git "a/ta\\tb.txt" "b/ta\\tb.txt"\nnew file mode 100644\nindex 0000000..8cc35a3\n--- /dev/null\n'
    '+++ "b/ta\\tb.txt"\n@@ -0,0 +1 @@\n+tab\n'
    "diff --git a/with space.txt b/with space.txt\nindex b77b4eb..7061c57 100644\n--- a/with space.txt\t\n"
    "+++ b/with space.txt\t\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n"
)


def test_a_real_git_diff_gives_each_new_paths_right_side_lines():
    assert commentable_lines(REAL_DIFF) == {
        "café.txt": frozenset({1}),
        "keep.txt": frozenset({1, 2, 3, 4}),
        "new.txt": frozenset({1}),
        "nonl.txt": frozenset({1}),
        "renamed.txt": frozenset({2, 3, 4, 5}),
        "ta\tb.txt": frozenset({1}),
        "with space.txt": frozenset({1, 2}),
    }


def test_deleted_and_binary_files_have_no_commentable_lines():
    lines = commentable_lines(REAL_DIFF)
    assert "old.txt" not in lines and "bin.dat" not in lines


def test_a_pure_rename_has_no_hunk_and_no_lines():
    diff = "diff --git a/a.txt b/b.txt\nsimilarity index 100%\nrename from a.txt\nrename to b.txt\n"
    assert commentable_lines(diff) == {}


def test_an_empty_diff_has_no_lines():
    assert commentable_lines("") == {}


def test_removed_lines_are_not_commentable_and_do_not_advance_the_right_side():
    diff = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -10,4 +10,3 @@\n a\n-b\n-c\n+C\n d\n"
    assert commentable_lines(diff) == {"f": frozenset({10, 11, 12})}


def test_lines_in_a_hunk_that_look_like_headers_are_content():
    diff = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n--- a/other\n+++ b/other\n ctx\n+@@ -1 +1 @@\n"
    # a removed line "-- a/other", an added line "++ b/other", a context line, an added "@@ -1 +1 @@"
    assert commentable_lines(diff) == {"f": frozenset({1, 2, 3})}


def test_several_hunks_and_files_each_count_from_their_own_start():
    diff = (
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-x\n+y\n z\n@@ -50 +50,2 @@\n q\n+r\n"
        "diff --git a/g b/g\n--- a/g\n+++ b/g\n@@ -7,0 +8 @@\n+new\n"
    )
    assert commentable_lines(diff) == {"f": frozenset({1, 2, 50, 51}), "g": frozenset({8})}


def test_an_empty_context_line_whose_space_was_stripped_still_counts():
    diff = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n"
    assert commentable_lines(diff) == {"f": frozenset({1, 2, 3})}


def test_windows_line_endings_are_read_too():
    diff = "diff --git a/f b/f\r\n--- a/f\r\n+++ b/f\r\n@@ -1 +1 @@\r\n-a\r\n+b\r\n"
    assert commentable_lines(diff) == {"f": frozenset({1})}


@pytest.mark.parametrize(
    ("quoted", "path"),
    [
        ('"b/a\\"q\\".txt"', 'a"q".txt'),
        ('"b/back\\\\slash"', "back\\slash"),
        ('"b/\\346\\227\\245\\346\\234\\254.md"', "日本.md"),
        ('"b/new\\nline"', "new\nline"),
    ],
)
def test_quoted_paths_are_unquoted(quoted, path):
    diff = f"diff --git x y\n--- /dev/null\n+++ {quoted}\n@@ -0,0 +1 @@\n+z\n"
    assert commentable_lines(diff) == {path: frozenset({1})}


def git_quoted(path: str) -> str:
    """How git writes a path in `+++` (core.quotePath on): C-style quoting when needed, else a tab after a space."""
    special = {"\t": "\\t", "\n": "\\n", '"': '\\"', "\\": "\\\\"}
    if not any(c in special or ord(c) > 126 or ord(c) < 32 for c in path):
        return f"b/{path}" + ("\t" if " " in path else "")
    parts = []
    for char in path:
        if char in special:
            parts.append(special[char])
        elif ord(char) > 126:
            parts.extend(f"\\{byte:03o}" for byte in char.encode("utf-8"))
        else:
            parts.append(char)
    return '"b/' + "".join(parts) + '"'


content = st.sampled_from(["x", "", "-- a/f", "++ b/f", "@@ -1 +1 @@", "\\ note", "diff --git a/q b/q"])
hunk_ops = st.lists(st.tuples(st.sampled_from(" +-"), content), min_size=1, max_size=8).filter(
    lambda ops: any(op != "-" for op, _ in ops) or len(ops) > 0
)


@st.composite
def diffs(draw):
    names = draw(st.lists(st.text(alphabet='ab é\t"\\', min_size=1, max_size=6), max_size=4, unique=True))
    text, expected = [], {}
    for name in names:
        kind = draw(st.sampled_from(["changed", "changed", "deleted", "binary"]))
        text.append(f"diff --git a/{name} b/{name}\nindex 1..2 100644\n")
        if kind == "binary":
            text.append(f"Binary files a/{name} and b/{name} differ\n")
            continue
        text.append(f"--- a/{name}\n+++ " + ("/dev/null" if kind == "deleted" else git_quoted(name)) + "\n")
        right, left, lines = 1, 1, set()
        for ops in draw(st.lists(hunk_ops, min_size=1, max_size=3)):
            if kind == "deleted":
                ops = [("-", body) for _, body in ops]
            gap = draw(st.integers(0, 5))
            right, left = right + gap, left + gap
            old = sum(op != "+" for op, _ in ops)
            new = sum(op != "-" for op, _ in ops)
            new_start = right if new else right - 1
            old_start = left if old else left - 1
            old_range = f"{old_start}" if old == 1 else f"{old_start},{old}"
            new_range = f"{new_start}" if new == 1 else f"{new_start},{new}"
            text.append(f"@@ -{old_range} +{new_range} @@\n")
            for op, body in ops:
                text.append(f"{op}{body}\n")
                if op != "-":
                    lines.add(right)
                    right += 1
                if op != "+":
                    left += 1
            if draw(st.booleans()):
                text.append("\\ No newline at end of file\n")
        if lines:
            expected[name] = frozenset(lines)
    return "".join(text), expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(diffs())
def test_commentable_lines_are_exactly_the_added_and_context_lines_a_diff_was_written_with(generated):
    diff, expected = generated
    assert commentable_lines(diff) == expected


# =========================================================================== the review


def payload(findings=(), commentable=None, **changes):
    arguments = {"commit_id": COMMIT, "marker_text": MARKER, "lenses": list(LENSES), "dropped": 0, "problems": []}
    arguments.update(changes)
    return review_payload(list(findings), commentable if commentable is not None else {}, **arguments)


def test_the_review_is_a_comment_on_the_reviewed_commit_never_an_approval():
    review = payload([finding("security-1")], {"src/app.py": frozenset({3})})
    assert review["event"] == "COMMENT" and review["commit_id"] == COMMIT
    assert set(review) == {"commit_id", "event", "body", "comments"}


def test_a_finding_on_a_line_the_diff_shows_is_an_inline_comment():
    target = finding("security-1", claim="shell injection", evidence="subprocess.run(cmd, shell=True)", severity="high")
    [inline] = payload([target], {"src/app.py": frozenset({2, 3})})["comments"]
    assert (inline["path"], inline["line"], inline["side"]) == ("src/app.py", 3, "RIGHT")
    assert inline["body"] == (
        "**high** · security (lanebot's own review)\n\nshell injection\n\n"
        "```text\nsubprocess.run(cmd, shell=True)\n```\n"
    )


@pytest.mark.parametrize("commentable", [{}, {"src/app.py": frozenset({4})}, {"other.py": frozenset({3})}])
def test_a_finding_off_the_diff_is_listed_in_the_body_with_file_and_line(commentable):
    target = finding("checks-1", claim="no test covers this", evidence="def f(): ...", severity="low")
    review = payload([target], commentable)
    assert review["comments"] == []
    listed = "#### `src/app.py:3` · **low** · checks\n\nno test covers this\n\n```text\ndef f(): ...\n```"
    assert listed in review["body"]


def test_the_body_starts_with_the_marker():
    assert parse_marker(payload()["body"]) == {"kind": "self-review", "run": 4, "head": COMMIT}


def test_the_body_names_the_lenses_that_looked():
    assert "through the **correctness**, **security** and **checks** lenses" in payload()["body"]
    assert "through the **security** lens." in payload(lenses=["security"])["body"]
    assert "through the **checks** and **security** lenses" in payload(lenses=["checks", "security"])["body"]


def test_only_several_lenses_mention_refuting_each_other():
    assert "refute" in payload()["body"] and "refute" not in payload(lenses=["checks"])["body"]


def test_the_body_counts_survivors_where_they_are_and_the_refuted():
    findings = [finding("security-1"), finding("checks-1", file="elsewhere.py")]
    body = payload(findings, {"src/app.py": frozenset({3})}, dropped=2)["body"]
    assert (
        "2 findings survived: 1 inline below, 1 listed here (their line is not in the diff)."
        " 2 findings were dropped: other lenses refuted them."
    ) in body


def test_all_inline_survivors_are_counted_simply():
    body = payload([finding("security-1")], {"src/app.py": frozenset({3})}, dropped=1)["body"]
    assert "1 finding survived. 1 finding was dropped: other lenses refuted them." in body


def test_with_nothing_found_the_body_says_nothing_survived():
    review = payload()
    assert "Nothing survived: no lens reported a finding." in review["body"] and review["comments"] == []


def test_with_everything_refuted_the_body_says_nothing_survived_and_how_many_were_dropped():
    assert "Nothing survived: 3 findings were dropped: other lenses refuted them." in payload(dropped=3)["body"]


def test_the_body_lists_the_problems():
    body = payload(problems=["findings[1] dropped: line: must be at least 1"])["body"]
    assert "**Problems**\n\n- findings&#91;1&#93; dropped: line: must be at least 1" in body


def test_the_body_says_lanebot_never_approves():
    assert "never approves" in payload()["body"]


def test_agent_text_cannot_mention_close_or_format_anywhere_in_the_review():
    hostile = "fixes #12 @alice <img src=x> [x](https://evil.example)"
    findings = [
        finding("security-1", claim=hostile, evidence=hostile),
        finding("checks-1", file="gone.py", claim=hostile, evidence=hostile),
    ]
    review = payload(findings, {"src/app.py": frozenset({3})}, problems=[hostile])
    for text in [review["body"], *(c["body"] for c in review["comments"])]:
        assert not GITHUB_CLOSING.search(text) and not GITHUB_MENTION.search(text)
        assert "<img" not in text.replace("```text\nfixes\u200b #\u200b12 @\u200balice <img", "")


def test_evidence_cannot_close_its_code_block():
    target = finding("security-1", evidence="```\n# Heading outside\n```")
    [inline] = payload([target], {"src/app.py": frozenset({3})})["comments"]
    assert inline["body"].count("````") == 2


def test_a_huge_review_stays_under_githubs_limit_counting_what_it_left_out():
    findings = [
        finding(f"correctness-{n}", file="off.py", claim="<" * 2_000, evidence="e" * 4_000) for n in range(1, 31)
    ]
    body = payload(findings, problems=["p"] * 5)["body"]
    assert len(body) <= COMMENT_LIMIT
    hidden = int(re.search(r"… and (\d+) more findings, not shown", body)[1])
    assert body.count("#### `off.py:3`") + hidden == 30 and "- p" in body


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"commit_id": "abc123"}, "commit_id must be a full commit sha"),
        ({"marker_text": "<!-- x -->"}, "marker_text must be one lanebot marker"),
        ({"lenses": []}, "lenses must name at least one lens"),
        ({"lenses": ["style"]}, "unknown lens 'style'"),
        ({"dropped": -1}, "dropped counts findings"),
    ],
)
def test_review_payload_refuses_a_wrong_call(changes, message):
    with pytest.raises(ValueError, match=message):
        payload(**changes)
