"""Check runs: `lanebot / <unit>` on a lane's head commit, `lanebot / verify` on the PR head.

A check run is created `in_progress` when the work starts and completed with a conclusion and a
summary when it ends. The summaries (files changed, the tail of the check's output, where the
transcript is) are built here as pure text, cut to GitHub's 65,535 characters. Creating a check
run is a POST that the client does not repeat after a lost answer, so before creating one the
commit's check runs are looked up by name and `external_id` (`lanebot run=N unit=U`, which also
lets the `check_run` handlers find the lane again).

A lane's last failed attempt (the one that blocks the run) offers a `Retry lane` button, and the
last failed verify a `Re-run verify` button (GitHub's check-run `actions`: at most three, label
at most 20 characters, description 40, identifier 20). GitHub never lets a completed check run
go back to in progress, so a retry reports on a new check run; `acknowledge_rerun` edits the old
one (what GitHub does allow: its output and actions) to say who asked and to take its button away.
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
    "RERUN_VERIFY",
    "RETRY_LANE",
    "SUMMARY_LIMIT",
    "VERIFY_CHECK",
    "CheckAction",
    "CheckReport",
    "acknowledge_rerun",
    "external_id",
    "find_check",
    "finish_check",
    "lane_check_name",
    "lane_report",
    "parse_external_id",
    "rerun_note",
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
    offer_retry: bool = False,
) -> CheckReport:
    """The summary of one lane attempt. Pure. A failed attempt after which no retry is left
    (`offer_retry`) offers the `Retry lane` button."""
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
    actions = (RETRY_LANE,) if offer_retry and not passed else ()
    if actions:
        parts.append("No retries are left, so the run is blocked: **Retry lane** (or `/retry "
                     f"{unit_id}` on the issue) runs it again, shown this failure.")
    return CheckReport(conclusion, title, "\n\n".join(parts), actions)


def verify_report(
    *, passed: bool, command: str, output: str, reason: str | None, transcript: str | None, offer_rerun: bool = False,
) -> CheckReport:
    """The summary of one run of the repository's verify command. Pure. A failure after which no
    repair is left (`offer_rerun`) offers the `Re-run verify` button."""
    title = "verify passed" if passed else f"verify failed: {reason or 'see the summary'}"
    parts = [f"**Command:** {code_span(command)}"]
    parts.append("**The end of its output:**\n\n" + code_block(_tail(output)) if output.strip() else "It printed nothing.")
    if transcript:
        parts.append(f"**Last session's transcript:** {code_span(transcript)} on the runner host.")
    actions = (RERUN_VERIFY,) if offer_rerun and not passed else ()
    if actions:
        parts.append("No repair is left, so the run is blocked: **Re-run verify** (or `/retry` on the issue) "
                     "runs the integrate step and verify again.")
    return CheckReport("success" if passed else "failure", title, "\n\n".join(parts), actions)


def rerun_note(*, requested_by: str, what: str, check_name: str, summary: str | None) -> tuple[str, str]:
    """(title, summary) of a completed check run someone asked to run again. Pure: the old summary
    stays below a line saying who asked and where the result will be."""
    title = shorten(f"{what} requested by @{requested_by}", TITLE_LIMIT)
    head = (f"**@{markdown_text(requested_by)} asked for {what}.** GitHub does not reopen a completed check "
            f"run, so the result is reported on a new {code_span(check_name)} check run.")
    return title, _fit(f"{head}\n\n---\n\n{summary}" if summary else head)


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
    """Complete a check run with `report` (its buttons replace any the run had)."""
    owner, repo = split_repository(repository)
    await client.patch(
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        {"owner": owner, "repo": repo, "check_run_id": check_run_id},
        data={
            "status": "completed", "conclusion": report.conclusion, "completed_at": _now(),
            "output": {"title": report.title, "summary": report.summary},
            "actions": [action.to_api() for action in report.actions],
        },
    )


async def acknowledge_rerun(
    client: GitHubAPI, repository: str, check_run: dict[str, Any], *, requested_by: str, what: str
) -> None:
    """Say on a completed check run (as a webhook payload shows it) that `requested_by` asked for
    `what`, and take its buttons away so nobody asks twice. Its conclusion stays: GitHub keeps it."""
    owner, repo = split_repository(repository)
    output = check_run.get("output") or {}
    title, summary = rerun_note(requested_by=requested_by, what=what, check_name=str(check_run.get("name")),
                                summary=output.get("summary"))
    await client.patch(
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        {"owner": owner, "repo": repo, "check_run_id": int(check_run["id"])},
        data={"output": {"title": title, "summary": summary}, "actions": []},
    )
