"""The pure side of a fix lane: review threads, who may instruct, what the agent may touch, its
report, and lanebot's answers. No I/O.

A fix lane acts on review feedback on lanebot's pull request (bot/runner/review/fix.py does the I/O):

- `ReviewComment.from_api` reads one review comment as GitHub's REST API gives it, and
  `build_threads` joins comments into threads (a root comment and its replies, resolved and
  outdated as GitHub's GraphQL `reviewThreads` says).
- `sort_threads` drops resolved threads and splits the rest: a thread with at least one
  *trusted* comment (its author, matched by GitHub user id `author_id`, may approve; a bot never,
  nor a deleted account, who has no id) is an instruction thread, to address
  and answer; the others are context threads, shown to the agent as context, never obeyed.
  `threads_json` is `.lanebot/threads.json`, what the agent reads.
- `named_paths` and `outside_allowed`: the agent may change the files the pull request already
  changes and the paths an approver names in backticks; anything else fails the attempt.
- `parse_fix_report` reads `.lanebot/fix.json`, the agent's account of each thread. Every
  instruction thread comes out either addressed or not addressed, whatever the agent wrote.
- `reply_body` (one answer per instruction thread) and `summary_body` (one comment on the pull
  request) render lanebot's answers.

Agent-written text is untrusted: the agent read threads anyone could write. It reaches GitHub
escaped (bot.core.text's escapers) and then `defuse`d (bot.core.text.defuse, re-exported here), so it
cannot mention people or teams, close an issue (`fixes #1`) or reference one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.core.text import (
    COMMENT_LIMIT,
    cell_code,
    code_block,
    code_span,
    defuse,
    largest_fitting_render,
    markdown_cell,
    markdown_text,
    parse_marker,
    sanitize_untrusted,
    shorten,
    shorten_tail,
)

__all__ = [
    "FIX_FILE",
    "REQUEST_KINDS",
    "THREADS_FILE",
    "Brief",
    "FixReport",
    "ReviewComment",
    "Thread",
    "build_threads",
    "defuse",
    "largest_fitting",
    "named_paths",
    "outside_allowed",
    "parse_fix_report",
    "reply_body",
    "require_marker",
    "schema_errors",
    "sort_threads",
    "summary_body",
    "threads_json",
]

THREADS_FILE = ".lanebot/threads.json"
FIX_FILE = ".lanebot/fix.json"
SUMMARY_CHARS = 4_000
CHANGE_CHARS = 1_000  # a `change` or a `why` of one thread
MAX_REPORT_CHARS = 1_000_000  # a larger fix.json is not read at all
NOT_SAID = "the session did not say"
SHORT_SHA = 7
# What asked for the fix lane: a changes-requested review, or a `/fix` comment.
REQUEST_KINDS = {
    "review": "requested changes in a review",
    "comment": "asked with `/fix`",
    "ci": "The repository's CI failed on this pull request",  # no one to name: the CI's bot asked
}

_PROBLEM_CHARS = 1_000
_FAILURE_CHARS = 4_000
_COMMAND_CHARS = 200
_PATH_CHARS = 300


# --------------------------------------------------------------------------- comments and threads


@dataclass(frozen=True)
class ReviewComment:
    """One pull request review comment, as GitHub's REST API gives it."""

    id: int
    path: str
    line: int | None  # on the pull request's current diff; None when the comment is outdated
    original_line: int | None  # on the diff it was written on
    diff_hunk: str
    body: str
    author: str
    author_is_bot: bool
    in_reply_to: int | None
    review_id: int | None
    html_url: str | None
    # The author's GitHub user id (`user.id`): what trust is matched by, since a login can be renamed
    # and registered by someone else. None for a deleted account (`user` null), who is never trusted.
    author_id: int | None = None

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> ReviewComment:
        """The comment GitHub's REST answer (or a webhook's `comment`) describes.

        Raises ValueError naming the key when a required key (`id`, `path`, `diff_hunk`, `body`,
        `user`, `user.login`) is missing or a key holds the wrong type. A deleted account's
        comment (`user` null) is read as GitHub shows it: written by `ghost`, with no id.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a review comment must be a JSON object, got {type(data).__name__}")
        comment_id = _required(data, "id", int)
        where = f"review comment {comment_id}"
        user = _required(data, "user", (Mapping, type(None)), where)
        if user is None:
            author, kind, author_id = "ghost", "User", None
        else:
            author = _required(user, "login", str, where, prefix="user.")
            kind = _optional(user, "type", str, where, prefix="user.") or "User"
            author_id = _optional(user, "id", int, where, prefix="user.")
        return cls(
            id=comment_id,
            path=_required(data, "path", str, where),
            line=_optional(data, "line", int, where),
            original_line=_optional(data, "original_line", int, where),
            diff_hunk=_required(data, "diff_hunk", str, where),
            body=_required(data, "body", (str, type(None)), where) or "",
            author=author,
            author_is_bot=kind == "Bot" or author.endswith("[bot]"),
            in_reply_to=_optional(data, "in_reply_to_id", int, where),
            review_id=_optional(data, "pull_request_review_id", int, where),
            html_url=_optional(data, "html_url", str, where),
            author_id=author_id,
        )


def _required(
    data: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: str = "a review comment",
    *,
    prefix: str = "",
) -> Any:
    if key not in data:
        raise ValueError(f"{where}: missing key '{prefix}{key}'; GitHub's review comments always carry it")
    return _typed(data[key], key, kind, where, prefix)


def _optional(data: Mapping[str, Any], key: str, kind: type, where: str, *, prefix: str = "") -> Any:
    return _typed(data.get(key), key, (kind, type(None)), where, prefix)


def _typed(value: Any, key: str, kind: type | tuple[type, ...], where: str, prefix: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{where}: key '{prefix}{key}' has the wrong type ({type(value).__name__}: {value!r:.60})")
    return value


@dataclass(frozen=True)
class Thread:
    """A root review comment and its replies, oldest first."""

    root: ReviewComment
    replies: tuple[ReviewComment, ...]
    resolved: bool
    outdated: bool

    @property
    def id(self) -> int:
        return self.root.id

    @property
    def comments(self) -> tuple[ReviewComment, ...]:
        return (self.root, *self.replies)


def build_threads(
    comments: Iterable[ReviewComment], states: Mapping[int, tuple[bool, bool]] | None = None
) -> list[Thread]:
    """The threads `comments` form, ordered by root id, each with its replies ordered by id.

    A reply to a reply belongs to the first reply's root. A reply whose root is missing (deleted)
    starts its own thread. `states` maps a comment id (the root's or any reply's; the root's
    wins) to (resolved, outdated); a thread none of whose comments is in it is neither. The
    same comment given twice counts once; two different comments with one id are an error.
    """
    by_id = _unique_by_id(comments)
    members: dict[int, list[ReviewComment]] = {}
    for comment in by_id.values():
        members.setdefault(_root_id(comment, by_id), []).append(comment)
    threads = []
    for root_id in sorted(members):
        replies = tuple(sorted((c for c in members[root_id] if c.id != root_id), key=lambda c: c.id))
        root = by_id[root_id]
        resolved, outdated = _thread_state((root, *replies), states or {})
        threads.append(Thread(root=root, replies=replies, resolved=resolved, outdated=outdated))
    return threads


def _unique_by_id(comments: Iterable[ReviewComment]) -> dict[int, ReviewComment]:
    by_id: dict[int, ReviewComment] = {}
    for comment in comments:
        known = by_id.setdefault(comment.id, comment)
        if known != comment:
            raise ValueError(f"two different review comments have the id {comment.id}; read the comments again")
    return by_id


def _root_id(comment: ReviewComment, by_id: Mapping[int, ReviewComment]) -> int:
    """The id of the thread's first comment: follow `in_reply_to` while the parent exists.

    GitHub makes no cycles, but a cycle must not hang lanebot: its smallest id is the root, so
    every comment of the cycle agrees whatever order the comments came in.
    """
    chain = [comment.id]
    current = comment
    while current.in_reply_to is not None and current.in_reply_to in by_id:
        if current.in_reply_to in chain:
            return min(chain[chain.index(current.in_reply_to) :])
        current = by_id[current.in_reply_to]
        chain.append(current.id)
    return current.id


def _thread_state(comments: Sequence[ReviewComment], states: Mapping[int, tuple[bool, bool]]) -> tuple[bool, bool]:
    for comment in comments:
        if comment.id in states:
            resolved, outdated = states[comment.id]
            return bool(resolved), bool(outdated)
    return False, False


# --------------------------------------------------------------------------- instruction and context


@dataclass(frozen=True)
class Brief:
    """What the fix lane's prompt and `.lanebot/threads.json` hold."""

    instructions: tuple[Thread, ...]  # unresolved threads with at least one trusted comment
    context: tuple[Thread, ...]  # unresolved threads with none: read, never obeyed, never answered


def _is_trusted(comment: ReviewComment, trusted: Callable[[ReviewComment], bool]) -> bool:
    # A bot is never trusted, whatever `trusted` says: lanebot's own replies (and another app's)
    # must not become instructions. Nor is an author without a GitHub user id (a deleted account):
    # trust is matched by id, and every deleted account's comments read as one login, `ghost`.
    return not comment.author_is_bot and comment.author_id is not None and bool(trusted(comment))


def sort_threads(threads: Iterable[Thread], trusted: Callable[[ReviewComment], bool]) -> Brief:
    """Unresolved threads split into instruction and context threads, each in the order given."""
    instructions: list[Thread] = []
    context: list[Thread] = []
    for thread in threads:
        if thread.resolved:
            continue
        is_instruction = any(_is_trusted(comment, trusted) for comment in thread.comments)
        (instructions if is_instruction else context).append(thread)
    return Brief(instructions=tuple(instructions), context=tuple(context))


def threads_json(brief: Brief, trusted: Callable[[ReviewComment], bool]) -> str:
    """`.lanebot/threads.json`: the brief's threads, machine-readable, pretty-printed and stable.

    `{"instructions": [thread...], "context": [thread...]}`, a thread being `{"thread": root id,
    "path", "line", "outdated", "diff_hunk", "comments": [{"id", "author", "trusted", "body"}]}`.
    `line` is the line on the current diff or, for an outdated thread, the line it was written
    on. Bodies lose what a reader on GitHub cannot see (HTML comments, invisible characters),
    so the agent reads what the approver read.
    """
    document = {
        "instructions": [_thread_json(thread, trusted) for thread in brief.instructions],
        "context": [_thread_json(thread, trusted) for thread in brief.context],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _thread_json(thread: Thread, trusted: Callable[[ReviewComment], bool]) -> dict[str, object]:
    root = thread.root
    return {
        "thread": thread.id,
        "path": root.path,
        "line": root.line if root.line is not None else root.original_line,
        "outdated": thread.outdated,
        "diff_hunk": root.diff_hunk,
        "comments": [
            {"id": c.id, "author": c.author, "trusted": _is_trusted(c, trusted), "body": sanitize_untrusted(c.body)}
            for c in thread.comments
        ],
    }


# --------------------------------------------------------------------------- allowed files

_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_OPENING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def named_paths(text: str | None) -> list[str]:
    """The paths an approver names in backticks (`docs/api.md`, `src/**/*.py`), in order, once each.

    A code span counts when its content has no whitespace, is no URL (`://`), is not absolute
    (`/x`, `~/x`, `C:x`), has no `..` segment and no backslash, and has a `/` or a `.`. A leading
    `./` and empty or `.` segments are dropped (`./src//a.py` names `src/a.py`); a trailing `/`
    is kept (a directory). Fenced code blocks are code, not names, and what a reader cannot see
    (HTML comments) does not count.
    """
    if not text:
        return []
    found: dict[str, None] = {}
    for line in _prose_lines(sanitize_untrusted(text)):
        for match in _CODE_SPAN.finditer(line):
            path = _as_named_path(match[2].strip())
            if path is not None:
                found.setdefault(path)
    return list(found)


def _prose_lines(text: str) -> Iterable[str]:
    """The lines of Markdown `text` outside fenced code blocks (an unclosed fence runs to the end)."""
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None:
            opening = _OPENING_FENCE.match(line)
            if opening and not (opening[1][0] == "`" and "`" in opening[2]):
                fence = opening[1]
                continue
            yield line
        elif re.fullmatch(rf" {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*", line):
            fence = None


def _as_named_path(token: str) -> str | None:
    if (
        not token
        or re.search(r"\s", token)
        or "://" in token
        or "\\" in token
        or token.startswith(("/", "~"))
        or _WINDOWS_DRIVE.match(token)
        or ("/" not in token and "." not in token)
    ):
        return None
    segments = [segment for segment in token.split("/") if segment not in ("", ".")]
    if not segments or ".." in segments:
        return None
    return "/".join(segments) + ("/" if token.endswith("/") else "")


def outside_allowed(changed: Iterable[str], pr_files: Iterable[str], named: Iterable[str]) -> list[str]:
    """The changed paths the fix lane may not change, sorted, once each.

    Allowed: a file the pull request already changes, and a path equal to or under a named path
    (`docs` or `docs/` allows `docs/a.md`), or matching a named glob, or under a directory that
    matches one (`src/*` allows `src/gen/x.py`). In a glob `*` and `?` stay within one path
    segment and a `**` segment spans any number of directories, none included (`src/**/*.py`
    allows `src/a.py`); other characters are literal.
    """
    allowed_files = set(pr_files)
    patterns = [_glob_regex(name) for name in named if name.strip("/ ")]
    return sorted({path for path in changed if path not in allowed_files and not _matches_any(path, patterns)})


def _matches_any(path: str, patterns: Sequence[re.Pattern[str]]) -> bool:
    segments = path.split("/")
    prefixes = ["/".join(segments[:count]) for count in range(1, len(segments) + 1)]
    return any(pattern.fullmatch(prefix) for pattern in patterns for prefix in prefixes)


def _glob_regex(name: str) -> re.Pattern[str]:
    pattern = name.strip().removeprefix("./").rstrip("/")
    out: list[str] = []
    index = 0
    while index < len(pattern):
        at_segment_start = index == 0 or pattern[index - 1] == "/"
        if at_segment_start and pattern.startswith("**/", index):
            out.append("(?:[^/]*/)*")
            index += 3
        elif at_segment_start and pattern[index:] == "**":
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out))


# --------------------------------------------------------------------------- the agent's report


@dataclass(frozen=True)
class FixReport:
    """The agent's account: every instruction thread is in exactly one of the two mappings."""

    summary: str
    addressed: dict[int, str]  # thread id -> what changed
    not_addressed: dict[int, str]  # thread id -> why not

    def outcome(self, thread_id: int) -> tuple[bool, str]:
        """(addressed, what changed or why not) for one thread; unknown threads were not said."""
        if thread_id in self.addressed:
            return True, self.addressed[thread_id]
        return False, self.not_addressed.get(thread_id, NOT_SAID)


_ThreadId = Annotated[int, Field(strict=True)]
_Text = Annotated[str, Field(strict=True)]


class _Addressed(BaseModel):
    model_config = ConfigDict(extra="ignore")
    thread: _ThreadId
    change: _Text


class _NotAddressed(BaseModel):
    model_config = ConfigDict(extra="ignore")
    thread: _ThreadId
    why: _Text


class _FixFile(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: _Text
    addressed: list[_Addressed] = []
    not_addressed: list[_NotAddressed] = []


def parse_fix_report(text: str | None, thread_ids: Collection[int]) -> tuple[FixReport, list[str]]:
    """The report in `.lanebot/fix.json` (`text`, None when the file is missing), and its problems.

    Every id of `thread_ids` (the instruction threads) comes out addressed or not addressed:
    a file that is missing, not JSON or not the schema leaves every thread not addressed, its
    why naming the problem; a thread the file does not mention is not addressed because the
    session did not say; a thread in both lists counts as not addressed; an id that is no
    instruction thread is dropped. Texts are stripped and capped.
    """
    wanted = list(dict.fromkeys(thread_ids))
    document, problem = _read_fix_file(text)
    if document is None:
        why = f"the session did not report on it ({problem})"
        return FixReport(summary="", addressed={}, not_addressed={t: why for t in wanted}), [problem]
    problems: list[str] = []
    addressed = _entries(document.addressed, "addressed", "change", set(wanted), problems)
    not_addressed = _entries(document.not_addressed, "not_addressed", "why", set(wanted), problems)
    for thread_id in addressed.keys() & not_addressed.keys():
        problems.append(
            f"thread {thread_id} is listed both as addressed and as not addressed; counted as not addressed"
        )
        del addressed[thread_id]
    for thread_id in wanted:
        if thread_id not in addressed and thread_id not in not_addressed:
            not_addressed[thread_id] = NOT_SAID
    report = FixReport(
        summary=_agent_text(document.summary, SUMMARY_CHARS, ""),
        addressed={t: addressed[t] for t in wanted if t in addressed},
        not_addressed={t: not_addressed[t] for t in wanted if t in not_addressed},
    )
    return report, problems


def _read_fix_file(text: str | None) -> tuple[_FixFile | None, str]:
    if text is None:
        return None, f"it did not write {FIX_FILE}"
    if len(text) > MAX_REPORT_CHARS:
        return None, f"{FIX_FILE} holds {len(text)} characters, more than the {MAX_REPORT_CHARS} lanebot reads"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{FIX_FILE} is not valid JSON: line {error.lineno}, column {error.colno}: {error.msg}"
    except (ValueError, RecursionError) as error:
        return None, f"{FIX_FILE} is not valid JSON: {error.__class__.__name__}"
    try:
        return _FixFile.model_validate(data), ""
    except ValidationError as error:
        return None, f"{FIX_FILE} does not match the schema: {'; '.join(schema_errors(error, limit=3))}"


def _entries(
    items: Sequence[_Addressed | _NotAddressed], key: str, field: str, wanted: set[int], problems: list[str]
) -> dict[int, str]:
    found: dict[int, str] = {}
    for index, item in enumerate(items):
        if item.thread not in wanted:
            problems.append(f"{key}[{index}]: thread {item.thread} is not one of the threads to address; ignored")
        elif item.thread in found:
            problems.append(f"{key}[{index}]: thread {item.thread} is listed again; the first entry counts")
        else:
            default = "the session did not describe the change" if field == "change" else "the session gave no reason"
            found[item.thread] = _agent_text(getattr(item, field), CHANGE_CHARS, default)
    return found


def _agent_text(text: str, limit: int, default: str) -> str:
    stripped = text.strip()
    return shorten(stripped, limit) if stripped else default


def schema_errors(error: ValidationError, *, limit: int | None = None) -> list[str]:
    """Pydantic's errors as `where: what (got value)` sentences, the first `limit` of them."""
    messages = []
    for detail in error.errors()[:limit]:
        where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in detail["loc"]).lstrip(".")
        if detail["type"] == "value_error":  # our own validators' sentences, which show the value already
            messages.append(f"{where or 'the file'}: {detail['ctx']['error']}")
            continue
        message = str(detail["msg"])
        message = message[:1].lower() + message[1:]
        if detail["type"] != "missing" and "input" in detail and not isinstance(detail["input"], (dict, list)):
            message += f" (got {shorten(repr(detail['input']), 60)})"
        messages.append(f"{where or 'the file'}: {message}")
    hidden = len(error.errors()) - len(messages)
    if hidden > 0:
        messages.append(f"and {hidden} more")
    return messages


# --------------------------------------------------------------------------- safe agent text


def _prose(text: str) -> str:
    """Untrusted text as one Markdown paragraph (line breaks kept as `<br>`), defused."""
    return defuse(markdown_cell(text))


def _quote(text: str) -> str:
    """Untrusted text as a Markdown block quote, line by line, defused."""
    lines = [defuse(markdown_text(line)) for line in text.strip().split("\n")]
    return "\n".join(f"> {line}".rstrip() for line in lines)


# --------------------------------------------------------------------------- answers

_SHA = re.compile(r"[0-9a-f]{7,64}")
_ONE_MARKER = re.compile(r"<!-- lanebot:[^\n>]* -->")
_URL = re.compile(r"https?://[^\s()<>\[\]`\"']+")
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def require_marker(marker_text: str) -> None:
    """Raise ValueError unless `marker_text` is exactly one marker made by bot.render.gate.marker."""
    if parse_marker(marker_text) is None or not _ONE_MARKER.fullmatch(marker_text):
        raise ValueError(f"marker_text must be one lanebot marker (bot.render.gate.marker), got {marker_text[:80]!r}")


def _commit_link(sha: str | None, url: str | None) -> str | None:
    if sha is None:
        return None
    if not _SHA.fullmatch(sha):
        raise ValueError(f"a commit sha is 7 to 64 lower-case hex digits, got {sha[:80]!r}")
    short = f"`{sha[:SHORT_SHA]}`"
    return f"[{short}]({_checked_url(url)})" if url is not None else short


def _checked_url(url: str) -> str:
    if not _URL.fullmatch(url):
        raise ValueError(f"a link must be an http(s) URL without spaces, brackets or quotes, got {url[:120]!r}")
    return url


def reply_body(
    *, thread_id: int, addressed: bool, text: str, commit_sha: str | None, commit_url: str | None, marker_text: str
) -> str:
    """lanebot's answer in one instruction thread.

    `Addressed in <commit>: <change>` or `Not addressed: <why>`, after `marker_text` (the hidden
    marker the caller makes, so a retried post finds the answer instead of posting it twice).
    The agent's text is escaped and defused.
    """
    if isinstance(thread_id, bool) or not isinstance(thread_id, int) or thread_id < 1:
        raise ValueError(f"thread_id must be a review comment id (a positive integer), got {thread_id!r}")
    require_marker(marker_text)
    said = _prose(shorten(text.strip(), CHANGE_CHARS)) or (
        "the session did not describe the change" if addressed else NOT_SAID
    )
    if addressed:
        link = _commit_link(commit_sha, commit_url)
        head = f"Addressed in {link}" if link else "Addressed"
    else:
        head = "Not addressed"
    return f"{marker_text}\n{head}: {said}\n"


def summary_body(
    *,
    marker_text: str,
    requested_by: str,
    kind: str,
    head_sha: str | None,
    commit_url: str | None,
    report: FixReport,
    threads: Sequence[Thread],
    verify_command: str,
    verify_passed: bool | None,
    problems: Sequence[str],
    failure: str | None,
) -> str:
    """The fix lane's one comment on the pull request, under GitHub's 65,536-character limit.

    Who asked (`kind`: `review` for a changes-requested review, `comment` for `/fix`, `ci` for the
    repository's failing CI, which has no threads and no one to name), the
    commit pushed, the session's summary, a table of the instruction threads `threads` (linked,
    addressed with what changed or not addressed with why), verify's result (`verify_passed`
    None: it did not run) and the problems. With `failure` the comment says what failed instead
    of the table and how to try again. Problems, then rows, are left out (and counted) when the
    comment would be too long.
    """
    require_marker(marker_text)
    if not _LOGIN.fullmatch(requested_by):
        raise ValueError(f"requested_by must be a GitHub login, got {requested_by[:80]!r}")
    if kind not in REQUEST_KINDS:
        raise ValueError(f"kind must be one of {', '.join(REQUEST_KINDS)} (what asked for the fix), got {kind!r}")
    link = _commit_link(head_sha, commit_url)
    head = _summary_head(marker_text, requested_by, kind, link, failure)
    rows = [_thread_row(thread, report) for thread in threads]
    problem_items = [f"- {_prose(shorten(problem, _PROBLEM_CHARS))}" for problem in problems]
    verify = _verify_line(verify_command, verify_passed)

    def render(shown_rows: int, shown_problems: int) -> str:
        parts = [head]
        if failure is not None:
            parts.append(_failure_section(failure, pushed=link is not None))
        else:
            if report.summary:
                parts.append(f"**What changed**, as the session describes it:\n\n{_quote(report.summary)}\n")
            if rows or kind != "ci":
                parts.append(_thread_table(rows, shown_rows))
        parts.append(verify)
        if problems:
            parts.append(_problem_list(problem_items, shown_problems))
        if failure is not None:
            parts.append("Comment `/fix` to try again.\n")
        return "\n".join(parts)

    body = largest_fitting(lambda count: render(len(rows), count), len(problem_items), cut_when_nothing_fits=False)
    if body is None:
        body = largest_fitting(lambda count: render(count, 0), len(rows))
    return body


def _summary_head(marker_text: str, requested_by: str, kind: str, link: str | None, failure: str | None) -> str:
    what = "failing CI" if kind == "ci" else "the review"
    title = f"lanebot could not act on {what}" if failure is not None else f"lanebot acted on {what}"
    asked = f"{REQUEST_KINDS[kind]}." if kind == "ci" else f"@{requested_by} {REQUEST_KINDS[kind]}."
    pushed = f" lanebot pushed {link} to this pull request." if link else ""
    return f"{marker_text}\n### {title}\n\n{asked}{pushed}\n"


def _thread_row(thread: Thread, report: FixReport) -> str:
    addressed, text = report.outcome(thread.id)
    root = thread.root
    line = root.line if root.line is not None else root.original_line
    where: str = cell_code(shorten(f"{root.path}:{line}" if line is not None else root.path, _PATH_CHARS))
    if root.html_url and _URL.fullmatch(root.html_url):
        where = f"[{where}]({root.html_url})"
    if thread.outdated:
        where += " (outdated)"
    outcome = "✅ addressed" if addressed else "❌ not addressed"
    return f"| {where} | {outcome} | {_prose(text) or '—'} |"


def _thread_table(rows: Sequence[str], shown: int) -> str:
    if not rows:
        return "No review thread asked for a change.\n"
    lines = ["| Thread | Outcome | What changed, or why not |", "|---|---|---|", *rows[:shown]]
    if shown < len(rows):
        lines.append(f"\n… and {len(rows) - shown} more threads, not shown: GitHub's comment limit.")
    return "\n".join(lines) + "\n"


def _verify_line(command: str, passed: bool | None) -> str:
    result = {True: "✅ passed", False: "❌ failed", None: "did not run"}[passed]
    return f"**Verify** {code_span(shorten(command.strip(), _COMMAND_CHARS))}: {result}.\n"


def _problem_list(items: Sequence[str], shown: int) -> str:
    lines = ["**Problems**", "", *items[:shown]]
    if shown < len(items):
        lines.append(f"- … and {len(items) - shown} more problems, not shown: GitHub's comment limit.")
    return "\n".join(lines) + "\n"


def _failure_section(failure: str, *, pushed: bool) -> str:
    nothing = "" if pushed else "\n\nNothing was pushed."
    return f"**What failed:**\n\n{defuse(code_block(shorten_tail(failure, _FAILURE_CHARS)))}{nothing}\n"


@overload
def largest_fitting(
    render: Callable[[int], str], count: int, *, cut_when_nothing_fits: Literal[True] = True
) -> str: ...
@overload
def largest_fitting(render: Callable[[int], str], count: int, *, cut_when_nothing_fits: bool) -> str | None: ...
def largest_fitting(render: Callable[[int], str], count: int, *, cut_when_nothing_fits: bool = True) -> str | None:
    """`render(n)` for the largest n in 0..count that fits GitHub's comment limit.

    When even `render(0)` does not fit: with `cut_when_nothing_fits`, it is cut to the limit with a note
    saying so; without, None (the caller has something else to leave out first).
    """
    full = render(count)
    if len(full) <= COMMENT_LIMIT:
        return full
    smallest = render(0)
    if len(smallest) > COMMENT_LIMIT:
        if not cut_when_nothing_fits:
            return None
        note = "\n\n… (cut: GitHub's comment limit)\n"
        return smallest[: COMMENT_LIMIT - len(note)] + note
    return largest_fitting_render(render, 0, count - 1, smallest)
