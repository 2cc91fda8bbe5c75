"""The names lanebot gives things on GitHub and in git: its branches and its commits' messages. Pure.

The integration branch (the pull request's head) is `lanebot/<issue>`; lane branches are
`lanebot-lanes/<issue>/<unit>` (git cannot hold a branch `lanebot/<issue>` and branches under
`lanebot/<issue>/` at once). A lane's merge commit reads `Merge lane '<unit>' of #<issue>`: a
contract, since the per-lane diff view parses it. A lane's own commit reads `<unit>: <title>`, the
plan's title defused (bot.core.text.defuse), so merging the pull request closes no issue the plan
named and notifies no one. Check runs are named in bot.core.checks, comment markers in bot.core.text.
"""

from __future__ import annotations

import re

from bot.core.text import defuse, one_line

__all__ = [
    "INTEGRATION_PREFIX",
    "LANE_PREFIX",
    "integration_branch",
    "lane_branch",
    "lane_commit_message",
    "base_update_message",
    "merge_message",
    "parse_base_update_message",
    "parse_merge_message",
]


INTEGRATION_PREFIX = "lanebot"


LANE_PREFIX = "lanebot-lanes"


_MERGE_MESSAGE = re.compile(r"^Merge lane '(?P<unit>[a-z0-9][a-z0-9-]{0,39})' of #(?P<issue>\d+)$")
_BASE_UPDATE_MESSAGE = re.compile(r"^Merge (?P<base>\S+) into (?P<branch>\S+) \(the update from (?P=base)\)$")


def integration_branch(issue_number: int) -> str:
    """The branch every lane merges into, and the pull request's head."""
    return f"{INTEGRATION_PREFIX}/{issue_number}"


def lane_branch(issue_number: int, unit_id: str) -> str:
    """The branch one lane's attempts are pushed to."""
    return f"{LANE_PREFIX}/{issue_number}/{unit_id}"


def lane_commit_message(unit_id: str, title: str, issue_number: int, attempt: int) -> str:
    """The message of the commit lanebot makes of a lane attempt's work; the unit's title defused."""
    subject = defuse(one_line(title), context="plain")
    return f"{unit_id}: {subject}\n\nLane '{unit_id}' of #{issue_number}, attempt {attempt}, by lanebot.\n"


def merge_message(unit_id: str, issue_number: int) -> str:
    """The merge commit's message. A contract: the per-lane diff view parses it."""
    return f"Merge lane '{unit_id}' of #{issue_number}"


def parse_merge_message(message: str) -> tuple[str, int] | None:
    """(unit id, issue number) of a lane's merge commit message, or None."""
    match = _MERGE_MESSAGE.match(message.strip())
    return (match["unit"], int(match["issue"])) if match else None


def base_update_message(base: str, branch: str) -> str:
    """The subject of the merge that brings `branch` up to date with its base branch `base`. A
    contract: the culprit search names such a merge "the update from <base>"."""
    return f"Merge {base} into {branch} (the update from {base})"


def parse_base_update_message(message: str) -> str | None:
    """The base branch a base update's merge message names, or None for any other message."""
    match = _BASE_UPDATE_MESSAGE.match(message.strip())
    return match["base"] if match else None
