"""The worker registry: who is running, where, and when it last said so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from ..core.rows import WorkerRow, as_float, as_int
from .database import Database
from .dialects.base import WORKER_COLUMNS
from .driver import Cursor, Row, fetch_rows, scalar


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
                               "({p}, {p}, {p}, {p}, {p}, {now}, {now}, 0, {p}, {p}, NULL, NULL)"),
                        (worker_id, hostname, pid, ",".join(queues), concurrency, lease, heartbeat_every))

        self.db.run(insert)

    def heartbeat(self, worker_id: str, jobs_done: int, status: str | None = None) -> str | None:
        """Report alive, with the runs recorded so far and what the worker is doing (``status``:
        "quiet", "stopping", None: running), and read the command an operator left for it ("quiet",
        "stop"; None: run).  One statement where the database has ``UPDATE ... RETURNING``
        (SQLite, PostgreSQL); MySQL and MariaDB read the command after it, by primary key, on the same
        connection.  The command comes back as the database holds it: the worker judges it."""
        params = (jobs_done, status, worker_id)

        def update(cur: Cursor) -> str | None:
            if self.d.heartbeat_sql is not None:
                cur.execute(self.d.q(self.d.heartbeat_sql), params)
            else:
                cur.execute(self.d.q("UPDATE {workers} SET heartbeat_at = {now}, jobs_done = {p}, status = {p} "
                                     "WHERE id = {p}"), params)
                cur.execute(self.d.q("SELECT command FROM {workers} WHERE id = {p}"), (worker_id,))
            command = scalar(cur)
            return None if command is None else str(command)

        return self.db.run(update)

    def command(self, worker_id: str, command: str | None, replacing: Sequence[str | None]) -> bool:
        """Leave ``command`` for worker ``worker_id`` (None: take a command back), only where the
        command it has now is one of ``replacing`` (None for none); whether the worker now holds it
        (False: no such worker, or a command not to be replaced).  The worker reads it with its next
        heartbeat."""
        others = [c for c in replacing if c is not None]
        held = (["command IS NULL"] if None in replacing else []) + (
            ["command IN (" + ", ".join(["{p}"] * len(others)) + ")"] if others else [])
        sql = "UPDATE {workers} SET command = {p} WHERE id = {p} AND (" + (" OR ".join(held) or "1 = 0") + ")"

        def update(cur: Cursor) -> bool:
            cur.execute(self.d.q(sql), (command, worker_id, *others))
            if int(cur.rowcount) > 0:
                return True
            # MySQL counts changed rows, not matched ones: a command left again reads 0 there.
            cur.execute(self.d.q("SELECT command FROM {workers} WHERE id = {p}"), (worker_id,))
            row = cur.fetchone()
            return row is not None and row[0] == command

        return self.db.run(update)

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
                     as_float(r["heartbeat_every"]), _text(r.get("command")), _text(r.get("status")))


def _text(value: Any) -> str | None:
    """A short text column as a listing shows it (any value SQLite may hold, as text)."""
    return None if value is None else str(value)[:32]
