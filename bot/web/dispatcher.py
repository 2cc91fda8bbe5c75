"""The dispatcher: hands stored deliveries to the event handlers, in order, after the 2xx.

The intake stores a delivery and wakes the dispatcher; the dispatcher also looks for pending
deliveries every few seconds, since another process (or a previous life of this one) may have
stored them. Each delivery is rebuilt as a gidgethub `sansio.Event`, routed with the composed
`routing.Router` (bot/web/handlers/), and then marked processed, or failed with its error. A handler
that raises fails its own delivery and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from anyio import to_thread
from gidgethub import routing, sansio
from sqlalchemy.engine import Engine

from bot.edges.settings import Settings
from bot.edges.store import deliveries
from bot.edges.store.models import Delivery
from bot.runner.context import BackgroundJobs, GitHubAccess

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
BATCH_SIZE = 50
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
    """Processes pending deliveries in `seq` order until stopped."""

    def __init__(
        self,
        engine: Engine,
        router: routing.Router,
        context: HandlerContext,
        *,
        poll_seconds: float = POLL_SECONDS,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self._engine = engine
        self._router = router
        self._context = context
        self._poll_seconds = poll_seconds
        self._batch_size = batch_size
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """Tell the dispatcher a delivery was stored (called by the intake after each store)."""
        self._idle.clear()
        self._wakeup.set()

    async def wait_idle(self) -> None:
        """Return once a pass has found nothing pending and nothing woke the dispatcher since."""
        await self._idle.wait()

    def start(self) -> None:
        """Start the loop; its first pass picks up whatever was stored but not processed."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name="lanebot-dispatcher")

    async def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Let the delivery in hand finish (up to `grace_seconds`), then end the loop."""
        if self._task is None:
            return
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_seconds)
        except TimeoutError:
            log.warning("dispatcher did not finish within %.0f s; the delivery in hand stays pending", grace_seconds)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def process_pending(self) -> int:
        """Process every pending delivery, oldest first; return how many were handled."""
        handled = 0
        while not self._stopping:
            batch = await to_thread.run_sync(deliveries.claim_pending, self._engine, self._batch_size)
            if not batch:
                break
            for row in batch:
                if self._stopping:
                    # Unfinished rows of this batch stay pending and are taken again at start-up.
                    return handled
                await self._process(row)
                handled += 1
        return handled

    async def _loop(self) -> None:
        while not self._stopping:
            self._wakeup.clear()
            try:
                await self.process_pending()
            except Exception:
                log.exception("dispatcher pass failed; trying again in %.0f s", self._poll_seconds)
            else:
                if not self._wakeup.is_set():
                    self._idle.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._poll_seconds)

    async def _process(self, row: Delivery) -> None:
        assert row.seq is not None  # a stored row
        label = f"{row.event}{'.' + row.action if row.action else ''} {row.delivery_id}"
        try:
            event = event_from_row(row)
            await self._router.dispatch(event, context=self._context)
        except Exception as error:
            log.warning("delivery %s failed: %s", label, describe_error(error), exc_info=True)
            await to_thread.run_sync(deliveries.mark_failed, self._engine, row.seq, describe_error(error))
        else:
            log.info("delivery %s processed", label)
            await to_thread.run_sync(deliveries.mark_processed, self._engine, row.seq)
