"""Statements that several stores run inside their own transactions, on the caller's cursor.

Enqueueing a job with features, finishing a batch member, burying a job: each is a few
statements that must commit with whatever else the calling verb does, so they take a
cursor and never open a transaction of their own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..core.columns import DEAD, names
from ..core.errors import BadPayload, StoreError
from ..core.limits import MAX_DELAY
from ..core.payload import ERROR_TEXT_CAP, decode_arguments, decode_result, safe_text, with_inputs
from ..core.rows import (
    FLAG_BATCH,
    FLAG_DEPENDENTS,
    FLAG_INPUTS,
    FLAG_RESULT,
    FLAG_UNIQUE_PERIOD,
    FLAG_WORKFLOW,
    KEEP,
    Failure,
    JobState,
    NewJob,
    as_int,
)
from ..core.runlogs import RunLog
from ..core.settings import DEFAULTS
from . import fairness
from .dialects.base import Dialect
from .dialects.inserts import due_now
from .driver import Cursor, fetch_row, fetch_rows, scalar

_DEAD = names(DEAD)

ERROR_MESSAGE_CAP = ERROR_TEXT_CAP
RESULT_COLUMNS = "id, queue, name, state, result, attempts, batch_id, finished_at, expires_at, message, label"
MESSAGE_CAP = 2000
HOLD_SECONDS = MAX_DELAY
"""How long a workflow step's outcome is first kept: until its workflow ends, when the
transaction that ends it sets every record of the workflow to expire a retention period later."""
INPUT_MISSING = "errands.WorkflowInputMissing"
HISTORY_CAP = 100
RUN_LOG_CAP = 25
RUN_LOG_CHUNK = 200
"""Attempts' logs per INSERT statement (six parameters each: far below every driver's limit)."""
"""Attempts whose run logs a job keeps (the latest): with the default bound of 64 KB an attempt, at
most 1.6 MB of a job that fails very often."""
"""Most entries of a job's error history kept (the latest): a job that fails 10,000 times keeps 100."""
TRACEBACK_CAP = 8192
"""Most characters of a traceback kept (its end, where the error is raised)."""
TRACEBACK_FRAMES = 50
"""Most lines of ``File ...`` frames kept from a traceback (its last ones)."""


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


def job_spec(job: NewJob, *, results: bool = False, failure: bool = False) -> str:
    """A prepared job as JSON, to be enqueued later by the store (batch callbacks).

    ``results``: it receives the members' results (a list, in member order) as its first
    argument; ``failure``: the record of the failed member as its ``failure`` keyword."""
    spec = {"name": job.name, "queue": job.queue, "payload": job.payload, "priority": job.priority,
            "max_attempts": job.max_attempts, "timeout": job.timeout}
    if job.label is not None:
        spec["label"] = job.label
    if results:
        spec["results"] = True
    if failure:
        spec["failure"] = True
    return json.dumps(spec)


def job_from_spec(spec: str, batch_id: int) -> tuple[NewJob, dict[str, Any]]:
    d = json.loads(spec)
    return (NewJob(d["name"], d["queue"], d["payload"], d["priority"], d["max_attempts"], d["timeout"],
                   batch_id=batch_id, label=d.get("label")), d)


def _refs(spec: Any) -> list[int]:
    """The job references in an inputs spec (an int, or nested lists of them)."""
    if isinstance(spec, list):
        return [r for item in spec for r in _refs(item)]
    return [int(spec)]


def _refers_back(j: NewJob) -> bool:
    """Whether ``j`` waits for (or receives the result of) an earlier job of the same insert."""
    return any(a < 0 for a in j.after) or (j.inputs is not None and any(r < 0 for r in _refs(j.inputs)))


def _resolve(spec: Any, ids: Sequence[int]) -> Any:
    """An inputs spec with references to earlier jobs of the same insert (negative) made ids."""
    if isinstance(spec, list):
        return [_resolve(item, ids) for item in spec]
    return ids[spec] if spec < 0 else spec


def _fill(spec: Any, values: dict[int, Any]) -> Any:
    if isinstance(spec, list):
        return [_fill(item, values) for item in spec]
    return values[spec]


class Steps:
    """Cursor-level steps shared by the job and feature stores (one dialect's SQL)."""

    def __init__(self, dialect: Dialect) -> None:
        self.d = dialect

    def insert_rich(self, cur: Cursor, jobs: Sequence[NewJob]) -> list[int]:
        """Insert jobs that use a feature (unique key, dependency, batch, group, flags), in order.

        Runs inside a write transaction.  A job whose dependency has not succeeded yet is
        stored blocked; its dependency is marked so that finishing it unblocks the job.  Rows
        go through the dialect's one insert path (:meth:`Dialect.insert_jobs`), together where
        nothing needs one's id before the next is written.
        """
        jobs = fairness.assign_turns(self.d, cur, jobs)
        ids: list[int] = []
        waiting: list[tuple[int, NewJob]] = []  # (position, job) of rows inserted together

        def flush() -> None:
            if waiting:
                got = self.d.inserts.insert_jobs(cur, [j for _, j in waiting])
                for (position, _), job_id in zip(waiting, got, strict=True):
                    ids[position] = job_id
                waiting.clear()

        steps: list[tuple[int, NewJob, list[int], Any]] = []
        for j in jobs:
            parents: list[int] = []
            pending = 0
            inputs = j.inputs
            if j.after:
                if _refers_back(j):
                    flush()  # a reference to an earlier job of this insert: it needs its id
                parents, inputs, pending = self._waits_for(cur, j, ids)
            j = j._replace(blocked_by=pending or None)
            ids.append(0)
            if j.step is not None:
                steps.append((len(ids) - 1, j, parents, inputs))
            if j.unique_key is not None or j.blocked_by is not None:
                flush()  # keep order: a later row may depend on this one, or share its key
                ids[-1] = self._insert_alone(cur, j, parents if j.blocked_by is not None else [])
            else:
                waiting.append((len(ids) - 1, j))
        flush()
        if steps:
            self._record_steps(cur, [(ids[position], j, parents, inputs) for position, j, parents, inputs in steps])
        return ids

    def _insert_alone(self, cur: Cursor, j: NewJob, waits_for: list[int]) -> int:
        """Insert one row on its own (its id is needed now), with the dependencies it waits for."""
        if j.unique_key is not None:
            job_id = self.insert_unique(cur, j)
        else:
            [job_id] = self.d.inserts.insert_jobs(cur, [j])
        if waits_for:
            cur.executemany(self.d.q(self.d.insert_ignore("{dependencies}", "parent_id, child_id")),
                            [(parent, job_id) for parent in dict.fromkeys(waits_for)])
        return job_id

    def _waits_for(self, cur: Cursor, j: NewJob, ids: list[int]) -> tuple[list[int], Any, int]:
        """``j``'s dependencies as ids, its inputs as ids, and how many it must wait for."""
        parents = [ids[a] if a < 0 else a for a in j.after]
        inputs = None if j.inputs is None else _resolve(j.inputs, ids)
        pending = sum(self.dependency_pending(cur, parent, keep_result=inputs is not None)
                      for parent in dict.fromkeys(parents))
        return parents, inputs, pending

    def _record_steps(self, cur: Cursor, steps: list[tuple[int, NewJob, list[int], Any]]) -> None:
        """A workflow's graph (each step's parents) and result inputs, beside its jobs."""
        cur.executemany(self.d.q("INSERT INTO {steps} (job_id, batch_id, position, label, parents, inputs) "
                                 "VALUES ({p}, {p}, {p}, {p}, {p}, {p})"),
                        [(job_id, j.batch_id, j.step[0] if j.step else 0, safe_text(j.step[1] if j.step else j.name,
                                                                                    255),
                          json.dumps(parents), None if inputs is None else json.dumps(inputs))
                         for job_id, j, parents, inputs in steps])
        # A step whose dependencies had all succeeded before it was stored gets its inputs now.
        with_inputs = [job_id for job_id, _, _, inputs in steps if inputs is not None]
        if with_inputs:
            cur.execute(self.d.q("SELECT id FROM {jobs} WHERE blocked_by IS NULL AND id IN (")
                        + self.d.marks(with_inputs) + ")", with_inputs)
            ready = [int(job_id) for (job_id,) in cur.fetchall()]
            if ready:
                self.fill_inputs(cur, ready)

    def insert_unique(self, cur: Cursor, j: NewJob) -> int:
        """Insert one job carrying a unique key, or return the id of the job that holds the key:
        waiting (kept, or given this job's arguments under ``on_conflict="replace"``), running
        (unless ``j.unique_rule`` lets a new job wait beside it), or ended less than its unique
        period (``unique_for``) ago.

        Keys live in ``errands_unique_keys`` (primary key: the key), pointing at their job.  A
        key whose job is gone (finished, buried, cancelled) is simply taken over, so no path that
        ends a plain unique job needs to know about keys; so is a key whose job runs when the rule
        lets a new one wait beside it (the running job keeps its run, the new one holds the key).
        A job with a unique period carries ``FLAG_UNIQUE_PERIOD``: the transaction that ends it
        stamps its key's ``expires_at`` (:meth:`stamp_unique_expiry`), and until then the key stays
        taken.  Two enqueuers racing for a new key meet on the key table's primary key: the loser
        removes the job row it had inserted and returns the winner's; for an existing key they
        meet on its row lock, so replacements of one key happen one after the other.
        """
        key, period = j.unique_key, j.unique_for
        for _ in range(10):
            cur.execute(self.d.q("SELECT job_id, CASE WHEN expires_at > {now} THEN 1 ELSE 0 END AS held "
                                 "FROM {unique_keys} WHERE name = {p}") + self.d.lock_rows, (key,))
            row = fetch_row(cur)
            if row is not None:
                holder = int(row["job_id"])
                if row["held"] == 1 or self._holder_keeps_key(cur, holder, j):  # (held: ended within its period)
                    return holder
                [job_id] = self.d.inserts.insert_jobs(cur, [j])
                cur.execute(self.d.q("UPDATE {unique_keys} SET job_id = {p}, period = {p}, expires_at = NULL "
                                     "WHERE name = {p}"), (job_id, period, key))
                return job_id
            [job_id] = self.d.inserts.insert_jobs(cur, [j])
            cur.execute(self.d.q(self.d.insert_ignore("{unique_keys}", "name, job_id, period")), (key, job_id, period))
            if cur.rowcount == 1:
                return job_id
            cur.execute(self.d.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))  # another enqueuer won
        raise StoreError(f"unique key {key!r} kept changing hands; try again")

    def _holder_keeps_key(self, cur: Cursor, holder: int, j: NewJob) -> bool:
        """Whether the job holding ``j``'s key (under the key's row lock) answers ``j``'s enqueue: it
        waits (and, under "replace", takes ``j``'s arguments, priority and run time), or it runs and
        the rule counts running holders.  False: it is gone, or runs and ``j`` is to wait beside it.

        The replacement locks the holder's row first and changes it only while no worker has claimed
        it: the claim and the replacement take turns on that row (PostgreSQL's and MySQL's claims skip
        a locked row; a claim that holds it makes this wait and then read it claimed), so a worker
        never runs other arguments than those it claimed.  The plain read before it keeps an enqueue
        from waiting on the row of a job that is already running."""
        rule = j.unique_rule or KEEP
        state = self._holder_state(cur, holder, lock=False)
        if state == "waiting" and rule.replace:
            state = self._holder_state(cur, holder, lock=True)
            if state == "waiting":
                capped = rule.max_wait is not None
                cur.execute(self.d.replace_waiting_sql(capped=capped),
                            (j.payload, j.priority, *self.d.inserts.due_params(j),
                             *((rule.max_wait,) if capped else ()), holder))
                if due_now(j):
                    self.d.after_insert(cur, {j.queue})
        return state == "waiting" or (state == "running" and rule.running)

    def _holder_state(self, cur: Cursor, holder: int, *, lock: bool) -> str | None:
        """The holder's state: "waiting", "running" (reserved, its lease alive or not), or None when it is gone."""
        cur.execute(self.d.q("SELECT reserved_by FROM {jobs} WHERE id = {p}") + (self.d.lock_rows if lock else ""),
                    (holder,))
        row = fetch_row(cur)
        return None if row is None else "waiting" if row["reserved_by"] is None else "running"

    def stamp_unique_expiry(self, cur: Cursor, ids: Sequence[int]) -> None:
        """Jobs with a unique period (``FLAG_UNIQUE_PERIOD``) have ended: their keys stay taken
        until now plus the period (only the keys that still point at them)."""
        if ids:
            cur.execute(self.d.q("UPDATE {unique_keys} SET expires_at = " + self.d.plus_column_sql("period") +
                                 " WHERE period IS NOT NULL AND job_id IN (") + self.d.marks(ids) + ")", list(ids))

    def dependency_pending(self, cur: Cursor, parent: int, *, keep_result: bool = False) -> bool:
        """Whether a job depending on ``parent`` must wait; marks ``parent`` so that it unblocks it
        (and keeps its result, when the dependant receives it).

        Marking the parent's row also locks it until this transaction commits, so a worker
        finishing the parent meanwhile reads the mark back from its delete.  A parent in
        the dead letter (or cancelled) keeps its dependants blocked; one that is gone
        otherwise has succeeded (or its record expired).
        """
        mark = FLAG_DEPENDENTS | (FLAG_RESULT if keep_result else 0)
        # Read under a row lock, then mark: an UPDATE alone would not do, because MySQL reports
        # a row whose flags were already set (a second dependant of the same job) as unchanged.
        for table in ("{jobs}", "{failed}"):
            cur.execute(self.d.q(f"SELECT flags FROM {table} WHERE id = {{p}}") + self.d.lock_rows, (parent,))
            row = fetch_row(cur)
            if row is not None:
                if as_int(row["flags"]) & mark != mark:
                    cur.execute(self.d.q(f"UPDATE {table} SET flags = flags | {{p}} WHERE id = {{p}}"), (mark, parent))
                return True
        cur.execute(self.d.q("SELECT state FROM {results} WHERE id = {p}"), (parent,))
        row = fetch_row(cur)
        return row is not None and row["state"] == JobState.CANCELLED.value

    def unblock(self, cur: Cursor, parents: Sequence[int]) -> int:
        """Count ``parents`` (which have just succeeded) off the jobs that wait for them, and
        release those that wait for nothing more.

        ``blocked_by`` counts the dependencies a job still waits for.  Each decrement is an
        UPDATE, which locks the row until commit: when the last two dependencies of a fan-in
        finish at the same moment on two workers, the second transaction waits for the first
        and reads its count, so exactly one of them releases the job (and fills its inputs).
        """
        marks = self.d.marks(parents)
        cur.execute(self.d.q("SELECT child_id FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        counts = Counter(int(r["child_id"]) for r in fetch_rows(cur))
        cur.execute(self.d.q("DELETE FROM {dependencies} WHERE parent_id IN (") + marks + ")", list(parents))
        if not counts:
            return 0
        by_count: dict[int, list[int]] = {}
        for child, n in sorted(counts.items()):
            by_count.setdefault(n, []).append(child)
        for n, children in sorted(by_count.items()):
            cur.execute(self.d.q("UPDATE {jobs} SET blocked_by = CASE WHEN blocked_by > {p} THEN blocked_by - {p} "
                                 "ELSE NULL END WHERE blocked_by IS NOT NULL AND id IN (") + self.d.marks(children)
                        + ")", [n, n, *children])
        children = sorted(counts)
        cur.execute(self.d.q("SELECT id, flags FROM {jobs} WHERE blocked_by IS NULL AND id IN (")
                    + self.d.marks(children) + ")", children)
        released = fetch_rows(cur)
        if not released:
            return 0
        needing = [int(r["id"]) for r in released if as_int(r["flags"]) & FLAG_INPUTS]
        if needing:
            self.fill_inputs(cur, needing)
        self.d.after_unblock(cur, [int(r["id"]) for r in released])
        return len(released)

    def fill_inputs(self, cur: Cursor, job_ids: Sequence[int]) -> None:
        """Write the results a released step receives into its arguments, in the transaction
        that releases it: results travel through the database, and the step's row shows what
        it runs with.  A step whose input is missing (its dependency was forgotten from the
        dead letter, or its record expired) goes to the dead letter saying which."""
        cur.execute(self.d.q("SELECT job_id, inputs FROM {steps} WHERE inputs IS NOT NULL AND job_id IN (")
                    + self.d.marks(job_ids) + ")", list(job_ids))
        specs = {int(r["job_id"]): json.loads(r["inputs"]) for r in fetch_rows(cur)}
        refs = sorted({r for spec in specs.values() for r in _refs(spec)})
        values: dict[int, Any] = {}
        for start in range(0, len(refs), 500):
            chunk = refs[start:start + 500]
            cur.execute(self.d.q("SELECT id, state, result FROM {results} WHERE id IN (") + self.d.marks(chunk) + ")",
                        chunk)
            for r in fetch_rows(cur):
                if r["state"] == JobState.SUCCEEDED.value:
                    try:
                        values[int(r["id"])] = None if r["result"] is None else decode_result(r["result"])
                    except BadPayload:
                        pass
        payloads: dict[int, Any] = {}
        ids = sorted(specs)
        for start in range(0, len(ids), 500):  # one read per 500 released steps, not one per step
            chunk = ids[start:start + 500]
            cur.execute(self.d.q("SELECT id, payload FROM {jobs} WHERE id IN (") + self.d.marks(chunk) + ")", chunk)
            payloads.update((int(r["id"]), r["payload"]) for r in fetch_rows(cur))
        filled: list[tuple[str, int]] = []
        for job_id, spec in sorted(specs.items()):
            if job_id not in payloads:
                continue
            missing = [r for r in _refs(spec) if r not in values]
            if missing:
                self.bury_locked(cur, "id = {p}", (job_id,), INPUT_MISSING,
                                 f"the result of job {missing[0]} is not there (it did not succeed, or its record "
                                 "was forgotten or expired)")
                continue
            try:
                filled.append((with_inputs(payloads[job_id], first=_fill(spec, values), has_first=True), job_id))
            except BadPayload as exc:
                self.bury_locked(cur, "id = {p}", (job_id,), "errands.BadPayload", str(exc))
        if filled:
            cur.executemany(self.d.q("UPDATE {jobs} SET payload = {p} WHERE id = {p}"), filled)

    def lock_name(self, cur: Cursor, name: str) -> None:
        """Serialise on ``name`` until the transaction ends (a row of the locks table)."""
        cur.execute(self.d.q(self.d.insert_ignore("{locks}", "name")), (name,))
        cur.execute(self.d.q("SELECT name FROM {locks} WHERE name = {p}") + self.d.lock_rows, (name,))
        cur.fetchall()

    def record_result(self, cur: Cursor, job_id: int, queue: str, name: str, state: JobState, result: str | None,
                      attempts: int, batch_id: int | None, ttl: float, message: str | None = None,
                      label: str | None = None, *, flags: int = 0) -> None:
        """Keep a job's outcome; a workflow step's until its workflow ends (then ``ttl`` more)."""
        if flags & FLAG_WORKFLOW:
            ttl = HOLD_SECONDS
        cur.execute(self.d.q("DELETE FROM {results} WHERE id = {p}"), (job_id,))  # a retried dead job ends again
        cur.execute(self.d.q("INSERT INTO {results} (" + RESULT_COLUMNS + ") VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
                           "{p}, {now}, {now_plus}, {p}, {p})"),
                    (job_id, queue, name, state.value, result, attempts, batch_id, float(ttl),
                     None if message is None else message[:MESSAGE_CAP], label))

    def end_cancelled(self, cur: Cursor, job_id: int, queue: str, name: str, attempts: int, flags: int,
                      batch_id: int | None, ttl: float, message: str, label: str | None = None) -> None:
        """Record a job as cancelled and delete it; its batch counts it as failed."""
        self.record_result(cur, job_id, queue, name, JobState.CANCELLED, None, attempts, batch_id, ttl, message,
                           label, flags=flags)
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))
        if flags & FLAG_UNIQUE_PERIOD:
            self.stamp_unique_expiry(cur, [job_id])
        if flags & FLAG_BATCH and batch_id is not None:
            self.count_in_batch(cur, int(batch_id), done=0, failed=1, failed_job=job_id)
        if flags & FLAG_WORKFLOW and flags & FLAG_DEPENDENTS and batch_id is not None:
            self.cancel_dependants(cur, int(batch_id), [job_id])

    def cancel_dependants(self, cur: Cursor, batch_id: int, failed: Sequence[int]) -> int:
        """Under a workflow's "cancel" policy, cancel every step that waits, directly or not, for
        the ``failed`` steps (under "block", the default, they stay blocked: visible, retryable)."""
        cur.execute(self.d.q("SELECT policy, result_ttl FROM {batches} WHERE id = {p}"), (batch_id,))
        row = fetch_row(cur)
        if row is None or row["policy"] != "cancel":
            return 0
        ttl = float(row["result_ttl"] or 0) or DEFAULTS["result_ttl"]  # a batch stored before result_ttl was kept
        cancelled = 0
        frontier = list(failed)
        while frontier:
            cur.execute(self.d.q("SELECT DISTINCT child_id FROM {dependencies} WHERE parent_id IN (")
                        + self.d.marks(frontier) + ")", frontier)
            children = sorted(int(r["child_id"]) for r in fetch_rows(cur))
            if not children:
                break
            cur.execute(self.d.q("SELECT id, queue, name, attempts, flags, batch_id, label FROM {jobs} "
                                 "WHERE reserved_by IS NULL AND id IN (") + self.d.marks(children) + ")"
                        + self.d.lock_rows, children)
            rows = fetch_rows(cur)
            cur.execute(self.d.q("DELETE FROM {dependencies} WHERE child_id IN (") + self.d.marks(children) + ")",
                        children)
            for r in rows:
                # Recorded without recursion here: the loop walks the graph level by level.
                job_id, flags, member_of = int(r["id"]), as_int(r["flags"]), r["batch_id"]
                self.record_result(cur, job_id, r["queue"], r["name"], JobState.CANCELLED, None, as_int(r["attempts"]),
                                   member_of, ttl, "cancelled: a step it waits for failed", r["label"], flags=flags)
                cur.execute(self.d.q("DELETE FROM {jobs} WHERE id = {p}"), (job_id,))
                if flags & FLAG_UNIQUE_PERIOD:
                    self.stamp_unique_expiry(cur, [job_id])
                if flags & FLAG_BATCH and member_of is not None:
                    self.count_in_batch(cur, int(member_of), done=0, failed=1)
                cancelled += 1
            frontier = [int(r["id"]) for r in rows]
        return cancelled

    def count_in_batch(self, cur: Cursor, batch_id: int, *, done: int, failed: int,
                       failed_job: int | None = None) -> None:
        """Count finished members; the transaction that crosses a line fires its callback once.

        The UPDATE locks the batch row until commit, so two workers finishing the last two
        members at the same moment take turns here, and only the second sees the batch
        complete.  The ``... IS NULL`` conditions make each callback fire exactly once.
        """
        cur.execute(self.d.q("UPDATE {batches} SET done = done + {p}, failed = failed + {p} WHERE id = {p}"),
                    (done, failed, batch_id))
        cur.execute(self.d.q("SELECT total, done, failed, on_complete, on_failure, completed_at, failure_fired_at, "
                           "result_ttl FROM {batches} WHERE id = {p}"), (batch_id,))
        row = fetch_row(cur)
        if row is None:
            return
        on_complete, on_failure, result_ttl = row["on_complete"], row["on_failure"], row["result_ttl"]
        callbacks: list[NewJob] = []
        if row["failed"] and row["failure_fired_at"] is None:
            cur.execute(self.d.q("UPDATE {batches} SET failure_fired_at = {now} WHERE id = {p} "
                               "AND failure_fired_at IS NULL"), (batch_id,))
            if cur.rowcount == 1 and on_failure:
                job, spec = job_from_spec(on_failure, batch_id)
                if spec.get("failure"):
                    job = job._replace(payload=with_inputs(job.payload, keywords={
                        "failure": self.failure_record(cur, failed_job)}))
                callbacks.append(job)
        if row["done"] + row["failed"] >= row["total"] and row["completed_at"] is None:
            cur.execute(self.d.q("UPDATE {batches} SET completed_at = {now} WHERE id = {p} AND completed_at IS NULL"),
                        (batch_id,))
            if cur.rowcount == 1:
                if result_ttl is not None:  # records held for the workflow now expire as any other
                    cur.execute(self.d.q("UPDATE {results} SET expires_at = {now_plus} WHERE batch_id = {p}"),
                                (float(result_ttl), batch_id))
                if on_complete:
                    job, spec = job_from_spec(on_complete, batch_id)
                    if spec.get("results"):
                        job = job._replace(payload=with_inputs(job.payload, first=self.member_results(cur, batch_id),
                                                               has_first=True))
                    callbacks.append(job)
        if callbacks:
            self.insert_rich(cur, callbacks)

    def member_results(self, cur: Cursor, batch_id: int) -> list[Any]:
        """The results of a batch's members in member order (None for one that did not succeed).

        The members are the batch's steps (its callbacks carry its id too, but are no steps)."""
        cur.execute(self.d.q("SELECT s.job_id, r.state, r.result FROM {steps} s LEFT JOIN {results} r "
                             "ON r.id = s.job_id WHERE s.batch_id = {p} ORDER BY s.position"), (batch_id,))
        out: list[Any] = []
        for r in fetch_rows(cur):
            value = None
            if r["state"] == JobState.SUCCEEDED.value and r["result"] is not None:
                try:
                    value = decode_result(r["result"])
                except BadPayload:
                    value = None
            out.append(value)
        return out

    def failure_record(self, cur: Cursor, job_id: int | None) -> dict[str, Any] | None:
        """What a failure callback receives about the member that failed: id, name, queue,
        arguments, error type and message, attempts (None when it cannot be found)."""
        if job_id is None:
            return None
        cur.execute(self.d.q("SELECT id, name, queue, payload, attempts, error_type, error_message FROM {failed} "
                             "WHERE id = {p}"), (job_id,))
        row = fetch_row(cur)
        if row is None:  # cancelled: recorded with the results
            cur.execute(self.d.q("SELECT id, name, queue, NULL AS payload, attempts, 'errands.Cancelled' AS "
                                 "error_type, message AS error_message FROM {results} WHERE id = {p}"), (job_id,))
            row = fetch_row(cur)
        if row is None:
            return None
        try:
            args, kwargs = decode_arguments(row["payload"]) if row["payload"] is not None else ([], {})
        except BadPayload:
            args, kwargs = [], {}
        return {"id": int(row["id"]), "name": row["name"], "queue": row["queue"], "args": args, "kwargs": kwargs,
                "attempts": as_int(row["attempts"]), "error_type": row["error_type"],
                "error_message": row["error_message"]}

    def record_errors(self, cur: Cursor, failures: Sequence[Failure]) -> None:
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
                self._keep_latest(cur, "{job_errors}", f.job_id, HISTORY_CAP)

    def record_run_logs(self, cur: Cursor, worker: str | None, logs: Sequence[RunLog]) -> None:
        """Add the log records of attempts that ended (one multi-row INSERT, in the ending's own
        transaction); keep at most ``RUN_LOG_CAP`` attempts' logs per job, trimmed only once a job
        has run more often than that."""
        if not logs:
            return
        if self.d.run_logs_insert_sql is not None:
            cur.execute(self.d.q(self.d.run_logs_insert_sql),
                        (worker, json.dumps([[log.job_id, int(log.attempt), log.dropped, log.encoded()]
                                             for log in logs], ensure_ascii=False)))
        row = "({p}, {p}, {p}, {now}, {p}, {p})"
        for start in range(0 if self.d.run_logs_insert_sql is None else len(logs), len(logs), RUN_LOG_CHUNK):
            chunk = logs[start:start + RUN_LOG_CHUNK]
            cur.execute(self.d.q("INSERT INTO {run_logs} (job_id, attempt, worker, logged_at, dropped, records) "
                                 "VALUES " + ", ".join([row] * len(chunk))),
                        [v for log in chunk for v in (log.job_id, int(log.attempt), worker, log.dropped,
                                                      log.encoded())])
        for log in logs:
            if log.attempt > RUN_LOG_CAP:
                self._keep_latest(cur, "{run_logs}", log.job_id, RUN_LOG_CAP)

    def _keep_latest(self, cur: Cursor, table: str, job_id: int, keep: int) -> None:
        """Delete a job's rows of ``table`` (the error history or the run logs: a template name of
        this module's) but its latest ``keep``, by id."""
        cur.execute(self.d.q("SELECT id FROM " + table + " WHERE job_id = {p} ORDER BY id DESC LIMIT 1 OFFSET {p}"),
                    (job_id, keep - 1))
        oldest_kept = scalar(cur)
        if oldest_kept is not None:
            cur.execute(self.d.q("DELETE FROM " + table + " WHERE job_id = {p} AND id < {p}"), (job_id, oldest_kept))

    def bury_locked(self, cur: Cursor, where: str, params: Sequence[Any], error_type: str,
                    error_message: str, traceback: str | None = None) -> int:
        """Move the matching rows to the dead letter; a batch member counts as failed there.

        Jobs that depend on a buried one stay blocked (visible, not lost): they run if the
        buried job is retried and then succeeds.  Each buried job's last attempt joins its
        error history (with ``traceback`` when the caller kept one).  The dead letter keeps
        every column the job shape marks ``dead`` (:mod:`errands.core.columns`).
        """
        cur.execute(self.d.q("SELECT id, flags, batch_id, attempts FROM {jobs} WHERE " + where) + self.d.lock_rows,
                    params)
        rows = fetch_rows(cur)
        if not rows:
            return 0
        ids = [r["id"] for r in rows]
        marks = self.d.marks(ids)
        cur.execute(self.d.q("INSERT INTO {failed} (" + _DEAD + ", failed_at, error_type, error_message) SELECT "
                             + _DEAD + ", {now}, {p}, {p} FROM {jobs} WHERE id IN (") + marks + ")",
                    [safe_text(error_type, 255), safe_text(error_message, ERROR_MESSAGE_CAP), *ids])
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE id IN (") + marks + ")", ids)
        self.record_errors(cur, [Failure(int(r["id"]), as_int(r["attempts"]), error_type, error_message, traceback,
                                         trim=True) for r in rows])
        self.stamp_unique_expiry(cur, [r["id"] for r in rows if as_int(r["flags"]) & FLAG_UNIQUE_PERIOD])
        for r in rows:
            flags, batch_id = as_int(r["flags"]), r["batch_id"]
            if flags & FLAG_BATCH and batch_id is not None:
                self.count_in_batch(cur, int(batch_id), done=0, failed=1, failed_job=int(r["id"]))
            if flags & FLAG_WORKFLOW and flags & FLAG_DEPENDENTS and batch_id is not None:
                self.cancel_dependants(cur, int(batch_id), [int(r["id"])])
        return len(ids)
