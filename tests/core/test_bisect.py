"""Finding the merge that broke verify (bot/core/bisect.py): which commit to try next, when the
results decide, and which lane that names; checked against a linear scan."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.core.bisect import Chain, Merge, Suspect, first_failure, max_probes, next_probe


def bisect(count: int, passes: Callable[[int], bool]) -> tuple[int, list[int]]:
    """Drive next_probe with `passes` as verify: the first failure and the candidates tried."""
    results: dict[int, bool] = {}
    tried = []
    while (probe := next_probe(count, results)) is not None:
        assert probe not in results, "a candidate is never tried twice"
        tried.append(probe)
        results[probe] = passes(probe)
    return first_failure(count, results), tried


def linear_scan(count: int, passes: Callable[[int], bool]) -> int:
    return next((index for index in range(count) if not passes(index)), count)


# --------------------------------------------------------------------------- the search


def test_with_no_candidate_the_head_is_the_first_failure_and_nothing_runs():
    assert bisect(0, lambda _: pytest.fail("nothing to run")) == (0, [])


def test_a_base_that_fails_is_found_in_as_few_runs_as_any_other_answer():
    failing, tried = bisect(7, lambda _: False)
    assert failing == 0 and len(tried) == 3


def test_every_candidate_passing_blames_the_head():
    failing, tried = bisect(7, lambda _: True)
    assert failing == 7 and len(tried) == 3


def test_results_that_do_not_decide_yet_refuse_to_name_a_failure():
    with pytest.raises(ValueError, match="has yet to run on candidate 2"):
        first_failure(4, {0: True})


def test_results_outside_the_candidates_are_refused():
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        next_probe(3, {3: False})


@given(count=st.integers(min_value=0, max_value=200), data=st.data())
def test_on_a_monotone_verify_bisecting_finds_what_a_linear_scan_finds(count, data):
    breaks_at = data.draw(st.integers(min_value=0, max_value=count))
    failing, tried = bisect(count, lambda index: index < breaks_at)
    assert failing == linear_scan(count, lambda index: index < breaks_at) == breaks_at
    assert len(tried) <= max_probes(count) == math.ceil(math.log2(count + 1))


@given(outcomes=st.lists(st.booleans(), max_size=64))
def test_on_a_flaky_verify_the_answer_still_fails_right_after_a_pass_or_the_base(outcomes):
    count = len(outcomes)
    failing, tried = bisect(count, lambda index: outcomes[index])
    assert len(tried) <= max_probes(count)
    assert failing == count or (failing in tried and not outcomes[failing])
    assert failing == 0 or (failing - 1 in tried and outcomes[failing - 1])


# --------------------------------------------------------------------------- what it names


BASE = "b" * 40
A, B, C, INTEGRATE = ("1" * 40, "2" * 40, "3" * 40, "4" * 40)
MERGES = (
    Merge(A, "Merge lane 'a' of #7"),
    Merge(B, "Merge lane 'b' of #7"),
    Merge(C, "Merge lane 'c' of #7"),
)


def test_with_an_integrate_commit_on_top_every_merge_is_a_candidate_and_the_head_is_blamed_last():
    chain = Chain(BASE, MERGES, INTEGRATE)
    assert chain.candidates == (BASE, A, B, C)
    after = chain.verdict(4)
    assert (after.suspect, after.sha, after.passed_on) == (Suspect.AFTER_MERGES, INTEGRATE, C)


def test_when_the_last_merge_is_the_head_it_is_not_run_again_and_can_be_the_culprit():
    chain = Chain(BASE, MERGES, C)
    assert chain.candidates == (BASE, A, B)
    verdict = chain.verdict(3)
    assert (verdict.suspect, verdict.merge, verdict.passed_on) == (Suspect.MERGE, MERGES[2], B)


def test_a_failing_merge_names_its_lane_and_the_commit_that_passed_before_it():
    verdict = Chain(BASE, MERGES, INTEGRATE).verdict(2)
    assert verdict.suspect is Suspect.MERGE and verdict.sha == B
    assert verdict.merge is not None and verdict.merge.unit == "b"
    assert verdict.passed_on == A


def test_a_failing_base_names_no_lane():
    verdict = Chain(BASE, MERGES, INTEGRATE).verdict(0)
    assert (verdict.suspect, verdict.sha, verdict.merge) == (Suspect.BASE, BASE, None)


def test_a_merge_that_is_not_a_lanes_names_no_unit():
    assert Merge(A, "Merge branch 'main' into lanebot/7").unit is None


def test_an_index_past_the_head_is_refused():
    with pytest.raises(ValueError, match="not an index"):
        Chain(BASE, MERGES, C).verdict(4)


def test_a_chain_bisected_end_to_end_blames_the_merge_that_broke_it():
    chain = Chain(BASE, MERGES, INTEGRATE)
    broken = {B, C}  # verify fails once b is in
    failing, tried = bisect(len(chain.candidates), lambda index: chain.candidates[index] not in broken)
    verdict = chain.verdict(failing)
    assert verdict.merge == MERGES[1] and len(tried) <= max_probes(len(chain.candidates))
