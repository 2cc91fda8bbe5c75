"""`issue_comment.created` on lanebot's pull request: `/fix [notes]`, and the questions `/status`, `/help`.

GitHub delivers a comment on a pull request's conversation as an issue comment whose issue has a
`pull_request` key. Only a pull request a lanebot run opened counts (the run recorded its number);
comments on any other pull request are none of lanebot's business and cost nothing.

The comment is handled as on an issue (bot/web/handlers/issue_comment.py's `Conversation`: the author
authorised first, a reaction, each command answered in order, answers posted once), with the run
found through its pull request. `/fix` from someone allowed to approve queues a fix lane
(bot/runner/review/queue.py) whose brief holds the notes (the rest of its line and the lines below it, up
to the next command) and every unresolved review comment; from anyone else it is refused with the
reason. The run's other commands belong on the issue and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.commands import Command, parse_commands
from bot.core.lifecycle import Event, RunState
from bot.edges.store import runs
from bot.edges.store.models import Run
from bot.runner.review.queue import request_fix
from bot.web.dispatcher import HandlerContext
from bot.web.handlers.issue_comment import _COMMANDS, _LINE_BREAK, Conversation
from bot.web.handlers.issues import IssueTarget, is_bot_account

router = routing.Router()

_ON_PULL_REQUESTS = frozenset({"fix", "update", "status", "help"})


@router.register("issue_comment", action="created")
async def on_pull_comment_created(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    issue = payload.get("issue") or {}
    comment = payload.get("comment") or {}
    if not issue.get("pull_request") or is_bot_account(comment.get("user")):
        return
    parsed = parse_commands(comment.get("body") or "")
    if not parsed.commands and not parsed.problems:
        return
    target = IssueTarget.from_payload(payload)
    run = await to_thread.run_sync(runs.run_for_pull, context.engine, target.repository, target.issue_number)
    if run is None:
        return
    await PullConversation(context, target, comment, parsed, pull_open=issue.get("state") == "open").handle()


@dataclass
class PullConversation(Conversation):
    """One comment's commands on a pull request; `target.issue_number` is the pull request's number."""

    pull_open: bool = True

    async def run(self) -> Run | None:
        return await to_thread.run_sync(
            runs.run_for_pull, self.context.engine, self.target.repository, self.target.issue_number
        )

    async def perform(self, command: Command) -> None:
        if command.name == "fix":
            await self.fix(command)
        elif command.name == "update":
            await self.update(command)
        elif command.name in _ON_PULL_REQUESTS:
            await _COMMANDS[command.name](self, command)
        else:
            run = await self.run()
            where = f"issue #{run.issue_number}" if run is not None else "the issue"
            await self.refuse(
                command, f"`/{command.name}` works on {where}, not on its pull request", await self.state()
            )

    async def fix(self, command: Command) -> None:
        run = await self.valid_now(command, Event.FIX)
        if run is None:
            return
        if not self.pull_open:
            await self.refuse(
                command, "this pull request is closed; reopen it, or `/plan` the issue again", RunState(run.state)
            )
            return
        await request_fix(
            self.context,
            run,
            by=self.login,
            key=f"comment:{self.comment['id']}",
            comment_id=int(self.comment["id"]),
            notes=self.notes_of(command) or None,
            asked="`/fix`",
        )

    async def update(self, command: Command) -> None:
        """`/update`: queued like a fix lane (one piece of work on the branch at a time), done by
        bot.runner.pull_update."""
        run = await self.valid_now(command, Event.UPDATE)
        if run is None:
            return
        if not self.pull_open:
            await self.refuse(command, "this pull request is closed; there is nothing to update", RunState(run.state))
            return
        await request_fix(
            self.context,
            run,
            by=self.login,
            key=f"comment:{self.comment['id']}:update",
            comment_id=int(self.comment["id"]),
            asked="`/update`",
            kind="update",
        )

    def notes_of(self, command: Command) -> str:
        """The notes of `/fix`: the rest of its line and the lines after it, up to the next command."""
        lines = _LINE_BREAK.split(self.comment.get("body") or "")
        later = [item.line for item in self.items() if item.line > command.line]
        end = min(later) - 1 if later else len(lines)
        return "\n".join([command.args, *lines[command.line : end]]).strip()
