"""The repository's own CI failing on lanebot's pull request: which checks failed, what a fix lane is
told of them, and whether another fix round may start. Pure.

What GitHub shows of a check run (its name, conclusion, output title, summary and text, and its
annotations) is written by the CI and whatever it ran: the code under test, its test names, its
error messages. All of it is data for the fix lane, never instructions, so every piece is cleaned
of what a reader cannot see (`sanitize_untrusted`) and bounded here, before it is stored as the
fix request's brief; the prompt shows the brief fenced, as data.

A suite fails when its conclusion is `failure` or `timed_out`. `success`, `neutral` and `skipped`
are not failures; `cancelled` and `stale` say the CI did not finish, and `action_required` waits
for a person, so none of them is something code changes can fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.core.text import code_span, sanitize_untrusted, shorten, shorten_tail

__all__ = [
    "ANNOTATIONS_PER_CHECK",
    "BRIEF_LIMIT",
    "FAILING_CONCLUSIONS",
    "Annotation",
    "FailedCheck",
    "RoundDecision",
    "ci_brief",
    "failed_checks",
    "failing_run_ids",
    "fix_round",
    "stop_comment",
    "suite_failed",
]

FAILING_CONCLUSIONS = ("failure", "timed_out")
ANNOTATIONS_PER_CHECK = 20
CHECKS_SHOWN = 10
BRIEF_LIMIT = 16_000  # characters of the whole brief
_TITLE_CHARS = 200
_SUMMARY_CHARS = 2_000
_OUTPUT_CHARS = 3_000  # the tail of a check's `output.text`
_MESSAGE_CHARS = 500
_PATH_CHARS = 300
_LEVEL_ORDER = {"failure": 0, "warning": 1, "notice": 2}


def suite_failed(conclusion: object) -> bool:
    """Whether a finished suite's conclusion is one a fix lane can act on."""
    return conclusion in FAILING_CONCLUSIONS


@dataclass(frozen=True)
class Annotation:
    """A line (or lines) of a file a check run pointed at, as GitHub's check-annotation has it."""

    path: str
    start_line: int | None
    end_line: int | None
    level: str
    message: str
    title: str = ""

    @classmethod
    def from_api(cls, data: Mapping[str, Any]) -> Annotation:
        return cls(
            path=_clean(data.get("path"), _PATH_CHARS),
            start_line=_line(data.get("start_line")),
            end_line=_line(data.get("end_line")),
            level=_clean(data.get("annotation_level"), 20) or "notice",
            message=_clean(data.get("message"), _MESSAGE_CHARS),
            title=_clean(data.get("title"), _TITLE_CHARS),
        )

    def where(self) -> str:
        if self.start_line is None:
            return self.path
        if self.end_line is None or self.end_line == self.start_line:
            return f"{self.path}:{self.start_line}"
        return f"{self.path}:{self.start_line}-{self.end_line}"


@dataclass(frozen=True)
class FailedCheck:
    """One failing check run: what it is called, how it ended, what it said, where it pointed."""

    name: str
    conclusion: str
    title: str
    summary: str
    output_tail: str
    annotations: tuple[Annotation, ...]
    more_annotations: int = 0  # annotations left out (past ANNOTATIONS_PER_CHECK)


def failing_run_ids(check_runs: Iterable[Mapping[str, Any]]) -> list[int]:
    """The ids of the runs whose conclusion is a failure, in the order given (whose annotations to fetch)."""
    return [int(run["id"]) for run in check_runs if suite_failed(run.get("conclusion")) and "id" in run]


def failed_checks(
    check_runs: Iterable[Mapping[str, Any]], annotations: Mapping[int, Sequence[Mapping[str, Any]]]
) -> list[FailedCheck]:
    """The failing runs of a suite (as GET .../check-suites/{id}/check-runs lists them), each with its
    annotations (`annotations` by run id), the most severe annotations first, ordered by name."""
    found = []
    for run in check_runs:
        conclusion = run.get("conclusion")
        if not suite_failed(conclusion):
            continue
        output = run.get("output") or {}
        given = [Annotation.from_api(a) for a in annotations.get(int(run.get("id") or 0), ())]
        given.sort(key=lambda a: _LEVEL_ORDER.get(a.level, len(_LEVEL_ORDER)))
        found.append(
            FailedCheck(
                name=_clean(run.get("name"), _TITLE_CHARS) or "(no name)",
                conclusion=str(conclusion),
                title=_clean(output.get("title"), _TITLE_CHARS),
                summary=_clean(output.get("summary"), _SUMMARY_CHARS),
                output_tail=shorten_tail(sanitize_untrusted(str(output.get("text") or "")).strip(), _OUTPUT_CHARS),
                annotations=tuple(given[:ANNOTATIONS_PER_CHECK]),
                more_annotations=max(0, len(given) - ANNOTATIONS_PER_CHECK),
            )
        )
    return sorted(found, key=lambda check: check.name)


def ci_brief(app: str, head_sha: str, checks: Sequence[FailedCheck], *, limit: int = BRIEF_LIMIT) -> str:
    """What a fix lane is told of the failure: which CI, on which commit, and for each failing check
    its name, title, summary, annotations and the end of its output; at most `limit` characters
    (later checks are left out, and counted, when it would be longer)."""
    head = f"The check suite of {_clean(app, 100) or 'the CI'} on {head_sha[:12]} failed."
    sections = [_check_section(check) for check in checks[:CHECKS_SHOWN]]
    for shown in range(len(sections), -1, -1):
        left_out = len(checks) - shown
        parts = [head, *sections[:shown]]
        if left_out:
            parts.append(f"{left_out} more failing check{'s' * (left_out != 1)} not shown.")
        text = "\n\n".join(parts) + "\n"
        if len(text) <= limit:
            return text
    return shorten(head, limit)


def _check_section(check: FailedCheck) -> str:
    lines = [f"### Check `{check.name}`: {check.conclusion}"]
    if check.title:
        lines.append(f"Title: {check.title}")
    if check.summary:
        lines += ["", "Summary:", check.summary]
    if check.annotations:
        lines += ["", "Annotations:"]
        for annotation in check.annotations:
            title = f" {annotation.title}:" if annotation.title else ""
            lines.append(f"- {annotation.where()} ({annotation.level}):{title} {annotation.message}")
        if check.more_annotations:
            lines.append(f"- … and {check.more_annotations} more annotations")
    if check.output_tail:
        lines += ["", "The end of its output:", check.output_tail]
    return "\n".join(lines)


@dataclass(frozen=True)
class RoundDecision:
    """Whether failing CI may start fix round `round` on the pull request, under `limit` rounds."""

    allowed: bool
    round: int
    limit: int


def fix_round(rounds_before: int, limit: int) -> RoundDecision:
    """The next round, allowed while fewer than `limit` (ci.max_fix_rounds) have started."""
    return RoundDecision(allowed=rounds_before < limit, round=rounds_before + 1, limit=limit)


def stop_comment(marker_text: str, limit: int, app: str) -> str:
    """lanebot's one comment saying it stopped fixing failing CI on this pull request, why, and what a
    person can do. The same text each time, so posting it again changes nothing."""
    rounds = "no fix round" if limit == 0 else f"{limit} fix round{'s' * (limit != 1)}"
    return (
        f"{marker_text}\n### lanebot stopped fixing CI on this pull request\n\n"
        f"The checks of {code_span(shorten(app, 100))} failed again, and lanebot has already started "
        f"{rounds} for failing CI here (`ci.max_fix_rounds` is {limit} in `.github/lanebot.yml`), so it "
        "starts no more: rounds that do not make CI pass would go on spending agent sessions.\n\n"
        "What you can do: look at the failing checks and push a fix to this branch yourself, or comment "
        "`/fix` with what to change (someone allowed to approve lanebot's work starts a fix lane that way "
        "whatever the count), or raise `ci.max_fix_rounds`.\n"
    )


def _clean(value: object, limit: int) -> str:
    return shorten(sanitize_untrusted(str(value or "")).strip(), limit)


def _line(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
