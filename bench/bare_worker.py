"""The bare-SQL table and claim loop (see bare_bench.py); ``python bare_worker.py URL PROCESSES``.

Forks PROCESSES children that each claim batches of 100 rows until the table is
empty, reporting every deleted row to the benchmark's FIFO.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

CLAIM = 100
PAYLOAD = '{"args":[0.0],"kwargs":{}}'


class Bare:
    def __init__(self, url: str) -> None:
        self.url = url
        self.kind = urlsplit(url).scheme.split("+")[0]
        if self.kind in ("postgres", "postgresql"):
            import psycopg

            self.kind = "pg"
            self.conn: Any = psycopg.connect(url, autocommit=False)
        elif self.kind in ("mysql", "mariadb"):
            import pymysql

            p = urlsplit(url)
            self.conn = pymysql.connect(host=p.hostname or "127.0.0.1", port=p.port or 3306,
                                        user=unquote(p.username or "root"), password=unquote(p.password or ""),
                                        database=p.path.lstrip("/"), autocommit=False)
            with self.conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            self.kind = "mysql"
        elif self.kind == "sqlite":
            import sqlite3

            path = urlsplit(url).path
            self.conn = sqlite3.connect(path[1:] if path.startswith("/") else path, timeout=30,
                                        isolation_level=None)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
        else:
            raise ValueError(f"unsupported URL {url!r}")
        self.mark = "?" if self.kind == "sqlite" else "%s"

    def create(self) -> None:
        cur = self.conn.cursor()
        if self.kind == "pg":
            cur.execute("CREATE TABLE bare_jobs (id BIGSERIAL PRIMARY KEY, queue VARCHAR(60) NOT NULL, "
                        "payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, "
                        "created_at TIMESTAMPTZ NOT NULL DEFAULT now())")
            cur.execute("CREATE INDEX bare_jobs_claim ON bare_jobs (priority DESC, id)")
        elif self.kind == "mysql":
            cur.execute("CREATE TABLE bare_jobs (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
                        "queue VARCHAR(60) NOT NULL, payload MEDIUMTEXT NOT NULL, priority INT NOT NULL DEFAULT 0, "
                        "created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
                        "KEY bare_jobs_claim (priority DESC, id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
        else:
            # A lease column: the claim takes a lease as errands' does (issue 17 defines the bare loop
            # so), and the claim index holds only unleased rows, like errands' partial index.
            cur.execute("CREATE TABLE bare_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, "
                        "payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, "
                        "created_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0), "
                        "reserved_until REAL)")
            cur.execute("CREATE INDEX bare_jobs_claim ON bare_jobs (priority DESC, id) WHERE reserved_until IS NULL")
        self.commit()

    def commit(self) -> None:
        if self.kind != "sqlite":
            self.conn.commit()

    def insert(self, n: int) -> None:
        m = self.mark
        sql = "INSERT INTO bare_jobs (queue, payload, priority) VALUES " + ", ".join([f"({m}, {m}, 0)"] * n)
        params: list[Any] = []
        for _ in range(n):
            params += ["default", PAYLOAD]
        cur = self.conn.cursor()
        cur.execute(sql, params)
        self.commit()

    def claim(self) -> int:
        """Claim and delete up to CLAIM rows in one transaction; returns how many."""
        cur = self.conn.cursor()
        if self.kind == "sqlite":
            # Claim with a lease (UPDATE ... RETURNING), then delete what was claimed: a worker that
            # crashed in between would leave leased rows for a rescuer, never lose them.
            cur.execute(f"UPDATE bare_jobs SET reserved_until = (julianday('now') - 2440587.5) * 86400.0 + 30 "
                        f"WHERE id IN (SELECT id FROM bare_jobs WHERE reserved_until IS NULL "
                        f"ORDER BY priority DESC, id LIMIT {CLAIM}) RETURNING id, payload")
            ids = [r[0] for r in cur.fetchall()]
            if ids:
                cur.execute("DELETE FROM bare_jobs WHERE id IN (" + ", ".join("?" * len(ids)) + ")", ids)
            return len(ids)
        cur.execute(f"SELECT id, payload FROM bare_jobs ORDER BY priority DESC, id LIMIT {CLAIM} "
                    "FOR UPDATE SKIP LOCKED")
        rows = cur.fetchall()
        if rows:
            ids = [r[0] for r in rows]
            cur.execute("DELETE FROM bare_jobs WHERE id IN (" + ", ".join([self.mark] * len(ids)) + ")", ids)
        self.conn.commit()
        return len(rows)

    def close(self) -> None:
        self.conn.close()


def work(url: str) -> None:
    fd = os.open(os.environ["BENCH_FIFO"], os.O_WRONLY)
    db = Bare(url)
    while True:
        n = db.claim()
        if not n:
            break
        os.write(fd, b"\n" * n)
    db.close()


def run_forked(processes: int, body: Callable[[], None]) -> None:
    """Run ``body`` in ``processes`` forked children and exit with the first failure's code (0: none)."""
    children = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                body()
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        children.append(pid)
    status = 0
    for pid in children:
        _, st = os.waitpid(pid, 0)
        status = status or os.waitstatus_to_exitcode(st)
    sys.exit(status)


def main() -> None:
    url, processes = sys.argv[1], int(sys.argv[2])
    run_forked(processes, lambda: work(url))


if __name__ == "__main__":
    main()
