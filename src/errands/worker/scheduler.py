"""The scheduler thread of a worker process: enqueues the app's periodic jobs.

Every worker process runs one, on every host; the database makes each slot run once.
The schedules are the app's (``@app.periodic``, in code) and the ones stored in the database
(``errands_schedules``, changed while workers run), read again at every tick: one SELECT of a
small table, each row rebuilt only when it changed.  For each schedule the thread computes the
slots due by the *database's* clock (the offset to the local clock is measured once a minute;
which slots, after downtime, the schedule's catch-up decides: :mod:`errands.core.schedules`) and
asks the store to claim them: a conditional UPDATE of the schedule's row, which exactly one
scheduler wins (and, for a stored schedule, only under the version it read), then the enqueue, in
the same transaction.  A schedule the database has never seen starts with its next slot.  A
stored row that cannot be a schedule (another program wrote it, or its job is not registered in
this app) is logged once and skipped; it never ends the thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ..core.errors import StoreError
from ..core.schedules import ScheduleRow, StoredSchedule, slots_due

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
        self.stored: dict[str, tuple[tuple[Any, ...], StoredSchedule | None]] = {}
        """Each stored schedule's definition as last read, and what was built of it (None: refused)."""
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
        for schedule in [*self.app.schedules.values(), *self.read_stored()]:
            try:
                slot = schedule.cron.last_at_or_before(now)
                if self.seen.get(schedule.name) != slot:
                    self._claim(schedule, slot, now)
                wait = min(wait, (schedule.cron.next_after(now) - now).total_seconds())
            except StoreError:
                raise
            except Exception:  # one schedule whose arguments cannot be stored, say: the others still run
                log.exception("scheduler: schedule %s failed at %s; tried again at its next slot", schedule.name,
                              now.isoformat())
                with contextlib.suppress(Exception):
                    self.seen[schedule.name] = schedule.cron.last_at_or_before(now)
        return max(0.01, wait)

    def read_stored(self) -> list[StoredSchedule]:
        """The stored schedules that run (not paused), rebuilt where their row changed."""
        rows = self.app.store.schedules.rows()
        known: dict[str, tuple[tuple[Any, ...], StoredSchedule | None]] = {}
        running = []
        for row in rows:
            if row.name in self.app.schedules:
                if self.stored.get(row.name, ((), None))[0] != row.definition:
                    log.warning("scheduler: stored schedule %s skipped: the code defines a schedule of that name",
                                row.name)
                known[row.name] = (row.definition, None)
                continue
            entry = self.stored.get(row.name)
            if entry is None or entry[0] != row.definition:
                entry = (row.definition, self._build(row))
                self.seen.pop(row.name, None)
            known[row.name] = entry
            if entry[1] is not None and not row.paused:
                running.append(entry[1])
        self.stored = known
        for name in [n for n in self.seen if n not in known and n not in self.app.schedules]:
            del self.seen[name]  # deleted
        return running

    def _build(self, row: ScheduleRow) -> StoredSchedule | None:
        try:
            return StoredSchedule(row, self.app.registry.get)
        except Exception as exc:  # a row another program wrote, a job this app does not register
            log.warning("scheduler: stored schedule %s (version %s) skipped: %s", row.name, row.version, exc)
            return None

    def _claim(self, schedule: PeriodicJob, slot: datetime, now: datetime) -> None:
        catch_up = schedule.catch_up
        last = self.app.store.schedules.last_slot(schedule.name) if catch_up.mode == "all" else None
        runs = [(due, schedule.prepare(due.isoformat()) if enqueue else None)
                for due, enqueue in slots_due(schedule.cron, catch_up, now, last)]
        version = schedule.version if isinstance(schedule, StoredSchedule) else None
        ids = self.app.store.schedules.claim_slots(schedule.name, runs, version)
        if ids is None:  # changed since this tick read it: claimed under the new version at the next tick
            log.info("periodic schedule %s changed before its slot %s was claimed", schedule.name, slot.isoformat())
            return
        self.seen[schedule.name] = slot
        if len(ids) == 1:
            log.info("periodic job %s enqueued for %s as job %d", schedule.name, slot.isoformat(), ids[0])
        elif ids:
            log.info("periodic job %s caught up: %d missed slots up to %s enqueued as jobs %s", schedule.name,
                     len(ids), slot.isoformat(), ", ".join(map(str, ids)))

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
