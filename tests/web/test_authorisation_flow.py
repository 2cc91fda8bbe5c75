"""Who may command lanebot, through the sandbox GitHub: a list of approvers is matched by account id and
still needs write, and a change of access that GitHub reports is seen by the very next command.

The app, the sandbox and the people are those of test_issue_flow (its `world`). The sandbox sends
`member` events when an admin changes a collaborator (bot.sandbox.human), and renames people as
github.com does (the id stays; the old login is free for someone else). Every command here is
`/status`: obeyed, it answers that the issue has no run; refused, it answers why.
"""

from __future__ import annotations

import pytest

from tests.web import test_issue_flow as issue_flow
from tests.web.test_issue_flow import REPO, REPOSITORY_CONFIG, World

pytestmark = pytest.mark.anyio

# test_issue_flow's fixtures, used here as they are there.
planner_state = issue_flow.planner_state
host_workflows = issue_flow.host_workflows
world = issue_flow.world

OBEYED = "This issue has no lanebot run"


def listing(world: World, tmp_path, *approvers: str) -> None:
    config = REPOSITORY_CONFIG + "gate:\n  approvers: [" + ", ".join(approvers) + "]\n"
    world.github.repository.commit({".github/lanebot.yml": config}, "Name the approvers", tmp_path / "scratch")


async def status_by(world: World, login: str) -> str:
    """`login`'s `/status` comment, and lanebot's answer to it."""
    before = len(world.github.answers())
    await world.comment("/status", login=login)
    [answer] = world.github.answers()[before:]
    assert f"@{login}" in answer
    return answer


async def admin(world: World, change) -> None:
    """An admin changes collaborators on github.com; GitHub's `member` event reaches lanebot."""
    change(world.github.repository.human)
    await world.settled()


async def test_a_listed_login_renamed_and_registered_by_someone_else_does_not_obey_the_newcomer(world, tmp_path):
    listing(world, tmp_path, "ana")
    await admin(world, lambda human: human.add_collaborator(REPO, "ana", "write"))
    assert OBEYED in await status_by(world, "ana")

    world.github.repository.human.rename_user("ana", "ana-moved")
    await admin(world, lambda human: human.add_collaborator(REPO, "ana", "write"))  # a newcomer takes "ana"

    refused = await status_by(world, "ana")
    assert "only the approvers listed in gate.approvers" in refused and "not by login" in refused
    assert OBEYED in await status_by(world, "ana-moved")  # the person the list named, under their new login


async def test_a_listed_login_that_lost_write_access_is_refused_at_its_next_command(world, tmp_path):
    listing(world, tmp_path, "ana")
    await admin(world, lambda human: human.add_collaborator(REPO, "ana", "write"))
    assert OBEYED in await status_by(world, "ana")

    await admin(world, lambda human: human.add_collaborator(REPO, "ana", "read"))

    refused = await status_by(world, "ana")
    assert "you are listed in gate.approvers, but commanding lanebot here also needs the write role" in refused
    assert "your role is read" in refused


async def test_a_member_removed_event_refuses_the_next_command_at_once_not_a_minute_later(world):
    await admin(world, lambda human: human.add_collaborator(REPO, "writer", "write"))
    assert OBEYED in await status_by(world, "writer")  # the role is now cached for a minute

    await admin(world, lambda human: human.remove_collaborator(REPO, "writer"))

    refused = await status_by(world, "writer")  # at once: the event dropped the cached role
    assert "commanding lanebot here needs the write role or higher, and your role is read" in refused
