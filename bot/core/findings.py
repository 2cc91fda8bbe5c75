"""The pure side of lanebot's own review of its pull request: findings, refutation, the majority
rule, and the review it posts. No I/O.

The review (bot/runner/review/own.py runs the sessions) looks at the pull request through one or more
*lenses* (`LENSES`: correctness, security, checks):

1. Phase 1, one session per lens, writes `.lanebot/findings.json`; `parse_findings` validates it
   item by item (an invalid finding is dropped with a problem, the valid ones kept) and gives
   each finding an id `<lens>-<n>`.
2. Phase 2, with two or more lenses, one session per lens is shown the *other* lenses'
   findings (`findings_to_check`) and writes `.lanebot/verdicts.json` (`parse_verdicts`).
3. `survivors` applies the majority rule: the voters of a finding are its own lens (which never
   refutes it) and every other lens whose phase-2 session succeeded and that looked at the
   finding's file; it survives iff strictly more than half of its voters did not refute it.
4. `review_payload` is the one review lanebot posts (`event: COMMENT`, never an approval): a
   finding on a line the diff shows (`commentable_lines`) becomes an inline comment, the others
   are listed in the review's body.

Findings and verdicts are agent-written, so untrusted: they reach GitHub escaped and defused
(bot.core.feedback.defuse), never as Markdown of their own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bot.core.feedback import defuse, largest_fitting, require_marker, schema_errors
from bot.core.text import code_block, code_span, markdown_cell, markdown_text, shorten
from bot.core.workflow import REVIEW_LENSES

__all__ = [
    "FINDINGS_FILE",
    "FINDINGS_TO_CHECK_FILE",
    "LENSES",
    "SEVERITIES",
    "VERDICTS_FILE",
    "Finding",
    "Severity",
    "Verdict",
    "commentable_lines",
    "findings_to_check",
    "parse_findings",
    "parse_verdicts",
    "review_payload",
    "survivors",
]

FINDINGS_FILE = ".lanebot/findings.json"
FINDINGS_TO_CHECK_FILE = ".lanebot/findings-to-check.json"
VERDICTS_FILE = ".lanebot/verdicts.json"
MAX_FILE_CHARS = 1_000_000  # a larger findings or verdicts file is not read at all

LENSES = REVIEW_LENSES  # what each verifier looks for; the workflow's `review.lenses` picks from these
Severity = Literal["low", "medium", "high"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)

_CLAIM_CHARS = 2_000
_EVIDENCE_CHARS = 4_000
_REASON_CHARS = 2_000
_PROBLEM_CHARS = 1_000


def _check_lens(lens: str) -> None:
    if lens not in LENSES:
        raise ValueError(f"unknown lens {lens!r}; the lenses are {', '.join(LENSES)}")


# --------------------------------------------------------------------------- findings


@dataclass(frozen=True)
class Finding:
    """One claim a lens makes about a line of the pull request."""

    id: str  # "<lens>-<n>", given by lanebot
    lens: str
    file: str
    line: int
    claim: str
    evidence: str
    severity: str


def _relative_path(value: str) -> str:
    path = value.strip()
    while path.startswith("./"):
        path = path[2:]
    if not path:
        raise ValueError("must be a path relative to the repository root, not empty")
    if path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"must be a path relative to the repository root like src/app.py (got {value[:80]!r})")
    return path


_Path = Annotated[str, Field(strict=True), AfterValidator(_relative_path)]


_Claim = Annotated[str, Field(strict=True, min_length=1, max_length=_CLAIM_CHARS)]
_Evidence = Annotated[str, Field(strict=True, min_length=1, max_length=_EVIDENCE_CHARS)]
_FindingId = Annotated[str, Field(strict=True, min_length=1, max_length=200)]
_Reason = Annotated[str, Field(strict=True, min_length=1, max_length=_REASON_CHARS)]


class _FindingItem(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)
    file: _Path
    line: Annotated[int, Field(strict=True, ge=1)]
    claim: _Claim
    evidence: _Evidence
    severity: Severity


class _VerdictItem(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)
    finding: _FindingId
    refute: Annotated[bool, Field(strict=True)]
    reason: _Reason


def _read_json_object(text: str | None, name: str, key: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object in `text` holding a list under `key`, or None and the problem."""
    if text is None:
        return None, f"the session did not write {name}"
    if len(text) > MAX_FILE_CHARS:
        return None, f"{name} holds {len(text)} characters, more than the {MAX_FILE_CHARS} lanebot reads"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"{name} is not valid JSON: line {error.lineno}, column {error.colno}: {error.msg}"
    except (ValueError, RecursionError) as error:
        return None, f"{name} is not valid JSON: {error.__class__.__name__}"
    if not isinstance(data, dict):
        return None, f"{name} must hold a JSON object with a {key!r} list, not a {type(data).__name__}"
    if not isinstance(data.get(key), list):
        return None, f"{name} must hold a {key!r} list ({'missing' if key not in data else 'not a list'})"
    return data, ""


def parse_findings(
    text: str | None, lens: str, *, max_findings: int
) -> tuple[list[Finding], tuple[str, ...], list[str]]:
    """The findings in `.lanebot/findings.json` (`text`, None when missing), what the lens looked at, and problems.

    `{"looked_at": [paths], "findings": [{"file", "line", "claim", "evidence", "severity"}]}`.
    An invalid finding or path is dropped with a problem naming its index and field; past
    `max_findings` valid findings the rest are dropped with one problem. A file that is missing,
    not JSON or without a `findings` list gives nothing and that problem. `looked_at` missing or
    empty means the whole diff.
    """
    _check_lens(lens)
    if max_findings < 1:
        raise ValueError(f"max_findings must be at least 1, got {max_findings}")
    data, problem = _read_json_object(text, FINDINGS_FILE, "findings")
    if data is None:
        return [], (), [problem]
    problems: list[str] = []
    looked_at = _looked_at(data.get("looked_at", []), problems)
    items: list[_FindingItem] = []
    for index, raw in enumerate(data["findings"]):
        try:
            items.append(_FindingItem.model_validate(raw))
        except ValidationError as error:
            problems.append(f"findings[{index}] dropped: {'; '.join(schema_errors(error, limit=3))}")
    if len(items) > max_findings:
        problems.append(
            f"the session reported {len(items)} valid findings; only the first {max_findings} are kept"
            " (review.max_findings)"
        )
        items = items[:max_findings]
    findings = [
        Finding(
            id=f"{lens}-{number}",
            lens=lens,
            file=item.file,
            line=item.line,
            claim=item.claim,
            evidence=item.evidence,
            severity=item.severity,
        )
        for number, item in enumerate(items, start=1)
    ]
    return findings, looked_at, problems


def _looked_at(raw: object, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(raw, list):
        problems.append(f"looked_at must be a list of paths, not {type(raw).__name__}; read as the whole diff")
        return ()
    paths: dict[str, None] = {}
    for index, value in enumerate(raw):
        try:
            if not isinstance(value, str):
                raise ValueError(f"must be a path, not {type(value).__name__}")
            paths.setdefault(_directory_or_file(value))
        except ValueError as error:
            problems.append(f"looked_at[{index}] dropped: {error}")
    return tuple(paths)


def _directory_or_file(value: str) -> str:
    """A looked-at path: a file, or a directory written with its trailing `/`."""
    path = value.strip()
    return _relative_path(path.rstrip("/")) + ("/" if path.endswith("/") and path.rstrip("/") else "")


def findings_to_check(findings: Sequence[Finding], lens: str) -> str:
    """`.lanebot/findings-to-check.json` for `lens`: the OTHER lenses' findings, pretty-printed."""
    _check_lens(lens)
    others = [
        {
            "id": f.id,
            "lens": f.lens,
            "file": f.file,
            "line": f.line,
            "severity": f.severity,
            "claim": f.claim,
            "evidence": f.evidence,
        }
        for f in findings
        if f.lens != lens
    ]
    return json.dumps({"findings": others}, indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- verdicts and the majority


@dataclass(frozen=True)
class Verdict:
    """One lens's judgement of another lens's finding."""

    finding: str
    refute: bool
    reason: str


def parse_verdicts(text: str | None, known: Collection[str]) -> tuple[dict[str, Verdict], list[str]]:
    """The verdicts in `.lanebot/verdicts.json` by finding id, and problems.

    `{"verdicts": [{"finding": id, "refute": bool, "reason": str}]}`. An invalid verdict, one
    on an id not in `known` (the findings this session was given) and a second verdict on one
    finding are dropped with a problem. A finding with no verdict was not refuted.
    """
    data, problem = _read_json_object(text, VERDICTS_FILE, "verdicts")
    if data is None:
        return {}, [problem]
    verdicts: dict[str, Verdict] = {}
    problems: list[str] = []
    for index, raw in enumerate(data["verdicts"]):
        try:
            item = _VerdictItem.model_validate(raw)
        except ValidationError as error:
            problems.append(f"verdicts[{index}] dropped: {'; '.join(schema_errors(error, limit=3))}")
            continue
        if item.finding not in known:
            problems.append(f"verdicts[{index}] dropped: {item.finding!r} is not one of the findings to check")
        elif item.finding in verdicts:
            problems.append(f"verdicts[{index}] dropped: a second verdict on {item.finding}; the first counts")
        else:
            verdicts[item.finding] = Verdict(item.finding, item.refute, item.reason)
    return verdicts, problems


def _covers(paths: Collection[str], file: str) -> bool:
    """Whether a lens that looked at `paths` looked at `file` (no paths: the whole diff)."""
    if not paths:
        return True
    return any(file == path.rstrip("/") or file.startswith(path.rstrip("/") + "/") for path in paths)


def _lens_order(lenses: Iterable[str]) -> list[str]:
    known = [lens for lens in LENSES if lens in lenses]
    return known + sorted(set(lenses) - set(LENSES))


def survivors(
    findings: Sequence[Finding],
    verdicts: Mapping[str, Mapping[str, Verdict]],
    looked_at: Mapping[str, Collection[str]],
    judged: Collection[str],
) -> tuple[list[Finding], list[tuple[Finding, list[Verdict]]]]:
    """(the surviving findings, the dropped ones with the verdicts that refuted them), in order.

    `verdicts`: lens -> finding id -> verdict; `looked_at`: lens -> paths (none: the whole diff);
    `judged`: the lenses whose phase-2 session succeeded. A finding's voters are its own lens
    (which never refutes it) and each other lens in `judged` whose `looked_at` covers the
    finding's file; it survives iff strictly more than half of the voters did not refute it.
    """
    judges = _lens_order(judged)
    kept: list[Finding] = []
    dropped: list[tuple[Finding, list[Verdict]]] = []
    for finding in findings:
        voters = [lens for lens in judges if lens != finding.lens and _covers(looked_at.get(lens, ()), finding.file)]
        refuting = [
            verdict
            for lens in voters
            if (verdict := verdicts.get(lens, {}).get(finding.id)) is not None and verdict.refute
        ]
        standing = 1 + len(voters) - len(refuting)  # 1: the finding's own lens
        if 2 * standing > 1 + len(voters):
            kept.append(finding)
        else:
            dropped.append((finding, refuting))
    return kept, dropped


# --------------------------------------------------------------------------- the diff

_HUNK = re.compile(r"^@@ -\d+(?:,(?P<old>\d+))? \+(?P<new>\d+)(?:,(?P<count>\d+))? @@")
_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def commentable_lines(diff: str) -> dict[str, frozenset[int]]:
    """Per new path of a `git diff` (default `a/` `b/` prefixes), the right-side lines its hunks show.

    Added and context lines count; removed lines do not. Deleted files have no right side and
    files without hunks (binary, pure renames, mode changes) no lines: neither is in the result.
    Quoted paths (`"b/caf\\303\\251.txt"`) are unquoted; a path with a space loses the tab git
    writes after it. A hunk is read by its line counts, so a removed `-- x` or added `++ x` line
    is never taken for a file header.
    """
    lines: dict[str, set[int]] = {}
    path: str | None = None
    old_left = new_left = 0
    right = 0
    for text in diff.replace("\r\n", "\n").split("\n"):
        if old_left > 0 or new_left > 0:
            kind = text[:1]
            if kind == "\\":
                continue
            if kind in ("+", " ", "") and new_left > 0 and (kind == "+" or old_left > 0):
                if path is not None:
                    lines.setdefault(path, set()).add(right)
                right += 1
                new_left -= 1
                old_left -= kind != "+"
                continue
            if kind == "-" and old_left > 0:
                old_left -= 1
                continue
            old_left = new_left = 0  # a malformed hunk ends here; read the line as a header
        if text.startswith("diff --git "):
            path = None
        elif text.startswith("+++ "):
            path = _new_path(text[4:])
        elif (hunk := _HUNK.match(text)) is not None:
            old_left = int(hunk["old"]) if hunk["old"] is not None else 1
            new_left = int(hunk["count"]) if hunk["count"] is not None else 1
            right = int(hunk["new"])
    return {name: frozenset(numbers) for name, numbers in lines.items() if numbers}


def _new_path(field: str) -> str | None:
    name = field.rstrip("\n")
    if name.endswith("\t"):
        name = name[:-1]
    if name == "/dev/null":
        return None
    if name.startswith('"') and name.endswith('"') and len(name) >= 2:
        name = _unquote(name[1:-1])
    return name.removeprefix("b/")


def _unquote(quoted: str) -> str:
    """Git's C-style quoting undone: `\\t`, `\\"`, `\\\\` and octal bytes (`\\303\\251`) as UTF-8."""
    out = bytearray()
    index = 0
    while index < len(quoted):
        char = quoted[index]
        if char != "\\" or index + 1 == len(quoted):
            out += char.encode("utf-8")
            index += 1
            continue
        following = quoted[index + 1]
        if following in _ESCAPES:
            out.append(_ESCAPES[following])
            index += 2
        elif re.fullmatch(r"[0-7]{3}", quoted[index + 1 : index + 4]):
            out.append(int(quoted[index + 1 : index + 4], 8) & 0xFF)
            index += 4
        else:
            out += char.encode("utf-8")
            index += 1
    return out.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- the review

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def review_payload(
    findings: Sequence[Finding],
    commentable: Mapping[str, frozenset[int]],
    *,
    commit_id: str,
    marker_text: str,
    lenses: Sequence[str],
    dropped: int,
    problems: Sequence[str],
) -> dict[str, Any]:
    """The body of `POST /repos/{o}/{r}/pulls/{n}/reviews` for lanebot's own review.

    `{"commit_id", "event": "COMMENT", "body", "comments": [{"path", "line", "side": "RIGHT",
    "body"}]}`: a surviving finding on a line the diff shows on the right side is an inline
    comment, the others are listed in the body. The body starts with `marker_text`, names the
    lenses, counts the findings dropped by refutation, says so when nothing survived, and lists
    the problems. The event is always COMMENT: lanebot never approves its own work.
    """
    if not _COMMIT.fullmatch(commit_id):
        raise ValueError(f"commit_id must be a full commit sha (40 or 64 hex digits), got {commit_id[:80]!r}")
    require_marker(marker_text)
    if not lenses:
        raise ValueError("lenses must name at least one lens that looked")
    for lens in lenses:
        _check_lens(lens)
    if dropped < 0:
        raise ValueError(f"dropped counts findings, it cannot be {dropped}")
    on_diff = [f.line in commentable.get(f.file, frozenset()) for f in findings]
    inline = [f for f, shown in zip(findings, on_diff) if shown]
    listed = [f for f, shown in zip(findings, on_diff) if not shown]
    comments = [{"path": f.file, "line": f.line, "side": "RIGHT", "body": _inline_body(f)} for f in inline]
    head = _review_head(marker_text, lenses, len(inline), len(listed), dropped)
    sections = [_listed_section(f) for f in listed]
    problem_items = [f"- {defuse(markdown_text(shorten(p, _PROBLEM_CHARS)))}" for p in problems]

    def render(shown: int) -> str:
        parts = [head, *sections[:shown]]
        if shown < len(sections):
            parts.append(f"… and {len(sections) - shown} more findings, not shown: GitHub's comment limit.\n")
        if problem_items:
            parts.append("**Problems**\n\n" + "\n".join(problem_items) + "\n")
        parts.append("_lanebot's own review only comments: it never approves its own pull request._\n")
        return "\n".join(parts)

    body = largest_fitting(render, len(sections))
    return {"commit_id": commit_id, "event": "COMMENT", "body": body, "comments": comments}


def _lens_list(lenses: Sequence[str]) -> str:
    names = [f"**{lens}**" for lens in dict.fromkeys(lenses)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _review_head(marker_text: str, lenses: Sequence[str], inline: int, listed: int, dropped: int) -> str:
    several = len(set(lenses)) > 1
    lines = [marker_text, "### lanebot's own review", ""]
    looked = f"lanebot looked at this pull request through the {_lens_list(lenses)} "
    looked += "lenses" if several else "lens"
    looked += (
        "; each lens then tried to refute the others' findings, and a finding stays only when most of"
        " the lenses that looked at its file do not refute it."
        if several
        else "."
    )
    lines.append(looked)
    refuted = f" {_plural(dropped, 'finding')} {'was' if dropped == 1 else 'were'} dropped: other lenses refuted them."
    if inline + listed == 0:
        found = "Nothing survived:" + (refuted if dropped else " no lens reported a finding.")
    else:
        found = f"{_plural(inline + listed, 'finding')} survived"
        found += f": {inline} inline below, {listed} listed here (their line is not in the diff)." if listed else "."
        found += refuted if dropped else ""
    lines += ["", found, ""]
    return "\n".join(lines)


def _severity(finding: Finding) -> str:
    return f"**{markdown_text(finding.severity)}**"


def _inline_body(finding: Finding) -> str:
    return (
        f"{_severity(finding)} · {markdown_text(finding.lens)} (lanebot's own review)\n\n"
        f"{defuse(markdown_cell(finding.claim))}\n\n"
        f"{defuse(code_block(finding.evidence))}\n"
    )


def _listed_section(finding: Finding) -> str:
    where = code_span(f"{finding.file}:{finding.line}")
    return (
        f"#### {where} · {_severity(finding)} · {markdown_text(finding.lens)}\n\n"
        f"{defuse(markdown_cell(finding.claim))}\n\n"
        f"{defuse(code_block(finding.evidence))}\n"
    )
