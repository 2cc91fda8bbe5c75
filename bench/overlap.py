"""The overlap check at the gate against a plain loop of Python's `re`, in the same run.

Measures `bot.core.graph.validate` of a plan of 6 units against --paths (100,000) tracked paths
shaped like a real repository's (`src/pkg12/module_345.py`, tests, docs, data), which is what
the gate pays for a plan, the overlap check included. Beside it, the baseline: a loop of
Python's `re.search` over the same paths (as `str`) with the same expressions as the tree
translates them, each expression giving the positions it matches, as the overlap check needs.
The ratio of the two is what to compare across trees and machines.

The script imports `bot` from the tree PYTHONPATH names first (else the installed one), so it
measures the tree before RE2 just as well:

    .venv/bin/python bench/overlap.py                                # the working tree
    git clone -q . /tmp/overlap_before                               # an older commit
    PYTHONPATH=/tmp/overlap_before .venv/bin/python bench/overlap.py

`--plan hostile` validates instead a plan whose expressions a backtracking matcher cannot
bound (`(.*)*`, `([0-9]+)+`, `.*.*.*.*`): the tree before RE2 refuses it without matching,
which the report says. `--plan dfa` is the worst case found for RE2's Set: expressions whose
DFA has millions of states (`[a-f].{20}$`, 2**21 of them) against paths of random hex
(`vendor/3fa2.../9c01..._77d0....json`, seeded), where every state is new; its units overlap,
which changes nothing to the timing. Prints Markdown: the median and range of --repeat rounds,
each round running the baseline and then the check.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable

import bot

try:  # the layout since issue 11
    from bot.core import ere
    from bot.core.graph import match_paths, validate
except ImportError:  # a tree from before it, e.g. the one the RE2 figures compare against
    from bot import ere  # type: ignore[no-redef]
    from bot.graph import match_paths, validate  # type: ignore[no-redef]

REALISTIC = {
    "api": r"^src/pkg1[0-9]/",
    "core": r"^src/pkg(2[0-9]|3[0-4])/module_[0-9]+\.py$",
    "tests": r"^tests/pkg1[0-9]/test_module_[0-9]{3}\.py$",
    "docs": r"^docs/.*\.md$",
    "fixtures": r"^data/pkg[0-9]+/fixture_(1|2)[0-9]*\.json$",
    "meta": r"^(README\.md|CHANGELOG\.md|pyproject\.toml)$",
}
HOSTILE = {
    "api": r"^src/pkg1[0-9]/([^/]*/)*module_([0-9]+)+\.py$",
    "core": r"^src/pkg2[0-9]/(.*)*\.py$",
    "tests": r"^tests/(.*/)*test_module_(1|1[0-9])+.*$",
    "docs": r"^docs/.*.*.*.*\.md$",
    "fixtures": r"^data/(([a-z]+[0-9]*)+/)+fixture_[0-9]+\.json$",
    "meta": r"^(README|CHANGELOG)(\.[a-z]+)+$",
}
DFA = {f"from-{first}": f"[{first}-f].{{20}}$" for first in "abcdef"}
PLANS = {"realistic": REALISTIC, "hostile": HOSTILE, "dfa": DFA}


def tracked_paths(count: int) -> list[str]:
    """`count` paths as `git ls-files` lists them: sorted, 100 packages of modules, tests, docs and data."""
    kinds = [
        ("src/pkg{p:02d}/module_{m:03d}.py", 60),
        ("tests/pkg{p:02d}/test_module_{m:03d}.py", 20),
        ("docs/pkg{p:02d}/page_{m:03d}.md", 10),
        ("data/pkg{p:02d}/fixture_{m:03d}.json", 10),
    ]
    per_package = -(-count // 100)
    paths = [
        shape.format(p=package, m=index)
        for package in range(100)
        for shape, share in kinds
        for index in range(per_package * share // 100)
    ]
    return sorted(["README.md", "pyproject.toml", *paths[: count - 2]])


def hex_paths(count: int) -> list[str]:
    """`count` paths of random hex, as a repository of vendored blobs has them."""
    draw = random.Random(2).randrange
    return sorted(f"vendor/{draw(16**8):08x}/{draw(16**12):012x}_{draw(16**8):08x}.json" for _ in range(count))


def plan(files: dict[str, str]) -> list[dict]:
    return [
        {"id": unit_id, "title": unit_id, "needs": [], "files": expression, "check": "true", "brief": "b"}
        for unit_id, expression in files.items()
    ]


def python_patterns(expressions: list[str]) -> list[re.Pattern[str]]:
    """The tree's translation of each expression, compiled with Python's `re` for `str` paths."""
    compiled = [ere.compile_ere(expression) for expression in expressions]
    if isinstance(compiled[0], re.Pattern):  # the tree before RE2 translates into Python patterns
        return [re.compile(pattern.pattern, pattern.flags) for pattern in compiled]
    # RE2's \z is Python's \Z; \xHH is the same character for the ASCII paths measured here.
    return [re.compile(c.source.decode("latin-1").replace("\\z", "\\Z"), re.DOTALL) for c in compiled]


def baseline(patterns: list[re.Pattern[str]], paths: list[str]) -> list[list[int]]:
    return [[position for position, path in enumerate(paths) if pattern.search(path)] for pattern in patterns]


def timed(work: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = work()
    return time.perf_counter() - start, result


def spread(values: list[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--plan", choices=tuple(PLANS), default="realistic")
    options = parser.parse_args()

    files = PLANS[options.plan]
    raw = plan(files)
    paths = (hex_paths if options.plan == "dfa" else tracked_paths)(options.paths)
    problems = validate(raw, tracked_paths=paths)
    refusals = [problem for problem in problems if "overlaps" not in problem.message]
    if refusals:
        print(f"The tree refuses the {options.plan} plan, so its overlap check matches nothing:")
        print("".join(f"\n- {problem}" for problem in refusals))
        return 0 if options.plan == "hostile" else 1
    patterns = python_patterns(list(files.values()))
    expected = baseline(patterns, paths)
    assert match_paths(list(files.values()), paths) == expected, "the tree's matching disagrees with Python's re"

    checks, baselines = [], []
    for _ in range(options.repeat + 1):  # the first round warms caches and is not reported
        seconds, found = timed(lambda: baseline(patterns, paths))
        assert found == expected
        baselines.append(seconds)
        seconds, again = timed(lambda: validate(raw, tracked_paths=paths))
        assert again == problems
        checks.append(seconds)
    checks, baselines = checks[1:], baselines[1:]
    ratios = [check / base for check, base in zip(checks, baselines, strict=True)]

    print(f"# The overlap check: {len(raw)} units, {len(paths):,} tracked paths ({options.plan} plan)\n")
    print(f"- tree: {os.path.dirname(os.path.dirname(os.path.abspath(bot.__file__)))}")
    print(
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC;"
        f" load average {' '.join(f'{load:.2f}' for load in os.getloadavg())}; {os.cpu_count()} cores"
    )
    print(f"- Python {platform.python_version()}, {platform.machine()}, Linux {platform.release()}")
    print(f"- paths matched per expression: {', '.join(str(len(found)) for found in expected)}\n")
    print(f"| measurement ({options.repeat} rounds) | seconds, median (range) | ratio to the baseline |")
    print("|---|---:|---:|")
    print(f"| baseline: `re.search` loop, {len(patterns)} patterns | {spread(baselines)} | 1 |")
    print(f"| `validate`, overlap check included | {spread(checks)} | {spread(ratios, digits=2)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
