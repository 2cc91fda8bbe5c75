"""The dispatcher: hands stored deliveries to the event handlers after the 2xx, in order per installation.

The intake stores a delivery and wakes the dispatcher; the dispatcher also looks for pending
deliveries every few seconds, since another process (or a previous life of this one) may have
stored them. Each delivery is rebuilt as a gidgethub `sansio.Event`, routed with the composed
`routing.Router` (bot/web/handlers/), and then marked processed, or failed with its error. A handler
that raises fails its own delivery and nothing else. One installation's deliveries are handled
one at a time, in order; different installations' side by side (a bounded number at once), so one
installation's slow handler or rate-limit wait does not hold back another's `/status` answer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
from dataclasses import dataclass

from anyio import to_thread
from gidgethub import routing, sansio
from sqlalchemy.engine import Engine

from bot.edges.logcontext import log_context
from bot.edges.settings import Settings
from bot.edges.store import deliveries
from bot.edges.store.models import Delivery
from bot.runner.context import BackgroundJobs, GitHubAccess

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
BATCH_SIZE = 50
# Deliveries handled at once, each of a different installation (LANEBOT_DISPATCH_WORKERS).
WORKERS = 8
STOP_GRACE_SECONDS = 10.0
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True)
class HandlerContext:
    """What every handler receives as the `context` keyword: the database, GitHub, the settings, and the
    background jobs handlers hand work to. It is the steps' `RunnerContext` (bot/runner/context.py) too."""

    engine: Engine
    github: GitHubAccess
    settings: Settings
    jobs: BackgroundJobs | None = None


def event_from_row(row: Delivery) -> sansio.Event:
    """The gidgethub event a stored delivery row stands for."""
    return sansio.Event(json.loads(row.body), event=row.event, delivery_id=row.delivery_id)


def describe_error(error: BaseException) -> str:
    """What a failed delivery records: the exception's type and message, bounded."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class Dispatcher:
    """Processes pending deliveries until stopped: in `seq` order within an installation, and
    the deliveries of different installations side by side, at most `workers` at once.

    Each installation with work has a lane: a queue of its claimed rows and one task that takes
    them in order. A rate-limit wait (bot/edges/github/client.py) in one installation's handler
    holds that lane and one of the `workers` slots, never another installation's lane.
    Deliveries without an installation share one lane.
    """

    def __init__(
        self,
        engine: Engine,
        router: routing.Router,
        context: HandlerContext,
        *,
        poll_seconds: float = POLL_SECONDS,
        batch_size: int = BATCH_SIZE,
        workers: int = WORKERS,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._engine = engine
        self._router = router
        self._context = context
        self._poll_seconds = poll_seconds
        self._batch_size = batch_size
        self._slots = asyncio.Semaphore(workers)
        self._queues: dict[int | None, collections.deque[Delivery]] = {}
        self._lanes: dict[int | None, asyncio.Task[None]] = {}
        self._in_hand: set[int] = set()  # seqs claimed and not finished
        self._handled = 0
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Tell the dispatcher a delivery was stored (called by the intake after each store)."""
        self._idle.clear()
        self._wakeup.set()

    async def wait_idle(self) -> None:
        """Return once a pass has found nothing pending, no lane is busy and nothing woke the dispatcher since."""
        await self._idle.wait()

    def start(self) -> None:
        """Start the loop; its first pass picks up whatever was stored but not processed."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name="lanebot-dispatcher")

    async def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Let the deliveries in hand finish (up to `grace_seconds`), then end the loop and the lanes.

        What is queued but not started stays pending, and is taken again at start-up.
        """
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        pending = [each for each in (task, *self._lanes.values()) if each is not None]
        if not pending:
            return
        _done, late = await asyncio.wait(pending, timeout=grace_seconds)
        if late:
            log.warning("dispatcher did not finish within %.0f s; the deliveries in hand stay pending", grace_seconds)
            for each in late:
                each.cancel()
            await asyncio.gather(*late, return_exceptions=True)

    async def process_pending(self) -> int:
        """Process every pending delivery and wait for them all; return how many were handled."""
        before = self._handled
        while not self._stopping:
            claimed = await self._claim()
            lanes = list(self._lanes.values())
            if not claimed and not lanes:
                break
            if lanes:
                await asyncio.wait(lanes, return_when=asyncio.FIRST_COMPLETED)
        return self._handled - before

    async def _loop(self) -> None:
        while not self._stopping:
            self._wakeup.clear()
            try:
                claimed = await self._claim()
            except Exception:
                log.exception("dispatcher pass failed; trying again in %.0f s", self._poll_seconds)
            else:
                if claimed >= self._batch_size:
                    self._wakeup.set()  # more may be pending
                elif not claimed and not self._lanes and not self._wakeup.is_set():
                    self._idle.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._poll_seconds)

    async def _claim(self) -> int:
        """Queue the oldest pending rows not in hand on their installations' lanes; return how many."""
        # A lane holds at most `batch_size` rows (bodies included): a stalled installation stops claiming.
        full = frozenset(key for key, queue in self._queues.items() if len(queue) >= self._batch_size)
        claim = functools.partial(
            deliveries.claim_pending, exclude=frozenset(self._in_hand), exclude_installations=full
        )
        rows = await to_thread.run_sync(claim, self._engine, self._batch_size)
        for row in rows:
            assert row.seq is not None  # a stored row
            self._in_hand.add(row.seq)
            self._queues.setdefault(row.installation_id, collections.deque()).append(row)
            if row.installation_id not in self._lanes:
                self._lanes[row.installation_id] = asyncio.create_task(
                    self._run_lane(row.installation_id), name=f"lanebot-dispatcher-{row.installation_id}"
                )
        return len(rows)

    async def _run_lane(self, installation_id: int | None) -> None:
        queue = self._queues[installation_id]
        try:
            while queue and not self._stopping:
                async with self._slots:
                    if self._stopping:
                        break
                    row = queue.popleft()
                    try:
                        await self._process(row)
                    finally:
                        assert row.seq is not None
                        self._in_hand.discard(row.seq)
                    self._handled += 1
        finally:
            if self._stopping:
                # Unstarted rows stay pending in the database and are taken again at start-up.
                self._in_hand.difference_update(row.seq for row in queue if row.seq is not None)
                queue.clear()
            del self._lanes[installation_id]
            del self._queues[installation_id]
            self._wakeup.set()  # the loop looks again, and says idle when nothing is left

    async def _process(self, row: Delivery) -> None:
        assert row.seq is not None  # a stored row
        label = f"{row.event}{'.' + row.action if row.action else ''} {row.delivery_id}"
        with log_context(delivery_id=row.delivery_id):
            await self._handle(row, label)

    async def _handle(self, row: Delivery, label: str) -> None:
        assert row.seq is not None
        try:
            event = event_from_row(row)
            await self._router.dispatch(event, context=self._context)
        except Exception as error:
            log.warning("delivery %s failed: %s", label, describe_error(error), exc_info=True)
            await to_thread.run_sync(deliveries.mark_failed, self._engine, row.seq, describe_error(error))
        else:
            log.info("delivery %s processed", label)
            await to_thread.run_sync(deliveries.mark_processed, self._engine, row.seq)
