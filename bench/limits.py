"""Concurrency groups and rate limits under real workers (issue 17): how busy a group's limit is
kept while its work waits, and how close rate-limited jobs come to their allowed rate.

    make bench-limits [BENCH_ARGS="--backends sqlite --reps 3"]
    .venv/bin/python bench/limits.py [--backends sqlite,postgres,mariadb] [--reps 1]
                                     [--src base=/tmp/base/src --src this=src]

For each backend and repetition, a fresh database and ``errands worker -p 3 -c 8`` (real
processes; bench/limits_app.py):

- groups: 2 groups of concurrency limit 2, 24 jobs each holding a slot for 0.25 s (3 s of
  work per group at the limit).  Utilisation = the group's active runs averaged from its first
  start to its last start (the span in which work of the group waits), divided by the limit;
  ``peak`` is the most runs of one group seen at once (must never exceed the limit); the
  hand-off is how long after a run ended the run that took its slot started.
- rate: 200 no-op jobs limited to 20/s.  Attainment = ideal span / measured span, where the
  span runs from the first start to the last and the ideal one is (ceil(200 / 20) - 1) windows
  (20 start at once, then 20 more every second): the runs per second reached over the allowed
  rate.  ``max/1s`` is the most starts the database granted within any one second (its own
  clock, the ``errands_rate_starts`` table): it must never exceed 20.

``--src label=path`` (repeatable) runs the workers on another source tree (``PYTHONPATH``), so a
base commit and a branch are measured interleaved on a loaded machine: every repetition runs
each tree once per backend, in turn.  Writes bench/results/limits-<timestamp>.md and .json.
"""

from __future__ import annotations

import argparse
import math
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
from limits_app import GROUP_LIMIT, app, grouped, rated  # noqa: E402
from run import FreshDatabase  # noqa: E402

KINDS = {"sqlite": "sqlite", "postgres": "pg", "mariadb": "mysql"}
PROCESSES, CONCURRENCY = 3, 8
GROUPS, GROUP_JOBS, SECONDS = 2, 24, 0.25
RATED, RATE, PERIOD = 200, 20, 1.0


def _workers(url: str, src: str, workdir: str, events: str) -> Any:
    cmd = [sys.executable, "-m", "errands", "--app", "limits_app:app", "--database-url", url,
           "--log-level", "WARNING", "worker", "-p", str(PROCESSES), "-c", str(CONCURRENCY)]
    env = {"PYTHONPATH": os.pathsep.join([src, HERE]), "BENCH_LIMITS_LOG": events}
    return common.start_workers(cmd, env, os.path.join(workdir, "worker.log"))


def _events(path: str, kind: str) -> list[tuple[str, float, float]]:
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 4 and parts[0] == kind:
            out.append((parts[1], float(parts[2]), float(parts[3])))
    return out


def _drive(url: str, src: str, kind: str, n: int, timeout: float) -> list[tuple[str, float, float]]:
    """Start the workers on the filled database, wait until ``n`` runs of ``kind`` were logged, stop them."""
    workdir = tempfile.mkdtemp(prefix="errands_limits_")
    events = os.path.join(workdir, "events.log")
    proc = _workers(url, src, workdir, events)
    try:
        deadline = time.monotonic() + timeout
        while len(_events(events, kind)) < n:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{len(_events(events, kind))} of {n} runs after {timeout:.0f}s; "
                                   + common.tail(os.path.join(workdir, "worker.log"), 5))
            time.sleep(0.1)
        return _events(events, kind)
    finally:
        common.stop_workers(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def groups(url: str, src: str, timeout: float) -> dict[str, Any]:
    app.use_database(url)
    app.migrate()
    app.enqueue_many([grouped.prepare(f"g{i % GROUPS}", SECONDS) for i in range(GROUPS * GROUP_JOBS)])
    app.store.close()
    runs = _drive(url, src, "group", GROUPS * GROUP_JOBS, timeout)
    gaps = []
    utilisation, peaks, makespans = [], [], []
    for g in sorted({r[0] for r in runs}):
        spans = sorted((s, e) for name, s, e in runs if name == g)
        lo, hi = spans[0][0], spans[-1][0]  # work of the group waits from its first start to its last
        busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in spans)
        utilisation.append(busy / ((hi - lo) * GROUP_LIMIT) if hi > lo else 1.0)
        points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        active = peak = 0
        for _, step in points:
            active += step
            peak = max(peak, active)
        peaks.append(peak)
        makespans.append(max(e for _, e in spans) - lo)
        ends = sorted(e for _, e in spans)
        # Each start after the first two: how long after the end that freed its slot.
        gaps.extend(s - ends[i] for i, (s, _) in enumerate(spans[GROUP_LIMIT:]))
    ideal = GROUP_JOBS * SECONDS / GROUP_LIMIT
    return {"utilisation": round(statistics.mean(utilisation), 3), "per_group": [round(u, 3) for u in utilisation],
            "peak": max(peaks), "makespan_s": round(statistics.mean(makespans), 2), "ideal_s": ideal,
            "handoff_ms": {"p50": round(statistics.median(gaps) * 1000, 1),
                           "p90": round(common.percentile(gaps, 90) * 1000, 1)}}


def _granted(url: str) -> list[float]:
    app.use_database(url)
    try:
        def read(cur: Any) -> list[Any]:
            cur.execute(app.store.dialect.q("SELECT started_at FROM {rate_starts} WHERE name = 'bench.rated'"))
            return [r[0] for r in cur.fetchall()]

        return sorted(app.store.dialect.to_datetime(t).timestamp() for t in app.store.db.run(read))
    finally:
        app.store.close()


def most_in_any_window(times: list[float], width: float) -> int:
    best, left = 0, 0
    for right, t in enumerate(times):
        while t - times[left] >= width:
            left += 1
        best = max(best, right - left + 1)
    return best


def rate(url: str, src: str, timeout: float) -> dict[str, Any]:
    app.use_database(url)
    app.migrate()
    app.enqueue_many([rated.prepare(i) for i in range(RATED)])
    app.store.close()
    starts = sorted(s for _, s, _ in _drive(url, src, "rate", RATED, timeout))
    granted = _granted(url)
    ideal = (math.ceil(RATED / RATE) - 1) * PERIOD
    return {"attainment": round(ideal / (starts[-1] - starts[0]), 3),
            "granted_attainment": round(ideal / (granted[-1] - granted[0]), 3),
            "max_per_window": most_in_any_window(granted, PERIOD), "granted": len(granted)}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| backend | code | group utilisation (avg active / limit) | per group | peak active (limit 2) "
           "| group makespan (ideal 3.0 s) | slot hand-off p50 / p90 | rate attainment (runs/s / 20) "
           "| granted max in any 1 s (limit 20) |",
           "|---|---|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        g, q = r.get("groups", {}), r.get("rate", {})
        hand = g.get("handoff_ms", {})
        out.append(f"| {r['backend']} | {r['code']} | {g.get('utilisation', g.get('error', '-'))} "
                   f"| {', '.join(map(str, g.get('per_group', [])))} | {g.get('peak', '-')} "
                   f"| {g.get('makespan_s', '-')} s | {hand.get('p50', '-')} / {hand.get('p90', '-')} ms "
                   f"| {q.get('attainment', q.get('error', '-'))} "
                   f"| {q.get('max_per_window', '-')} |")
    return "\n".join(out) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    """Medians per backend and code, and each code's ratio against the first one."""
    codes = list(dict.fromkeys(r["code"] for r in rows))
    out = ["| backend | code | runs | group utilisation (median) | rate attainment (median) | ratio to "
           f"{codes[0]} (groups / rate) |", "|---|---|--:|--:|--:|--:|"]
    for backend in dict.fromkeys(r["backend"] for r in rows):
        base: tuple[float, float] | None = None
        for code in codes:
            mine = [r for r in rows if r["backend"] == backend and r["code"] == code]
            u = [r["groups"]["utilisation"] for r in mine if "utilisation" in r.get("groups", {})]
            a = [r["rate"]["attainment"] for r in mine if "attainment" in r.get("rate", {})]
            if not u or not a:
                continue
            med = (statistics.median(u), statistics.median(a))
            base = base or med
            out.append(f"| {backend} | {code} | {len(mine)} | {med[0]:.3f} | {med[1]:.3f} "
                       f"| {med[0] / base[0]:.2f} / {med[1] / base[1]:.2f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="sqlite,postgres,mariadb")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--src", action="append", default=[], help="label=path of a source tree (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args()
    trees = [tuple(s.split("=", 1)) for s in args.src] or [("this", os.path.join(ROOT, "src"))]
    started = datetime.now(timezone.utc)
    rows: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for backend in args.backends.split(","):
            for code, src in trees:
                row: dict[str, Any] = {"backend": backend, "code": code, "rep": rep}
                for what, measure in (("groups", groups), ("rate", rate)):
                    with FreshDatabase(KINDS[backend], f"limits_{backend}") as db:
                        try:
                            row[what] = measure(db.url, os.path.abspath(src), args.timeout)
                        except Exception as exc:  # one failed measurement is reported, the rest go on
                            row[what] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
                rows.append(row)
    text = (f"# Concurrency groups and rate limits ({started:%Y-%m-%d %H:%M} UTC)\n\n"
            f"`errands worker -p {PROCESSES} -c {CONCURRENCY}`; {GROUPS} groups x {GROUP_JOBS} jobs of {SECONDS} s, "
            f"limit {GROUP_LIMIT}; {RATED} jobs at {RATE}/s; load average {os.getloadavg()[0]:.2f}.\n\n"
            + table(rows) + "\n" + summary(rows))
    print(text)
    common.save_results("limits-" + started.strftime("%Y%m%dT%H%M%SZ"),
                        {"started": started.isoformat(), "rows": rows}, text)


if __name__ == "__main__":
    main()
