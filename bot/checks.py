"""Check runs: `lanebot / <unit>` on a lane's head commit, `lanebot / verify` on the PR head.

A check run is created `in_progress` when the work starts and completed with a conclusion and a
summary when it ends. The summaries (files changed, the tail of the check's output, where the
transcript is) are built here as pure text, cut to GitHub's 65,535 characters. Creating a check
run is a POST that the client does not repeat after a lost answer, so before creating one the
commit's check runs are looked up by name and `external_id` (`lanebot run=N unit=U`, which also
lets the `check_run.rerequested` handler find the lane again).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gidgethub.abc import GitHubAPI

from bot.gate import code_block, code_span, markdown_text, shorten
from bot.github.issues import split_repository

__all__ = [
    "SUMMARY_LIMIT",
    "VERIFY_CHECK",
    "CheckReport",
    "external_id",
    "find_check",
    "finish_check",
    "lane_check_name",
    "lane_report",
    "parse_external_id",
    "start_check",
    "verify_report",
]

SUMMARY_LIMIT = 65_535  # GitHub's cap on output.summary (and output.text)
TITLE_LIMIT = 1_000
VERIFY_CHECK = "lanebot / verify"
_LANE_PREFIX = "lanebot / "
_EXTERNAL_ID = re.compile(r"^lanebot run=(?P<run>\d+)(?: unit=(?P<unit>[a-z0-9][a-z0-9-]*))?$")
_PATHS_SHOWN = 200
_TAIL_CHARS = 20_000


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
class CheckReport:
    """How a check run ends."""

    conclusion: str  # success, failure, cancelled or neutral
    title: str
    summary: str

    def __post_init__(self) -> None:
        if self.conclusion not in ("success", "failure", "cancelled", "neutral"):
            raise ValueError(f"unknown check conclusion {self.conclusion!r}")
        object.__setattr__(self, "title", shorten(" ".join(self.title.split()) or self.conclusion, TITLE_LIMIT))
        object.__setattr__(self, "summary", _fit(self.summary))


def lane_report(
    *,
    unit_id: str,
    attempt: int,
    passed: bool,
    reason: str | None,
    changed_paths: Sequence[str],
    offending_paths: Sequence[str] = (),
    check_output: str | None,
    transcript: str,
) -> CheckReport:
    """The summary of one lane attempt. Pure."""
    if passed:
        conclusion, title = "success", f"lane {unit_id} passed its check (attempt {attempt})"
    else:
        conclusion, title = "failure", f"attempt {attempt} failed: {reason or 'see the summary'}"
    parts = [f"**Attempt {attempt}** of lane {code_span(unit_id)}."]
    if reason and not passed:
        parts.append(f"**Why it failed:** {markdown_text(shorten(reason, 2_000))}")
    if offending_paths:
        parts.append("**Changed outside the unit's `files`:**\n" + _path_list(offending_paths))
    parts.append(f"**Files changed ({len(changed_paths)}):**\n" + (_path_list(changed_paths) or "none"))
    if check_output is not None:
        parts.append("**The end of the check's output:**\n\n" + code_block(_tail(check_output)))
    parts.append(f"**Transcript:** {code_span(transcript)} on the runner host.")
    return CheckReport(conclusion, title, "\n\n".join(parts))


def verify_report(*, passed: bool, command: str, output: str, reason: str | None, transcript: str | None) -> CheckReport:
    """The summary of one run of the repository's verify command. Pure."""
    title = "verify passed" if passed else f"verify failed: {reason or 'see the summary'}"
    parts = [f"**Command:** {code_span(command)}"]
    parts.append("**The end of its output:**\n\n" + code_block(_tail(output)) if output.strip() else "It printed nothing.")
    if transcript:
        parts.append(f"**Last session's transcript:** {code_span(transcript)} on the runner host.")
    return CheckReport("success" if passed else "failure", title, "\n\n".join(parts))


def _path_list(paths: Sequence[str]) -> str:
    shown = [f"- {code_span(path)}" for path in paths[:_PATHS_SHOWN]]
    if len(paths) > _PATHS_SHOWN:
        shown.append(f"- … and {len(paths) - _PATHS_SHOWN} more")
    return "\n".join(shown)


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL_CHARS else "…" + text[-_TAIL_CHARS:]


def _fit(summary: str) -> str:
    if len(summary) <= SUMMARY_LIMIT:
        return summary
    note = "\n\n… (cut to GitHub's 65,535-character limit)"
    return summary[: SUMMARY_LIMIT - len(note)] + note


# --------------------------------------------------------------------------- I/O


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def find_check(
    client: GitHubAPI, repository: str, head_sha: str, name: str, external: str
) -> dict[str, Any] | None:
    """lanebot's check run called `name` with `external` as its external_id on `head_sha`, if any."""
    owner, repo = split_repository(repository)
    url = "/repos/{owner}/{repo}/commits/{ref}/check-runs{?check_name,per_page}"
    url_vars = {"owner": owner, "repo": repo, "ref": head_sha, "check_name": name, "per_page": 100}
    async for check in client.getiter(url, url_vars, iterable_key="check_runs"):
        if check.get("name") == name and check.get("external_id") == external:
            return check
    return None


async def start_check(
    client: GitHubAPI, repository: str, *, name: str, head_sha: str, external: str, title: str, summary: str
) -> int:
    """An `in_progress` check run on `head_sha`: the one already there, else a new one. Its id."""
    existing = await find_check(client, repository, head_sha, name, external)
    if existing is not None and existing.get("status") != "completed":
        return int(existing["id"])
    owner, repo = split_repository(repository)
    created = await client.post(
        "/repos/{owner}/{repo}/check-runs", {"owner": owner, "repo": repo},
        data={
            "name": name, "head_sha": head_sha, "status": "in_progress", "external_id": external,
            "started_at": _now(), "output": {"title": shorten(title, TITLE_LIMIT), "summary": _fit(summary)},
        },
    )
    return int(created["id"])


async def finish_check(client: GitHubAPI, repository: str, check_run_id: int, report: CheckReport) -> None:
    """Complete a check run with `report`."""
    owner, repo = split_repository(repository)
    await client.patch(
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        {"owner": owner, "repo": repo, "check_run_id": check_run_id},
        data={
            "status": "completed", "conclusion": report.conclusion, "completed_at": _now(),
            "output": {"title": report.title, "summary": report.summary},
        },
    )
