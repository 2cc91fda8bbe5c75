"""The progress edits of a run follow its state label only when the label would change (issue 17).

Running and integrating show the same label, so the edit after a run moves from one to the other
reads no labels; a move to another label (done) reads them and writes the new one. Against the
sandbox GitHub, whose request log is what is counted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.edges.github.client import GitHubApp
from bot.edges.store import runs as store
from bot.edges.store.db import make_engine, migrate
from bot.runner import orchestrator
from tests.lanes_helpers import ISSUE, OWNER, REPO, RunnerContext, approved_run, make_settings, unit
from tests.sandbox_helpers import SandboxRepository, served_sandbox

pytestmark = pytest.mark.slow

LABELS = f"/repos/{OWNER}/{REPO}/issues/{ISSUE}/labels"


def label_requests(github: SandboxRepository) -> list[str]:
    return [method for method, path, _ in github.api_requests() if path == LABELS]


@pytest.mark.anyio
async def test_an_edit_reads_the_labels_only_when_the_state_moved_to_another_label(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lanebot.db'}"
    engine = make_engine(url)
    migrate(engine)
    (tmp_path / "project").mkdir()
    with served_sandbox(tmp_path) as server:
        github = SandboxRepository.create(server, tmp_path / "project", f"{OWNER}/{REPO}", {"README.md": "# t\n"})
        assert github.open_issue("Status", "", login="maintainer", role="admin") == ISSUE
        settings = make_settings(tmp_path, url, server.url)
        run_id = approved_run(engine, [unit("notes", "^notes/", "true")])
        async with GitHubApp(settings) as app:
            progress = orchestrator._Progress(RunnerContext(engine=engine, github=app, settings=settings), run_id)

            assert await progress.publish()
            assert label_requests(github) == ["GET", "POST"]  # the first edit gives the running label
            assert store.transition(engine, run_id, "running", "integrating")
            assert await progress.publish()
            assert label_requests(github) == ["GET", "POST"]  # integrating shows the same label
            assert store.transition(engine, run_id, "integrating", "done")
            assert await progress.publish()
            assert label_requests(github)[2:] == ["GET", "PUT"]  # done: read, then swap

        assert github.labels(ISSUE) == ["lanebot:done"]
        github.close()
    engine.dispose()
