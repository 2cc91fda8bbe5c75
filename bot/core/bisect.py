"""Which merge broke verify: a bisection of the integration branch's first-parent chain. Pure.

The integration branch is the run's base, then one `--no-ff` merge commit per lane in merge order
(bot.runner.integrate), then whatever the integrate session and its repairs committed. When verify
fails on the head, the culprit is the first commit of that chain on which it fails: the base
itself (no lane is to blame), a lane's merge, or nothing up to the last merge (what came after
it broke verify).

`Chain` names the commits; `next_probe` says which one verify should run on next, given the
results so far, and `first_failure` reads the answer once `next_probe` has nothing left to ask.
Both assume what a bisection assumes: once verify fails on a commit of the chain it fails on every
later one. Where that is not so (a flaky verify), the answer is still a commit on which verify
failed right after one on which it passed (or the base), never a guess.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from bot.core.names import parse_base_update_message, parse_merge_message

__all__ = ["Chain", "Merge", "Suspect", "Verdict", "first_failure", "max_probes", "next_probe"]


@dataclass(frozen=True)
class Merge:
    """One first-parent merge commit of the integration branch: its sha and its message's subject."""

    sha: str
    subject: str

    @property
    def unit(self) -> str | None:
        """The lane it merged, from lanebot's merge message; None for a merge that is not a lane's."""
        parsed = parse_merge_message(self.subject)
        return parsed[0] if parsed else None

    @property
    def base_update(self) -> str | None:
        """The base branch this merge brought in (bot.runner.base_update); None for any other merge."""
        return parse_base_update_message(self.subject)


class Suspect(enum.StrEnum):
    BASE = "base"  # verify fails on the run's base, before any lane
    MERGE = "merge"  # verify first fails on this merge commit
    AFTER_MERGES = "after_merges"  # verify passes on the last merge; a later commit broke it


@dataclass(frozen=True)
class Verdict:
    suspect: Suspect
    sha: str  # the first commit verify fails on
    merge: Merge | None = None  # with Suspect.MERGE
    passed_on: str | None = None  # the commit just before it, on which verify passed (not for BASE)


@dataclass(frozen=True)
class Chain:
    """The run's `base`, the first-parent `merges` after it (oldest first), and the `head` verify
    failed on, which is the last merge itself when nothing was committed after it."""

    base: str
    merges: tuple[Merge, ...]
    head: str

    @property
    def points(self) -> tuple[str, ...]:
        """The commits a culprit can be: the base, then each merge."""
        return (self.base, *(merge.sha for merge in self.merges))

    @property
    def candidates(self) -> tuple[str, ...]:
        """The commits verify may have to run on: the points, less the head (it is known to fail)."""
        points = self.points
        return points[:-1] if points[-1] == self.head else points

    def verdict(self, failing: int) -> Verdict:
        """The verdict for `failing`, an index of `candidates` or `len(candidates)` for the head."""
        points = self.points
        if not 0 <= failing <= len(self.candidates):
            raise ValueError(f"{failing} is not an index of the {len(self.candidates)} candidates or the head")
        if failing == 0:
            return Verdict(Suspect.BASE, self.base)
        if failing == len(points):
            return Verdict(Suspect.AFTER_MERGES, self.head, passed_on=points[-1])
        return Verdict(Suspect.MERGE, points[failing], merge=self.merges[failing - 1], passed_on=points[failing - 1])


def next_probe(count: int, results: Mapping[int, bool]) -> int | None:
    """The candidate (an index below `count`) verify should run on next, or None when the results
    decide. `results` maps the candidates verify ran on to whether it passed; the commit after the
    last candidate (index `count`, the head) is known to fail."""
    low, high = _bracket(count, results)
    return None if low >= high else (low + high) // 2


def first_failure(count: int, results: Mapping[int, bool]) -> int:
    """The index of the first failing commit (`count`: the head), once `next_probe` returns None."""
    low, high = _bracket(count, results)
    if low < high:
        raise ValueError(f"the results do not decide yet: verify has yet to run on candidate {(low + high) // 2}")
    return high


def max_probes(count: int) -> int:
    """The most runs of verify `next_probe` asks for among `count` candidates: ceil(log2(count + 1))."""
    return math.ceil(math.log2(count + 1)) if count > 0 else 0


def _bracket(count: int, results: Mapping[int, bool]) -> tuple[int, int]:
    """(low, high): the first failure known so far is `high`; every candidate below `low` is
    behind a pass, so the first failure at or below `high` that follows a pass lies in [low, high]."""
    if count < 0:
        raise ValueError(f"count must be at least 0, got {count}")
    unknown = sorted(index for index in results if not 0 <= index < count)
    if unknown:
        raise ValueError(f"results name candidates {unknown} outside 0..{count - 1}")
    high = min((index for index, passed in results.items() if not passed), default=count)
    passed_below = [index for index, passed in results.items() if passed and index < high]
    return (max(passed_below) + 1 if passed_below else 0), high
