"""lanebot's own review of its pull request, posted before a human spends time on it.

One review request of kind `self` (bot/runner/review/queue.py), queued when verify passed and the pull
request opened, if the workflow's `review.enabled`:

1. Find: one verifier session per lens (`review.lenses`: correctness against the issue, security,
   whether each unit's check really tests its unit), at once, each in its own read-only checkout of
   the pull request's head with the pull request's diff in `.lanebot/diff.patch`. Each is asked to
   refute what the pull request claims and writes `.lanebot/findings.json`, which is validated
   against a schema (bot/core/findings.py); what does not fit is dropped and said.
2. Judge: with two or more lenses and any finding, each verifier is shown the other lenses'
   findings (`.lanebot/findings-to-check.json`) and writes `.lanebot/verdicts.json`. A finding
   survives only if a majority of the verifiers that looked at its file do not refute it.
3. Post: one pull request review, `event: COMMENT` (never an approval), with an inline comment on
   each surviving finding whose line the diff shows, the others listed in its body. A hidden
   marker naming the head makes it once per head, however often this runs.

Its sessions are `review` sessions; the gate comment counted them in the run's session bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from gidgethub import BadRequest

from bot.core.findings import (
    LENSES,
    Finding,
    Verdict,
    commentable_lines,
    findings_to_check,
    parse_findings,
    parse_verdicts,
    review_payload,
    survivors,
)
from bot.core.text import marker, parse_marker
from bot.edges.files import WorktreeFileError, read_worktree_file, remove_worktree_file, write_worktree_file
from bot.edges.git import git
from bot.edges.github.reviews import create_review, get_pull, list_reviews
from bot.edges.store import reviews
from bot.edges.store import runs as store
from bot.edges.store.models import ReviewRequest
from bot.render.prompts import render_prompt
from bot.runner.context import RuntimeContext
from bot.runner.integrate import run_session
from bot.runner.review import queue as review_queue
from bot.runner.runtime import Runtime, db, load_runtime

log = logging.getLogger(__name__)

__all__ = ["DIFF_FILE", "FINDINGS_FILE", "TO_CHECK_FILE", "VERDICTS_FILE", "pull_request_diff", "self_review"]

DIFF_FILE = ".lanebot/diff.patch"
FINDINGS_FILE = ".lanebot/findings.json"
TO_CHECK_FILE = ".lanebot/findings-to-check.json"
VERDICTS_FILE = ".lanebot/verdicts.json"


async def self_review(context: RuntimeContext, request: ReviewRequest) -> None:
    """Do lanebot's own review `request` (claimed, so `running`); it ends with a review posted."""
    rt = await load_runtime(context, request.run_id)
    await _SelfReview(rt, request).run()


async def pull_request_diff(rt: Runtime, base: str, head: str) -> str:
    """The pull request's diff as GitHub shows it: from the merge base to the head, renames found."""
    diff = await git("diff", "--no-color", "--no-ext-diff", "-M", f"{base}...{head}", cwd=rt.mirror.path)
    return diff.stdout


@dataclass
class _Lens:
    """What one verifier did: whether it reported, and what."""

    name: str
    found: bool = False
    judged: bool = False
    findings: list[Finding] = field(default_factory=list)
    looked_at: tuple[str, ...] = ()
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


class _SelfReview:
    def __init__(self, rt: Runtime, request: ReviewRequest) -> None:
        self.rt = rt
        self.request = request
        self.settings = rt.workflow.review
        self.number = request.pr_number

    async def run(self) -> None:
        client, repository = self.rt.client, self.rt.run.repository
        pull = await get_pull(client, repository, self.number)
        if pull.get("state") != "open":
            await db(reviews.finish, self.rt.engine, self.request.id, "cancelled", error="the pull request is closed")
            return
        head, base = pull["head"]["sha"], pull["base"]["sha"]
        review_marker = marker("self-review", self.rt.run.id, head=head)
        if await self._posted_before(head):
            await db(reviews.finish, self.rt.engine, self.request.id, "done", head_sha=head)
            return
        await self.rt.mirror.fetch()
        diff = await pull_request_diff(self.rt, base, head)
        lenses = [_Lens(name) for name in self.settings.lenses]
        await asyncio.gather(*(self._find(lens, head, diff, pull) for lens in lenses))
        if not any(lens.found for lens in lenses):
            why = "; ".join(p for lens in lenses for p in lens.problems) or "no verifier reported"
            await db(reviews.finish, self.rt.engine, self.request.id, "failed", head_sha=head, error=why[:4_000])
            await review_queue.request_comment(
                self.rt.context, self.rt.run, self.request, f"lanebot's own review of {head[:12]} could not run: {why}"
            )
            return
        findings = [finding for lens in lenses for finding in lens.findings]
        if len(lenses) > 1 and findings:
            await asyncio.gather(*(self._judge(lens, head, diff, findings) for lens in lenses if lens.found))
        await self._post(lenses, findings, head, diff, review_marker)

    async def _posted_before(self, head: str) -> bool:
        for review in await list_reviews(self.rt.client, self.rt.run.repository, self.number):
            fields = parse_marker(str(review.get("body") or ""))
            if (
                (review.get("user") or {}).get("type") == "Bot"
                and fields
                and fields.get("kind") == "self-review"
                and fields.get("run") == self.rt.run.id
                and str(fields.get("head")) == head
            ):
                return True
        return False

    # ----------------------------------------------------------------------- the sessions

    async def _find(self, lens: _Lens, head: str, diff: str, pull: dict[str, Any]) -> None:
        prompt = render_prompt(
            self.rt.workflow,
            "review",
            issue=self.rt.issue_context(),
            pull={"number": self.number, "title": pull.get("title") or "", "body": pull.get("body") or ""},
            lens={"name": lens.name, "description": LENSES[lens.name]},
            units=[{"id": u.id, "title": u.title, "files": u.files, "check": u.check} for u in self.rt.graph.units],
            diff_file=DIFF_FILE,
            findings_file=FINDINGS_FILE,
            max_findings=self.settings.max_findings,
        )
        text = await self._session(lens, "find", head, {DIFF_FILE: diff}, prompt, FINDINGS_FILE)
        if text is None:
            return
        lens.findings, lens.looked_at, problems = parse_findings(
            text, lens.name, max_findings=self.settings.max_findings
        )
        lens.problems += [f"{lens.name}: {problem}" for problem in problems]
        lens.found = True

    async def _judge(self, lens: _Lens, head: str, diff: str, findings: list[Finding]) -> None:
        others = [finding for finding in findings if finding.lens != lens.name]
        if not others:
            return
        prompt = render_prompt(
            self.rt.workflow,
            "refute",
            issue=self.rt.issue_context(),
            lens={"name": lens.name, "description": LENSES[lens.name]},
            findings=[vars(finding) for finding in others],
            findings_file=TO_CHECK_FILE,
            verdicts_file=VERDICTS_FILE,
            diff_file=DIFF_FILE,
        )
        files = {DIFF_FILE: diff, TO_CHECK_FILE: findings_to_check(findings, lens.name)}
        text = await self._session(lens, "judge", head, files, prompt, VERDICTS_FILE)
        if text is None:
            return
        lens.verdicts, problems = parse_verdicts(text, [finding.id for finding in others])
        lens.problems += [f"{lens.name}: {problem}" for problem in problems]
        lens.judged = True

    async def _session(
        self, lens: _Lens, phase: str, head: str, files: dict[str, str], prompt: str, output: str
    ) -> str | None:
        """One verifier session in a fresh checkout of `head`; the file it wrote, or None (why: in lens.problems)."""
        path = self.rt.worktree_path(f"_review-{self.request.id}-{lens.name}")
        worktree = await self.rt.mirror.checkout(path, head)
        try:
            remove_worktree_file(worktree.path, output)  # one the repository committed is not this session's
            for name, text in files.items():  # never through a link the repository committed there
                write_worktree_file(worktree.path, name, text)
            result = await run_session(
                self.rt,
                kind="review",
                lane_id=None,
                folder=f"_review-{self.request.id}",
                prompt=prompt,
                agent=self.settings.agent,
                timeout=self.settings.timeout,
                cwd=worktree.path,
                env={"LANEBOT_REVIEW_LENS": lens.name, "LANEBOT_REVIEW_PHASE": phase},
            )
            if isinstance(result, str) or not result.ok:
                why = result if isinstance(result, str) else (result.error or "the session failed")
                lens.problems.append(f"{lens.name} ({phase}): {why}")
                return None
            try:
                data = read_worktree_file(worktree.path, output)
            except WorktreeFileError as error:  # a link or a FIFO there is refused, never followed
                lens.problems.append(f"{lens.name} ({phase}): {error}")
                return None
            if data is None:
                lens.problems.append(f"{lens.name} ({phase}): the session wrote no `{output}`")
                return None
            return data.decode("utf-8", errors="replace")
        finally:
            with contextlib.suppress(Exception):
                await self.rt.mirror.remove_worktree(path)

    # ----------------------------------------------------------------------- the review

    async def _post(
        self, lenses: list[_Lens], findings: list[Finding], head: str, diff: str, review_marker: str
    ) -> None:
        kept, dropped = survivors(
            findings,
            {lens.name: lens.verdicts for lens in lenses if lens.judged},
            {lens.name: lens.looked_at for lens in lenses},
            [lens.name for lens in lenses if lens.judged],
        )
        problems = [problem for lens in lenses for problem in lens.problems]
        looked = [lens.name for lens in lenses if lens.found]
        payload = review_payload(
            kept,
            commentable_lines(diff),
            commit_id=head,
            marker_text=review_marker,
            lenses=looked,
            dropped=len(dropped),
            problems=problems,
        )
        client, repository = self.rt.client, self.rt.run.repository
        try:
            review = await create_review(
                client, repository, self.number, commit_id=head, body=payload["body"], comments=payload["comments"]
            )
        except BadRequest as error:
            if error.status_code != 422 or not payload["comments"]:
                raise
            # GitHub could not place an inline comment: every finding goes in the body instead.
            log.warning(
                "self-review of #%d: inline comments refused (%s); posting them in the body", self.number, error
            )
            payload = review_payload(
                kept,
                {},
                commit_id=head,
                marker_text=review_marker,
                lenses=looked,
                dropped=len(dropped),
                problems=problems,
            )
            review = await create_review(
                client, repository, self.number, commit_id=head, body=payload["body"], comments=[]
            )
        result = {
            "review_id": review.get("id"),
            "lenses": looked,
            "findings": [f.id for f in findings],
            "kept": [f.id for f in kept],
            "dropped": [f.id for f, _ in dropped],
            "problems": problems,
        }
        await db(
            reviews.finish,
            self.rt.engine,
            self.request.id,
            "done",
            head_sha=head,
            result=json.dumps(result, sort_keys=True),
        )
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            "self_review_posted",
            {"request": self.request.id, "head": head, "kept": len(kept), "dropped": len(dropped)},
        )
