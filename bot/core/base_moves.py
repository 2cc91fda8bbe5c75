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

__all__ = ["Mergeability", "mergeability"]


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
