"""The dispatcher: hands stored deliveries to the event handlers after the 2xx, in order per installation.

The intake stores a delivery and wakes the dispatcher; the dispatcher also looks for pending
deliveries every few seconds, since another process (or a previous life of this one) may have
stored them. Each delivery is rebuilt as a gidgethub `sansio.Event`, routed with the composed
`routing.Router` (bot/web/handlers/), and then what it came to is recorded: processed, or failed
with its error. A handler that raises fails its own delivery and nothing else. One installation's
deliveries are handled one at a time, in order; different installations' side by side (a bounded
number at once), so one installation's slow handler or rate-limit wait does not hold back
another's `/status` answer.

Deliveries are claimed a batch at a time (one SELECT), and their outcomes recorded a batch at a
time (`OutcomeWriter`: one transaction, one UPDATE for the processed ones, one log line): a lane
hands each outcome over and goes on to its next delivery. A delivery stays in hand, so not claimed
again, until its outcome is recorded; one the database does not take for now is kept and tried
again, not handled again. What is handled but not recorded when the process ends stays pending
and is handled again at start-up, as after a crash.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from anyio import to_thread
from gidgethub import routing, sansio
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DataError, IntegrityError

from bot.edges.logcontext import log_context
from bot.edges.settings import Settings
from bot.edges.store import deliveries
from bot.edges.store.models import Delivery
from bot.runner.context import BackgroundJobs, GitHubAccess
from bot.web.intake import describe_store_error

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
BATCH_SIZE = 50
# Deliveries handled at once, each of a different installation (LANEBOT_DISPATCH_WORKERS).
WORKERS = 8
STOP_GRACE_SECONDS = 10.0
MAX_ERROR_CHARS = 2000
# The most outcomes one transaction records.
RECORD_BATCH_SIZE = 200
# How long outcomes the database did not take wait before they are tried again.
RECORD_RETRY_SECONDS = 1.0
# What stopping gives the outcomes of deliveries already handled to be recorded, at least: one not
# recorded stays pending and is handled again at start-up.
RECORD_GRACE_SECONDS = 2.0


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
    """What a failed delivery records: the exception's type and message, bounded, and without NUL
    characters (a PostgreSQL text column refuses them, and the outcome would never be recorded)."""
    text = f"{type(error).__name__}: {error}".replace("\x00", "\\x00")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def delivery_label(row: Delivery) -> str:
    """A delivery as log lines name it: its id, event and action."""
    return f"{row.delivery_id} ({row.event}{'.' + row.action if row.action else ''})"


@dataclass(frozen=True)
class Handled:
    """A delivery the handlers are done with, and what it came to: `error` None if processed."""

    row: Delivery
    error: str | None = None

    @property
    def outcome(self) -> deliveries.Outcome:
        assert self.row.seq is not None  # a stored row
        return deliveries.Outcome(self.row.seq, self.error)


@dataclass
class Recorded:
    """What became of a batch of outcomes: recorded; `gone` (the row is no longer stored, so there is
    nothing to record); `kept` (the database did not take them for now: to be tried again)."""

    recorded: list[Handled] = field(default_factory=list)
    gone: list[Handled] = field(default_factory=list)
    kept: list[Handled] = field(default_factory=list)

    @classmethod
    def merge(cls, parts: Iterable[Recorded]) -> Recorded:
        merged = cls()
        for part in parts:
            merged.recorded += part.recorded
            merged.gone += part.gone
            merged.kept += part.kept
        return merged


def record_outcomes(engine: Engine, batch: Sequence[Handled]) -> Recorded:
    """Record `batch` in one transaction; if a row of it is at fault, each outcome on its own, so that
    the others are still recorded. Runs in a worker thread."""
    try:
        deliveries.finish_many(engine, [handled.outcome for handled in batch])
    except Exception as error:
        if len(batch) > 1 and isinstance(error, LookupError | DataError | IntegrityError):
            log.warning(
                "the outcomes of %d deliveries could not be recorded together (%s); recording each on its own",
                len(batch),
                describe_store_error(error),
            )
            return Recorded.merge(record_outcomes(engine, [handled]) for handled in batch)
        return _not_recorded(batch, error)
    return Recorded(recorded=list(batch))


def _not_recorded(batch: Sequence[Handled], error: Exception) -> Recorded:
    if isinstance(error, LookupError):
        [handled] = batch  # a batch that names a missing row is split
        log.warning("delivery %s is no longer stored; what it came to is not recorded", delivery_label(handled.row))
        return Recorded(gone=list(batch))
    log.warning(
        "the outcomes of %d handled deliveries were not recorded (%s); they are tried again, not handled again",
        len(batch),
        describe_store_error(error),
    )
    return Recorded(kept=list(batch))


class OutcomeWriter:
    """Records what handled deliveries came to, as many as are waiting in one transaction.

    `add` hands an outcome over without waiting. One arriving while nothing is being written is
    written at once; those arriving during a write make the next batch (at most `batch_size`).
    `on_settled` is called with the rows whose outcomes are recorded (or whose row is gone): the
    dispatcher lets go of them then. Outcomes the database did not take are tried again after
    `retry_seconds`, until `stop`.
    """

    def __init__(
        self,
        engine: Engine,
        on_settled: Callable[[list[Delivery]], None],
        *,
        batch_size: int = RECORD_BATCH_SIZE,
        retry_seconds: float = RECORD_RETRY_SECONDS,
    ) -> None:
        self._engine = engine
        self._on_settled = on_settled
        self._batch_size = batch_size
        self._retry_seconds = retry_seconds
        self._waiting: list[Handled] = []
        self._writing: list[Handled] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._retry_now = asyncio.Event()

    @property
    def busy(self) -> bool:
        """Whether outcomes handed over are not recorded yet."""
        return bool(self._waiting or self._writing)

    def add(self, handled: Handled) -> None:
        """Record `handled` with the next batch."""
        self._waiting.append(handled)
        if self._task is None:
            self._task = asyncio.create_task(self._write_while_waiting(), name="lanebot-dispatcher-outcomes")

    async def flush(self) -> None:
        """Return once every outcome handed over is recorded."""
        while (task := self._task) is not None:
            await asyncio.shield(task)

    async def stop(self, grace_seconds: float) -> None:
        """Record what is waiting (one more try for outcomes kept), for up to `grace_seconds`; what is
        left then is let go of, unrecorded: those deliveries stay pending."""
        self._stopping = True
        self._retry_now.set()
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), grace_seconds)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        left, self._writing, self._waiting = [*self._writing, *self._waiting], [], []
        self._task, self._stopping = None, False
        self._retry_now.clear()
        if left:
            log.warning(
                "the outcomes of %d handled deliveries were not recorded: they stay pending and are "
                "handled again at start-up (unless a write in flight still commits): %s",
                len(left),
                ", ".join(delivery_label(handled.row) for handled in left),
            )
            self._on_settled([handled.row for handled in left])

    async def _write_while_waiting(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[: self._batch_size], self._waiting[self._batch_size :]
                kept = await self._write(batch)
                if kept:
                    self._waiting[:0] = kept
                    if self._stopping:
                        return
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._retry_now.wait(), self._retry_seconds)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _write(self, batch: list[Handled]) -> list[Handled]:
        self._writing = batch
        try:
            # abandon_on_cancel: a `stop` that gives up must not wait for the database.
            result = await to_thread.run_sync(record_outcomes, self._engine, batch, abandon_on_cancel=True)
        except Exception as error:  # record_outcomes answers for each outcome; this is the hop itself failing
            log.error(
                "recording %d outcomes failed (%s); they are tried again", len(batch), describe_store_error(error)
            )
            result = Recorded(kept=batch)
        self._writing = []
        if result.recorded:
            _log_recorded(result.recorded)
        if settled := [handled.row for handled in (*result.recorded, *result.gone)]:
            self._on_settled(settled)
        return result.kept


def _log_recorded(recorded: list[Handled]) -> None:
    # One line per batch, as the intake logs what it stored: a line per delivery cost CPU under load.
    if log.isEnabledFor(logging.INFO):
        count = f"{len(recorded)} deliver{'y' if len(recorded) == 1 else 'ies'}"
        failed = sum(1 for handled in recorded if handled.error is not None)
        log.info(
            "handled %s%s: %s",
            count,
            f" ({failed} failed)" if failed else "",
            ", ".join(delivery_label(handled.row) + (" failed" if handled.error else "") for handled in recorded),
        )


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
        self._in_hand: set[int] = set()  # seqs claimed whose outcome is not recorded yet
        self._outcomes = OutcomeWriter(engine, self._settled)
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
        """Return once a pass has found nothing pending, no lane is busy, every outcome is recorded
        and nothing woke the dispatcher since."""
        await self._idle.wait()

    def start(self) -> None:
        """Start the loop; its first pass picks up whatever was stored but not processed."""
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop(), name="lanebot-dispatcher")

    async def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Let the deliveries in hand finish (up to `grace_seconds`), then end the loop and the lanes.

        What is queued but not started stays pending, and is taken again at start-up. The outcomes of
        the deliveries handled are then recorded, with what is left of the grace (at least
        `RECORD_GRACE_SECONDS`).
        """
        self._stopping = True
        self._wakeup.set()
        task, self._task = self._task, None
        pending = [each for each in (task, *self._lanes.values()) if each is not None]
        clock = asyncio.get_running_loop()
        deadline = clock.time() + grace_seconds
        if pending:
            _done, late = await asyncio.wait(pending, timeout=grace_seconds)
            if late:
                log.warning(
                    "dispatcher did not finish within %.0f s; the deliveries in hand stay pending", grace_seconds
                )
                for each in late:
                    each.cancel()
                await asyncio.gather(*late, return_exceptions=True)
        await self._outcomes.stop(max(deadline - clock.time(), RECORD_GRACE_SECONDS))

    async def process_pending(self) -> int:
        """Process every pending delivery and wait for them all and their outcomes' records; return
        how many were handled."""
        before = self._handled
        while not self._stopping:
            claimed = await self._claim()
            lanes = list(self._lanes.values())
            if not claimed and not lanes:
                break
            if lanes:
                await asyncio.wait(lanes, return_when=asyncio.FIRST_COMPLETED)
        await self._outcomes.flush()
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
                elif not claimed and not self._lanes and not self._outcomes.busy and not self._wakeup.is_set():
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
                        handled = await self._process(row)
                    except BaseException:  # cancelled: the row stays pending
                        assert row.seq is not None
                        self._in_hand.discard(row.seq)
                        raise
                    self._outcomes.add(handled)  # in hand until recorded (`_settled`)
                    self._handled += 1
        finally:
            if self._stopping:
                # Unstarted rows stay pending in the database and are taken again at start-up.
                self._in_hand.difference_update(row.seq for row in queue if row.seq is not None)
                queue.clear()
            del self._lanes[installation_id]
            del self._queues[installation_id]
            self._wakeup.set()  # the loop looks again, and says idle when nothing is left

    def _settled(self, rows: list[Delivery]) -> None:
        """The outcomes of `rows` are recorded (or cannot be): they may be claimed again."""
        self._in_hand.difference_update(row.seq for row in rows if row.seq is not None)
        self._wakeup.set()  # the loop looks again, and says idle when nothing is left

    async def _process(self, row: Delivery) -> Handled:
        with log_context(delivery_id=row.delivery_id):
            try:
                event = event_from_row(row)
                await self._router.dispatch(event, context=self._context)
            except Exception as error:
                # A line per failure, with its traceback; what was processed is one line per batch.
                log.warning("delivery %s failed: %s", delivery_label(row), describe_error(error), exc_info=True)
                return Handled(row, describe_error(error))
        return Handled(row)
