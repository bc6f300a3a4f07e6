"""What the parts of one worker process share: held jobs, counts, the signals between threads.

Admission hands claimed jobs to the runner threads, the runners hand outcomes to settling, and
the heartbeat extends the leases of everything held; they meet here.  The plain counters are
attributes (not properties) and the events, locks and the work queue are the very objects the
parts keep references to, so the per-job path costs no more than when it was one class.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import random
import threading
import time
from typing import Any

from ..core.errors import StoreUnavailable
from ..core.rows import ClaimedJob
from .control import QUIET, STOPPING

log = logging.getLogger("errands.worker")
jitter = random.Random()
"""Jitter from errands' own generator: the application's global ``random`` state (which its tests may
seed) is never drawn from by a worker's threads."""


class WorkerState:
    """The shared state of one worker process (see the module's docstring)."""

    def __init__(self) -> None:
        self.held: set[int] = set()
        """Claimed and not yet recorded: buffered, running, or finished awaiting settle."""
        self.held_lock = threading.Lock()
        self.outstanding = 0
        """Claimed and not yet finished (buffered or running); guarded by count_lock."""
        self.count_lock = threading.Lock()
        self.work: queue_mod.SimpleQueue[ClaimedJob | None] = queue_mod.SimpleQueue()
        """Claimed jobs for the runner threads (None: a runner thread leaves)."""
        self.claimed = 0
        self.jobs_done = 0
        self.low_water = 0
        """Top up the buffer when this few jobs are left in it (half the prefetch)."""
        self.avg_duration = 0.0
        """Moving average of run durations: sizes the prefetch."""
        self.not_before: dict[int, float] = {}
        """Admitted runs granted a rate-limit start a moment ahead: the monotonic time before which
        each must not start (the runner that takes it waits until then)."""
        self.starts: dict[int, list[tuple[str, Any, int]]] = {}
        """Admitted rate-limited runs: the starts the database recorded for each (``Admitted.starts``),
        until a runner takes the run; a run that misses its start takes them back."""
        self.missed: list[tuple[int, list[tuple[str, Any, int]]]] = []
        """Rate-limited runs a runner reached too late after the start the database recorded for
        them (:data:`~errands.worker.execution.START_TOLERANCE`): the main thread gives them back
        unrun, to be granted a start again; guarded by held_lock."""
        self.cancel_requested: set[int] = set()
        """Running async jobs whose cancellation was requested (settling forgets them once recorded)."""
        self.db_ok = threading.Event()
        self.db_ok.set()
        self.outage = 0.5
        self.retry_at = 0.0
        self.wake = threading.Event()
        """Wakes the main loop: the buffer ran low, a run failed or needs more than a delete, a stop."""
        self.new_jobs = threading.Event()
        """Jobs became ready (the listener's signal, or a finished dependency): claim again soon."""
        self.stop = threading.Event()
        self.stop_now = threading.Event()
        self.leases_at_risk = threading.Event()
        """Set by the heartbeat thread while it has failed to extend the leases for half a lease: the
        runs may soon be another worker's (``current_job().stopping`` reads it)."""
        self.quiet = threading.Event()
        """Quieted by an operator (:mod:`~errands.worker.control`): claim nothing, run what is running."""
        self.recycle = False
        """Stopping to be replaced by a fresh process (``--max-memory``): the exit code says so."""

    def stopping(self) -> bool:
        """Whether running jobs should stop at their next checkpoint: told to stop, or leases at risk."""
        return self.stop.is_set() or self.leases_at_risk.is_set()

    @property
    def status(self) -> str | None:
        """What this worker reports doing with its heartbeat: "stopping", "quiet", or None (running)."""
        if self.stop.is_set():
            return STOPPING
        return QUIET if self.quiet.is_set() else None

    def missed_start(self, row: ClaimedJob, starts: list[tuple[str, Any, int]]) -> None:
        """A runner's rate-limited run missed its start: hand it, and the starts recorded for it, to
        the main thread to give back."""
        with self.held_lock:
            self.missed.append((row.id, starts))
        with self.count_lock:
            self.outstanding -= 1
        self.wake.set()

    def held_ids(self) -> list[int]:
        with self.held_lock:
            return list(self.held)

    def forget(self, ids: list[int]) -> None:
        with self.held_lock:
            self.held.difference_update(ids)

    # ------------------------------------------------------------------ database outages
    def database_down(self, exc: BaseException) -> None:
        """Pause: runners start no buffered job and the loop retries with growing pauses.

        Also for a statement the database refused outright (a StoreError that is no outage): the
        process pauses and retries rather than dying, which would stop every job it holds."""
        self.db_ok.clear()
        self.retry_at = time.monotonic() + self.outage
        if isinstance(exc, StoreUnavailable):
            log.warning("database unavailable, retrying in %.1fs: %s", self.outage, exc)
        else:
            log.error("the database refused a claim, retrying in %.1fs: %s", self.outage, exc)
        self.outage = min(self.outage * 2, 30.0) * jitter.uniform(0.8, 1.2)

    def database_up(self) -> None:
        if not self.db_ok.is_set():
            log.warning("database is reachable again; resuming")
            self.db_ok.set()
        self.outage = 0.5

    def retry_due(self) -> bool:
        """While the database is down, sleep until the next retry; True when it is time."""
        left = self.retry_at - time.monotonic()
        if left > 0:
            self.stop.wait(left)
            return False
        return True
