"""Check runs as data: their names, their `external_id`, the report a run ends with, and its buttons.

`lanebot / <unit>` reports a lane on its head commit, `lanebot / verify` the repository's verify on
the PR head. The `external_id` (`lanebot run=N unit=U`) lets the `check_run` handlers find the lane
again, and lets lanebot find a check run it created before a lost answer. GitHub's limits: a summary
of 65,535 characters, at most three `actions`, a label of at most 20 characters, a description of
40, an identifier of 20. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.core.text import shorten

SUMMARY_LIMIT = 65_535  # GitHub's cap on output.summary (and output.text)
TITLE_LIMIT = 1_000
VERIFY_CHECK = "lanebot / verify"
_LANE_PREFIX = "lanebot / "
_EXTERNAL_ID = re.compile(r"^lanebot run=(?P<run>\d+)(?: unit=(?P<unit>[a-z0-9][a-z0-9-]*))?$")
MAX_ACTIONS = 3  # GitHub's limits on a check run's `actions`
ACTION_LIMITS = {"label": 20, "description": 40, "identifier": 20}


def lane_check_name(unit_id: str) -> str:
    return f"{_LANE_PREFIX}{unit_id}"


def external_id(run_id: int, unit_id: str | None = None) -> str:
    """The check run's `external_id`: which run (and lane) it reports on."""
    return f"lanebot run={run_id}" + (f" unit={unit_id}" if unit_id else "")


def parse_external_id(text: str | None) -> tuple[int, str | None] | None:
    """(run id, unit id or None) from an `external_id` lanebot wrote; None for anything else."""
    match = _EXTERNAL_ID.match(text or "")
    if match is None:
        return None
    return int(match["run"]), match["unit"]


@dataclass(frozen=True)
class CheckAction:
    """A button on a check run; clicking it sends `check_run.requested_action` with `identifier`."""

    label: str
    description: str
    identifier: str

    def __post_init__(self) -> None:
        for name, limit in ACTION_LIMITS.items():
            value = getattr(self, name)
            if not value or len(value) > limit:
                raise ValueError(f"a check-run action's {name} must be 1 to {limit} characters, got {value!r}")

    def to_api(self) -> dict[str, str]:
        return {"label": self.label, "description": self.description, "identifier": self.identifier}


RETRY_LANE = CheckAction("Retry lane", "Run this lane again, shown its failure", "retry-lane")


RERUN_VERIFY = CheckAction("Re-run verify", "Integrate and run verify again", "rerun-verify")


@dataclass(frozen=True)
class CheckReport:
    """How a check run ends, and the buttons it offers then (none unless a person can act)."""

    conclusion: str  # success, failure, cancelled or neutral
    title: str
    summary: str
    actions: tuple[CheckAction, ...] = ()

    def __post_init__(self) -> None:
        if self.conclusion not in ("success", "failure", "cancelled", "neutral"):
            raise ValueError(f"unknown check conclusion {self.conclusion!r}")
        if len(self.actions) > MAX_ACTIONS:
            raise ValueError(f"GitHub allows at most {MAX_ACTIONS} actions on a check run, got {len(self.actions)}")
        object.__setattr__(self, "title", shorten(" ".join(self.title.split()) or self.conclusion, TITLE_LIMIT))
        object.__setattr__(self, "summary", fit_summary(self.summary))


def fit_summary(summary: str) -> str:
    if len(summary) <= SUMMARY_LIMIT:
        return summary
    note = "\n\n… (cut to GitHub's 65,535-character limit)"
    return summary[: SUMMARY_LIMIT - len(note)] + note
