"""Settling: writing what finished runs came to, in batches.

Runner threads hand each outcome to :meth:`Settling.record` (the per-job part: an append to a
deque, no statement); the main thread later writes many at once.  Each outcome is decided by
:func:`errands.core.endings.decide` from its job's policy (completed, retry at, snoozed, buried,
cancelled) and applied by ``store.endings``: all plain successes in one DELETE, successes that keep
a result or count in a batch in one transaction, each other ending in its own; then the
``on_retry`` / ``on_dead`` hooks hear of the endings that committed
(:func:`errands.core.endings.announce`).  A run's log records (``RunOutcome.logs``) are written
with its ending, in its transaction; a plain success's are dropped (its job keeps no record to
show them with).  A lost database pauses the worker and the same outcomes
are written when it is back; a write the database refuses costs only the runs concerned.  A success is
never buried for it: its record is offered again with growing pauses, meanwhile its lease kept and
the other runs settled, and, if the whole record keeps being refused, recorded with less of it
(:func:`errands.core.endings.after_refusals`).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.endings import (
    SUCCESS_RECORD_TRIES,
    Buried,
    Completed,
    HeldBack,
    Result,
    Resumed,
    RetryAt,
    RunOutcome,
    Settlement,
    Snoozed,
    after_refusals,
    announce,
    decide,
    record_again_in,
)
from ..core.errors import StoreUnavailable
from ..core.payload import safe_text
from ..core.rows import FLAG_DEADLINE, FLAG_DEPENDENTS, ClaimedJob
from ..core.runlogs import RunLog
from .execution import describe_arguments
from .state import jitter

if TYPE_CHECKING:
    from .host import RunHost
    from .state import WorkerState

log = logging.getLogger("errands.worker")

_NOT_ENDED = (Result.SNOOZED, Result.UNKNOWN, Result.INTERRUPTED)
"""Outcomes that count neither as a success nor as a failure in the throughput figures."""
SETTLE_EVERY = 0.02
"""Longest delay before finished runs are recorded while jobs keep coming."""
STATS_EVERY = 5.0
"""Seconds between additions to the per-minute stats table (one small upsert per queue)."""


@dataclass
class RefusedSuccess:
    """A success whose recording the database refused, waiting to be offered again.  Its job id stays
    among the held ones, so the heartbeat keeps extending its lease: no other worker runs it again."""

    run: ClaimedJob | int
    """The claimed row (an int: the id of a plain success, which settling keeps no row of)."""
    settlement: Completed | None
    """Its whole record (None: a plain success, one DELETE)."""
    logs: RunLog | None
    refusals: int
    due: float
    """Monotonic time of the next offer."""

    @property
    def job_id(self) -> int:
        return self.run if isinstance(self.run, int) else self.run.id

    @property
    def exhausted(self) -> bool:
        """Refused down to its plain success as often as a whole record is offered: still offered again
        (every :data:`~errands.core.endings.RECORD_AGAIN_CAP` seconds), but a burst worker no longer
        waits for it (it leaves, and the job runs again)."""
        return self.refusals > SUCCESS_RECORD_TRIES + 1


class Settling:
    """Finished runs on their way to the database (see the module's docstring)."""

    def __init__(self, app: RunHost, state: WorkerState, owner: str,
                 slots_freed: Callable[[Mapping[str, int]], None] | None = None) -> None:
        self.app = app
        self.store = app.store
        self.state = state
        self.owner = owner
        # The shared objects the per-job path touches, kept as attributes of this object.
        self._count_lock = state.count_lock
        self._wake = state.wake
        self._new_jobs = state.new_jobs
        self._db_ok = state.db_ok
        self._succeeded: collections.deque[ClaimedJob] = collections.deque()
        self._failed: collections.deque[RunOutcome] = collections.deque()
        """Runs that end other than by a plain delete: failures, cancellations, and successes
        that keep a result or count in a batch."""
        self._stats: dict[tuple[str, bool], int] = {}
        """Finished runs per (queue, succeeded) since the last flush to the stats table."""
        self._stats_due = time.monotonic() + STATS_EVERY
        self.to_complete: list[int] = []
        """Plain successes collected by the main thread, for the next DELETE."""
        self.unsettled: list[RunOutcome] = []
        """The other outcomes collected by the main thread, not written yet."""
        self.freed: dict[str, int] = {}
        """Runs of each concurrency group among the collected outcomes: once these are written,
        their slots are free and ``slots_freed`` hears of them (admission wakes the group's waiters)."""
        self._slots_freed = slots_freed
        self._held_names: set[str] = set()
        """Names of held-back jobs this worker has warned about (once each)."""
        self.refused: dict[int, RefusedSuccess] = {}
        """Successes whose recording the database refused, by job id, offered again when due."""

    # ------------------------------------------------------------------ runner threads
    def record(self, row: ClaimedJob, outcome: RunOutcome) -> None:
        """Take the outcome of one run (in its runner thread); wake the main thread only when
        the buffer runs low or the run needs more than a plain delete."""
        # Recorded as finished before the outstanding count drops: the heartbeat keeps
        # extending its lease through the held ids until the main thread has written the outcome.
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
        state = self.state
        avg = state.avg_duration
        state.avg_duration = avg * 0.9 + outcome.duration * 0.1 if avg else outcome.duration
        with self._count_lock:
            state.outstanding -= 1
            low = state.outstanding <= state.low_water
        if low or outcome.result is not Result.OK or row.flags or row.concurrency_key is not None:
            self._wake.set()  # (the end of a group's run frees a slot others wait for: record it now)

    # ------------------------------------------------------------------ main thread
    def unrecorded(self) -> bool:
        """Finished runs whose outcome is not written yet (recording may enqueue more jobs), refused
        successes among them until they are :attr:`RefusedSuccess.exhausted`."""
        return bool(self._succeeded or self._failed or self.to_complete or self.unsettled
                    or any(not r.exhausted for r in self.refused.values()))

    def refused_due_in(self) -> float | None:
        """Seconds before the next refused success is due to be offered again (None: none waits)."""
        if not self.refused:
            return None
        return max(0.0, min(r.due for r in self.refused.values()) - time.monotonic())

    def collect(self) -> None:
        """Move the runners' outcomes to the main thread's lists, counting them for the stats."""
        succeeded, failed, stats = self._succeeded, self._failed, self._stats
        to_complete, unsettled, freed = self.to_complete, self.unsettled, self.freed
        while succeeded:
            row = succeeded.popleft()
            to_complete.append(row.id)
            key = (row.queue, True)
            stats[key] = stats.get(key, 0) + 1
            if row.concurrency_key is not None:
                freed[row.concurrency_key] = freed.get(row.concurrency_key, 0) + 1
        while failed:
            outcome = failed.popleft()
            unsettled.append(outcome)
            group = outcome.row.concurrency_key
            if group is not None:
                freed[group] = freed.get(group, 0) + 1
            if outcome.result not in _NOT_ENDED:  # a snooze, a held-back run: neither success nor failure
                key = (outcome.row.queue, outcome.result is Result.OK)
                stats[key] = stats.get(key, 0) + 1

    def flush_stats(self, force: bool = False) -> None:
        """Add the finished runs to the per-minute stats table (the dashboard's throughput)."""
        if not self._stats or (not force and time.monotonic() < self._stats_due):
            return
        self._stats_due = time.monotonic() + STATS_EVERY
        stats, self._stats = self._stats, {}
        try:
            self.store.insights.add_stats(stats)
        except Exception as exc:  # throughput figures are not worth a retry loop, nor a worker
            log.debug("could not record throughput: %s", exc)

    def settle(self) -> None:
        """Record finished runs: plain successes in one DELETE, the rest as they need."""
        self.collect()
        self.flush_stats()
        if not self.to_complete and not self.unsettled and not self._refused_due():
            return
        try:
            self.write()
        except StoreUnavailable as exc:
            self.state.database_down(exc)
            return
        self.state.database_up()
        self.announce_freed()

    def announce_freed(self) -> None:
        """Tell admission which groups' slots the written outcomes freed (call after a write)."""
        if self.freed:
            freed, self.freed = self.freed, {}
            if self._slots_freed is not None:
                self._slots_freed(freed)

    def write(self, final: bool = False) -> None:
        """Write what finished runs came to.

        A lost database raises StoreUnavailable: the caller pauses and comes back to the same runs.
        Any other refusal costs only the runs concerned: a batch the database refuses is written
        one run at a time; a failed run whose own write is refused goes to the dead letter saying so,
        and a success whose write is refused waits in :attr:`refused` to be offered again (never the
        dead letter).  ``final``: the worker is leaving, so each refused success is offered at once,
        with less of its record at each refusal, down to a plain success."""
        if not final:
            self._write_refused(False)
        self._write_runs()
        if final:
            self._write_refused(True)

    def _write_runs(self) -> None:
        """Write the runs collected since the last write (see :meth:`write`)."""
        if self.to_complete:
            self._write_completed()
        if not self.unsettled:
            return
        outcomes = self._with_deadlines(self.unsettled)
        decided = [(o, decide(o, self.app.policies.policy_of(o.row.name))) for o in outcomes]
        if any(isinstance(s, Completed) for _, s in decided):
            self._write_successes([(o, s) for o, s in decided if isinstance(s, Completed)])
            decided = [(o, s) for o, s in decided if not isinstance(s, Completed)]
        state = self.state
        self.unsettled = [o for o, _ in decided]
        while decided:
            outcome, settlement = decided[0]
            self._write_one(outcome.row, "outcome", settlement, outcome.logs)
            decided.pop(0)
            self.unsettled.pop(0)
            state.forget([outcome.row.id])
            state.cancel_requested.discard(outcome.row.id)
            state.jobs_done += 1

    def _with_deadlines(self, outcomes: list[RunOutcome]) -> list[RunOutcome]:
        """The failed runs of jobs with a deadline, told how long it still is (one read for them all;
        the claim returns no times): :func:`decide` buries a retry that would start after it."""
        flagged = [o.row.id for o in outcomes if o.row.flags & FLAG_DEADLINE and o.result is not Result.OK]
        if not flagged:
            return outcomes
        try:
            left = self.store.endings.deadlines(flagged)
        except StoreUnavailable:
            raise
        except Exception as exc:  # decided without it: the claim still refuses a retry past the deadline
            log.error("could not read the deadlines of %d failed run(s): %s", len(flagged), safe_text(exc, 300))
            return outcomes
        return [o._replace(deadline_in=left[o.row.id]) if o.row.id in left else o for o in outcomes]

    def _write_completed(self) -> None:
        """The plain successes: one DELETE, or one per run if the database refuses the batch."""
        state, owner = self.state, self.owner
        try:
            ours = self.store.endings.complete(owner, self.to_complete)
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                      len(self.to_complete), safe_text(exc, 300))
            while self.to_complete:
                job_id = self.to_complete[0]
                recorded = self._write_success(job_id, None, None)
                self.to_complete.pop(0)
                if recorded:
                    state.forget([job_id])
                    state.jobs_done += 1
        else:
            if ours < len(self.to_complete):
                # The lease lapsed (a partition, a stall) and another worker took these jobs over:
                # the database refused this settle, as it must.  The run itself cannot be undone.
                log.warning("%d finished run(s) were no longer this worker's (their lease lapsed and the "
                            "jobs were handed to another worker); the database refused to record them",
                            len(self.to_complete) - ours)
            state.forget(self.to_complete)
            state.jobs_done += len(self.to_complete)
            self.to_complete = []

    def _write_successes(self, done: list[tuple[RunOutcome, Settlement]]) -> None:
        """The successes that keep a result, count in a batch or release dependants: one transaction."""
        state, owner = self.state, self.owner
        try:
            self.store.endings.apply(owner, [s for _, s in done], [o.logs for o, _ in done if o.logs])
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                      len(done), safe_text(exc, 300))
            for outcome, settlement in done:
                assert isinstance(settlement, Completed)
                recorded = self._write_success(outcome.row, settlement, outcome.logs)
                self.unsettled.remove(outcome)  # one at a time: a lost database stops here, the rest wait
                if recorded:
                    state.forget([outcome.row.id])
                    state.jobs_done += 1
            return
        for outcome, settlement in done:
            if isinstance(settlement, Completed) and settlement.unstorable is not None:
                log.warning("job %d %s returned a value errands cannot store (%s); its result is kept as null",
                            outcome.row.id, outcome.row.name, settlement.unstorable)
        state.forget([o.row.id for o, _ in done])
        state.jobs_done += len(done)
        finished = {o.row.id for o, _ in done}
        self.unsettled = [o for o in self.unsettled if o.row.id not in finished]

    # ------------------------------------------------------------------ refused successes
    def _write_success(self, run: ClaimedJob | int, settlement: Completed | None, logs: RunLog | None) -> bool:
        """Record one success (``settlement`` None: a plain one); whether it was.  A refusal keeps it in
        :attr:`refused`, to be offered again after a pause, its job still held (its lease kept)."""
        try:
            self._record_success(run, settlement, logs)
            return True
        except StoreUnavailable:
            raise
        except Exception as exc:
            job_id = run if isinstance(run, int) else run.id
            # (the traceback once per wave of refusals: a refused batch of a thousand would print a thousand)
            log.error("job %s succeeded, but the database refused to record it (%s); its record is offered again "
                      "in %.1fs, its lease kept meanwhile: a success is never moved to the dead letter", job_id,
                      safe_text(exc, 500), record_again_in(1), exc_info=None if self.refused else exc)
            self.refused[job_id] = RefusedSuccess(run, settlement, logs, 1, time.monotonic() + self._pause(1))
            return False

    def _record_success(self, run: ClaimedJob | int, settlement: Completed | None, logs: RunLog | None) -> None:
        """Write one success: its whole record, or (``settlement`` None) the plain DELETE."""
        job_id = run if isinstance(run, int) else run.id
        if settlement is None:
            self.store.endings.complete(self.owner, [job_id])
            return
        for written in self.store.endings.apply(self.owner, [settlement], (logs,) if logs else ()):
            if not isinstance(run, int):
                self._settled(run, written)

    def _refused_due(self) -> bool:
        return bool(self.refused) and min(r.due for r in self.refused.values()) <= time.monotonic()

    @staticmethod
    def _pause(refusals: int) -> float:
        return record_again_in(refusals) * jitter.uniform(0.8, 1.2)

    def _write_refused(self, final: bool) -> None:
        """Offer again each refused success that is due (``final``: every one, down to a plain success)."""
        now = time.monotonic()
        for entry in [r for r in self.refused.values() if final or r.due <= now]:
            while True:
                offered, _ = after_refusals(entry.settlement, entry.refusals)
                recorded = self._offer(entry)
                if recorded or not final or offered is None:
                    break
                entry.refusals = max(entry.refusals, SUCCESS_RECORD_TRIES)  # leaving: less of it at once
            if final and not recorded:
                log.error("job %s: the worker is leaving and the database refused even a plain record of its "
                          "success; it goes back to the queue and will run again", entry.job_id)

    def _offer(self, entry: RefusedSuccess) -> bool:
        """Offer a refused success's record again, with less of it after enough refusals
        (:func:`~errands.core.endings.after_refusals`); whether it is recorded now."""
        settlement, whole = after_refusals(entry.settlement, entry.refusals)
        try:
            self._record_success(entry.run if settlement is not None else entry.job_id, settlement,
                                 entry.logs if whole else None)
        except StoreUnavailable:
            raise
        except Exception as exc:
            entry.refusals += 1
            entry.due = time.monotonic() + self._pause(entry.refusals)
            log.warning("job %s: the database refused again to record its success (%d refusals; %s); offered "
                        "again in %.1fs%s", entry.job_id, entry.refusals, safe_text(exc, 300),
                        record_again_in(entry.refusals), "" if settlement is None else
                        ", with less of its record if refused again" if entry.refusals >= SUCCESS_RECORD_TRIES else "")
            return False
        del self.refused[entry.job_id]
        self.state.forget([entry.job_id])
        self.state.jobs_done += 1
        if not whole:
            dropped = ("its result, its batch's count and its dependants' release (its dependants are released "
                       "by the worker's sweep)" if settlement is None else "its result and run logs")
            log.warning("job %s: recorded as a success without %s, after the database refused to record it "
                        "%d times", entry.job_id, dropped, entry.refusals)
        return True

    # ------------------------------------------------------------------ one run
    def _write_one(self, run: ClaimedJob, what: str, settlement: Settlement, logs: RunLog | None = None) -> None:
        """Apply the ending of one run that did not succeed (failed, cancelled, snoozed...), with its log
        records; if the database refuses it for a reason of that row, move the job to the dead letter with
        the reason (errands.SettleError), without them.  (A success never comes here: it is never buried
        for a refused write, see :meth:`_write_success`.)  If even that is refused, its lease lapses:
        recovery counts the attempt taken at claim, so it cannot loop."""
        try:
            for written in self.store.endings.apply(self.owner, [settlement], (logs,) if logs else ()):
                self._settled(run, written)
            return
        except StoreUnavailable:
            raise
        except Exception as exc:
            message = f"the worker could not record this run's {what}: {safe_text(exc, 500)}"
            log.error("job %s: %s", run.id, message, exc_info=exc)
        buried = Buried(run.id, run.attempts, "errands.SettleError", message)
        try:
            if self.store.endings.apply(self.owner, [buried]):
                self._settled(run, buried)
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("job %s: could not move it to the dead letter either (%s); its lease will lapse",
                      run.id, safe_text(exc, 300))

    def _settled(self, row: ClaimedJob, settlement: Settlement) -> None:
        """Log an ending that committed and tell the hooks (:func:`errands.core.endings.announce`)."""
        fields = {"job_id": row.id, "job_name": row.name, "queue": row.queue}
        if isinstance(settlement, RetryAt):
            log.info("job %d %s will retry in %.1fs (attempt %d of %d failed)", row.id, row.name, settlement.delay,
                     row.attempts, row.max_attempts, extra={**fields, "retry_in": settlement.delay})
        elif isinstance(settlement, Snoozed):
            log.info("job %d %s snoozed: runs again in %.1fs", row.id, row.name, settlement.delay,
                     extra={**fields, "retry_in": settlement.delay})
        elif isinstance(settlement, Resumed):
            log.info("job %d %s stopped at its checkpoint and was given back (attempt refunded, resumption %d)",
                     row.id, row.name, row.resumptions + 1, extra=fields)
        elif isinstance(settlement, Buried):
            log.warning("job %d %s moved to the dead letter after %d attempt(s): %s: %s", row.id, row.name,
                        row.attempts, settlement.error_type, settlement.error_message,
                        extra={**fields, "attempt": row.attempts})
        elif isinstance(settlement, HeldBack):
            self._held_back(row, settlement)
        elif not isinstance(settlement, Completed):
            log.info("job %d %s was cancelled while running", row.id, row.name)
        announce(self.app, row, settlement)

    def _held_back(self, row: ClaimedJob, settlement: HeldBack) -> None:
        """Say once per name (per worker) that jobs of a name this worker does not register are held
        back, and which names it does register: the usual cause is a rolling deploy (the new code's
        workers take them) or an app loaded under another module path than the one that enqueued."""
        if row.name in self._held_names:
            return
        self._held_names.add(row.name)
        names = sorted(self.app.registry)
        known = (", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")) or "none"
        log.warning("job %d %s: no job of this worker's app has this name; it goes back to the queue (attempt "
                    "refunded) every %.0fs for a worker that registers it, for up to %.0fs after its enqueue, "
                    "then to the dead letter. This worker registers: %s", row.id, row.name, settlement.delay,
                    settlement.grace, known, extra={"job_id": row.id, "job_name": row.name, "queue": row.queue})

    def _log(self, outcome: RunOutcome) -> None:
        row = outcome.row
        # The extra fields become keys of JSON log lines (--log-format json).
        fields = {"job_id": row.id, "job_name": row.name, "queue": row.queue, "attempt": row.attempts,
                  "duration_ms": round(outcome.duration * 1000, 3)}
        if outcome.result is Result.OK:
            log.info("job %d %s done in %.1f ms", row.id, row.name, outcome.duration * 1000, extra=fields)
        elif outcome.result is Result.SNOOZED:
            log.info("job %d %s snoozed after %.1f ms: %s", row.id, row.name, outcome.duration * 1000,
                     outcome.error_message, extra=fields)
        elif outcome.result is Result.INTERRUPTED:
            log.info("job %d %s stopped at a checkpoint after %.1f ms: %s", row.id, row.name,
                     outcome.duration * 1000, outcome.error_message, extra=fields)
        elif outcome.result is Result.UNKNOWN:  # said once per name when it is held back (_held_back)
            log.debug("job %d %s: %s", row.id, row.name, outcome.error_text, extra=fields)
        else:
            log.warning("job %d %s(%s) failed after %.1f ms (attempt %d of %d): %s", row.id, row.name,
                        describe_arguments(row, 80), outcome.duration * 1000, row.attempts, row.max_attempts,
                        outcome.error_text, exc_info=outcome.exc if outcome.result is Result.ERROR else None,
                        extra=fields)
