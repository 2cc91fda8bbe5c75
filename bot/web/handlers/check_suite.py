"""`check_suite.completed`: the repository's own CI failed on lanebot's pull request.

GitHub sends every subscribed App with checks permission each suite that completes, whoever's it
is. A suite starts a fix lane (a review request of kind `ci`, bot/runner/review/queue.py) when:

- it failed (`failure` or `timed_out`, bot/core/ci_failures.py),
- it is not lanebot's own (`check_suite.app.id` is not this App's): lanebot never reacts to its
  own check runs,
- its head is the head of an open pull request a lanebot run opened (`lanebot/<issue>` in the
  repository itself, the number the run recorded), and the run can take a fix,
- that head is one lanebot pushed: the integration branch it verified (`verify` run events) or a
  fix lane's commit (`fix_pushing`, recorded before the push); never a head a person pushed,
- fewer than `ci.max_fix_rounds` fix lanes for failing CI have started on the pull request. Past
  that lanebot says once that it stopped, why, and that `/fix` still works.

A suite that names no pull request, on an integration branch at a head lanebot pushed, is one
that finished before lanebot's pull request opened (CI that runs on push): it is kept as a run
event (`ci_failed_before_pull`) and counts as soon as the run has its pull request at that head,
on `pull_request.opened` or at once when the run already recorded it.

The request's key is `ci:<suite id>`, so a redelivered event queues nothing twice. Its brief holds
the failing checks' names, their annotations and the end of their output, read from GitHub's
REST API and cleaned and bounded as untrusted text (bot/core/ci_failures.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from anyio import to_thread
from gidgethub import routing, sansio

from bot.core.ci_failures import (
    ANNOTATIONS_PER_CHECK,
    ci_brief,
    failed_checks,
    failing_run_ids,
    fix_round,
    stop_comment,
    suite_failed,
)
from bot.core.lifecycle import Event, InvalidTransition, transition
from bot.core.names import INTEGRATION_PREFIX
from bot.core.text import code_span, marker
from bot.core.workflow import WorkflowError
from bot.edges.github.checks import run_annotations, suite_check_runs
from bot.edges.github.issues import post_or_update_marked_comment
from bot.edges.store import reviews, runs
from bot.edges.store.models import ReviewRequest, Run, RunEvent
from bot.runner.repository_workflow import installation_workflow
from bot.runner.review.fix import FIX_PUSHING
from bot.runner.review.queue import request_fix
from bot.web.dispatcher import HandlerContext

log = logging.getLogger(__name__)

router = routing.Router()

CI_STOPPED = "ci_fix_stopped"  # the run event that says lanebot told the pull request it stopped
CI_BEFORE_PULL = "ci_failed_before_pull"  # a failed suite kept until the pull request opens
PULL_RECORDED_WAIT_S = 30.0
PULL_RECORDED_POLL_S = 0.5
_HEAD = re.compile(rf"^{re.escape(INTEGRATION_PREFIX)}/[1-9][0-9]*$")
_NOT_LOGIN = re.compile(r"[^A-Za-z0-9-]+")


def lanebot_pull(suite: Mapping[str, Any], repository_id: int) -> int | None:
    """The number of the pull request in `suite.pull_requests` whose head is the suite's commit on
    an integration branch of the repository itself (not a fork's); None when there is none. Pure."""
    for pull in suite.get("pull_requests") or ():
        head = pull.get("head") or {}
        same_repository = (head.get("repo") or {}).get("id") == repository_id
        if same_repository and head.get("sha") == suite.get("head_sha") and _HEAD.match(str(head.get("ref") or "")):
            return int(pull["number"])
    return None


def heads_lanebot_pushed(events: Iterable[RunEvent]) -> set[str]:
    """Every commit lanebot pushed to the run's integration branch: those verify ran on (the branch
    as integrated, each repair) and those fix lanes pushed. Pure."""
    kinds = ("verify", FIX_PUSHING)
    return {str(event.payload().get("head")) for event in events if event.kind in kinds} - {"None"}


def ci_rounds(requests: Iterable[ReviewRequest], pr_number: int) -> list[ReviewRequest]:
    """The fix lanes failing CI started on the pull request. Pure."""
    return [request for request in requests if request.kind == "ci" and request.pr_number == pr_number]


def ci_bot_login(app: Mapping[str, Any]) -> str:
    """The login of the CI's bot, who the request is by (`<slug>[bot]`, as GitHub names App bots)."""
    slug = _NOT_LOGIN.sub("-", str(app.get("slug") or "")).strip("-")[:39]
    return f"{slug or 'ci'}[bot]"


@router.register("check_suite", action="completed")
async def check_suite_completed(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    payload = event.data
    suite = payload.get("check_suite") or {}
    app = suite.get("app") or {}
    if not suite_failed(suite.get("conclusion")):
        return
    if str(app.get("id")) == str(context.settings.app_id):
        return  # lanebot's own checks: never a reason to fix anything
    repository = payload["repository"]["full_name"]
    number = lanebot_pull(suite, int(payload["repository"]["id"]))
    if number is None:
        await _remember_before_pull(context, payload)
        return
    run = await to_thread.run_sync(runs.run_for_pull, context.engine, repository, number)
    if run is None or run.id is None:
        return
    await _consider(context, payload, run, number)


@router.register("pull_request", action="opened")
async def lanebot_pull_opened(event: sansio.Event, *, context: HandlerContext, **_: Any) -> None:
    """lanebot's pull request opened: a suite that failed on its head before it existed counts now."""
    payload = event.data
    pull = payload["pull_request"]
    head = pull.get("head") or {}
    if not _HEAD.match(str(head.get("ref") or "")) or (head.get("repo") or {}).get("id") != payload["repository"]["id"]:
        return
    repository, number = payload["repository"]["full_name"], int(pull["number"])
    run = await to_thread.run_sync(runs.run_for_integration_branch, context.engine, repository, str(head["ref"]))
    if run is None:
        return  # no lanebot run has that branch: nothing to wait for
    if run.pr_number is None or run.state != "done":
        run = await _run_with_pull(context, repository, number)
    if run is None or run.id is None or run.pr_number != number:
        return
    await _consider_kept(context, payload, run, number, str(head.get("sha")))


async def _remember_before_pull(context: HandlerContext, payload: Mapping[str, Any]) -> None:
    """A failed suite on an integration branch whose pull request GitHub did not know of (CI that
    runs on push can finish before lanebot opens it): kept on the run, and acted on once the run
    has its pull request, whichever of the two comes first."""
    suite = payload["check_suite"]
    branch = str(suite.get("head_branch") or "")
    if not _HEAD.match(branch):
        return
    repository = payload["repository"]["full_name"]
    run = await to_thread.run_sync(runs.run_for_integration_branch, context.engine, repository, branch)
    if run is None or run.id is None:
        return
    run_id = run.id
    events = await to_thread.run_sync(runs.run_events, context.engine, run_id)
    if str(suite.get("head_sha")) not in heads_lanebot_pushed(events):
        return
    if not any(event.kind == CI_BEFORE_PULL and event.payload().get("id") == suite.get("id") for event in events):
        app = suite.get("app") or {}
        kept = {
            "id": suite.get("id"),
            "head_sha": suite.get("head_sha"),
            "head_branch": branch,
            "conclusion": suite.get("conclusion"),
            "app": {"id": app.get("id"), "slug": app.get("slug")},
        }
        await to_thread.run_sync(runs.append_event, context.engine, run_id, CI_BEFORE_PULL, kept)
    # Read again after the write: the pull request may have opened meanwhile (its own handler
    # reads the kept suites once the run has recorded it, so one of the two sees the other).
    run = await to_thread.run_sync(runs.get_run, context.engine, run_id)
    if run is not None and run.pr_number is not None and run.state == "done":
        await _consider_kept(context, payload, run, run.pr_number, last_pushed_head(events))


async def _consider_kept(
    context: HandlerContext, payload: Mapping[str, Any], run: Run, number: int, head: str | None
) -> None:
    """The kept suites that failed on `head`, the pull request's head, as if they had named it."""
    assert run.id is not None
    events = await to_thread.run_sync(runs.run_events, context.engine, run.id)
    for event in events:
        if event.kind == CI_BEFORE_PULL and head is not None and event.payload().get("head_sha") == head:
            await _consider(context, {**payload, "check_suite": event.payload()}, run, number)


def last_pushed_head(events: Iterable[RunEvent]) -> str | None:
    """The newest commit lanebot pushed to the run's integration branch (verify's, or a fix's). Pure."""
    heads = [str(event.payload().get("head")) for event in events if event.kind in ("verify", FIX_PUSHING)]
    return heads[-1] if heads else None


async def _run_with_pull(context: HandlerContext, repository: str, number: int) -> Run | None:
    """The run that opened `number`, once it has recorded it (GitHub may say it opened before
    lanebot's own request returned)."""
    for _ in range(int(PULL_RECORDED_WAIT_S / PULL_RECORDED_POLL_S)):
        run = await to_thread.run_sync(runs.run_for_pull, context.engine, repository, number)
        if run is not None and run.id is not None and run.state == "done":
            return run
        await anyio.sleep(PULL_RECORDED_POLL_S)
    return None


async def _consider(context: HandlerContext, payload: Mapping[str, Any], run: Run, number: int) -> None:
    """A failed foreign suite on lanebot's pull request `number`: a fix lane, when the rules allow."""
    assert run.id is not None
    repository = payload["repository"]["full_name"]
    suite = payload["check_suite"]
    try:
        transition(run.state, Event.FIX)
    except InvalidTransition:
        log.info("run %d is %s: failing CI on #%d starts nothing", run.id, run.state, number)
        return
    head = str(suite["head_sha"])
    events = await to_thread.run_sync(runs.run_events, context.engine, run.id)
    if head not in heads_lanebot_pushed(events):
        log.info("failing CI on %s#%d is on %s, which lanebot did not push: nothing to fix", repository, number, head)
        return
    key = f"ci:{int(suite['id'])}"
    requests = await to_thread.run_sync(reviews.requests, context.engine, run.id)
    if any(request.dedupe_key == key for request in requests):
        return  # a redelivery
    await _fix_or_stop(context, payload, run, number, key, ci_rounds(requests, number), events)


async def _fix_or_stop(
    context: HandlerContext,
    payload: Mapping[str, Any],
    run: Run,
    number: int,
    key: str,
    rounds: list[ReviewRequest],
    events: list[RunEvent],
) -> None:
    assert run.id is not None
    suite, repository = payload["check_suite"], payload["repository"]["full_name"]
    app = suite.get("app") or {}
    installation = int(payload["installation"]["id"])
    client = context.github.installation_client(installation, repository)
    try:
        workflow = await installation_workflow(context.github, installation, repository)
    except WorkflowError as error:
        log.warning("failing CI on %s#%d starts nothing: %s", repository, number, "; ".join(error.problems))
        return
    decision = fix_round(len(rounds), workflow.ci.max_fix_rounds)
    if not decision.allowed:
        if not any(event.kind == CI_STOPPED and event.payload().get("pr") == number for event in events):
            stop_marker = marker("ci-stop", run.id, pr=number)
            body = stop_comment(stop_marker, decision.limit, str(app.get("slug") or "the CI"))
            await post_or_update_marked_comment(client, repository, number, body, marker=stop_marker)
            await to_thread.run_sync(runs.append_event, context.engine, run.id, CI_STOPPED, {"pr": number, "key": key})
        return
    check_runs = await suite_check_runs(client, repository, int(suite["id"]))
    annotations = {
        run_id: await run_annotations(client, repository, run_id, limit=ANNOTATIONS_PER_CHECK)
        for run_id in failing_run_ids(check_runs)
    }
    checks = failed_checks(check_runs, annotations)
    if not checks:
        log.info("the failed suite %s on %s#%d has no failing check run now", key, repository, number)
        return
    names = ", ".join(code_span(check.name) for check in checks[:5]) + (" and more" if len(checks) > 5 else "")
    await request_fix(
        context,
        run,
        by=ci_bot_login(app),
        key=key,
        notes=ci_brief(str(app.get("slug") or "the CI"), str(suite["head_sha"]), checks),
        asked=f"Failing CI ({names} on {str(suite['head_sha'])[:12]}; fix round {decision.round} of {decision.limit})",
        kind="ci",
    )
