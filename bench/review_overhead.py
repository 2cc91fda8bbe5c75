"""What lanebot adds around a fix lane's agent session, from a review to its answers.

Through the real stack (bot/demo/stack.py: the sandbox GitHub and `lanebot serve` as processes):
a pull request opened by a one-unit run, then `--rounds` times a maintainer submits a review that
requests changes with one inline suggestion; a scripted agent (tests/agents_fixtures/review_agent.py
through the `command` adapter) works `--work` seconds and applies it. For each round:

- total: from the review's submission (the bench's clock, before the POST) until lanebot marked the
  request done (its row): the webhook, the queue, the threads read (REST and GraphQL), the
  worktree, the agent, verify (`true`), the leased push, a verify check run, the replies, the
  review re-requested and the summary comment;
- agent: the fix session's own span (its agent_sessions row);
- overhead: total minus agent, and the ratio total / agent.

The previous round's thread is resolved before the next review, so each round has one thread.

    .venv/bin/python bench/review_overhead.py [--rounds 5] [--work 2.0]

Prints a Markdown table. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot.demo.stack import Stack  # noqa: E402
from bot.edges.store import reviews, runs  # noqa: E402
from bot.edges.store.db import make_engine  # noqa: E402
from bot.runner.plan import issue_run  # noqa: E402
from tests.lanes_helpers import make_workflow_dir  # noqa: E402

REPO = "octo-org/bench"
MAINTAINER = "maintainer"
AGENT = ROOT / "tests" / "agents_fixtures" / "review_agent.py"
CONFIG = (
    "build:\n  agent: recipe\n  max_retries: 0\n"
    'integrate:\n  agent: recipe\n  verify: "true"\n  max_retries: 0\n'
    "pull_request:\n  draft: false\n"
    "fix:\n  agent: command\n  max_retries: 0\n  timeout: 5m\n"
    "review:\n  enabled: false\n"
)
UNIT = {
    "id": "words",
    "title": "Words",
    "needs": [],
    "files": r"^greeting\.txt$",
    "check": "true",
    "brief": "Write it.\n\n```text path=greeting.txt\nhello\n```",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", type=float, default=2.0, help="seconds the scripted agent works per session")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lanebot-bench-") as folder:
        root = Path(folder)
        script = root / "agent-script.json"
        script.write_text(json.dumps({"fix_works_for": args.work}))
        workflows = make_workflow_dir(root, {}, [sys.executable, str(AGENT), str(script)])
        with Stack(root / "stack", lanebot_env={"LANEBOT_WORKFLOWS_DIR": str(workflows)}) as stack:
            rows = measure(stack, args.rounds)
    print_table(rows, args.work)


def measure(stack: Stack, rounds: int) -> list[tuple[float, float]]:
    stack.create_repository(REPO, config=CONFIG, maintainers=(MAINTAINER,))
    body = f"Bench.\n\n~~~lanebot-plan\n{json.dumps(UNIT)}\n~~~\n"
    number = stack.human.open_issue(REPO, login=MAINTAINER, title="Bench", body=body)["number"]
    stack.human.add_label(REPO, number, "lanebot", login=MAINTAINER)
    engine = make_engine(stack.database_url)
    try:
        run = stack.wait_for("the gate", lambda: issue_run(engine, REPO, number), timeout=120)
        stack.wait_for(
            "awaiting approval", lambda: issue_run(engine, REPO, number).state == "awaiting_approval", timeout=120
        )
        stack.human.comment(REPO, number, login=MAINTAINER, body="/approve")
        run = stack.wait_for(
            "the pull request", lambda: (r := issue_run(engine, REPO, number)).pr_number and r, timeout=240
        )
        rows = []
        for index in range(rounds):
            suggestion = f"Please:\n\n```text path=greeting.txt\nhello {index}\n```"
            started = time.time()
            stack.human.review(
                REPO,
                run.pr_number,
                login=MAINTAINER,
                event="REQUEST_CHANGES",
                body="Again.",
                comments=[{"path": "greeting.txt", "line": 1, "body": suggestion}],
            )
            done = stack.wait_for(
                f"round {index + 1}", lambda index=index: _done(engine, run.id, index + 1), timeout=240, poll=0.02
            )
            ended = time.time()
            session = [s for s in runs.sessions(engine, run.id) if s.kind == "fix"][-1]
            rows.append((ended - started, (session.ended_at - session.started_at).total_seconds()))
            root = next(c for c in stack.repository(REPO)["review_comments"] if c["body"] == suggestion)
            stack.human.resolve_thread(REPO, root["id"], login=MAINTAINER)
            assert done.state == "done", done.error
        return rows
    finally:
        engine.dispose()


def _done(engine, run_id: int, count: int):
    found = [r for r in reviews.requests(engine, run_id) if r.state in ("done", "failed")]
    return found[-1] if len(found) >= count else None


def print_table(rows: list[tuple[float, float]], work: float) -> None:
    totals, agents = [r[0] for r in rows], [r[1] for r in rows]
    overheads = [t - a for t, a in rows]
    ratios = [t / a for t, a in rows]
    print(
        "| rounds | agent work | total, median (range) | agent session, median | lanebot's overhead, median "
        "(range) | total / agent |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {len(rows)} | {work:.1f} s | {statistics.median(totals):.2f} s ({min(totals):.2f}–{max(totals):.2f}) | "
        f"{statistics.median(agents):.2f} s | {statistics.median(overheads):.2f} s "
        f"({min(overheads):.2f}–{max(overheads):.2f}) | {statistics.median(ratios):.2f}× |"
    )


if __name__ == "__main__":
    main()
