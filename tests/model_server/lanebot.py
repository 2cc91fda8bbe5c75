"""A responder that plays a competent model for every kind of lanebot session.

It decides by lanebot's prompt (bot/workflows/prompts/*.j2): each template opens with a sentence of
its own, which names the session (`session_kind`). What a session does is read from the prompt the
way an agent would, plus what the scenario (`LanebotScenario`) knows and the prompt cannot say:

- plan (plan.md.j2): the final message is the scenario's plan as JSONL (planning is read-only).
- lane (lane.md.j2): writes the files the brief spells out (the recipe blocks, as the `recipe` agent
  reads them: bot/edges/agents/recipe.py), runs the unit's check, then sums up.
- resolve (resolve.md.j2): for each conflicting path, the scenario's resolution, or else the union
  of both sides (ours, then theirs), left unstaged as the prompt asks (lanebot stages).
- integrate (integrate.md.j2): writes `.lanebot/pr.md` (the scenario's title and body), runs verify.
- repair (integrate.md.j2 with "The test command failed"): writes the scenario's `repairs`, runs
  verify again.
- fix (fix.md.j2): for each instruction thread, the first recipe block of a trusted comment is
  written and the thread addressed; a thread without one is not addressed; the `/fix` notes' (or
  the review body's) recipe blocks are written too. Then `.lanebot/fix.json`, then verify.
- review (review.md.j2): `.lanebot/findings.json` with the scenario's findings for the lens.
- refute (refute.md.j2): `.lanebot/verdicts.json`, refuting exactly the ids the scenario names for
  the lens.

A session is a list of steps, one per assistant turn (`ModelCall.turns` says which): the tool
calls of a step run before the next request, and the last reply is text only, which ends the
session. Writing goes through the CLI's own file tool (`WriteFile`); for Claude Code every file is
first `Read` (its Write tool refuses to overwrite a file the session has not read; reading one that
does not exist yet is a harmless error). A prompt it does not recognise gets a reply saying so, so
the session's outcome shows what went wrong.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.edges.agents.recipe import parse_recipe
from tests.model_server.anthropic import working_directory
from tests.model_server.script import Action, ModelCall, Reply, RunCommand, ToolOutcome, ToolUse, WriteFile

SessionKind = Literal["plan", "lane", "resolve", "integrate", "repair", "fix", "review", "refute"]
SESSION_KINDS: tuple[SessionKind, ...] = ("plan", "lane", "resolve", "integrate", "repair", "fix", "review", "refute")

# The sentence each template opens with (stable: it says what the session is).
OPENINGS: tuple[tuple[str, SessionKind], ...] = (
    ("You are the planner for lanebot.", "plan"),
    ("You are one lane of lanebot:", "lane"),
    ("You are resolving a merge conflict for lanebot.", "resolve"),
    ("You are the integrator for lanebot.", "integrate"),
    ("You are a fix lane of lanebot:", "fix"),
    ("You are a verifier for lanebot, reviewing pull request", "review"),
    ("verifier of lanebot's own review of the pull request", "refute"),
)
REPAIR_HEADING = "## The test command failed"
UNKNOWN = "The scripted lanebot model does not recognise this prompt"

_FENCE_OPEN = re.compile(r"^(`{3,})([^`\n]*)$")
_THREAD = re.compile(r"^### Thread (\d+): `([^`\n]*)`", re.MULTILINE)
_TRUSTED = re.compile(r"^@\S+ \(\*\*trusted\*\*, an instruction\):$", re.MULTILINE)
_LENS = re.compile(r"through one lens:\s*\*\*([a-z]+)\*\*")
_JUDGE_LENS = re.compile(r"You are the \*\*([a-z]+)\*\* verifier")
_FINDING = re.compile(r"^### `([a-z]+-[0-9]+)`", re.MULTILINE)
_UNIT = re.compile(r"^## Your unit: `([^`]+)`", re.MULTILINE)


@dataclass(frozen=True)
class Finding:
    """What a lens reports (the findings.json schema, bot/core/findings.py)."""

    file: str
    line: int
    claim: str
    evidence: str
    severity: Literal["low", "medium", "high"] = "medium"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "claim": self.claim,
            "evidence": self.evidence,
            "severity": self.severity,
        }


@dataclass(frozen=True)
class LanebotScenario:
    """What the model knows beyond the prompt.

    plan: the units the planner answers with (the plan format of bot/core/plans.py).
    resolutions: path -> the content a resolver writes for it (otherwise: ours, then theirs).
    pr_title, pr_body: what the integrator writes to `.lanebot/pr.md`.
    repairs: path -> content a repair session writes (what it knows is broken after a failed verify).
    findings: lens -> what that lens reports; refute: lens -> the finding ids it refutes.
    """

    plan: Sequence[Mapping[str, Any]] = ()
    resolutions: Mapping[str, str] = field(default_factory=dict)
    pr_title: str = "Do what the issue asks"
    pr_body: str = "The units' work, joined; verify passes."
    repairs: Mapping[str, str] = field(default_factory=dict)
    findings: Mapping[str, Sequence[Finding]] = field(default_factory=dict)
    refute: Mapping[str, Collection[str]] = field(default_factory=dict)


def session_kind(call: ModelCall) -> SessionKind | None:
    """Which lanebot session sent `call`, by its prompt; None for a prompt lanebot did not write."""
    for opening, kind in OPENINGS:
        if opening in call.prompt:
            if kind == "integrate" and REPAIR_HEADING in call.prompt:
                return "repair"
            return kind
    return None


def kinds_seen(calls: Sequence[ModelCall]) -> list[SessionKind | None]:
    """The kind of every session in `calls`, in order: one entry per session's first request."""
    return [session_kind(call) for call in calls if call.turns == 0]


class LanebotModel:
    """The responder (tests/model_server/script.py `Responder`) for `scenario`."""

    def __init__(self, scenario: LanebotScenario) -> None:
        self.scenario = scenario

    def __call__(self, call: ModelCall) -> Reply:
        kind = session_kind(call)
        if kind is None:
            return Reply(text=f"{UNKNOWN}: {call.prompt[:200]!r}")
        steps = getattr(self, f"_{kind}")(call)
        actions = [step for step in steps if step]
        if call.turns < len(actions):
            return Reply(actions=tuple(actions[call.turns]))
        if kind == "plan":
            return Reply(text="".join(json.dumps(dict(unit)) + "\n" for unit in self.scenario.plan))
        return Reply(text=final_message(kind, call))

    # -- one method per session kind: the tool calls of each turn, in order

    def _plan(self, call: ModelCall) -> list[list[Action]]:
        return []  # read-only: the plan is the final message (see __call__)

    def _lane(self, call: ModelCall) -> list[list[Action]]:
        brief = first_block(after(call.prompt, "These are your instructions:")) or ""
        check = first_block(section(call.prompt, "## How your unit is checked")) or "true"
        recipe = parse_recipe(brief)
        writes = {block.path: block.content for block in recipe.blocks if not block.delete}
        deletes = [block.path for block in recipe.blocks if block.delete]
        removing: list[Action] = [RunCommand(f"rm -f -- {' '.join(map(shlex.quote, deletes))}")] if deletes else []
        return [*edit_steps(call, writes), removing, [RunCommand(check)]]

    def _resolve(self, call: ModelCall) -> list[list[Action]]:
        paths = (first_block(section(call.prompt, "## The conflicting paths")) or "").splitlines()
        commands: list[Action] = []
        for path in filter(None, paths):
            quoted = shlex.quote(path)
            if path in self.scenario.resolutions:
                commands.append(RunCommand(write_command(path, self.scenario.resolutions[path])))
            else:
                commands.append(RunCommand(f"{{ git show :2:{quoted}; git show :3:{quoted}; }} > {quoted}.union"))
                commands.append(RunCommand(f"mv -- {quoted}.union {quoted}"))
        return [commands]

    def _integrate(self, call: ModelCall) -> list[list[Action]]:
        verify = first_block(after(call.prompt, "Run the repository's full test command")) or "true"
        pr = {".lanebot/pr.md": f"{self.scenario.pr_title}\n\n{self.scenario.pr_body}\n"}
        return [*edit_steps(call, pr), [RunCommand(verify)]]

    def _repair(self, call: ModelCall) -> list[list[Action]]:
        verify = first_block(after(call.prompt, "Run the repository's full test command")) or "true"
        return [*edit_steps(call, dict(self.scenario.repairs)), [RunCommand(verify)]]

    def _fix(self, call: ModelCall) -> list[list[Action]]:
        writes: dict[str, str] = {}
        asked = section(call.prompt, "## What @")
        if "(trusted):" in asked:
            writes.update(recipe_files(first_block(after(asked, "(trusted):")) or ""))
        addressed: list[dict[str, Any]] = []
        not_addressed: list[dict[str, Any]] = []
        for thread, path, text in fix_threads(call.prompt):
            suggestion = next((files for files in map(recipe_files, trusted_comments(text)) if files), None)
            if suggestion is None:
                not_addressed.append({"thread": thread, "why": f"it spells out no change to {path}"})
                continue
            writes.update(suggestion)
            addressed.append({"thread": thread, "change": f"rewrote {', '.join(sorted(suggestion))} as suggested"})
        report = {
            "summary": "Made the changes the review spelled out.",
            "addressed": addressed,
            "not_addressed": not_addressed,
        }
        verify = first_block(section(call.prompt, "## How your work is checked")) or "true"
        writes[".lanebot/fix.json"] = json.dumps(report, indent=2) + "\n"
        return [*edit_steps(call, writes), [RunCommand(verify)]]

    def _review(self, call: ModelCall) -> list[list[Action]]:
        found = _LENS.search(call.prompt)
        lens = found.group(1) if found else ""
        findings = [finding.to_json() for finding in self.scenario.findings.get(lens, ())]
        report = json.dumps({"looked_at": [], "findings": findings}, indent=2) + "\n"
        return [[RunCommand("git diff --stat HEAD")], *edit_steps(call, {".lanebot/findings.json": report})]

    def _refute(self, call: ModelCall) -> list[list[Action]]:
        found = _JUDGE_LENS.search(call.prompt)
        lens = found.group(1) if found else ""
        refuted = set(self.scenario.refute.get(lens, ()))
        verdicts = [
            {
                "finding": finding,
                "refute": finding in refuted,
                "reason": "the code shows otherwise" if finding in refuted else "checked the file: it holds",
            }
            for finding in _FINDING.findall(call.prompt)
        ]
        report = json.dumps({"verdicts": verdicts}, indent=2) + "\n"
        return edit_steps(call, {".lanebot/verdicts.json": report})


# --------------------------------------------------------------------------- the final message


def final_message(kind: SessionKind, call: ModelCall) -> str:
    """What a session that changes files ends with: what it did, and which tool calls failed."""
    failed = [outcome for outcome in call.outcomes if outcome.is_error and outcome.name != "Read"]
    unit = _UNIT.search(call.prompt)
    who = f"unit `{unit.group(1)}`" if unit else f"the {kind} session"
    done = f"Done with {who}: {len(call.outcomes)} tool call(s)."
    if not failed:
        return done
    return done + " These failed:\n" + "\n".join(f"- {describe(outcome)}" for outcome in failed)


def describe(outcome: ToolOutcome) -> str:
    return f"{outcome.name}: {outcome.output.strip()[-400:]}"


# --------------------------------------------------------------------------- editing files


def edit_steps(call: ModelCall, files: Mapping[str, str]) -> list[list[Action]]:
    """The turns that write `files`: for Claude Code a turn of `Read`s first (its Write tool
    overwrites only a file the session has read), then the writes, in one turn."""
    if not files:
        return []
    writes: list[Action] = [WriteFile(path, content) for path, content in files.items()]
    cwd = working_directory(call.raw)
    if call.api == "anthropic" and "Read" in call.tools and cwd is not None:
        reads: list[Action] = [ToolUse("Read", {"file_path": posixpath.join(cwd, path)}) for path in files]
        return [reads, writes]
    return [writes]


def write_command(path: str, content: str) -> str:
    """A shell command that writes `content` to `path` exactly."""
    folder = posixpath.dirname(path)
    make = f"mkdir -p -- {shlex.quote(folder)} && " if folder else ""
    return f"{make}printf '%s' {shlex.quote(content)} > {shlex.quote(path)}"


# --------------------------------------------------------------------------- reading lanebot's prompts


def section(text: str, heading: str) -> str:
    """From the line starting `heading` to the next `## ` heading ('' when there is none)."""
    start = text.find(heading)
    if start < 0:
        return ""
    rest = text[start + len(heading) :]
    end = re.search(r"^## ", rest, re.MULTILINE)
    return rest[: end.start()] if end else rest


def after(text: str, marker: str) -> str:
    start = text.find(marker)
    return "" if start < 0 else text[start + len(marker) :]


def blocks(text: str) -> list[tuple[str, str]]:
    """The top-level fenced blocks of `text` as lanebot's `fence` writes them: (info, content)."""
    found: list[tuple[str, str]] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        opening = _FENCE_OPEN.match(lines[index])
        if opening is None:
            index += 1
            continue
        marks = opening.group(1)
        end = next((i for i in range(index + 1, len(lines)) if lines[i] == marks), None)
        if end is None:
            break
        found.append((opening.group(2).strip(), "\n".join(lines[index + 1 : end])))
        index = end + 1
    return found


def first_block(text: str) -> str | None:
    found = blocks(text)
    return found[0][1] if found else None


def recipe_files(text: str) -> dict[str, str]:
    """path -> content of the recipe blocks (```lang path=...) in `text`."""
    return {block.path: block.content for block in parse_recipe(text).blocks if not block.delete}


def fix_threads(prompt: str) -> list[tuple[int, str, str]]:
    """The instruction threads of a fix prompt: (thread id, path, its text)."""
    threads = section(prompt, "## The threads to address")
    matches = list(_THREAD.finditer(threads))
    return [
        (int(match.group(1)), match.group(2), threads[match.end() : nxt.start() if nxt else len(threads)])
        for match, nxt in zip(matches, [*matches[1:], None])
    ]


def trusted_comments(thread_text: str) -> list[str]:
    """The bodies of a thread's trusted comments (each is fenced right after its author line)."""
    return [first_block(thread_text[match.end() :]) or "" for match in _TRUSTED.finditer(thread_text)]
