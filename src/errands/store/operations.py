"""Store verbs for operators acting on many waiting jobs at once: cancel, move to another queue,
re-prioritise the jobs a filter matches (the dashboard's bulk actions).

Nothing here is one statement over the whole table.  A bulk action walks the jobs table by
primary key in windows of :data:`WINDOW` rows (:meth:`OperationStore.window_edge`), reads the ids
that match in a window without locking anything (:meth:`OperationStore.waiting_ids`), and changes
them in transactions of at most :data:`CHUNK` rows (:meth:`OperationStore.apply`), which lock only
those rows (skipping any that another transaction holds, a worker's claim above all) and check the
filter again under the lock: a job a worker reserved meanwhile, or one that stopped matching, is
left alone.  Running and reserved jobs are never touched (``reserved_by IS NULL`` in every
statement).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.rows import FLAG_BATCH, FLAG_UNIQUE_PERIOD, FLAG_WORKFLOW, JobState
from .database import Database
from .driver import Cursor, Row, fetch_rows, scalar
from .insights import job_filter_sql
from .steps import MESSAGE_CAP, RESULT_COLUMNS, Steps

WINDOW = 10_000
"""Rows of the jobs table (by id) one read of a bulk action looks at."""
CHUNK = 500
"""Jobs changed per transaction by a bulk action."""
ACTIONS = ("cancel", "move", "priority")
"""What a bulk action does to each waiting job it matches."""
WAITING = "reserved_by IS NULL"


class OperationStore:
    """Bounded bulk changes to waiting jobs (see the module's docstring)."""

    def __init__(self, db: Database, steps: Steps) -> None:
        self.db = db
        self.d = db.dialect
        self.steps = steps

    def _where(self, flt: dict[str, Any]) -> tuple[str, list[Any]]:
        where, params = job_filter_sql(self.d, flt.get("queue"), flt.get("state"), flt.get("name"), flt.get("text"))
        return (where + " AND " if where else " WHERE ") + WAITING, params

    def count_waiting(self, flt: dict[str, Any], since_id: int, upto_id: int, cap: int) -> int:
        """How many waiting jobs with an id from ``since_id`` up to ``upto_id`` match ``flt``
        (``queue``, ``state``, ``name``, ``text``), counting at most ``cap + 1`` rows."""

        def read(cur: Cursor) -> int:
            where, params = self._where(flt)
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM (SELECT 1 FROM {jobs}" + where + " AND id >= {p} "
                                 "AND id <= {p} LIMIT {p}) capped"),
                        [*params, int(since_id), int(upto_id), int(cap) + 1])
            return int(scalar(cur))

        return self.db.run(read)

    def window_edge(self, after_id: int, upto_id: int, rows: int = WINDOW) -> int | None:
        """The last id of the next window: ``rows`` ids above ``after_id`` (up to ``upto_id``), read
        from the primary key alone; ``upto_id`` when fewer are left, None when none are."""

        def read(cur: Cursor) -> int | None:
            cur.execute(self.d.q("SELECT id FROM {jobs} WHERE id > {p} AND id <= {p} ORDER BY id LIMIT 1 OFFSET {p}"),
                        (int(after_id), int(upto_id), int(rows) - 1))
            edge = scalar(cur)
            if edge is not None:
                return int(edge)
            cur.execute(self.d.q("SELECT MIN(id) AS first_id FROM {jobs} WHERE id > {p} AND id <= {p}"),
                        (int(after_id), int(upto_id)))
            return None if scalar(cur) is None else int(upto_id)

        return self.db.run(read)

    def waiting_ids(self, flt: dict[str, Any], after_id: int, edge_id: int) -> list[int]:
        """Ids of the waiting jobs matching ``flt`` in ``(after_id, edge_id]``, ascending (no lock)."""

        def read(cur: Cursor) -> list[int]:
            where, params = self._where(flt)
            cur.execute(self.d.q("SELECT id FROM {jobs}" + where + " AND id > {p} AND id <= {p} ORDER BY id"),
                        [*params, int(after_id), int(edge_id)])
            return [int(r["id"]) for r in fetch_rows(cur)]

        return self.db.run(read)

    def apply(self, action: str, ids: Sequence[int], flt: dict[str, Any], *, queue: str | None = None,
              priority: int | None = None, record_ttl: float = 0.0, message: str = "cancelled") -> int:
        """Do ``action`` to those of ``ids`` (at most a few hundred) that still wait and still match
        ``flt``, in one transaction that locks only them; how many it changed.

        ``cancel``: each ends as a cancelled job (its result kept ``record_ttl`` seconds, its batch
        counting it); ``move``: to ``queue`` (idle workers of it are woken); ``priority``: set."""
        if action not in ACTIONS:
            raise ValueError(f"no bulk action {action!r}")
        if not ids:
            return 0

        def change(cur: Cursor) -> int:
            where, params = self._where(flt)
            match, id_params = self.d.ids_match(list(ids))
            cur.execute(self.d.q("SELECT id, queue, name, attempts, flags, batch_id, label FROM {jobs}" + where
                                 + " AND ") + match + self.d.lock_rows_skip, [*params, *id_params])
            rows = fetch_rows(cur)
            if not rows:
                return 0
            locked = [int(r["id"]) for r in rows]
            if action == "cancel":
                self._cancel(cur, rows, record_ttl, message)
            else:
                column, value = ("queue", queue) if action == "move" else ("priority", priority)
                match, id_params = self.d.ids_match(locked)
                cur.execute(self.d.q(f"UPDATE {{jobs}} SET {column} = {{p}} WHERE {WAITING} AND ") + match,
                            [value, *id_params])
                if action == "move" and queue:
                    self.d.after_insert(cur, {queue})
            return len(locked)

        return self.db.run(change, write=True)

    def _cancel(self, cur: Cursor, rows: Sequence[Row], ttl: float, message: str) -> None:
        """End locked waiting rows as cancelled: plain jobs a few statements for all of them, jobs of
        a batch, a workflow or a unique period one at a time (their batch, graph and key are kept right)."""
        special = FLAG_BATCH | FLAG_WORKFLOW | FLAG_UNIQUE_PERIOD
        plain = [r for r in rows if not int(r["flags"]) & special]
        for r in rows:
            if int(r["flags"]) & special:
                self.steps.end_cancelled(cur, int(r["id"]), r["queue"], r["name"], int(r["attempts"]), int(r["flags"]),
                                         r["batch_id"], ttl, message, r["label"])
        if not plain:
            return
        ids = [int(r["id"]) for r in plain]
        match, id_params = self.d.ids_match(ids)
        cur.execute(self.d.q("DELETE FROM {results} WHERE ") + match, id_params)
        row_sql = self.d.q("({p}, {p}, {p}, {p}, NULL, {p}, {p}, {now}, {now_plus}, {p}, {p})")
        text = message[:MESSAGE_CAP]
        insert = self.d.q("INSERT INTO {results} (" + RESULT_COLUMNS + ") VALUES ")
        cur.execute(insert + ", ".join([row_sql] * len(plain)),
                    [v for r in plain
                     for v in (int(r["id"]), r["queue"], r["name"], JobState.CANCELLED.value, int(r["attempts"]),
                               r["batch_id"], float(ttl), text, r["label"])])
        cur.execute(self.d.q("DELETE FROM {jobs} WHERE ") + match, id_params)


__all__ = ["ACTIONS", "CHUNK", "WINDOW", "OperationStore"]
