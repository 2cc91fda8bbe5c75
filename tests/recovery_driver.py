"""Drive one run in a process of its own, as `lanebot serve` would after a start: recover, then drive.

Used by tests/e2e/test_recovery_sigkill.py, which SIGKILLs this process at chosen moments. With
LANEBOT_TEST_PAUSE=merge it stops for good half-way through its first lane merge (`git merge
--no-commit` done, the merge still in progress, nothing pushed); with LANEBOT_TEST_PAUSE=pushed right after a merge round's push (lanes not yet
recorded as merged). It writes LANEBOT_TEST_PAUSED_FILE when it stops, so the test knows when.

    python tests/recovery_driver.py <database url> <GitHub API url> <workdir> <run id> <App private key file>

GitHub is the sandbox the test serves; the App's private key reaches this process in a file.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.edges.git import Identity, Worktree, git
from bot.edges.github.client import GitHubApp
from bot.edges.store.db import make_engine
from bot.runner import orchestrator
from tests.lanes_helpers import RunnerContext, make_settings, run_scripted_agent_plain

IDENTITY = Identity("test", "test@example.com").env()


async def pause_forever() -> None:
    Path(os.environ["LANEBOT_TEST_PAUSED_FILE"]).write_text("paused\n")
    await asyncio.Event().wait()


def install_pause(where: str) -> None:
    real_push = Worktree.push

    async def merge_half_way(self: Worktree, branch_or_sha: str, *args: Any, **kwargs: Any) -> Any:
        await git("merge", "--no-ff", "--no-commit", branch_or_sha, cwd=self.path, env=IDENTITY)
        await pause_forever()

    async def push_then_pause(self: Worktree, branch: str, **kwargs: Any) -> None:
        await real_push(self, branch, **kwargs)
        if branch.startswith("lanebot/") and kwargs.get("expected"):
            await pause_forever()

    if where == "merge":
        Worktree.merge_no_ff = merge_half_way  # type: ignore[method-assign]
    elif where == "pushed":
        Worktree.push = push_then_pause  # type: ignore[method-assign]


async def main(database_url: str, api_url: str, workdir: str, run_id: int, private_key_file: str) -> None:
    install_pause(os.environ.get("LANEBOT_TEST_PAUSE", ""))
    run_scripted_agent_plain()
    engine = make_engine(database_url)
    settings = make_settings(
        Path(workdir).parent,
        database_url,
        api_url,
        workdir=Path(workdir),
        private_key=Path(private_key_file).read_text(),
    )
    async with GitHubApp(settings) as github:
        context = RunnerContext(engine=engine, github=github, settings=settings)
        runs = await orchestrator.recover_runs(context)
        assert run_id in runs, f"run {run_id} was not among the runs to recover: {runs}"
        print(await orchestrator.drive(context, run_id), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
