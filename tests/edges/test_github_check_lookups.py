"""Check runs cost what they must: a commit's check runs are looked up only when an earlier life of
the step may have made one the database does not know of, and a result on a new commit is one
request. Against the sandbox GitHub, in process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.core.checks import RETRY_LANE, CheckReport
from bot.edges.github.checks import begin_check, report_check
from bot.edges.github.client import GitHubApp, InstallationClient
from bot.edges.settings import Settings
from tests.sandbox.test_sandbox import APP_ID, BASE, Harness, app_key, harness

pytestmark = pytest.mark.anyio
REPO = "alice/demo"
LOOKUPS = "/repos/alice/demo/commits/{sha}/check-runs"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text("# demo\n")
    return folder


def main_sha(h: Harness) -> str:
    bare = h.sandbox.git.path("alice", "demo")
    return subprocess.run(
        ["git", "--git-dir", str(bare), "rev-parse", "main"], capture_output=True, text=True, check=True
    ).stdout.strip()


def served(h: Harness, method: str, path: str) -> int:
    return sum(1 for m, p, _ in h.sandbox.served if (m, p) == (method, path))


async def start(client: InstallationClient, sha: str, *, look_first: bool) -> int:
    started = await begin_check(
        client,
        REPO,
        name="lanebot / verify",
        head_sha=sha,
        external="run-1",
        title="verify is running",
        summary="The integrate step's check run.",
        look_first=look_first,
    )
    return started.id


async def test_a_first_life_of_a_step_starts_its_check_run_without_looking_and_a_later_one_finds_it(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO)
        sha = main_sha(h)
        settings = Settings(app_id=str(APP_ID), private_key=app_key()[0], webhook_secret="s", github_api_url=BASE)
        async with GitHubApp(settings, http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], REPO)
            first = await start(client, sha, look_first=False)
            assert served(h, "GET", LOOKUPS.format(sha=sha)) == 0

            # A crash before the id was stored: the step run again looks, and takes over the run in progress.
            again = await start(client, sha, look_first=True)

        assert again == first
        assert served(h, "GET", LOOKUPS.format(sha=sha)) == 1
        assert served(h, "POST", "/repos/alice/demo/check-runs") == 1


async def test_a_report_on_a_new_commit_is_one_request_that_completes_the_check_run(
    tmp_path: Path, project: Path
) -> None:
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO)
        sha = main_sha(h)
        settings = Settings(app_id=str(APP_ID), private_key=app_key()[0], webhook_secret="s", github_api_url=BASE)
        async with GitHubApp(settings, http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], REPO)
            report = CheckReport("failure", "its check failed", "Attempt 2 of lane `notes`.", (RETRY_LANE,))
            check_id = await report_check(
                client, REPO, name="lanebot / notes", head_sha=sha, external="run-1/notes", report=report
            )

        [run] = [r for r in h.sandbox.state.check_runs.values() if r.id == check_id]
        assert (run.status, run.conclusion, run.head_sha) == ("completed", "failure", sha)
        assert [action["identifier"] for action in run.actions] == [RETRY_LANE.identifier]
        assert [(m, p) for m, p, _ in h.sandbox.served if not p.startswith("/_sandbox/")] == [
            ("POST", f"/app/installations/{repo['installation_id']}/access_tokens"),
            ("POST", "/repos/alice/demo/check-runs"),
        ]
        # The suite's only run is done, so GitHub says the suite is too.
        assert await h.delivered() == [
            ("check_run", "created"),
            ("check_run", "completed"),
            ("check_suite", "completed"),
        ]


async def test_a_later_attempts_report_completes_the_check_run_an_earlier_one_left_on_that_commit(
    tmp_path: Path, project: Path
) -> None:
    """A lane's next attempt (after a failure, or after lanebot was killed once the lane reported)
    may end on the very commit an earlier one reported on: its start when it commits nothing, or
    the same commit made again. GitHub would otherwise show the lane's check twice on it."""
    async with harness(tmp_path, project) as h:
        repo = await h.repository(REPO)
        sha = main_sha(h)
        settings = Settings(app_id=str(APP_ID), private_key=app_key()[0], webhook_secret="s", github_api_url=BASE)
        async with GitHubApp(settings, http=h.http, clock=lambda: h.clock().timestamp()) as app:
            client = app.installation_client(repo["installation_id"], REPO)

            async def report(summary: str, *, look_first: bool) -> int:
                return await report_check(
                    client,
                    REPO,
                    name="lanebot / notes",
                    head_sha=sha,
                    external="run-1/notes",
                    report=CheckReport("success", "its check passed", summary, ()),
                    look_first=look_first,
                )

            first = await report("Attempt 1 of lane `notes`.", look_first=False)
            again = await report("Attempt 2 of lane `notes`.", look_first=True)

        runs = [r for r in h.sandbox.state.check_runs.values() if r.head_sha == sha and r.name == "lanebot / notes"]
        assert again == first
        assert [(r.status, r.conclusion, r.output["summary"]) for r in runs] == [
            ("completed", "success", "Attempt 2 of lane `notes`.")
        ]
        assert served(h, "POST", "/repos/alice/demo/check-runs") == 1
