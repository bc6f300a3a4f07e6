"""One worker process: claim in batches, run on threads (and an event loop), settle in batches.

The main thread owns the database conversation about jobs: it claims a batch
into a local buffer, and later records the outcomes of many runs at once (all
successes in one DELETE).  Runner threads take jobs from the buffer, run them
and hand back an :class:`~errands.worker.execution.Outcome`; they wake the main
thread only when the buffer runs low or a run failed, so a stream of short jobs
costs a few statements per batch rather than per job.

How many jobs to hold beyond the running ones (the prefetch) adapts to how long
jobs take: enough for about 50 ms of work, at most 500, none while jobs are slow,
so a long job never sits in one worker's buffer while another worker idles.
Every held job is ours by lease: the heartbeat thread extends the leases of all
of them (buffered, running, finished but not yet recorded).  Signal handlers
only set flags.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue as queue_mod
import random
import secrets
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.context import context_of
from ..core.errors import StoreError, StoreUnavailable
from ..core.hooks import call_on_dead, call_on_retry, chain_of
from ..core.payload import decode_arguments, encode_result, safe_text
from ..core.retry import decide
from ..core.rows import FLAG_DEPENDENTS, FLAG_RESULT, ClaimedJob
from ..services.status import forget_worker_after
from ..store.features import Finished, Limit
from .execution import Outcome, Result, describe_arguments, failure, row_problem, run_async, run_sync
from .scheduler import Scheduler
from .slots import SlotTable

if TYPE_CHECKING:
    from ..app import Errands
    from ..store.dialects.base import Listener

log = logging.getLogger("errands.worker")
_jitter = random.Random()
"""Jitter from errands' own generator: the application's global ``random`` state (which its tests may
seed) is never drawn from by a worker's threads."""

ASYNC_HARD_GRACE = 2.0
"""Seconds the supervisor waits past an async job's soft timeout before killing."""
MAX_PREFETCH = 500
PREFETCH_HORIZON = 0.05
"""Seconds of work the adaptive prefetch aims to hold beyond the running jobs."""
SETTLE_EVERY = 0.02
"""Longest delay before finished runs are recorded while jobs keep coming."""
CANCEL_CHECK_EVERY = 1.0
"""Seconds between looks for cancellation requests while async jobs run."""
STATS_EVERY = 5.0
"""Seconds between additions to the per-minute stats table (one small upsert per queue)."""
_INF = float("inf")
PRUNE_EVERY = 60.0
"""Seconds between deletions of expired results and old dead-letter entries (per worker)."""


@dataclass(frozen=True)
class WorkerSettings:
    queues: tuple[str, ...]
    concurrency: int = 1
    burst: bool = False
    """Exit once nothing is ready (delayed jobs are not waited for)."""
    max_jobs: int | None = None
    sleep: float = 1.0
    """Longest wait between polls when idle (with a listener: between safety polls)."""
    shutdown_timeout: float = 30.0
    lease: float | None = None
    """Seconds a claim stays ours without a heartbeat; the app's setting when None."""
    min_sleep: float = 0.02
    prefetch: int | None = None
    """Jobs held beyond the running ones; None adapts to job duration (0..100)."""
    listen: bool = True
    """Use the database's wake-up signal (NOTIFY, data_version, new ids) when idle."""
    scheduler: bool = True
    """Enqueue the app's periodic jobs (never in burst mode)."""


async def _cancel_pending() -> None:
    """Cancel every other task of the running loop and wait until each has finished."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


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
        self._held: set[int] = set()
        """Claimed and not yet recorded: buffered, running, or finished awaiting settle."""
        self._held_lock = threading.Lock()
        self._outstanding = 0
        """Claimed and not yet finished (buffered or running); guarded by _count_lock."""
        self._count_lock = threading.Lock()
        self._work: queue_mod.SimpleQueue[ClaimedJob | None] = queue_mod.SimpleQueue()
        self._succeeded: collections.deque[ClaimedJob] = collections.deque()
        self._stats: dict[tuple[str, bool], int] = {}
        """Finished runs per (queue, succeeded) since the last flush to the stats table."""
        self._stats_due = time.monotonic() + STATS_EVERY
        self._failed: collections.deque[Outcome] = collections.deque()
        """Runs that end other than by a plain delete: failures, cancellations, and successes
        that keep a result or count in a batch."""
        self._futures: dict[int, Any] = {}
        """Running async jobs by id (the thread-safe futures their runner threads wait on)."""
        self._tasks: dict[int, asyncio.Task[Outcome]] = {}
        """Their tasks, touched only in the event loop's thread (cancellation cancels these)."""
        self._cancel_requested: set[int] = set()
        self._limited_names: set[str] | None = None
        """Names of rate- or concurrency-limited jobs (their runs need admission)."""
        self._to_complete: list[int] = []
        self._unsettled: list[Outcome] = []
        self._low_water = 0
        self._avg_duration = 0.0
        self._db_ok = threading.Event()
        self._db_ok.set()
        self._outage = 0.5
        self._retry_at = 0.0
        self._wake = threading.Event()
        self._new_jobs = threading.Event()
        self._stop = threading.Event()
        self._stop_now = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ control
    def request_stop(self, immediate: bool = False) -> None:
        """Stop claiming; with ``immediate`` also give back running jobs and leave now."""
        self._stop.set()
        if immediate:
            self._stop_now.set()
        self._wake.set()

    def install_signal_handlers(self, supervised: bool = False) -> None:
        """SIGTERM/SIGINT: finish running jobs; a second one: give them back now.

        ``supervised``: a worker process under ``errands worker``'s supervisor.  There SIGTERM only
        ever means "finish": systemd (default ``KillMode=control-group``), Kubernetes and
        ``kill -- -pgid`` signal every process of a service at once, so a worker process gets the
        stop from its service manager *and* from the supervisor; counting those as two would give
        every running job back.  The supervisor's "stop now" is SIGUSR1."""

        def handle(signum: int, frame: Any) -> None:
            self.request_stop(immediate=self._stop.is_set() and not supervised)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        # The supervisor's "stop now" (a distinct signal, so that it cannot merge with a SIGTERM).
        signal.signal(signal.SIGUSR1, lambda signum, frame: self.request_stop(immediate=True))

    @property
    def held_ids(self) -> list[int]:
        with self._held_lock:
            return list(self._held)

    # ------------------------------------------------------------------ main loop
    def run(self) -> None:
        s = self.settings
        self._register()
        for n in range(s.concurrency):
            t = threading.Thread(target=self._runner, args=(n,), name=f"errands-runner-{n}", daemon=True)
            t.start()
            self._threads.append(t)
        threading.Thread(target=self._heartbeat_loop, name="errands-heartbeat", daemon=True).start()
        listening = s.listen and not s.burst
        if listening:
            threading.Thread(target=self._listen_loop, name="errands-listener", daemon=True).start()
        if s.scheduler and not s.burst and self.app.schedules:
            threading.Thread(target=Scheduler(self.app, self._stop).run, name="errands-scheduler",
                             daemon=True).start()
        idle = s.min_sleep
        next_claim = 0.0  # monotonic time before which an empty queue is not asked again
        try:
            while not self._stop.is_set():
                if not self._db_ok.is_set():
                    # Paused by an outage (seen here, or by a handler): probe before resuming.
                    if not self._retry_due():
                        continue
                    try:
                        self.store.now()
                    except StoreUnavailable as exc:
                        self._database_down(exc)
                        continue
                    self._database_up()
                self._settle()
                if not self._db_ok.is_set():
                    continue
                if self._new_jobs.is_set():
                    self._new_jobs.clear()
                    next_claim, idle = 0.0, s.min_sleep
                if s.max_jobs is not None and self.claimed >= s.max_jobs and not self._outstanding:
                    break
                want = self._capacity() - self._outstanding
                if s.max_jobs is not None:
                    want = min(want, s.max_jobs - self.claimed)
                # Claim when a runner is idle, or when the buffer ran low; never when nothing
                # was ready a moment ago (unless the listener said jobs arrived).
                needed = self._outstanding < s.concurrency or self._outstanding <= self._low_water
                now = time.monotonic()
                if want > 0 and needed and now >= next_claim:
                    try:
                        rows = self.store.jobs.claim(self.id, s.queues, want, self.lease)
                    except StoreError as exc:  # unavailable, or refused: pause and try again later
                        self._database_down(exc)
                        continue
                    self._database_up()
                    if rows:
                        try:
                            rows = self._admit(rows)
                        except StoreError as exc:  # unadmitted claims lapse with their lease
                            self._database_down(exc)
                            continue
                    if rows:
                        self._hand_out(rows)
                        next_claim, idle = 0.0, s.min_sleep
                        if len(rows) == want:
                            continue  # more may be ready: top up as soon as the buffer runs low
                    elif s.burst and not self._outstanding and not self._unrecorded():
                        break  # (recording may enqueue more: a batch callback, an unblocked dependant)
                    else:
                        next_claim = now + idle * _jitter.uniform(0.8, 1.0)
                        idle = min(idle * 2, s.sleep)
                timeout = max(0.0, next_claim - time.monotonic()) if next_claim else s.sleep
                if self._outstanding or self._to_complete or self._unsettled:
                    timeout = min(timeout, SETTLE_EVERY)
                self._wake.wait(timeout)
                self._wake.clear()
            self._drain()
        finally:
            self._shutdown()

    def _unrecorded(self) -> bool:
        return bool(self._succeeded or self._failed or self._to_complete or self._unsettled)

    # ------------------------------------------------------------------ database outages
    def _database_down(self, exc: BaseException) -> None:
        """Pause: runners start no buffered job and the loop retries with growing pauses.

        Also for a statement the database refused outright (a StoreError that is no outage): the
        process pauses and retries rather than dying, which would stop every job it holds."""
        self._db_ok.clear()
        self._retry_at = time.monotonic() + self._outage
        if isinstance(exc, StoreUnavailable):
            log.warning("database unavailable, retrying in %.1fs: %s", self._outage, exc)
        else:
            log.error("the database refused a claim, retrying in %.1fs: %s", self._outage, exc)
        self._outage = min(self._outage * 2, 30.0) * _jitter.uniform(0.8, 1.2)

    def _database_up(self) -> None:
        if not self._db_ok.is_set():
            log.warning("database is reachable again; resuming")
            self._db_ok.set()
        self._outage = 0.5

    def _retry_due(self) -> bool:
        """While the database is down, sleep until the next retry; True when it is time."""
        left = self._retry_at - time.monotonic()
        if left > 0:
            self._stop.wait(left)
            return False
        return True

    def _capacity(self) -> int:
        """Running slots plus an adaptive prefetch sized to about PREFETCH_HORIZON of work."""
        concurrency = self.settings.concurrency
        prefetch = self.settings.prefetch
        if prefetch is None:
            if self._avg_duration <= 0:
                prefetch = 0
            else:
                prefetch = min(MAX_PREFETCH, int(concurrency * PREFETCH_HORIZON / self._avg_duration))
        # Top up when half the prefetch is left: the next batch arrives while the rest still runs.
        self._low_water = prefetch // 2
        return concurrency + prefetch

    def _admit(self, rows: list[ClaimedJob]) -> list[ClaimedJob]:
        """Let the database decide which claimed runs of rate- or concurrency-limited jobs may
        start; the others went back to the queue (their attempt refunded)."""
        registry = self.app.registry
        limited = self._limited_names
        if limited is None:
            limited = self._limited_names = {name for name, d in registry.items()
                                             if d.behaviour.rate_limit or d.behaviour.concurrency_limit}
        if not limited:
            return rows
        runs: list[tuple[int, list[Limit]]] = []
        for row in rows:
            if row.name not in limited:
                continue
            definition = registry.get(row.name)
            if definition is None:
                continue
            b = definition.behaviour
            if b.rate_limit is None and b.concurrency_limit is None:
                continue
            limits = []
            if b.concurrency_limit is not None:
                key = b.concurrency_key
                if key is None:
                    group = row.name
                elif isinstance(key, str):
                    group = key
                else:
                    try:
                        args, kwargs = decode_arguments(row.payload)
                        group = safe_text(key(*args, **kwargs), 255)
                    except Exception:  # the run fails on its own when it cannot decode; no group
                        continue
                limits.append(Limit("concurrency", group, b.concurrency_limit))
            if b.rate_limit is not None:
                limits.append(Limit("rate", row.name, b.rate_limit.count, b.rate_limit.period))
            runs.append((row.id, limits))
        if not runs:
            return rows
        admitted, refused = self.store.features.admit(self.id, runs)
        if not refused:
            return rows
        self.claimed -= len(refused)
        gone = set(refused)
        return [row for row in rows if row.id not in gone]

    def _hand_out(self, rows: list[ClaimedJob]) -> None:
        with self._held_lock:
            held = self._held
            if not held.isdisjoint([row.id for row in rows]):
                # We hold these already: the database lost our earlier claim (a crash undid it) and
                # gave them to us again.  The copy we hold runs or has run; a second one must not.
                again = [row.id for row in rows if row.id in held]
                log.warning("claimed job(s) %s again while still holding them; the held run goes on alone",
                            again)
                rows = [row for row in rows if row.id not in held]
                self.claimed -= len(again)
            held.update([row.id for row in rows])
        with self._count_lock:
            self._outstanding += len(rows)
        self.claimed += len(rows)
        for row in rows:
            self._work.put(row)

    # ------------------------------------------------------------------ runner threads
    def _runner(self, slot: int) -> None:
        get, db_ok, stop, stop_now = self._work.get, self._db_ok, self._stop, self._stop_now
        try:
            while True:
                row = get()
                # Jobs usually need the database too: while it is away, start nothing new.
                while not db_ok.is_set() and not db_ok.wait(0.5):
                    if stop_now.is_set():
                        return
                if row is None or stop_now.is_set():
                    return
                if stop.is_set():  # stopping: leave it held, _shutdown gives it back unrun
                    with self._count_lock:
                        self._outstanding -= 1
                    self._wake.set()
                    continue
                self._run_one(slot, row)
        finally:
            self.store.release_thread_connection()  # a handler may have used the app's store

    def _run_one(self, slot: int, row: ClaimedJob) -> None:
        try:
            outcome = self._execute(slot, row)
        except BaseException as exc:  # noqa: B036 - a handler's SystemExit, or a fault of errands' own:
            # the thread must survive it, and the run must end in a retry or the dead letter (never
            # be given back unrun, which would refund its attempt and loop for ever).
            outcome = failure(row, exc, 0.0)
            log.error("job %s: its run failed outside the handler's own error handling: %s", row.id,
                      outcome.error_text, exc_info=exc)

        self._record_outcome(row, outcome)

    def _execute(self, slot: int, row: ClaimedJob) -> Outcome:
        timeout = row.timeout
        if not ((timeout is None or type(timeout) is float and 0.0 < timeout < _INF) and type(row.attempts) is int
                and type(row.max_attempts) is int and type(row.flags) is int):  # the usual case, checked inline
            problem = row_problem(row)
            if problem is not None:
                return Outcome(row, Result.FATAL, 0.0, "errands.BadPayload", problem)
        definition = self.app.registry.get(row.name) if type(row.name) is str else None
        is_async = definition is not None and definition.is_async
        slots = self.slots
        if slots is not None:
            if timeout is not None and is_async:
                timeout += ASYNC_HARD_GRACE
            slots.start(slot, row.id, timeout)
        try:
            if is_async:
                future = asyncio.run_coroutine_threadsafe(self._run_task(row), self._event_loop())
                self._futures[row.id] = future
                try:
                    return self._future_outcome(future, row)
                finally:
                    self._futures.pop(row.id, None)
            return run_sync(self.app, row)
        finally:
            if slots is not None:
                slots.clear(slot)

    def _record_outcome(self, row: ClaimedJob, outcome: Outcome) -> None:
        # Recorded as finished before the outstanding count drops: the heartbeat keeps
        # extending its lease through _held until the main thread has written the outcome.
        if outcome.result is Result.OK:
            if log.isEnabledFor(logging.INFO):
                self._log(outcome)
            if row.flags:  # keeps a result, counts in a batch, or others wait for it: more than a delete
                self._failed.append(outcome)
                if row.flags & FLAG_DEPENDENTS:
                    self._new_jobs.set()  # a job waiting for this one becomes ready: claim again soon
            else:
                self._succeeded.append(row)
        else:
            if isinstance(outcome.exc, StoreUnavailable):
                self._db_ok.clear()  # the handler lost the database: pause the others before they start
            self._log(outcome)
            self._failed.append(outcome)
        avg = self._avg_duration
        self._avg_duration = avg * 0.9 + outcome.duration * 0.1 if avg else outcome.duration
        with self._count_lock:
            self._outstanding -= 1
            low = self._outstanding <= self._low_water
        if low or outcome.result is not Result.OK or row.flags:
            self._wake.set()

    def _future_outcome(self, future: Any, row: ClaimedJob) -> Outcome:
        try:
            return future.result()
        except BaseException as exc:  # cancelled (by request or at shutdown), or a bug in execution itself
            if row.id in self._cancel_requested:
                return Outcome(row, Result.CANCELLED, 0.0, "errands.JobCancelled",
                               "cancelled while running (its task was cancelled)", exc)
            return failure(row, exc, 0.0)

    async def _run_task(self, row: ClaimedJob) -> Outcome:
        """An async run as a task of the event loop that cancellation can reach.  Cancelling the task
        (not the thread-safe future, which would report the run over at once) lets the handler see
        CancelledError at its next await and finish its cleanup (finally blocks, after-hooks) before
        the run is recorded as cancelled."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks[row.id] = task
        if row.id in self._cancel_requested:  # requested before the task first ran
            task.cancel()
        try:
            return await run_async(self.app, row)
        finally:
            self._tasks.pop(row.id, None)

    def _cancel_task(self, job_id: int) -> None:
        """In the event loop: cancel the task of a running async job (if it started; else it cancels itself)."""
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            with self._loop_lock:  # runner threads may meet their first async job at once
                if self._loop is None:
                    loop = asyncio.new_event_loop()
                    self._loop_thread = threading.Thread(target=loop.run_forever, name="errands-event-loop",
                                                         daemon=True)
                    self._loop_thread.start()
                    self._loop = loop
        return self._loop

    # ------------------------------------------------------------------ settling
    def _collect(self) -> None:
        succeeded, failed, stats = self._succeeded, self._failed, self._stats
        while succeeded:
            row = succeeded.popleft()
            self._to_complete.append(row.id)
            key = (row.queue, True)
            stats[key] = stats.get(key, 0) + 1
        while failed:
            outcome = failed.popleft()
            self._unsettled.append(outcome)
            key = (outcome.row.queue, outcome.result is Result.OK)
            stats[key] = stats.get(key, 0) + 1

    def _flush_stats(self, force: bool = False) -> None:
        """Add the finished runs to the per-minute stats table (the dashboard's throughput)."""
        if not self._stats or (not force and time.monotonic() < self._stats_due):
            return
        self._stats_due = time.monotonic() + STATS_EVERY
        stats, self._stats = self._stats, {}
        try:
            self.store.insights.add_stats(stats)
        except Exception as exc:  # throughput figures are not worth a retry loop, nor a worker
            log.debug("could not record throughput: %s", exc)

    def _settle(self) -> None:
        """Record finished runs: plain successes in one DELETE, the rest as they need."""
        self._collect()
        self._flush_stats()
        if not self._to_complete and not self._unsettled:
            return
        try:
            self._record()
        except StoreUnavailable as exc:
            self._database_down(exc)
            return
        self._database_up()

    def _record(self) -> None:
        """Write what finished runs came to.

        A lost database raises StoreUnavailable: the caller pauses and comes back to the same runs.
        Any other refusal costs only the runs concerned: a batch the database refuses is written
        one run at a time, and a run whose own write is refused goes to the dead letter saying so."""
        if self._to_complete:
            try:
                self.store.jobs.complete(self.id, self._to_complete)
            except StoreUnavailable:
                raise
            except Exception as exc:
                log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                          len(self._to_complete), safe_text(exc, 300))
                while self._to_complete:
                    job_id = self._to_complete[0]
                    self._write_one(job_id, "success", lambda j=job_id: self.store.jobs.complete(self.id, [j]))
                    self._to_complete.pop(0)
                    self._forget([job_id])
                    self.jobs_done += 1
            else:
                self._forget(self._to_complete)
                self.jobs_done += len(self._to_complete)
                self._to_complete = []
        kept = [o for o in self._unsettled if o.result is Result.OK]
        if kept:
            try:
                self.store.features.finish(self.id, [self._finished(o) for o in kept])
            except StoreUnavailable:
                raise
            except Exception as exc:
                log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                          len(kept), safe_text(exc, 300))
                for outcome in kept:
                    self._write_one(outcome.row.id, "success",
                                    lambda o=outcome: self.store.features.finish(self.id, [self._finished(o)]))
                    self._unsettled.remove(outcome)
                    self._forget([outcome.row.id])
                    self.jobs_done += 1
            else:
                self._forget([o.row.id for o in kept])
                self.jobs_done += len(kept)
                self._unsettled = [o for o in self._unsettled if o.result is not Result.OK]
        while self._unsettled:
            outcome = self._unsettled[0]
            self._write_one(outcome.row.id, "outcome", lambda o=outcome: self._settle_failure(o))
            self._unsettled.pop(0)
            self._forget([outcome.row.id])
            self._cancel_requested.discard(outcome.row.id)
            self.jobs_done += 1

    def _write_one(self, job_id: int, what: str, write: Any) -> None:
        """``write()`` the outcome of one run; if the database refuses it for a reason of that row,
        move the job to the dead letter with the reason (errands.SettleError).  If even that is
        refused, its lease lapses: recovery counts the attempt taken at claim, so it cannot loop."""
        try:
            write()
            return
        except StoreUnavailable:
            raise
        except Exception as exc:
            message = f"the worker could not record this run's {what}: {safe_text(exc, 500)}"
            log.error("job %s: %s", job_id, message, exc_info=exc)
        try:
            self.store.jobs.bury(self.id, job_id, "errands.SettleError", message)
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("job %s: could not move it to the dead letter either (%s); its lease will lapse",
                      job_id, safe_text(exc, 300))

    def _finished(self, outcome: Outcome) -> Finished:
        row = outcome.row
        definition = self.app.registry.get(row.name)
        ttl = (definition.behaviour.result_ttl if definition else None) or self.app.result_ttl
        result = None
        if row.flags & FLAG_RESULT:
            try:
                result = encode_result(outcome.value)
            except (TypeError, ValueError) as exc:
                log.warning("job %d %s returned a value JSON cannot store (%s); its result is kept as null",
                            row.id, row.name, exc)
        return Finished(row.id, row.flags, row.batch_id, result, ttl)

    def _forget(self, ids: list[int]) -> None:
        with self._held_lock:
            self._held.difference_update(ids)

    def _settle_failure(self, outcome: Outcome) -> None:
        row = outcome.row
        definition = self.app.registry.get(row.name)
        if outcome.result is Result.CANCELLED:
            if self.store.features.settle_cancelled(self.id, row.id, self.app.result_ttl, outcome.error_message):
                log.info("job %d %s was cancelled while running", row.id, row.name)
            return
        delay = decide(row.attempts, row.max_attempts, definition.backoff if definition else None,
                       retryable=outcome.result is Result.ERROR and definition is not None,
                       requested_delay=outcome.retry_delay)
        if delay is not None and definition is not None:
            if self.store.jobs.retry_later(self.id, row.id, delay, outcome.error_text):
                chain = chain_of(self.app.hooks, definition.behaviour.hooks)
                if chain:
                    call_on_retry(chain, context_of(row, self.app), outcome.error_type, outcome.error_message, delay)
                log.info("job %d %s will retry in %.1fs (attempt %d of %d failed)", row.id, row.name, delay,
                         row.attempts, row.max_attempts, extra={"job_id": row.id, "job_name": row.name,
                                                                "queue": row.queue, "retry_in": delay})
            return
        if self.store.jobs.bury(self.id, row.id, outcome.error_type, outcome.error_message):
            log.warning("job %d %s moved to the dead letter after %d attempt(s): %s", row.id, row.name,
                        row.attempts, outcome.error_text, extra={"job_id": row.id, "job_name": row.name,
                                                                 "queue": row.queue, "attempt": row.attempts})
            chain = chain_of(self.app.hooks, definition.behaviour.hooks if definition else None)
            if chain:
                call_on_dead(chain, context_of(row, self.app), outcome.error_type, outcome.error_message)

    def _log(self, outcome: Outcome) -> None:
        row = outcome.row
        # The extra fields become keys of JSON log lines (--log-format json).
        fields = {"job_id": row.id, "job_name": row.name, "queue": row.queue, "attempt": row.attempts,
                  "duration_ms": round(outcome.duration * 1000, 3)}
        if outcome.result is Result.OK:
            log.info("job %d %s done in %.1f ms", row.id, row.name, outcome.duration * 1000, extra=fields)
        else:
            log.warning("job %d %s(%s) failed after %.1f ms (attempt %d of %d): %s", row.id, row.name,
                        describe_arguments(row, 80), outcome.duration * 1000, row.attempts, row.max_attempts,
                        outcome.error_text, exc_info=outcome.exc if outcome.result is Result.ERROR else None,
                        extra=fields)

    # ------------------------------------------------------------------ stopping
    def _unstarted(self) -> list[int]:
        """Take back buffered jobs no runner has started (they are released on shutdown)."""
        ids: list[int] = []
        while True:
            try:
                row = self._work.get_nowait()
            except queue_mod.Empty:
                return ids
            if row is not None:
                ids.append(row.id)
                with self._count_lock:
                    self._outstanding -= 1

    def _drain(self) -> None:
        """Graceful stop: give back unstarted jobs, let running ones finish within the shutdown timeout."""
        unstarted = self._unstarted()
        if unstarted:
            try:
                self.store.jobs.release(self.id, unstarted)
                self._forget(unstarted)
            except StoreError as exc:
                log.warning("could not give back %d buffered job(s) now (%s)", len(unstarted), exc)
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while self._outstanding > 0 and not self._stop_now.is_set() and time.monotonic() < deadline:
            self._wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self._wake.clear()
            self._settle()
        self._settle()

    def _shutdown(self) -> None:
        self._stop.set()
        self._stop_now.set()  # runner threads still waiting for work leave at once
        for _ in self._threads:
            self._work.put(None)
        self._collect()
        for attempt in range(3):
            try:
                self._record()
                self._flush_stats(force=True)
                leftover = self.held_ids
                if leftover:
                    n = self.store.jobs.release(self.id, leftover)
                    log.warning("released %d unfinished job(s) for another worker: %s", n, leftover)
                self.store.workers.unregister(self.id)
                break
            except StoreError as exc:
                log.warning("could not clean up on shutdown (%s); leases will expire instead", exc)
                time.sleep(0.5 * (attempt + 1))
        if self._loop is not None:
            self._stop_event_loop(self._loop)

    def _stop_event_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel the tasks still running (given back above) and let them finish their cleanup, then
        stop the loop: a loop stopped with pending tasks destroys them mid-run."""
        try:
            asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(timeout=self.settings.shutdown_timeout)
        except Exception as exc:  # a task that ignores cancellation, or a loop already gone
            log.warning("async jobs did not finish their cancellation: %s", safe_text(exc, 200))
        loop.call_soon_threadsafe(loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=self.settings.shutdown_timeout)
        if not loop.is_running():
            loop.close()

    # ------------------------------------------------------------------ background
    def _register(self) -> None:
        delay = 0.5
        while True:
            try:
                self.store.workers.register(self.id, socket.gethostname(), os.getpid(), self.settings.queues,
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
        next_rescue = time.monotonic() + _jitter.uniform(0, rescue_every)
        next_beat = time.monotonic() + interval * _jitter.uniform(0.9, 1.0)
        next_prune = time.monotonic() + _jitter.uniform(0, PRUNE_EVERY)
        while not self._stop_now.wait(min(CANCEL_CHECK_EVERY, interval) * _jitter.uniform(0.9, 1.0)):
            if self.parent_pid is not None and os.getppid() != self.parent_pid:
                os._exit(70)  # the supervisor is gone; let leases expire rather than run unsupervised
            if self._futures:
                self._cancel_async_runs()
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + interval * _jitter.uniform(0.9, 1.0)
            try:
                # Finished runs whose outcome is not recorded yet (the database was down) are still
                # ours too: if their leases lapsed, recover_stale below would hand them out again.
                held = self.held_ids
                if held:
                    self.store.jobs.extend_leases(self.id, held, self.lease)
                self.store.workers.heartbeat(self.id, self.jobs_done)
                if time.monotonic() >= next_rescue:
                    next_rescue = time.monotonic() + rescue_every
                    report = self.store.jobs.recover_stale()
                    if report.released or report.buried:
                        log.warning("recovered stale jobs: released %s, buried %s", report.released,
                                    report.buried)
                    self.store.workers.prune(older_than=forget_worker_after(self.lease))
                    unblocked = self.store.features.sweep_blocked()
                    if unblocked:
                        log.warning("unblocked %d job(s) whose dependency had finished", unblocked)
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_EVERY
                    self.store.features.prune(self.app.failed_ttl)
                    self.store.insights.prune_stats()
                    self.store.accounts.prune()
            except StoreError as exc:
                log.warning("heartbeat failed: %s", exc)
            except Exception:  # never let this thread die: the leases of running jobs would lapse
                log.exception("heartbeat failed")
            if self._stop.is_set() and not self._held:
                return

    def _cancel_async_runs(self) -> None:
        """Cancel the tasks of running async jobs whose cancellation was requested."""
        try:
            requested = set(self.store.features.cancel_requests(self.id))
        except Exception:  # the next beat asks again
            return
        for job_id in requested & set(self._futures):
            if job_id not in self._cancel_requested:
                self._cancel_requested.add(job_id)
                if self._loop is not None:
                    log.info("job %d: cancellation requested; cancelling its task", job_id)
                    self._loop.call_soon_threadsafe(self._cancel_task, job_id)

    def _listen_loop(self) -> None:
        """Wake the claim loop as soon as the database signals new jobs (idle pickup latency)."""
        listener: Listener | None = None
        delay = 0.5
        try:
            while not self._stop.is_set():
                try:
                    if listener is None:
                        listener = self.store.listener()
                        if listener is None:
                            return
                        delay = 0.5
                    if listener.wait(0.5):
                        self._new_jobs.set()
                        self._wake.set()
                except Exception as exc:  # StoreError, or a fault of its own: poll meanwhile, never die
                    log.debug("wake-up listener unavailable (%s); polling meanwhile", exc)
                    if listener is not None:
                        try:
                            listener.close()
                        except Exception:  # already broken
                            pass
                        listener = None
                    self._stop.wait(delay)
                    delay = min(delay * 2, 30.0)
        finally:
            if listener is not None:
                listener.close()

