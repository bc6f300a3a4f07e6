"""Claims under a pinned snapshot (issue 29, goal 6): a steady stream of jobs while another session sits
``idle in transaction`` holding a snapshot, the classic PostgreSQL queue hazard.

    .venv/bin/python bench/pinned_snapshot.py [--minutes 10] [--rate 1000] [--every 5]
                                              [--src base=/work/main/src --src this=src]

For each ``--src`` (default: this checkout's src/), at the same time and each in its own fresh PostgreSQL
database: a producer process enqueues ``--rate`` no-op jobs a second (``enqueue_many`` every 20 ms) and one
``errands worker -c 10`` drains them; after ``--warmup`` seconds of steady state another connection runs
``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1`` and stays idle in transaction for ``--minutes``;
then it rolls back and the run goes on for ``--after`` seconds.  While the snapshot is pinned, no row
version deleted after it can be removed: the claim index keeps an entry for every job claimed since, and
a claim that walks the index from its start reads them all (the outside report: 0.02 ms growing to
13-24 ms a claim after 3 minutes).

Every ``--every`` seconds it samples, per run:

- the claims the worker made (the worker's app, bench/pinned_app.py, times each ``JobStore.claim``,
  round trip included: pg_stat_statements needs a server restart): how many, the mean and the longest
  milliseconds, and how many took over 2 ms;
- claim index entries walked per claim: ``idx_tup_read`` over ``idx_scan`` of the claim index
  (pg_stat_user_indexes; dead entries count, as each costs a heap visit), minus the sampler's own;
- a claim "from the start": ``EXPLAIN (ANALYZE, BUFFERS)`` of the dialect's own pick from this
  connection (read only), its milliseconds and buffers: what every claim paid before issue 29;
- jobs/s produced and drained, the backlog, the table's and the claim index's size and ``n_dead_tup``.

Prints one table per run and a summary (claim time at the pin's start and end, the highest; throughput
drained/produced while pinned), and writes bench/results/pinned-<timestamp>.json and .md.  Nothing asserts.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402

TICK = 0.02
"""Seconds between the producer's batches (1,000 jobs/s: 20 jobs every 20 ms)."""
QUEUE = "default"


# ---------------------------------------------------------------------------- the producer process

def produce(url: str, rate: float, count_file: str) -> None:
    """Migrate, then enqueue ``rate`` jobs a second in batches every TICK until killed; the running total
    goes to ``count_file`` after each batch.  Behind schedule, it catches up (the rate is kept on average)."""
    from errands_app import app, noop

    app.use_database(url)
    app.migrate()
    done = 0
    _write(count_file, "0")
    t0 = time.monotonic()
    while True:
        due = int((time.monotonic() - t0) * rate)
        if due > done:
            k = min(due - done, int(rate))  # at most a second's worth in one call
            app.enqueue_many([noop.prepare(0.0) for _ in range(k)])
            done += k
            _write(count_file, str(done))
        time.sleep(max(0.0, t0 + (done + max(1, rate * TICK)) / rate - time.monotonic()))


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _read_int(path: str) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


# ---------------------------------------------------------------------------- one run (one --src)

@dataclass
class Sample:
    t: float
    phase: str
    produced: int
    handled: int
    claims: int
    claim_seconds: float
    claim_max_ms: float
    slow: int
    idx_scan: int
    idx_tup_read: int
    start_ms: float
    start_buffers: int
    after_ms: float
    after_buffers: int
    table_mb: float
    index_mb: float
    dead: int


@dataclass
class Run:
    label: str
    src: str
    args: argparse.Namespace
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="errands_pinned_"))
    samples: list[Sample] = field(default_factory=list)
    error: str = ""

    def start(self) -> None:
        from run import FreshDatabase

        self.db = FreshDatabase("pg", f"pinned_{self.label}").__enter__()
        self.count_file = os.path.join(self.workdir, "produced")
        self.stats = os.path.join(self.workdir, "claims")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, self.src]))
        self.producer = subprocess.Popen(
            [sys.executable, __file__, "--produce", self.db.url, "--rate", str(self.args.rate),
             "--count-file", self.count_file], env=env, start_new_session=True,
            stdout=open(os.path.join(self.workdir, "producer.log"), "ab"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.count_file):  # the producer migrated the schema
            if self.producer.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: the producer did not start: "
                                   + common.tail(os.path.join(self.workdir, "producer.log")))
            time.sleep(0.1)
        self.collector = common.Collector(self.workdir)
        cmd = [sys.executable, "-m", "errands", "--app", "pinned_app:app", "--database-url", self.db.url,
               "--log-level", "WARNING", "worker", "-c", str(self.args.concurrency), "-q", QUEUE]
        wenv = dict(self.collector.env, PYTHONPATH=os.pathsep.join([HERE, self.src]), PINNED_CLAIM_STATS=self.stats)
        self.worker = common.start_workers(cmd, wenv, os.path.join(self.workdir, "worker.log"))
        import psycopg

        from errands import Errands

        self.dialect = Errands(self.db.url).store.dialect  # the pick's SQL, as the worker's claim runs it
        self.sampler = psycopg.connect(self.db.url)
        self.pin = psycopg.connect(self.db.url, autocommit=True)
        self.pinned = False

    def hold(self) -> None:
        self.pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.pin.execute("SELECT 1").fetchall()  # the snapshot is taken here; the session then sits idle
        self.pinned = True

    def release(self) -> None:
        if self.pinned:
            self.pin.execute("ROLLBACK")
            self.pinned = False

    def claim_totals(self) -> tuple[int, float, float, int]:
        """The worker processes' claims so far (bench/pinned_app.py): count, seconds, the longest in
        milliseconds since their last write, and how many took over 2 ms."""
        count, seconds, longest, slow = 0, 0.0, 0.0, 0
        for path in glob.glob(self.stats + ".*[0-9]"):
            try:
                with open(path) as f:
                    c, s, m, n = f.read().split()[:4]
            except (OSError, ValueError):
                continue
            count, seconds, longest, slow = count + int(c), seconds + float(s), max(longest, float(m)), slow + int(n)
        return count, seconds, longest * 1000, slow

    def sample(self, t: float, phase: str) -> None:
        d = self.dialect
        pick, params = d.pick(QUEUE, self.args.concurrency)
        count, seconds, longest_ms, slow = self.claim_totals()
        cur = self.sampler.cursor()
        start_ms, start_buffers = _explain(cur, pick, params)
        # The same pick after a worker's position (issue 29), the job before the first ready one: what a
        # claim that remembers its position costs the server (the SQL's figure, whichever tree runs).
        cur.execute(*d.pick(QUEUE, 1, "priority, fair_turn, id"))
        first = cur.fetchone()
        if first is None:
            cur.execute("SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence(%s, 'id')), 0)", (d.t_jobs,))
            first = (0, 0, int(cur.fetchone()[0]) + 1)
        after_ms, after_buffers = _explain(cur, *d.pick(QUEUE, self.args.concurrency,
                                                        after=(first[0], first[1], first[2] - 1)))
        cur.execute("SELECT pg_stat_get_xact_numscans(%s::regclass), pg_stat_get_xact_tuples_returned(%s::regclass)",
                    (d.t_jobs + "_claim",) * 2)
        own = cur.fetchone() or (0, 0)
        self.sampler.rollback()
        self.sampler.autocommit = True
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT s.idx_scan, s.idx_tup_read, pg_table_size(s.relid), pg_relation_size(s.indexrelid), "
                    "t.n_dead_tup FROM pg_stat_user_indexes s JOIN pg_stat_user_tables t USING (relid) "
                    "WHERE s.indexrelname = %s", (d.t_jobs + "_claim",))
        scans, read, table, index, dead = cur.fetchone()
        self.sampler.autocommit = False
        prev_own = getattr(self, "_own", (0, 0))
        self._own = (prev_own[0] + int(own[0] or 0), prev_own[1] + int(own[1] or 0))
        self.samples.append(Sample(
            t=round(t, 1), phase=phase, produced=_read_int(self.count_file), handled=self.collector.count,
            claims=count, claim_seconds=seconds, claim_max_ms=round(longest_ms, 2), slow=slow,
            idx_scan=int(scans) - self._own[0], idx_tup_read=int(read) - self._own[1],
            start_ms=start_ms, start_buffers=start_buffers, after_ms=after_ms, after_buffers=after_buffers,
            table_mb=round(table / 1e6, 1), index_mb=round(index / 1e6, 1), dead=int(dead)))

    def stop(self) -> None:
        self.release()
        common.stop_workers(self.worker)
        common.stop_workers(self.producer, grace=2)
        self.collector.close()
        for conn in (self.sampler, self.pin):
            conn.close()
        self.db.__exit__(None, None, None)


def _explain(cur: Any, sql: str, params: Any) -> tuple[float, int]:
    """Milliseconds (the server's execution time) and shared buffers of one read-only statement."""
    cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params)
    plan = cur.fetchone()[0][0]
    top = plan["Plan"]
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    return round(float(plan.get("Execution Time", 0.0)), 3), buffers


# ---------------------------------------------------------------------------- the report

def rows(run: Run) -> list[dict[str, Any]]:
    """One row per sampling interval: rates and per-claim figures from the deltas."""
    out = []
    for a, b in zip(run.samples, run.samples[1:], strict=False):
        dt = b.t - a.t
        claims = b.claims - a.claims
        scans = b.idx_scan - a.idx_scan
        out.append({
            "t": b.t, "phase": b.phase, "produced_per_s": round((b.produced - a.produced) / dt),
            "drained_per_s": round((b.handled - a.handled) / dt), "backlog": b.produced - b.handled,
            "claims_per_s": round(claims / dt, 1),
            "claim_ms": round((b.claim_seconds - a.claim_seconds) / claims * 1000, 3) if claims else None,
            "claim_max_ms": b.claim_max_ms, "slow": b.slow - a.slow,
            "entries_per_claim": round((b.idx_tup_read - a.idx_tup_read) / scans, 1) if scans else None,
            "from_start_ms": b.start_ms, "from_start_buffers": b.start_buffers,
            "after_ms": b.after_ms, "after_buffers": b.after_buffers,
            "table_mb": b.table_mb, "index_mb": b.index_mb, "dead": b.dead})
    return out


def summary(run: Run, table: list[dict[str, Any]]) -> dict[str, Any]:
    pinned = [r for r in table if r["phase"] == "pinned"]
    if not pinned:
        return {"error": run.error or "no sample while pinned"}
    first = [s for s in run.samples if s.phase == "pinned"]
    start = run.samples[run.samples.index(first[0]) - 1] if first else run.samples[0]
    end = first[-1]
    means = [r["claim_ms"] for r in pinned if r["claim_ms"] is not None]
    produced, drained = end.produced - start.produced, end.handled - start.handled
    return {
        "claim_ms_start": pinned[0]["claim_ms"], "claim_ms_end": pinned[-1]["claim_ms"],
        "claim_ms_highest_mean": max(means) if means else None,
        "claim_ms_longest": max(r["claim_max_ms"] for r in pinned),
        "claims_over_2ms": sum(r["slow"] for r in pinned), "claims": end.claims - start.claims,
        "entries_per_claim_end": pinned[-1]["entries_per_claim"],
        "from_start_ms_end": pinned[-1]["from_start_ms"], "from_start_buffers_end": pinned[-1]["from_start_buffers"],
        "after_ms_max": max(r["after_ms"] for r in pinned),
        "after_buffers_max": max(r["after_buffers"] for r in pinned),
        "produced": produced, "drained": drained,
        "throughput_ratio": round(drained / produced, 3) if produced else None,
        "backlog_end": pinned[-1]["backlog"], "table_mb_end": pinned[-1]["table_mb"], "dead_end": pinned[-1]["dead"],
    }


COLUMNS = [("t", "t s"), ("phase", "phase"), ("produced_per_s", "made/s"), ("drained_per_s", "done/s"),
           ("backlog", "backlog"), ("claims_per_s", "claims/s"), ("claim_ms", "claim ms"),
           ("claim_max_ms", "max ms"), ("slow", ">2ms"), ("entries_per_claim", "entries/claim"),
           ("from_start_ms", "start ms"), ("from_start_buffers", "start bufs"), ("after_ms", "after ms"),
           ("after_buffers", "after bufs"), ("table_mb", "table MB"),
           ("index_mb", "claim idx MB"), ("dead", "n_dead_tup")]


def markdown(runs: list[Run], tables: dict[str, list[dict[str, Any]]], summaries: dict[str, Any],
             head: str) -> str:
    lines = [head, ""]
    for run in runs:
        lines += [f"### {run.label} ({run.src})", "",
                  "| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in tables[run.label]:
            lines.append("| " + " | ".join("" if r[k] is None else str(r[k]) for k, _ in COLUMNS) + " |")
        lines.append("")
    lines += ["### Summary (while pinned)", "", "| run | claim ms start | end | highest mean | longest | >2 ms "
              "| entries/claim end | from-start ms / buffers end | after-position ms / buffers max | drained/produced "
              "| backlog end | table MB | n_dead_tup |", "|" + "---|" * 13]
    for run in runs:
        s = summaries[run.label]
        if "error" in s:
            lines.append(f"| {run.label} | {s['error']} |" + " |" * 11)
            continue
        lines.append(f"| {run.label} | {s['claim_ms_start']} | {s['claim_ms_end']} | {s['claim_ms_highest_mean']} "
                     f"| {s['claim_ms_longest']} | {s['claims_over_2ms']} of {s['claims']} "
                     f"| {s['entries_per_claim_end']} | {s['from_start_ms_end']} / {s['from_start_buffers_end']} "
                     f"| {s['after_ms_max']} / {s['after_buffers_max']} "
                     f"| {s['throughput_ratio']} | {s['backlog_end']} | {s['table_mb_end']} | {s['dead_end']} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="how long the snapshot stays pinned")
    p.add_argument("--rate", type=float, default=1000.0, help="jobs enqueued per second")
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of steady state before the pin")
    p.add_argument("--after", type=float, default=20.0, help="seconds sampled after the pin ends")
    p.add_argument("--concurrency", type=int, default=10, help="the worker's -c")
    p.add_argument("--src", action="append", default=[], metavar="LABEL=PATH",
                   help="an errands source tree to run (repeatable: all run at the same time); default this=src")
    p.add_argument("--produce", help=argparse.SUPPRESS)
    p.add_argument("--count-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.produce:
        produce(args.produce, args.rate, args.count_file)
        return 0
    srcs = [s.split("=", 1) if "=" in s else (os.path.basename(os.path.dirname(os.path.abspath(s))), s)
            for s in (args.src or [f"this={os.path.join(ROOT, 'src')}"])]
    runs = [Run(label, os.path.abspath(path), args) for label, path in srcs]
    started = datetime.now(timezone.utc)
    load0 = os.getloadavg()
    try:
        for run in runs:
            run.start()
        sample_all(runs, args)
    finally:
        for run in runs:
            try:
                run.stop()
            except Exception as exc:  # noqa: BLE001 - one run's teardown must not hide the others' figures
                print(f"{run.label}: teardown failed: {exc}", file=sys.stderr)
    load1 = os.getloadavg()
    tables = {run.label: rows(run) for run in runs}
    summaries = {run.label: summary(run, tables[run.label]) for run in runs}
    head = (f"## Claims under a pinned snapshot: {args.rate:.0f} jobs/s, a snapshot held {args.minutes:g} min "
            f"({started:%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} cores, load average "
            f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end; {len(runs)} run(s) at the same time)")
    text = markdown(runs, tables, summaries, head)
    print(text)
    common.save_results(f"pinned-{started:%Y%m%dT%H%M%SZ}", {
        "args": {k: v for k, v in vars(args).items() if k not in ("produce", "count_file")},
        "load": [load0, load1], "tables": tables, "summaries": summaries}, text)
    return 0 if all("error" not in s for s in summaries.values()) else 1


def sample_all(runs: list[Run], args: argparse.Namespace) -> None:
    """The timeline: warm up, pin every run's snapshot at once, hold it, release it, sample throughout."""
    t0 = time.monotonic()
    pin_at, release_at = args.warmup, args.warmup + args.minutes * 60
    end_at = release_at + args.after
    phase = "warm"
    next_sample = 0.0
    while True:
        t = time.monotonic() - t0
        if phase == "warm" and t >= pin_at:
            for run in runs:
                run.hold()
            phase = "pinned"
        elif phase == "pinned" and t >= release_at:
            for run in runs:
                run.release()
            phase = "after"
        if t >= next_sample:
            threads = [threading.Thread(target=run.sample, args=(t - pin_at, phase)) for run in runs]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            next_sample += args.every
            last = runs[-1].samples[-1] if runs[-1].samples else None
            if last is not None:
                print(json.dumps({"label": runs[-1].label, **last.__dict__}), file=sys.stderr, flush=True)
        if t >= end_at:
            return
        for run in runs:
            if run.worker.poll() is not None or run.producer.poll() is not None:
                run.error = "the worker or the producer exited: " + common.tail(os.path.join(run.workdir, "worker.log"))
                return
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
