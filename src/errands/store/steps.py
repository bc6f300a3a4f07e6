"""Statements that several stores run inside their own transactions, on the caller's cursor.

Enqueueing a job with features, finishing a batch member, burying a job: each is a few
statements that must commit with whatever else the calling verb does, so they take a
cursor and never open a transaction of their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.errors import StoreError
from ..core.payload import ERROR_TEXT_CAP, safe_text
from ..core.rows import FLAG_BATCH, FLAG_DEPENDENTS, FLAG_UNIQUE_PERIOD, JobState, NewJob, as_int
from .dialects.base import FAILED_COLUMNS, Dialect

ERROR_MESSAGE_CAP = ERROR_TEXT_CAP
RICH_COLUMNS = ("queue, name, payload, priority, attempts, max_attempts, timeout, available_at, created_at, "
                "unique_key, blocked_by, batch_id, concurrency_key, flags, label, cost")
RESULT_COLUMNS = "id, queue, name, state, result, attempts, batch_id, finished_at, expires_at, message, label"
MESSAGE_CAP = 2000
HISTORY_CAP = 100
"""Most entries of a job's error history kept (the latest): a job that fails 10,000 times keeps 100."""
TRACEBACK_CAP = 8192
"""Most characters of a traceback kept (its end, where the error is raised)."""
TRACEBACK_FRAMES = 50
"""Most lines of ``File ...`` frames kept from a traceback (its last ones)."""


class Failure(NamedTuple):
    """One failed attempt on its way to the error history."""

    job_id: int
    attempt: int
    error_type: str
    error_message: str
    traceback: str | None = None
    trim: bool = False
    """Trim the history to ``HISTORY_CAP`` now (done at least when a job is buried)."""


def trim_traceback(text: str) -> str:
    """A traceback cut to its last ``TRACEBACK_FRAMES`` frames and ``TRACEBACK_CAP`` characters,
    saying so on its first line; made storable (valid Unicode, no NUL)."""
    text = safe_text(text[-10 * TRACEBACK_CAP:] if isinstance(text, str) else text)
    lines = text.splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    cut = False
    if len(frames) > TRACEBACK_FRAMES:
        lines = lines[:1] + lines[frames[-TRACEBACK_FRAMES]:]
        cut = True
    out = "\n".join(lines)
    if len(out) > TRACEBACK_CAP:
        out = out[-TRACEBACK_CAP:]
        cut = True
    return ("[traceback trimmed to its last frames]\n" + out) if cut else out


def job_spec(job: NewJob) -> str:
    """A prepared job as JSON, to be enqueued later by the store (batch callbacks)."""
    spec = {"name": job.name, "queue": job.queue, "payload": job.payload, "priority": job.priority,
            "max_attempts": job.max_attempts, "timeout": job.timeout}
    if job.label is not None:
        spec["label"] = job.label
    return json.dumps(spec)


def job_from_spec(spec: str, batch_id: int) -> NewJob:
    d = json.loads(spec)
    return NewJob(d["name"], d["queue"], d["payload"], d["priority"], d["max_attempts"], d["timeout"],
                  batch_id=batch_id, label=d.get("label"))


class Steps:
    """Cursor-level steps shared by the job and feature stores (one dialect's SQL)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect

    def insert_rich(self, cur: Any, jobs: Sequence[NewJob]) -> list[int]:
        """Insert jobs that use a feature (unique key, dependency, batch, group, flags), in order.

        Runs inside a write transaction.  A job whose dependency has not succeeded yet is
        stored blocked; its dependency is marked so that finishing it unblocks the job.
        """
        row_sql = self.d.q("({p}, {p}, {p}, {p}, 0, {p}, {p}, COALESCE({p}, {now_plus}), {now}, "
                         "{p}, {p}, {p}, {p}, {p}, {p}, {p})")
        insert = self.d.q("INSERT INTO {jobs} (" + RICH_COLUMNS + ") VALUES ")
        ids: list[int] = []
        pending: list[tuple[int, list[Any]]] = []  # (position, params) of rows without a unique key

        def flush() -> None:
            if not pending:
                return
            params = [v for _, row in pending for v in row]
            if len(pending) == 1:
                got = [self.d.insert_one(cur, insert + row_sql, params)]
            else:
                got = self.d.insert_returning_ids(cur, insert + ", ".join([row_sql] * len(pending)), params,
                                                 len(pending))
            for (position, _), job_id in zip(pending, got, strict=True):
                ids[position] = job_id
            pending.clear()

        for j in jobs:
            blocked_by = None
            after = j.after
            if after is not None:
                if after < 0:  # a job earlier in this batch (-1: the one before)
                    flush()
                    after = ids[after]
                if self.dependency_pending(cur, after):
                    blocked_by = after
            params = [j.queue, j.name, j.payload, j.priority, j.max_attempts, j.timeout,
                      None if j.run_at is None else self.d.from_datetime(j.run_at), float(j.delay),
                      j.unique_key, blocked_by, j.batch_id, j.concurrency_key, j.flags, j.label, j.cost]
            ids.append(0)
            if j.unique_key is not None or blocked_by is not None:
                flush()  # keep order: a later row may depend on this one, or share its key
                if j.unique_key is not None:
                    ids[-1] = self.insert_unique(cur, insert + row_sql, params, j.unique_key, j.unique_for)
                else:
                    ids[-1] = self.d.insert_one(cur, insert + row_sql, params)
                if blocked_by is not None:
                    cur.execute(self.d.q(self.d.insert_ignore("{dependencies}", "parent_id, child_id")),
                                (blocked_by, ids[-1]))
            else:
                pending.append((len(ids) - 1, params))
        flush()
        self.d.after_insert(cur, {j.queue for j in jobs})
        return ids

    def insert_unique(self, cur: Any, sql: str, params: list[Any], key: str, period: float | None = None) -> int:
        """Insert one job carrying a unique key, or return the id of the job that holds the key:
        waiting or running, or ended less than its unique period (``unique_for``) ago.

        Keys live in ``errands_unique_keys`` (primary key: the key), pointing at their job.  A
        key whose job is gone (finished, buried, cancelled) is free: it is simply taken over,
        so no path that ends a plain unique job needs to know about keys.  A job with a unique
        period carries ``FLAG_UNIQUE_PERIOD``: the transaction that ends it stamps its key's
        ``expires_at`` (:meth:`stamp_unique_expiry`), and until then the key stays taken.  Two
        enqueuers racing for a new key meet on the key table's primary key: the loser removes
        the job row it had inserted and returns the winner's; for an existing key they meet on
        its row lock.
        """
        for _ in range(10):
            cur.execute(self.d.q("SELECT job_id, CASE WHEN expires_at > {now} THEN 1 ELSE 0 END "
                                 "FROM {unique_keys} WHERE name = {p}") + self.d.lock_rows, (key,))
            row = cur.fetchone()
            if row is not None:
                if row[1] == 1:  # the holder ended within its unique period
                    return int(row[0])
                cur.execute(self.d.q("SELECT id FROM {jobs} WHERE id = {p}"), (row[0],))
                if cur.fetchone() is not None:
                    return int(row[0])
                job_id = self.d.insert_one(cur, sql, params)
                cur.execute(self.d.q("UPDATE {unique_keys} SET job_id = {p}, period = {p}, expires_at = NULL "
                                     "WHERE name = {p}"), (job_id, period, key))
                return job_id
            job_id = self.d.insert_one(cur, sql, params)
            cur.execute(self.d.q(self.d.insert_ignore("{unique_keys}", "name, job_id, period")), (key, job_id, period))
            if cur.rowcount == 1:
                return job_id
            cur.execute(self.d.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))  # another enqueuer won
        raise StoreError(f"unique key {key!r} kept changing hands; try again")

    def stamp_unique_expiry(self, cur: Any, ids: Sequence[int]) -> None:
        """Jobs with a unique period (``FLAG_UNIQUE_PERIOD``) have ended: their keys stay taken
        until now plus the period (only the keys that still point at them)."""
        if ids:
            cur.execute(self.d.q("UPDATE {unique_keys} SET expires_at = " + self.d.plus_column_sql("period") +
                                 " WHERE period IS NOT NULL AND job_id IN (") + self.d.marks(ids) + ")", list(ids))

    def dependency_pending(self, cur: Any, parent: int) -> bool:
        """Whether a job depending on ``parent`` must wait; marks ``parent`` so that it unblocks it.

        Marking the parent's row also locks it until this transaction commits, so a worker
        finishing the parent meanwhile reads the mark back from its delete.  A parent in
        the dead letter (or cancelled) keeps its dependants blocked; one that is gone
        otherwise has succeeded (or its record expired).
        """
        cur.execute(self.d.q("UPDATE {jobs} SET flags = flags | {p} WHERE id = {p}"), (FLAG_DEPENDENTS, parent))
        if cur.rowcount:
            return True
        cur.execute(self.d.q("UPDATE {failed} SET flags = flags | {p} WHERE id = {p}"), (FLAG_DEPENDENTS, parent))
        if cur.rowcount:
            return True
        cur.execute(self.d.q("SELECT state FROM {results} WHERE id = {p}"), (parent,))
        row = cur.fetchone()
        return bool(row and row[0] == JobState.CANCELLED.value)

    def unblock(self, cur: Any, parents: Sequence[int]) -> int:
        """Release the jobs that waited for ``parents`` (which have just succeeded)."""
        marks = self.d.marks(parents)
        cur.execute(self.d.q("SELECT child_id FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        children = [int(r[0]) for r in cur.fetchall()]
        cur.execute(self.d.q("DELETE FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        if not children:
            return 0
        cur.execute(self.d.q("UPDATE {jobs} SET blocked_by = NULL WHERE id IN (") + self.d.marks(children) + ")",
                    children)
        self.d.after_unblock(cur, children)
        return len(children)

    def lock_name(self, cur: Any, name: str) -> None:
        """Serialise on ``name`` until the transaction ends (a row of the locks table)."""
        cur.execute(self.d.q(self.d.insert_ignore("{locks}", "name")), (name,))
        cur.execute(self.d.q("SELECT name FROM {locks} WHERE name = {p}") + self.d.lock_rows, (name,))
        cur.fetchall()

    def record_result(self, cur: Any, job_id: int, queue: str, name: str, state: JobState, result: str | None,
                       attempts: int, batch_id: int | None, ttl: float, message: str | None = None,
                       label: str | None = None) -> None:
        cur.execute(self.d.q("DELETE FROM {results} WHERE id = {p}"), (job_id,))  # a retried dead job ends again
        cur.execute(self.d.q("INSERT INTO {results} (" + RESULT_COLUMNS + ") VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
                           "{p}, {now}, {now_plus}, {p}, {p})"),
                    (job_id, queue, name, state.value, result, attempts, batch_id, float(ttl),
                     None if message is None else message[:MESSAGE_CAP], label))

    def count_in_batch(self, cur: Any, batch_id: int, *, done: int, failed: int) -> None:
        """Count finished members; the transaction that crosses a line fires its callback once.

        The UPDATE locks the batch row until commit, so two workers finishing the last two
        members at the same moment take turns here, and only the second sees the batch
        complete.  The ``... IS NULL`` conditions make each callback fire exactly once.
        """
        cur.execute(self.d.q("UPDATE {batches} SET done = done + {p}, failed = failed + {p} WHERE id = {p}"),
                    (done, failed, batch_id))
        cur.execute(self.d.q("SELECT total, done, failed, on_complete, on_failure, completed_at, failure_fired_at "
                           "FROM {batches} WHERE id = {p}"), (batch_id,))
        row = cur.fetchone()
        if row is None:
            return
        total, n_done, n_failed, on_complete, on_failure, completed_at, fired_at = row
        callbacks: list[NewJob] = []
        if n_failed and fired_at is None:
            cur.execute(self.d.q("UPDATE {batches} SET failure_fired_at = {now} WHERE id = {p} "
                               "AND failure_fired_at IS NULL"), (batch_id,))
            if cur.rowcount == 1 and on_failure:
                callbacks.append(job_from_spec(on_failure, batch_id))
        if n_done + n_failed >= total and completed_at is None:
            cur.execute(self.d.q("UPDATE {batches} SET completed_at = {now} WHERE id = {p} AND completed_at IS NULL"),
                        (batch_id,))
            if cur.rowcount == 1 and on_complete:
                callbacks.append(job_from_spec(on_complete, batch_id))
        if callbacks:
            self.insert_rich(cur, callbacks)

    def record_errors(self, cur: Any, failures: Sequence[Failure]) -> None:
        """Add failed attempts to their jobs' error history; keep at most ``HISTORY_CAP`` entries
        per job (the latest), trimmed only once a job has failed more often than that."""
        if not failures:
            return
        row = "({p}, {p}, {now}, {p}, {p}, {p})"
        cur.execute(self.d.q("INSERT INTO {job_errors} (job_id, attempt, failed_at, error_type, error_message, "
                             "traceback) VALUES " + ", ".join([row] * len(failures))),
                    [v for f in failures for v in (f.job_id, int(f.attempt), safe_text(f.error_type, 255),
                                                   safe_text(f.error_message, ERROR_MESSAGE_CAP),
                                                   None if f.traceback is None else trim_traceback(f.traceback))])
        for f in failures:
            if f.attempt > HISTORY_CAP or f.trim:
                cur.execute(self.d.q("SELECT id FROM {job_errors} WHERE job_id = {p} ORDER BY id DESC "
                                     "LIMIT 1 OFFSET {p}"), (f.job_id, HISTORY_CAP - 1))
                oldest_kept = cur.fetchone()
                if oldest_kept is not None:
                    cur.execute(self.d.q("DELETE FROM {job_errors} WHERE job_id = {p} AND id < {p}"),
                                (f.job_id, oldest_kept[0]))

    def bury_locked(self, cur: Any, where: str, params: Sequence[Any], error_type: str,
                     error_message: str, traceback: str | None = None) -> int:
        """Move the matching rows to the dead letter; a batch member counts as failed there.

        Jobs that depend on a buried one stay blocked (visible, not lost): they run if the
        buried job is retried and then succeeds.  Each buried job's last attempt joins its
        error history (with ``traceback`` when the caller kept one).
        """
        cur.execute(self.d.q("SELECT id, flags, batch_id, attempts FROM {jobs} WHERE " + where) + self.d.lock_rows,
                    params)
        rows = cur.fetchall()
        if not rows:
            return 0
        ids = [r[0] for r in rows]
        marks = self.d.marks(ids)
        cur.execute(self.d.q("INSERT INTO {failed} (" + FAILED_COLUMNS + ", unique_key, batch_id, concurrency_key, "
                           "flags) SELECT id, queue, name, payload, priority, attempts, max_attempts, timeout, "
                           "created_at, {now}, {p}, {p}, label, cost, unique_key, batch_id, concurrency_key, flags "
                           "FROM {jobs} WHERE id IN (") + marks + ")",
                    [safe_text(error_type, 255), safe_text(error_message, ERROR_MESSAGE_CAP), *ids])
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE id IN (") + marks + ")", ids)
        self.record_errors(cur, [Failure(int(r[0]), as_int(r[3]), error_type, error_message, traceback, trim=True)
                                 for r in rows])
        self.stamp_unique_expiry(cur, [r[0] for r in rows if int(r[1] or 0) & FLAG_UNIQUE_PERIOD])
        for r in rows:
            if int(r[1] or 0) & FLAG_BATCH and r[2] is not None:
                self.count_in_batch(cur, int(r[2]), done=0, failed=1)
        return len(ids)
