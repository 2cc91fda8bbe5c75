"""Whether lanebot's pull request conflicts with its base, read from GitHub's answer. Pure.

GitHub computes a pull request's mergeability lazily, in a background job: GET /pulls/{n} answers
`mergeable: null` (and `mergeable_state: "unknown"`) until that job ran for the current base and
head, then `true` or `false` (`mergeable_state: "dirty"` when it conflicts). A push to the base
branch starts the job again. So "not known yet" is an answer of its own, to ask again shortly
after, and never read as either "clean" or "conflicting".
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["Mergeability", "mergeability", "moves_default_branch"]


class Mergeability(enum.StrEnum):
    CLEAN = "clean"  # merges without conflicts (it may still lag behind its base)
    CONFLICTING = "conflicting"  # GitHub could not merge head into base: someone must resolve
    UNKNOWN = "unknown"  # GitHub has not computed it yet (or the pull request is closed)


def mergeability(pull: Mapping[str, Any]) -> Mergeability:
    """What GitHub's pull request object says of merging it now."""
    if pull.get("state", "open") != "open":
        return Mergeability.UNKNOWN
    mergeable, state = pull.get("mergeable"), pull.get("mergeable_state")
    if mergeable is False or state == "dirty":
        return Mergeability.CONFLICTING
    if mergeable is True:
        return Mergeability.CLEAN
    return Mergeability.UNKNOWN


def moves_default_branch(push: Mapping[str, Any]) -> bool:
    """Whether a `push` webhook's payload moved its repository's default branch (the base of
    lanebot's pull requests) to a commit: not a deletion, not any other branch or tag."""
    default = (push.get("repository") or {}).get("default_branch")
    return bool(default) and push.get("ref") == f"refs/heads/{default}" and not push.get("deleted")
