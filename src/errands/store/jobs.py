"""The life of a job: enqueue, claim, settle, retry, bury, release, recover, and the dead letter.

Invariants kept here (see docs/architecture.md):

* every move between ``jobs`` and ``failed_jobs`` is one transaction that locks
  the rows it moves, so a job is never in both tables nor in neither;
* every settle is conditional on ``reserved_by`` still naming the caller, so a
  worker that lost its lease changes nothing;
* time comparisons use the database clock (``{now}`` in the templates).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..core.limits import clamp_delay
from ..core.payload import safe_text
from ..core.retry import DEFAULT_POLICY, DelayFunction, RetryPolicy, decide
from ..core.rows import (
    FLAG_BATCH,
    ClaimedJob,
    ErrorRow,
    FailedJobRow,
    JobRow,
    NewJob,
    QueueCounts,
    RecoveryReport,
    as_int,
)
from .database import Database
from .dialects.base import FAILED_COLUMNS, INSERT_CHUNK, JOB_COLUMNS, failed_row, job_row
from .steps import ERROR_MESSAGE_CAP, Failure, Steps

_new_claimed = functools.partial(tuple.__new__, ClaimedJob)
"""ClaimedJob from a claimed row without ``_make``'s Python-level length check (hundreds per
claim): every dialect's claim returns exactly CLAIM_COLUMNS."""
_PLAIN = NewJob("", "", "")[8:]
"""The fields after ``run_at`` of a job that uses no feature: such jobs take the fast insert."""
"""The feature fields of a NewJob that uses none (unique_key, after, concurrency_key, flags, batch_id, label,
cost, unique_for): such jobs take the fast insert paths."""


class JobStore:
    """Verbs over the jobs table and its dead letter."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    def enqueue(self, jobs: Sequence[NewJob], cursor: Any = None) -> list[int]:
        """Insert jobs with multi-row INSERTs; returns their ids in the given order.

        With ``cursor`` the rows are written on the caller's own connection and
        transaction, so they exist only if the caller commits.
        """
        if not jobs:
            return []
        rich = jobs[0][8:] != _PLAIN if len(jobs) == 1 else any(j[8:] != _PLAIN for j in jobs)

        def insert(cur: Any) -> list[int]:
            return self.steps.insert_rich(cur, jobs) if rich else self.d.insert_jobs(cur, jobs)

        if cursor is not None:
            return self.db.on_cursor(insert, cursor, "enqueue")
        return self.db.run(insert, write=rich or len(jobs) >= self.d.transaction_from)

    def _enqueue_in_transaction(self, count: int) -> bool:
        """Whether inserting ``count`` jobs takes more than one statement (then it must be atomic)."""
        return count > INSERT_CHUNK

    def claim(self, owner: str, queues: Sequence[str], limit: int, lease: float) -> list[ClaimedJob]:
        """Reserve up to ``limit`` jobs, taking queues in the given order of preference."""
        rows: list[ClaimedJob] = []
        for queue in queues:
            want = limit - len(rows)
            if want <= 0:
                break
            def claim_one(cur: Any, queue: str = queue, want: int = want) -> list[tuple]:
                return self.d.claim(cur, owner, queue, want, lease)

            got = self.db.run(claim_one, write=self.d.claim_needs_transaction)
            rows.extend(map(_new_claimed, got))
        return rows

    def explain_claim(self, queue: str = "default", limit: int = 10) -> str:
        """The database's plan for :meth:`pick_sql`, one line per plan row."""
        return self.db.run(lambda cur: self.explain_claim_in(cur, queue, limit))

    def explain_claim_in(self, cur: Any, queue: str = "default", limit: int = 10) -> str:
        """:meth:`explain_claim` on ``cur``: without the schema check of :meth:`run` (``errands
        doctor`` looks at a schema it must not migrate)."""
        cur.execute(self.d.explain_prefix + self.d.pick_sql(), self.d.pick_params(queue, limit))
        return "\n".join(" | ".join("" if v is None else str(v) for v in row) for row in cur.fetchall())

    def complete(self, owner: str, ids: Sequence[int]) -> int:
        """Delete finished jobs still reserved by ``owner``; returns how many were ours.

        Only for runs that need nothing else recorded: a job that others wait for, keeps a
        result or counts in a batch is finished with :meth:`finish`.  (A dependant enqueued
        while its dependency was already running is released by ``sweep_blocked``.)
        """
        if not ids:
            return 0

        def delete(cur: Any) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("DELETE FROM {jobs} WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.db.run(delete)

    def retry_later(self, owner: str, job_id: int, delay: float, error: str, *,
                    failure: Failure | None = None) -> bool:
        """Put a failed run back in line after ``delay`` seconds of database time.

        ``failure``: the failed attempt, added to the job's error history in the same transaction."""

        def update(cur: Any) -> bool:
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                               "available_at = {now_plus}, last_error = {p} WHERE id = {p} AND reserved_by = {p}"),
                        (clamp_delay(delay), safe_text(error, ERROR_MESSAGE_CAP), job_id, owner))
            if cur.rowcount != 1:
                return False
            if failure is not None:
                self.steps.record_errors(cur, [failure])
            return True

        return self.db.run(update, write=failure is not None)

    def snooze(self, owner: str, job_id: int, delay_for: Callable[[int], float | None], error_type: str,
               error_message: str) -> tuple[str, float | None]:
        """A run that raised ``Snooze``: back in line after ``delay_for(snoozes so far)`` seconds of database
        time with its attempt given back (attempts count at claim), or, when that says None (the job
        snoozed as often as it may), to the dead letter with the error given.  One transaction.

        Returns ("snoozed", delay), ("buried", None), or ("lost", None) when the run is no longer
        ``owner``'s (its lease lapsed): then nothing changes."""

        def settle(cur: Any) -> tuple[str, float | None]:
            cur.execute(self.d.q("SELECT snoozes FROM {jobs} WHERE id = {p} AND reserved_by = {p}") + self.d.lock_rows,
                        (job_id, owner))
            row = cur.fetchone()
            if row is None:
                return "lost", None
            delay = delay_for(as_int(row[0]))
            if delay is None:
                self.steps.bury_locked(cur, "id = {p}", [job_id], error_type, error_message)
                return "buried", None
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                 "available_at = {now_plus}, snoozes = snoozes + 1, "
                                 "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END WHERE id = {p}"),
                        (clamp_delay(delay), job_id))
            return "snoozed", delay

        return self.db.run(settle, write=True)

    def bury(self, owner: str | None, job_id: int, error_type: str, error_message: str, *,
             traceback: str | None = None) -> bool:
        """Move a job to the dead letter in one transaction (``owner=None``: whoever holds it);
        its last attempt joins its error history (with ``traceback`` when one was kept)."""

        def move(cur: Any) -> bool:
            where = "id = {p}" + ("" if owner is None else " AND reserved_by = {p}")
            params = [job_id] if owner is None else [job_id, owner]
            return self.steps.bury_locked(cur, where, params, error_type, error_message, traceback) == 1

        return self.db.run(move, write=True)

    def release(self, owner: str, ids: Sequence[int], *, refund: bool = True) -> int:
        """Give jobs back unrun (shutdown); ``refund`` returns the attempt counted at claim."""
        if not ids:
            return 0
        refund_sql = ", attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END" if refund else ""

        def update(cur: Any) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL"
                               + refund_sql + " WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.db.run(update)

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int:
        """Heartbeat: push the lease of running jobs forward; returns how many are still ours."""
        if not ids:
            return 0

        def update(cur: Any) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_until = {now_plus} WHERE reserved_by = {p} AND ") + match,
                        [float(lease), owner, *params])
            return int(cur.rowcount)

        return self.db.run(update)

    def recover_stale(self, job_ids: Sequence[int] | None = None) -> RecoveryReport:
        """Release jobs whose lease expired; bury those that have used every attempt.

        Attempts were counted at claim time, so a job that kills its worker every
        time reaches ``max_attempts`` and lands in the dead letter instead of looping.
        """

        def recover(cur: Any) -> RecoveryReport:
            sql = self.d.q("SELECT id, attempts, max_attempts FROM {jobs} WHERE reserved_by IS NOT NULL "
                         "AND reserved_until < {now}")
            params: list[Any] = []
            if job_ids is not None:
                if not job_ids:
                    return RecoveryReport([], [])
                sql += " AND id IN (" + self.d.marks(job_ids) + ")"
                params = list(job_ids)
            cur.execute(sql + self.d.lock_rows_skip, params)
            rows = cur.fetchall()
            # A lost lease comes back at once (no backoff) while attempts are left.
            release = [r[0] for r in rows if decide(r[1], r[2], None) is not None]
            bury = [r[0] for r in rows if decide(r[1], r[2], None) is None]
            if release:
                cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                   "last_error = {p} WHERE id IN (") + self.d.marks(release) + ")",
                            ["errands.LeaseExpired: the worker stopped heart-beating during this attempt", *release])
                self.steps.record_errors(cur, [Failure(r[0], as_int(r[1]), "errands.LeaseExpired",
                                                       "the worker stopped heart-beating during this attempt")
                                               for r in rows if r[0] in release])
            if bury:
                self.steps.bury_locked(cur, "id IN (" + self.d.marks(bury) + ")", bury, "errands.LeaseExpired",
                                  "the worker stopped heart-beating (it died or hung) during the last "
                                  "attempt, and no attempts are left")
            return RecoveryReport(release, bury)

        return self.db.run(recover, write=True)

    def reserved_by(self, owner: str) -> list[int]:
        """Ids of jobs ``owner`` holds (the supervisor asks this after a worker process died)."""

        def read(cur: Any) -> list[int]:
            cur.execute(self.d.q("SELECT id FROM {jobs} WHERE reserved_by = {p}"), (owner,))
            return sorted(int(r[0]) for r in cur.fetchall())

        return self.db.run(read)

    def force_release(self, owner: str, ids: Sequence[int], error_type: str, error_message: str,
                      backoff_for: Callable[[str], DelayFunction | None],
                      policy_for: Callable[[str], RetryPolicy] | None = None,
                      error: BaseException | None = None) -> tuple[list[int], list[int]]:
        """Fail the current attempt of jobs whose worker process was killed or died.

        Used by the supervisor.  The retry policy (:func:`errands.core.retry.decide`) sends each job
        back after its job's backoff (``backoff_for(name)``) or to the dead letter.  ``error``: the
        exception the attempt counts as having raised (a hard timeout's JobTimeout, which the job's
        ``retry_on`` / ``discard_on`` from ``policy_for(name)`` judge); None for a process that died.
        """

        def settle(cur: Any) -> tuple[list[int], list[int]]:
            if not ids:
                return [], []
            cur.execute(self.d.q("SELECT id, attempts, max_attempts, name FROM {jobs} WHERE reserved_by = {p} "
                               "AND id IN (") + self.d.marks(ids) + ")" + self.d.lock_rows, [owner, *ids])
            rows = cur.fetchall()
            delays = {r[0]: decide(r[1], r[2], backoff_for(r[3]), error=error,
                                   policy=DEFAULT_POLICY if policy_for is None else policy_for(r[3])) for r in rows}
            again = [job_id for job_id, delay in delays.items() if delay is not None]
            dead = [job_id for job_id, delay in delays.items() if delay is None]
            message = safe_text(f"{error_type}: {error_message}", ERROR_MESSAGE_CAP)
            for job_id in again:
                cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                   "available_at = {now_plus}, last_error = {p} WHERE id = {p}"),
                            (delays[job_id], message, job_id))
            attempts = {r[0]: as_int(r[1]) for r in rows}
            self.steps.record_errors(cur, [Failure(j, attempts[j], error_type, error_message) for j in again])
            if dead:
                self.steps.bury_locked(cur, "id IN (" + self.d.marks(dead) + ")", dead, error_type, error_message)
            return again, dead

        return self.db.run(settle, write=True)

    # ------------------------------------------------------------------ dead letter
    def list_failed(self, queue: str | None = None, limit: int = 100, offset: int = 0) -> list[FailedJobRow]:
        def read(cur: Any) -> list[FailedJobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.d.q("SELECT " + FAILED_COLUMNS + " FROM {failed}" + where +
                               " ORDER BY failed_at DESC, id DESC LIMIT {p} OFFSET {p}"),
                        [*params, int(limit), int(offset)])
            return [failed_row(self.d.to_datetime, r) for r in cur.fetchall()]

        return self.db.run(read)

    def get_failed(self, job_id: int) -> FailedJobRow | None:
        def read(cur: Any) -> FailedJobRow | None:
            cur.execute(self.d.q("SELECT " + FAILED_COLUMNS + " FROM {failed} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else failed_row(self.d.to_datetime, row)

        return self.db.run(read)

    def retry_failed(self, ids: Sequence[int] | None = None, *, queue: str | None = None) -> list[int]:
        """Move dead-letter entries back to ``jobs`` (fresh attempts, ready now), in one transaction.

        ``ids=None`` means every entry (of ``queue`` when given).
        """

        def move(cur: Any) -> list[int]:
            if ids is not None and not ids:
                return []
            where, params = self._failed_filter(ids, queue)
            cur.execute(self.d.q("SELECT id, flags, batch_id FROM {failed}") + where + self.d.lock_rows, params)
            rows = cur.fetchall()
            found = sorted(r[0] for r in rows)
            # A retried batch member is pending again (its batch's callbacks, if fired, do not fire twice).
            regained: dict[int, int] = {}
            for _, flags, batch_id in rows:
                if int(flags or 0) & FLAG_BATCH and batch_id is not None:
                    regained[int(batch_id)] = regained.get(int(batch_id), 0) + 1
            for batch_id, n in sorted(regained.items()):
                cur.execute(self.d.q("UPDATE {batches} SET failed = failed - {p} WHERE id = {p}"), (n, batch_id))
            for start in range(0, len(found), INSERT_CHUNK):
                chunk = found[start:start + INSERT_CHUNK]
                marks = self.d.marks(chunk)
                # A new job may hold the unique key meanwhile: the retried one then goes without it;
                # otherwise the key points at the retried job again.
                cur.execute(self.d.q("SELECT f.id, f.unique_key, j.id FROM {failed} f LEFT JOIN {unique_keys} k "
                                   "ON k.name = f.unique_key LEFT JOIN {jobs} j ON j.id = k.job_id "
                                   "WHERE f.unique_key IS NOT NULL AND f.id IN (") + marks + ")", chunk)
                for job_id, key, holder in cur.fetchall():
                    if holder is not None:
                        cur.execute(self.d.q("UPDATE {failed} SET unique_key = NULL WHERE id = {p}"), (job_id,))
                    else:
                        cur.execute(self.d.q(self.d.upsert("{unique_keys}", "name", ("job_id", "expires_at"))),
                                    (key, job_id, None))
                # The error history (errands_job_errors, keyed by id) stays: the retried job keeps it.
                cur.execute(self.d.q("INSERT INTO {jobs} (id, queue, name, payload, priority, attempts, max_attempts, "
                                   "timeout, available_at, created_at, last_error, unique_key, batch_id, "
                                   "concurrency_key, flags, label, cost) SELECT id, queue, name, payload, "
                                   "priority, 0, max_attempts, timeout, {now}, created_at, "
                                   "error_message, unique_key, batch_id, concurrency_key, flags, label, cost "
                                   "FROM {failed} WHERE id IN (") + marks + ")", chunk)
                cur.execute(self.d.q("DELETE FROM {failed} WHERE id IN (") + marks + ")", chunk)
            return found

        return self.db.run(move, write=True)

    def _failed_filter(self, ids: Sequence[int] | None, queue: str | None) -> tuple[str, list[Any]]:
        """`` WHERE ...`` selecting dead-letter entries by ids and/or queue (empty: all of them)."""
        clauses: list[str] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append("id IN (" + self.d.marks(ids) + ")")
            params += list(ids)
        if queue is not None:
            clauses.append("queue = " + self.d.placeholder)
            params.append(queue)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def forget_failed(self, ids: Sequence[int] | None = None, *, queue: str | None = None) -> int:
        """Delete dead-letter entries for good."""

        def delete(cur: Any) -> int:
            if ids is not None and not ids:
                return 0
            where, params = self._failed_filter(ids, queue)
            # The entries' error history goes with them (a forgotten job is gone for good).
            cur.execute(self.d.q("DELETE FROM {job_errors} WHERE job_id IN (SELECT id FROM {failed}") + where + ")",
                        params)
            cur.execute(self.d.q("DELETE FROM {failed}") + where, params)
            return int(cur.rowcount)

        return self.db.run(delete, write=True)

    def errors(self, job_id: int) -> list[ErrorRow]:
        """The error history of a job (waiting, in the dead letter, or ended with a kept record),
        oldest first: one entry per failed attempt, at most ``HISTORY_CAP`` (the latest)."""

        def read(cur: Any) -> list[ErrorRow]:
            cur.execute(self.d.q("SELECT job_id, attempt, failed_at, error_type, error_message, traceback "
                                 "FROM {job_errors} WHERE job_id = {p} ORDER BY id"), (job_id,))
            t = self.d.to_datetime
            return [ErrorRow(as_int(r[0]), as_int(r[1]), t(r[2]), r[3], r[4], r[5]) for r in cur.fetchall()]

        return self.db.run(read)

    def highest_job_id(self) -> int | None:
        """The highest job id this database has issued (0: none yet), from the id sequence itself,
        so a job that ran and left every table still counts; None when the database cannot tell."""

        def read(cur: Any) -> int | None:
            row = self.d.highest_id_row(cur)
            return None if row is None or row[0] is None else int(row[0])

        return self.db.run(read)

    def get_job(self, job_id: int) -> JobRow | None:
        def read(cur: Any) -> JobRow | None:
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else job_row(self.d.to_datetime, row)

        return self.db.run(read)

    def list_jobs(self, queue: str | None = None, limit: int = 100) -> list[JobRow]:
        def read(cur: Any) -> list[JobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs}" + where + " ORDER BY id LIMIT {p}"),
                        [*params, int(limit)])
            return [job_row(self.d.to_datetime, r) for r in cur.fetchall()]

        return self.db.run(read)

    def counts(self) -> dict[str, QueueCounts]:
        """Per-queue counts of every state, computed against the database clock."""

        def read(cur: Any) -> dict[str, QueueCounts]:
            cur.execute(self.d.q(
                "SELECT queue, "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                "THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now} "
                "THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until >= {now} THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until < {now} THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NOT NULL THEN 1 ELSE 0 END) "
                "FROM {jobs} GROUP BY queue"))
            result = {r[0]: QueueCounts(int(r[1] or 0), int(r[2] or 0), int(r[3] or 0), int(r[4] or 0),
                                        blocked=int(r[5] or 0))
                      for r in cur.fetchall()}
            cur.execute(self.d.q("SELECT queue, COUNT(*) FROM {failed} GROUP BY queue"))
            for queue, failed in cur.fetchall():
                base = result.get(queue, QueueCounts())
                result[queue] = QueueCounts(base.ready, base.delayed, base.running, base.stale, int(failed),
                                            base.blocked)
            return dict(sorted(result.items()))

        return self.db.run(read)
