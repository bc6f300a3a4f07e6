"""Big backlogs (issue 13): what a worker, an enqueue and the dashboard cost with N jobs waiting.

    make bench-backlog [BENCH_ARGS="--sizes postgres:10000,1000000 --no-bloat"]
    .venv/bin/python bench/backlog.py [--sizes postgres:10000,1000000,10000000,sqlite:1000000,mariadb:1000000]
                                      [--drain 20000] [--samples 200] [--enqueues 1000] [--no-bloat]

For each backend and size, one fresh database is filled to N ready jobs in the
``default`` queue (5,000 through ``enqueue_many``, then ``INSERT ... SELECT``
copies, as ``errands_bench.py --mode scale``), and on that same table:

- dashboard: the median of 5 calls of each of the dashboard's main reads
  (``operator.overview``, ``operator.list_jobs`` unfiltered and filtered to the
  ready jobs of ``default``, ``operator.queues_view``);
- enqueue: 1,000 single enqueues (one INSERT + commit each) into ``default``;
- pickup: an idle worker serving only the queue ``pickup``; 200 jobs enqueued
  there one at a time, 20 ms apart; enqueue-returned to job-start p50/p99 (the
  backlog waits in ``default``: the claim must stay an index range scan);
- drain: one worker process (``-c 10``) on ``default``; the rate from the first
  to the 20,000th job handled.

With the largest PostgreSQL size (unless ``--no-bloat``): the whole table is
drained by ``errands worker --burst -p 2 -c 8``; the jobs table's size and dead
tuples are read right after, again after ``VACUUM (ANALYZE)``, and after
another 100,000 jobs were enqueued and drained (does the table reuse its space).

Writes bench/results/backlog-<timestamp>.md and .json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402
import errands_bench as eb  # noqa: E402
from errands_app import app, noop  # noqa: E402
from run import FreshDatabase  # noqa: E402

KINDS = {"postgres": "pg", "sqlite": "sqlite", "mariadb": "mysql"}
DEFAULT_SIZES = "postgres:10000,1000000,10000000,sqlite:1000000,mariadb:1000000"
PICKUP_QUEUE = "pickup"
REPS = 5


def parse_sizes(text: str) -> list[tuple[str, int]]:
    """``postgres:10000,1000000,sqlite:1000000`` -> [(postgres, 10000), (postgres, 1000000), (sqlite, 1000000)]."""
    out: list[tuple[str, int]] = []
    backend = ""
    for part in text.split(","):
        part = part.strip()
        if ":" in part:
            backend, part = part.split(":", 1)
            if backend not in KINDS:
                raise SystemExit(f"unknown backend {backend!r}: one of {', '.join(KINDS)}")
        if not backend:
            raise SystemExit("--sizes must start with a backend: postgres:10000,...")
        out.append((backend, int(part.replace("_", ""))))
    return out


def _worker(url: str, workdir: str, collector: common.Collector, queue: str, processes: int = 1,
            concurrency: int = eb.CONCURRENCY, burst: bool = False, name: str = "worker") -> Any:
    cmd = eb._worker_cmd(url, processes, burst, concurrency) + ["-q", queue]
    return common.start_workers(cmd, eb._env(collector), os.path.join(workdir, f"{name}.log"))


def dashboard_reads(reps: int = REPS, warm: bool = True) -> dict[str, float]:
    """Median milliseconds of the reads the overview, jobs and queues pages make."""
    from errands.services import operator

    reads = {
        "overview": lambda: operator.overview(app, "1h"),
        "jobs": lambda: operator.list_jobs(app, operator.JobFilter()),
        "jobs_ready_default": lambda: operator.list_jobs(app, operator.JobFilter(queue="default", state="ready")),
        "queues": lambda: operator.queues_view(app),
    }
    out: dict[str, float] = {}
    for label, read in reads.items():
        if warm:
            read()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            read()
            times.append(time.perf_counter() - t0)
        out[label] = round(statistics.median(times) * 1000, 2)
    return out


def analyze(backend: str) -> None:
    table = app.store.dialect.t_jobs
    sql = f"ANALYZE TABLE {table}" if backend == "mariadb" else f"ANALYZE {table}"

    def run(cur: Any) -> None:
        cur.execute(sql)
        if backend == "mariadb":
            cur.fetchall()

    app.store.db.run(run, write=True)


def pickup(url: str, workdir: str, samples: int, interval: float) -> dict[str, Any]:
    collector = common.Collector(workdir)
    proc = _worker(url, workdir, collector, PICKUP_QUEUE, name="pickup")
    job = noop.using(queue=PICKUP_QUEUE)
    try:
        return common.measure_latency(collector, proc, lambda stamp: job.enqueue(stamp), samples, interval,
                                      os.path.join(workdir, "pickup.log"))
    finally:
        common.stop_workers(proc)
        collector.close()


def drain(url: str, workdir: str, n: int, timeout: float) -> dict[str, Any]:
    collector = common.Collector(workdir)
    proc = _worker(url, workdir, collector, "default", name="drain")
    try:
        return common.measure_drain(collector, proc, n, timeout, os.path.join(workdir, "drain.log"))
    finally:
        common.stop_workers(proc)
        collector.close()


def pg_table_stats(url: str) -> dict[str, Any]:
    import psycopg

    table = app.store.dialect.t_jobs
    time.sleep(1.0)  # the statistics of other backends' work arrive in pg_stat_user_tables within ~1 s
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(relid), pg_relation_size(relid), n_live_tup, n_dead_tup, "
            "last_autovacuum, last_vacuum, autovacuum_count FROM pg_stat_user_tables WHERE relname = %s",
            (table.split(".")[-1].strip('"'),)).fetchone()
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None and count is not None
    return {"total_mb": round(row[0] / 2**20, 1), "heap_mb": round(row[1] / 2**20, 1), "n_live_tup": row[2],
            "n_dead_tup": row[3], "last_autovacuum": row[4].isoformat() if row[4] else None,
            "last_vacuum": row[5].isoformat() if row[5] else None, "autovacuum_count": row[6], "rows": count[0]}


def full_drain(url: str, workdir: str, expected: int, timeout: float) -> dict[str, Any]:
    """``errands worker --burst -p 2 -c 8`` until the table is empty."""
    collector = common.Collector(workdir)
    proc = _worker(url, workdir, collector, "default", processes=2, concurrency=8, burst=True, name="full")
    t0 = time.perf_counter()
    try:
        proc.wait(timeout=timeout)
        seconds = time.perf_counter() - t0
    except Exception:
        seconds = float("nan")
    finally:
        common.stop_workers(proc)
        time.sleep(0.5)
        collector.close()
    return {"jobs": collector.count, "expected": expected, "seconds": round(seconds, 1),
            "rate": round(collector.count / seconds) if seconds == seconds and seconds > 0 else None}


def bloat(url: str, workdir: str, timeout: float) -> dict[str, Any]:
    import psycopg

    out: dict[str, Any] = {"before_drain": pg_table_stats(url)}
    waiting = out["before_drain"]["rows"]
    out["drain"] = full_drain(url, workdir, waiting, timeout)
    print(f"    drained {out['drain']}", file=sys.stderr)
    out["after_drain"] = pg_table_stats(url)
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {app.store.dialect.t_jobs}")
    out["vacuum_seconds"] = round(time.perf_counter() - t0, 1)
    out["after_vacuum"] = pg_table_stats(url)
    app.use_database(url)
    t0 = time.perf_counter()
    eb._prefill(100_000)
    out["refill_seconds"] = round(time.perf_counter() - t0, 1)
    out["after_refill_100k"] = pg_table_stats(url)
    app.store.close()
    out["drain_100k"] = full_drain(url, workdir, 100_000, timeout)
    out["after_drain_100k"] = pg_table_stats(url)
    return out


def one(backend: str, size: int, args: argparse.Namespace, do_bloat: bool) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="errands_backlog_")
    with FreshDatabase(KINDS[backend], f"backlog_{backend}") as db:
        url = db.url
        eb._open(url)
        fill = eb._fill_by_copy(max(size, args.drain))
        r: dict[str, Any] = {"backend": backend, "waiting": max(size, args.drain), "fill_seconds": round(fill, 1)}
        if backend == "postgres":
            r["table_mb"] = pg_table_stats(url)["total_mb"]
        print(f"  {backend} {size:,}: filled in {fill:.1f}s", file=sys.stderr)
        # Right after a bulk load the planner has no statistics of the new rows (autovacuum's
        # ANALYZE comes within a minute or so): one call of each read then, the medians after ANALYZE.
        r["dashboard_before_analyze_ms"] = dashboard_reads(reps=1, warm=False)
        t0 = time.perf_counter()
        analyze(backend)
        r["analyze_seconds"] = round(time.perf_counter() - t0, 1)
        r["dashboard_ms"] = dashboard_reads()
        r["enqueue"] = common.timed_enqueue(lambda: noop.enqueue(0.0), args.enqueues)
        app.store.close()
        r["pickup"] = pickup(url, workdir, args.samples, args.interval)
        r["drain"] = drain(url, workdir, args.drain, args.timeout)
        print(f"  {backend} {size:,}: drain {r['drain'].get('value', 0):,.0f}/s, "
              f"pickup p50 {r['pickup'].get('p50_ms', float('nan')):.1f} ms, "
              f"enqueue {r['enqueue']['value']:,.0f}/s, dashboard {r['dashboard_ms']}", file=sys.stderr)
        if do_bloat:
            r["bloat"] = bloat(url, workdir, args.bloat_timeout)
    app.store.close()
    shutil.rmtree(workdir, ignore_errors=True)
    return r


def _f(v: Any, fmt: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def table(report: dict[str, Any]) -> str:
    lines = [f"# Big backlogs ({report['started']})", "",
             f"{report['machine']}; drain: first {report['drain_jobs']:,} jobs, one worker process -c "
             f"{eb.CONCURRENCY}; pickup: {report['samples']} jobs into queue `{PICKUP_QUEUE}` with an idle worker "
             f"on it, the backlog in `default`; enqueue: {report['enqueues']:,} single enqueues; dashboard: median "
             f"of {REPS} calls (ms) after ANALYZE of the jobs table; \"overview before ANALYZE\": one call right "
             "after the fill, before the planner has statistics of the new rows.", "",
             "| backend | waiting | drain jobs/s | pickup p50 ms | pickup p99 ms | enqueue jobs/s "
             "| overview ms | jobs ms | jobs ready ms | queues ms | overview before ANALYZE ms |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in report["runs"]:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['waiting']:,} | error: {r['error']} |||||||")
            continue
        d, p, e = r["drain"], r["pickup"], r["enqueue"]
        ms = r["dashboard_ms"]
        lines.append(f"| {r['backend']} | {r['waiting']:,} | {_f(d.get('value'))} | {_f(p.get('p50_ms'), '.1f')} "
                     f"| {_f(p.get('p99_ms'), '.1f')} | {_f(e.get('value'))} | {ms['overview']:.1f} | {ms['jobs']:.1f} "
                     f"| {ms['jobs_ready_default']:.1f} | {ms['queues']:.1f} "
                     f"| {r['dashboard_before_analyze_ms']['overview']:.1f} |")
    for line in report.get("ratios", []):
        lines += ["", line]
    b = report.get("bloat")
    if b:
        lines += ["", f"## PostgreSQL jobs table after draining {b['before_drain']['rows']:,} jobs", "",
                  f"Full drain (`worker --burst -p 2 -c 8`): {b['drain']['jobs']:,} jobs in {b['drain']['seconds']} s "
                  f"({_f(b['drain']['rate'])} jobs/s); VACUUM (ANALYZE) took {b['vacuum_seconds']} s.", "",
                  "| moment | rows | total MB | heap MB | n_live_tup | n_dead_tup | last_autovacuum |",
                  "|---|--:|--:|--:|--:|--:|---|"]
        for key, label in (("before_drain", "filled"), ("after_drain", "right after the drain"),
                           ("after_vacuum", "after VACUUM (ANALYZE)"), ("after_refill_100k", "100k enqueued again"),
                           ("after_drain_100k", "100k drained again")):
            s = b[key]
            lines.append(f"| {label} | {s['rows']:,} | {s['total_mb']:,.1f} | {s['heap_mb']:,.1f} "
                         f"| {s['n_live_tup']:,} | {s['n_dead_tup']:,} | {s['last_autovacuum'] or '-'} |")
    return "\n".join(lines) + "\n"


def machine() -> str:
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"backend:size,... (default {DEFAULT_SIZES})")
    p.add_argument("--backends", help="only these backends of --sizes (comma list)")
    p.add_argument("--drain", type=int, default=20_000, help="jobs timed in the drain (default 20,000)")
    p.add_argument("--samples", type=int, default=200, help="pickup samples (default 200)")
    p.add_argument("--interval", type=float, default=0.02, help="seconds between pickup samples")
    p.add_argument("--enqueues", type=int, default=1000, help="single enqueues timed (default 1,000)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up a timed drain after this many seconds")
    p.add_argument("--bloat-timeout", type=float, default=1800.0, help="give up the full drain after this long")
    p.add_argument("--no-bloat", action="store_true", help="skip the full drain of the largest PostgreSQL table")
    p.add_argument("--no-save", action="store_true", help="print the table only; write no results file")
    args = p.parse_args(argv)
    sizes = parse_sizes(args.sizes)
    if args.backends:
        keep = {b.strip() for b in args.backends.split(",")}
        sizes = [s for s in sizes if s[0] in keep]
    pg = [n for b, n in sizes if b == "postgres"]
    bloat_size = max(pg) if pg and not args.no_bloat else None
    started = datetime.now(timezone.utc)
    report: dict[str, Any] = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
                              "drain_jobs": args.drain, "samples": args.samples, "enqueues": args.enqueues,
                              "runs": []}
    for backend, size in sizes:
        try:
            r = one(backend, size, args, do_bloat=backend == "postgres" and size == bloat_size)
        except Exception as exc:
            import traceback

            traceback.print_exc()
            r = {"backend": backend, "waiting": size, "error": f"{type(exc).__name__}: {exc}"[:200]}
        if "bloat" in r:
            report["bloat"] = r.pop("bloat")
        report["runs"].append(r)
    for backend in KINDS:
        runs = [r for r in report["runs"] if r["backend"] == backend and "value" in r.get("drain", {})]
        if len(runs) >= 2:
            lo, hi = runs[0], runs[-1]
            ratio = hi["drain"]["value"] / lo["drain"]["value"]
            report.setdefault("ratios", []).append(
                f"{backend}: drain at {hi['waiting']:,} waiting is {ratio:.0%} of the rate at {lo['waiting']:,} "
                f"({'meets' if ratio >= 0.8 else 'misses'} the goal of at least 80%).")
    text = table(report)
    print(text)
    if not args.no_save:
        common.save_results("backlog-" + started.strftime("%Y%m%dT%H%M%SZ"), report, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
