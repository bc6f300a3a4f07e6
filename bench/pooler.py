"""errands through a private PgBouncer at the size of issue 13: many worker processes, few server connections.

    .venv/bin/python bench/pooler.py [--mode transaction|session] [--supervisors 50] [--concurrency 8]
                                     [--jobs 50000] [--pool-size 10] [--private-postgres 40]
                                     [--max-db-connections N] [--no-save]

Each root job enqueues one follow-up (``--jobs`` counts both).  With ``--private-postgres
MAX_CONNECTIONS`` PgBouncer sits in front of a private PostgreSQL started for the run with that
``max_connections`` (tests/e2e/private_postgres.py), the issue's set-up; the peak of server
connections is then read from that server's connection log, and logins it refused ("too many
clients") are counted.  Without it PgBouncer sits in front of the shared server on 5432 (never
reconfigured) and its ``max_db_connections`` (default 40) stands in for the server's limit.
Prints jobs, seconds, duplicates, jobs left, exit codes and server connections used, and writes
bench/results/pooler-<timestamp>-<mode>.md and .json.
Uses the test suite's fixtures (tests/e2e/pgbouncer.py, private_postgres.py, test_pooler.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

import common  # noqa: E402
import test_pooler as harness  # noqa: E402
from pgbouncer import UPSTREAM_PORT, PrivatePgBouncer, require_pgbouncer  # noqa: E402
from private_postgres import TOO_MANY, ScratchPostgres, start_scratch_postgres  # noqa: E402


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=("transaction", "session"), default="transaction")
    parser.add_argument("--supervisors", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--pool-size", type=int, default=10, help="PgBouncer's default_pool_size")
    parser.add_argument("--private-postgres", type=int, metavar="MAX_CONNECTIONS",
                        help="run against a private PostgreSQL with this max_connections")
    parser.add_argument("--max-db-connections", type=int,
                        help="PgBouncer's max_db_connections (default: 40 on the shared server, 0 on a private one)")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--no-save", action="store_true", help="print only, write no bench/results file")
    return parser.parse_args()


def _run(args: argparse.Namespace, server: ScratchPostgres | None, admin: Callable[[str], Any],
         database: str) -> dict[str, Any]:
    max_db = args.max_db_connections if args.max_db_connections is not None else (0 if server else 40)
    bouncer = PrivatePgBouncer(require_pgbouncer(), pool_mode=args.mode, default_pool_size=args.pool_size,
                               max_client_conn=max(2000, args.supervisors * (args.concurrency + 4) * 2),
                               max_db_connections=max_db,
                               upstream_port=server.port if server else UPSTREAM_PORT)
    try:
        bouncer.start()
        with tempfile.TemporaryDirectory() as tmp:
            result = harness.drain_through(bouncer, database, Path(tmp), roots=args.jobs // 2,
                                           supervisors=args.supervisors, concurrency=args.concurrency,
                                           timeout=args.timeout, admin=admin, pooler=args.mode)
    finally:
        bouncer.destroy()
    result["max_db_connections"] = max_db
    return result


def main() -> int:
    args = _parse()
    load = os.getloadavg()
    started = datetime.now(timezone.utc)
    database = f"errands_pooler_{secrets.token_hex(4)}"
    server = start_scratch_postgres(args.private_postgres) if args.private_postgres else None
    admin: Callable[[str], Any] = server.connect if server else harness._admin
    try:
        with admin("postgres") as conn:
            conn.execute(f"CREATE DATABASE {database}")
        try:
            result = _run(args, server, admin, database)
        finally:
            with admin("postgres") as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        peak = server.peak_connections() if server else None
        refused = server.refusals() if server else None
    finally:
        if server:
            server.destroy()
    summary = {"mode": args.mode, "supervisors": args.supervisors, "concurrency": args.concurrency,
               "jobs": result["jobs"], "runs": result["runs"], "duplicates": result["runs"] - result["distinct"],
               "left": result["left"], "reserved": result["reserved"], "seconds": round(result["seconds"], 1),
               "exit_codes": sorted(set(result["codes"])), "exit_78": result["codes"].count(78),
               "default_pool_size": args.pool_size, "max_db_connections": result["max_db_connections"],
               "server": f"private, max_connections={args.private_postgres}" if server else "shared (5432)",
               "server_connections_at_end": result["servers"], "peak_server_connections": peak,
               "refused_logins": refused, "too_many_clients_in_worker_logs": result["output"].count(TOO_MANY),
               "load_before": [round(x, 2) for x in load],
               "worker_warnings": _warnings(result["output"])}
    print(json.dumps(summary))
    if not args.no_save:
        _save(started, summary)
    ok = (summary["duplicates"] == 0 and summary["left"] == 0 and summary["runs"] == summary["jobs"]
          and not summary["exit_78"] and not refused and not summary["too_many_clients_in_worker_logs"])
    return 0 if ok else 1


def _warnings(output: str, keep: int = 40) -> dict[str, Any]:
    """How many warning and error lines the workers logged, by message, and the first ``keep`` of them."""
    lines = [line for line in output.splitlines() if " WARNING " in line or " ERROR " in line or "Traceback" in line]
    kinds: dict[str, int] = {}
    for line in lines:
        message = re.sub(r"^\s*\[\d+\]\s*", "", line.split(" WARNING ", 1)[-1].split(" ERROR ", 1)[-1])
        key = message.split(":", 1)[0][:80]
        kinds[key] = kinds.get(key, 0) + 1
    lapsed = sum(int(m.group(1)) for m in re.finditer(r"(\d+) finished run\(s\) were no longer this worker's", output))
    return {"lines": len(lines), "by_message": kinds, "first": lines[:keep], "lapsed_lease_settles_refused": lapsed}


def _save(started: datetime, s: dict[str, Any]) -> None:
    import platform

    peak = "-" if s["peak_server_connections"] is None else str(s["peak_server_connections"])
    text = (f"# errands through PgBouncer ({started:%Y-%m-%d %H:%M UTC})\n\n"
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average "
            f"before the run {s['load_before']}.  PgBouncer in {s['mode']} mode, default_pool_size "
            f"{s['default_pool_size']}, max_db_connections {s['max_db_connections']}; server: {s['server']}.  "
            "Each root job enqueues one follow-up; the time runs from the first worker's start to the last "
            "job's run.\n\n"
            "| mode | workers | jobs | seconds | ran twice | left | reserved | exit codes | peak server connections "
            "| refused logins | server connections at end | settles refused, lease lapsed |\n"
            "|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|\n"
            f"| {s['mode']} | {s['supervisors']} x -c {s['concurrency']} | {s['jobs']:,} | {s['seconds']} | "
            f"{s['duplicates']} | {s['left']} | {s['reserved']} | {s['exit_codes']} | {peak} | "
            f"{'-' if s['refused_logins'] is None else s['refused_logins']} | {s['server_connections_at_end']} | "
            f"{s['worker_warnings']['lapsed_lease_settles_refused']} |\n"
            "\nA job runs twice only when its lease lapsed: another worker's rescue handed it out again and the "
            "first run's settle was refused (errands' at-least-once rule); the workers' warnings are in the JSON.\n")
    common.save_results(f"pooler-{started:%Y%m%dT%H%M%SZ}-{s['mode']}", s, text)


if __name__ == "__main__":
    sys.exit(main())
