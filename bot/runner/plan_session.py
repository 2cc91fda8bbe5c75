"""The planner: turn an issue into a validated unit graph, by an agent session or by hand.

The runner side of the plan step. The caller (the plan handler) gives a fresh checkout of the
default branch, its tracked paths and the issue's text; the planner renders the `plan` prompt, runs
the plan agent read-only in the checkout, reads the plan the agent wrote to `.lanebot/units.jsonl`
(or put in its final message), validates it with the core (`bot.core.graph`), and on a refusal runs the
agent again with every reason in the prompt's `failure` block, up to `1 + plan.max_retries`
attempts. A hand-written plan (a fenced `lanebot-plan` block) is validated the same way with no
session at all. The planner posts nothing and runs no git: the caller reports the `PlanOutcome`.

The issue's title, body and comments are untrusted: anyone who can open an issue wrote them.
`sanitize_untrusted` strips what a reader of the issue cannot see (HTML comments, invisible
Unicode) before the text reaches a prompt, and the template fences it as data.

Every session runs in a jail of its own when the caller gives `jail` (bot.runner.jailing.agent_jail,
called once per attempt); when the jail refuses (bubblewrap does not work here and the operator did
not opt out), planning ends at once with that reason, as for a missing binary.

The planner must only read: after every session the checkout (everything but `.git/` and
`.lanebot/`) is compared with its state before the session, by content, and a session that
created, changed or deleted a file fails its attempt with the paths named. The planner does not
undo such changes; the checkout is the caller's to throw away.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.core.graph import Graph
from bot.core.plans import IssueText, PlanAttempt, PlanOutcome, plan_in_message, prompt_context, validate_plan_text
from bot.core.workflow import Workflow
from bot.edges.agents import Agent, AgentConfigError, AgentJail, AgentRequest, make_agent
from bot.edges.files import WorktreeFileError, read_worktree_file
from bot.render.prompts import render_prompt
from bot.runner.jailing import JailRefused

__all__ = ["PLAN_FILE", "plan_issue", "read_plan_file", "remove_plan_file", "snapshot_tree", "tree_changes"]

SCRATCH_DIR = ".lanebot"
PLAN_FILE = f"{SCRATCH_DIR}/units.jsonl"
MAX_PLAN_BYTES = 1024 * 1024
_IGNORED_AT_ROOT = frozenset({".git", SCRATCH_DIR})
_CHANGED_PATHS_SHOWN = 20

# The jail of attempt n (bot.runner.jailing.agent_jail), None for none; raises JailRefused.
JailMaker = Callable[[int], Awaitable[AgentJail | None]]


# --------------------------------------------------------------------------- the issue's text


# --------------------------------------------------------------------------- fenced blocks


# --------------------------------------------------------------------------- tracked paths


# --------------------------------------------------------------------------- outcomes


# --------------------------------------------------------------------------- the prompt


# --------------------------------------------------------------------------- running the planner


async def plan_issue(
    *,
    issue: IssueText,
    workflow: Workflow,
    checkout: Path,
    tracked_paths: Sequence[str],
    transcripts_dir: Path,
    agent: Agent | None = None,
    feedback: str | None = None,
    previous_plan: str | None = None,
    env: Mapping[str, str] | None = None,
    on_session_start: Callable[[int], None] | None = None,
    rules: Sequence[str] = (),
    jail: JailMaker | None = None,
    gate_problems: Callable[[Graph], Sequence[str]] | None = None,
) -> PlanOutcome:
    """Plan `issue` with the plan agent in `checkout`, retrying with every reason until a plan is valid.

    `agent` defaults to `workflow.plan.agent` configured from `workflow.agents`. `feedback` and
    `previous_plan` come from a /replan. `env` is passed to every session; `on_session_start(pid)`
    is called when a session's process starts; `jail(n)` gives attempt n's jail. Transcripts are
    written to `transcripts_dir/plan-attempt-<n>.jsonl`. A missing binary, bad agent settings or a
    refusing jail end planning at once (another attempt would fail the same way). `gate_problems(graph)`
    names why the gate could not show a valid plan whole (bot.render.gate.gate_size_problems): such a
    plan is refused, and the next attempt is told why, like any other invalid plan.
    """
    if not checkout.is_dir():
        raise NotADirectoryError(f"the planner's checkout {checkout} is not a directory")
    tracked = tuple(tracked_paths)
    context = prompt_context(
        issue=issue,
        tracked_paths=tracked,
        max_units=workflow.plan.max_units,
        rules=rules,
        feedback=feedback,
        previous_plan=previous_plan,
    )
    session = _Session(workflow, checkout, tracked, transcripts_dir, dict(env or {}), on_session_start, jail)
    session.gate_problems = gate_problems
    attempts: list[PlanAttempt] = []
    try:
        agent = agent or make_agent(workflow.plan.agent, getattr(workflow.agents, workflow.plan.agent))
    except AgentConfigError as error:
        return PlanOutcome(None, None, (PlanAttempt(1, (), None, str(error)),), "agent")
    tree = await asyncio.to_thread(snapshot_tree, checkout)
    for number in range(1, workflow.plan.max_retries + 2):
        failure = list(attempts[-1].reasons) if attempts else None
        prompt = render_prompt(workflow, "plan", **context, failure=failure)
        attempt, graph, tree = await session.attempt(number, prompt, agent, tree)
        attempts.append(attempt)
        if graph is not None:
            return PlanOutcome(graph, graph.to_jsonl(), tuple(attempts), "agent")
        if session.hopeless:
            break
    return PlanOutcome(None, None, tuple(attempts), "agent")


class _Session:
    """Runs one planner attempt at a time in the checkout, and judges what it left behind."""

    def __init__(
        self,
        workflow: Workflow,
        checkout: Path,
        tracked_paths: tuple[str, ...],
        transcripts_dir: Path,
        env: dict[str, str],
        on_start: Callable[[int], None] | None,
        jail: JailMaker | None = None,
    ) -> None:
        self.workflow = workflow
        self.checkout = checkout
        self.tracked_paths = tracked_paths
        self.transcripts_dir = transcripts_dir
        self.env = env
        self.on_start = on_start
        self.jail = jail
        self.hopeless = False  # set when the agent cannot run at all
        self.gate_problems: Callable[[Graph], Sequence[str]] | None = None

    async def attempt(
        self, number: int, prompt: str, agent: Agent, tree_before: TreeSnapshot
    ) -> tuple[PlanAttempt, Graph | None, TreeSnapshot]:
        remove_plan_file(self.checkout)
        transcript = self.transcripts_dir / f"plan-attempt-{number}.jsonl"
        try:
            request = AgentRequest(
                prompt=prompt,
                cwd=self.checkout,
                transcript=transcript,
                timeout=self.workflow.plan.timeout,
                env=self.env,
                read_only=True,
                jail=None if self.jail is None else await self.jail(number),
            )
            result = await agent.run(request, on_start=self.on_start)
        except (AgentConfigError, JailRefused) as error:  # AgentNotFound included
            self.hopeless = True
            why = f"the planner cannot run: {error}" if isinstance(error, JailRefused) else str(error)
            return PlanAttempt(number, (), transcript if transcript.exists() else None, why), None, tree_before
        tree_after = await asyncio.to_thread(snapshot_tree, self.checkout, tree_before)
        problems = list(_change_problems(tree_before, tree_after))
        if not result.ok:
            why = result.error or f"the {agent.name} agent timed out after {self.workflow.plan.timeout} s"
            return PlanAttempt(number, tuple(problems), transcript, why), None, tree_after
        graph, plan_problems = await asyncio.to_thread(self._judge_plan, result.final_message)
        problems += plan_problems
        attempt = PlanAttempt(number, tuple(problems), transcript, None)
        return attempt, graph if attempt.ok else None, tree_after

    def _judge_plan(self, final_message: str) -> tuple[Graph | None, tuple[str, ...]]:
        text, file_problem = read_plan_file(self.checkout)
        if file_problem is not None:
            return None, (file_problem,)
        if text is None:
            text = plan_in_message(final_message)
        if text is None:
            return None, (
                f"no plan: the session wrote no {PLAN_FILE} and its final message holds no JSONL units;"
                f" write the plan to {PLAN_FILE}, or make the final message the JSONL lines",
            )
        return validate_plan_text(
            text,
            max_units=self.workflow.plan.max_units,
            tracked_paths=self.tracked_paths,
            gate_problems=self.gate_problems,
        )


# --------------------------------------------------------------------------- the plan file


def remove_plan_file(checkout: Path) -> None:
    """Remove `.lanebot/units.jsonl` (and `.lanebot` itself when it is not a real directory).

    Run before every attempt, so a plan left by an earlier session is never read as this one's.
    Links are removed, never followed.
    """
    scratch = checkout / SCRATCH_DIR
    try:
        scratch_mode = os.lstat(scratch).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(scratch_mode):
        scratch.unlink()
        return
    plan = scratch / "units.jsonl"
    if plan.is_dir() and not plan.is_symlink():
        shutil.rmtree(plan)
    else:
        plan.unlink(missing_ok=True)


def read_plan_file(checkout: Path) -> tuple[str | None, str | None]:
    """(the text of `.lanebot/units.jsonl`, None), (None, None) when absent, or (None, why it was refused).

    Only a regular file inside a real `.lanebot` directory is read, never through a link (a link
    could show the gate any file of the runner host), and at most `MAX_PLAN_BYTES`.
    """
    try:
        data = read_worktree_file(checkout, PLAN_FILE, max_bytes=MAX_PLAN_BYTES)
    except WorktreeFileError as error:
        return None, f"{error}; write the plan into {PLAN_FILE}, a regular file of at most {MAX_PLAN_BYTES} bytes"
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return None, f"{PLAN_FILE} is not UTF-8 text (byte {error.start}); write it as UTF-8"


# --------------------------------------------------------------------------- the read-only guard


@dataclass(frozen=True)
class _FileState:
    stat_key: tuple[int, ...]  # changes whenever the file is written (ctime cannot be set back)
    fingerprint: tuple[object, ...]  # what counts as a change: kind, executable bit, content


TreeSnapshot = dict[str, _FileState]


def snapshot_tree(root: Path, previous: TreeSnapshot | None = None) -> TreeSnapshot:
    """The state of every file under `root` but `.git/` and `.lanebot/`, keyed by relative path.

    Content is hashed, except for files whose stat (size, times, inode, mode) is unchanged since
    `previous`: writing a file always updates its ctime, which no process can set back.
    """
    previous = previous or {}
    snapshot: TreeSnapshot = {}
    for relative, entry in _walk_files(root):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            snapshot[relative] = _FileState((), ("unreadable",))
            continue
        key = (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)
        known = previous.get(relative)
        if known is not None and known.stat_key == key:
            snapshot[relative] = known
        else:
            snapshot[relative] = _FileState(key, _fingerprint(Path(entry.path), info.st_mode))
    return snapshot


def _walk_files(root: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    pending = [""]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(root / folder if folder else root))
        except OSError:
            continue  # an unreadable folder: its files show up as deleted
        for entry in entries:
            if not folder and entry.name in _IGNORED_AT_ROOT:
                continue
            relative = f"{folder}/{entry.name}" if folder else entry.name
            if entry.is_dir(follow_symlinks=False):
                pending.append(relative)
            else:
                yield relative, entry


def _fingerprint(path: Path, mode: int) -> tuple[object, ...]:
    if stat.S_ISLNK(mode):
        return ("link", os.readlink(path))
    if not stat.S_ISREG(mode):
        return ("special", stat.S_IFMT(mode))
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1024 * 1024):
                digest.update(chunk)
    except OSError:
        return ("unreadable",)
    return ("file", bool(mode & stat.S_IXUSR), digest.hexdigest())


def tree_changes(before: TreeSnapshot, after: TreeSnapshot) -> dict[str, list[str]]:
    """The paths created, modified and deleted between two snapshots, sorted. Pure."""
    return {
        "created": sorted(after.keys() - before.keys()),
        "modified": sorted(
            path for path in before.keys() & after.keys() if before[path].fingerprint != after[path].fingerprint
        ),
        "deleted": sorted(before.keys() - after.keys()),
    }


def _change_problems(before: TreeSnapshot, after: TreeSnapshot) -> Iterator[str]:
    changes = tree_changes(before, after)
    described = [f"{kind} {_listed(paths)}" for kind, paths in changes.items() if paths]
    if described:
        yield (
            f"the planner must only read the repository, but it {'; '.join(described)}; write nothing but {PLAN_FILE}"
        )


def _listed(paths: list[str]) -> str:
    shown = ", ".join(paths[:_CHANGED_PATHS_SHOWN])
    more = len(paths) - _CHANGED_PATHS_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown
