"""A fix lane: the work a reviewer asked for on lanebot's pull request, done on its branch.

One review request of kind `fix` (bot/runner/review/queue.py), from a review asking for changes or a `/fix`
comment by someone allowed to approve:

1. The pull request as it is now (head, base), every review comment on it, and which threads are
   resolved (GitHub's GraphQL `reviewThreads`; REST does not say). Resolved threads are left out. A
   comment is trusted when its author may approve, asked of `authorise` with the author's GitHub user
   id (`user.id`; a deleted account has none and is never trusted), the requester's comments too;
   threads with a trusted comment are instructions, the rest context (bot/core/feedback.py).
2. One agent session in the pull request branch's worktree, with `.lanebot/threads.json` beside the
   prompt; it reports in `.lanebot/fix.json` which threads it addressed and which not, and why.
   It may change the files the pull request already changes and any the approver named in backticks;
   then `integrate.verify` must pass. Otherwise it is tried again (`fix.max_retries`), shown why.
3. Success: the commit is pushed to the pull request's branch only if the branch is still where the
   lane started (a lease), verify's check run goes on the new head, each instruction thread gets a
   reply (what changed and the commit, or why not), review is requested again from whoever asked,
   and the request's comment on the pull request says what happened. Failure: that comment says
   what failed; nothing is pushed.

A request of kind `ci` is the same lane for the repository's failing CI (bot/web/handlers/check_suite.py):
its brief is the failing checks as data, it acts on no review thread, may change only the files the
pull request already changes, and asks no one to review again. Every fix lane records the head it
is about to push (`fix_pushing`), which is how failing CI on that head is known to be on lanebot's.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from gidgethub import BadRequest

from bot.core.checks import VERIFY_CHECK, external_id
from bot.core.feedback import (
    Brief,
    FixReport,
    ReviewComment,
    Thread,
    build_threads,
    named_paths,
    outside_allowed,
    parse_fix_report,
    reply_body,
    sort_threads,
    summary_body,
    threads_json,
)
from bot.core.names import integration_branch
from bot.core.text import marker, parse_marker, sanitize_untrusted
from bot.edges.agents import AgentResult
from bot.edges.files import WorktreeFileError, read_worktree_file, write_worktree_file
from bot.edges.git import GitError, Worktree, git
from bot.edges.github.checks import finish_check, start_check
from bot.edges.github.permissions import authorise, cache_for
from bot.edges.github.reviews import (
    get_pull,
    reply_to_comment,
    request_reviewers,
    review_comments,
    thread_states,
)
from bot.edges.store import reviews
from bot.edges.store import runs as store
from bot.edges.store.models import ReviewRequest
from bot.render.checks import verify_report
from bot.render.prompts import render_prompt
from bot.runner.budget import budget_stop_for
from bot.runner.context import RuntimeContext
from bot.runner.integrate import fresh_integration_worktree, remove_integration_worktree, run_session
from bot.runner.jailing import command_jail, jail_problem
from bot.runner.lanes import PROTECTED_DIRECTORIES, keep_tail, run_script
from bot.runner.review import queue as review_queue
from bot.runner.runtime import Runtime, db, load_runtime

log = logging.getLogger(__name__)

__all__ = ["FIX_PUSHING", "REPORT_FILE", "THREADS_FILE", "pull_request_files", "run_fix"]

THREADS_FILE = ".lanebot/threads.json"
REPORT_FILE = ".lanebot/fix.json"
FIX_PUSHING = "fix_pushing"  # the run event naming the head a fix lane is about to push


async def run_fix(context: RuntimeContext, request: ReviewRequest) -> None:
    """Do the fix lane `request` (claimed, so `running`); its outcome goes to its row and comment."""
    rt = await load_runtime(context, request.run_id)
    await _FixLane(rt, request).run()


async def pull_request_files(rt: Runtime, base: str, head: str) -> list[str]:
    """The paths the pull request changes, as GitHub's diff shows them (from the merge base)."""
    listing = await git("diff", "--name-only", "-z", "--no-renames", f"{base}...{head}", cwd=rt.mirror.path)
    return [path for path in listing.stdout.split("\0") if path]


@dataclass
class _Attempt:
    """What one attempt left: a head to push (None: nothing changed), or why it failed."""

    report: FixReport
    problems: list[str]
    head: str | None = None
    failure: str | None = None
    output: str = ""
    verify_output: str = ""
    verified: bool | None = None


@dataclass
class _Feedback:
    brief: Brief
    trusted: set[int] = field(default_factory=set)  # GitHub user ids, never logins
    problems: list[str] = field(default_factory=list)

    def is_trusted(self, comment: ReviewComment) -> bool:
        return not comment.author_is_bot and comment.author_id is not None and comment.author_id in self.trusted


class _FixLane:
    def __init__(self, rt: Runtime, request: ReviewRequest) -> None:
        self.rt = rt
        self.request = request
        self.settings = rt.workflow.fix
        self.branch = integration_branch(rt.issue_number)
        self.number = request.pr_number

    # ----------------------------------------------------------------------- the steps

    async def run(self) -> None:
        pull = await get_pull(self.rt.client, self.rt.run.repository, self.number)
        if pull.get("state") != "open":
            await self._finish("cancelled", error=f"pull request #{self.number} is closed")
            await self._say("This pull request was closed before the fix lane started; nothing was done.")
            return
        refused = await jail_problem(self.rt.context.settings)
        if refused is not None:  # before the agent: its changes could not be verified
            await self._finish("failed", error=refused)
            await self._say(f"{self._to}the fix lane did not start: {refused}.")
            return
        over_budget = await budget_stop_for(self.rt)
        if over_budget is not None:
            await self._finish("failed", error=f"the budget is reached: {over_budget}")
            await self._say(
                f"{self._to}the fix lane did not start: the budget is reached, {over_budget}. "
                "Raise the cap under `budget:` in `.github/lanebot.yml`, then ask again."
            )
            return
        head, base = pull["head"]["sha"], pull["base"]["sha"]
        await self._say(
            f"{self._to}working on it: a fix lane runs on `{self.branch}` "
            f"from {head[:12]}. This comment says what came of it."
        )
        # Failing CI has no review threads to act on, and its report names no files to allow: it is data.
        feedback = _Feedback(brief=Brief((), ())) if self._for_ci else await self._feedback()
        await self.rt.mirror.fetch()
        allowed = await pull_request_files(self.rt, base, head)
        named = [] if self._for_ci else named_paths(self.request.notes)
        worktree = await fresh_integration_worktree(self.rt, head)
        try:
            attempt = await self._attempts(worktree, pull, head, feedback, allowed, named)
            if attempt.failure is None and attempt.head is not None:
                attempt.failure = await self._push(worktree, head)
        finally:
            await remove_integration_worktree(self.rt)
        if attempt.failure is not None:
            await self._failed(attempt, feedback)
        else:
            await self._succeeded(attempt, feedback)

    async def _feedback(self) -> _Feedback:
        client, repository = self.rt.client, self.rt.run.repository
        comments = [ReviewComment.from_api(data) for data in await review_comments(client, repository, self.number)]
        problems: list[str] = []
        try:
            states = {
                comment_id: (state.resolved, state.outdated)
                for comment_id, state in (await thread_states(client, repository, self.number)).items()
            }
        except Exception as error:  # GitHub's GraphQL API unwell or not there: better all threads than none
            log.warning("could not read the review threads of #%d", self.number, exc_info=True)
            problems.append(
                f"lanebot could not ask GitHub which review threads are resolved ({type(error).__name__}), "
                "so every thread was treated as unresolved"
            )
            states = {}
        threads = build_threads(comments, states)
        # Each author is asked about by GitHub user id, the requester too: a login alone could be
        # someone else's by now (renamed and registered again). A comment without an id is no one's.
        authors = {(c.author_id, c.author) for t in threads for c in t.comments if not c.author_is_bot}
        trusted: set[int] = set()
        for user_id, login in sorted((user_id, login) for user_id, login in authors if user_id is not None):
            if await self._may_approve(login, user_id):
                trusted.add(user_id)
        feedback = _Feedback(brief=Brief((), ()), trusted=trusted, problems=problems)
        feedback.brief = sort_threads(threads, feedback.is_trusted)
        return feedback

    async def _may_approve(self, login: str, user_id: int) -> bool:
        gate, cache = self.rt.workflow.gate, cache_for(self.rt.context.github)
        decision = await authorise(self.rt.client, self.rt.run.repository, login, gate, cache, user_id=user_id)
        return decision.allowed

    async def _attempts(
        self,
        worktree: Worktree,
        pull: dict[str, Any],
        head: str,
        feedback: _Feedback,
        allowed: list[str],
        named: list[str],
    ) -> _Attempt:
        failure: dict[str, str] | None = None
        attempt = _Attempt(report=FixReport(summary="", addressed={}, not_addressed={}), problems=[])
        for number in range(1, 2 + self.settings.max_retries):
            # A retry starts from the previous attempt's commit, shown why it failed, as lanes do.
            attempt = await self._attempt(worktree, pull, head, feedback, allowed, named, failure, number)
            if attempt.failure is None:
                return attempt
            failure = {"reason": attempt.failure, "output": attempt.output}
        return attempt

    async def _attempt(
        self,
        worktree: Worktree,
        pull: dict[str, Any],
        head: str,
        feedback: _Feedback,
        allowed: list[str],
        named: list[str],
        failure: dict[str, str] | None,
        number: int,
    ) -> _Attempt:
        result = await self._session(worktree, pull, feedback, allowed + named, failure)
        text, refused = await self._take_report(worktree)
        thread_ids = [thread.id for thread in feedback.brief.instructions]
        if refused is None:
            report, problems = parse_fix_report(text, thread_ids)
        else:  # the report is data: a link or a FIFO there is refused, never read
            why = f"the session did not report on it ({refused})"
            report = FixReport(summary="", addressed={}, not_addressed=dict.fromkeys(thread_ids, why))
            problems = [refused]
        attempt = _Attempt(report=report, problems=problems)
        new_head = await worktree.commit_all(self._commit_message(number), self.rt.identity)
        if isinstance(result, str) or not result.ok:
            attempt.failure = result if isinstance(result, str) else (result.error or "the agent session failed")
            attempt.output = "" if isinstance(result, str) else result.final_message
            return attempt
        changed = await worktree.changed_paths(head)
        protected = [path for path in changed if path.startswith(PROTECTED_DIRECTORIES)]
        offending = outside_allowed(changed, allowed, named)
        if protected or offending:
            shown = sorted(set(protected) | set(offending))
            attempt.failure = (
                f"it changed {', '.join(shown[:5])}{' and more' if len(shown) > 5 else ''}, "
                "outside the files this pull request changes and those the reviewer named"
                + (f" (never {', '.join(PROTECTED_DIRECTORIES)})" if protected else "")
            )
            return attempt
        if new_head is None and not changed:
            return attempt  # nothing to change: every thread is answered with the session's reasons
        verify = self.rt.workflow.integrate.verify
        name = f"fix-{self.request.id}-{number}"
        checked = await run_script(
            verify,
            script=self.rt.script_path(name),
            cwd=worktree.path,
            timeout=float(self.rt.workflow.integrate.verify_timeout),
            env={"LANEBOT_RUN": str(self.rt.run.id)},
            jail=await command_jail(self.rt, worktree=worktree.path, name=name),
        )
        attempt.verified, attempt.verify_output = checked.ok, checked.output
        if not checked.ok:
            attempt.failure, attempt.output = checked.describe("verify"), checked.output
            return attempt
        attempt.head = await worktree.head()
        return attempt

    async def _session(
        self,
        worktree: Worktree,
        pull: dict[str, Any],
        feedback: _Feedback,
        allowed: list[str],
        failure: dict[str, str] | None,
    ) -> AgentResult | str:
        write_worktree_file(worktree.path, THREADS_FILE, threads_json(feedback.brief, feedback.is_trusted))
        prompt = render_prompt(
            self.rt.workflow,
            "fix",
            issue=self.rt.issue_context(),
            pull={"number": self.number, "url": pull.get("html_url") or "", "branch": self.branch},
            request={
                "kind": "ci" if self._for_ci else "review" if self.request.review_id else "command",
                "by": self.request.requested_by,
                "body": sanitize_untrusted(self.request.notes or ""),
            },
            instructions=[_thread_view(t, feedback) for t in feedback.brief.instructions],
            context=[_thread_view(t, feedback) for t in feedback.brief.context],
            allowed_files=allowed,
            verify=self.rt.workflow.integrate.verify,
            failure=failure,
            threads_file=THREADS_FILE,
            report_file=REPORT_FILE,
        )
        brief = _recipe_brief(self.request, feedback) if self.settings.agent == "recipe" else None
        if self._for_ci and brief is not None:
            brief = ""  # the recipe writes what its brief spells out: never what CI output says
        return await run_session(
            self.rt,
            kind="fix",
            lane_id=None,
            folder=f"_fix-{self.request.id}",
            prompt=prompt,
            agent=self.settings.agent,
            timeout=self.settings.timeout,
            cwd=worktree.path,
            brief=brief,
        )

    async def _take_report(self, worktree: Worktree) -> tuple[str | None, str | None]:
        """(the session's report or None, why it was refused or None); then `.lanebot/` goes, so none
        of it is committed. The report is read only as a regular file inside the worktree."""
        refused: str | None = None
        try:
            data = read_worktree_file(worktree.path, REPORT_FILE)
        except WorktreeFileError as error:
            data, refused = None, str(error)
        text = None if data is None else data.decode("utf-8", errors="replace")
        await git("rm", "-r", "--cached", "--quiet", "--ignore-unmatch", "--", ".lanebot", cwd=worktree.path)
        await git("clean", "-d", "--force", "--quiet", "-x", "--", ".lanebot", cwd=worktree.path)
        return text, refused

    def _commit_message(self, number: int) -> str:
        if self._for_ci:
            return (
                f"Fix failing CI on #{self.number}\n\n"
                f"Fix lane for the repository's failing checks on #{self.number} (issue "
                f"#{self.rt.issue_number}), attempt {number}, by lanebot.\n"
            )
        asked = "review" if self.request.review_id else "`/fix`"
        return (
            f"Address review feedback on #{self.number}\n\n"
            f"Fix lane for @{self.request.requested_by}'s {asked} on #{self.number} (issue "
            f"#{self.rt.issue_number}), attempt {number}, by lanebot.\n"
        )

    async def _push(self, worktree: Worktree, head: str) -> str | None:
        # Recorded before the push: the repository's CI may report on the new head before this lane
        # finishes, and lanebot reacts to failing CI only on heads it pushed (bot/web/handlers/check_suite.py).
        pushing = {"request": self.request.id, "head": await worktree.head()}
        await db(store.append_event, self.rt.engine, self.rt.run.id, FIX_PUSHING, pushing)
        try:
            await worktree.push(self.branch, expected=head)
        except GitError:
            log.info("fix lane %d: %s moved while it ran", self.request.id, self.branch, exc_info=True)
            return (
                f"`{self.branch}` moved while the fix lane ran (someone pushed to it), so its work was not "
                "pushed over theirs"
            )
        return None

    # ----------------------------------------------------------------------- telling people

    async def _succeeded(self, attempt: _Attempt, feedback: _Feedback) -> None:
        commit_url = (
            f"{self.rt.repository.html_url}/pull/{self.number}/commits/{attempt.head}" if attempt.head else None
        )
        if attempt.head is not None:
            await self._report_verify(attempt)
        await self._reply_in_threads(attempt, feedback, commit_url)
        problems = feedback.problems + attempt.problems
        try:
            if not self._for_ci:  # the CI's bot reviews nothing: its next run says whether the fix holds
                await request_reviewers(
                    self.rt.client, self.rt.run.repository, self.number, [self.request.requested_by]
                )
        except BadRequest as error:
            problems.append(f"lanebot could not request @{self.request.requested_by}'s review again ({error})")
        await self._summarise(attempt, feedback, problems, commit_url=commit_url, failure=None)
        await self._finish("done", head_sha=attempt.head, result=_result(attempt, feedback))
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            "fix_pushed" if attempt.head else "fix_unchanged",
            {"request": self.request.id, "head": attempt.head},
        )

    async def _failed(self, attempt: _Attempt, feedback: _Feedback) -> None:
        reason = attempt.failure or "it failed"
        if attempt.output:
            reason += "\n\n" + keep_tail(attempt.output, 40)
        await self._summarise(attempt, feedback, feedback.problems + attempt.problems, commit_url=None, failure=reason)
        await self._finish("failed", error=attempt.failure, result=_result(attempt, feedback))
        await db(
            store.append_event,
            self.rt.engine,
            self.rt.run.id,
            "fix_failed",
            {"request": self.request.id, "why": attempt.failure},
        )

    async def _summarise(
        self,
        attempt: _Attempt,
        feedback: _Feedback,
        problems: list[str],
        *,
        commit_url: str | None,
        failure: str | None,
    ) -> None:
        await self._say(
            summary_body(
                marker_text=review_queue.request_marker(self.request),
                requested_by=self.request.requested_by,
                kind=self._kind,
                head_sha=attempt.head if failure is None else None,
                commit_url=commit_url,
                report=attempt.report,
                threads=feedback.brief.instructions,
                verify_command=self.rt.workflow.integrate.verify,
                verify_passed=attempt.verified,
                problems=problems,
                failure=failure,
            )
        )

    async def _report_verify(self, attempt: _Attempt) -> None:
        """verify ran before the push (nothing unverified reaches the branch); its check run goes on now."""
        assert attempt.head is not None
        client, repository = self.rt.client, self.rt.run.repository
        verify = self.rt.workflow.integrate.verify
        check_id = await start_check(
            client,
            repository,
            name=VERIFY_CHECK,
            head_sha=attempt.head,
            external=external_id(self.rt.run_id),
            title="verify ran on the fix lane's commit",
            summary=f"`{verify}` ran on the fix lane's commit before it was pushed.",
        )
        await finish_check(
            client,
            repository,
            check_id,
            verify_report(
                passed=True,
                command=verify,
                output=attempt.verify_output,
                reason=None,
                transcript=None,
                offer_rerun=False,
            ),
        )

    async def _reply_in_threads(self, attempt: _Attempt, feedback: _Feedback, commit_url: str | None) -> None:
        client, repository = self.rt.client, self.rt.run.repository
        answered = {_thread_answered(c) for c in await review_comments(client, repository, self.number)}
        for thread in feedback.brief.instructions:
            reply_marker = marker("fix-reply", self.rt.run.id, request=self.request.id, thread=thread.id)
            if (self.request.id, thread.id) in answered:
                continue  # a redo after a restart: answered before
            addressed, text = attempt.report.outcome(thread.id)
            if addressed and attempt.head is None:
                addressed, text = False, "the session changed nothing for it, so there is no commit to point to"
            body = reply_body(
                thread_id=thread.id,
                addressed=addressed,
                text=text,
                commit_sha=attempt.head if addressed else None,
                commit_url=commit_url if addressed else None,
                marker_text=reply_marker,
            )
            await reply_to_comment(client, repository, self.number, thread.id, body)

    async def _say(self, body: str) -> None:
        await review_queue.request_comment(self.rt.context, self.rt.run, self.request, body)

    async def _finish(self, state: str, **fields: Any) -> None:
        await db(reviews.finish, self.rt.engine, self.request.id, state, **fields)

    @property
    def _for_ci(self) -> bool:
        return self.request.kind == "ci"

    @property
    def _to(self) -> str:
        """Who the lane's messages address: the person who asked; no one for failing CI."""
        return "" if self._for_ci else f"@{self.request.requested_by}: "

    @property
    def _kind(self) -> str:
        if self._for_ci:
            return "ci"
        return "review" if self.request.review_id else "comment"


def _thread_view(thread: Thread, feedback: _Feedback) -> dict[str, Any]:
    """A thread as the prompt template takes it (text sanitized: what GitHub does not show is dropped)."""
    root = thread.root
    return {
        "thread": thread.id,
        "path": root.path,
        "line": root.line if root.line is not None else root.original_line,
        "diff_hunk": root.diff_hunk,
        "comments": [
            {"id": c.id, "author": c.author, "trusted": feedback.is_trusted(c), "body": sanitize_untrusted(c.body)}
            for c in thread.comments
        ],
    }


def _recipe_brief(request: ReviewRequest, feedback: _Feedback) -> str:
    """The recipe adapter applies files spelled out in its brief: here, what the trusted people wrote."""
    texts = [request.notes or ""] + [
        c.body for t in feedback.brief.instructions for c in t.comments if feedback.is_trusted(c)
    ]
    return "\n\n".join(text for text in texts if text)


def _thread_answered(data: dict[str, Any]) -> tuple[int, int] | None:
    """(request, thread) of a reply lanebot posted, found by its marker (and written by a bot: anyone
    can type a marker)."""
    if (data.get("user") or {}).get("type") != "Bot":
        return None
    fields = parse_marker(str(data.get("body") or ""))
    if not fields or fields.get("kind") != "fix-reply":
        return None
    try:
        return int(fields["request"]), int(fields["thread"])
    except (KeyError, TypeError, ValueError):
        return None


def _result(attempt: _Attempt, feedback: _Feedback) -> str:
    return json.dumps(
        {
            "addressed": sorted(attempt.report.addressed),
            "not_addressed": sorted(attempt.report.not_addressed),
            "context_threads": [t.id for t in feedback.brief.context],
            "problems": feedback.problems + attempt.problems,
            "verified": attempt.verified,
        },
        sort_keys=True,
    )
