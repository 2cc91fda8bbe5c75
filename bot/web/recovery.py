"""Missed deliveries: ask GitHub to send again what it could not deliver to lanebot.

GitHub never redelivers by itself. It lists the App's recent delivery attempts
(`GET /app/hook/deliveries`, newest first); one event (one `guid`, the X-GitHub-Delivery
lanebot stores) may have several attempts. An event none of whose attempts got a 2xx, and that
lanebot has not stored, is redelivered once (`POST /app/hook/deliveries/{id}/attempts`). An
event lanebot stored although GitHub saw no 2xx (the answer was lost) needs nothing: the
dispatcher has it, and a redelivery of it would be answered "already stored" anyway.

Through a relay channel (LANEBOT_WEBHOOK_PROXY_URL) GitHub's 2xx is the channel's answer, not
lanebot's: the channel takes a delivery whether or not lanebot is reading it, so there an event
lanebot has not stored is missed whatever status GitHub shows (`relayed`).

Run by `lanebot deliveries recover`, and with LANEBOT_RECOVER_DELIVERIES=1 by `lanebot serve`
(`DeliveryRecovery`): a pass over the last day at start-up, then one every LANEBOT_RECOVER_INTERVAL
seconds over the time since the previous pass began (less a margin), and one soon after the intake
answered a delivery 5xx, so that a delivery lost to a restart, a cut database connection or a lock
is asked for again without an operator. One pass at a time; a pass that fails is logged, and the
next one covers its time too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import gidgethub
import httpx
from anyio import to_thread
from sqlalchemy.engine import Engine

from bot.edges.store import deliveries

log = logging.getLogger(__name__)

# Stored ids are looked up further back than GitHub's list reaches, so an event stored just
# before the window whose retry falls inside it is still recognised.
KNOWN_IDS_MARGIN = timedelta(days=1)
# While serving: the start-up pass looks back this far (GitHub lists about three days).
FIRST_PASS_WINDOW = timedelta(hours=24)
# Each later pass looks back to where the previous one that worked began, less this margin: an attempt
# GitHub was still making when that pass listed (it waits 10 s for an answer), and clocks a little apart.
PASS_MARGIN = timedelta(minutes=10)
# After the intake answered a delivery 5xx, a pass this many seconds later: GitHub has recorded the
# failure by then, and every other failure of the same burst is taken by the same pass. Doubled for
# each such pass in a row (a database down for an hour is not asked about every 20 s), up to the
# interval; back to this once an interval passes without one.
SOON_AFTER_FAILURE_SECONDS = 20.0


class DeliveryLog(Protocol):
    """The App's webhook deliveries as GitHub lists them (bot.edges.github.client.AppClient)."""

    def hook_deliveries(self, since: datetime) -> AsyncIterator[dict[str, Any]]: ...

    async def redeliver(self, delivery_id: int) -> None: ...


class AppAccess(Protocol):
    """GitHub as the App itself (bot.edges.github.client.GitHubApp)."""

    def app_client(self) -> DeliveryLog: ...


@dataclass(frozen=True)
class MissedEvent:
    """An event GitHub failed to deliver: its guid and the attempt to redeliver."""

    guid: str
    delivery_id: int
    event: str
    action: str | None
    attempts: int
    last_status_code: int | None


@dataclass(frozen=True)
class RecoveryPlan:
    """What GitHub's list says, sorted: delivered, failed but stored, and missed."""

    delivered: list[str]
    stored_despite_failure: list[str]
    missed: list[MissedEvent]


@dataclass
class RecoveryReport:
    """What one recovery did."""

    since: datetime
    attempts_listed: int = 0
    events_listed: int = 0
    delivered: int = 0
    stored_despite_failure: list[str] = field(default_factory=list)
    redelivered: list[MissedEvent] = field(default_factory=list)
    not_redelivered: list[tuple[MissedEvent, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report as lines for a terminal or a log."""
        out = [
            f"GitHub lists {self.attempts_listed} delivery attempts for {self.events_listed} events since "
            f"{self.since.isoformat(timespec='seconds')}: {self.delivered} delivered, "
            f"{len(self.stored_despite_failure)} failed at GitHub but stored, "
            f"{len(self.redelivered) + len(self.not_redelivered)} missed"
        ]
        out += [f"redelivery requested: {_describe(missed)}" for missed in self.redelivered]
        out += [f"redelivery refused: {_describe(missed)}: {why}" for missed, why in self.not_redelivered]
        return out


def _describe(missed: MissedEvent) -> str:
    event = missed.event + (f".{missed.action}" if missed.action else "")
    return (
        f"{event} {missed.guid} (attempt {missed.delivery_id}; {missed.attempts} attempt"
        f"{'s' if missed.attempts != 1 else ''}, last status {missed.last_status_code})"
    )


def succeeded(attempt: dict[str, Any]) -> bool:
    """Whether GitHub got a 2xx for this attempt."""
    status = attempt.get("status_code")
    return isinstance(status, int) and 200 <= status < 300


def plan_recovery(attempts: Iterable[dict[str, Any]], stored_ids: set[str], *, relayed: bool = False) -> RecoveryPlan:
    """Sort GitHub's attempts (newest first) into delivered, stored-despite-failure and missed events.

    A missed event is redelivered through its newest attempt; missed events come oldest first.
    `relayed`: GitHub delivers to a relay channel, whose 2xx says nothing of lanebot.
    """
    by_guid: dict[str, list[dict[str, Any]]] = {}
    for attempt in attempts:
        by_guid.setdefault(attempt["guid"], []).append(attempt)
    delivered: list[str] = []
    stored: list[str] = []
    missed: list[MissedEvent] = []
    first_attempted: dict[str, datetime] = {}
    for guid, tries in by_guid.items():
        if any(succeeded(attempt) for attempt in tries) and (guid in stored_ids or not relayed):
            delivered.append(guid)
        elif guid in stored_ids:
            stored.append(guid)
        else:
            newest = tries[0]
            missed.append(
                MissedEvent(
                    guid=guid,
                    delivery_id=newest["id"],
                    event=newest.get("event", "?"),
                    action=newest.get("action"),
                    attempts=len(tries),
                    last_status_code=newest.get("status_code"),
                )
            )
            first_attempted[guid] = min(_timestamp(attempt["delivered_at"]) for attempt in tries)
    # Oldest event first, so redelivered events reach the dispatcher close to their original order.
    missed.sort(key=lambda event: first_attempted[event.guid])
    return RecoveryPlan(delivered=delivered, stored_despite_failure=stored, missed=missed)


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def recover(
    github_app: AppAccess, engine: Engine, since: timedelta, *, now: datetime | None = None, relayed: bool = False
) -> RecoveryReport:
    """List the App's deliveries of the last `since` and redeliver each missed event once (`relayed`:
    GitHub delivers to a relay channel, see `plan_recovery`)."""
    cutoff = (now or datetime.now(UTC)) - since
    client = github_app.app_client()
    attempts = [attempt async for attempt in client.hook_deliveries(cutoff)]
    stored_ids = await to_thread.run_sync(deliveries.known_ids, engine, cutoff - KNOWN_IDS_MARGIN)
    plan = plan_recovery(attempts, stored_ids, relayed=relayed)
    report = RecoveryReport(
        since=cutoff,
        attempts_listed=len(attempts),
        events_listed=len(plan.delivered) + len(plan.stored_despite_failure) + len(plan.missed),
        delivered=len(plan.delivered),
        stored_despite_failure=plan.stored_despite_failure,
    )
    for missed in plan.missed:
        try:
            await client.redeliver(missed.delivery_id)
        except (gidgethub.GitHubException, httpx.HTTPError) as error:
            report.not_redelivered.append((missed, f"{type(error).__name__}: {error}"))
        else:
            report.redelivered.append(missed)
    # A pass that found nothing to do (most of the periodic ones) says so only at debug level.
    quiet = not (plan.missed or plan.stored_despite_failure)
    for line in report.lines():
        log.log(logging.DEBUG if quiet else logging.INFO, "recovery: %s", line)
    return report


class DeliveryRecovery:
    """The passes over GitHub's failed deliveries while lanebot serves.

    `start` runs one pass over the last `first_window` at once, then one every `interval` seconds
    (0: none) over the time since the previous successful pass began, less `margin`.
    `delivery_failed` (the intake calls it after answering a delivery 5xx) brings the next pass
    forward to `soon_after_failure` seconds from now. Passes never overlap; one that fails is logged
    and leaves its time to the next. `clock` and `sleep` are the loop's time, for tests.
    """

    def __init__(
        self,
        github_app: AppAccess,
        engine: Engine,
        *,
        interval: float,
        soon_after_failure: float | None = None,
        margin: timedelta = PASS_MARGIN,
        first_window: timedelta = FIRST_PASS_WINDOW,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        relayed: bool = False,
    ) -> None:
        if interval < 0:
            raise ValueError(f"the recovery interval must be 0 or more seconds, got {interval}")
        self._github_app = github_app
        self._engine = engine
        self._interval = interval
        self._soon = SOON_AFTER_FAILURE_SECONDS if soon_after_failure is None else soon_after_failure
        self._margin = margin
        self._first_window = first_window
        self._clock = clock
        self._sleep = sleep
        self._relayed = relayed
        self._covered_from: datetime | None = None  # where the next pass's window begins
        self._one_pass = asyncio.Lock()
        self._failed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the start-up pass now and the later ones in the background, until `stop`."""
        if self._task is not None:
            return
        self._task = asyncio.create_task(self._run(), name="lanebot-delivery-recovery")

    async def stop(self) -> None:
        """Cancel the loop, a pass in progress included (GitHub's list is only read; a redelivery
        asked for either went or did not), and wait until it has ended."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the caller itself is being cancelled

    def delivery_failed(self) -> None:
        """The intake answered a delivery 5xx (GitHub shows it failed): have a pass ask for it soon."""
        if self._task is not None and self._interval > 0:
            self._failed.set()

    async def run_pass(self) -> RecoveryReport | None:
        """One pass over the time since the previous one that worked; None if it failed (logged)."""
        async with self._one_pass:
            started = self._clock()
            if self._covered_from is None:
                self._covered_from = started - self._first_window
            window = started - self._covered_from
            try:
                report = await recover(self._github_app, self._engine, window, now=started, relayed=self._relayed)
            except Exception as error:
                log.warning(
                    "the pass over GitHub's failed deliveries since %s failed (%s: %s); %s, or run "
                    "`lanebot deliveries recover --since %dm`",
                    self._covered_from.isoformat(timespec="seconds"),
                    type(error).__name__,
                    error,
                    f"the next one, in {self._interval:g} s, covers that time too"
                    if self._interval > 0
                    else "no other pass follows (LANEBOT_RECOVER_INTERVAL=0)",
                    window.total_seconds() // 60 + 1,
                )
                return None
            self._covered_from = started - self._margin
            if report.not_redelivered:
                log.warning(
                    "GitHub refused to redeliver %d missed deliveries (each is logged above); later passes do "
                    "not ask again: run `lanebot deliveries recover --since %dm` once the cause is fixed",
                    len(report.not_redelivered),
                    window.total_seconds() // 60 + 1,
                )
            return report

    async def _run(self) -> None:
        try:
            await self.run_pass()
            if self._interval <= 0:
                return
            delay = self._soon
            while True:
                if await self._failure_within(self._interval):
                    await self._sleep(delay)
                    delay = min(delay * 2, max(self._interval, self._soon))
                else:
                    delay = self._soon
                self._failed.clear()  # this pass takes every failure so far
                await self.run_pass()
        except asyncio.CancelledError:
            raise
        except Exception:  # not a pass (those are caught): the loop itself; the app goes on without it
            log.exception(
                "the recovery of failed deliveries stopped; until lanebot restarts, run `lanebot deliveries recover` "
                "after an outage"
            )

    async def _failure_within(self, seconds: float) -> bool:
        """Wait `seconds`, or less if `delivery_failed` is called meanwhile; True if it was."""
        if self._failed.is_set():
            return True
        failure = asyncio.ensure_future(self._failed.wait())
        timer = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({failure, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            failure.cancel()
            timer.cancel()
            await asyncio.gather(failure, timer, return_exceptions=True)
        return self._failed.is_set()
