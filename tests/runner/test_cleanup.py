"""Clean-up after a run's pull request is merged or closed, and `lanebot gc`.

The rules are tested as functions (which pull requests are lanebot's, what a merge or a close
does to the run's row, which branches may be deleted, what gc may remove); the file removal
with real git worktrees and a real SQLite database; `lanebot gc` through its CLI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gidgethub import BadRequest

from bot.cli import main
from bot.core.workflow import WorkflowError
from bot.edges.git import Mirror
from bot.edges.store import runs as store
from bot.edges.store.models import Lane, Run
from bot.edges.workflow_files import load_workflow
from bot.runner.cleanup import (
    ClosedPull,
    RunRecord,
    collect,
    delete_branch,
    disk_usage,
    human_bytes,
    is_finished,
    lane_branches,
    mirror_paths,
    parse_age,
    plan_collection,
    record_pull_closed,
    remove_run_files,
    run_paths,
)
from bot.runner.runtime import Runtime
from bot.web.handlers.pull_request import lanebot_issue
from tests.lanes_helpers import make_remote

REPOSITORY = "octo/app"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- which pull requests are lanebot's


def closed_payload(head_ref: str, *, head_repo: str = REPOSITORY) -> dict[str, Any]:
    return {
        "repository": {"full_name": REPOSITORY},
        "pull_request": {"number": 9, "head": {"ref": head_ref, "repo": {"full_name": head_repo}}},
    }


def test_a_pull_request_from_the_integration_branch_names_its_issue():
    assert lanebot_issue(closed_payload("lanebot/12")) == 12


@pytest.mark.parametrize(
    "payload",
    [
        closed_payload("lanebot/12", head_repo="someone/fork"),
        closed_payload("lanebot-lanes/12/api"),
        closed_payload("lanebot/12/extra"),
        closed_payload("feature"),
        {
            "repository": {"full_name": REPOSITORY},
            "pull_request": {"number": 9, "head": {"ref": "lanebot/12", "repo": None}},
        },
    ],
)
def test_any_other_pull_request_is_not_lanebots(payload):
    assert lanebot_issue(payload) is None


# --------------------------------------------------------------------------- the run's row


def done_run(engine, issue: int = 5) -> int:
    run = store.create_run(engine, installation_id=1, repository=REPOSITORY, issue_number=issue, requested_by="m")
    for before, after in (
        ("planning", "awaiting_approval"),
        ("awaiting_approval", "running"),
        ("running", "integrating"),
        ("integrating", "done"),
    ):
        assert store.transition(engine, run.id, before, after)
    store.update_run(engine, run.id, pr_number=9)
    return run.id


def events(engine, run_id: int, kind: str) -> list[dict]:
    return [event.payload() for event in store.run_events(engine, run_id) if event.kind == kind]


MERGED = ClosedPull(number=9, merged=True, closed_by="maria", merge_commit_sha="a" * 40)
CLOSED = ClosedPull(number=9, merged=False, closed_by="maria")


def test_a_merge_leaves_the_run_done_and_releases_its_issue_once(engine):
    run_id = done_run(engine)
    assert record_pull_closed(engine, run_id, MERGED)
    assert record_pull_closed(engine, run_id, MERGED)  # a redelivery tidies again, records nothing twice
    run = store.get_run(engine, run_id)
    assert (run.state, run.active_key) == ("done", None)
    assert events(engine, run_id, "pr_merged") == [{"pr": 9, "merged_by": "maria", "merge_commit_sha": "a" * 40}]
    assert store.create_run(engine, installation_id=1, repository=REPOSITORY, issue_number=5, requested_by="m")


def test_closing_unmerged_cancels_the_run_and_releases_its_issue(engine):
    run_id = done_run(engine)
    assert record_pull_closed(engine, run_id, CLOSED)
    assert record_pull_closed(engine, run_id, CLOSED)
    run = store.get_run(engine, run_id)
    assert (run.state, run.active_key) == ("cancelled", None)
    assert "closed without merging by @maria" in run.error
    assert events(engine, run_id, "pr_closed") == [{"pr": 9, "by": "maria"}]


def test_a_run_that_is_not_done_is_left_as_it_is(engine):
    run = store.create_run(engine, installation_id=1, repository=REPOSITORY, issue_number=6, requested_by="m")
    assert not record_pull_closed(engine, run.id, MERGED)
    assert not record_pull_closed(engine, run.id, CLOSED)
    assert store.get_run(engine, run.id).state == "planning"


# --------------------------------------------------------------------------- branches


def test_only_the_runs_own_lane_branches_may_be_deleted():
    lanes = [
        Lane(run_id=1, unit_id="api", round=1, state="merged", branch="lanebot-lanes/5/api"),
        Lane(run_id=1, unit_id="cli", round=1, state="merged", branch=None),
        Lane(run_id=1, unit_id="odd", round=1, state="merged", branch="main"),
        Lane(run_id=1, unit_id="other", round=1, state="merged", branch="lanebot-lanes/6/other"),
    ]
    assert lane_branches(5, lanes) == ["lanebot-lanes/5/api", "lanebot-lanes/5/cli"]


class RefClient:
    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.deleted: list[tuple[str, dict]] = []

    async def delete(self, url: str, url_vars: dict[str, Any]) -> None:
        self.deleted.append((url, url_vars))
        if self.status is not None:
            raise BadRequest(HTTPStatus(self.status), "Reference does not exist")


@pytest.mark.anyio
async def test_deleting_a_branch_uses_githubs_refs_route_and_an_already_deleted_one_is_fine():
    client = RefClient()
    assert await delete_branch(client, REPOSITORY, "lanebot-lanes/5/api") is True
    [(url, url_vars)] = client.deleted
    assert url == "/repos/{owner}/{repo}/git/refs/heads/{+branch}"
    assert url_vars == {"owner": "octo", "repo": "app", "branch": "lanebot-lanes/5/api"}
    assert await delete_branch(RefClient(422), REPOSITORY, "lanebot-lanes/5/api") is False
    with pytest.raises(BadRequest):
        await delete_branch(RefClient(403), REPOSITORY, "lanebot-lanes/5/api")
    with pytest.raises(ValueError, match="not a plain branch name"):
        await delete_branch(RefClient(), REPOSITORY, "lanebot-lanes/5/../../main")


def test_deleting_lane_branches_is_on_by_default_and_a_repository_may_turn_it_off():
    assert load_workflow().cleanup.delete_lane_branches is True
    kept = load_workflow([(".github/lanebot.yml", {"cleanup": {"delete_lane_branches": False}})])
    assert kept.cleanup.delete_lane_branches is False
    with pytest.raises(WorkflowError, match="cleanup.delete_lane_branches"):
        load_workflow([(".github/lanebot.yml", {"cleanup": {"delete_lane_branches": "yes"}})])


# --------------------------------------------------------------------------- files on the runner host


def test_the_run_paths_are_where_the_runtime_puts_the_runs_files(tmp_path):
    run = Run(id=12, installation_id=1, repository=REPOSITORY, issue_number=5, requested_by="m")
    runtime = Runtime(
        context=SimpleNamespace(settings=SimpleNamespace(workdir=tmp_path)),
        run=run,
        repository=None,
        workflow=None,
        graph=None,
        issue=None,
        client=None,
        mirror=None,
        identity=None,
    )
    paths = run_paths(tmp_path, REPOSITORY, 12)
    assert runtime.worktree_path("api").parent == paths.worktrees
    assert runtime.script_path("check").parent in paths.others
    assert runtime.scratch_path("x").parent in paths.others
    assert not any(part == "transcripts" for path in paths.all() for part in path.parts)
    assert mirror_paths(tmp_path, REPOSITORY)[0] == Mirror(tmp_path, REPOSITORY, "https://example.com/x.git").path


@pytest.mark.anyio
async def test_removing_a_runs_files_removes_its_worktrees_from_git_and_disk_and_keeps_other_runs(tmp_path):
    remote = make_remote(tmp_path, {"README.md": "# app\n"})
    workdir = tmp_path / "work"
    mirror = Mirror(workdir, REPOSITORY, str(remote))
    await mirror.fetch()
    mine, other = run_paths(workdir, REPOSITORY, 1), run_paths(workdir, REPOSITORY, 2)
    await mirror.add_worktree(mine.worktrees / "api", branch="lanebot-lanes/5/api", start="main")
    await mirror.add_worktree(other.worktrees / "cli", branch="lanebot-lanes/6/cli", start="main")
    for folder in mine.others:
        folder.mkdir(parents=True)
        (folder / "file").write_text("x")

    await remove_run_files(mine, mirror=mirror)

    assert not any(path.exists() for path in mine.all())
    assert (other.worktrees / "cli" / "README.md").is_file()
    listed = subprocess.run(  # noqa: ASYNC221 - a one-off look at the mirror after the work is done
        ["git", "worktree", "list", "--porcelain"], cwd=mirror.path, capture_output=True, text=True, check=True
    ).stdout
    assert "run-1" not in listed and "run-2" in listed
    await remove_run_files(mine, mirror=mirror)  # again: nothing left, nothing fails


# --------------------------------------------------------------------------- gc: the plan (pure)


def record(
    run_id: int, state: str, *, repository: str = REPOSITORY, holds: bool = False, days: float = 30
) -> RunRecord:
    return RunRecord(
        id=run_id, repository=repository, state=state, holds_issue=holds, updated_at=NOW - timedelta(days=days)
    )


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("7d", timedelta(days=7)),
        ("12h", timedelta(hours=12)),
        ("30m", timedelta(minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_an_age_is_written_in_weeks_days_hours_minutes_or_seconds(text, age):
    assert parse_age(text) == age


@pytest.mark.parametrize("text", ["", "7", "7x", "d7", "-1d", "1.5d", "7 days"])
def test_anything_else_is_not_an_age_and_the_error_shows_how_to_write_one(text):
    with pytest.raises(ValueError, match="write e.g. 7d, 12h"):
        parse_age(text)


def test_sizes_read_in_binary_units():
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 5 * 1024**2, 3 * 1024**3)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 GiB",
    ]


def test_a_run_is_finished_when_ended_or_done_with_its_pull_request_merged_or_closed():
    assert all(is_finished(record(1, state)) for state in ("rejected", "cancelled", "failed"))
    assert is_finished(record(1, "done", holds=False))
    assert not is_finished(record(1, "done", holds=True))  # its pull request is still open
    assert not any(
        is_finished(record(1, s)) for s in ("planning", "awaiting_approval", "running", "integrating", "blocked")
    )


def test_gc_takes_old_finished_runs_and_only_mirrors_all_of_whose_runs_it_takes():
    runs = [
        record(1, "done"),
        record(2, "cancelled"),  # octo/app: all old and finished
        record(3, "failed", repository="octo/busy"),
        record(4, "running", repository="octo/busy", days=60),
        record(5, "done", repository="octo/open", holds=True, days=60),
        record(6, "rejected", repository="octo/recent", days=1),
    ]
    plan = plan_collection(runs, now=NOW, older_than=timedelta(days=7))
    assert [run.id for run in plan.runs] == [1, 2, 3]
    assert plan.mirrors == ("octo/app",)
    everything = plan_collection(runs, now=NOW, older_than=timedelta(0))
    assert [run.id for run in everything.runs] == [1, 2, 3, 6]
    assert everything.mirrors == ("octo/app", "octo/recent")


# --------------------------------------------------------------------------- gc: on disk, and its CLI


def fill(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)


def finished_and_unfinished(engine, workdir: Path) -> tuple[int, int]:
    """A merged run of octo/app and a running run of octo/busy, each with files, and both mirrors."""
    merged = done_run(engine)
    assert record_pull_closed(engine, merged, MERGED)
    busy = store.create_run(engine, installation_id=1, repository="octo/busy", issue_number=1, requested_by="m").id
    fill(run_paths(workdir, REPOSITORY, merged).worktrees / "api" / "big.bin", 3000)
    fill(run_paths(workdir, REPOSITORY, merged).others[0] / "check.sh", 100)
    fill(run_paths(workdir, "octo/busy", busy).worktrees / "cli" / "work.txt", 50)
    fill(mirror_paths(workdir, REPOSITORY)[0] / "objects" / "pack.pack", 5000)
    fill(mirror_paths(workdir, "octo/busy")[0] / "objects" / "pack.pack", 7000)
    return merged, busy


def test_gc_removes_a_finished_runs_files_and_mirror_and_never_an_unfinished_runs(engine, tmp_path):
    workdir = tmp_path / "work"
    merged, busy = finished_and_unfinished(engine, workdir)
    transcript = workdir / "transcripts" / str(merged) / "api" / "attempt-1.jsonl"
    fill(transcript, 10)

    removed = collect(engine, workdir, now=datetime.now(UTC), older_than=timedelta(0), dry_run=False)

    assert [(r.what, r.size) for r in removed] == [(f"run {merged} (octo/app)", 3100), ("the mirror of octo/app", 5000)]
    assert not any(path.exists() for path in run_paths(workdir, REPOSITORY, merged).all())
    assert not mirror_paths(workdir, REPOSITORY)[0].exists()
    assert (run_paths(workdir, "octo/busy", busy).worktrees / "cli" / "work.txt").is_file()
    assert disk_usage(mirror_paths(workdir, "octo/busy")[0]) == 7000
    assert transcript.is_file()


def test_gc_leaves_runs_younger_than_the_age(engine, tmp_path):
    workdir = tmp_path / "work"
    finished_and_unfinished(engine, workdir)
    assert collect(engine, workdir, now=datetime.now(UTC), older_than=timedelta(days=7), dry_run=False) == []
    assert mirror_paths(workdir, REPOSITORY)[0].exists()


def gc(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["gc", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_lanebot_gc_dry_run_says_what_it_would_free_and_removes_nothing_then_gc_frees_it(
    engine, tmp_path, database_url, capsys
):
    workdir = tmp_path / "work"
    merged, _ = finished_and_unfinished(engine, workdir)

    status, out, _ = gc(
        capsys, "--older-than", "0", "--dry-run", "--workdir", str(workdir), "--database-url", database_url
    )
    assert status == 0
    assert f"would remove run {merged} (octo/app): 3.0 KiB" in out
    assert out.strip().endswith(f"would free 7.9 KiB (8,100 bytes) under {workdir}")
    assert mirror_paths(workdir, REPOSITORY)[0].exists()

    status, out, _ = gc(capsys, "--older-than", "0", "--workdir", str(workdir), "--database-url", database_url)
    assert status == 0
    assert "removed the mirror of octo/app: 4.9 KiB" in out
    assert out.strip().endswith(f"freed 7.9 KiB (8,100 bytes) under {workdir}")
    assert not mirror_paths(workdir, REPOSITORY)[0].exists()

    status, out, _ = gc(capsys, "--older-than", "0", "--workdir", str(workdir), "--database-url", database_url)
    assert out.strip() == f"nothing to remove under {workdir}: freed 0 B"


def test_lanebot_gc_refuses_a_bad_age_with_a_one_line_error(capsys, tmp_path):
    status, _, err = gc(capsys, "--older-than", "a week", "--workdir", str(tmp_path))
    assert status == 2
    assert err.startswith("lanebot: error: --older-than: 'a week' is not an age: write e.g. 7d")


def test_lanebot_gc_reads_the_workdir_from_lanebot_workdir(engine, tmp_path, database_url, capsys, monkeypatch):
    workdir = tmp_path / "from-env"
    merged, _ = finished_and_unfinished(engine, workdir)
    monkeypatch.setenv("LANEBOT_WORKDIR", str(workdir))
    monkeypatch.setenv("DATABASE_URL", database_url)
    status, out, _ = gc(capsys, "--older-than", "0")
    assert status == 0 and f"removed run {merged} (octo/app)" in out


def test_disk_usage_counts_files_and_symlinks_by_their_own_size_without_following_links(tmp_path):
    fill(tmp_path / "tree" / "a", 10)
    fill(tmp_path / "tree" / "sub" / "b", 20)
    fill(tmp_path / "outside" / "huge", 10_000)
    os.symlink(tmp_path / "outside", tmp_path / "tree" / "link")
    assert disk_usage(tmp_path / "tree") == 30 + os.lstat(tmp_path / "tree" / "link").st_size
    assert disk_usage(tmp_path / "missing") == 0
    shutil.rmtree(tmp_path / "tree")
