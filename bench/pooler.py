"""errands through a private PgBouncer at the size of issue 13: many worker processes, few server connections.

    .venv/bin/python bench/pooler.py [--mode transaction|session] [--supervisors 50] [--concurrency 8]
                                     [--jobs 50000] [--pool-size 10] [--max-db-connections 40]

Each root job enqueues one follow-up (``--jobs`` counts both).  PgBouncer's ``max_db_connections``
stands in for the issue's PostgreSQL ``max_connections = 40`` (the shared server on 5432 is never
reconfigured).  Prints jobs, seconds, duplicates, jobs left, exit codes and server connections used.
Uses the test suite's fixtures (tests/e2e/pgbouncer.py, tests/e2e/test_pooler.py).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

import test_pooler as harness  # noqa: E402
from pgbouncer import PrivatePgBouncer, require_pgbouncer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("transaction", "session"), default="transaction")
    parser.add_argument("--supervisors", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--pool-size", type=int, default=10)
    parser.add_argument("--max-db-connections", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    bouncer = PrivatePgBouncer(require_pgbouncer(), pool_mode=args.mode, default_pool_size=args.pool_size,
                               max_client_conn=max(2000, args.supervisors * (args.concurrency + 4) * 2),
                               max_db_connections=args.max_db_connections)
    database = f"errands_pooler_{secrets.token_hex(4)}"
    with harness._admin() as conn:
        conn.execute(f"CREATE DATABASE {database}")
    try:
        bouncer.start()
        with tempfile.TemporaryDirectory() as tmp:
            result = harness.drain_through(bouncer, database, Path(tmp), roots=args.jobs // 2,
                                           supervisors=args.supervisors, concurrency=args.concurrency,
                                           timeout=args.timeout, pooler=args.mode)
    finally:
        bouncer.destroy()
        with harness._admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
    exit_78 = result["codes"].count(78)
    summary = {"mode": args.mode, "supervisors": args.supervisors, "concurrency": args.concurrency,
               "jobs": result["jobs"], "runs": result["runs"], "duplicates": result["runs"] - result["distinct"],
               "left": result["left"], "reserved": result["reserved"], "seconds": round(result["seconds"], 1),
               "server_connections": result["servers"], "exit_codes": sorted(set(result["codes"])), "exit_78": exit_78}
    print(json.dumps(summary))
    ok = summary["duplicates"] == 0 and summary["left"] == 0 and summary["runs"] == summary["jobs"] and not exit_78
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
