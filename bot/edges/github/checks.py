"""Check runs on GitHub: find lanebot's, start one, finish one, report one, edit one someone asked
to run again.

Creating a check run is a POST that the client does not repeat after a lost answer. lanebot keeps
the ids of its check runs in its database, so it looks a commit's check runs up (by name and
`external_id`, bot.core.checks) only where one may exist that the database does not know of: when
an earlier life of the same step may have made it (`look_first`, the caller knows: a lane's
attempt after the first, a step run again after a restart) and after a create answered 5xx.
GitHub never lets a completed check run go back to in progress; `acknowledge_rerun` edits the old
one (what GitHub does allow: its output and actions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gidgethub import GitHubBroken
from gidgethub.abc import GitHubAPI

from bot.core.checks import TITLE_LIMIT, CheckReport, fit_summary
from bot.core.text import shorten
from bot.edges.github.issues import split_repository

log = logging.getLogger(__name__)
# How often a check run is asked for when GitHub answers 5xx and none is there afterwards.
CREATE_ATTEMPTS = 3

__all__ = [
    "StartedCheck",
    "acknowledge_rerun",
    "begin_check",
    "find_check",
    "finish_check",
    "report_check",
    "run_annotations",
    "start_check",
    "suite_check_runs",
]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def find_check(
    client: GitHubAPI, repository: str, head_sha: str, name: str, external: str
) -> dict[str, Any] | None:
    """lanebot's check run called `name` with `external` as its external_id on `head_sha`, if any."""
    owner, repo = split_repository(repository)
    url = "/repos/{owner}/{repo}/commits/{ref}/check-runs{?check_name,per_page}"
    url_vars: dict[str, str | int] = {
        "owner": owner,
        "repo": repo,
        "ref": head_sha,
        "check_name": name,
        "per_page": 100,
    }
    check: dict[str, Any]
    async for check in client.getiter(url, url_vars, iterable_key="check_runs"):
        if check.get("name") == name and check.get("external_id") == external:
            return check
    return None


async def suite_check_runs(client: GitHubAPI, repository: str, suite_id: int) -> list[dict[str, Any]]:
    """The newest check run of each name in the check suite (any App's suite), all pages."""
    owner, repo = split_repository(repository)
    url = "/repos/{owner}/{repo}/check-suites/{check_suite_id}/check-runs{?per_page}"
    url_vars: dict[str, str | int] = {"owner": owner, "repo": repo, "check_suite_id": suite_id, "per_page": 100}
    return [run async for run in client.getiter(url, url_vars, iterable_key="check_runs")]


async def run_annotations(client: GitHubAPI, repository: str, check_run_id: int, *, limit: int) -> list[dict[str, Any]]:
    """The check run's first `limit` annotations (at most 100: one page), in GitHub's order."""
    owner, repo = split_repository(repository)
    url = "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations{?per_page}"
    url_vars: dict[str, str | int] = {"owner": owner, "repo": repo, "check_run_id": check_run_id, "per_page": limit}
    found: list[dict[str, Any]] = await client.getitem(url, url_vars)
    return found[:limit]


async def start_check(
    client: GitHubAPI,
    repository: str,
    *,
    name: str,
    head_sha: str,
    external: str,
    title: str,
    summary: str,
) -> int:
    """An `in_progress` check run on `head_sha`: the one already there, else a new one. Its id.

    A 5xx on the create may have made it all the same: it is looked for again (by name and
    external id) before it is asked for again, up to CREATE_ATTEMPTS times."""
    started = await begin_check(
        client,
        repository,
        name=name,
        head_sha=head_sha,
        external=external,
        title=title,
        summary=summary,
    )
    return started.id


@dataclass(frozen=True)
class StartedCheck:
    id: int
    passed_before: bool  # the check run was already completed with success on this head


async def begin_check(
    client: GitHubAPI,
    repository: str,
    *,
    name: str,
    head_sha: str,
    external: str,
    title: str,
    summary: str,
    keep_passed: bool = False,
    look_first: bool = True,
) -> StartedCheck:
    """`start_check`, and with `keep_passed` a check run already completed with success on this
    head is kept instead of a new one (a step killed after it reported runs again: what it
    proved on that commit still stands, and GitHub would otherwise show it twice). Without
    `look_first` the caller knows none can be there, and the first create is not preceded by a look."""
    owner, repo = split_repository(repository)
    data = {
        "name": name,
        "head_sha": head_sha,
        "status": "in_progress",
        "external_id": external,
        "started_at": _now(),
        "output": {"title": shorten(title, TITLE_LIMIT), "summary": fit_summary(summary)},
    }
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        looks = look_first or attempt > 1
        existing = await find_check(client, repository, head_sha, name, external) if looks else None
        if existing is not None and existing.get("status") != "completed":
            return StartedCheck(int(existing["id"]), passed_before=False)
        if existing is not None and keep_passed and existing.get("conclusion") == "success":
            return StartedCheck(int(existing["id"]), passed_before=True)
        try:
            created = await client.post("/repos/{owner}/{repo}/check-runs", {"owner": owner, "repo": repo}, data=data)
            return StartedCheck(int(created["id"]), passed_before=False)
        except GitHubBroken:
            if attempt == CREATE_ATTEMPTS:
                raise
            log.warning(
                "creating check run %r on %s failed with a 5xx; looking for it before asking again", name, head_sha
            )
    raise AssertionError("unreachable")


async def report_check(
    client: GitHubAPI,
    repository: str,
    *,
    name: str,
    head_sha: str,
    external: str,
    report: CheckReport,
    look_first: bool = False,
) -> int:
    """A check run made completed with `report` on `head_sha`, in one request: for a step that
    reports only its result (a lane's attempt, on the commit it ended on). Its id.

    With `look_first` (an earlier attempt of the step may have reported on this very commit: one
    that failed, or one lanebot was killed in after it reported) the check run already there is
    completed with `report` instead, so GitHub does not show it twice. After a 5xx it is looked for (by name, external id and the report's
    summary, which names the attempt) before it is asked for again."""
    if look_first:
        existing = await find_check(client, repository, head_sha, name, external)
        if existing is not None:
            await finish_check(client, repository, int(existing["id"]), report)
            return int(existing["id"])
    owner, repo = split_repository(repository)
    now = _now()
    data = {
        "name": name,
        "head_sha": head_sha,
        "status": "completed",
        "external_id": external,
        "started_at": now,
        "completed_at": now,
        "conclusion": report.conclusion,
        "output": {"title": report.title, "summary": report.summary},
        "actions": [action.to_api() for action in report.actions],
    }
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            created = await client.post("/repos/{owner}/{repo}/check-runs", {"owner": owner, "repo": repo}, data=data)
            return int(created["id"])
        except GitHubBroken:
            if attempt == CREATE_ATTEMPTS:
                raise
            log.warning(
                "reporting check run %r on %s failed with a 5xx; looking for it before asking again", name, head_sha
            )
            existing = await find_check(client, repository, head_sha, name, external)
            if existing is not None and (existing.get("output") or {}).get("summary") == report.summary:
                return int(existing["id"])
    raise AssertionError("unreachable")


async def finish_check(client: GitHubAPI, repository: str, check_run_id: int, report: CheckReport) -> None:
    """Complete a check run with `report` (its buttons replace any the run had)."""
    owner, repo = split_repository(repository)
    await client.patch(
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        {"owner": owner, "repo": repo, "check_run_id": check_run_id},
        data={
            "status": "completed",
            "conclusion": report.conclusion,
            "completed_at": _now(),
            "output": {"title": report.title, "summary": report.summary},
            "actions": [action.to_api() for action in report.actions],
        },
    )


async def acknowledge_rerun(client: GitHubAPI, repository: str, check_run_id: int, *, title: str, summary: str) -> None:
    """Replace a completed check run's output with `title` and `summary` (bot.render.checks.rerun_note)
    and take its buttons away, so nobody asks twice. Its conclusion stays: GitHub keeps it."""
    owner, repo = split_repository(repository)
    await client.patch(
        "/repos/{owner}/{repo}/check-runs/{check_run_id}",
        {"owner": owner, "repo": repo, "check_run_id": check_run_id},
        data={"output": {"title": title, "summary": summary}, "actions": []},
    )
