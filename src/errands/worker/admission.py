"""Admission: which jobs this worker takes, and how many.

The main thread claims a batch into the runners' buffer.  How many jobs to hold beyond the
running ones (the prefetch) adapts to how long jobs take: enough for about 50 ms of work, at most
500, none while jobs are slow, so a long job never sits in one worker's buffer while another
worker idles.  Claimed runs of rate- or concurrency-limited jobs then ask the database whether
they may start now; the refused ones went back to the queue with their attempt refunded.
This runs once per batch, not per job.

Keeping a limit busy (issue 17): a refused rate-limited run is due exactly when the window has
room for it, and a worker whose claim was refused whole asks again at that moment
(:meth:`Admission.next_due`) instead of after an idle pause that grows to a second; it comes
back :data:`GRANT_AHEAD` early and is granted the start the window frees next, at the very moment
it frees (held until then), so a busy limit loses no claim latency per window.  A run
refused by its concurrency group waits until a run of the group ends: the worker that records
that end wakes as many of the group's waiters (:meth:`Admission.slots_freed`) and claims again
at once, so a slot passes on within a settle and a claim rather than a fixed retry delay.
"""

from __future__ import annotations

import collections
import heapq
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..core.errors import StoreConflict, StoreError
from ..core.rows import QUEUE_RATE_PREFIX, ClaimedJob, Limit, QueueLimits
from .execution import START_TOLERANCE

if TYPE_CHECKING:
    from .host import RunHost
    from .settings import WorkerSettings
    from .state import WorkerState

log = logging.getLogger("errands.worker")

MAX_PREFETCH = 500
PREFETCH_HORIZON = 0.05
"""Seconds of work the adaptive prefetch aims to hold beyond the running jobs."""
QUEUE_LIMITS_TTL = 2.0
"""Seconds a worker trusts its last read of the limits operators stored per queue (one small read)."""
MAX_REFUSED_DUE = 1000
"""Most due times of refused runs one worker remembers (the latest are left to its idle polls)."""
GRANT_AHEAD = 0.25
"""Seconds ahead a rate-limited run may be granted the start a window is about to free (then held
in its runner until that moment): longer than a claim takes on a loaded machine, so each window's
starts follow the previous window's by exactly the period instead of a period plus a claim."""
MIN_LEAD, MAX_LEAD = 0.005, 0.2
"""Bounds of the lead (seconds): how long after its decision the earliest rate-limited start is
recorded (issue 26).  It must cover the rest of the admission's transaction, its commit and the
hand-out to an idle runner, which holds the run until then, so that the handler starts at the
recorded moment rather than that long after it (a handler started late meets the next window's
prompt ones in one period).  Each worker sets it from its own admissions (:meth:`Admission.lead`)."""
LEAD_SAMPLES = 32
"""How many recent admissions the lead is taken from."""


class Admission:
    """Claims, limits and the hand-out to the runner threads (all in the main thread)."""

    def __init__(self, app: RunHost, settings: WorkerSettings, state: WorkerState, owner: str,
                 lease: float) -> None:
        self.app = app
        self.store = app.store
        self.settings = settings
        self.state = state
        self.owner = owner
        self.lease = lease
        self._limited_names: set[str] | None = None
        """Names of rate- or concurrency-limited jobs (their runs need admission)."""
        self._queue_limits: dict[str, QueueLimits] = {}
        self._queue_limits_until = 0.0
        self._limits_refusing = False
        self.contended = 0
        """Claims in a row that lost to concurrent transactions (0: the last one did not)."""
        """The limits refused most of the last batch admitted, or it held more rate-limited runs than
        this worker had idle runners: claim no more than the idle runners can start.  Prefetching
        runs the limits hold back only sends them back, a statement each; and a worker whose buffer
        never empties never has an idle runner to be granted a rate-limited start for (it claims
        with its runners busy), so while such runs wait it claims only when a runner is idle."""
        self._took: collections.deque[float] = collections.deque([MIN_LEAD * 2], maxlen=LEAD_SAMPLES)
        """Seconds recent rate-limited admissions took from their decision to their return here."""
        self._refused_due: list[float] = []
        """A heap of the monotonic times the runs the limits refused here are due again (the claim
        loop asks at each of them at the latest, whatever its idle pause)."""

    def capacity(self) -> int:
        """Running slots plus an adaptive prefetch sized to about PREFETCH_HORIZON of work."""
        concurrency = self.settings.concurrency
        prefetch = self.settings.prefetch
        if self._limits_refusing:
            prefetch = 0
        elif prefetch is None:
            avg_duration = self.state.avg_duration
            if avg_duration <= 0:
                prefetch = 0
            else:
                prefetch = min(MAX_PREFETCH, int(concurrency * PREFETCH_HORIZON / avg_duration))
        # Top up when half the prefetch is left: the next batch arrives while the rest still runs.
        self.state.low_water = prefetch // 2
        return concurrency + prefetch

    def take(self, want: int) -> list[ClaimedJob] | None:
        """Claim up to ``want`` jobs, admit them and hand them to the runners; the jobs handed out.

        None when the database failed or refused (the worker pauses, then tries again); a claim
        whose admission failed lapses with its lease."""
        state = self.state
        try:
            rows = self.store.jobs.claim(self.owner, self.settings.queues, want, self.lease)
        except StoreConflict as exc:  # lost to other claims each try: no jobs this round, the loop backs off
            self._lost(exc)
            return []
        except StoreError as exc:  # unavailable, or refused: pause and try again later
            state.database_down(exc)
            return None
        if self.contended:
            log.info("claims succeed again after %d lost to concurrent transactions", self.contended)
            self.contended = 0
        state.database_up()
        if rows:
            try:
                rows = self.admit(rows)
            except StoreError as exc:  # unadmitted claims lapse with their lease
                state.database_down(exc)
                return None
        if rows:
            self.hand_out(rows)
        return rows

    def _lost(self, exc: StoreConflict) -> None:
        """A claim lost to concurrent transactions at each of its tries (deadlocks; on a multi-primary
        Galera cluster, certification failures between workers on different nodes): the database is
        fine and other workers got the jobs, so this is no error: said once per streak, and the claim
        loop waits its growing idle pause before the next one."""
        self.contended += 1
        if self.contended == 1:
            log.warning("a claim lost to concurrent transactions at each try (other workers took the rows; on "
                        "a multi-primary Galera cluster, certification conflicts between nodes): no jobs this "
                        "round, claiming again shortly (said once until a claim succeeds): %s", exc)

    def admit(self, rows: list[ClaimedJob]) -> list[ClaimedJob]:
        """Let the database decide which claimed runs of rate- or concurrency-limited jobs may
        start; the others went back to the queue (their attempt refunded)."""
        limited = self._limited_names
        if limited is None:
            limited = self._limited_names = {name for name, d in self.app.registry.items()
                                             if d.behaviour.rate_limit or d.behaviour.concurrency_limit}
        by_queue = self.queue_limits()
        self._limits_refusing = False
        if not limited and not by_queue:
            return rows
        runs: list[tuple[int, list[Limit]]] = []
        for row in rows:
            limits = self._limits(row) if row.name in limited else None
            stored = by_queue.get(row.queue)
            if stored is not None:
                limits = (limits or []) + _queue_limits(row.queue, stored)
            if limits:
                runs.append((row.id, limits))
        if not runs:
            return rows
        # A rate-limited run is granted a start only if a runner is idle to start it at once: its
        # start is recorded by the database as it is granted, and a handler that started later
        # (behind the runs queued before it) could meet the next window's prompt ones in one period.
        idle = max(0, self.settings.concurrency - self.state.outstanding)
        decision = self.store.features.admission(self.owner, runs, ahead=GRANT_AHEAD, slots=idle,
                                                 lead=self.lead(), spacing=START_TOLERANCE)
        if decision.later and decision.decided_at is not None:
            self._took.append(time.monotonic() - decision.decided_at)
        if decision.later:
            decided = time.monotonic() if decision.decided_at is None else decision.decided_at
            self.state.not_before.update({job_id: decided + wait for job_id, wait in decision.later.items()})
            self.state.starts.update(decision.starts)
        refused = decision.waits
        rated = {job_id for job_id, limits in runs if any(lim.kind == "rate" for lim in limits)}
        self._limits_refusing = 2 * len(refused) > len(rows) or len(rated) > idle
        if refused:
            self.state.claimed -= len(refused)
            now, heap = time.monotonic(), self._refused_due
            for wait in sorted({round(wait, 2) for wait in refused.values()}):  # (10 ms apart at least)
                if len(heap) >= MAX_REFUSED_DUE:
                    break
                heapq.heappush(heap, now + wait)
        # The runs granted a rate-limited start go to the runners first: the idle ones take them now.
        return ([row for row in rows if row.id in rated and row.id not in refused]
                + [row for row in rows if row.id not in rated and row.id not in refused])

    def lead(self) -> float:
        """Seconds ahead of its decision a rate-limited start is recorded: one and a half times the
        longest of the recent admissions' decision-to-return times, plus 2 ms for the hand-out
        (within MIN_LEAD..MAX_LEAD): a run that still reaches its runner late is given back."""
        return min(MAX_LEAD, max(MIN_LEAD, 1.5 * max(self._took) + 0.002))

    def give_back_missed(self) -> None:
        """Give back, unrun and with their attempt refunded, the rate-limited runs their runners
        reached too late (``WorkerState.missed``): due at once, they are granted a start again at
        their next claim, and the starts recorded for them are taken back (the windows have that
        room again).  A run may miss again while the machine is too busy to wake a thread within
        START_TOLERANCE; it spends no attempt on it."""
        state = self.state
        with state.held_lock:
            missed, state.missed = state.missed, []
        if not missed:
            return
        ids = [job_id for job_id, _ in missed]
        try:
            starts = [start for _, recorded in missed for start in recorded]
            if starts:
                self.store.features.forget_starts(starts)
                missed = [(job_id, []) for job_id in ids]  # taken back once only: never a started run's
            self.store.jobs.release(self.owner, ids)
        except StoreError as exc:  # still held (their leases extended): given back at the next turn
            with state.held_lock:
                state.missed.extend(missed)
            state.database_down(exc)
            return
        state.forget(ids)
        state.claimed -= len(ids)
        log.debug("gave back %d rate-limited run(s) that missed their start: %s", len(ids), ids)
        state.new_jobs.set()

    def take_back_starts(self, ids: list[int]) -> None:
        """These runs are given back unstarted (the buffer released when quieted or stopping, the
        runs still held at shutdown): take back the rate-limit starts recorded for them, so their
        windows have that room again.  A run that started has none left here (its runner took
        them); a run that missed its start has its own in ``WorkerState.missed``, for
        :meth:`give_back_missed`.  A failure is logged, not raised: the runs are released all the
        same (a start left behind only costs its window that room until the window passes)."""
        state = self.state
        starts: list[tuple[str, Any, int]] = []
        for job_id in ids:
            state.not_before.pop(job_id, None)
            starts.extend(state.starts.pop(job_id, ()))
        if starts:
            try:
                self.store.features.forget_starts(starts)
            except StoreError as exc:
                log.warning("could not take back %d rate-limit start(s) of runs given back unstarted (%s)",
                            len(starts), exc)

    def next_due(self, now: float) -> float | None:
        """When the next refused run is due again, if any is still ahead of ``now``."""
        heap = self._refused_due
        while heap and heap[0] <= now:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def slots_freed(self, freed: Mapping[str, int]) -> None:
        """Runs of these concurrency groups were recorded as ended (``{group: runs}``): wake as
        many of each group's refused runs, and claim again at once if any woke (this worker has
        a runner free: one of those runs just ended).  A failure here costs only promptness:
        the waiters are due anyway after their retry delay."""
        try:
            woken = self.store.features.wake_group_waiters(freed)
        except StoreError as exc:
            log.debug("could not wake the waiters of %s (%s); they retry on their own", sorted(freed), exc)
            return
        if woken:
            self.state.new_jobs.set()

    def queue_limits(self) -> dict[str, QueueLimits]:
        """The limits operators stored per queue, read again every QUEUE_LIMITS_TTL seconds."""
        now = time.monotonic()
        if now >= self._queue_limits_until:
            self._queue_limits = self.store.features.queue_limits()
            self._queue_limits_until = now + QUEUE_LIMITS_TTL
        return self._queue_limits

    def _limits(self, row: ClaimedJob) -> list[Limit] | None:
        """The limits one claimed run must pass; None when it has none to pass.  The concurrency
        group and the rate key are the ones enqueue stored with the job (``ClaimedJob.concurrency_key``,
        ``ClaimedJob.rate_key``)."""
        definition = self.app.registry.get(row.name)
        if definition is None:
            return None
        b = definition.behaviour
        if b.rate_limit is None and b.concurrency_limit is None:
            return None
        limits = []
        if b.concurrency_limit is not None:
            limits.append(Limit("concurrency", row.concurrency_key or row.name, b.concurrency_limit))
        if b.rate_limit is not None:
            limits.append(Limit.rate(row.name, row.rate_key, b.rate_limit))
        return limits

    def hand_out(self, rows: list[ClaimedJob]) -> None:
        """Hold the claimed jobs and queue them for the runner threads."""
        state = self.state
        with state.held_lock:
            held = state.held
            if not held.isdisjoint([row.id for row in rows]):
                # We hold these already: the database lost our earlier claim (a crash undid it) and
                # gave them to us again.  The copy we hold runs or has run; a second one must not.
                again = [row.id for row in rows if row.id in held]
                log.warning("claimed job(s) %s again while still holding them; the held run goes on alone",
                            again)
                rows = [row for row in rows if row.id not in held]
                state.claimed -= len(again)
            held.update([row.id for row in rows])
        with state.count_lock:
            state.outstanding += len(rows)
        state.claimed += len(rows)
        put = state.work.put
        for row in rows:
            put(row)


def _queue_limits(queue: str, stored: QueueLimits) -> list[Limit]:
    """The limits a run of ``queue`` must pass for what an operator stored."""
    limits = []
    if stored.concurrency is not None:
        limits.append(Limit("queue", queue, stored.concurrency))
    if stored.rate_count is not None and stored.rate_period:
        limits.append(Limit("rate", QUEUE_RATE_PREFIX + queue, stored.rate_count, stored.rate_period))
    return limits
