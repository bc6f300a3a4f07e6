"""Store verbs behind the job features: dependencies, batches, results, cancellation,
progress, pause, periodic slots and the admission of rate- and concurrency-limited runs.

Every promise here is kept by the database, never by one worker's memory, so it holds
across any number of worker hosts:

* a unique key is a unique index; dependencies are a column the claim index excludes;
* batch counters live in one row that each finishing transaction locks, so the
  transaction that finishes the last member (and only that one) enqueues the callback;
* a periodic slot is claimed by a conditional UPDATE of its schedule's row;
* admission takes a lock row per limit (``SELECT ... FOR UPDATE``; on SQLite the one
  write lock), counts what the limit counts, and grants at most what is left.

The statements these verbs share with the job store (enqueue with features, batch
counting) are in :mod:`errands.store.steps`; the few that differ per database come from
the dialect (``insert_ignore``, ``upsert``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..core.errors import BadPayload
from ..core.payload import decode_result, for_display
from ..core.rows import (
    FLAG_BATCH,
    FLAG_INPUTS,
    FLAG_RESULT,
    FLAG_WORKFLOW,
    Admitted,
    BatchRow,
    JobState,
    Limit,
    NewJob,
    QueueLimits,
    ResultRow,
    ToDatetime,
    as_int,
)
from . import fairness
from .database import Database
from .dialects.base import age_waiting_sql
from .driver import Cursor, Row, fetch_row, fetch_rows, scalar
from .steps import RESULT_COLUMNS, Steps, job_spec

BATCH_COLUMNS = "id, kind, total, done, failed, created_at, completed_at, failure_fired_at, name, policy"


def batch_row(t: ToDatetime, r: Row) -> BatchRow:
    """A row of ``BATCH_COLUMNS`` read by name; ``t`` reads the dialect's times."""
    return BatchRow(int(r["id"]), r["kind"], int(r["total"]), int(r["done"]), int(r["failed"]), t(r["created_at"]),
                    None if r["completed_at"] is None else t(r["completed_at"]),
                    None if r["failure_fired_at"] is None else t(r["failure_fired_at"]), r["name"], r["policy"])


CONCURRENCY_RETRY = 2.0
"""Seconds after which a run its concurrency group refused is due again even if no run of the group
woke it (a slot freed by an expired lease, or by a worker that stopped before it could wake it)."""
QUEUE_RETRY = 0.5
"""Seconds after which a run its queue's stored concurrency limit refused is due again."""
REFUSE_CHUNK = 100
"""Refused runs given back per statement."""
RATE_PRUNE_ROWS = 5_000
"""Passed rate-limit starts deleted per transaction by a prune."""
RATE_PRUNE_BATCHES = 20
"""Most such transactions per prune (100,000 starts: a worker prunes once a minute, so starts
recorded at up to 1,600 a second leave as fast as they come; the rest wait for the next pass)."""
RATE_KEEP = 600.0
"""Seconds a start stays recorded after its window passed (for people and tests reading the table)."""
CLOCK_READ_SPREAD = 0.004
"""Seconds a reading of the database's clock may take for admission to trust which moment of this
process's clock it was (within half of it); a slower one is taken again (:meth:`_clock_reading`)."""
RATE_MARGIN = 0.001
"""Seconds added to a refused rate-limited run's wait, so that the start it waits for has left the
window (``started_at > now - period``) by the time its row is due, whatever the clock's rounding."""


AGING_BATCH = 1000
"""Most waiting jobs one aging pass raises (the rest wait for the next pass)."""



CHECKPOINT = "UPDATE {jobs} SET checkpoint = {p} WHERE id = {p} AND reserved_by = {p}"
"""A running job's checkpoint (``current_job().checkpoint``), written only while its worker holds it."""

class FeatureStore:
    """Verbs of the job features; each keeps its promise in the database."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    def sweep_blocked(self, limit: int = 1000) -> int:
        """Unblock jobs whose dependency is gone and did not fail (a safety net: normally the
        worker that finishes the dependency unblocks them at once), and forget dependencies
        of jobs that are gone (a blocked job that was cancelled)."""

        def sweep(cur: Cursor) -> int:
            cur.execute(self.d.q(
                "SELECT d.parent_id FROM {dependencies} d WHERE "
                "NOT EXISTS (SELECT 1 FROM {jobs} p WHERE p.id = d.parent_id) "
                "AND NOT EXISTS (SELECT 1 FROM {failed} f WHERE f.id = d.parent_id) "
                "AND NOT EXISTS (SELECT 1 FROM {results} r WHERE r.id = d.parent_id AND r.state = 'cancelled') "
                "LIMIT {p}"), (int(limit),))
            parents = sorted({int(r["parent_id"]) for r in fetch_rows(cur)})
            released = self.steps.unblock(cur, parents) if parents else 0
            cur.execute(self.d.q("DELETE FROM {dependencies} WHERE NOT EXISTS "
                               "(SELECT 1 FROM {jobs} c WHERE c.id = {dependencies}.child_id)"))
            return released

        return self.db.run(sweep, write=True)

    def age_waiting(self, limit: int = AGING_BATCH) -> int:
        """Give at most ``limit`` waiting jobs the priority they earned by waiting (``age_after=``); the
        number of jobs raised.  Each worker runs it now and then; a job owed several steps (no pass
        ran for a while) takes them all at once, never past its cap."""

        def age(cur: Cursor) -> int:
            cur.execute(age_waiting_sql(self.d), (int(limit),))
            return int(cur.rowcount)

        return self.db.run(age, write=True)

    def get_result(self, job_id: int) -> ResultRow | None:
        def read(cur: Cursor) -> ResultRow | None:
            cur.execute(self.d.q("SELECT " + RESULT_COLUMNS + " FROM {results} WHERE id = {p}"), (job_id,))
            r = fetch_row(cur)
            if r is None:
                return None
            t = self.d.to_datetime
            value, undecodable = None, False
            if r["result"] is not None:
                try:
                    value = decode_result(r["result"])
                except BadPayload:
                    value, undecodable = for_display(r["result"]), True
            state = JobState.CANCELLED if r["state"] == JobState.CANCELLED.value else JobState.SUCCEEDED
            return ResultRow(as_int(r["id"]), r["queue"], r["name"], state, value, as_int(r["attempts"]),
                             None if r["batch_id"] is None else as_int(r["batch_id"]), t(r["finished_at"]),
                             t(r["expires_at"]), r["message"], undecodable, r["label"])

        return self.db.run(read)

    # ------------------------------------------------------------------ batches
    def create_batch(self, kind: str, jobs: Sequence[NewJob], on_complete: NewJob | None,
                     on_failure: NewJob | None, *, name: str | None = None, policy: str | None = None,
                     result_ttl: float | None = None, pass_results: bool = False,
                     failure_record: bool = False) -> tuple[int, list[int]]:
        """Store a batch row and its members in one transaction.  A chain's members each wait
        for the one before; a workflow's members carry their own ``after`` (references to earlier
        members) and graph position.  Returns the batch id and the members' ids.

        ``pass_results``: ``on_complete`` receives the members' results (kept until the batch
        ends); ``failure_record``: ``on_failure`` receives the failed member's record."""

        def create(cur: Cursor) -> tuple[int, list[int]]:
            sql = self.d.q("INSERT INTO {batches} (kind, total, done, failed, on_complete, on_failure, created_at, "
                           "name, policy, result_ttl) VALUES ({p}, {p}, 0, 0, {p}, {p}, {now}, {p}, {p}, {p})")
            params = (kind, len(jobs),
                      None if on_complete is None else job_spec(on_complete, results=pass_results),
                      None if on_failure is None else job_spec(on_failure, failure=failure_record),
                      name, policy, result_ttl)
            batch_id = self.d.insert_one(cur, sql, list(params))
            hold = FLAG_WORKFLOW | FLAG_RESULT if kind != "batch" or pass_results else 0
            members = []
            for position, j in enumerate(jobs):
                flags = j.flags | FLAG_BATCH | hold | (FLAG_INPUTS if j.inputs is not None else 0)
                step = j.step if j.step is not None or not pass_results else (position, j.name)
                members.append(j._replace(batch_id=batch_id, flags=flags, step=step))
            return batch_id, self.steps.insert_rich(cur, members)

        return self.db.run(create, write=True)

    # ------------------------------------------------------------------ batches (counted in steps)
    def get_batch(self, batch_id: int) -> BatchRow | None:
        def read(cur: Cursor) -> BatchRow | None:
            cur.execute(self.d.q("SELECT " + BATCH_COLUMNS + " FROM {batches} WHERE id = {p}"), (batch_id,))
            r = fetch_row(cur)
            return None if r is None else batch_row(self.d.to_datetime, r)

        return self.db.run(read)

    # ------------------------------------------------------------------ cancellation
    def cancel(self, job_id: int, record_ttl: float, *, waiting_only: bool = False,
               message: str = "cancelled before it ran") -> str:
        """Cancel a job: "cancelled" (it was waiting and never runs), "requested" (it is running:
        its handler sees the request at its next check) or "gone" (it already ended).

        ``waiting_only``: leave a running job alone ("running"), decided under the row lock, so
        a job a worker claimed a moment ago is not cancelled behind the caller's back."""

        def cancel(cur: Cursor) -> str:
            cur.execute(self.d.q("SELECT reserved_by, queue, name, attempts, flags, batch_id, label FROM {jobs} "
                               "WHERE id = {p}") + self.d.lock_rows, (job_id,))
            row = fetch_row(cur)
            if row is None:
                return "gone"
            if row["reserved_by"] is not None:
                if waiting_only:
                    return "running"
                cur.execute(self.d.q("UPDATE {jobs} SET cancel_requested_at = {now} WHERE id = {p}"), (job_id,))
                return "requested"
            self.steps.end_cancelled(cur, job_id, row["queue"], row["name"], as_int(row["attempts"]),
                                     as_int(row["flags"]), row["batch_id"], record_ttl, message, row["label"])
            return "cancelled"

        return self.db.run(cancel, write=True)

    def cancel_requests(self, owner: str) -> list[int]:
        """Ids of ``owner``'s jobs whose cancellation was requested."""

        def read(cur: Cursor) -> list[int]:
            cur.execute(self.d.q("SELECT id FROM {jobs} WHERE reserved_by = {p} AND cancel_requested_at IS NOT NULL"),
                        (owner,))
            return [int(r["id"]) for r in fetch_rows(cur)]

        return self.db.run(read)

    def cancel_requested(self, job_id: int) -> bool:
        def read(cur: Cursor) -> bool:
            cur.execute(self.d.q("SELECT cancel_requested_at FROM {jobs} WHERE id = {p}"), (job_id,))
            row = fetch_row(cur)
            return row is not None and row["cancel_requested_at"] is not None

        return self.db.run(read)

    # ------------------------------------------------------------------ progress
    def set_progress(self, owner: str, job_id: int, fraction: float, message: str | None) -> bool:
        def update(cur: Cursor) -> bool:
            cur.execute(self.d.q("UPDATE {jobs} SET progress = {p}, progress_message = {p} WHERE id = {p} "
                               "AND reserved_by = {p}"),
                        (float(fraction), None if message is None else message[:255], job_id, owner))
            return cur.rowcount == 1

        return self.db.run(update)

    # ------------------------------------------------------------------ checkpoints
    def set_checkpoint(self, owner: str, job_id: int, checkpoint: str) -> bool:
        """Store a running job's checkpoint (JSON, encoded and size-checked by the caller) in its row, in a
        transaction of its own, only while ``owner`` holds the run; False when it does not."""
        def update(cur: Cursor) -> bool:
            cur.execute(self.d.q(CHECKPOINT), (checkpoint, job_id, owner))
            if cur.rowcount == 1:
                return True
            # MySQL counts changed rows only: the same checkpoint stored again changes none.
            cur.execute(self.d.q("SELECT 1 FROM {jobs} WHERE id = {p} AND reserved_by = {p}"), (job_id, owner))
            return cur.fetchone() is not None

        return self.db.run(update, write=True)

    # ------------------------------------------------------------------ queues
    def set_paused(self, queue: str, paused: bool) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q(self.d.upsert("{queues}", "name", ("paused", "changed_at"))),
                                         (queue, 1 if paused else 0, self.d.from_datetime(self.db.now_in(cur)))),
                 write=True)
        self.d.after_pause()  # a dialect that caches the paused queues (MySQL) reads them again

    def set_queue_limits(self, queue: str, limits: QueueLimits) -> None:
        """Store ``queue``'s limits (none at all: its row goes); workers apply them within seconds."""
        if limits == QueueLimits(None, None, None):
            self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {queue_limits} WHERE name = {p}"), (queue,)))
            return
        sql = self.d.q(self.d.upsert("{queue_limits}", "name", ("concurrency", "rate_count", "rate_period",
                                                                 "changed_at")))
        self.db.run(lambda cur: cur.execute(sql, (queue, limits.concurrency, limits.rate_count, limits.rate_period,
                                                  self.d.from_datetime(self.db.now_in(cur)))))

    def queue_limits(self) -> dict[str, QueueLimits]:
        """Every queue's stored limits (a small table: one row per limited queue)."""

        def read(cur: Cursor) -> dict[str, QueueLimits]:
            cur.execute(self.d.q("SELECT name, concurrency, rate_count, rate_period FROM {queue_limits} ORDER BY name"))
            return {r["name"]: QueueLimits(None if r["concurrency"] is None else int(r["concurrency"]),
                                           None if r["rate_count"] is None else int(r["rate_count"]),
                                           None if r["rate_period"] is None else float(r["rate_period"]))
                    for r in fetch_rows(cur)}

        return self.db.run(read)

    def paused_queues(self) -> list[str]:
        def read(cur: Cursor) -> list[str]:
            cur.execute(self.d.q("SELECT name FROM {queues} WHERE paused = 1 ORDER BY name"))
            return [r["name"] for r in fetch_rows(cur)]

        return self.db.run(read)

    # ------------------------------------------------------------------ periodic schedules
    def claim_periodic_slot(self, name: str, slot: datetime, job: NewJob) -> int | None:
        """Enqueue ``job`` for ``slot`` unless a scheduler already did (or a later slot ran).

        A schedule seen for the first time only records ``slot``: it starts with the next
        one.  After downtime the latest missed slot is enqueued, once.  Returns the
        enqueued job's id, or None.
        """

        def claim(cur: Cursor) -> int | None:
            stored = self.d.from_datetime(slot)
            cur.execute(self.d.q(self.d.insert_ignore("{periodic}", "name, last_slot, updated_at")),
                        (name, stored, stored))
            cur.execute(self.d.q("UPDATE {periodic} SET last_slot = {p}, updated_at = {now} WHERE name = {p} "
                               "AND (last_slot IS NULL OR last_slot < {p})"), (stored, name, stored))
            if cur.rowcount != 1:
                return None
            return self.steps.insert_rich(cur, [job])[0]

        return self.db.run(claim, write=True)

    def periodic_slots(self) -> dict[str, datetime | None]:
        def read(cur: Cursor) -> dict[str, datetime | None]:
            cur.execute(self.d.q("SELECT name, last_slot FROM {periodic} ORDER BY name"))
            return {r["name"]: None if r["last_slot"] is None else self.d.to_datetime(r["last_slot"])
                    for r in fetch_rows(cur)}

        return self.db.run(read)

    # ------------------------------------------------------------------ admission
    def admit(self, owner: str, runs: Sequence[tuple[int, Sequence[Limit]]],
              concurrency_retry: float = CONCURRENCY_RETRY) -> tuple[list[int], list[int]]:
        """Decide which claimed runs may start now; the others go back to the queue unrun.

        ``(admitted ids, refused ids)``; :meth:`admission` also says when each refused run is due."""
        decision = self.admission(owner, runs, concurrency_retry)
        return decision.admitted, list(decision.waits)

    def admission(self, owner: str, runs: Sequence[tuple[int, Sequence[Limit]]],
                  concurrency_retry: float = CONCURRENCY_RETRY, ahead: float = 0.0,
                  slots: int | None = None, lead: float = 0.0, spacing: float = 0.0) -> Admitted:
        """Decide which claimed runs may start now; the others go back to the queue unrun.

        A concurrency limit counts the group's runs that are admitted and whose lease is
        alive (a dead worker's runs stop counting when their lease expires); a rate limit
        counts the starts recorded in the last ``period`` seconds.  Each limit is taken
        under its lock row, in name order (no deadlocks).  Refused runs get their attempt
        back and become due when a start may be free: a rate-limited run when enough of the
        window's starts have left it for this run too (each refused run its own time, so they
        come back one after the other instead of all at once), a concurrency-limited run at
        once when a run of its group ends (:meth:`wake_group_waiters`), and at the latest
        ``concurrency_retry`` seconds later.

        ``ahead``: a rate-limited run whose start would fit within that many seconds is granted
        the start at the very moment it fits (recorded at that time, so no window ever holds more
        than the limit) and listed in ``later``: the caller holds it until then.  A run refused
        comes back that much before it fits, so that its next claim can be granted ahead in turn:
        a limit kept busy then loses no claim's latency per window (at most ``period / 4``).

        ``slots``: at most this many rate-limited runs are granted a start (issue 26): the caller's
        idle runners, so that each granted run starts in its runner the moment it was recorded
        rather than after the runs queued before it (a start recorded early and a handler started
        late let two windows' handlers meet in one period).  The first ``slots`` in claim order are
        eligible; the others are refused, due when their window has room (at once if it has).
        ``lead``: every rate-limited start is granted at least that many seconds ahead (listed in
        ``later``, from ``decided_at``), the time a granted run takes to reach its runner: the
        caller holds it until then, so its handler starts at the moment recorded, not after it.
        ``spacing``: a rate window counts its starts over the period and that much more (at most a
        hundredth of the period), so a window's starts follow the previous window's by the period
        and the spacing: a handler that starts up to ``spacing`` after its recorded start never
        meets the next window's in one period (at the price of ``spacing`` per period).
        """
        if not runs:
            return Admitted([], {})

        def decide(cur: Cursor) -> Admitted:
            # (Per-key rate windows share RATE_KEY_LOCKS bucket rows: one lock may cover several.)
            for lock in sorted({lim.lock_name for _, limits in runs for lim in limits}):
                self.steps.lock_name(cur, lock)
            ours = [job_id for job_id, _ in runs]
            refused: dict[int, float] = {}
            by_limit: dict[tuple[str, str], list[tuple[int, Limit]]] = {}
            for job_id, limits in runs:
                for lim in limits:
                    by_limit.setdefault((lim.kind, lim.name), []).append((job_id, lim))
            # Concurrency first: it only reads, so a run it refuses consumes no rate start.
            grouped, waiting = self._admit_concurrency(cur, by_limit, ours, refused, concurrency_retry)
            later, starts, decided = self._admit_rates(cur, by_limit, refused, ahead,
                                                       _eligible(runs, refused, slots), lead, spacing)
            admitted = self._record_admission(cur, owner, ours, grouped, waiting, refused)
            return admitted._replace(later=later, starts=starts, decided_at=decided)

        return self.db.run(decide, write=True)

    def wake_group_waiters(self, freed: Mapping[str, int]) -> int:
        """Runs of these concurrency groups ended (``{group: how many}``): make as many of each
        group's refused runs due now, so a freed slot is taken at the next claim rather than when
        a fixed retry delay runs out.  Under the group's lock row, as admission: a run refused
        while the slot was still taken is either seen here, or its admission comes after this
        and sees the slot free.  Only runs refused by the limit are woken (refusal clears their
        ``admitted_at``), never a retry waiting out its backoff.  Returns the runs woken."""
        if not freed:
            return 0

        def wake(cur: Cursor) -> int:
            woken = 0
            for name in sorted(freed):
                self.steps.lock_name(cur, f"concurrency:{name}")
                cur.execute(self.d.q("SELECT j.id FROM {group_runs} g JOIN {jobs} j ON j.id = g.job_id "
                                     "WHERE g.name = {p} AND j.reserved_by IS NULL AND j.admitted_at IS NULL "
                                     "AND j.available_at > {now} ORDER BY j.priority DESC, j.id LIMIT {p}"),
                            (name, int(freed[name])))
                ids = [int(r["id"]) for r in fetch_rows(cur)]
                if ids:
                    cur.execute(self.d.q("UPDATE {jobs} SET available_at = {now} WHERE reserved_by IS NULL "
                                         "AND id IN (") + self.d.marks(ids) + ")", ids)
                    woken += max(0, int(cur.rowcount))
            return woken

        return self.db.run(wake, write=True)

    def _admit_concurrency(self, cur: Cursor, by_limit: dict[tuple[str, str], list[tuple[int, Limit]]],
                           ours: list[int], refused: dict[int, float],
                           retry: float) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """Grant each concurrency group what is free of it; return the (job, group) pairs granted
        and those refused (recorded as the group's waiters, which the end of a run wakes)."""
        grouped: list[tuple[int, str]] = []
        waiting: list[tuple[int, str]] = []
        for (kind, name), members in sorted(by_limit.items()):
            if kind not in ("concurrency", "queue"):
                continue
            limit = members[0][1].limit
            if kind == "queue":
                # A queue's admitted runs with a live lease, through the lease index (running jobs are few).
                cur.execute(self.d.q("SELECT COUNT(*) FROM {jobs} WHERE reserved_until >= {now} AND "
                                     "reserved_by IS NOT NULL AND queue = {p} AND admitted_at >= reserved_at "
                                     "AND id NOT IN (") + self.d.marks(ours) + ")", [name, *ours])
            else:
                # Runs of the group are found through errands_group_runs (written here, at admission),
                # so the jobs table needs no index on the group for this count.
                cur.execute(self.d.q("SELECT COUNT(*) FROM {group_runs} g JOIN {jobs} j ON j.id = g.job_id "
                                     "WHERE g.name = {p} AND j.reserved_by IS NOT NULL AND j.reserved_until >= {now} "
                                     "AND j.admitted_at >= j.reserved_at AND j.id NOT IN (")
                            + self.d.marks(ours) + ")", [name, *ours])
            free = limit - as_int(scalar(cur))
            for job_id, _ in members:
                if job_id in refused:
                    continue
                if free > 0:
                    free -= 1
                    if kind == "concurrency":
                        grouped.append((job_id, name))
                elif kind == "queue":  # (a queue's limit has no waiters to wake: it retries soon)
                    refused[job_id] = min(retry, QUEUE_RETRY)
                else:
                    refused[job_id] = retry
                    waiting.append((job_id, name))
        return grouped, waiting

    def _admit_rates(self, cur: Cursor, by_limit: dict[tuple[str, str], list[tuple[int, Limit]]],
                     refused: dict[int, float], ahead: float = 0.0, eligible: set[int] | None = None,
                     lead: float = 0.0, spacing: float = 0.0) -> tuple[dict[int, float], _Recorded, float]:
        """Record a start for each run a rate limit allows; refuse the others until the window moves.

        A run uses ``cost`` units of its limit (the jobs' ``cost`` column; NULL is 1), and the
        units started in any window never exceed the limit.  Runs are taken in claim order and
        the first one that does not fit stops the rest of its limit for this admission, so a
        costly run is not starved by cheap ones claimed with it.  Only the ``eligible`` runs (None:
        all) are granted a start, now or ahead; the others are refused until their window has room.

        Every time here is one reading of the database's clock (``Dialect.clock_sql``: the moment
        of reading, not the transaction's start), matched with this process's monotonic clock
        (:meth:`_clock_reading`): a start is recorded at that reading plus ``lead`` at least (the rest of this
        transaction and the hand-out to a runner), and the caller holds the run until the same
        moment of its own clock, so the handler starts when its start was recorded whatever this
        transaction and its commit took.  Returns the runs granted a start and the seconds (from
        that moment) until each, the starts recorded for each, and the moment (``time.monotonic()``)."""
        rates = [(name, members) for (kind, name), members in sorted(by_limit.items()) if kind == "rate"]
        if not rates:
            return {}, {}, time.monotonic()
        rated = sorted({job_id for _, members in rates for job_id, _ in members})
        cur.execute(self.d.q("SELECT id, cost FROM {jobs} WHERE cost IS NOT NULL AND id IN (")
                    + self.d.marks(rated) + ")", rated)
        costs = {int(r["id"]): max(1, as_int(r["cost"], 1)) for r in fetch_rows(cur)}
        now, decided = self._clock_reading(cur)
        later: dict[int, float] = {}
        recorded: dict[int, list[tuple[str, Any, int]]] = {}
        """Each granted run's starts as stored (window, started_at, units), so that a run that never
        started can take them back (:meth:`forget_starts`)."""

        def grant(job_id: int, name: str, wait: float, cost: int, period: float) -> None:
            started = self._record_start(cur, name, now + _seconds(wait), cost, period)
            recorded.setdefault(job_id, []).append((name, started, cost))
            later[job_id] = max(later.get(job_id, 0.0), wait)  # (a job's and its queue's)

        for name, members in rates:
            # Spaced: each window's starts follow the previous window's by a period and the spacing.
            lim = members[0][1]
            lim = lim._replace(period=lim.period + min(spacing, lim.period / 100))
            cur.execute(self.d.q("SELECT SUM(COALESCE(units, 1)) FROM {rate_starts} WHERE name = {p} "
                                 "AND started_at > {p}"), (name, self.d.from_datetime(now - _seconds(lim.period))))
            free = lim.limit - as_int(scalar(cur) or 0)
            late: list[tuple[int, int]] = []
            """Refused here, in claim order, with their costs."""
            for job_id, _ in members:
                if job_id in refused:
                    continue
                cost = costs.get(job_id, 1)
                if not late and cost <= free and (eligible is None or job_id in eligible):
                    free -= cost
                    grant(job_id, name, lead, cost, lim.period)
                else:  # keep claim order: nothing after a run that did not fit starts now
                    late.append((job_id, cost))
            if not late:
                continue
            # Granting the k-th unit at the moment the window's k-th oldest unit leaves it keeps
            # every window within the limit (the units after that moment are the later ones of
            # the window, plus those granted here up to that moment).  Only within a quarter
            # period, so a start granted ahead always comes from units already in the window.
            horizon = min(ahead, lim.period / 4)
            waits = self._rate_waits(cur, name, lim, free, [cost for _, cost in late], now)
            for (job_id, cost), wait in zip(late, waits, strict=True):
                if wait <= horizon and (eligible is None or job_id in eligible):
                    # A millisecond after the unit leaves: the clock's and the floats' rounding
                    # (SQLite stores seconds as REAL) could otherwise put it a hair inside.
                    grant(job_id, name, max(wait + RATE_MARGIN, lead), cost, lim.period)
                else:
                    refused[job_id] = max(refused.get(job_id, 0.0), wait - horizon + RATE_MARGIN)
        granted = {job_id: wait for job_id, wait in later.items() if job_id not in refused}
        # A run granted by one limit and refused by a later one (a job's own limit and its queue's)
        # does not start now: the starts recorded for it are taken back, in this transaction.
        self._delete_starts(cur, [start for job_id, starts in recorded.items() if job_id in refused
                                  for start in starts])
        return granted, {job_id: recorded[job_id] for job_id in granted}, decided

    def _clock_reading(self, cur: Cursor) -> tuple[datetime, float]:
        """The database's clock, and the same moment by this process's ``time.monotonic()``: the
        middle of the read.  A read that took longer than CLOCK_READ_SPREAD (a server or a process
        that had to wait for a core) is taken again, twice at most, and the quickest kept: the
        moment is known within half its time, which is how much a held run may start off its
        recorded start on that account."""
        best: tuple[Any, float, float] | None = None
        for _ in range(3):
            before = time.monotonic()
            cur.execute("SELECT " + self.d.clock_sql)
            value = scalar(cur)
            after = time.monotonic()
            if best is None or after - before < best[2]:
                best = (value, (before + after) / 2, after - before)
            if after - before <= CLOCK_READ_SPREAD:
                break
        assert best is not None
        return self.d.to_datetime(best[0]), best[1]

    def _record_start(self, cur: Cursor, name: str, started: datetime, cost: int, period: float) -> Any:
        """A start of ``cost`` units in window ``name`` at ``started``; returns it as stored."""
        stored = self.d.from_datetime(started)
        cur.execute(self.d.q("INSERT INTO {rate_starts} (name, started_at, units, expires_at) "
                             "VALUES ({p}, {p}, {p}, {p})"),
                    (name, stored, None if cost == 1 else cost, self.d.from_datetime(started + _seconds(period))))
        return stored

    def forget_starts(self, starts: Sequence[tuple[str, Any, int]]) -> int:
        """Take back rate-limit starts recorded for runs that never started (``Admitted.starts``:
        a runner reached them too late and gave them back): their windows have that room again.
        One row each, whichever of several alike (same window, moment and units) it is: they count
        the same.  Returns how many."""
        if not starts:
            return 0
        return self.db.run(lambda cur: self._delete_starts(cur, starts), write=True)

    def _delete_starts(self, cur: Cursor, starts: Sequence[tuple[str, Any, int]]) -> int:
        """Delete one recorded start for each of ``starts``; returns how many went."""
        gone = 0
        for name, started, units in starts:
            # (MySQL reads the table it deletes from only through a derived table; MIN keeps the
            # derived table from being merged back into the DELETE.)
            cur.execute(self.d.q("DELETE FROM {rate_starts} WHERE id = (SELECT one.id FROM (SELECT MIN(id) AS id "
                                 "FROM {rate_starts} WHERE name = {p} AND started_at = {p} "
                                 "AND COALESCE(units, 1) = {p}) one)"), (name, started, units))
            gone += max(0, int(cur.rowcount))
        return gone

    def _rate_waits(self, cur: Cursor, name: str, lim: Limit, free: int, costs: list[int],
                    now: datetime) -> list[float]:
        """Seconds after ``now`` until each late run (in claim order, with its cost) fits in the window, if
        the ones before it start when they fit: the k-th unit needed beyond ``free`` frees up when
        the window's k-th oldest unit leaves it.  A run needing more than the window holds waits
        a window more than the run that needs ``limit`` units less."""
        need = sum(costs) - free
        cur.execute(self.d.q("SELECT started_at, COALESCE(units, 1) AS units FROM {rate_starts} WHERE name = {p} "
                             "AND started_at > {p} ORDER BY started_at LIMIT {p}"),
                    (name, self.d.from_datetime(now - _seconds(lim.period)), max(1, min(need, lim.limit))))
        rows = fetch_rows(cur)
        leaves: list[float] = []
        """When each unit of the window leaves it (seconds from now), oldest first."""
        for r in rows:
            left = (self.d.to_datetime(r["started_at"]) - now).total_seconds() + lim.period
            leaves.extend([left] * max(1, as_int(r["units"], 1)))

        def due(units: int) -> float:
            if units <= 0:
                return 0.0
            if units <= len(leaves):
                return max(0.0, leaves[units - 1])
            return due(units - lim.limit) + lim.period

        out, needed = [], -free
        for cost in costs:
            needed += cost
            out.append(due(needed))
        return out

    def _record_admission(self, cur: Cursor, owner: str, ours: list[int], grouped: list[tuple[int, str]],
                          waiting: list[tuple[int, str]], refused: dict[int, float]) -> Admitted:
        """Mark the admitted runs (and their groups); give the refused ones back, due after their
        wait, with ``admitted_at`` cleared: that, and their group's row, is how the end of a run of
        the group finds them (:meth:`wake_group_waiters`)."""
        admitted = [job_id for job_id in ours if job_id not in refused]
        members = [(job_id, name) for job_id, name in grouped if job_id not in refused] + waiting
        for job_id, name in members:
            cur.execute(self.d.q(self.d.insert_ignore("{group_runs}", "job_id, name")), (job_id, name))
        if admitted:
            cur.execute(self.d.q("UPDATE {jobs} SET admitted_at = {now} WHERE reserved_by = {p} AND id IN (")
                        + self.d.marks(admitted) + ")", [owner, *admitted])
        # One statement per chunk, each run due after its own wait: a worker whose prefetch claimed
        # hundreds of a rate-limited job's runs gave them back one UPDATE each, and held up the runs
        # it admitted for as long (400 ms on a loaded MariaDB).
        back = list(refused.items())
        plus = self.d.q("{now_plus}")
        for i in range(0, len(back), REFUSE_CHUNK):
            chunk = back[i:i + REFUSE_CHUNK]
            due = " ".join(f"WHEN {self.d.placeholder} THEN {plus}" for _ in chunk)
            params: list[Any] = [x for job_id, wait in chunk for x in (job_id, float(wait))]
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                 "admitted_at = NULL, attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, "
                                 "available_at = CASE id ") + due + self.d.q(" END WHERE reserved_by = {p} AND id IN (")
                        + self.d.marks(chunk) + ")", [*params, owner, *(job_id for job_id, _ in chunk)])
        return Admitted(admitted, refused)

    # ------------------------------------------------------------------ retention
    def prune(self, failed_ttl: float | None, rate_keep: float = RATE_KEEP) -> dict[str, int]:
        """Forget expired results, the rate-limit starts whose window passed ``rate_keep`` seconds
        ago, finished batches, idle fairness keys' counters (bounded: :mod:`errands.store.fairness`) and
        (when ``failed_ttl`` is set) dead-letter entries older than that many seconds."""
        rate_starts = self._prune_rate_starts(rate_keep)

        def delete(cur: Cursor) -> dict[str, int]:
            out = {"rate_starts": rate_starts}
            cur.execute(self.d.q("DELETE FROM {results} WHERE expires_at < {now}"))
            out["results"] = int(cur.rowcount)
            # Starts written before schema 10 carry no expiry: two days, as they always had.
            cur.execute(self.d.q("DELETE FROM {rate_starts} WHERE expires_at IS NULL AND started_at < {now_plus}"),
                        (-2 * 86400.0,))
            out["rate_starts"] += int(cur.rowcount)
            # Rows of jobs that are gone; a unique key also waits for the end of its unique period.
            cur.execute(self.d.q("DELETE FROM {group_runs} WHERE NOT EXISTS "
                                 "(SELECT 1 FROM {jobs} j WHERE j.id = {group_runs}.job_id)"))
            cur.execute(self.d.q("DELETE FROM {unique_keys} WHERE (expires_at IS NULL OR expires_at < {now}) "
                                 "AND NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = {unique_keys}.job_id)"))
            out["unique_keys"] = int(cur.rowcount)
            if failed_ttl is not None:
                cur.execute(self.d.q("DELETE FROM {job_errors} WHERE job_id IN (SELECT id FROM {failed} "
                                     "WHERE failed_at < {now_plus})"), (-float(failed_ttl),))
                cur.execute(self.d.q("DELETE FROM {run_logs} WHERE job_id IN (SELECT id FROM {failed} "
                                     "WHERE failed_at < {now_plus})"), (-float(failed_ttl),))
                cur.execute(self.d.q("DELETE FROM {failed} WHERE failed_at < {now_plus}"), (-float(failed_ttl),))
                out["failed"] = int(cur.rowcount)
                cur.execute(self.d.q("DELETE FROM {batches} WHERE completed_at < {now_plus}"), (-float(failed_ttl),))
                out["batches"] = int(cur.rowcount)
                # A workflow's graph goes with its batch row.
                cur.execute(self.d.q("DELETE FROM {steps} WHERE NOT EXISTS (SELECT 1 FROM {batches} b "
                                     "WHERE b.id = {steps}.batch_id)"))
            # The error history of jobs that left every table (succeeded after a retry, or their
            # record expired): kept while the job waits, is dead, or has a result record.
            cur.execute(self.d.q("DELETE FROM {job_errors} WHERE "
                                 "NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = {job_errors}.job_id) "
                                 "AND NOT EXISTS (SELECT 1 FROM {failed} f WHERE f.id = {job_errors}.job_id) "
                                 "AND NOT EXISTS (SELECT 1 FROM {results} r WHERE r.id = {job_errors}.job_id)"))
            out["errors"] = int(cur.rowcount)
            # Run logs go with the error history, by the same rule.
            cur.execute(self.d.q("DELETE FROM {run_logs} WHERE "
                                 "NOT EXISTS (SELECT 1 FROM {jobs} j WHERE j.id = {run_logs}.job_id) "
                                 "AND NOT EXISTS (SELECT 1 FROM {failed} f WHERE f.id = {run_logs}.job_id) "
                                 "AND NOT EXISTS (SELECT 1 FROM {results} r WHERE r.id = {run_logs}.job_id)"))
            out["run_logs"] = int(cur.rowcount)
            out["fair_keys"] = fairness.prune(self.d, cur)
            return out

        return self.db.run(delete, write=True)

    def _prune_rate_starts(self, keep: float) -> int:
        """Delete the starts of every window (a job's, a key's, a queue's) that passed ``keep``
        seconds ago, so the keys that fell idle leave the table: RATE_PRUNE_ROWS a transaction (short
        row locks beside the admissions inserting), at most RATE_PRUNE_BATCHES of them a pass."""
        sql = self.d.q(self.d.bounded_delete_sql.format(table="{rate_starts}", where="expires_at < {now_plus}",
                                                        limit="{p}"))

        def one(cur: Cursor) -> int:
            cur.execute(sql, (-float(keep), RATE_PRUNE_ROWS))
            return int(cur.rowcount)

        deleted = 0
        for _ in range(RATE_PRUNE_BATCHES):
            n = self.db.run(one, write=True)
            deleted += n
            if n < RATE_PRUNE_ROWS:
                break
        return deleted


def _eligible(runs: Sequence[tuple[int, Sequence[Limit]]], refused: Mapping[int, float],
              slots: int | None) -> set[int] | None:
    """The rate-limited runs an admission may grant a start: the first ``slots`` in claim order
    that the concurrency limits let through (None: no cap)."""
    if slots is None:
        return None
    rated = [job_id for job_id, limits in runs
             if job_id not in refused and any(lim.kind == "rate" for lim in limits)]
    return set(rated[:max(0, slots)])


_Recorded = dict[int, list[tuple[str, Any, int]]]
"""Each granted run's rate-limit starts as stored: (window, started_at, units)."""


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
