"""Check runs: one per attempt, even when GitHub answers a create with a 5xx: verify's, started in
progress, and a lane's, reported completed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

import pytest
from gidgethub import GitHubBroken

from bot.core.checks import CheckReport
from bot.edges.github.checks import CREATE_ATTEMPTS, report_check, start_check


class FlakyChecks:
    """GitHub's check-run routes as start_check and report_check call them: the first `broken` creates answer 502,
    each of them made the run all the same when `lands` says so."""

    def __init__(self, *, broken: int, lands: bool) -> None:
        self.broken = broken
        self.lands = lands
        self.runs: list[dict[str, Any]] = []
        self.posts = 0

    async def getiter(self, url: str, url_vars: dict[str, Any], **_: Any) -> AsyncIterator[dict[str, Any]]:
        for run in list(self.runs):
            yield run

    async def post(self, url: str, url_vars: dict[str, Any], *, data: dict[str, Any]) -> dict[str, Any]:
        self.posts += 1
        run = {**data, "id": 100 + self.posts}
        if self.posts <= self.broken:
            if self.lands:
                self.runs.append(run)
            raise GitHubBroken(HTTPStatus.BAD_GATEWAY)
        self.runs.append(run)
        return run


async def start(github: FlakyChecks) -> int:
    return await start_check(
        github,  # type: ignore[arg-type]
        "octo/widgets",
        name="lanebot / verify",
        head_sha="a" * 40,
        external="lanebot run=1",
        title="verify is running",
        summary="verify runs on the joined branch.",
    )


async def report(github: FlakyChecks, summary: str = "Attempt 1 of lane `notes`.") -> int:
    return await report_check(
        github,  # type: ignore[arg-type]
        "octo/widgets",
        name="lanebot / notes",
        head_sha="a" * 40,
        external="lanebot run=1 unit=notes",
        report=CheckReport("success", "its check passed", summary, ()),
    )


@pytest.mark.anyio
async def test_a_create_answered_502_that_made_nothing_is_asked_for_again() -> None:
    github = FlakyChecks(broken=1, lands=False)

    assert await start(github) == 102
    assert github.posts == 2 and len(github.runs) == 1


@pytest.mark.anyio
async def test_a_create_answered_502_that_made_the_run_is_found_not_made_twice() -> None:
    github = FlakyChecks(broken=1, lands=True)

    assert await start(github) == 101
    assert github.posts == 1 and len(github.runs) == 1


@pytest.mark.anyio
async def test_a_github_that_keeps_failing_fails_the_start_after_a_few_tries() -> None:
    github = FlakyChecks(broken=CREATE_ATTEMPTS, lands=False)

    with pytest.raises(GitHubBroken):
        await start(github)
    assert github.posts == CREATE_ATTEMPTS


@pytest.mark.anyio
async def test_a_lanes_report_answered_502_that_made_nothing_is_asked_for_again() -> None:
    github = FlakyChecks(broken=1, lands=False)

    assert await report(github) == 102
    assert github.posts == 2 and [run["status"] for run in github.runs] == ["completed"]


@pytest.mark.anyio
async def test_a_lanes_report_answered_502_that_made_the_run_is_found_not_made_twice() -> None:
    github = FlakyChecks(broken=1, lands=True)

    assert await report(github) == 101
    assert github.posts == 1 and len(github.runs) == 1


@pytest.mark.anyio
async def test_an_earlier_attempts_report_on_the_commit_is_not_taken_for_this_one() -> None:
    """After a 5xx the report is looked for by its summary, which names the attempt."""
    github = FlakyChecks(broken=0, lands=False)
    await report(github, "Attempt 1 of lane `notes`.")
    github.broken = 2  # the next create answers 502 without making anything

    assert await report(github, "Attempt 2 of lane `notes`.") == 103
    assert [run["output"]["summary"] for run in github.runs] == [
        "Attempt 1 of lane `notes`.",
        "Attempt 2 of lane `notes`.",
    ]
