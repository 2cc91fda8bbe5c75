"""A culprit for a red verify, end to end through the sandbox GitHub with scripted agents: verify
fails on the joined branch, lanebot bisects the lanes' merges, names the lane whose merge broke it
(on the verify check run, on the issue, to the repair session), and `/retry <unit>` redoes that
lane from the joined branch, shown verify's failure, until the pull request opens. A verify that
fails on the base itself says so and blames no lane."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.core.names import integration_branch, merge_message
from bot.edges.store import runs as store
from bot.runner import orchestrator
from tests.lanes_helpers import ISSUE, approved_run, first_parent_subjects, run_git, tree_paths, unit
from tests.runner.test_orchestrator import WAIT_LIMIT_S, World, progress_comments, world

pytestmark = pytest.mark.slow

# Three lanes in one round, merged a, b, c; lane b's first attempt leaves a file verify refuses.
PLAN = [unit(name, f"^app/{name}/", f"test -f app/{name}/code.py") for name in ("a", "b", "c")]
VERIFY = "echo running the suite; if test -e app/b/BROKEN; then echo 'app/b is broken'; exit 1; fi"
STEPS = {
    "a": {"default": {"write": {"app/a/code.py": "a = 1\n"}}},
    "b": {
        "1": {"write": {"app/b/code.py": "b = 1\n", "app/b/BROKEN": "yes\n"}},
        "2": {"delete": ["app/b/BROKEN"]},
    },
    "c": {"default": {"write": {"app/c/code.py": "c = 1\n"}}},
}


def culprit_probes(engine, run_id):
    return [json.loads(event.data) for event in store.run_events(engine, run_id) if event.kind == "culprit_probe"]


def merge_sha(bare, unit_id):
    """The first merge commit of the lane on the integration branch."""
    subject = merge_message(unit_id, ISSUE)
    log = run_git("log", "--first-parent", "--reverse", "--format=%H %s", integration_branch(ISSUE), cwd=bare)
    return next(sha for sha, _, line in (entry.partition(" ") for entry in log.splitlines()) if line == subject)


@pytest.fixture
def blocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> Callable[[dict[str, Any]], contextlib.AbstractAsyncContextManager[tuple[World, int]]]:
    """`async with blocked(integrate) as (w, run_id)`: PLAN's run, each lane's first attempt its last,
    driven until verify (with `integrate`'s settings) blocks it."""

    @contextlib.asynccontextmanager
    async def blocked_run(integrate: dict[str, Any]) -> AsyncIterator[tuple[World, int]]:
        build = {"agent": "command", "max_retries": 0}
        async with world(tmp_path, monkeypatch, sqlite_url, build=build, steps=STEPS, integrate=integrate) as w:
            run_id = approved_run(w.context.engine, PLAN)
            assert await w.drive(run_id) == "blocked"
            yield w, run_id

    return blocked_run


@pytest.mark.anyio
async def test_the_lane_whose_merge_broke_verify_is_named_and_retrying_it_opens_the_pull_request(blocked):
    async with blocked({"agent": "command", "verify": VERIFY, "max_retries": 1}) as (w, run_id):
        b_merge, a_merge = merge_sha(w.bare, "b"), merge_sha(w.bare, "a")
        lane_b = w.lane(run_id, "b")
        assert (w.lane(run_id, "a").state, lane_b.state, w.lane(run_id, "c").state) == ("merged", "failed", "merged")
        # Three merges and nothing committed after the last: verify ran on a's merge and b's, no more.
        probes = culprit_probes(w.context.engine, run_id)
        assert [probe["sha"] for probe in probes] == [a_merge, b_merge]
        assert len(probes) <= math.ceil(math.log2(3 + 1))
        finding = f"verify first fails on {b_merge[:12]}, where lane 'b' merged; it passes on {a_merge[:12]}"

        repair_prompt = next(p for p in w.scenario.prompts.iterdir() if p.name.startswith("verify-")).read_text()
        assert finding in repair_prompt

        error = w.run(run_id).error
        assert finding in error and "/retry b redoes that lane" in error
        assert f"/runs/{lane_b.check_run_id}" in error
        last_verify = w.github.checks_named("lanebot / verify")[-1]
        summary = last_verify["output"]["summary"]
        assert "What broke it" in summary and b_merge[:12] in summary and "app/b is broken" in summary
        assert f"/runs/{lane_b.check_run_id})" in summary and "/retry b" in summary
        assert last_verify.get("actions") in (None, [])  # Re-run verify would be refused: lane b failed
        [comment] = progress_comments(w.github.readout(), run_id)
        assert "`/retry b`" in comment["body"] and b_merge[:12] in comment["body"]
        # Verify's output is in lane b's failure, and not again in the run's reason.
        assert comment["body"].count("running the suite\napp/b is broken") == 1
        assert w.github.pulls() == []

        assert await asyncio.wait_for(orchestrator.retry(w.context, run_id, "b"), WAIT_LIMIT_S) == "done"

        second_prompt = w.scenario.prompt("b", 2)
        assert (
            f"verify exited with status 1 on its merge {b_merge[:12]}, and it passed on {a_merge[:12]}" in second_prompt
        )
        assert "running the suite\napp/b is broken" in second_prompt
        assert "starts from lanebot/1 as it is now" in second_prompt
        assert len(w.github.pulls()) == 1
        tree = tree_paths(w.bare, integration_branch(ISSUE))
        assert {"app/a/code.py", "app/b/code.py", "app/c/code.py"} <= tree and "app/b/BROKEN" not in tree
        merges = [s for s in first_parent_subjects(w.bare, integration_branch(ISSUE)) if s.startswith("Merge lane")]
        assert merges == [merge_message(name, ISSUE) for name in ("a", "b", "c", "b")]
        assert w.github.checks_named("lanebot / verify")[-1]["conclusion"] == "success"


@pytest.mark.anyio
async def test_a_verify_that_fails_on_the_base_itself_says_so_and_blames_no_lane(blocked):
    async with blocked({"verify": "echo the suite was red already; exit 3"}) as (w, run_id):
        base = w.run(run_id).base_sha
        probes = culprit_probes(w.context.engine, run_id)
        assert probes[-1]["sha"] == base and len(probes) <= math.ceil(math.log2(3 + 1))
        error = w.run(run_id).error
        assert f"verify fails on {base[:12]} itself, the run's base, before any lane" in error
        assert "redoes that lane" not in error
        assert all(w.lane(run_id, name).state == "merged" for name in ("a", "b", "c"))
        [verify] = w.github.checks_named("lanebot / verify")
        assert "before any lane" in verify["output"]["summary"]
        assert [action["identifier"] for action in verify["actions"]] == ["rerun-verify"]


@pytest.mark.anyio
async def test_with_find_culprit_off_verify_runs_on_the_head_alone(blocked):
    async with blocked({"verify": VERIFY, "find_culprit": False}) as (w, run_id):
        assert culprit_probes(w.context.engine, run_id) == []
        assert w.lane(run_id, "b").state == "merged"
        assert "verify failed after 0 repair sessions: verify exited with status 1" in w.run(run_id).error
