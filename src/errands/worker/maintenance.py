"""Maintenance: what keeps a worker's claims ours and the tables tidy, on background threads.

The heartbeat thread extends the leases of every job this process holds (buffered, running,
finished but not yet recorded) and reports the worker alive; every half lease it recovers
stale jobs of dead workers, forgets workers silent for too long (the liveness policy in
:mod:`errands.worker.liveness`), unblocks jobs whose dependency finished and raises the priority
of jobs that aged (``age_after=``); once a minute it
prunes expired results, old dead-letter entries and stats, and ends waiting jobs past their expiry
or their deadline; every ``alert_every`` seconds it takes
its turn at evaluating the alert thresholds, if the app has any (:mod:`errands.worker.alerts`).
While async jobs run it
also looks for cancellation requests.  The listener thread wakes the claim loop when the
database signals new jobs.  None of this is on the per-job path.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING

from ..core.endings import announce
from ..core.errors import StoreError, StoreUnavailable
from .alerts import AlertClock, evaluate_quietly
from .control import QUIET, STOP, command_of
from .liveness import FORGET_AFTER_AT_LEAST, FORGET_AFTER_LEASES, forget_worker_after, heartbeat_every
from .state import jitter

if TYPE_CHECKING:
    from .execution import Runners
    from .host import RunHost
    from .ports import Wakeup
    from .settings import WorkerSettings
    from .state import WorkerState

log = logging.getLogger("errands.worker")

CANCEL_CHECK_EVERY = 1.0
"""Seconds between looks for cancellation requests while async jobs run."""
PRUNE_EVERY = 60.0
"""Seconds between deletions of expired results and old dead-letter entries (per worker)."""
REPORT_DONE_EVERY = 1.0
"""Seconds at least between two early writes of ``jobs_done`` (when jobs finished since the last
beat): ``errands status`` and the Workers page then follow a busy worker within about a second,
not a third of a lease later, for at most one small UPDATE a second."""


class Maintenance:
    """Registration, heartbeat, stale recovery, pruning and the wake-up listener of one worker."""

    def __init__(self, app: RunHost, settings: WorkerSettings, state: WorkerState, owner: str, lease: float,
                 runners: Runners, parent_pid: int | None = None) -> None:
        self.app = app
        self.store = app.store
        self.settings = settings
        self.state = state
        self.owner = owner
        self.lease = lease
        self.runners = runners
        self.parent_pid = parent_pid
        self._next_rescue = 0.0
        self._next_prune = 0.0
        self._reported_done = 0
        """``jobs_done`` as the workers table last heard it."""
        self.kept = time.monotonic()
        """When the leases of the held jobs were last extended (monotonic clock)."""
        thresholds = app.alert_thresholds
        self._alerts = AlertClock(thresholds.every) if thresholds.any else None
        """When this worker next tries its turn at evaluating the alert thresholds (None: none configured)."""
        self.beating = threading.Event()
        """Set once the heartbeat thread holds its connection: the worker claims nothing before."""

    def wait_until_beating(self) -> None:
        """Block until the heartbeat thread holds its connection (or the worker is told to stop)."""
        while not self.beating.wait(0.2):
            if self.state.stop.is_set():
                return

    def register(self) -> None:
        """Enter the workers table, waiting out a database that is not up yet (unless stopped)."""
        delay = 0.5
        while True:
            try:
                self.store.workers.register(self.owner, socket.gethostname(), os.getpid(), self.settings.queues,
                                           self.settings.concurrency, self.lease, heartbeat_every(self.lease))
                return
            except StoreUnavailable as exc:
                if self.state.stop.is_set():
                    raise
                log.warning("database unavailable at start-up, retrying in %.1fs: %s", delay, exc)
                self.state.stop.wait(delay)
                delay = min(delay * 2, 30.0)

    # ------------------------------------------------------------------ heartbeat
    def heartbeat_loop(self) -> None:
        self.store.dedicate_thread()  # heartbeats and maintenance: a connection of their own
        try:
            self._first_beat()
            self._beat()
        finally:
            self.beating.set()
            self.store.release_thread_connection()

    def _first_beat(self) -> None:
        """Open this thread's connection and beat once before the worker claims anything.

        Behind a pooler that opens server connections one at a time (PgBouncer), or on a busy
        server, a new connection can take longer than a lease: a worker that claimed first and
        connected its heartbeat later would see its first leases lapse and its jobs run twice."""
        try:
            self._report()
        except StoreError as exc:  # the claim loop finds the database down by itself
            log.warning("first heartbeat failed: %s", exc)
        except Exception:
            log.exception("first heartbeat failed")
        finally:
            self.beating.set()

    def _beat(self) -> None:
        state, runners = self.state, self.runners
        interval = heartbeat_every(self.lease)
        self._next_rescue = time.monotonic() + jitter.uniform(0, max(1.0, self.lease / 2))
        next_beat = time.monotonic() + interval * jitter.uniform(0.9, 1.0)
        self._next_prune = time.monotonic() + jitter.uniform(0, PRUNE_EVERY)
        next_report = 0.0
        self.kept = time.monotonic()  # (the first beat just extended nothing: nothing was held yet)
        while not state.stop_now.wait(min(CANCEL_CHECK_EVERY, interval) * jitter.uniform(0.9, 1.0)):
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                os._exit(70)  # the supervisor is gone; let leases expire rather than run unsupervised
            if runners.futures:
                self._cancel_async_runs()
            if time.monotonic() < next_beat:
                if state.jobs_done != self._reported_done and time.monotonic() >= next_report:
                    next_report = time.monotonic() + REPORT_DONE_EVERY
                    try:
                        self._report()
                    except Exception as exc:  # the next full beat retries (and logs a lasting failure)
                        log.debug("early jobs_done report failed: %s", exc)
                continue
            next_beat = time.monotonic() + interval * jitter.uniform(0.9, 1.0)
            try:
                self._keep()
            except StoreError as exc:
                log.warning("heartbeat failed: %s", exc)
            except Exception:  # never let this thread die: the leases of running jobs would lapse
                log.exception("heartbeat failed")
            self._judge_leases()
            if state.stop.is_set() and not state.held:
                return

    def _judge_leases(self) -> None:
        """Half a lease without an extension: the runs may soon be another worker's, so running jobs are
        told to stop at their next checkpoint (``current_job().stopping``) until the leases are kept again."""
        state = self.state
        late = time.monotonic() - self.kept
        if late <= self.lease / 2:
            state.leases_at_risk.clear()
        elif not state.leases_at_risk.is_set():
            log.warning("leases not extended for %.1fs: running jobs are asked to stop at a checkpoint", late)
            state.leases_at_risk.set()

    def _report(self) -> None:
        """Report alive, with the runs recorded so far and what this worker is doing, and obey the
        command an operator left for it (read by the same statement)."""
        done = self.state.jobs_done
        command = self.store.workers.heartbeat(self.owner, done, self.state.status)
        self._reported_done = done
        if self._obey(command_of(command)):  # acknowledged at once: the listing shows what it does now
            self.store.workers.heartbeat(self.owner, done, self.state.status)

    def _obey(self, command: str | None) -> bool:
        """Quiet, resume or stop as the workers table says (:mod:`~errands.worker.control`); whether
        that changed what this worker does."""
        state = self.state
        if command == STOP:
            if state.stop.is_set():
                return False
            log.warning("told to stop from outside: claiming nothing more, finishing running jobs "
                        "(up to %.0fs), then exiting", self.settings.shutdown_timeout)
            state.stop.set()
        elif command == QUIET:
            if state.quiet.is_set() or state.stop.is_set():
                return False
            log.warning("quieted from outside: claiming nothing more, running jobs finish; still alive")
            state.quiet.set()
        elif state.quiet.is_set():
            log.warning("resumed from outside: claiming jobs again")
            state.quiet.clear()
            state.new_jobs.set()
        else:
            return False
        state.wake.set()
        return True

    def _keep(self) -> None:
        """One beat: extend our leases, report alive, and rescue or prune when that is due."""
        # Finished runs whose outcome is not recorded yet (the database was down) are still
        # ours too: if their leases lapsed, recover_stale below would hand them out again.
        held = self.state.held_ids()
        if held:
            self.store.jobs.extend_leases(self.owner, held, self.lease)
        self.kept = time.monotonic()
        self._report()
        if time.monotonic() >= self._next_rescue:
            self._next_rescue = time.monotonic() + max(1.0, self.lease / 2)
            self._rescue()
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY
            self.store.features.prune(self.app.failed_ttl)
            self.store.insights.prune_stats()
            self._end_overdue()
        if self._alerts is not None and self._alerts.due():
            evaluate_quietly(self.app)

    def _end_overdue(self) -> None:
        ended = end_overdue(self.app)
        if ended:
            log.info("ended %d waiting job(s) past their expiry or deadline", ended)

    def _rescue(self) -> None:
        """Recover the jobs of dead workers, forget long-silent workers, unblock ready dependants."""
        report = self.store.endings.recover_stale(self.app.policies)
        if report.released or report.buried:
            log.warning("recovered stale jobs: released %s, buried %s", report.released, report.buried)
        for row, settlement in report.ended:  # this process decided them: its hooks hear of them
            announce(self.app, row, settlement)
        # Rows that recorded their worker's lease are judged by it; older rows by ours.
        self.store.workers.prune(older_than=forget_worker_after(self.lease), per_lease=FORGET_AFTER_LEASES,
                                 at_least=FORGET_AFTER_AT_LEAST)
        unblocked = self.store.features.sweep_blocked()
        if unblocked:
            log.warning("unblocked %d job(s) whose dependency had finished", unblocked)
        aged = self.store.features.age_waiting()
        if aged:
            log.debug("raised the priority of %d waiting job(s) by aging", aged)

    def _cancel_async_runs(self) -> None:
        """Cancel the tasks of running async jobs whose cancellation was requested."""
        try:
            requested = set(self.store.features.cancel_requests(self.owner))
        except Exception:  # the next beat asks again
            return
        self.runners.cancel(requested)

    # ------------------------------------------------------------------ listener
    def listen_loop(self) -> None:
        """Wake the claim loop as soon as the database signals new jobs (idle pickup latency)."""
        state = self.state
        listener: Wakeup | None = None
        delay = 0.5
        try:
            while not state.stop.is_set():
                try:
                    if listener is None:
                        listener = self.store.listener()
                        if listener is None:
                            return
                        delay = 0.5
                    if listener.wait(0.5):
                        state.new_jobs.set()
                        state.wake.set()
                except Exception as exc:  # StoreError, or a fault of its own: poll meanwhile, never die
                    log.debug("wake-up listener unavailable (%s); polling meanwhile", exc)
                    if listener is not None:
                        _close_quietly(listener)
                        listener = None
                    state.stop.wait(delay)
                    delay = min(delay * 2, 30.0)
        finally:
            if listener is not None:
                listener.close()


def end_overdue(app: RunHost, limit: int = 500) -> int:
    """End waiting jobs past their expiry (as expired) or their deadline (``DeadlineExceeded``), at most
    ``limit`` of each, and call their ``on_expired`` / ``on_dead`` hooks here; returns how many.  Every
    worker does it once a minute (the claim already refuses such jobs); ``Jobs(app).drain()`` after
    its runs."""
    ended = app.store.endings.end_overdue(limit)
    for row, settlement in ended:  # this process ended them: its hooks hear of them
        announce(app, row, settlement)
    return len(ended)


def _close_quietly(listener: Wakeup) -> None:
    try:
        listener.close()
    except Exception:  # already broken
        pass
