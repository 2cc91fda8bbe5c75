"""The planner: turn an issue into a validated unit graph, by an agent session or by hand.

The runner side of the plan step. The caller (the plan handler) gives a fresh checkout of the
default branch, its tracked paths and the issue's text; the planner renders the `plan` prompt, runs
the plan agent read-only in the checkout, reads the plan the agent wrote to `.lanebot/units.jsonl`
(or put in its final message), validates it with the core (`bot.graph`), and on a refusal runs the
agent again with every reason in the prompt's `failure` block, up to `1 + plan.max_retries`
attempts. A hand-written plan (a fenced `lanebot-plan` block) is validated the same way with no
session at all. The planner posts nothing and runs no git: the caller reports the `PlanOutcome`.

The issue's title, body and comments are untrusted: anyone who can open an issue wrote them.
`sanitize_untrusted` strips what a reader of the issue cannot see (HTML comments, invisible
Unicode) before the text reaches a prompt, and the template fences it as data.

The planner must only read: after every session the checkout (everything but `.git/` and
`.lanebot/`) is compared with its state before the session, by content, and a session that
created, changed or deleted a file fails its attempt with the paths named. The planner does not
undo such changes; the checkout is the caller's to throw away.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import os
import re
import shutil
import stat
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bot.agents import Agent, AgentConfigError, AgentRequest, make_agent
from bot.graph import Graph, InvalidPlan, PlanSyntaxError, build_graph, parse_units
from bot.workflow import Workflow

__all__ = [
    "PLAN_FILE",
    "CommentText",
    "IssueText",
    "PlanAttempt",
    "PlanOutcome",
    "extract_hand_plan",
    "plan_from_hand",
    "plan_in_message",
    "plan_issue",
    "prompt_context",
    "read_plan_file",
    "remove_plan_file",
    "sanitize_untrusted",
    "snapshot_tree",
    "strip_invisible",
    "summarise_paths",
    "tree_changes",
    "validate_plan_text",
]

SCRATCH_DIR = ".lanebot"
PLAN_FILE = f"{SCRATCH_DIR}/units.jsonl"
MAX_PLAN_BYTES = 1024 * 1024
HAND_PLAN_INFO = "lanebot-plan"
_MESSAGE_PLAN_INFOS = frozenset({"jsonl", "json", "ndjson", HAND_PLAN_INFO})
_IGNORED_AT_ROOT = frozenset({".git", SCRATCH_DIR})
_CHANGED_PATHS_SHOWN = 20


# --------------------------------------------------------------------------- the issue's text


@dataclass(frozen=True)
class CommentText:
    """One comment on the issue, as the prompt shows it."""

    author: str
    body: str


@dataclass(frozen=True)
class IssueText:
    """The issue as the planner sees it. The caller chooses the comments (lanebot's own left out)."""

    number: int
    title: str
    body: str
    comments: tuple[CommentText, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "comments", tuple(self.comments))


# HTML comments are invisible on GitHub but not to an agent. `<!-->` and `<!--->` are complete
# (empty) comments in CommonMark; an unclosed one hides everything after it, so it goes to the end.
_HTML_COMMENT = re.compile(r"<!--(?:-?>|.*?-->)|<!--.*\Z", re.DOTALL)

# Characters that render as nothing (or as blank filler) although they are not format characters.
_INVISIBLE_RANGES = (
    (0x034F, 0x034F),  # combining grapheme joiner (Mn)
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers (Lo)
    (0x17B4, 0x17B5),  # Khmer inherent vowels (Mn)
    (0x180B, 0x180F),  # Mongolian free variation selectors (Mn) and vowel separator (Cf)
    (0x3164, 0x3164),  # Hangul filler (Lo)
    (0xFE00, 0xFE0F),  # variation selectors (Mn)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler (Lo)
    (0xE0000, 0xE007F),  # the tags block, unassigned code points included
    (0xE0100, 0xE01EF),  # variation selectors supplement (Mn)
)
# Cf: format characters - zero-width space/joiners, LRM/RLM, bidi embeddings and overrides
#     (U+202A-202E), isolates (U+2066-2069), word joiner, invisible operators, soft hyphen, BOM,
#     interlinear annotations, tag characters.
# Cc: control characters (tab and newline are kept; carriage returns become newlines first).
# Cs: lone surrogates, which cannot even be encoded into the prompt.
_REMOVED_CATEGORIES = frozenset({"Cf", "Cc", "Cs"})
_NEWLINES = re.compile(r"\r\n?|[\u2028\u2029\x85]")


def sanitize_untrusted(text: str) -> str:
    """`text` without what a reader of it on GitHub cannot see: HTML comments and invisible characters.

    Removed: HTML comments (`<!-- ... -->`, also inside code, and an unclosed one to the end of the
    text), then every character `strip_invisible` removes. Kept: all visible text, spaces, tabs and
    newlines (CR, CRLF, NEL and the Unicode line/paragraph separators become newlines).
    """
    return strip_invisible(_HTML_COMMENT.sub("", text))


def strip_invisible(text: str) -> str:
    """`text` without invisible characters, its line breaks made `\\n`.

    Removed: Unicode categories Cf (format), Cc (control, except tab and newline) and Cs
    (surrogates), and the invisible characters of other categories listed in `_INVISIBLE_RANGES`
    (variation selectors, the whole tags block, Hangul fillers, the combining grapheme joiner).
    """
    return "".join(char for char in _NEWLINES.sub("\n", text) if _is_kept(char))


@functools.lru_cache(maxsize=8192)
def _is_kept(char: str) -> bool:
    if char in "\n\t":
        return True
    code = ord(char)
    if any(low <= code <= high for low, high in _INVISIBLE_RANGES):
        return False
    return unicodedata.category(char) not in _REMOVED_CATEGORIES


# --------------------------------------------------------------------------- fenced blocks

_OPENING_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<marks>`{3,}|~{3,})(?P<info>.*)$")
_HTML_COMMENT_START = re.compile(r"^ {0,3}<!--")


@dataclass(frozen=True)
class _FencedBlock:
    info: str  # the first word of the info string, lowercased ("" when there is none)
    content: str


def _fenced_blocks(text: str) -> Iterator[_FencedBlock]:
    """The top-level fenced code blocks of Markdown `text`, as CommonMark reads them.

    A fence is 3 or more backticks or tildes indented by at most 3 spaces; it is closed by a line of
    the same character, at least as long, and nothing else; an unclosed block runs to the end.
    Fences inside an HTML comment block (a line starting with `<!--`, up to its `-->`) do not count:
    GitHub shows nothing of them.
    """
    lines = _NEWLINES.sub("\n", text).split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if _HTML_COMMENT_START.match(line):
            index = _end_of_html_comment(lines, index) + 1
            continue
        opening = _OPENING_FENCE.match(line)
        if opening is None or (opening["marks"][0] == "`" and "`" in opening["info"]):
            index += 1
            continue
        closing = _closing_fence_index(lines, index + 1, opening["marks"])
        indent = len(opening["indent"])
        content = [_outdent(body_line, indent) for body_line in lines[index + 1 : closing]]
        words = opening["info"].split()
        yield _FencedBlock(info=words[0].lower() if words else "", content="\n".join(content))
        index = closing + 1


def _end_of_html_comment(lines: list[str], start: int) -> int:
    first = lines[start]
    if "-->" in first[first.index("<!--") + 4 :]:
        return start
    for index in range(start + 1, len(lines)):
        if "-->" in lines[index]:
            return index
    return len(lines)


def _closing_fence_index(lines: list[str], start: int, marks: str) -> int:
    closing = re.compile(rf"^ {{0,3}}{re.escape(marks[0])}{{{len(marks)},}}[ \t]*$")
    for index in range(start, len(lines)):
        if closing.match(lines[index]):
            return index
    return len(lines)


def _outdent(line: str, indent: int) -> str:
    spaces = len(line) - len(line.lstrip(" "))
    return line[min(spaces, indent) :]


def extract_hand_plan(text: str) -> str | None:
    """The content of the first fenced `lanebot-plan` block in `text` (an issue body or a /plan comment).

    Backtick or tilde fences of any length >= 3 are read as GitHub renders them; a block hidden in
    an HTML comment or quoted (`> `) is not taken. None when there is no such block.
    """
    for block in _fenced_blocks(text):
        if block.info == HAND_PLAN_INFO:
            return block.content
    return None


def plan_in_message(message: str) -> str | None:
    """The plan an agent put in its final message, or None when it holds none.

    In order: the last fenced block marked `jsonl`, `json`, `ndjson` or `lanebot-plan`; else the
    last unmarked fenced block that starts like JSON; else the whole message when it is a JSON
    array; else the message's lines that start with `{` (bare JSONL among prose).
    """
    blocks = list(_fenced_blocks(message))
    marked = [block.content for block in blocks if block.info in _MESSAGE_PLAN_INFOS]
    if marked:
        return marked[-1]
    unmarked = [block.content for block in blocks if not block.info and block.content.lstrip()[:1] in ("{", "[")]
    if unmarked:
        return unmarked[-1]
    stripped = message.strip()
    if stripped.startswith("["):
        return stripped
    objects = [line for line in message.split("\n") if line.lstrip().startswith("{")]
    return "\n".join(objects) if objects else None


# --------------------------------------------------------------------------- tracked paths


def summarise_paths(paths: Sequence[str], limit: int = 400) -> list[str] | str:
    """The tracked paths for the prompt: all of them when there are at most `limit`, else a summary.

    The summary groups paths by directory, at the deepest level that still gives at most `limit`
    groups, each line naming the directory, how many paths it holds and a few of them. It has at
    most `limit` + 1 lines of bounded length, whatever the number of paths, and its counts add up
    to the number of paths.
    """
    if limit < 1:
        raise ValueError(f"the path limit must be at least 1, got {limit}")
    unique = sorted(set(paths))
    if len(unique) <= limit:
        return unique
    cuts = _deepest_cuts(unique, limit)
    counts = Counter(path[: cut + 1] for path, cut in zip(unique, cuts))
    if len(counts) <= limit:
        shown = sorted(counts)
    else:  # even the top level has too many entries: show the biggest, count the rest
        shown = sorted(heapq.nsmallest(limit - 1, counts, key=lambda name: (-counts[name], name)))
    samples = _samples(unique, cuts, set(shown))
    lines = [
        f"{len(unique)} tracked paths, too many to list: grouped by directory, each with how many"
        " paths it holds and a few of them. Look in the repository for the rest."
    ]
    lines += [_group_line(name, counts[name], samples.get(name, [])) for name in shown]
    if len(shown) < len(counts):
        hidden_paths = len(unique) - sum(counts[name] for name in shown)
        lines.append(f"... and {len(counts) - len(shown)} more entries holding {hidden_paths} paths")
    return "\n".join(lines)


_MAX_GROUP_DEPTH = 12
_SAMPLES_PER_GROUP = 3
_SHOWN_NAME_CHARS = 120


def _deepest_cuts(paths: list[str], limit: int) -> list[int]:
    """For each path, where its group's name ends (a slash, or the path's end), at the deepest
    directory level that gives at most `limit` groups (the top level when none does)."""
    cuts = [_next_cut(path, -1) for path in paths]
    for _ in range(2, _MAX_GROUP_DEPTH + 1):
        deeper = [_next_cut(path, cut) for path, cut in zip(paths, cuts)]
        if deeper == cuts or len({path[: cut + 1] for path, cut in zip(paths, deeper)}) > limit:
            break
        cuts = deeper
    return cuts


def _next_cut(path: str, after: int) -> int:
    slash = path.find("/", after + 1)
    return len(path) if slash < 0 else slash


def _samples(paths: list[str], cuts: list[int], wanted: set[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path, cut in zip(paths, cuts):
        name, rest = path[: cut + 1], path[cut + 1 :]
        if rest and name in wanted:
            kept = found.setdefault(name, [])
            if len(kept) < _SAMPLES_PER_GROUP:
                kept.append(rest)
    return found


def _group_line(name: str, count: int, samples: list[str]) -> str:
    if not samples:
        return _shortened(name)
    listed = ", ".join(_shortened(sample) for sample in samples)
    more = ", ..." if count > len(samples) else ""
    return f"{_shortened(name)} ({count} path{'s' * (count != 1)}: {listed}{more})"


def _shortened(text: str) -> str:
    if len(text) <= _SHOWN_NAME_CHARS:
        return text
    half = (_SHOWN_NAME_CHARS - 3) // 2
    return f"{text[:half]}...{text[-half:]}"


# --------------------------------------------------------------------------- outcomes


@dataclass(frozen=True)
class PlanAttempt:
    """One planner session (or one hand-written plan): why it was refused, if it was."""

    attempt: int  # 1-based
    problems: tuple[str, ...]  # validation problems, and changes the session made to the checkout
    transcript: Path | None  # the session's transcript; None for a hand plan or a session never started
    error: str | None  # why the session itself failed (crash, timeout, missing binary), if it did

    @property
    def ok(self) -> bool:
        return not self.problems and self.error is None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the attempt failed, one line each: its problems, then its error."""
        failed = (f"the planner session failed: {self.error}",) if self.error else ()
        return self.problems + failed


@dataclass(frozen=True)
class PlanOutcome:
    """The result of planning: a valid graph, or every attempt with why it was refused."""

    graph: Graph | None
    units_jsonl: str | None  # the valid plan, normalised: one unit per line
    attempts: tuple[PlanAttempt, ...]
    source: Literal["agent", "hand"]

    @property
    def ok(self) -> bool:
        return self.graph is not None

    @property
    def problems(self) -> tuple[str, ...]:
        """The last attempt's reasons (problems, then its session error); empty when the plan is valid."""
        return self.attempts[-1].reasons if self.attempts else ()


def validate_plan_text(
    text: str, *, max_units: int, tracked_paths: Sequence[str]
) -> tuple[Graph | None, tuple[str, ...]]:
    """The graph of a plan written as JSONL or a JSON array, or every problem with it (its `files`
    matched against the tracked paths in a child process with a deadline: call it off the event loop).

    Invisible characters are stripped from every string of the plan, written literally or as a
    JSON escape, so that the lanes get exactly what the gate shows a reviewer.
    """
    try:
        raw = parse_units(text)
    except PlanSyntaxError as error:
        return None, (f"the plan cannot be read: {error}",)
    try:
        graph = build_graph(_without_invisible(raw), max_units=max_units, tracked_paths=tracked_paths)
    except InvalidPlan as invalid:
        return None, tuple(str(problem) for problem in invalid.problems)
    return graph, ()


def _without_invisible(value: object) -> object:
    if isinstance(value, str):
        return strip_invisible(value)
    if isinstance(value, list):
        return [_without_invisible(item) for item in value]
    if isinstance(value, dict):
        return {_without_invisible(key): _without_invisible(item) for key, item in value.items()}
    return value


def plan_from_hand(text: str, *, workflow: Workflow, tracked_paths: Sequence[str]) -> PlanOutcome:
    """A hand-written plan (the content `extract_hand_plan` found), validated; no agent session."""
    graph, problems = validate_plan_text(text, max_units=workflow.plan.max_units, tracked_paths=tracked_paths)
    attempt = PlanAttempt(attempt=1, problems=problems, transcript=None, error=None)
    return PlanOutcome(
        graph=graph, units_jsonl=graph.to_jsonl() if graph else None, attempts=(attempt,), source="hand"
    )


# --------------------------------------------------------------------------- the prompt


def prompt_context(
    *,
    issue: IssueText,
    tracked_paths: Sequence[str],
    max_units: int,
    rules: Sequence[str] = (),
    feedback: str | None = None,
    previous_plan: str | None = None,
) -> dict[str, object]:
    """The `plan` template's variables (all but `failure`), untrusted text sanitized. Pure."""
    return {
        "issue": {
            "number": issue.number,
            "title": sanitize_untrusted(issue.title),
            "body": sanitize_untrusted(issue.body),
            "comments": [
                {"author": sanitize_untrusted(comment.author), "body": sanitize_untrusted(comment.body)}
                for comment in issue.comments
            ],
        },
        "tracked_paths": summarise_paths(tracked_paths),
        "max_units": max_units,
        "rules": list(rules),
        # A maintainer's words are instructions, but they are still text someone could have
        # pasted hidden characters into.
        "feedback": sanitize_untrusted(feedback) if feedback else None,
        "previous_plan": strip_invisible(previous_plan) if previous_plan else None,
    }


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
) -> PlanOutcome:
    """Plan `issue` with the plan agent in `checkout`, retrying with every reason until a plan is valid.

    `agent` defaults to `workflow.plan.agent` configured from `workflow.agents`. `feedback` and
    `previous_plan` come from a /replan. `env` is passed to every session; `on_session_start(pid)`
    is called when a session's process starts. Transcripts are written to
    `transcripts_dir/plan-attempt-<n>.jsonl`. A missing binary or bad agent settings end planning
    at once (another attempt would fail the same way).
    """
    if not checkout.is_dir():
        raise NotADirectoryError(f"the planner's checkout {checkout} is not a directory")
    tracked = tuple(tracked_paths)
    context = prompt_context(
        issue=issue, tracked_paths=tracked, max_units=workflow.plan.max_units, rules=rules,
        feedback=feedback, previous_plan=previous_plan,
    )
    session = _Session(workflow, checkout, tracked, transcripts_dir, dict(env or {}), on_session_start)
    attempts: list[PlanAttempt] = []
    try:
        agent = agent or make_agent(workflow.plan.agent, getattr(workflow.agents, workflow.plan.agent))
    except AgentConfigError as error:
        return PlanOutcome(None, None, (PlanAttempt(1, (), None, str(error)),), "agent")
    tree = await asyncio.to_thread(snapshot_tree, checkout)
    for number in range(1, workflow.plan.max_retries + 2):
        failure = list(attempts[-1].reasons) if attempts else None
        prompt = workflow.render_prompt("plan", **context, failure=failure)
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
    ) -> None:
        self.workflow = workflow
        self.checkout = checkout
        self.tracked_paths = tracked_paths
        self.transcripts_dir = transcripts_dir
        self.env = env
        self.on_start = on_start
        self.hopeless = False  # set when the agent cannot run at all

    async def attempt(
        self, number: int, prompt: str, agent: Agent, tree_before: TreeSnapshot
    ) -> tuple[PlanAttempt, Graph | None, TreeSnapshot]:
        remove_plan_file(self.checkout)
        transcript = self.transcripts_dir / f"plan-attempt-{number}.jsonl"
        request = AgentRequest(
            prompt=prompt, cwd=self.checkout, transcript=transcript, timeout=self.workflow.plan.timeout,
            env=self.env, read_only=True,
        )
        try:
            result = await agent.run(request, on_start=self.on_start)
        except AgentConfigError as error:  # AgentNotFound included
            self.hopeless = True
            return PlanAttempt(number, (), transcript if transcript.exists() else None, str(error)), None, tree_before
        tree_after = await asyncio.to_thread(snapshot_tree, self.checkout, tree_before)
        problems = list(_change_problems(tree_before, tree_after))
        if not result.ok:
            error = result.error or f"the {agent.name} agent timed out after {self.workflow.plan.timeout} s"
            return PlanAttempt(number, tuple(problems), transcript, error), None, tree_after
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
        return validate_plan_text(text, max_units=self.workflow.plan.max_units, tracked_paths=self.tracked_paths)


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
    scratch = checkout / SCRATCH_DIR
    try:
        scratch_mode = os.lstat(scratch).st_mode
    except FileNotFoundError:
        return None, None
    if not stat.S_ISDIR(scratch_mode):
        return None, f"{SCRATCH_DIR} is not a directory (a link or a file); write the plan to {PLAN_FILE}"
    try:
        descriptor = os.open(scratch / "units.jsonl", os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, f"{PLAN_FILE} cannot be opened as a regular file (a link is refused); write the plan into it"
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None, f"{PLAN_FILE} is not a regular file; write the plan into it"
        data = handle.read(MAX_PLAN_BYTES + 1)
    if len(data) > MAX_PLAN_BYTES:
        return None, f"{PLAN_FILE} is larger than {MAX_PLAN_BYTES} bytes; a plan is a few units, one line each"
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
            f"the planner must only read the repository, but it {'; '.join(described)};"
            f" write nothing but {PLAN_FILE}"
        )


def _listed(paths: list[str]) -> str:
    shown = ", ".join(paths[:_CHANGED_PATHS_SHOWN])
    more = len(paths) - _CHANGED_PATHS_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown
