"""Properties of the unit graph over generated plans: validation never crashes, and what a
valid random DAG implies (rounds respect every edge; the critical path is the heaviest chain)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from bot.core.graph import (
    OPTIONAL_KEYS,
    REQUIRED_KEYS,
    Graph,
    InvalidPlan,
    build_graph,
    compile_ere,
    match_paths,
    validate,
)

MAX_UNITS = 8
modest = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
keys = st.sampled_from(REQUIRED_KEYS + OPTIONAL_KEYS) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=8),
    max_leaves=12,
)
# Unit-shaped objects reach the checks past "is it an object": plausible values mixed with junk.
plausible_values = {
    "id": st.sampled_from(["a", "b", "c", "Bad", ""]),
    "title": st.just("t"),
    "needs": st.lists(st.sampled_from(["a", "b", "c", "zz"]), max_size=3),
    "files": st.sampled_from(["^a/", "b", ".*", "(?:x)", "[z-a]", r"\d"]) | st.text(max_size=6),
    "check": st.just("true"),
    "brief": st.just("b"),
    "estimate": st.integers(-2, 30),
}
unit_like = st.fixed_dictionaries({}, optional={key: value | json_values for key, value in plausible_values.items()})
plans = st.lists(unit_like | json_values, max_size=7) | json_values
tracked = st.lists(st.sampled_from(["a/x", "b", "bb/c", "x.py"]) | st.text(max_size=5), max_size=6)
# Nearly valid plans: every required key and plausible values, so that a good share passes.
nearly_valid = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(["a", "b", "c", "d", "Bad"]),
            "title": st.just("t"),
            "needs": st.lists(st.sampled_from(["a", "b", "c", "d", "zz"]), max_size=2),
            "files": st.sampled_from(["^a/", "^b/", "c$", "(?:x)"]),
            "check": st.just("true"),
            "brief": st.just("b"),
        },
        optional={"estimate": st.integers(-1, 30)},
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda unit: unit["id"],
)


@modest
@given(raw=plans, paths=tracked)
def test_validate_never_raises_and_always_names_where(raw, paths):
    found = validate(raw, tracked_paths=paths)
    assert all(problem.unit is None or problem.unit for problem in found)
    assert all(str(problem) for problem in found)


@modest
@given(raw=nearly_valid)
def test_build_graph_succeeds_exactly_when_validate_finds_nothing(raw):
    found = validate(raw, max_units=MAX_UNITS)
    try:
        graph = build_graph(raw, max_units=MAX_UNITS)
    except InvalidPlan as error:
        assert found and error.problems == tuple(found)
    else:
        assert not found and graph.ids == tuple(unit["id"] for unit in raw)


@modest
@given(expression=st.text(alphabet="ab.^$*+?|()[]{}-:,0123\\=", max_size=12))
def test_compile_ere_only_ever_refuses_with_a_value_error(expression):
    try:
        pattern = compile_ere(expression)
    except ValueError as error:
        assert str(error)
    else:
        pattern.search("ab-[x]")


@dataclass(frozen=True)
class RandomDag:
    graph: Graph
    raw: list[dict]
    needs: dict[str, tuple[str, ...]]
    estimates: dict[str, int]


@st.composite
def random_dags(draw: st.DrawFn) -> RandomDag:
    """1-8 units that need only units generated before them (so acyclic), declared shuffled."""
    size = draw(st.integers(1, MAX_UNITS))
    ids = [f"u{index}" for index in range(size)]
    needs = {
        unit_id: tuple(draw(st.lists(st.sampled_from(ids[:index]), max_size=3, unique=True))) if index else ()
        for index, unit_id in enumerate(ids)
    }
    estimates = {unit_id: draw(st.integers(1, 60)) for unit_id in ids}
    declared = draw(st.permutations(ids))
    raw = [_raw_unit(unit_id, needs[unit_id], estimates[unit_id]) for unit_id in declared]
    return RandomDag(build_graph(raw, max_units=MAX_UNITS), raw, needs, estimates)


def _raw_unit(unit_id: str, needs: tuple[str, ...], estimate: int) -> dict:
    return {
        "id": unit_id,
        "title": f"Do {unit_id}",
        "needs": list(needs),
        "files": f"^src/{unit_id}\\.py$",
        "check": f"test -f src/{unit_id}.py",
        "brief": f"Write {unit_id}.",
        "estimate": estimate,
    }


def _chains(dag: RandomDag) -> list[tuple[str, ...]]:
    """Every chain of needs, by exhaustive search (the oracle for the critical path)."""
    found = []

    def extend(chain: tuple[str, ...]) -> None:
        found.append(chain)
        for need in dag.needs[chain[0]]:
            extend((need, *chain))

    for unit_id in dag.needs:
        extend((unit_id,))
    return found


@modest
@given(dag=random_dags())
def test_rounds_partition_the_units_in_declared_order(dag):
    rounds = dag.graph.rounds()
    flat = [unit_id for round_ids in rounds for unit_id in round_ids]
    assert sorted(flat) == sorted(dag.needs)
    declared = list(dag.graph.ids)
    assert all(list(round_ids) == sorted(round_ids, key=declared.index) for round_ids in rounds)
    assert all(round_ids for round_ids in rounds)


@modest
@given(dag=random_dags())
def test_every_need_sits_in_an_earlier_round(dag):
    for unit_id, needs in dag.needs.items():
        assert all(dag.graph.round_of(need) < dag.graph.round_of(unit_id) for need in needs)
        # and round k is reached through a need in round k-1
        if needs:
            assert max(dag.graph.round_of(need) for need in needs) == dag.graph.round_of(unit_id) - 1


@modest
@given(dag=random_dags())
def test_the_critical_path_is_a_real_chain_and_the_heaviest(dag):
    critical = dag.graph.critical_path()
    links = zip(critical.units, critical.units[1:])
    assert all(earlier in dag.needs[later] for earlier, later in links)
    assert critical.minutes == sum(dag.estimates[unit_id] for unit_id in critical.units)
    assert critical.minutes >= max(dag.estimates.values())
    assert critical.minutes == max(sum(dag.estimates[unit_id] for unit_id in chain) for chain in _chains(dag))
    assert dag.graph.sequential_minutes() == sum(dag.estimates.values())


@modest
@given(dag=random_dags(), data=st.data())
def test_a_back_edge_is_reported_as_a_cycle_along_real_needs(dag, data):
    edges = [(unit_id, need) for unit_id, needs in dag.needs.items() for need in needs]
    if not edges:
        return
    dependent, dependency = data.draw(st.sampled_from(edges))
    raw = [unit | {"needs": [*unit["needs"], dependent]} if unit["id"] == dependency else unit for unit in dag.raw]
    found = validate(raw, max_units=MAX_UNITS)
    assert len(found) == 1
    prefix = "Dependency cycle detected: "
    assert found[0].message.startswith(prefix)
    cycle = found[0].message.removeprefix(prefix).split(" -> ")
    assert cycle[0] == cycle[-1] == found[0].unit
    needs = {unit["id"]: unit["needs"] for unit in raw}
    assert all(following in needs[current] for current, following in zip(cycle, cycle[1:]))
    declared = [unit["id"] for unit in raw]
    assert declared.index(cycle[0]) == min(declared.index(unit_id) for unit_id in cycle)
    try:
        build_graph(raw, max_units=MAX_UNITS)
    except InvalidPlan as error:
        assert error.problems == tuple(found)
    else:
        raise AssertionError("a plan with a cycle was built")


# --------------------------------------------------------------------------- what files matches

# Expressions built from the grammar (groups, alternatives, every kind of repetition, nested),
# so that both accepted and refused ones come up often; and raw text, for the odd corners.
ere_atoms = st.sampled_from(["a", "b", ".", "[ab]", "[^a]", "[^/]", "\\.", "-", "/", "^", "$", "()", "[[:alpha:]]"])
ere_grammar = st.recursive(
    ere_atoms,
    lambda inner: (
        st.tuples(inner, inner).map("".join)
        | st.tuples(inner, inner).map(lambda pair: f"({pair[0]}|{pair[1]})")
        | st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,}", "{2,40}"])).map(
            lambda pair: f"({pair[0]}){pair[1]}"
        )
    ),
    max_leaves=8,
)
ere_texts = ere_grammar | st.text(alphabet="ab.^$*+?|()[]{}-:,0123\\=", max_size=12)
# "é" is two bytes: `.` and brackets match one of them, as `LC_ALL=C grep -E` does.
path_texts = st.text(alphabet="ab-[]{}().:=0123x/é", max_size=10)


def accepted(expression: str) -> bool:
    try:
        compile_ere(expression)
    except ValueError:
        return False
    return True


@modest
@given(expressions=st.lists(ere_texts, min_size=1, max_size=6), paths=st.lists(path_texts, max_size=8))
def test_the_set_of_all_expressions_matches_what_each_matches_alone(expressions, paths):
    valid = [expression for expression in expressions if accepted(expression)]
    assume(valid)
    alone = [[position for position, path in enumerate(paths) if compile_ere(e).search(path)] for e in valid]
    assert match_paths(valid, paths) == alone


@pytest.fixture(scope="module")
def gnu_grep() -> str:
    grep = shutil.which("grep")
    if grep is None or "GNU" not in subprocess.run([grep, "--version"], capture_output=True, text=True).stdout:
        pytest.skip("GNU grep is not installed")
    return grep


GREP_TIMEOUT_S = 5.0


def grep_e_matches(grep: str, expression: str, paths: list[str]) -> list[int] | None:
    """The 0-based positions of the paths `grep -E` matches, or None when grep refuses the expression.

    GNU grep backtracks: some expressions (`((/|\\.))*((\\.()|(^)*)){2,40}`, found here) take it
    minutes. Then it is no oracle, and the example is rejected rather than waited for."""
    try:
        found = subprocess.run(
            [grep, "-E", "-n", "-e", expression],
            input="".join(f"{path}\n" for path in paths),
            capture_output=True,
            text=True,
            env={"LC_ALL": "C"},
            timeout=GREP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        reject()
    if found.returncode > 1:
        return None
    return [int(line.split(":", 1)[0]) - 1 for line in found.stdout.splitlines()]


@settings(modest, max_examples=80)
@given(expression=ere_texts, paths=st.lists(path_texts, min_size=1, max_size=8))
def test_accepted_files_match_what_grep_e_matches(gnu_grep, expression, paths):
    assume(accepted(expression))
    (matched,) = match_paths([expression], paths)
    assert matched == grep_e_matches(gnu_grep, expression, paths)
