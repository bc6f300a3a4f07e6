"""Bare-SQL reference loops: what the database and driver allow with no queue library at all.

Run by the project's venv (it has the same drivers errands uses: psycopg 3,
PyMySQL, sqlite3).  Modes:

* ``enqueue``: one ``INSERT`` + ``COMMIT`` per row;
* ``bulk``: one multi-row ``INSERT`` of 1,000 rows per commit;
* ``drain``: P processes (bench/bare_worker.py) loop claiming 100 ready rows
  (PostgreSQL/MariaDB: ``SELECT ... ORDER BY priority DESC, id LIMIT 100 FOR
  UPDATE SKIP LOCKED`` then ``DELETE`` of those ids, in one transaction;
  SQLite: a lease, ``UPDATE ... SET reserved_until = ... WHERE id IN (SELECT ...
  WHERE reserved_until IS NULL ... LIMIT 100) RETURNING``, then ``DELETE`` of those
  ids, each in autocommit), on a table with an index on ``(priority DESC, id)``
  (SQLite: over unleased rows), until the table is empty.

Prints one JSON line (see bench/common.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bare_worker as bw  # noqa: E402
import common  # noqa: E402

SETTINGS = {
    "table": "bare_jobs(id auto-increment PK, queue, payload, priority, created_at) + index (priority DESC, id)",
    "enqueue": "INSERT one row + COMMIT",
    "bulk": f"one multi-row INSERT of {common.BULK_BATCH} rows + COMMIT",
    "claim (PG, MariaDB)": f"BEGIN; SELECT id, payload ... ORDER BY priority DESC, id LIMIT {bw.CLAIM} "
                           "FOR UPDATE SKIP LOCKED; DELETE ... WHERE id IN (...); COMMIT",
    "claim (SQLite)": f"UPDATE ... SET reserved_until = now + 30 WHERE id IN (SELECT id ... WHERE reserved_until "
                      f"IS NULL ORDER BY priority DESC, id LIMIT {bw.CLAIM}) RETURNING id, payload; DELETE ... "
                      "WHERE id IN (...) (each in autocommit; WAL, synchronous=NORMAL like errands)",
    "drivers": "psycopg 3 (PG), PyMySQL (MariaDB, READ COMMITTED), sqlite3",
}


def enqueue(args: Any) -> dict[str, Any]:
    db = bw.Bare(args.db_url)
    db.create()
    return common.timed_enqueue(lambda: db.insert(1), args.jobs)


def bulk(args: Any) -> dict[str, Any]:
    db = bw.Bare(args.db_url)
    db.create()
    return common.timed_bulk(db.insert, args.jobs)


def drain(args: Any) -> dict[str, Any]:
    db = bw.Bare(args.db_url)
    db.create()
    done = 0
    while done < args.jobs:
        k = min(5000, args.jobs - done)
        db.insert(k)
        done += k
    db.close()
    collector = common.Collector(args.workdir)
    log = os.path.join(args.workdir, "bare-worker.log")
    proc = common.start_workers([sys.executable, os.path.join(HERE, "bare_worker.py"), args.db_url,
                                 str(args.processes)], collector.env, log)
    try:
        return common.measure_drain(collector, proc, args.jobs, args.timeout, log)
    finally:
        common.stop_workers(proc)
        collector.close()


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS}


if __name__ == "__main__":
    common.run_main("bare", {"enqueue": enqueue, "bulk": bulk, "drain": drain, "info": info}, __doc__ or "")
