"""One worker process: claim in batches, run on threads (and an event loop), settle in batches.

The main thread owns the database conversation about jobs: it claims a batch
into a local buffer (:mod:`~errands.worker.admission`), and later records the
outcomes of many runs at once, all successes in one DELETE
(:mod:`~errands.worker.settling`).  Runner threads (:mod:`~errands.worker.execution`)
take jobs from the buffer, run them and hand back an
:class:`~errands.core.endings.RunOutcome`; they wake the main thread only when
the buffer runs low or a run failed, so a stream of short jobs costs a few
statements per batch rather than per job.  Every held job is ours by lease: the
heartbeat thread (:mod:`~errands.worker.maintenance`) extends the leases of all of
them (buffered, running, finished but not yet recorded).  Signal handlers only set
flags.  :class:`Worker` wires these parts together and runs the main loop.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from ..core.errors import StoreError, StoreUnavailable
from .admission import Admission
from .control import resident_mb
from .execution import Runners
from .maintenance import Maintenance
from .scheduler import Scheduler
from .settings import WorkerSettings
from .settling import SETTLE_EVERY, Settling
from .state import WorkerState, jitter, log

if TYPE_CHECKING:
    from .host import RunHost
    from .slots import SlotTable

__all__ = ["Worker", "WorkerSettings", "make_worker_id"]


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Worker:
    """Runs jobs in this process until told to stop (or until burst/max says so)."""

    def __init__(self, app: RunHost, settings: WorkerSettings, *, slots: SlotTable | None = None,
                 parent_pid: int | None = None) -> None:
        self.app = app
        self.store = app.store
        self.settings = settings
        self.lease = float(settings.lease or app.lease)
        self.id = make_worker_id()
        self.slots = slots
        self.parent_pid = parent_pid
        self.state = state = WorkerState()
        self.admission = Admission(app, settings, state, self.id, self.lease)
        self.settling = Settling(app, state, self.id, self.admission.slots_freed)
        self.runners = Runners(app, state, slots, self.settling.record)
        self.maintenance = Maintenance(app, settings, state, self.id, self.lease, self.runners, parent_pid)
        self._threads = self.runners.threads
        self._memory_checked = 0
        """``jobs_done`` when the memory was last compared with ``--max-memory``."""

    @property
    def jobs_done(self) -> int:
        """Runs this worker has recorded (in any outcome)."""
        return self.state.jobs_done

    @property
    def claimed(self) -> int:
        """Jobs this worker claimed and was allowed to run (``max_jobs`` counts these)."""
        return self.state.claimed

    # ------------------------------------------------------------------ control
    def request_stop(self, immediate: bool = False) -> None:
        """Stop claiming; with ``immediate`` also give back running jobs and leave now."""
        self.state.stop.set()
        if immediate:
            self.state.stop_now.set()
        self.state.wake.set()

    def install_signal_handlers(self, supervised: bool = False) -> None:
        """SIGTERM/SIGINT: finish running jobs; a second one: give them back now.

        ``supervised``: a worker process under ``errands worker``'s supervisor.  There SIGTERM only
        ever means "finish": systemd (default ``KillMode=control-group``), Kubernetes and
        ``kill -- -pgid`` signal every process of a service at once, so a worker process gets the
        stop from its service manager *and* from the supervisor; counting those as two would give
        every running job back.  The supervisor's "stop now" is SIGUSR1."""

        signals = [0]  # counted here, not read from the stop event, which a thread sets a moment later

        def handle(signum: int, frame: Any) -> None:
            signals[0] += 1
            self._stop_from_signal(immediate=(signals[0] > 1 or self.state.stop.is_set()) and not supervised)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        # The supervisor's "stop now" (a distinct signal, so that it cannot merge with a SIGTERM).
        signal.signal(signal.SIGUSR1, lambda signum, frame: self._stop_from_signal(immediate=True))

    def _stop_from_signal(self, immediate: bool) -> None:
        """A signal handler runs on the main thread between two bytecodes, possibly inside
        ``wake.wait()`` or ``wake.clear()`` while that thread holds the event's lock: setting the
        events from the handler itself would wait for that lock for ever (a worker told to stop
        now hung, seen under load).  So a short-lived thread sets them."""
        threading.Thread(target=self.request_stop, args=(immediate,), name="errands-stop", daemon=True).start()

    @property
    def stopping(self) -> bool:
        """Told to stop (it claims nothing more, and finishes or gives back what it holds)."""
        return self.state.stop.is_set()

    @property
    def recycling(self) -> bool:
        """Stopping to be replaced by a fresh process (``--max-memory``)."""
        return self.state.recycle

    @property
    def held_ids(self) -> list[int]:
        return self.state.held_ids()

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        # Claiming and settling run on this thread's own connection (no pool, no lock per
        # statement); job code on the runner threads borrows from the shared pool.
        self.store.dedicate_thread()
        try:
            self._start()
            try:
                self._loop()
                self._drain()
            finally:
                self._shutdown()
        finally:
            self.store.dedicate_thread(False)

    def _start(self) -> None:
        """Register, then start the runner, heartbeat, listener and scheduler threads."""
        s = self.settings
        self.maintenance.register()
        self.runners.start(s.concurrency)
        threading.Thread(target=self.maintenance.heartbeat_loop, name="errands-heartbeat", daemon=True).start()
        self.maintenance.wait_until_beating()
        if s.listen and not s.burst:
            threading.Thread(target=self.maintenance.listen_loop, name="errands-listener", daemon=True).start()
        if s.scheduler and not s.burst:  # also without code schedules: stored ones may be added at any time
            threading.Thread(target=Scheduler(self.app, self.state.stop).run, name="errands-scheduler",
                             daemon=True).start()

    def _loop(self) -> None:
        """Settle, claim and wait until stopped, or until burst or ``max_jobs`` says the work is done."""
        s, state, settling = self.settings, self.state, self.settling
        stop, db_ok, new_jobs, take = state.stop, state.db_ok, state.new_jobs, self.admission.take
        idle = s.min_sleep
        next_claim = 0.0  # monotonic time before which an empty queue is not asked again
        while not stop.is_set():
            if not db_ok.is_set() and not self._database_back():
                continue
            settling.settle()
            self.admission.give_back_missed()
            if not db_ok.is_set() or self._steered():
                continue  # (told to stop: the loop ends)
            if new_jobs.is_set():
                new_jobs.clear()
                next_claim, idle = 0.0, s.min_sleep
            want = self._want()
            if want is None:
                break
            # Claim when a runner is idle, or when the buffer ran low; never when nothing
            # was ready a moment ago (unless the listener said jobs arrived).
            needed = state.outstanding < s.concurrency or state.outstanding <= state.low_water
            now = time.monotonic()
            if want > 0 and needed and now >= next_claim:
                rows = take(want)
                if rows is None:  # the database failed: paused until it is back
                    continue
                if rows:
                    next_claim, idle = 0.0, s.min_sleep
                    if len(rows) == want:
                        continue  # more may be ready: top up as soon as the buffer runs low
                elif s.burst and not state.outstanding and not settling.unrecorded() and not self.admission.contended:
                    break  # (recording may enqueue more: a batch callback, an unblocked dependant; a lost claim: retry)
                else:
                    next_claim = now + idle * jitter.uniform(0.8, 1.0)
                    due = self.admission.next_due(now)
                    if due is not None and due < next_claim:
                        # A run the limits refused is due before the idle pause ends (a rate window
                        # frees a start): ask again then.
                        next_claim = due
                    else:
                        idle = min(idle * 2, s.sleep)
            self._wait(next_claim)

    def _database_back(self) -> bool:
        """Paused by an outage (seen here, or by a handler): probe when due; True once it answers."""
        state = self.state
        if not state.retry_due():
            return False
        try:
            self.store.now()
        except StoreUnavailable as exc:
            state.database_down(exc)
            return False
        state.database_up()
        return True

    def _want(self) -> int | None:
        """How many jobs to claim now (the capacity left, within ``max_jobs``); None: done."""
        s, state = self.settings, self.state
        if s.max_jobs is not None and state.claimed >= s.max_jobs and not state.outstanding:
            return None
        if state.quiet.is_set():
            return 0  # quieted from outside: nothing claimed, nothing prefetched
        want = self.admission.capacity() - state.outstanding
        if s.max_jobs is not None:
            want = min(want, s.max_jobs - state.claimed)
        return want

    def _wait(self, next_claim: float) -> None:
        """Sleep until the next claim is due, a runner wakes us, or finished runs are due to be written."""
        state, settling = self.state, self.settling
        timeout = max(0.0, next_claim - time.monotonic()) if next_claim else self.settings.sleep
        if state.outstanding or settling.to_complete or settling.unsettled:
            timeout = min(timeout, SETTLE_EVERY)
        refused = settling.refused_due_in()
        if refused is not None:  # a success the database refused to record is offered again then
            timeout = min(timeout, refused)
        state.wake.wait(timeout)
        state.wake.clear()

    # ------------------------------------------------------------------ stopping
    def _steered(self) -> bool:
        """Follow what changed since the last pass: ``--max-memory`` crossed (recycle), quieted from
        outside (give the buffer back); True when the worker is to stop."""
        s, state = self.settings, self.state
        if s.max_memory is not None and state.jobs_done != self._memory_checked:
            self._check_memory(s.max_memory)
        if state.quiet.is_set():
            self._give_back_unstarted()  # (nothing to do once the buffer is empty)
        return state.stop.is_set()

    def _check_memory(self, limit: int) -> None:
        """``--max-memory``: after runs that left this process above ``limit`` MB, stop claiming and
        exit once the running jobs finish, to be replaced by a fresh process."""
        self._memory_checked = self.state.jobs_done
        used = resident_mb()
        if used is None or used <= limit:
            return
        log.warning("worker process uses %.0f MB, above --max-memory %d MB: recycling (running jobs "
                    "finish, then a fresh process takes over)", used, limit)
        self.state.recycle = True
        self.state.stop.set()

    def _give_back_unstarted(self) -> None:
        """Release the buffered jobs no runner has started (their attempt refunded)."""
        state = self.state
        unstarted = self.runners.unstarted()
        if unstarted:
            try:
                self.admission.take_back_starts(unstarted)
                self.store.jobs.release(self.id, unstarted)
                state.forget(unstarted)
                state.claimed -= len(unstarted)  # (--max counts runs it was allowed to start)
            except StoreError as exc:
                log.warning("could not give back %d buffered job(s) now (%s)", len(unstarted), exc)

    def _drain(self) -> None:
        """Graceful stop: give back unstarted jobs, let running ones finish within the shutdown timeout."""
        state = self.state
        self.admission.give_back_missed()
        self._give_back_unstarted()
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while state.outstanding > 0 and not state.stop_now.is_set() and time.monotonic() < deadline:
            state.wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            state.wake.clear()
            self.settling.settle()
        self.settling.settle()

    def _shutdown(self) -> None:
        state, settling = self.state, self.settling
        state.stop.set()
        state.stop_now.set()  # runner threads still waiting for work leave at once
        for _ in self._threads:
            state.work.put(None)
        settling.collect()
        for attempt in range(3):
            try:
                settling.write(final=True)
                settling.announce_freed()
                settling.flush_stats(force=True)
                leftover = self.held_ids
                if leftover:
                    self.admission.take_back_starts(leftover)
                    n = self.store.jobs.release(self.id, leftover)
                    log.warning("released %d unfinished job(s) for another worker: %s", n, leftover)
                self.store.workers.unregister(self.id)
                break
            except StoreError as exc:
                log.warning("could not clean up on shutdown (%s); leases will expire instead", exc)
                time.sleep(0.5 * (attempt + 1))
        self.runners.stop_event_loop(self.settings.shutdown_timeout)
