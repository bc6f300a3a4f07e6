"""One worker process: claim in batches, run on threads (and an event loop), settle, heartbeat.

The main thread owns the claim/settle loop and is the only one that decides what
happens to a job; runner threads only execute and hand back an
:class:`~errands.worker.execution.Outcome`.  A heartbeat thread extends the
leases of running jobs and the worker's registry row, and periodically releases
other workers' stale claims.  Signal handlers only set flags.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue as queue_mod
import random
import secrets
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import StoreError, StoreUnavailable
from ..store.rows import JobRow
from .execution import Outcome, Result, describe_arguments, is_async_job, run_async, run_sync
from .slots import SlotTable

if TYPE_CHECKING:
    from ..app import Errands

log = logging.getLogger("errands.worker")

ASYNC_HARD_GRACE = 2.0
"""Seconds the supervisor waits past an async job's soft timeout before killing."""


@dataclass(frozen=True)
class WorkerSettings:
    queues: tuple[str, ...]
    concurrency: int = 1
    burst: bool = False
    """Exit once nothing is ready (delayed jobs are not waited for)."""
    max_jobs: int | None = None
    sleep: float = 1.0
    """Longest wait between polls when idle."""
    shutdown_timeout: float = 30.0
    lease: float | None = None
    """Seconds a claim stays ours without a heartbeat; the app's setting when None."""
    min_sleep: float = 0.02


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class _Running:
    row: JobRow
    slot: int
    started: float = field(default_factory=time.monotonic)


class Worker:
    """Runs jobs in this process until told to stop (or until burst/max says so)."""

    def __init__(self, app: Errands, settings: WorkerSettings, *, slots: SlotTable | None = None,
                 parent_pid: int | None = None) -> None:
        if settings.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.app = app
        self.store = app.store
        self.settings = settings
        self.lease = float(settings.lease or app.lease)
        self.id = make_worker_id()
        self.slots = slots
        self.parent_pid = parent_pid
        self.jobs_done = 0
        self.claimed = 0
        self._running: dict[int, _Running] = {}
        self._running_lock = threading.Lock()
        self._free_slots = list(range(settings.concurrency))
        self._work: queue_mod.SimpleQueue[_Running | None] = queue_mod.SimpleQueue()
        self._done: queue_mod.SimpleQueue[Outcome] = queue_mod.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._stop_now = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._to_complete: list[int] = []
        self._unsettled: list[Outcome] = []

    # ------------------------------------------------------------------ control
    def request_stop(self, immediate: bool = False) -> None:
        """Stop claiming; with ``immediate`` also give back running jobs and leave now."""
        self._stop.set()
        if immediate:
            self._stop_now.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, frame: Any) -> None:
            self.request_stop(immediate=self._stop.is_set())

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    @property
    def running_ids(self) -> list[int]:
        with self._running_lock:
            return list(self._running)

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        s = self.settings
        self._register()
        for n in range(s.concurrency):
            t = threading.Thread(target=self._runner, args=(n,), name=f"errands-runner-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        beat = threading.Thread(target=self._heartbeat_loop, name="errands-heartbeat", daemon=True)
        beat.start()
        idle = s.min_sleep
        outage = 0.5
        try:
            while not self._stop.is_set():
                self._settle()
                if s.max_jobs is not None and self.claimed >= s.max_jobs:
                    break
                free = s.concurrency - len(self._running)
                if free > 0:
                    if s.max_jobs is not None:
                        free = min(free, s.max_jobs - self.claimed)
                    try:
                        rows = self.store.claim(self.id, s.queues, free, self.lease)
                        outage = 0.5
                    except StoreUnavailable as exc:
                        log.warning("database unavailable, retrying in %.1fs: %s", outage, exc)
                        self._wake.wait(outage)
                        self._wake.clear()
                        outage = min(outage * 2, 30.0) * random.uniform(0.8, 1.2)
                        continue
                    if rows:
                        for row in rows:
                            self._start(row)
                        idle = s.min_sleep
                        continue
                    if s.burst and not self._running:
                        break
                self._wake.wait(idle)
                self._wake.clear()
                if not self._running:
                    idle = min(idle * 2, s.sleep)
            self._drain()
        finally:
            self._shutdown()

    def _start(self, row: JobRow) -> None:
        slot = self._free_slots.pop()
        item = _Running(row, slot)
        with self._running_lock:
            self._running[row.id] = item
        self.claimed += 1
        if self.slots is not None:
            timeout = row.timeout
            if timeout is not None and is_async_job(self.app, row):
                timeout += ASYNC_HARD_GRACE
            self.slots.start(slot, row.id, timeout)
        if is_async_job(self.app, row):
            loop = self._event_loop()
            future = asyncio.run_coroutine_threadsafe(run_async(self.app, row, self.id), loop)
            future.add_done_callback(lambda f, row=row: self._finished(self._future_outcome(f, row)))
        else:
            self._work.put(item)

    @staticmethod
    def _future_outcome(future: Any, row: JobRow) -> Outcome:
        try:
            return future.result()
        except BaseException as exc:  # cancelled at shutdown, or a bug in execution itself
            return Outcome(row, Result.ERROR, 0.0, type(exc).__name__, str(exc) or repr(exc), exc)

    def _runner(self, n: int) -> None:
        try:
            while True:
                item = self._work.get()
                if item is None:
                    return
                self._finished(run_sync(self.app, item.row, self.id))
        finally:
            self.store.release_thread_connection()  # a handler may have used the app's store

    def _finished(self, outcome: Outcome) -> None:
        self._done.put(outcome)
        self._wake.set()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=loop.run_forever, name="errands-event-loop", daemon=True)
            self._loop_thread.start()
            self._loop = loop
        return self._loop

    # ------------------------------------------------------------------ settling
    def _settle(self) -> None:
        """Write the outcome of finished runs: successes in one DELETE, failures one by one."""
        while True:
            try:
                outcome = self._done.get_nowait()
            except queue_mod.Empty:
                break
            if outcome.result is Result.OK:
                self._to_complete.append(outcome.row.id)
            else:
                self._unsettled.append(outcome)
            self._release_slot(outcome.row.id)  # after: the heartbeat must always see it as held
            self._log(outcome)
            self.jobs_done += 1
        try:
            if self._to_complete:
                self.store.complete(self.id, self._to_complete)
                self._to_complete = []
            while self._unsettled:
                self._settle_failure(self._unsettled[0])
                self._unsettled.pop(0)
        except StoreUnavailable as exc:
            log.warning("cannot record finished jobs yet (database unavailable): %s", exc)

    def _settle_failure(self, outcome: Outcome) -> None:
        row = outcome.row
        definition = self.app.registry.get(row.name)
        if outcome.result is Result.ERROR and definition is not None and row.attempts < row.max_attempts:
            delay = definition.backoff(row.attempts)
            if self.store.retry_later(self.id, row.id, delay, outcome.error_text):
                log.info("job %d %s will retry in %.1fs (attempt %d of %d failed)", row.id, row.name, delay,
                         row.attempts, row.max_attempts)
            return
        if self.store.bury(self.id, row.id, outcome.error_type, outcome.error_message):
            log.warning("job %d %s moved to the dead letter after %d attempt(s): %s", row.id, row.name,
                        row.attempts, outcome.error_text)

    def _release_slot(self, job_id: int) -> None:
        with self._running_lock:
            item = self._running.pop(job_id, None)
        if item is not None:
            if self.slots is not None:
                self.slots.clear(item.slot)
            self._free_slots.append(item.slot)

    def _log(self, outcome: Outcome) -> None:
        row = outcome.row
        ms = outcome.duration * 1000
        if outcome.result is Result.OK:
            log.info("job %d %s done in %.1f ms", row.id, row.name, ms)
        else:
            log.warning("job %d %s(%s) failed after %.1f ms (attempt %d of %d): %s", row.id, row.name,
                        describe_arguments(row, 80), ms, row.attempts, row.max_attempts, outcome.error_text,
                        exc_info=outcome.exc if outcome.result is Result.ERROR else None)

    # ------------------------------------------------------------------ stopping
    def _drain(self) -> None:
        """Graceful stop: let running jobs finish within the shutdown timeout."""
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while self._running and not self._stop_now.is_set() and time.monotonic() < deadline:
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
            self._settle()
        self._settle()

    def _shutdown(self) -> None:
        self._stop.set()
        for _ in self._threads:
            self._work.put(None)
        leftover = self.running_ids
        for attempt in range(3):
            try:
                if leftover:
                    n = self.store.release(self.id, leftover)
                    log.warning("released %d unfinished job(s) for another worker: %s", n, leftover)
                if self._to_complete:
                    self.store.complete(self.id, self._to_complete)
                    self._to_complete = []
                for outcome in list(self._unsettled):
                    self._settle_failure(outcome)
                    self._unsettled.remove(outcome)
                self.store.unregister_worker(self.id)
                break
            except StoreError as exc:
                log.warning("could not clean up on shutdown (%s); leases will expire instead", exc)
                time.sleep(0.5 * (attempt + 1))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(timeout=2)
            if not self._loop.is_running():
                self._loop.close()

    # ------------------------------------------------------------------ background
    def _register(self) -> None:
        delay = 0.5
        while True:
            try:
                self.store.register_worker(self.id, socket.gethostname(), os.getpid(), self.settings.queues,
                                           self.settings.concurrency)
                return
            except StoreUnavailable as exc:
                if self._stop.is_set():
                    raise
                log.warning("database unavailable at start-up, retrying in %.1fs: %s", delay, exc)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)

    def _heartbeat_loop(self) -> None:
        try:
            self._beat()
        finally:
            self.store.release_thread_connection()

    def _beat(self) -> None:
        interval = max(0.2, self.lease / 3)
        rescue_every = max(1.0, self.lease / 2)
        next_rescue = time.monotonic() + random.uniform(0, rescue_every)
        while not self._stop_now.wait(interval * random.uniform(0.9, 1.0)):
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                os._exit(70)  # the supervisor is gone; let leases expire rather than run unsupervised
            try:
                # Finished runs whose outcome is not recorded yet (the database was down) are still
                # ours too: if their leases lapsed, recover_stale below would hand them out again.
                held = self.running_ids + list(self._to_complete) + [o.row.id for o in list(self._unsettled)]
                if held:
                    self.store.extend_leases(self.id, held, self.lease)
                self.store.heartbeat(self.id, self.jobs_done)
                if time.monotonic() >= next_rescue:
                    next_rescue = time.monotonic() + rescue_every
                    report = self.store.recover_stale()
                    if report.released or report.buried:
                        log.warning("recovered stale jobs: released %s, buried %s", report.released,
                                    report.buried)
                    self.store.prune_workers(older_than=max(self.lease * 4, 120.0))
            except StoreError as exc:
                log.warning("heartbeat failed: %s", exc)
            if self._stop.is_set() and not self._running:
                return

