"""The worker registry: who is running, where, and when it last said so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..core.rows import WorkerRow, as_float, as_int
from .database import Database
from .dialects.base import WORKER_COLUMNS
from .driver import Cursor, Row, fetch_rows


class WorkerStore:
    """Registry rows of worker processes, refreshed by their heartbeats."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.d = db.dialect

    def register(self, worker_id: str, hostname: str, pid: int, queues: Sequence[str],
                 concurrency: int, lease: float | None = None, heartbeat_every: float | None = None) -> None:
        """Enter a worker with its own ``lease`` and heartbeat interval: readers judge whether it
        is alive by them, not by their own settings (None: judged by the reader's lease)."""
        def insert(cur: Cursor) -> None:
            cur.execute(self.d.q("INSERT INTO {workers} (" + WORKER_COLUMNS + ") VALUES "
                               "({p}, {p}, {p}, {p}, {p}, {now}, {now}, 0, {p}, {p})"),
                        (worker_id, hostname, pid, ",".join(queues), concurrency, lease, heartbeat_every))

        self.db.run(insert)

    def heartbeat(self, worker_id: str, jobs_done: int) -> None:
        def update(cur: Cursor) -> None:
            cur.execute(self.d.q("UPDATE {workers} SET heartbeat_at = {now}, jobs_done = {p} WHERE id = {p}"),
                        (jobs_done, worker_id))

        self.db.run(update)

    def unregister(self, worker_id: str) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {workers} WHERE id = {p}"), (worker_id,)))

    def list_workers(self) -> list[WorkerRow]:
        def read(cur: Cursor) -> list[WorkerRow]:
            cur.execute(self.d.q("SELECT " + WORKER_COLUMNS + " FROM {workers} ORDER BY started_at, id"))
            return [worker_row(self.d.to_datetime, r) for r in fetch_rows(cur)]

        return self.db.run(read)

    def prune(self, older_than: float, per_lease: float | None = None, at_least: float = 0.0) -> int:
        """Forget registry rows whose heartbeat is older than ``older_than`` seconds; with ``per_lease``,
        a row that recorded its worker's lease is judged by that lease instead: forgotten after
        ``per_lease`` of its leases, and never before ``at_least`` seconds (a worker with a long lease
        heart-beats seldom, and a worker with a short one must not forget it between two beats)."""
        params: tuple[float, ...]
        if per_lease is None:
            sql, params = "DELETE FROM {workers} WHERE heartbeat_at < {now_plus}", (-float(older_than),)
        else:
            own = self.d.plus_column_sql("(lease * " + self.d.placeholder + ")")
            sql = ("DELETE FROM {workers} WHERE heartbeat_at < {now_plus} AND ((lease IS NULL AND heartbeat_at < "
                   "{now_plus}) OR heartbeat_at < " + own + ")")
            params = (-float(at_least), -float(older_than), -float(per_lease))

        def delete(cur: Cursor) -> int:
            cur.execute(self.d.q(sql), params)
            return int(cur.rowcount)

        return self.db.run(delete)


def worker_row(t: Callable[[Any], datetime], r: Row) -> WorkerRow:
    """A registry row (``WORKER_COLUMNS``) by column name; ``t`` reads the dialect's times.

    Numbers go through ``as_int``/``as_float``: SQLite keeps any value in any column, and a
    listing should show a malformed row rather than fail on it."""
    return WorkerRow(r["id"], r["hostname"], as_int(r["pid"]), r["queues"], as_int(r["concurrency"]),
                     t(r["started_at"]), t(r["heartbeat_at"]), as_int(r["jobs_done"]), as_float(r["lease"]),
                     as_float(r["heartbeat_every"]))
