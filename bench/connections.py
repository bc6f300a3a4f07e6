"""How many database connections a worker holds while its jobs enqueue follow-ups (issue 13).

Starts ``errands worker -p P -c C`` on the fanout_jobs test app, enqueues P*C ``fan_out`` jobs, waits
until every one is running (a file per job), counts the server's connections to the database, then
releases the jobs and stops the worker.  PostgreSQL: rows of ``pg_stat_activity`` for the database;
MariaDB: rows of ``information_schema.processlist`` for the database.

    python bench/connections.py postgres -p 2 -c 16
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).parent.parent / "tests"), str(Path(__file__).parent.parent / "tests" / "apps")]

from helpers import run_cli, start_worker, wait_for  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/"
MY = "mysql://root@127.0.0.1:3306/"


def _pg_count(name: str) -> int:
    import psycopg

    with psycopg.connect(PG + "test", autocommit=True) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)).fetchone()[0])


def _my_count(name: str) -> int:
    import pymysql

    with pymysql.connect(host="127.0.0.1", user="root") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM information_schema.processlist WHERE db = %s", (name,))
        return int(cur.fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("server", choices=["postgres", "mariadb"])
    parser.add_argument("-p", type=int, default=2)
    parser.add_argument("-c", type=int, default=16)
    parser.add_argument("--show", action="store_true", help="print what errands status and doctor say meanwhile")
    args = parser.parse_args()
    name = f"errands_conn_{secrets.token_hex(4)}"
    if args.server == "postgres":
        import psycopg

        with psycopg.connect(PG + "test", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url, count = PG + name, _pg_count
    else:
        import pymysql

        with pymysql.connect(host="127.0.0.1", user="root") as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        url, count = MY + name, _my_count
    notes = Path(tempfile.mkdtemp())
    env = {"ERRANDS_APP": "fanout_jobs:app", "ERRANDS_TEST_NOTES": str(notes)}
    try:
        run_cli(url, "migrate", **env)
        jobs = args.p * args.c
        os.environ["ERRANDS_DATABASE_URL"] = url
        import fanout_jobs

        for _ in range(jobs):
            fanout_jobs.fan_out.enqueue()
        fanout_jobs.app.store.close()
        worker = start_worker(url, "-p", str(args.p), "-c", str(args.c), **env)
        try:
            wait_for(lambda: len(list(notes.glob("running-*"))) >= jobs, timeout=60, message="all jobs running")
            time.sleep(0.5)  # let every runner thread's enqueue return its connection (or keep it)
            held = count(name)
            print(f"{args.server} -p {args.p} -c {args.c}: {held} connections while {jobs} jobs run "
                  f"(each enqueued a follow-up)")
            if args.show:
                for command in ("status", "doctor"):
                    out = run_cli(url, command, **env)
                    lines = out.stdout.splitlines()
                    print("\n".join(line for line in lines if "worker" in line or "connections" in line))
        finally:
            (notes / "release").touch()
            worker.send_signal(signal.SIGTERM)
            worker.wait(60)
    finally:
        if args.server == "postgres":
            with psycopg.connect(PG + "test", autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        else:
            with pymysql.connect(host="127.0.0.1", user="root") as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name}")


if __name__ == "__main__":
    main()
