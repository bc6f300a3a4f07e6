"""Store verbs of workflows: a workflow's graph with each step's state, and cancelling one.

A workflow is a batch (its counters, callbacks and exactly-once completion live in
``errands_batches``) whose members are steps: ``errands_steps`` keeps each step's parents and
result inputs for as long as the batch is kept, so the graph can be drawn after its jobs ended.
A step's state is read from where its job is now: the jobs table (waiting, running), the dead
letter, or the results table (a workflow keeps every step's outcome until it ends).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..core.rows import BatchRow, JobState, StepRow, WorkflowRow, as_int, dead_state, state_in_table
from .database import Database
from .driver import Cursor, fetch_row, fetch_rows
from .features import BATCH_COLUMNS, batch_row
from .steps import Steps

CANCELLED_BY_USER = "cancelled with its workflow"
Graph = list[tuple[int, int, str, tuple[int, ...]]]
"""A workflow's steps before their states: ``(job_id, position, label, parents)`` each."""


class WorkflowStore:
    """Reading and cancelling workflows (and chains and batches, which are drawn the same way)."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    def get(self, batch_id: int) -> WorkflowRow | None:
        def read(cur: Cursor) -> WorkflowRow | None:
            cur.execute(self.d.q("SELECT " + BATCH_COLUMNS + " FROM {batches} WHERE id = {p}"), (batch_id,))
            r = fetch_row(cur)
            if r is None:
                return None
            batch = batch_row(self.d.to_datetime, r)
            cur.execute(self.d.q("SELECT job_id, position, label, parents FROM {steps} WHERE batch_id = {p} "
                                 "ORDER BY position, job_id"), (batch_id,))
            graph: Graph = [(as_int(r["job_id"]), as_int(r["position"]), r["label"], _ids(r["parents"]))
                            for r in fetch_rows(cur)]
            if not graph:  # a batch or chain stored without steps: its members in id order
                graph = self._members(cur, batch_id, batch.kind)
            states = self._states(cur, [g[0] for g in graph])
            steps = tuple(StepRow(job_id, position, label, parents, *states.get(job_id, (JobState.FINISHED, None)))
                          for job_id, position, label, parents in graph)
            return WorkflowRow(batch, steps)

        return self.db.run(read)

    def recent(self, limit: int = 50, before_id: int | None = None) -> list[BatchRow]:
        """Batches, chains and workflows, newest first (a keyset page below ``before_id``): their
        rows only, for lists (a workflow's steps are one :meth:`get` away)."""

        def read(cur: Cursor) -> list[BatchRow]:
            where, params = ("", []) if before_id is None else (" WHERE id < {p}", [before_id])
            cur.execute(self.d.q("SELECT " + BATCH_COLUMNS + " FROM {batches}" + where + " ORDER BY id DESC LIMIT {p}"),
                        [*params, int(limit)])
            return [batch_row(self.d.to_datetime, r) for r in fetch_rows(cur)]

        return self.db.run(read)

    def with_dead_steps(self, batch_ids: Sequence[int]) -> set[int]:
        """Which of ``batch_ids`` have a member in the dead letter (no index serves this: one scan
        of the dead letter, asked only about finished batches with failures)."""
        if not batch_ids:
            return set()
        ids = list(batch_ids)

        def read(cur: Cursor) -> set[int]:
            cur.execute(self.d.q("SELECT DISTINCT batch_id FROM {failed} WHERE batch_id IN (") + self.d.marks(ids)
                        + ")", ids)
            return {as_int(r["batch_id"]) for r in fetch_rows(cur)}

        return self.db.run(read)

    def cancelled_steps(self, batch_ids: Sequence[int]) -> dict[int, int]:
        """Cancelled members per batch of ``batch_ids`` (the ``failed`` counter counts them with the
        dead ones): their kept outcomes, read through the results table's batch index."""
        if not batch_ids:
            return {}
        ids = list(batch_ids)

        def read(cur: Cursor) -> dict[int, int]:
            cur.execute(self.d.q("SELECT batch_id, COUNT(*) AS n FROM {results} WHERE state = {p} AND batch_id IN (")
                        + self.d.marks(ids) + ") GROUP BY batch_id", [JobState.CANCELLED.value, *ids])
            return {as_int(r["batch_id"]): as_int(r["n"]) for r in fetch_rows(cur)}

        return self.db.run(read)

    def stuck(self, batch_ids: Sequence[int]) -> set[int]:
        """Which of ``batch_ids`` (workflows with steps) have no step that can run: every step left
        waits for one that will not succeed (a list asks this of unfinished ones with failures, to
        call them blocked as their page does).  Through the steps' batch index and the jobs' key;
        it stops at the first step that can run."""
        if not batch_ids:
            return set()
        ids = list(batch_ids)

        def read(cur: Cursor) -> set[int]:
            cur.execute(self.d.q("SELECT b.id FROM {batches} b WHERE b.id IN (") + self.d.marks(ids) + ")"
                        + self.d.q(" AND EXISTS (SELECT 1 FROM {steps} s WHERE s.batch_id = b.id) AND NOT EXISTS "
                                   "(SELECT 1 FROM {steps} s JOIN {jobs} j ON j.id = s.job_id "
                                   "WHERE s.batch_id = b.id AND j.blocked_by IS NULL)"), ids)
            return {as_int(r["id"]) for r in fetch_rows(cur)}

        return self.db.run(read)

    def batch_of(self, job_id: int) -> BatchRow | None:
        """The batch (chain, workflow) job ``job_id`` belongs to, wherever the job is now (waiting
        or running, in the dead letter, or ended with a kept result); None when it belongs to none."""

        def read(cur: Cursor) -> BatchRow | None:
            cur.execute(self.d.q("SELECT batch_id FROM {jobs} WHERE id = {p} UNION ALL "
                                 "SELECT batch_id FROM {failed} WHERE id = {p} UNION ALL "
                                 "SELECT batch_id FROM {results} WHERE id = {p}"), (job_id, job_id, job_id))
            found = next((as_int(r["batch_id"]) for r in fetch_rows(cur) if r["batch_id"] is not None), None)
            if found is None:
                return None
            cur.execute(self.d.q("SELECT " + BATCH_COLUMNS + " FROM {batches} WHERE id = {p}"), (found,))
            r = fetch_row(cur)
            return None if r is None else batch_row(self.d.to_datetime, r)

        return self.db.run(read)

    def _members(self, cur: Cursor, batch_id: int, kind: str) -> Graph:
        """The graph of a batch or chain stored without steps: its members in id order, a chain's
        each after the one before."""
        rows: dict[int, str] = {}
        for table in ("{jobs}", "{failed}", "{results}"):
            cur.execute(self.d.q(f"SELECT id, name FROM {table} WHERE batch_id = {{p}}"), (batch_id,))
            rows.update({as_int(r["id"]): r["name"] for r in fetch_rows(cur)})
        ordered = sorted(rows)
        return [(job_id, position, rows[job_id], (ordered[position - 1],) if kind == "chain" and position else ())
                for position, job_id in enumerate(ordered)]

    def _states(self, cur: Cursor, ids: Sequence[int]) -> dict[int, tuple[JobState, str | None]]:
        now = self.db.now_in(cur)
        out: dict[int, tuple[JobState, str | None]] = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            marks = self.d.marks(chunk)
            cur.execute(self.d.q("SELECT id, reserved_by, blocked_by, available_at, reserved_until, last_error "
                                 "FROM {jobs} WHERE id IN (") + marks + ")", chunk)
            t = self.d.to_datetime
            for r in fetch_rows(cur):
                until = r["reserved_until"]
                state = state_in_table(r["reserved_by"], r["blocked_by"], t(r["available_at"]),
                                       None if until is None else t(until), now)
                out[as_int(r["id"])] = (state, r["last_error"])
            cur.execute(self.d.q("SELECT id, error_type, error_message FROM {failed} WHERE id IN (") + marks + ")",
                        chunk)
            for r in fetch_rows(cur):
                kind, text = r["error_type"], r["error_message"]
                out[as_int(r["id"])] = (dead_state(kind, text), f"{kind}: {text}")
            cur.execute(self.d.q("SELECT id, state, message FROM {results} WHERE id IN (") + marks + ")", chunk)
            for r in fetch_rows(cur):
                if as_int(r["id"]) not in out:
                    cancelled = r["state"] == JobState.CANCELLED.value
                    out[as_int(r["id"])] = (JobState.CANCELLED if cancelled else JobState.SUCCEEDED,
                                            r["message"] if cancelled else None)
        return out

    def cancel(self, batch_id: int, record_ttl: float) -> int:
        """Cancel every step of the workflow that has not started (waiting or blocked); running
        steps finish.  Returns how many were cancelled; the workflow then ends when its running
        steps do."""

        def cancel(cur: Cursor) -> int:
            cur.execute(self.d.q("SELECT id, queue, name, attempts, flags FROM {jobs} WHERE batch_id = {p} "
                                 "AND reserved_by IS NULL ORDER BY id") + self.d.lock_rows, (batch_id,))
            rows = fetch_rows(cur)
            for r in rows:
                cur.execute(self.d.q("DELETE FROM {dependencies} WHERE child_id = {p}"), (r["id"],))
                self.steps.end_cancelled(cur, int(r["id"]), r["queue"], r["name"], int(r["attempts"]), int(r["flags"]),
                                         batch_id, record_ttl, CANCELLED_BY_USER)
            return len(rows)

        return self.db.run(cancel, write=True)


def _ids(text: Any) -> tuple[int, ...]:
    try:
        value = json.loads(text) if text else []
    except (TypeError, ValueError):
        return ()
    return tuple(as_int(v) for v in value) if isinstance(value, list) else ()
