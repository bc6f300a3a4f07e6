"""Statements that several stores run inside their own transactions, on the caller's cursor.

Enqueueing a job with features, finishing a batch member, burying a job: each is a few
statements that must commit with whatever else the calling verb does, so they take a
cursor and never open a transaction of their own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.errors import StoreError
from ..core.payload import ERROR_TEXT_CAP, safe_text
from ..core.rows import FLAG_BATCH, FLAG_DEPENDENTS, JobState, NewJob
from .dialects.base import FAILED_COLUMNS, Dialect

ERROR_MESSAGE_CAP = ERROR_TEXT_CAP
RICH_COLUMNS = ("queue, name, payload, priority, attempts, max_attempts, timeout, available_at, created_at, "
                "unique_key, blocked_by, batch_id, concurrency_key, flags")
RESULT_COLUMNS = "id, queue, name, state, result, attempts, batch_id, finished_at, expires_at, message"
MESSAGE_CAP = 2000


def job_spec(job: NewJob) -> str:
    """A prepared job as JSON, to be enqueued later by the store (batch callbacks)."""
    return json.dumps({"name": job.name, "queue": job.queue, "payload": job.payload, "priority": job.priority,
                       "max_attempts": job.max_attempts, "timeout": job.timeout})


def job_from_spec(spec: str, batch_id: int) -> NewJob:
    d = json.loads(spec)
    return NewJob(d["name"], d["queue"], d["payload"], d["priority"], d["max_attempts"], d["timeout"],
                  batch_id=batch_id)


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
                         "{p}, {p}, {p}, {p}, {p})")
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
                      j.unique_key, blocked_by, j.batch_id, j.concurrency_key, j.flags]
            ids.append(0)
            if j.unique_key is not None or blocked_by is not None:
                flush()  # keep order: a later row may depend on this one, or share its key
                if j.unique_key is not None:
                    ids[-1] = self.insert_unique(cur, insert + row_sql, params, j.unique_key)
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

    def insert_unique(self, cur: Any, sql: str, params: list[Any], key: str) -> int:
        """Insert one job carrying a unique key, or return the id of the waiting or running job
        that holds the key.

        Keys live in ``errands_unique_keys`` (primary key: the key), pointing at their job.  A
        key whose job is gone (finished, buried, cancelled) is free: it is simply taken over,
        so no path that ends a job needs to know about keys, and plain jobs pay nothing.  Two
        enqueuers racing for a new key meet on the key table's primary key: the loser removes
        the job row it had inserted and returns the winner's.
        """
        for _ in range(10):
            cur.execute(self.d.q("SELECT job_id FROM {unique_keys} WHERE name = {p}") + self.d.lock_rows, (key,))
            row = cur.fetchone()
            if row is not None:
                cur.execute(self.d.q("SELECT id FROM {jobs} WHERE id = {p}"), (row[0],))
                if cur.fetchone() is not None:
                    return int(row[0])
                job_id = self.d.insert_one(cur, sql, params)
                cur.execute(self.d.q("UPDATE {unique_keys} SET job_id = {p} WHERE name = {p}"), (job_id, key))
                return job_id
            job_id = self.d.insert_one(cur, sql, params)
            cur.execute(self.d.q(self.d.insert_ignore("{unique_keys}", "name, job_id")), (key, job_id))
            if cur.rowcount == 1:
                return job_id
            cur.execute(self.d.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))  # another enqueuer won
        raise StoreError(f"unique key {key!r} kept changing hands; try again")

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
                       attempts: int, batch_id: int | None, ttl: float, message: str | None = None) -> None:
        cur.execute(self.d.q("DELETE FROM {results} WHERE id = {p}"), (job_id,))  # a retried dead job ends again
        cur.execute(self.d.q("INSERT INTO {results} (" + RESULT_COLUMNS + ") VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
                           "{p}, {now}, {now_plus}, {p})"),
                    (job_id, queue, name, state.value, result, attempts, batch_id, float(ttl),
                     None if message is None else message[:MESSAGE_CAP]))

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

    def bury_locked(self, cur: Any, where: str, params: Sequence[Any], error_type: str,
                     error_message: str) -> int:
        """Move the matching rows to the dead letter; a batch member counts as failed there.

        Jobs that depend on a buried one stay blocked (visible, not lost): they run if the
        buried job is retried and then succeeds.
        """
        cur.execute(self.d.q("SELECT id, flags, batch_id FROM {jobs} WHERE " + where) + self.d.lock_rows, params)
        rows = cur.fetchall()
        if not rows:
            return 0
        ids = [r[0] for r in rows]
        marks = self.d.marks(ids)
        cur.execute(self.d.q("INSERT INTO {failed} (" + FAILED_COLUMNS + ", unique_key, batch_id, concurrency_key, "
                           "flags) SELECT id, queue, name, payload, priority, attempts, max_attempts, timeout, "
                           "created_at, {now}, {p}, {p}, unique_key, batch_id, concurrency_key, flags FROM {jobs} "
                           "WHERE id IN (") + marks + ")",
                    [safe_text(error_type, 255), safe_text(error_message, ERROR_MESSAGE_CAP), *ids])
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE id IN (") + marks + ")", ids)
        for r in rows:
            if int(r[1] or 0) & FLAG_BATCH and r[2] is not None:
                self.count_in_batch(cur, int(r[2]), done=0, failed=1)
        return len(ids)
