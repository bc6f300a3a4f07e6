"""The worker registry: who is running, where, and when it last said so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.rows import WorkerRow
from .database import Database
from .dialects.base import WORKER_COLUMNS, worker_row


class WorkerStore:
    """Registry rows of worker processes, refreshed by their heartbeats."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.d = db.dialect

    def register(self, worker_id: str, hostname: str, pid: int, queues: Sequence[str],
                        concurrency: int) -> None:
        def insert(cur: Any) -> None:
            cur.execute(self.d.q("INSERT INTO {workers} (" + WORKER_COLUMNS + ") VALUES "
                               "({p}, {p}, {p}, {p}, {p}, {now}, {now}, 0)"),
                        (worker_id, hostname, pid, ",".join(queues), concurrency))

        self.db.run(insert)

    def heartbeat(self, worker_id: str, jobs_done: int) -> None:
        def update(cur: Any) -> None:
            cur.execute(self.d.q("UPDATE {workers} SET heartbeat_at = {now}, jobs_done = {p} WHERE id = {p}"),
                        (jobs_done, worker_id))

        self.db.run(update)

    def unregister(self, worker_id: str) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {workers} WHERE id = {p}"), (worker_id,)))

    def list_workers(self) -> list[WorkerRow]:
        def read(cur: Any) -> list[WorkerRow]:
            cur.execute(self.d.q("SELECT " + WORKER_COLUMNS + " FROM {workers} ORDER BY started_at, id"))
            return [worker_row(self.d.to_datetime, r) for r in cur.fetchall()]

        return self.db.run(read)

    def prune(self, older_than: float) -> int:
        """Forget registry rows whose heartbeat is older than ``older_than`` seconds."""

        def delete(cur: Any) -> int:
            cur.execute(self.d.q("DELETE FROM {workers} WHERE heartbeat_at < {now_plus}"), (-float(older_than),))
            return int(cur.rowcount)

        return self.db.run(delete)
