"""Settling: writing what finished runs came to, in batches.

Runner threads hand each outcome to :meth:`Settling.record` (the per-job part: an append to a
deque, no statement); the main thread later writes many at once: all plain successes in one
DELETE, successes that keep a result or count in a batch in one ``finish``, and each failure
through the retry policy (:func:`errands.core.retry.decide`: retry later, or the dead letter).
A lost database pauses the worker and the same outcomes are written when it is back; a write
the database refuses costs only the runs concerned.
"""

from __future__ import annotations

import collections
import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..core.context import context_of
from ..core.errors import BadPayload, StoreUnavailable
from ..core.hooks import call_on_dead, call_on_retry, chain_of
from ..core.payload import encode_result, safe_text
from ..core.retry import DEFAULT_POLICY, decide
from ..core.rows import FLAG_DEPENDENTS, FLAG_RESULT, FLAG_WORKFLOW, ClaimedJob, FailedJob
from ..store.features import Finished
from ..store.steps import Failure
from .execution import Outcome, Result, describe_arguments

if TYPE_CHECKING:
    from .host import RunHost
    from .state import WorkerState

log = logging.getLogger("errands.worker")

SETTLE_EVERY = 0.02
"""Longest delay before finished runs are recorded while jobs keep coming."""
STATS_EVERY = 5.0
"""Seconds between additions to the per-minute stats table (one small upsert per queue)."""


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
        self._failed: collections.deque[Outcome] = collections.deque()
        """Runs that end other than by a plain delete: failures, cancellations, and successes
        that keep a result or count in a batch."""
        self._stats: dict[tuple[str, bool], int] = {}
        """Finished runs per (queue, succeeded) since the last flush to the stats table."""
        self._stats_due = time.monotonic() + STATS_EVERY
        self.to_complete: list[int] = []
        """Plain successes collected by the main thread, for the next DELETE."""
        self.unsettled: list[Outcome] = []
        """The other outcomes collected by the main thread, not written yet."""
        self.freed: dict[str, int] = {}
        """Runs of each concurrency group among the collected outcomes: once these are written,
        their slots are free and ``slots_freed`` hears of them (admission wakes the group's waiters)."""
        self._slots_freed = slots_freed

    # ------------------------------------------------------------------ runner threads
    def record(self, row: ClaimedJob, outcome: Outcome) -> None:
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
        """Finished runs whose outcome is not written yet (recording may enqueue more jobs)."""
        return bool(self._succeeded or self._failed or self.to_complete or self.unsettled)

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
            if outcome.result is not Result.SNOOZED:  # a snooze is neither a success nor a failure
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
        if not self.to_complete and not self.unsettled:
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

    def write(self) -> None:
        """Write what finished runs came to.

        A lost database raises StoreUnavailable: the caller pauses and comes back to the same runs.
        Any other refusal costs only the runs concerned: a batch the database refuses is written
        one run at a time, and a run whose own write is refused goes to the dead letter saying so."""
        if self.to_complete:
            self._write_completed()
        self._refuse_unstorable_results()
        if any(o.result is Result.OK for o in self.unsettled):
            self._write_finished()
        state = self.state
        unsettled = self.unsettled
        while unsettled:
            outcome = unsettled[0]
            self._write_one(outcome.row.id, "outcome", lambda o=outcome: self._settle_failure(o))
            unsettled.pop(0)
            state.forget([outcome.row.id])
            state.cancel_requested.discard(outcome.row.id)
            state.jobs_done += 1

    def _refuse_unstorable_results(self) -> None:
        """A workflow step whose return value JSON cannot hold goes to the dead letter: the steps
        after it would otherwise receive null in its place, silently."""
        for i, outcome in enumerate(self.unsettled):
            if outcome.result is Result.OK and outcome.row.flags & FLAG_WORKFLOW:
                try:
                    encode_result(outcome.value)
                except (TypeError, ValueError) as exc:
                    self.unsettled[i] = outcome._replace(
                        result=Result.FATAL, error_type="errands.ResultNotJSON",
                        error_message=safe_text("a workflow step must return what errands can store (JSON values, "
                                                f"datetime, date, UUID, Decimal): {exc}", 500))

    def _write_completed(self) -> None:
        """The plain successes: one DELETE, or one per run if the database refuses the batch."""
        state, owner = self.state, self.owner
        try:
            ours = self.store.jobs.complete(owner, self.to_complete)
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                      len(self.to_complete), safe_text(exc, 300))
            while self.to_complete:
                job_id = self.to_complete[0]
                self._write_one(job_id, "success", lambda j=job_id: self.store.jobs.complete(owner, [j]))
                self.to_complete.pop(0)
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

    def _write_finished(self) -> None:
        """The successes that keep a result, count in a batch or release dependants: one ``finish``."""
        state, owner = self.state, self.owner
        kept = [o for o in self.unsettled if o.result is Result.OK]
        try:
            self.store.features.finish(owner, [self._finished(o) for o in kept])
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.error("could not record %d finished run(s) at once (%s); recording them one by one",
                      len(kept), safe_text(exc, 300))
            for outcome in kept:
                self._write_one(outcome.row.id, "success",
                                lambda o=outcome: self.store.features.finish(owner, [self._finished(o)]))
                self.unsettled.remove(outcome)
                state.forget([outcome.row.id])
                state.jobs_done += 1
        else:
            state.forget([o.row.id for o in kept])
            state.jobs_done += len(kept)
            self.unsettled = [o for o in self.unsettled if o.result is not Result.OK]

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
            self.store.jobs.bury(self.owner, job_id, "errands.SettleError", message)
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
                log.warning("job %d %s returned a value errands cannot store (%s); its result is kept as null",
                            row.id, row.name, exc)
        return Finished(row.id, row.flags, row.batch_id, result, ttl)

    def _settle_failure(self, outcome: Outcome) -> None:
        """A run that did not succeed: recorded as cancelled, snoozed, retried later or buried, as the
        retry policy decides from its attempts, its job's backoff and policy, and the failure."""
        row = outcome.row
        app, owner = self.app, self.owner
        definition = app.registry.get(row.name)
        if outcome.result is Result.CANCELLED:
            if self.store.features.settle_cancelled(owner, row.id, app.result_ttl, outcome.error_message):
                log.info("job %d %s was cancelled while running", row.id, row.name)
            return
        if outcome.result is Result.SNOOZED and definition is not None:
            self._settle_snooze(outcome, definition)
            return
        delay = decide(row.attempts, row.max_attempts, definition.backoff if definition else None,
                       retryable=outcome.result is Result.ERROR and definition is not None,
                       requested_delay=outcome.retry_delay, error=outcome.exc,
                       policy=definition.behaviour.policy if definition else DEFAULT_POLICY)
        trace = self._traceback(outcome, definition)
        if delay is not None and definition is not None:
            failure = Failure(row.id, row.attempts, outcome.error_type, outcome.error_message, trace)
            if self.store.jobs.retry_later(owner, row.id, delay, outcome.error_text, failure=failure):
                chain = chain_of(app.hooks, definition.behaviour.hooks)
                if chain:
                    call_on_retry(chain, context_of(row, app), self._record_of(outcome, delay))
                log.info("job %d %s will retry in %.1fs (attempt %d of %d failed)", row.id, row.name, delay,
                         row.attempts, row.max_attempts, extra={"job_id": row.id, "job_name": row.name,
                                                                "queue": row.queue, "retry_in": delay})
            return
        self._bury(outcome, outcome.error_type, outcome.error_message, trace)

    def _settle_snooze(self, outcome: Outcome, definition: Any) -> None:
        """``raise Snooze(seconds)``: back in line after ``seconds``, its attempt given back, unless the
        job has snoozed as often as its policy allows (then the dead letter, as errands.SnoozeLimit)."""
        row = outcome.row
        policy = definition.behaviour.policy

        def delay_for(snoozes: int) -> float | None:
            return decide(row.attempts, row.max_attempts, None, error=outcome.exc, policy=policy, snoozes=snoozes)

        message = (f"the job snoozed {policy.max_snoozes} times, the most it may (max_snoozes), and asked to "
                   f"snooze again: {outcome.error_message}")
        done, delay = self.store.jobs.snooze(self.owner, row.id, delay_for, "errands.SnoozeLimit", message)
        if done == "snoozed":
            log.info("job %d %s snoozed: runs again in %.1fs", row.id, row.name, delay,
                     extra={"job_id": row.id, "job_name": row.name, "queue": row.queue, "retry_in": delay})
        elif done == "buried":
            self._buried(outcome, "errands.SnoozeLimit", message, definition)

    def _bury(self, outcome: Outcome, error_type: str, error_message: str, trace: str | None = None) -> None:
        row = outcome.row
        if self.store.jobs.bury(self.owner, row.id, error_type, error_message, traceback=trace):
            self._buried(outcome, error_type, error_message, self.app.registry.get(row.name))

    def _buried(self, outcome: Outcome, error_type: str, error_message: str, definition: Any) -> None:
        """Log a move to the dead letter that committed, and call the ``on_dead`` hooks."""
        row = outcome.row
        log.warning("job %d %s moved to the dead letter after %d attempt(s): %s: %s", row.id, row.name,
                    row.attempts, error_type, error_message, extra={"job_id": row.id, "job_name": row.name,
                                                                     "queue": row.queue, "attempt": row.attempts})
        chain = chain_of(self.app.hooks, definition.behaviour.hooks if definition else None)
        if chain:
            record = self._record_of(outcome._replace(error_type=error_type, error_message=error_message), None)
            call_on_dead(chain, context_of(row, self.app), record)

    def _record_of(self, outcome: Outcome, retry_in: float | None) -> FailedJob:
        """The failed job's record for ``on_retry`` / ``on_dead`` hooks (built only when some are registered)."""
        row = outcome.row
        definition = self.app.registry.get(row.name)
        try:
            arguments = definition.decode(row.payload) if definition is not None else None
        except BadPayload:
            arguments = ([], {})
        return FailedJob.of(row, outcome.error_type, outcome.error_message, retry_in, arguments)

    def _traceback(self, outcome: Outcome, definition: Any) -> str | None:
        """The failure's traceback when the job (or else the app) keeps tracebacks; the store trims it."""
        keep = definition.behaviour.keep_traceback if definition is not None else None
        if not (self.app.keep_traceback if keep is None else keep) or outcome.exc is None:
            return None
        try:
            return "".join(traceback.format_exception(outcome.exc))
        except Exception:  # an exception that cannot be formatted keeps its type and message only
            return None

    def _log(self, outcome: Outcome) -> None:
        row = outcome.row
        # The extra fields become keys of JSON log lines (--log-format json).
        fields = {"job_id": row.id, "job_name": row.name, "queue": row.queue, "attempt": row.attempts,
                  "duration_ms": round(outcome.duration * 1000, 3)}
        if outcome.result is Result.OK:
            log.info("job %d %s done in %.1f ms", row.id, row.name, outcome.duration * 1000, extra=fields)
        elif outcome.result is Result.SNOOZED:
            log.info("job %d %s snoozed after %.1f ms: %s", row.id, row.name, outcome.duration * 1000,
                     outcome.error_message, extra=fields)
        else:
            log.warning("job %d %s(%s) failed after %.1f ms (attempt %d of %d): %s", row.id, row.name,
                        describe_arguments(row, 80), outcome.duration * 1000, row.attempts, row.max_attempts,
                        outcome.error_text, exc_info=outcome.exc if outcome.result is Result.ERROR else None,
                        extra=fields)
