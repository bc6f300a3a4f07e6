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

This is a mixin of :class:`~errands.store.base.SQLStore`; dialect modules supply the
few statements that differ (``_insert_unique``, ``_insert_ignore``, ``_upsert``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.errors import BadPayload, StoreError
from ..core.payload import decode_result, for_display
from ..core.rows import (
    FLAG_BATCH,
    FLAG_DEPENDENTS,
    FLAG_RESULT,
    BatchRow,
    JobState,
    NewJob,
    ResultRow,
    as_int,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import Protocol, TypeVar

    T = TypeVar("T")

    class _Base(Protocol):
        """What these verbs use of :class:`~errands.store.base.SQLStore` (for type checkers only)."""

        dialect: str
        placeholder: str
        lock_rows: str
        like_escape: str

        def run(self, fn: Callable[[Any], T], *, write: bool = False, attempts: int = 8) -> T: ...
        def q(self, template: str) -> str: ...
        def _in(self, values: Sequence[Any]) -> str: ...
        def now_sql(self) -> str: ...
        def to_datetime(self, value: Any) -> datetime: ...
        def from_datetime(self, value: datetime) -> Any: ...
        def _insert_returning_ids(self, cur: Any, sql: str, params: list[Any], count: int) -> list[int]: ...
        def _insert_one(self, cur: Any, sql: str, params: Sequence[Any]) -> int: ...
else:
    _Base = object

RICH_COLUMNS = ("queue, name, payload, priority, attempts, max_attempts, timeout, available_at, created_at, "
                "unique_key, blocked_by, batch_id, concurrency_key, flags")
RESULT_COLUMNS = "id, queue, name, state, result, attempts, batch_id, finished_at, expires_at, message"
BATCH_COLUMNS = "id, kind, total, done, failed, created_at, completed_at, failure_fired_at"
MESSAGE_CAP = 2000


class Finished(NamedTuple):
    """A successful run whose end must be recorded beyond deleting its row."""

    id: int
    flags: int
    batch_id: int | None
    result: str | None
    """The return value as JSON (kept when ``FLAG_RESULT``)."""
    result_ttl: float


class Limit(NamedTuple):
    """One constraint a claimed run must pass before it may start."""

    kind: str
    """"rate" (at most ``limit`` starts per ``period`` seconds) or "concurrency" (at most ``limit`` running)."""
    name: str
    """The lock and counter key: the job name for rates, the group key for concurrency."""
    limit: int
    period: float = 0.0


def job_spec(job: NewJob) -> str:
    """A prepared job as JSON, to be enqueued later by the store (batch callbacks)."""
    return json.dumps({"name": job.name, "queue": job.queue, "payload": job.payload, "priority": job.priority,
                       "max_attempts": job.max_attempts, "timeout": job.timeout})


def job_from_spec(spec: str, batch_id: int) -> NewJob:
    d = json.loads(spec)
    return NewJob(d["name"], d["queue"], d["payload"], d["priority"], d["max_attempts"], d["timeout"],
                  batch_id=batch_id)


class FeatureVerbs(_Base):
    # ------------------------------------------------------------------ dialect hooks
    def _insert_unique(self, cur: Any, sql: str, params: list[Any], key: str) -> int:
        """Insert one job carrying a unique key, or return the id of the waiting or running job
        that holds the key.

        Keys live in ``errands_unique_keys`` (primary key: the key), pointing at their job.  A
        key whose job is gone (finished, buried, cancelled) is free: it is simply taken over,
        so no path that ends a job needs to know about keys, and plain jobs pay nothing.  Two
        enqueuers racing for a new key meet on the key table's primary key: the loser removes
        the job row it had inserted and returns the winner's.
        """
        for _ in range(10):
            cur.execute(self.q("SELECT job_id FROM {unique_keys} WHERE name = {p}") + self.lock_rows, (key,))
            row = cur.fetchone()
            if row is not None:
                cur.execute(self.q("SELECT id FROM {jobs} WHERE id = {p}"), (row[0],))
                if cur.fetchone() is not None:
                    return int(row[0])
                job_id = self._insert_one(cur, sql, params)
                cur.execute(self.q("UPDATE {unique_keys} SET job_id = {p} WHERE name = {p}"), (job_id, key))
                return job_id
            job_id = self._insert_one(cur, sql, params)
            cur.execute(self.q(self._insert_ignore("{unique_keys}", "name, job_id")), (key, job_id))
            if cur.rowcount == 1:
                return job_id
            cur.execute(self.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))  # another enqueuer won
        raise StoreError(f"unique key {key!r} kept changing hands; try again")

    def _insert_ignore(self, table: str, columns: str) -> str:
        """``INSERT`` of one row that does nothing if its key exists (SQLite and PostgreSQL syntax)."""
        marks = ", ".join(self.placeholder for _ in columns.split(","))
        return f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"

    def _upsert(self, table: str, key: str, columns: Sequence[str]) -> str:
        """``INSERT`` of one row (key first) that updates ``columns`` if the key exists."""
        marks = ", ".join(self.placeholder for _ in range(len(columns) + 1))
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns)
        return (f"INSERT INTO {table} ({key}, {', '.join(columns)}) VALUES ({marks}) "
                f"ON CONFLICT ({key}) DO UPDATE SET {updates}")

    def _lock_name(self, cur: Any, name: str) -> None:
        """Serialise on ``name`` until the transaction ends (a row of the locks table)."""
        cur.execute(self.q(self._insert_ignore("{locks}", "name")), (name,))
        cur.execute(self.q("SELECT name FROM {locks} WHERE name = {p}") + self.lock_rows, (name,))
        cur.fetchall()

    # ------------------------------------------------------------------ enqueue with features
    def _insert_rich(self, cur: Any, jobs: Sequence[NewJob]) -> list[int]:
        """Insert jobs that use a feature (unique key, dependency, batch, group, flags), in order.

        Runs inside a write transaction.  A job whose dependency has not succeeded yet is
        stored blocked; its dependency is marked so that finishing it unblocks the job.
        """
        row_sql = self.q("({p}, {p}, {p}, {p}, 0, {p}, {p}, COALESCE({p}, {now_plus}), {now}, "
                         "{p}, {p}, {p}, {p}, {p})")
        insert = self.q("INSERT INTO {jobs} (" + RICH_COLUMNS + ") VALUES ")
        ids: list[int] = []
        pending: list[tuple[int, list[Any]]] = []  # (position, params) of rows without a unique key

        def flush() -> None:
            if not pending:
                return
            params = [v for _, row in pending for v in row]
            if len(pending) == 1:
                got = [self._insert_one(cur, insert + row_sql, params)]
            else:
                got = self._insert_returning_ids(cur, insert + ", ".join([row_sql] * len(pending)), params,
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
                if self._dependency_pending(cur, after):
                    blocked_by = after
            params = [j.queue, j.name, j.payload, j.priority, j.max_attempts, j.timeout,
                      None if j.run_at is None else self.from_datetime(j.run_at), float(j.delay),
                      j.unique_key, blocked_by, j.batch_id, j.concurrency_key, j.flags]
            ids.append(0)
            if j.unique_key is not None or blocked_by is not None:
                flush()  # keep order: a later row may depend on this one, or share its key
                if j.unique_key is not None:
                    ids[-1] = self._insert_unique(cur, insert + row_sql, params, j.unique_key)
                else:
                    ids[-1] = self._insert_one(cur, insert + row_sql, params)
                if blocked_by is not None:
                    cur.execute(self.q(self._insert_ignore("{dependencies}", "parent_id, child_id")),
                                (blocked_by, ids[-1]))
            else:
                pending.append((len(ids) - 1, params))
        flush()
        return ids

    def _insert_one(self, cur: Any, sql: str, params: Sequence[Any]) -> int:
        """Insert one row and return its id (the driver's last-insert id; PostgreSQL: RETURNING)."""
        cur.execute(sql, params)
        return int(cur.lastrowid)

    def _dependency_pending(self, cur: Any, parent: int) -> bool:
        """Whether a job depending on ``parent`` must wait; marks ``parent`` so that it unblocks it.

        Marking the parent's row also locks it until this transaction commits, so a worker
        finishing the parent meanwhile reads the mark back from its delete.  A parent in
        the dead letter (or cancelled) keeps its dependants blocked; one that is gone
        otherwise has succeeded (or its record expired).
        """
        cur.execute(self.q("UPDATE {jobs} SET flags = flags | {p} WHERE id = {p}"), (FLAG_DEPENDENTS, parent))
        if cur.rowcount:
            return True
        cur.execute(self.q("UPDATE {failed} SET flags = flags | {p} WHERE id = {p}"), (FLAG_DEPENDENTS, parent))
        if cur.rowcount:
            return True
        cur.execute(self.q("SELECT state FROM {results} WHERE id = {p}"), (parent,))
        row = cur.fetchone()
        return bool(row and row[0] == JobState.CANCELLED.value)

    def _unblock(self, cur: Any, parents: Sequence[int]) -> int:
        """Release the jobs that waited for ``parents`` (which have just succeeded)."""
        marks = self._in(parents)
        cur.execute(self.q("SELECT child_id FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        children = [int(r[0]) for r in cur.fetchall()]
        cur.execute(self.q("DELETE FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        if not children:
            return 0
        cur.execute(self.q("UPDATE {jobs} SET blocked_by = NULL WHERE id IN (") + self._in(children) + ")", children)
        self._after_unblock(cur, children)
        return len(children)

    def _after_unblock(self, cur: Any, children: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """Dialect hook: wake idle workers (PostgreSQL notifies)."""

    def sweep_blocked(self, limit: int = 1000) -> int:
        """Unblock jobs whose dependency is gone and did not fail (a safety net: normally the
        worker that finishes the dependency unblocks them at once), and forget dependencies
        of jobs that are gone (a blocked job that was cancelled)."""

        def sweep(cur: Any) -> int:
            cur.execute(self.q(
                "SELECT d.parent_id FROM {dependencies} d WHERE "
                "NOT EXISTS (SELECT 1 FROM {jobs} p WHERE p.id = d.parent_id) "
                "AND NOT EXISTS (SELECT 1 FROM {failed} f WHERE f.id = d.parent_id) "
                "AND NOT EXISTS (SELECT 1 FROM {results} r WHERE r.id = d.parent_id AND r.state = 'cancelled') "
                "LIMIT {p}"), (int(limit),))
            parents = sorted({int(r[0]) for r in cur.fetchall()})
            released = self._unblock(cur, parents) if parents else 0
            cur.execute(self.q("DELETE FROM {dependencies} WHERE NOT EXISTS "
                               "(SELECT 1 FROM {jobs} c WHERE c.id = {dependencies}.child_id)"))
            return released

        return self.run(sweep, write=True)

    # ------------------------------------------------------------------ finishing with records
    def finish(self, owner: str, runs: Sequence[Finished]) -> int:
        """Record successful runs that keep a result, belong to a batch or have dependants, in
        one transaction with their delete: a result is never lost, a batch never counts a run
        twice, and dependants are released at once."""
        if not runs:
            return 0

        def record(cur: Any) -> int:
            by_id = {r.id: r for r in runs}
            ids = list(by_id)
            cur.execute(self.q("SELECT id, queue, name, attempts, flags, batch_id FROM {jobs} WHERE reserved_by = {p} "
                               "AND id IN (") + self._in(ids) + ")" + self.lock_rows, [owner, *ids])
            rows = cur.fetchall()
            if not rows:
                return 0
            for job_id, queue, name, attempts, flags, batch_id in rows:
                run = by_id[job_id]
                if flags & FLAG_RESULT:
                    self._record_result(cur, job_id, queue, name, JobState.SUCCEEDED, run.result, int(attempts),
                                        batch_id, run.result_ttl)
            mine = [r[0] for r in rows]
            cur.execute(self.q("DELETE FROM {jobs} WHERE id IN (") + self._in(mine) + ")", mine)
            batches: dict[int, int] = {}
            for r in rows:
                if r[4] & FLAG_BATCH and r[5] is not None:
                    batches[int(r[5])] = batches.get(int(r[5]), 0) + 1
            for batch_id, count in sorted(batches.items()):
                self._count_in_batch(cur, batch_id, done=count, failed=0)
            parents = [r[0] for r in rows if r[4] & FLAG_DEPENDENTS]
            if parents:
                self._unblock(cur, parents)
            return len(rows)

        return self.run(record, write=True)

    def _record_result(self, cur: Any, job_id: int, queue: str, name: str, state: JobState, result: str | None,
                       attempts: int, batch_id: int | None, ttl: float, message: str | None = None) -> None:
        cur.execute(self.q("DELETE FROM {results} WHERE id = {p}"), (job_id,))  # a retried dead job ends again
        cur.execute(self.q("INSERT INTO {results} (" + RESULT_COLUMNS + ") VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
                           "{p}, {now}, {now_plus}, {p})"),
                    (job_id, queue, name, state.value, result, attempts, batch_id, float(ttl),
                     None if message is None else message[:MESSAGE_CAP]))

    def get_result(self, job_id: int) -> ResultRow | None:
        def read(cur: Any) -> ResultRow | None:
            cur.execute(self.q("SELECT " + RESULT_COLUMNS + " FROM {results} WHERE id = {p}"), (job_id,))
            r = cur.fetchone()
            if r is None:
                return None
            t = self.to_datetime
            value, undecodable = None, False
            if r[4] is not None:
                try:
                    value = decode_result(r[4])
                except BadPayload:
                    value, undecodable = for_display(r[4]), True
            state = JobState.CANCELLED if r[3] == JobState.CANCELLED.value else JobState.SUCCEEDED
            return ResultRow(as_int(r[0]), r[1], r[2], state, value, as_int(r[5]),
                             None if r[6] is None else as_int(r[6]), t(r[7]), t(r[8]), r[9], undecodable)

        return self.run(read)

    # ------------------------------------------------------------------ batches
    def create_batch(self, kind: str, jobs: Sequence[NewJob], on_complete: NewJob | None,
                     on_failure: NewJob | None) -> tuple[int, list[int]]:
        """Store a batch row and its members in one transaction; a chain's members each wait
        for the one before.  Returns the batch id and the members' ids."""

        def create(cur: Any) -> tuple[int, list[int]]:
            sql = self.q("INSERT INTO {batches} (kind, total, done, failed, on_complete, on_failure, created_at) "
                         "VALUES ({p}, {p}, 0, 0, {p}, {p}, {now})")
            params = (kind, len(jobs), None if on_complete is None else job_spec(on_complete),
                      None if on_failure is None else job_spec(on_failure))
            batch_id = self._insert_one(cur, sql, list(params))
            members = []
            for position, j in enumerate(jobs):
                after = j.after if kind != "chain" or position == 0 else -1
                members.append(j._replace(batch_id=batch_id, flags=j.flags | FLAG_BATCH, after=after))
            return batch_id, self._insert_rich(cur, members)

        return self.run(create, write=True)

    def _count_in_batch(self, cur: Any, batch_id: int, *, done: int, failed: int) -> None:
        """Count finished members; the transaction that crosses a line fires its callback once.

        The UPDATE locks the batch row until commit, so two workers finishing the last two
        members at the same moment take turns here, and only the second sees the batch
        complete.  The ``... IS NULL`` conditions make each callback fire exactly once.
        """
        cur.execute(self.q("UPDATE {batches} SET done = done + {p}, failed = failed + {p} WHERE id = {p}"),
                    (done, failed, batch_id))
        cur.execute(self.q("SELECT total, done, failed, on_complete, on_failure, completed_at, failure_fired_at "
                           "FROM {batches} WHERE id = {p}"), (batch_id,))
        row = cur.fetchone()
        if row is None:
            return
        total, n_done, n_failed, on_complete, on_failure, completed_at, fired_at = row
        callbacks: list[NewJob] = []
        if n_failed and fired_at is None:
            cur.execute(self.q("UPDATE {batches} SET failure_fired_at = {now} WHERE id = {p} "
                               "AND failure_fired_at IS NULL"), (batch_id,))
            if cur.rowcount == 1 and on_failure:
                callbacks.append(job_from_spec(on_failure, batch_id))
        if n_done + n_failed >= total and completed_at is None:
            cur.execute(self.q("UPDATE {batches} SET completed_at = {now} WHERE id = {p} AND completed_at IS NULL"),
                        (batch_id,))
            if cur.rowcount == 1 and on_complete:
                callbacks.append(job_from_spec(on_complete, batch_id))
        if callbacks:
            self._insert_rich(cur, callbacks)

    def get_batch(self, batch_id: int) -> BatchRow | None:
        def read(cur: Any) -> BatchRow | None:
            cur.execute(self.q("SELECT " + BATCH_COLUMNS + " FROM {batches} WHERE id = {p}"), (batch_id,))
            r = cur.fetchone()
            if r is None:
                return None
            t = self.to_datetime
            return BatchRow(int(r[0]), r[1], int(r[2]), int(r[3]), int(r[4]), t(r[5]),
                            None if r[6] is None else t(r[6]), None if r[7] is None else t(r[7]))

        return self.run(read)

    # ------------------------------------------------------------------ cancellation
    def cancel(self, job_id: int, record_ttl: float, *, waiting_only: bool = False,
               message: str = "cancelled before it ran") -> str:
        """Cancel a job: "cancelled" (it was waiting and never runs), "requested" (it is running:
        its handler sees the request at its next check) or "gone" (it already ended).

        ``waiting_only``: leave a running job alone ("running"), decided under the row lock, so
        a job a worker claimed a moment ago is not cancelled behind the caller's back."""

        def cancel(cur: Any) -> str:
            cur.execute(self.q("SELECT reserved_by, queue, name, attempts, flags, batch_id FROM {jobs} "
                               "WHERE id = {p}") + self.lock_rows, (job_id,))
            row = cur.fetchone()
            if row is None:
                return "gone"
            if row[0] is not None:
                if waiting_only:
                    return "running"
                cur.execute(self.q("UPDATE {jobs} SET cancel_requested_at = {now} WHERE id = {p}"), (job_id,))
                return "requested"
            self._end_cancelled(cur, job_id, row[1], row[2], int(row[3]), int(row[4]), row[5], record_ttl, message)
            return "cancelled"

        return self.run(cancel, write=True)

    def settle_cancelled(self, owner: str, job_id: int, record_ttl: float, message: str) -> bool:
        """Record a run that stopped because it was cancelled (only if ``owner`` still holds it)."""

        def settle(cur: Any) -> bool:
            cur.execute(self.q("SELECT queue, name, attempts, flags, batch_id FROM {jobs} WHERE id = {p} "
                               "AND reserved_by = {p}") + self.lock_rows, (job_id, owner))
            row = cur.fetchone()
            if row is None:
                return False
            self._end_cancelled(cur, job_id, row[0], row[1], int(row[2]), int(row[3]), row[4], record_ttl, message)
            return True

        return self.run(settle, write=True)

    def _end_cancelled(self, cur: Any, job_id: int, queue: str, name: str, attempts: int, flags: int,
                       batch_id: int | None, ttl: float, message: str) -> None:
        self._record_result(cur, job_id, queue, name, JobState.CANCELLED, None, attempts, batch_id, ttl, message)
        cur.execute(self.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))
        if flags & FLAG_BATCH and batch_id is not None:
            self._count_in_batch(cur, int(batch_id), done=0, failed=1)

    def cancel_requests(self, owner: str) -> list[int]:
        """Ids of ``owner``'s jobs whose cancellation was requested."""

        def read(cur: Any) -> list[int]:
            cur.execute(self.q("SELECT id FROM {jobs} WHERE reserved_by = {p} AND cancel_requested_at IS NOT NULL"),
                        (owner,))
            return [int(r[0]) for r in cur.fetchall()]

        return self.run(read)

    def cancel_requested(self, job_id: int) -> bool:
        def read(cur: Any) -> bool:
            cur.execute(self.q("SELECT cancel_requested_at FROM {jobs} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return row is not None and row[0] is not None

        return self.run(read)

    # ------------------------------------------------------------------ progress
    def set_progress(self, owner: str, job_id: int, fraction: float, message: str | None) -> bool:
        def update(cur: Any) -> bool:
            cur.execute(self.q("UPDATE {jobs} SET progress = {p}, progress_message = {p} WHERE id = {p} "
                               "AND reserved_by = {p}"),
                        (float(fraction), None if message is None else message[:255], job_id, owner))
            return cur.rowcount == 1

        return self.run(update)

    # ------------------------------------------------------------------ queues
    def set_paused(self, queue: str, paused: bool) -> None:
        self.run(lambda cur: cur.execute(self.q(self._upsert("{queues}", "name", ("paused", "changed_at"))),
                                         (queue, 1 if paused else 0, self.from_datetime(self._now_in(cur)))),
                 write=True)
        self._paused_until = 0.0  # a store that caches the paused queues (MySQL) reads them again

    _paused_until = 0.0

    def _now_in(self, cur: Any) -> datetime:
        cur.execute("SELECT " + self.now_sql())
        return self.to_datetime(cur.fetchone()[0])

    def paused_queues(self) -> list[str]:
        def read(cur: Any) -> list[str]:
            cur.execute(self.q("SELECT name FROM {queues} WHERE paused = 1 ORDER BY name"))
            return [r[0] for r in cur.fetchall()]

        return self.run(read)

    # ------------------------------------------------------------------ periodic schedules
    def claim_periodic_slot(self, name: str, slot: datetime, job: NewJob) -> int | None:
        """Enqueue ``job`` for ``slot`` unless a scheduler already did (or a later slot ran).

        A schedule seen for the first time only records ``slot``: it starts with the next
        one.  After downtime the latest missed slot is enqueued, once.  Returns the
        enqueued job's id, or None.
        """

        def claim(cur: Any) -> int | None:
            stored = self.from_datetime(slot)
            cur.execute(self.q(self._insert_ignore("{periodic}", "name, last_slot, updated_at")),
                        (name, stored, stored))
            cur.execute(self.q("UPDATE {periodic} SET last_slot = {p}, updated_at = {now} WHERE name = {p} "
                               "AND (last_slot IS NULL OR last_slot < {p})"), (stored, name, stored))
            if cur.rowcount != 1:
                return None
            return self._insert_rich(cur, [job])[0]

        return self.run(claim, write=True)

    def periodic_slots(self) -> dict[str, datetime | None]:
        def read(cur: Any) -> dict[str, datetime | None]:
            cur.execute(self.q("SELECT name, last_slot FROM {periodic} ORDER BY name"))
            return {r[0]: None if r[1] is None else self.to_datetime(r[1]) for r in cur.fetchall()}

        return self.run(read)

    # ------------------------------------------------------------------ admission
    def admit(self, owner: str, runs: Sequence[tuple[int, Sequence[Limit]]],
              concurrency_retry: float = 0.5) -> tuple[list[int], list[int]]:
        """Decide which claimed runs may start now; the others go back to the queue unrun.

        A concurrency limit counts the group's runs that are admitted and whose lease is
        alive (a dead worker's runs stop counting when their lease expires); a rate limit
        counts the starts recorded in the last ``period`` seconds.  Each limit is taken
        under its lock row, in name order (no deadlocks).  Refused runs get their attempt
        back and become due when a start may be free: at the end of the rate window, or
        ``concurrency_retry`` seconds later.
        """
        if not runs:
            return [], []

        def decide(cur: Any) -> tuple[list[int], list[int]]:
            names = sorted({(lim.kind, lim.name) for _, limits in runs for lim in limits})
            for kind, name in names:
                self._lock_name(cur, f"{kind}:{name}")
            ours = [job_id for job_id, _ in runs]
            refused: dict[int, float] = {}
            grouped: list[tuple[int, str]] = []
            by_limit: dict[tuple[str, str], list[tuple[int, Limit]]] = {}
            for job_id, limits in runs:
                for lim in limits:
                    by_limit.setdefault((lim.kind, lim.name), []).append((job_id, lim))
            # Concurrency first: it only reads, so a run it refuses consumes no rate start.
            for (kind, name), members in sorted(by_limit.items()):
                if kind != "concurrency":
                    continue
                limit = members[0][1].limit
                # Runs of the group are found through errands_group_runs (written here, at admission),
                # so the jobs table needs no index on the group for this count.
                cur.execute(self.q("SELECT COUNT(*) FROM {group_runs} g JOIN {jobs} j ON j.id = g.job_id "
                                   "WHERE g.name = {p} AND j.reserved_by IS NOT NULL AND j.reserved_until >= {now} "
                                   "AND j.admitted_at >= j.reserved_at AND j.id NOT IN (")
                            + self._in(ours) + ")", [name, *ours])
                free = limit - int(cur.fetchone()[0])
                for job_id, _ in members:
                    if job_id in refused:
                        continue
                    if free > 0:
                        free -= 1
                        grouped.append((job_id, name))
                    else:
                        refused[job_id] = concurrency_retry
            for (kind, name), members in sorted(by_limit.items()):
                if kind != "rate":
                    continue
                lim = members[0][1]
                cur.execute(self.q("SELECT COUNT(*), MIN(started_at) FROM {rate_starts} WHERE name = {p} "
                                   "AND started_at > {now_plus}"), (name, -float(lim.period)))
                count, oldest = cur.fetchone()
                free = lim.limit - int(count)
                wait = float(lim.period)
                if oldest is not None:
                    wait = max(0.05, (self.to_datetime(oldest) - self._now_in(cur)).total_seconds() + lim.period)
                for job_id, _ in members:
                    if job_id in refused:
                        continue
                    if free > 0:
                        free -= 1
                        cur.execute(self.q("INSERT INTO {rate_starts} (name, started_at) VALUES ({p}, {now})"),
                                    (name,))
                    else:
                        refused[job_id] = max(refused.get(job_id, 0.0), wait)
            admitted = [job_id for job_id in ours if job_id not in refused]
            for job_id, name in grouped:
                if job_id not in refused:
                    cur.execute(self.q(self._insert_ignore("{group_runs}", "job_id, name")), (job_id, name))
            if admitted:
                cur.execute(self.q("UPDATE {jobs} SET admitted_at = {now} WHERE reserved_by = {p} AND id IN (")
                            + self._in(admitted) + ")", [owner, *admitted])
            for job_id, wait in refused.items():
                cur.execute(self.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                   "attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END, "
                                   "available_at = {now_plus} WHERE id = {p} AND reserved_by = {p}"),
                            (float(wait), job_id, owner))
            return admitted, list(refused)

        return self.run(decide, write=True)

    # ------------------------------------------------------------------ retention
    def prune(self, failed_ttl: float | None) -> dict[str, int]:
        """Forget expired results, old rate-limit starts, finished batches and (when
        ``failed_ttl`` is set) dead-letter entries older than that many seconds."""

        def delete(cur: Any) -> dict[str, int]:
            out = {}
            cur.execute(self.q("DELETE FROM {results} WHERE expires_at < {now}"))
            out["results"] = int(cur.rowcount)
            cur.execute(self.q("DELETE FROM {rate_starts} WHERE started_at < {now_plus}"), (-2 * 86400.0,))
            out["rate_starts"] = int(cur.rowcount)
            for table in ("{group_runs}", "{unique_keys}"):  # rows of jobs that are gone
                cur.execute(self.q(f"DELETE FROM {table} WHERE NOT EXISTS "
                                   f"(SELECT 1 FROM {{jobs}} j WHERE j.id = {table}.job_id)"))
            if failed_ttl is not None:
                cur.execute(self.q("DELETE FROM {failed} WHERE failed_at < {now_plus}"), (-float(failed_ttl),))
                out["failed"] = int(cur.rowcount)
                cur.execute(self.q("DELETE FROM {batches} WHERE completed_at < {now_plus}"), (-float(failed_ttl),))
                out["batches"] = int(cur.rowcount)
            return out

        return self.run(delete, write=True)
