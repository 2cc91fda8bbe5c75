"""What runs in a lane cannot reach lanebot, and nothing of it outlives the lane.

A plan's unit brings a probe (written by the real Claude Code from the unit's brief) that is both
what the agent runs with its Bash tool and the unit's `check`, which lanebot runs afterwards: it
looks for lanebot's environment (WEBHOOK_SECRET in any process's environment), its private key,
its database, its `.env`, another repository's mirror and another run's worktree in its workdir;
prints what it found, fails if it found anything, and leaves a `setsid` child behind each time it
runs. The repository's `verify` is the probe too.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.e2e.test_real_agents import (
    MAINTAINER,
    REPO,
    config,
    human,
    real_agents,
    source_folder,
    unit,
    wait_for_gate,
    wait_for_pull,
)
from tests.model_server.lanebot import LanebotScenario, session_kind
from tests.process_helpers import gone, processes_with

pytestmark = pytest.mark.slow

# Another repository's mirror and another run's worktree, in lanebot's workdir beside this run's.
OTHER_MIRROR = "{workdir}/mirrors/octo-org/secret-project.git"
OTHER_WORKTREE = "{workdir}/worktrees/octo-org/secret-project/run-9/unit"
PROBE = """\
#!/bin/sh
# Everything lanebot keeps from a lane: prints FOUND for what it can reach, and leaves a child behind.
setsid sh -c 'sleep 300; echo {marker}' >/dev/null 2>&1 </dev/null &
found=0
for file in {key} {database} {env_file}; do
  if [ -s "$file" ]; then echo "FOUND $file"; found=1; fi
done
for file in {other_mirror}/config {other_worktree}/notes.txt; do
  if [ -e "$file" ]; then echo "FOUND $file"; found=1; fi
done
if cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -q '^WEBHOOK_SECRET='; then
  echo "FOUND lanebot's environment"; found=1
fi
echo "probed: found=$found"
exit $found
"""


def test_a_check_an_agents_shell_and_their_setsid_children_find_nothing_of_lanebot_and_do_not_outlive_the_lane(
    tmp_path: Path,
) -> None:
    marker = f"lanebot-probe-{uuid.uuid4().hex[:12]}"
    stack_root = tmp_path / "stack"
    stack_root.mkdir()
    (stack_root / ".env").write_text("WEBHOOK_SECRET=from-the-env-file\n")  # lanebot runs in this folder
    other_mirror = OTHER_MIRROR.format(workdir=stack_root / "lanebot-work")
    other_worktree = OTHER_WORKTREE.format(workdir=stack_root / "lanebot-work")
    probe = PROBE.format(
        marker=marker,
        key=stack_root / "app.private-key.pem",
        database=stack_root / "lanebot.db",
        env_file=stack_root / ".env",
        other_mirror=other_mirror,
        other_worktree=other_worktree,
    )
    scenario = LanebotScenario(plan=[unit("probe", r"^probe\.sh$", "sh probe.sh", {"probe.sh": probe})])
    with real_agents(tmp_path, scenario) as (stack, server):
        assert stack.root == stack_root and (stack_root / "app.private-key.pem").is_file()
        stack.create_repository(
            REPO,
            config=config(review=False).replace("verify: python3 main.py", "verify: sh probe.sh"),  # verify probes too
            source=source_folder(tmp_path),
            maintainers=(MAINTAINER,),
        )
        for planted in (f"{other_mirror}/config", f"{other_worktree}/notes.txt"):
            Path(planted).parent.mkdir(parents=True, exist_ok=True)
            Path(planted).write_text("another run's private code\n")
        number = human(stack).open_issue(REPO, login=MAINTAINER, title="Probe", body="Run the probe.")["number"]
        human(stack).add_label(REPO, number, "lanebot", login=MAINTAINER)
        wait_for_gate(stack, number)
        human(stack).comment(REPO, number, login=MAINTAINER, body="/approve")

        wait_for_pull(stack, number)  # the lane's check passed: lanebot's check run found nothing either

        concluded = {(c["name"], c["conclusion"]) for c in stack.repository(REPO)["check_runs"]}
        assert {("lanebot / probe", "success"), ("lanebot / verify", "success")} <= concluded
        assert not [check for check in concluded if check[1] == "failure"], concluded
        lane_calls = [call for call in server.calls if session_kind(call) == "lane"]
        ran = [outcome.output for call in lane_calls[-1:] for outcome in call.outcomes if outcome.name == "Bash"]
        assert ran and "probed: found=0" in ran[-1] and "FOUND" not in ran[-1], ran
        assert gone(marker, within=10.0), f"the probe's setsid children outlived the lane: {processes_with(marker)}"
