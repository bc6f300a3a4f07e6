"""errands under benchmark: run by the project's venv (``.venv/bin/python``).

    python bench/errands_bench.py --mode drain --jobs 20000 --processes 2 \
        --db-url postgresql://postgres@127.0.0.1:5432/errands_bench_x --workdir /tmp/x

Workers are real ``python -m errands worker`` processes (supervisor + forked
worker processes), at log level WARNING so no per-job log line is written.
Prints one JSON line (see bench/common.py).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402
from errands_app import app, noop, sleepy  # noqa: E402

CONCURRENCY = int(os.environ.get("BENCH_ERRANDS_CONCURRENCY", "10"))
"""Threads per worker process (``-c``); also the most jobs one claim takes."""
PREFILL_BATCH = 5000
IO_CONCURRENCY = 32
"""Threads of the single worker process in the I/O-bound run (each job sleeps 10 ms)."""

SETTINGS = {
    "worker": f"python -m errands --log-level WARNING worker -p P -c {CONCURRENCY} (--burst for drains)",
    "concurrency": CONCURRENCY,
    "sleep": "1.0 s (default: longest idle poll interval)",
    "lease": "30 s (default)",
    "enqueue": "noop.enqueue(stamp): one INSERT + commit per job",
    "bulk": f"app.enqueue_many([noop.prepare(...) x {common.BULK_BATCH}]): multi-row INSERTs, one call per batch",
    "sqlite": "WAL, synchronous=NORMAL, busy_timeout 30 s (errands' defaults); the row 'SQLite, synchronous=full' "
              "adds ?synchronous=full to the URL (enqueue, drain 1p and pickup only)",
}


def _open(url: str) -> None:
    app.use_database(url)
    app.migrate()


def _prefill(n: int, job: Any = noop) -> float:
    t0 = time.perf_counter()
    done = 0
    while done < n:
        k = min(PREFILL_BATCH, n - done)
        app.enqueue_many([job.prepare(0.0) for _ in range(k)])
        done += k
    return time.perf_counter() - t0


def _worker_cmd(url: str, processes: int, burst: bool, concurrency: int = CONCURRENCY) -> list[str]:
    cmd = [sys.executable, "-m", "errands", "--app", "errands_app:app", "--database-url", url,
           "--log-level", "WARNING", "worker", "-p", str(processes), "-c", str(concurrency)]
    return cmd + (["--burst"] if burst else [])


def _env(collector: common.Collector) -> dict[str, str]:
    env = collector.env
    env["PYTHONPATH"] = HERE + os.pathsep + os.environ.get("PYTHONPATH", "")
    return env


def enqueue(args: Any) -> dict[str, Any]:
    _open(args.db_url)
    return common.timed_enqueue(lambda: noop.enqueue(0.0), args.jobs)


def bulk(args: Any) -> dict[str, Any]:
    _open(args.db_url)
    return common.timed_bulk(lambda k: app.enqueue_many([noop.prepare(0.0) for _ in range(k)]), args.jobs)


def _drain(args: Any, n_waiting: int, n_measured: int, burst: bool, rss: bool, job: Any = noop,
           concurrency: int = CONCURRENCY) -> dict[str, Any]:
    _open(args.db_url)
    fill = _prefill(n_waiting, job)
    app.store.close()
    collector = common.Collector(args.workdir)
    log = os.path.join(args.workdir, "worker.log")
    proc = common.start_workers(_worker_cmd(args.db_url, args.processes, burst, concurrency), _env(collector), log)
    try:
        result = common.measure_drain(collector, proc, n_measured, args.timeout, log, rss=rss)
    finally:
        common.stop_workers(proc)
        collector.close()
    result["prefill_seconds"] = round(fill, 3)
    problems = _log_problems(log)
    if problems:
        result["worker_log"] = problems
    return result


def _log_problems(log: str) -> str:
    """Worker log lines other than the banner and the expected "stopping" line (errors, warnings)."""
    try:
        lines = open(log, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return ""
    keep = [x for x in lines if x.strip() and not x.startswith(("errands worker:", "  queues:", "  jobs:"))
            and "stopping: finishing running jobs" not in x]
    return "\n".join(keep[-20:])[-2000:]


def drain(args: Any) -> dict[str, Any]:
    return _drain(args, args.jobs, args.jobs, burst=True, rss=False)


def io(args: Any) -> dict[str, Any]:
    """Issue 3 item 5: jobs that sleep 10 ms, one process, concurrency 32 (ideal 3,200 jobs/s)."""
    result = _drain(args, args.jobs, args.jobs, burst=True, rss=False, job=sleepy, concurrency=IO_CONCURRENCY)
    if "value" in result:
        result["fraction_of_ideal"] = round(result["value"] / (IO_CONCURRENCY / 0.01), 3)
    return result


def _fill_by_copy(n: int) -> float:
    """Set-up for the scale test: 5,000 jobs through enqueue_many, then INSERT ... SELECT copies up to ``n``.

    The copies are ordinary ready rows (same queue, job name and payload), so
    the worker cannot tell them from enqueued ones; only the filling is faster.
    """
    from errands.store.dialects.base import JOB_COLUMNS

    t0 = time.perf_counter()
    seed = min(n, PREFILL_BATCH)
    _prefill(seed)
    store = app.store
    cols = ", ".join(c.strip() for c in JOB_COLUMNS.split(",") if c.strip() != "id")
    have = seed
    while have < n:
        k = min(have, n - have)

        def copy(cur: Any, k: int = k) -> None:
            cur.execute(f"INSERT INTO {store.dialect.t_jobs} ({cols}) SELECT {cols} FROM {store.dialect.t_jobs} "
                        f"ORDER BY id LIMIT {int(k)}")

        store.db.run(copy, write=True)
        have += k
    return time.perf_counter() - t0


def scale(args: Any) -> dict[str, Any]:
    """With ``--waiting`` jobs in the table, time the first ``--jobs`` handled; sample the workers' RSS."""
    waiting = max(args.waiting, args.jobs)
    _open(args.db_url)
    fill = _fill_by_copy(waiting)
    app.store.close()
    collector = common.Collector(args.workdir)
    log = os.path.join(args.workdir, "worker.log")
    proc = common.start_workers(_worker_cmd(args.db_url, args.processes, burst=False), _env(collector), log)
    try:
        result = common.measure_drain(collector, proc, args.jobs, args.timeout, log, rss=True)
    finally:
        common.stop_workers(proc)
        collector.close()
    result["prefill_seconds"] = round(fill, 3)
    result["waiting"] = waiting
    problems = _log_problems(log)
    if problems:
        result["worker_log"] = problems
    if "rss_kib" in result:
        # The supervisor is the group leader; the forked worker processes do the work.
        workers = {pid: v for pid, v in result["rss_kib"].items() if int(pid) != proc.pid}
        result["worker_rss_growth_kib"] = sum(v["last"] - v["first"] for v in workers.values())
        result["worker_rss_max_kib"] = sum(v["max"] for v in workers.values())
    return result


def latency(args: Any) -> dict[str, Any]:
    _open(args.db_url)
    app.store.close()
    collector = common.Collector(args.workdir)
    log = os.path.join(args.workdir, "worker.log")
    proc = common.start_workers(_worker_cmd(args.db_url, args.processes, burst=False), _env(collector), log)
    try:
        result = common.measure_latency(collector, proc, lambda stamp: noop.enqueue(stamp), args.samples,
                                        args.interval, log)
    finally:
        common.stop_workers(proc)
        collector.close()
    problems = _log_problems(log)
    if problems:
        result["worker_log"] = problems
    return result


def info(args: Any) -> dict[str, Any]:
    import sqlite3
    from importlib.metadata import version

    return {"settings": SETTINGS, "versions": {
        "errands": version("errands"), "psycopg": version("psycopg"), "PyMySQL": version("PyMySQL"),
        "click": version("click"), "python": sys.version.split()[0], "sqlite_library": sqlite3.sqlite_version}}


if __name__ == "__main__":
    common.run_main("errands", {"enqueue": enqueue, "bulk": bulk, "drain": drain, "io": io, "latency": latency,
                                "scale": scale, "info": info}, __doc__ or "")
