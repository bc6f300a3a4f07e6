"""The life of a job up to its end: enqueue, claim, leases, release, the dead letter, and reading jobs.

How an attempt ends is written by :mod:`errands.store.endings`.  Invariants kept here (see
docs/architecture.md):

* every move between ``jobs`` and ``failed_jobs`` is one transaction that locks
  the rows it moves, so a job is never in both tables nor in neither;
* every lease change is conditional on ``reserved_by`` still naming the caller, so a
  worker that lost its lease changes nothing;
* time comparisons use the database clock (``{now}`` in the templates).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Sequence
from typing import Any

from ..core.columns import DEAD, Fill, names
from ..core.errors import StoreConflict
from ..core.payload import safe_text
from ..core.rows import FLAG_BATCH, ClaimedJob, ErrorRow, FailedJobRow, JobRow, NewJob, QueueCounts, all_plain, as_int
from ..core.runlogs import AttemptLog, decode_lines
from .database import Database
from .dialects.base import FAILED_COLUMNS, JOB_COLUMNS
from .dialects.inserts import INSERT_CHUNK, PLAIN
from .driver import Cursor, fetch_rows
from .steps import Steps

_new_claimed = functools.partial(tuple.__new__, ClaimedJob)
"""ClaimedJob from a claimed row without ``_make``'s Python-level length check (hundreds per
claim): every dialect's claim returns exactly CLAIM_COLUMNS (``columns.CLAIMED``)."""
_RETRIED = ", ".join("0" if c.fill is Fill.ZERO else c.name for c in DEAD)
"""What a dead-letter retry writes back of each column the dead letter kept: a fresh count of attempts."""


CLAIM_TRIES = 8
"""Tries of a claim that loses to concurrent transactions (a deadlock; on a multi-primary Galera cluster,
a certification failure at commit, which comes back as deadlock error 1213), each on a new transaction."""
CLAIM_PAUSE_FIRST = 0.004
"""Seconds before the second try of a claim that lost (before jitter); the pause doubles at each try."""
CLAIM_PAUSE_CAP = 0.25
CLAIM_SPREAD_CAP = 128
"""The most ready rows past the wanted ones that a retried claim picks among."""

_rng = random.Random()
"""errands' own generator: the application's ``random`` state (which its tests may seed) is never used."""


def claim_pause(attempt: int, rng: random.Random = _rng) -> float:
    """Seconds to wait before try ``attempt`` (2, 3, ...) of a claim that lost to concurrent transactions:
    4 ms doubling up to 250 ms, each drawn between half and all of it, so that claimers that collided
    do not collide again in step (eight tries span about half a second at most)."""
    return float(min(CLAIM_PAUSE_CAP, CLAIM_PAUSE_FIRST * 2 ** min(attempt - 2, 16)) * rng.uniform(0.5, 1.0))


def claim_spread(attempt: int, want: int) -> int:
    """How many ready rows past the ``want`` first ones try ``attempt`` of a claim picks among at random:
    none on the first try (the claim order exactly, as fast as ever), then a window that widens with each
    try, so that workers on different Galera nodes, which lock nothing of each other's and learn of a
    conflict only at commit, stop racing for the same rows."""
    return 0 if attempt <= 1 else min(CLAIM_SPREAD_CAP, max(want, 4) * (attempt - 1))


class JobStore:
    """Verbs over the jobs table and its dead letter."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    def enqueue(self, jobs: Sequence[NewJob], cursor: Cursor | None = None) -> list[int]:
        """Insert jobs with multi-row INSERTs; returns their ids in the given order.

        With ``cursor`` the rows are written on the caller's own connection and
        transaction, so they exist only if the caller commits.
        """
        if not jobs:
            return []
        rich = not all_plain(jobs)

        def insert(cur: Cursor) -> list[int]:
            return self.steps.insert_rich(cur, jobs) if rich else self.d.inserts.insert_jobs(cur, jobs, PLAIN)

        if cursor is not None:
            return self.db.on_cursor(insert, cursor, "enqueue")
        return self.db.run(insert, write=rich or len(jobs) >= self.d.transaction_from)

    def claim(self, owner: str, queues: Sequence[str], limit: int, lease: float) -> list[ClaimedJob]:
        """Reserve up to ``limit`` jobs, taking queues in the given order of preference."""
        rows: list[ClaimedJob] = []
        for queue in queues:
            want = limit - len(rows)
            if want <= 0:
                break
            try:
                got = self._claim_queue(owner, queue, want, lease)
            except StoreConflict:
                if rows:  # the earlier queues' claims committed: hand those out, not lose them to their leases
                    return rows
                raise
            rows.extend(map(_new_claimed, got))
        return rows

    def _claim_queue(self, owner: str, queue: str, want: int, lease: float) -> list[Any]:
        """One queue's claim; when it loses to concurrent transactions, tried again after a growing
        jittered pause (:func:`claim_pause`), picking among more ready rows each time
        (:func:`claim_spread`); StoreConflict after :data:`CLAIM_TRIES`."""
        for attempt in range(1, CLAIM_TRIES + 1):
            spread = claim_spread(attempt, want)

            def claim_one(cur: Cursor, spread: int = spread) -> list[Any]:
                return self.d.claim(cur, owner, queue, want, lease, spread=spread)

            try:
                return self.db.run(claim_one, write=self.d.claim_needs_transaction, attempts=1)
            except StoreConflict:
                if attempt == CLAIM_TRIES:
                    raise
                time.sleep(claim_pause(attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def explain_claim(self, queue: str = "default", limit: int = 10) -> str:
        """The database's plan for :meth:`~errands.store.dialects.base.Dialect.pick`, one line per plan row."""
        return self.db.run(lambda cur: self.explain_claim_in(cur, queue, limit))

    def explain_claim_in(self, cur: Cursor, queue: str = "default", limit: int = 10) -> str:
        """:meth:`explain_claim` on ``cur``: without the schema check of :meth:`run` (``errands
        doctor`` looks at a schema it must not migrate)."""
        pick, params = self.d.pick(queue, limit)
        cur.execute(self.d.explain_prefix + pick, params)
        return "\n".join(" | ".join("" if v is None else str(v) for v in row) for row in cur.fetchall())

    def release(self, owner: str, ids: Sequence[int], *, refund: bool = True) -> int:
        """Give jobs back unrun (shutdown); ``refund`` returns the attempt counted at claim."""
        if not ids:
            return 0
        refund_sql = ", attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END" if refund else ""

        def update(cur: Cursor) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL"
                               + refund_sql + " WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.db.run(update)

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int:
        """Heartbeat: push the lease of running jobs forward; returns how many are still ours."""
        if not ids:
            return 0

        def update(cur: Cursor) -> int:
            match, params = self.d.ids_match(ids)
            cur.execute(self.d.q("UPDATE {jobs} SET reserved_until = {now_plus} WHERE reserved_by = {p} AND ") + match,
                        [float(lease), owner, *params])
            return int(cur.rowcount)

        return self.db.run(update)

    def reserved_by(self, owner: str) -> list[int]:
        """Ids of jobs ``owner`` holds (the supervisor asks this after a worker process died)."""

        def read(cur: Cursor) -> list[int]:
            cur.execute(self.d.q("SELECT id FROM {jobs} WHERE reserved_by = {p}"), (owner,))
            return sorted(int(r["id"]) for r in fetch_rows(cur))

        return self.db.run(read)

    # ------------------------------------------------------------------ dead letter
    def list_failed(self, queue: str | None = None, limit: int = 100, offset: int = 0) -> list[FailedJobRow]:
        def read(cur: Cursor) -> list[FailedJobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.d.q("SELECT " + FAILED_COLUMNS + " FROM {failed}" + where +
                               " ORDER BY failed_at DESC, id DESC LIMIT {p} OFFSET {p}"),
                        [*params, int(limit), int(offset)])
            return [FailedJobRow.from_row(r, self.d.to_datetime) for r in cur.fetchall()]

        return self.db.run(read)

    def get_failed(self, job_id: int) -> FailedJobRow | None:
        def read(cur: Cursor) -> FailedJobRow | None:
            cur.execute(self.d.q("SELECT " + FAILED_COLUMNS + " FROM {failed} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else FailedJobRow.from_row(row, self.d.to_datetime)

        return self.db.run(read)

    def retry_failed(self, ids: Sequence[int] | None = None, *, queue: str | None = None) -> list[int]:
        """Move dead-letter entries back to ``jobs`` (fresh attempts, ready now), in one transaction.

        ``ids=None`` means every entry (of ``queue`` when given).
        """

        def move(cur: Cursor) -> list[int]:
            if ids is not None and not ids:
                return []
            where, params = self._failed_filter(ids, queue)
            cur.execute(self.d.q("SELECT id, flags, batch_id FROM {failed}") + where + self.d.lock_rows, params)
            rows = fetch_rows(cur)
            found = sorted(int(r["id"]) for r in rows)
            # A retried batch member is pending again (its batch's callbacks, if fired, do not fire twice).
            regained: dict[int, int] = {}
            for r in rows:
                if as_int(r["flags"]) & FLAG_BATCH and r["batch_id"] is not None:
                    regained[int(r["batch_id"])] = regained.get(int(r["batch_id"]), 0) + 1
            for batch_id, n in sorted(regained.items()):
                cur.execute(self.d.q("UPDATE {batches} SET failed = failed - {p} WHERE id = {p}"), (n, batch_id))
            for start in range(0, len(found), INSERT_CHUNK):
                chunk = found[start:start + INSERT_CHUNK]
                marks = self.d.marks(chunk)
                # A new job may hold the unique key meanwhile: the retried one then goes without it;
                # otherwise the key points at the retried job again.
                cur.execute(self.d.q("SELECT f.id AS id, f.unique_key AS unique_key, j.id AS holder FROM {failed} f "
                                     "LEFT JOIN {unique_keys} k ON k.name = f.unique_key LEFT JOIN {jobs} j "
                                     "ON j.id = k.job_id WHERE f.unique_key IS NOT NULL AND f.id IN (") + marks + ")",
                            chunk)
                for r in fetch_rows(cur):
                    if r["holder"] is not None:
                        cur.execute(self.d.q("UPDATE {failed} SET unique_key = NULL WHERE id = {p}"), (r["id"],))
                    else:
                        cur.execute(self.d.q(self.d.upsert("{unique_keys}", "name", ("job_id", "expires_at"))),
                                    (r["unique_key"], r["id"], None))
                # The error history (errands_job_errors, keyed by id) stays: the retried job keeps it.
                cur.execute(self.d.q("INSERT INTO {jobs} (" + names(DEAD) + ", available_at, last_error) SELECT "
                                     + _RETRIED + ", {now}, error_message FROM {failed} WHERE id IN (") + marks + ")",
                            chunk)
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

        def delete(cur: Cursor) -> int:
            if ids is not None and not ids:
                return 0
            where, params = self._failed_filter(ids, queue)
            # The entries' error history goes with them (a forgotten job is gone for good).
            cur.execute(self.d.q("DELETE FROM {job_errors} WHERE job_id IN (SELECT id FROM {failed}") + where + ")",
                        params)
            cur.execute(self.d.q("DELETE FROM {run_logs} WHERE job_id IN (SELECT id FROM {failed}") + where + ")",
                        params)
            cur.execute(self.d.q("DELETE FROM {failed}") + where, params)
            return int(cur.rowcount)

        return self.db.run(delete, write=True)

    def errors(self, job_id: int) -> list[ErrorRow]:
        """The error history of a job (waiting, in the dead letter, or ended with a kept record),
        oldest first: one entry per failed attempt, at most ``HISTORY_CAP`` (the latest)."""

        def read(cur: Cursor) -> list[ErrorRow]:
            cur.execute(self.d.q("SELECT job_id, attempt, failed_at, error_type, error_message, traceback "
                                 "FROM {job_errors} WHERE job_id = {p} ORDER BY id"), (job_id,))
            t = self.d.to_datetime
            return [ErrorRow(as_int(r["job_id"]), as_int(r["attempt"]), t(r["failed_at"]), r["error_type"],
                             r["error_message"], r["traceback"]) for r in fetch_rows(cur)]

        return self.db.run(read)

    def run_logs(self, job_id: int) -> list[AttemptLog]:
        """The log records a job's attempts emitted (kept while its error history is), oldest attempt
        first: at most ``RUN_LOG_CAP`` attempts (the latest)."""

        def read(cur: Cursor) -> list[AttemptLog]:
            cur.execute(self.d.q("SELECT job_id, attempt, worker, logged_at, dropped, records "
                                 "FROM {run_logs} WHERE job_id = {p} ORDER BY id"), (job_id,))
            t = self.d.to_datetime
            return [AttemptLog(as_int(r["job_id"]), as_int(r["attempt"]), None if r["worker"] is None
                               else safe_text(r["worker"], 255), t(r["logged_at"]), as_int(r["dropped"]),
                               decode_lines(r["records"])) for r in fetch_rows(cur)]

        return self.db.run(read)

    def highest_job_id(self) -> int | None:
        """The highest job id this database has issued (0: none yet), from the id sequence itself,
        so a job that ran and left every table still counts; None when the database cannot tell."""

        def read(cur: Cursor) -> int | None:
            return self.d.highest_id(cur)

        return self.db.run(read)

    def get_job(self, job_id: int) -> JobRow | None:
        def read(cur: Cursor) -> JobRow | None:
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else JobRow.from_row(row, self.d.to_datetime)

        return self.db.run(read)

    def list_jobs(self, queue: str | None = None, limit: int = 100) -> list[JobRow]:
        def read(cur: Cursor) -> list[JobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.d.q("SELECT " + JOB_COLUMNS + " FROM {jobs}" + where + " ORDER BY id LIMIT {p}"),
                        [*params, int(limit)])
            return [JobRow.from_row(r, self.d.to_datetime) for r in cur.fetchall()]

        return self.db.run(read)

    def counts(self) -> dict[str, QueueCounts]:
        """Per-queue counts of every state, computed against the database clock."""

        def read(cur: Cursor) -> dict[str, QueueCounts]:
            cur.execute(self.d.q(
                "SELECT queue, "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                "THEN 1 ELSE 0 END) AS n_ready, "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now} "
                "THEN 1 ELSE 0 END) AS n_delayed, "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until >= {now} THEN 1 ELSE 0 END) AS n_running, "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until < {now} THEN 1 ELSE 0 END) AS n_stale, "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NOT NULL THEN 1 ELSE 0 END) AS n_blocked "
                "FROM {jobs} GROUP BY queue"))
            states = ("ready", "delayed", "running", "stale", "blocked")
            result = {r["queue"]: QueueCounts(**{k: int(r["n_" + k] or 0) for k in states}) for r in fetch_rows(cur)}
            cur.execute(self.d.q("SELECT queue, COUNT(*) AS failed FROM {failed} GROUP BY queue"))
            for r in fetch_rows(cur):
                base = result.get(r["queue"], QueueCounts())
                result[r["queue"]] = QueueCounts(base.ready, base.delayed, base.running, base.stale, int(r["failed"]),
                                                 base.blocked)
            return dict(sorted(result.items()))

        return self.db.run(read)
