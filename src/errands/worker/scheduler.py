"""The scheduler thread of a worker process: enqueues the app's periodic jobs.

Every worker process runs one, on every host; the database makes each slot run once.
For each schedule the thread computes the latest slot due by the *database's* clock
(the offset to the local clock is measured once a minute) and asks the store to claim
it: a conditional UPDATE of the schedule's row, which exactly one scheduler wins, then
the enqueue, in the same transaction.  A schedule the database has never seen starts
with its next slot; after downtime the latest missed slot runs once (older ones are
skipped, as a person would want for "send the report").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from ..core.errors import StoreError

if TYPE_CHECKING:
    from .host import PeriodicJob, RunHost

log = logging.getLogger("errands.scheduler")

CLOCK_CHECK_EVERY = 60.0
LONGEST_SLEEP = 5.0


class Scheduler:
    def __init__(self, app: RunHost, stop: threading.Event,
                 clock: Callable[[], datetime] | None = None) -> None:
        """``clock``: the database's time, read at every tick instead of the local clock plus an offset
        (``errands.testing``, whose database clock a test stops and moves, asks it each time)."""
        self.app = app
        self.stop = stop
        self.clock = clock
        self.seen: dict[str, datetime] = {}
        """The latest slot this process has handed to the store, per schedule."""
        self._offset = timedelta(0)
        self._offset_at: datetime | None = None

    def now(self) -> datetime:
        """The database's time, from the local clock and an offset measured once a minute."""
        if self.clock is not None:
            return self.clock()
        local = datetime.now(timezone.utc)
        if self._offset_at is None or (local - self._offset_at).total_seconds() > CLOCK_CHECK_EVERY:
            before = datetime.now(timezone.utc)
            db = self.app.store.now()
            after = datetime.now(timezone.utc)
            self._offset = db - (before + (after - before) / 2)
            self._offset_at = after
            local = after
        return local + self._offset

    def tick(self) -> float:
        """Claim every due slot once; return the seconds until the next one (capped)."""
        now = self.now()
        wait = LONGEST_SLEEP
        for schedule in list(self.app.schedules.values()):
            slot = schedule.cron.last_at_or_before(now)
            if self.seen.get(schedule.name) != slot:
                self._claim(schedule, slot)
            wait = min(wait, (schedule.cron.next_after(now) - now).total_seconds())
        return max(0.01, wait)

    def _claim(self, schedule: PeriodicJob, slot: datetime) -> None:
        job_id = self.app.store.features.claim_periodic_slot(schedule.name, slot, schedule.prepare(slot.isoformat()))
        self.seen[schedule.name] = slot
        if job_id is not None:
            log.info("periodic job %s enqueued for %s as job %d", schedule.name, slot.isoformat(), job_id)

    def run(self) -> None:
        delay = 0.5
        try:
            while not self.stop.is_set():
                try:
                    wait = self.tick()
                    delay = 0.5
                except StoreError as exc:
                    log.warning("scheduler: database unavailable (%s); retrying in %.1fs", exc, delay)
                    wait, delay = delay, min(delay * 2, 30.0)
                except Exception:  # a schedule whose arguments cannot be stored, say: never end the thread
                    log.exception("scheduler: a tick failed; retrying in %.1fs", delay)
                    wait, delay = delay, min(delay * 2, 30.0)
                self.stop.wait(wait)
        finally:
            self.app.store.release_thread_connection()
