"""The bare leased loop as a benchmark script (bench/bare_leased_worker.py): drain only.

    python bench/bare_leased_bench.py --mode drain --jobs 20000 --processes 1 --db-url URL

bench/run.py runs it as "bare leased loop" beside bare_bench.py's older loops, and prints errands'
drain as a ratio of it.  ``BENCH_LEASED_CLAIM`` sets the rows per claim (default 510, errands' batch at ``-c 10``).
Prints one JSON line (see bench/common.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bare_leased_worker as lw  # noqa: E402
import common  # noqa: E402

CLAIM = int(os.environ.get("BENCH_LEASED_CLAIM", lw.CLAIM))

SETTINGS = {
    "table": "leased_jobs(id, queue, payload, priority, created_at, reserved_by, reserved_until) + claim index "
             "over unleased rows (PG, SQLite: partial; MariaDB: (reserved_by, priority DESC, id))",
    "claim (PG)": f"one autocommit UPDATE ... FROM (SELECT id ... LIMIT {CLAIM} FOR UPDATE SKIP LOCKED) RETURNING, "
                  "synchronous_commit off for that transaction (as errands' claim)",
    "claim (MariaDB)": f"BEGIN; SELECT id, payload ... LIMIT {CLAIM} FOR UPDATE SKIP LOCKED; UPDATE ... SET lease "
                       "WHERE id IN (...); COMMIT (READ COMMITTED)",
    "claim (SQLite)": f"BEGIN IMMEDIATE; UPDATE ... SET lease WHERE id IN (SELECT ... LIMIT {CLAIM}) RETURNING; "
                      "COMMIT (WAL, synchronous=NORMAL)",
    "job": "one line written to the benchmark's FIFO per row (errands' no-op job body)",
    "settle": "one autocommit DELETE ... WHERE reserved_by = owner AND id IN (the batch), durable commit",
}


def drain(args: Any) -> dict[str, Any]:
    db = lw.Leased(args.db_url)
    db.create()
    done = 0
    while done < args.jobs:
        k = min(1000, args.jobs - done)
        db.insert(k)
        done += k
    db.close()
    collector = common.Collector(args.workdir)
    log = os.path.join(args.workdir, "leased-worker.log")
    proc = common.start_workers([sys.executable, os.path.join(HERE, "bare_leased_worker.py"), args.db_url,
                                 str(args.processes), str(CLAIM)], collector.env, log)
    try:
        result = common.measure_drain(collector, proc, args.jobs, args.timeout, log)
    finally:
        common.stop_workers(proc)
        collector.close()
    result["claim"] = CLAIM
    return result


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS}


if __name__ == "__main__":
    common.run_main("bare-leased", {"drain": drain, "info": info}, __doc__ or "")
