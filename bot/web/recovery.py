"""Missed deliveries: ask GitHub to send again what it could not deliver to lanebot.

GitHub never redelivers by itself. It lists the App's recent delivery attempts
(`GET /app/hook/deliveries`, newest first); one event (one `guid`, the X-GitHub-Delivery
lanebot stores) may have several attempts. An event none of whose attempts got a 2xx, and that
lanebot has not stored, is redelivered once (`POST /app/hook/deliveries/{id}/attempts`). An
event lanebot stored although GitHub saw no 2xx (the answer was lost) needs nothing: the
dispatcher has it. Run by `lanebot deliveries recover` and, with LANEBOT_RECOVER_DELIVERIES=1,
at start-up.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
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
        f"{event} {missed.guid} (attempt {missed.delivery_id}; {missed.attempts} failed attempt"
        f"{'s' if missed.attempts != 1 else ''}, last status {missed.last_status_code})"
    )


def succeeded(attempt: dict[str, Any]) -> bool:
    """Whether GitHub got a 2xx for this attempt."""
    status = attempt.get("status_code")
    return isinstance(status, int) and 200 <= status < 300


def plan_recovery(attempts: Iterable[dict[str, Any]], stored_ids: set[str]) -> RecoveryPlan:
    """Sort GitHub's attempts (newest first) into delivered, stored-despite-failure and missed events.

    A missed event is redelivered through its newest attempt; missed events come oldest first.
    """
    by_guid: dict[str, list[dict[str, Any]]] = {}
    for attempt in attempts:
        by_guid.setdefault(attempt["guid"], []).append(attempt)
    delivered: list[str] = []
    stored: list[str] = []
    missed: list[MissedEvent] = []
    first_attempted: dict[str, datetime] = {}
    for guid, tries in by_guid.items():
        if any(succeeded(attempt) for attempt in tries):
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
    github_app: AppAccess, engine: Engine, since: timedelta, *, now: datetime | None = None
) -> RecoveryReport:
    """List the App's deliveries of the last `since` and redeliver each missed event once."""
    cutoff = (now or datetime.now(UTC)) - since
    client = github_app.app_client()
    attempts = [attempt async for attempt in client.hook_deliveries(cutoff)]
    stored_ids = await to_thread.run_sync(deliveries.known_ids, engine, cutoff - KNOWN_IDS_MARGIN)
    plan = plan_recovery(attempts, stored_ids)
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
    for line in report.lines():
        log.info("recovery: %s", line)
    return report
