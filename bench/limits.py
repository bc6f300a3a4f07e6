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
- rate: 400 no-op jobs limited to 20/s, then 400 limited to 5/1s, drained by
  ``errands worker -p 4 -c 4`` (issue 26's set-up).  Attainment = ideal span / measured span,
  where the span runs from the first handler start to the last and the ideal one is
  (ceil(400 / N) - 1) windows (N start at once, then N more every period): the runs per second
  reached over the allowed rate (must stay >= 0.95).  ``handler max`` is the most handler starts
  (each handler's own ``time.time()``, its first line) within any one period, ``over`` how many
  windows that start at a handler start hold more than N, and ``max in P - 10 ms`` the same count
  for windows 10 ms shorter (the stated tolerance for a thread's wake-up); ``granted max`` is the
  most starts the database recorded within any period (its own clock, ``errands_rate_starts``).

``--src label=path`` (repeatable) runs the workers on another source tree (``PYTHONPATH``), so a
base commit and a branch are measured interleaved on a loaded machine: every repetition runs
each tree once per backend, in turn.  Writes bench/results/limits-<timestamp>.md and .json.
"""

from __future__ import annotations

import argparse
import functools
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
from limits_app import GROUP_LIMIT, app, grouped, rated, rated5  # noqa: E402
from run import FreshDatabase  # noqa: E402

KINDS = {"sqlite": "sqlite", "postgres": "pg", "mariadb": "mysql"}
PROCESSES, CONCURRENCY = 3, 8
GROUPS, GROUP_JOBS, SECONDS = 2, 24, 0.25
RATE_PROCESSES, RATE_CONCURRENCY = 4, 4
RATED = 400
RATES = (("rate", "bench.rated", 20, 1.0), ("rate5", "bench.rated5", 5, 1.0))
"""(log kind, job name, N, period): each limit is measured on its own fresh database."""
TOLERANCE = 0.010
"""Seconds a handler may start after the moment its start was recorded (a thread's wake-up)."""


def _workers(url: str, src: str, workdir: str, events: str, processes: int, concurrency: int) -> Any:
    cmd = [sys.executable, "-m", "errands", "--app", "limits_app:app", "--database-url", url,
           "--log-level", "WARNING", "worker", "-p", str(processes), "-c", str(concurrency)]
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


def _drive(url: str, src: str, kind: str, n: int, timeout: float, processes: int = PROCESSES,
           concurrency: int = CONCURRENCY) -> list[tuple[str, float, float]]:
    """Start the workers on the filled database, wait until ``n`` runs of ``kind`` were logged, stop them."""
    workdir = tempfile.mkdtemp(prefix="errands_limits_")
    events = os.path.join(workdir, "events.log")
    proc = _workers(url, src, workdir, events, processes, concurrency)
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


def _granted(url: str, name: str) -> list[float]:
    app.use_database(url)
    try:
        def read(cur: Any) -> list[Any]:
            cur.execute(app.store.dialect.q("SELECT started_at FROM {rate_starts} WHERE name = ")
                        + app.store.dialect.placeholder, (name,))
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


def windows_over(times: list[float], width: float, limit: int) -> int:
    """How many of the windows [start, start + width) that open at a start hold more than ``limit``."""
    right, over = 0, 0
    for left, t in enumerate(times):
        right = max(right, left)
        while right < len(times) and times[right] - t < width:
            right += 1
        over += right - left > limit
    return over


def rate(url: str, src: str, timeout: float, spec: tuple[str, str, int, float]) -> dict[str, Any]:
    kind, name, limit, period = spec
    app.use_database(url)
    app.migrate()
    job = rated if kind == "rate" else rated5
    app.enqueue_many([job.prepare(i) for i in range(RATED)])
    app.store.close()
    timeout = max(timeout, 3 * RATED / limit * period)
    starts = sorted(s for _, s, _ in _drive(url, src, kind, RATED, timeout, RATE_PROCESSES, RATE_CONCURRENCY))
    granted = _granted(url, name)
    ideal = (math.ceil(RATED / limit) - 1) * period
    return {"limit": f"{limit}/{period:g}s", "attainment": round(ideal / (starts[-1] - starts[0]), 3),
            "granted_attainment": round(ideal / (granted[-1] - granted[0]), 3),
            "handler_max": most_in_any_window(starts, period), "over": windows_over(starts, period, limit),
            "handler_max_tolerance": most_in_any_window(starts, period - TOLERANCE),
            "max_per_window": most_in_any_window(granted, period), "granted": len(granted)}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| backend | code | group utilisation (avg active / limit) | per group | peak active (limit 2) "
           "| group makespan (ideal 3.0 s) | slot hand-off p50 / p90 | rate | attainment (runs/s / N) "
           f"| handler max in any period | windows over N | handler max in period - {TOLERANCE * 1000:g} ms "
           "| granted max in any period |",
           "|---|---|--:|---|--:|--:|--:|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        g = r.get("groups", {})
        hand = g.get("handoff_ms", {})
        for kind, _, limit, period in RATES:
            q = r.get(kind, {})
            first = kind == RATES[0][0]
            out.append(f"| {r['backend']} | {r['code']} | {g.get('utilisation', g.get('error', '-')) if first else ''} "
                       f"| {', '.join(map(str, g.get('per_group', []))) if first else ''} "
                       f"| {g.get('peak', '-') if first else ''} "
                       f"| {str(g.get('makespan_s', '-')) + ' s' if first else ''} "
                       f"| {str(hand.get('p50', '-')) + ' / ' + str(hand.get('p90', '-')) + ' ms' if first else ''} "
                       f"| {limit}/{period:g}s | {q.get('attainment', q.get('error', '-'))} "
                       f"| {q.get('handler_max', '-')} | {q.get('over', '-')} | {q.get('handler_max_tolerance', '-')} "
                       f"| {q.get('max_per_window', '-')} |")
    return "\n".join(out) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    """Medians per backend and code, and each code's ratio against the first one."""
    codes = list(dict.fromkeys(r["code"] for r in rows))
    kinds = [kind for kind, *_ in RATES]
    out = ["| backend | code | runs | group utilisation (median) | "
           + " | ".join(f"{n}/{p:g}s attainment (median) | {n}/{p:g}s handler max (worst)" for _, _, n, p in RATES)
           + f" | ratio to {codes[0]} (groups / rates) |", "|---|---|--:|--:|" + "--:|--:|" * len(RATES) + "--:|"]
    for backend in dict.fromkeys(r["backend"] for r in rows):
        base: list[float] | None = None
        for code in codes:
            mine = [r for r in rows if r["backend"] == backend and r["code"] == code]
            u = [r["groups"]["utilisation"] for r in mine if "utilisation" in r.get("groups", {})]
            a = [[r[k]["attainment"] for r in mine if "attainment" in r.get(k, {})] for k in kinds]
            worst = [max([r[k]["handler_max"] for r in mine if "handler_max" in r.get(k, {})] or [0]) for k in kinds]
            if not all(a):
                continue
            med = [statistics.median(u) if u else math.nan] + [statistics.median(x) for x in a]
            base = base or med
            cells = " | ".join(f"{m:.3f} | {w}" for m, w in zip(med[1:], worst, strict=True))
            out.append(f"| {backend} | {code} | {len(mine)} | {med[0]:.3f} | {cells} "
                       f"| {' / '.join(f'{m / b:.2f}' for m, b in zip(med, base, strict=True))} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="sqlite,postgres,mariadb")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--src", action="append", default=[], help="label=path of a source tree (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--only", default="groups," + ",".join(kind for kind, *_ in RATES),
                   help="which measurements: groups, rate (20/s), rate5 (5/1s)")
    args = p.parse_args()
    trees = [tuple(s.split("=", 1)) for s in args.src] or [("this", os.path.join(ROOT, "src"))]
    started = datetime.now(timezone.utc)
    rows: list[dict[str, Any]] = []
    for rep in range(args.reps):
        for backend in args.backends.split(","):
            for code, src in trees:
                row: dict[str, Any] = {"backend": backend, "code": code, "rep": rep}
                measures: list[tuple[str, Any]] = [("groups", groups)] + [
                    (spec[0], functools.partial(rate, spec=spec)) for spec in RATES]
                for what, measure in measures:
                    if what not in args.only.split(","):
                        continue
                    with FreshDatabase(KINDS[backend], f"limits_{backend}") as db:
                        try:
                            row[what] = measure(db.url, os.path.abspath(src), args.timeout)
                        except Exception as exc:  # one failed measurement is reported, the rest go on
                            row[what] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                print("\n".join(table([row]).splitlines()[2:]), file=sys.stderr, flush=True)
                rows.append(row)
    text = (f"# Concurrency groups and rate limits ({started:%Y-%m-%d %H:%M} UTC)\n\n"
            f"`errands worker -p {PROCESSES} -c {CONCURRENCY}`; {GROUPS} groups x {GROUP_JOBS} jobs of {SECONDS} s, "
            f"limit {GROUP_LIMIT}; `errands worker -p {RATE_PROCESSES} -c {RATE_CONCURRENCY}`, {RATED} jobs at each of "
            f"{', '.join(f'{n}/{p:g}s' for _, _, n, p in RATES)}; load average {os.getloadavg()[0]:.2f}.\n\n"
            + table(rows) + "\n" + summary(rows))
    print(text)
    common.save_results("limits-" + started.strftime("%Y%m%dT%H%M%SZ"),
                        {"started": started.isoformat(), "rows": rows}, text)


if __name__ == "__main__":
    main()
