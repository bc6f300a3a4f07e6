"""What per-run logs cost a worker (issue 27, point 4): CPU per job and throughput, run logs on and off.

    .venv/bin/python bench/run_logs.py [--backends sqlite,postgres,mariadb] [--jobs 5000] [--rounds 5] [--quick]

Each backend gets a fresh database (bench/run.py's ``FreshDatabase``).  For each kind of job, rounds
alternate an app with run logs on (the default) and one with ``run_logs=False`` (in turn first, so a
warm-up favours neither); a round enqueues ``--jobs`` jobs, then drains them with an in-process burst
worker (4 runner threads) and measures the process's CPU time (``time.process_time``: every thread,
the database driver's client side included; on SQLite the database engine too, as it runs in the
process) and the wall time of the drain.  The figures are the medians of the rounds, per job.

The kinds of job:

* ``silent``: logs nothing (what most jobs are): what capturing costs a run that has nothing to keep;
* ``3 lines``: logs three INFO lines and succeeds plainly: the records are captured, and dropped
  with the plain success (its job keeps no record);
* ``3 lines, kept``: the same with ``keep_result=True``: its log row is written with its result, in
  the settle's transaction (one multi-row INSERT per settle round).

Logging is configured as ``errands worker --log-level WARNING`` leaves it for errands' own loggers,
with the job's logger at INFO and a handler that drops the lines, so both sides format and handle
the same records and the difference is the capture and its row.  The database server's own CPU
(PostgreSQL, MariaDB) is not counted.  Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run import FreshDatabase  # noqa: E402

from errands import Errands  # noqa: E402

JOB_LOG = logging.getLogger("bench.job")
KINDS = ("silent", "3 lines", "3 lines, kept")
KIND_OF = {"sqlite": "sqlite", "postgres": "pg", "mariadb": "mysql"}


def _app(url: str, run_logs: bool) -> Errands:
    app = Errands(url, run_logs=run_logs)

    @app.job(name="bench.silent")
    def silent(n: int) -> None:
        return None

    @app.job(name="bench.lines")
    def lines(n: int) -> None:
        JOB_LOG.info("fetching page %d", n)
        JOB_LOG.info("parsed %d rows", 20)
        JOB_LOG.info("stored %s", "ok")

    @app.job(name="bench.lines_kept", keep_result=True)
    def lines_kept(n: int) -> int:
        JOB_LOG.info("fetching page %d", n)
        JOB_LOG.info("parsed %d rows", 20)
        JOB_LOG.info("stored %s", "ok")
        return n

    return app


def _round(app: Errands, kind: str, jobs: int) -> tuple[float, float]:
    """(CPU µs per job, jobs per second) of one drain."""
    job = app.get_job({"silent": "bench.silent", "3 lines": "bench.lines", "3 lines, kept": "bench.lines_kept"}[kind])
    for start in range(0, jobs, 1000):
        app.enqueue_many([job.prepare(n) for n in range(start, min(jobs, start + 1000))])
    cpu, wall = time.process_time(), time.perf_counter()
    done = app.run_until_empty(concurrency=4)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert done == jobs, (done, jobs)
    app.store.features.prune(None)  # what a worker's maintenance pass does once a minute
    return cpu / jobs * 1e6, jobs / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres,mariadb")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1,000 jobs a round, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds = 1000, 3
    logging.basicConfig(level=logging.WARNING, handlers=[logging.NullHandler()])
    JOB_LOG.setLevel(logging.INFO)
    print(f"Per-run logs: {args.jobs} jobs a round, median of {args.rounds} rounds, in-process burst worker "
          "with 4 runner threads\n")
    print("| backend | job | CPU/job off (µs) | CPU/job on (µs) | on − off | jobs/s off | jobs/s on |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for backend in args.backends.split(","):
        with FreshDatabase(KIND_OF[backend], "runlogs") as db:
            apps = {True: _app(db.url, True), False: _app(db.url, False)}
            apps[True].migrate()
            for kind in KINDS:
                figures: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
                for r in range(args.rounds):
                    for on in ((True, False) if r % 2 else (False, True)):
                        figures[on].append(_round(apps[on], kind, args.jobs))
                off_cpu, on_cpu = (statistics.median(c for c, _ in figures[o]) for o in (False, True))
                off_rate, on_rate = (statistics.median(t for _, t in figures[o]) for o in (False, True))
                print(f"| {backend} | {kind} | {off_cpu:.0f} | {on_cpu:.0f} | {on_cpu - off_cpu:+.0f} "
                      f"({(on_cpu / off_cpu - 1) * 100:+.1f} %) | {off_rate:,.0f} | {on_rate:,.0f} |", flush=True)
            for app in apps.values():
                app.store.close()


if __name__ == "__main__":
    main()
