"""The bare *leased* loop (issue 29 goal 3): ``python bare_leased_worker.py URL PROCESSES [CLAIM]``.

The honest limit for a leased queue: what errands does per batch with nothing else.  Each of
PROCESSES forked children loops:

1. claim: one transaction that sets a lease (owner and expiry) on the next ``CLAIM`` ready rows
   and returns them (PostgreSQL: ``UPDATE ... FROM (SELECT ... FOR UPDATE SKIP LOCKED)`` in one
   autocommit statement whose commit does not wait for the WAL flush, ``synchronous_commit`` off
   for that transaction, as errands' claim; MariaDB: ``SELECT ... FOR UPDATE SKIP LOCKED`` then
   ``UPDATE`` of those ids, ``BEGIN ... COMMIT``; SQLite: ``BEGIN IMMEDIATE; UPDATE ... WHERE id IN
   (SELECT ... LIMIT n) RETURNING; COMMIT``);
2. run a no-op per row (one line into the benchmark's FIFO, the body of every system's no-op job);
3. settle: one autocommit ``DELETE ... WHERE reserved_by = owner AND id IN (...)``, committed
   durably (PostgreSQL's default synchronous commit; SQLite WAL with synchronous=NORMAL, as errands).

The table has the lease columns and a claim index over unleased rows only (PostgreSQL and SQLite:
partial; MariaDB has no partial index: ``(reserved_by, priority DESC, id)``), as errands' table.
It differs from bare_worker.py, which on PostgreSQL and MariaDB deletes the rows it locked in the
claim's own transaction (no lease, one commit per batch).
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import unquote, urlsplit

from bare_worker import run_forked

CLAIM = 510
"""Rows per claim: errands' own at ``-c 10`` with no-op jobs (10 running + its largest prefetch, 500,
which no-op jobs reach at once).  The old bare loop takes 100; ``BENCH_LEASED_CLAIM=100`` gives
that (at 100, PostgreSQL's leased loop drained some 70k jobs/s here against 95k at 500)."""
PAYLOAD = '{"args":[0.0],"kwargs":{}}'
LEASE_SECONDS = 30


def _connect(url: str) -> tuple[str, Any]:
    kind = urlsplit(url).scheme.split("+")[0]
    if kind in ("postgres", "postgresql"):
        import psycopg

        return "pg", psycopg.connect(url, autocommit=True)
    if kind in ("mysql", "mariadb"):
        import pymysql

        p = urlsplit(url)
        conn = pymysql.connect(host=p.hostname or "127.0.0.1", port=p.port or 3306,
                               user=unquote(p.username or "root"), password=unquote(p.password or ""),
                               database=p.path.lstrip("/"), autocommit=True)
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")  # as errands
        return "mysql", conn
    if kind == "sqlite":
        import sqlite3

        path = urlsplit(url).path
        conn = sqlite3.connect(path[1:] if path.startswith("/") else path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        return "sqlite", conn
    raise ValueError(f"unsupported URL {url!r}")


CREATE = {
    "pg": ["CREATE TABLE leased_jobs (id BIGSERIAL PRIMARY KEY, queue VARCHAR(60) NOT NULL, payload TEXT NOT NULL, "
           "priority INTEGER NOT NULL DEFAULT 0, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
           "reserved_by VARCHAR(120), reserved_until TIMESTAMPTZ)",
           "CREATE INDEX leased_jobs_claim ON leased_jobs (priority DESC, id) WHERE reserved_by IS NULL"],
    "mysql": ["CREATE TABLE leased_jobs (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, queue VARCHAR(60) NOT NULL, "
              "payload MEDIUMTEXT NOT NULL, priority INT NOT NULL DEFAULT 0, "
              "created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), reserved_by VARCHAR(120), "
              "reserved_until DATETIME(6), KEY leased_jobs_claim (reserved_by, priority DESC, id)) "
              "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"],
    "sqlite": ["CREATE TABLE leased_jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, "
               "payload TEXT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, "
               "created_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0), "
               "reserved_by TEXT, reserved_until REAL)",
               "CREATE INDEX leased_jobs_claim ON leased_jobs (priority DESC, id) WHERE reserved_by IS NULL"],
}

PG_CLAIM = ("WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
            "picked AS (SELECT id FROM leased_jobs WHERE reserved_by IS NULL ORDER BY priority DESC, id "
            "LIMIT %s FOR UPDATE SKIP LOCKED) "
            f"UPDATE leased_jobs AS j SET reserved_by = %s, reserved_until = now() + interval '{LEASE_SECONDS} s' "
            "FROM picked, async WHERE j.id = picked.id RETURNING j.id, j.payload")
SQLITE_CLAIM = ("UPDATE leased_jobs SET reserved_by = ?, "
                f"reserved_until = (julianday('now') - 2440587.5) * 86400.0 + {LEASE_SECONDS} "
                "WHERE id IN (SELECT id FROM leased_jobs WHERE reserved_by IS NULL ORDER BY priority DESC, id "
                "LIMIT ?) RETURNING id, payload")


class Leased:
    """One connection's claim / settle (see the module's docstring)."""

    def __init__(self, url: str, owner: str = "bench") -> None:
        self.kind, self.conn = _connect(url)
        self.owner = owner

    def create(self) -> None:
        cur = self.conn.cursor()
        for sql in CREATE[self.kind]:
            cur.execute(sql)

    def insert(self, n: int) -> None:
        m = "?" if self.kind == "sqlite" else "%s"
        sql = "INSERT INTO leased_jobs (queue, payload, priority) VALUES " + ", ".join([f"({m}, {m}, 0)"] * n)
        params: list[Any] = []
        for _ in range(n):
            params += ["default", PAYLOAD]
        self.conn.cursor().execute(sql, params)

    def claim(self, n: int) -> list[Any]:
        """Lease up to ``n`` ready rows in one committed transaction; their (id, payload)."""
        cur = self.conn.cursor()
        if self.kind == "pg":
            cur.execute(PG_CLAIM, (n, self.owner))
            return list(cur.fetchall())
        if self.kind == "sqlite":
            cur.execute("BEGIN IMMEDIATE")
            cur.execute(SQLITE_CLAIM, (self.owner, n))
            rows = cur.fetchall()
            cur.execute("COMMIT")
            return rows
        self.conn.begin()
        cur.execute("SELECT id, payload FROM leased_jobs WHERE reserved_by IS NULL ORDER BY priority DESC, id "
                    "LIMIT %s FOR UPDATE SKIP LOCKED", (n,))
        rows = list(cur.fetchall())
        if rows:
            cur.execute("UPDATE leased_jobs SET reserved_by = %s, reserved_until = NOW(6) + INTERVAL "
                        f"{LEASE_SECONDS} SECOND WHERE id IN (" + ", ".join(["%s"] * len(rows)) + ")",
                        [self.owner, *(r[0] for r in rows)])
        self.conn.commit()
        return rows

    def settle(self, ids: list[int]) -> None:
        """Delete the finished rows still leased by this owner: one autocommit statement."""
        cur = self.conn.cursor()
        if self.kind == "pg":
            cur.execute("DELETE FROM leased_jobs WHERE reserved_by = %s AND id = ANY(%s)", (self.owner, ids))
            return
        m = "?" if self.kind == "sqlite" else "%s"
        cur.execute(f"DELETE FROM leased_jobs WHERE reserved_by = {m} AND id IN (" + ", ".join([m] * len(ids)) + ")",
                    [self.owner, *ids])

    def close(self) -> None:
        self.conn.close()


def noop(fd: int) -> None:
    """The job: report "handled" to the benchmark (common.mark's drain line)."""
    os.write(fd, b"\n")


def work(url: str, claim: int) -> None:
    fd = os.open(os.environ["BENCH_FIFO"], os.O_WRONLY)
    db = Leased(url, owner=f"bench:{os.getpid()}")
    while True:
        rows = db.claim(claim)
        if not rows:
            break
        for _ in rows:
            noop(fd)
        db.settle([r[0] for r in rows])
    db.close()


def main() -> None:
    url, processes = sys.argv[1], int(sys.argv[2])
    claim = int(sys.argv[3]) if len(sys.argv) > 3 else CLAIM
    run_forked(processes, lambda: work(url, claim))


if __name__ == "__main__":
    main()
