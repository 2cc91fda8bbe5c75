"""A base that moves: people push to the default branch while lanebot works, end to end through the
sandbox GitHub with scripted agents (tests/runner/test_orchestrator.py's world).

A lane waits until the test has pushed to `main` as a person (the sandbox's human API), so the push
lands after the run recorded its base and before the integrate step. The pull request's branch
must then hold `main`'s new commit, merged by one commit that says so, with verify run on it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.core.base_moves import Mergeability, mergeability
from bot.core.checks import VERIFY_CHECK
from bot.core.names import base_update_message, integration_branch
from bot.edges.github.reviews import get_pull
from bot.edges.store import reviews
from bot.edges.store import runs as store
from bot.runner.pull_update import run_update
from bot.runner.runtime import load_runtime
from tests.lanes_helpers import ISSUE, approved_run, first_parent_subjects, run_git, unit
from tests.runner.test_orchestrator import WAIT_LIMIT_S, World, eventually, world

pytestmark = pytest.mark.slow

BRANCH = integration_branch(ISSUE)
UPDATE = base_update_message("main", BRANCH)
PUSHED = "pushed-to-main"  # the file a lane waits for: the test has pushed to main

LANE = [unit("notes", r"^notes\.txt$", "test -f notes.txt")]
WITH_NOTES = {"README.md": "# notes\n", "notes.txt": "the first notes\n"}  # for main and the lane to change


@pytest.fixture
def make_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> Callable[..., contextlib.AbstractAsyncContextManager[World]]:
    """test_orchestrator's `world` for this test: `make_world(build=..., ...)`."""
    return functools.partial(world, tmp_path, monkeypatch, sqlite_url)


def _show(bare: Path, ref: str, path: str) -> str:
    return run_git("show", f"{ref}:{path}", cwd=bare)


async def _done_with_a_push_to_main_meanwhile(w: World, files: dict[str, str]) -> int:
    """LANE's run driven to done; while its lane waits, a maintainer pushes `files` to main, then the
    lane writes its notes and goes on. The run's id."""
    w.scenario.steps["notes"] = {
        "default": {"wait_for": [str(w.scenario.root / PUSHED)], "write": {"notes.txt": "the lane's notes\n"}}
    }
    w.scenario.save()
    run_id = approved_run(w.context.engine, LANE)
    drive = asyncio.create_task(asyncio.wait_for(w.drive(run_id), WAIT_LIMIT_S))
    await eventually(lambda: any(key == "notes" for key, _, _ in w.scenario.runs()), "the lane's agent started")
    await asyncio.to_thread(
        w.github.human.push, w.github.full_name, "main", files, login="maintainer", message="Meanwhile on main"
    )
    (w.scenario.root / PUSHED).write_text("")
    assert await drive == "done", w.run(run_id).error
    return run_id


def _branch_head(w: World) -> str:
    return run_git("rev-parse", BRANCH, cwd=w.bare)


def _verified_heads(w: World) -> dict[str, str | None]:
    return {run["head_sha"]: run["conclusion"] for run in w.github.checks_named(VERIFY_CHECK)}


@pytest.mark.anyio
async def test_a_push_to_main_during_the_run_is_merged_into_the_pull_request_and_verified(make_world):
    async with make_world(build={"agent": "command"}, integrate={"verify": "test -f notes.txt"}, steps={}) as w:
        run_id = await _done_with_a_push_to_main_meanwhile(w, {"NEWS.md": "news from main\n"})

        assert first_parent_subjects(w.bare, BRANCH)[-1] == UPDATE
        assert _show(w.bare, BRANCH, "NEWS.md") == "news from main"
        assert _show(w.bare, BRANCH, "notes.txt") == "the lane's notes"
        head = _branch_head(w)
        assert _verified_heads(w)[head] == "success"  # verify ran again, on the merge of main
        [pull] = w.github.pulls()
        assert "The default branch moved during the run" in pull["body"]
        assert w.run(run_id).base_sha != run_git("rev-parse", "main", cwd=w.bare)  # the lanes kept the run's base


@pytest.mark.anyio
async def test_a_conflicting_push_to_main_is_resolved_by_the_resolver_before_the_pull_request_opens(make_world):
    steps = {"resolve": {"default": {"write": {"notes.txt": "main's notes\nthe lane's notes\n"}}}}
    async with make_world(build={"agent": "command", "on_conflict": "agent"}, steps=steps, files=WITH_NOTES) as w:
        run_id = await _done_with_a_push_to_main_meanwhile(w, {"notes.txt": "main's notes\n"})

        assert first_parent_subjects(w.bare, BRANCH)[-1] == UPDATE
        assert _show(w.bare, BRANCH, "notes.txt") == "main's notes\nthe lane's notes"
        [resolver] = [s for s in store.sessions(w.context.engine, run_id) if s.kind == "resolve"]
        assert resolver.status == "succeeded"
        [prompt] = [p for p in w.scenario.prompts.iterdir() if p.name.startswith("resolve-")]
        assert "the default branch `main`" in prompt.read_text() and "notes.txt" in prompt.read_text()


@pytest.mark.anyio
async def test_with_on_conflict_block_a_conflicting_push_to_main_leaves_the_branch_as_verified_and_says_so(make_world):
    async with make_world(build={"agent": "command"}, files=WITH_NOTES) as w:
        await _done_with_a_push_to_main_meanwhile(w, {"notes.txt": "main's notes\n"})

        assert UPDATE not in first_parent_subjects(w.bare, BRANCH)
        [pull] = w.github.pulls()
        assert "The default branch moved during the run" in pull["body"]
        assert "conflicted in notes.txt" in pull["body"]
        assert "comment /update" in pull["body"]


# --------------------------------------------------------------------------- after the pull request opened


async def _mergeable(w: World, run_id: int, number: int) -> Mergeability:
    """GitHub's answer as lanebot reads it, asked twice: the first answer after a move is null."""
    rt = await load_runtime(w.context, run_id)
    first = mergeability(await get_pull(rt.client, rt.run.repository, number))
    assert first is Mergeability.UNKNOWN  # the sandbox computes it lazily, as GitHub does
    return mergeability(await get_pull(rt.client, rt.run.repository, number))


async def _update(w: World, run_id: int, pr_number: int) -> Any:
    reviews.enqueue(
        w.context.engine, run_id=run_id, pr_number=pr_number, kind="update", key="update:1", requested_by="maintainer"
    )
    request = reviews.claim_next(w.context.engine, run_id)
    assert request is not None
    await asyncio.wait_for(run_update(w.context, request), WAIT_LIMIT_S)
    return reviews.get(w.context.engine, request.id)


def _answer(w: World, pr_number: int, request: Any) -> str:
    """lanebot's one comment on the pull request answering `request`."""
    answers: list[str] = [c["body"] for c in w.github.comments(pr_number) if f"request={request.id}" in c["body"]]
    [answer] = answers
    return answer


@pytest.mark.anyio
async def test_update_merges_a_conflicting_main_with_the_resolver_and_the_pull_request_merges_again(make_world):
    steps = {
        "notes": {"default": {"write": {"notes.txt": "the lane's notes\n"}}},
        "resolve": {"default": {"write": {"notes.txt": "main's notes\nthe lane's notes\n"}}},
    }
    async with make_world(
        build={"agent": "command", "on_conflict": "agent"},
        integrate={"verify": 'grep -q "lane\'s notes" notes.txt'},
        steps=steps,
        files=WITH_NOTES,
    ) as w:
        run_id = approved_run(w.context.engine, LANE)
        assert await w.drive(run_id) == "done", w.run(run_id).error
        number = w.run(run_id).pr_number
        assert await _mergeable(w, run_id, number) is Mergeability.CLEAN
        w.github.human.push(w.github.full_name, "main", {"notes.txt": "main's notes\n"}, login="maintainer")
        assert await _mergeable(w, run_id, number) is Mergeability.CONFLICTING

        request = await _update(w, run_id, number)

        assert request.state == "done", request.error
        assert await _mergeable(w, run_id, number) is Mergeability.CLEAN
        assert first_parent_subjects(w.bare, BRANCH)[-1] == UPDATE
        assert _show(w.bare, BRANCH, "notes.txt") == "main's notes\nthe lane's notes"
        head = _branch_head(w)
        assert request.head_sha == head and _verified_heads(w)[head] == "success"
        answer = _answer(w, number, request)
        assert "was merged into" in answer and head[:12] in answer


@pytest.mark.anyio
async def test_update_that_verify_fails_on_pushes_nothing_and_says_why(make_world):
    async with make_world(
        build={"agent": "command"},
        integrate={"verify": "! test -f broken.txt"},
        steps={"notes": {"default": {"write": {"notes.txt": "the lane's notes\n"}}}},
    ) as w:
        run_id = approved_run(w.context.engine, LANE)
        assert await w.drive(run_id) == "done", w.run(run_id).error
        before = _branch_head(w)
        w.github.human.push(w.github.full_name, "main", {"broken.txt": "x\n"}, login="maintainer")

        request = await _update(w, run_id, w.run(run_id).pr_number)

        assert request.state == "failed" and "verify" in request.error
        assert _branch_head(w) == before
        assert "Nothing was pushed" in _answer(w, w.run(run_id).pr_number, request)
