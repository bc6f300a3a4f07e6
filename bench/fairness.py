"""Fairness between tenants (issue 25, point 4): how soon a small tenant's jobs start behind a big
tenant's backlog, and what the turns cost the claim.

    make bench-fairness [BENCH_ARGS="--backends postgres --rounds 3 --src base=/tmp/base/src"]
    .venv/bin/python bench/fairness.py [--quick] [--backends sqlite,postgres,mariadb] [--big 10000]
                                       [--waiting 1000000] [--drain 20000] [--claims 500] [--rounds 3]
                                       [--src base=/path/to/other/src]

- **position** (every backend): one tenant enqueues ``--big`` jobs (10,000), then ten tenants
  enqueue 10 each; ``errands worker -p 1 -c 8`` (8 runners) takes them.  Each run appends its
  tenant to a file as it starts (bench/fairness_app.py), and the figure is how many of the big
  tenant's jobs had started when the small tenants' last job started: with ``fairness_key`` (on)
  and with the same job without one (off, the claim's order by id).
- **claim cost** (PostgreSQL): two databases with ``--waiting`` (1,000,000) ready jobs each,
  written by one ``INSERT ... SELECT FROM generate_series`` (the fast fill: the rows are what
  an enqueue writes); "on": 1,000 tenants with their turns (``fairness_key``, ``fair_turn``),
  "off": plain jobs (turn 0).  In each of ``--rounds`` rounds, taken in turn: the median time of
  ``--claims`` claims of 10 jobs in this process (the claim statement alone), and the drain rate
  of one ``errands worker -c 10`` from its first to its ``--drain``-th job.  The ratios on/off are
  of medians measured in the same run.  ``--src label=path`` adds a database of plain jobs made
  and measured with another source tree (e.g. the commit before fairness: did the plain claim
  get slower?).

Writes bench/results/fairness-<timestamp>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "src")
sys.path.insert(0, HERE)

import common  # noqa: E402
from run import FreshDatabase  # noqa: E402

KINDS = {"sqlite": "sqlite", "postgres": "pg", "mariadb": "mysql"}
RUNNERS = 8
SMALL_TENANTS, SMALL_JOBS = 10, 10
TENANTS = 1000
"""Tenants of the keyed backlog in the claim-cost databases."""


# ---------------------------------------------------------------------------- position
def position(backend: str, big: int, repeat: int, timeout: float) -> dict[str, Any]:
    """The big tenant's starts before the small tenants' last start, off and on, ``repeat`` times each
    (a queue of its own each time) on one database."""
    from fairness_app import app, fair, unfair

    out: dict[str, Any] = {"backend": backend, "big": big, "off": [], "on": []}
    with FreshDatabase(KINDS[backend], f"fair_{backend}") as db:
        app.use_database(db.url)
        app.migrate()
        for n in range(repeat):
            for label, job in (("off", unfair), ("on", fair)):
                queue = f"q_{label}_{n}"
                t0 = time.perf_counter()
                app.enqueue_many([job.using(queue=queue).prepare("big") for _ in range(big)])
                app.enqueue_many([job.using(queue=queue).prepare(f"small{t}") for t in range(SMALL_TENANTS)
                                  for _ in range(SMALL_JOBS)])
                enqueued = round(time.perf_counter() - t0, 2)
                app.store.close()
                run = {**_run_until_small_done(db.url, queue, timeout), "enqueue_s": enqueued}
                out[label].append(run)
                print(f"  {backend} {label}: {run}", file=sys.stderr)
    app.store.close()
    return out


def _run_until_small_done(url: str, queue: str, timeout: float) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="errands_fair_")
    log = os.path.join(workdir, "starts.log")
    open(log, "w").close()
    cmd = [sys.executable, "-m", "errands", "--app", "fairness_app:app", "--database-url", url,
           "--log-level", "WARNING", "worker", "-p", "1", "-c", str(RUNNERS), "-q", queue]
    env = {"PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", SRC), HERE]), "BENCH_FAIR_LOG": log}
    proc = common.start_workers(cmd, env, os.path.join(workdir, "worker.log"))
    small_total = SMALL_TENANTS * SMALL_JOBS
    t0 = time.perf_counter()
    starts: list[str] = []
    try:
        while time.perf_counter() - t0 < timeout:
            with open(log) as f:
                starts = f.read().split()
            if sum(s != "big" for s in starts) >= small_total:
                break
            time.sleep(0.05)
    finally:
        common.stop_workers(proc)
    seconds = time.perf_counter() - t0
    smalls = [i for i, s in enumerate(starts) if s != "big"]
    if len(smalls) < small_total:
        return {"error": f"only {len(smalls)} of {small_total} small jobs started in {timeout:.0f} s",
                "started": len(starts)}
    last = smalls[-1]
    return {"big_before_last_small": sum(s == "big" for s in starts[:last]),
            "big_before_first_small": smalls[0], "seconds": round(seconds, 1)}


# ---------------------------------------------------------------------------- claim cost
FILL_SQL = """
INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, available_at, created_at{keyed_cols})
SELECT 'default', 'bench.noop', %s, 0, 0, 3, now(), now(){keyed_values}
  FROM generate_series(0, %s - 1) AS i
"""


def fill(url: str, n: int, keyed: bool) -> dict[str, Any]:
    """(In a child with the source tree to measure.)  Migrate and write ``n`` ready jobs."""
    from errands_app import app, noop

    app.use_database(url)
    app.migrate()
    payload = noop.prepare(0.0).payload
    d = app.store.dialect
    sql = FILL_SQL.format(jobs=d.t_jobs, keyed_cols=", fairness_key, fair_turn" if keyed else "",
                          keyed_values=f", 't' || (i %% {TENANTS}), i / {TENANTS} + 1" if keyed else "")
    t0 = time.perf_counter()
    app.store.db.run(lambda cur: cur.execute(sql, (payload, n)), write=True)
    if keyed:  # the counters an enqueue of these jobs would have left
        app.store.db.run(lambda cur: cur.execute(
            d.q("INSERT INTO {fair_keys} (queue, name, turn, used_at) SELECT 'default', 't' || k, %s, now() "
                "FROM generate_series(0, %s - 1) AS k"), (n // TENANTS, TENANTS)), write=True)
    app.store.db.run(lambda cur: cur.execute(f"ANALYZE {d.t_jobs}"), write=True)
    seconds = time.perf_counter() - t0
    app.store.close()
    return {"fill_seconds": round(seconds, 1)}


def measure(url: str, claims: int, drain_jobs: int, timeout: float) -> dict[str, Any]:
    """(In a child with the source tree to measure.)  Claim time in this process, then a worker's drain."""
    import backlog
    import psycopg
    from errands_app import app

    app.use_database(url)
    store = app.store
    # Each measurement starts from a vacuumed table: the rows claimed and drained before leave dead
    # entries at the head of the claim index, which every later claim would walk (and did: claims
    # took twice as long by the seventh round without this).
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM (ANALYZE) {store.dialect.t_jobs}")
    times = []
    for _ in range(claims):
        t0 = time.perf_counter()
        store.jobs.claim("bench-claims", ["default"], 10, 300)
        times.append(time.perf_counter() - t0)
    store.close()
    workdir = tempfile.mkdtemp(prefix="errands_fair_drain_")
    drained = backlog.drain(url, workdir, drain_jobs, timeout)
    return {"claim_us": round(statistics.median(times) * 1e6, 1), "drain": drained.get("value")}


def _child(src: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, HERE]))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def claim_cost(args: argparse.Namespace, sources: list[tuple[str, str]]) -> dict[str, Any]:
    variants = [("off", SRC, False), ("on", SRC, True)] + [(label, src, False) for label, src in sources]
    dbs = [FreshDatabase("pg", f"fair_{label}") for label, _, _ in variants]
    out: dict[str, Any] = {"waiting": args.waiting, "claims": args.claims, "drain_jobs": args.drain, "runs": {}}
    try:
        for db, (label, src, keyed) in zip(dbs, variants, strict=True):
            db.__enter__()
            out["runs"][label] = {"src": src, **_child(src, "_fill", db.url, str(args.waiting), str(int(keyed))),
                                  "claim_us": [], "drain": []}
            print(f"  filled {label}: {out['runs'][label]['fill_seconds']} s", file=sys.stderr)
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else variants[::-1]
            for label, src, _ in order:
                db = dbs[[v[0] for v in variants].index(label)]
                got = _child(src, "_measure", db.url, str(args.claims), str(args.drain), str(args.timeout))
                out["runs"][label]["claim_us"].append(got["claim_us"])
                out["runs"][label]["drain"].append(got["drain"])
                print(f"  round {r + 1} {label}: {got}", file=sys.stderr)
    finally:
        for db in dbs:
            if db.url:
                db.__exit__(None, None, None)
    for run in out["runs"].values():
        run["claim_us_median"] = statistics.median(run["claim_us"])
        drains = [d for d in run["drain"] if d]
        run["drain_median"] = statistics.median(drains) if drains else None
    off = out["runs"]["off"]
    for label, run in out["runs"].items():  # each round's ratio against "off" of the same round
        if label != "off":
            run["claim_ratios"] = [a / b for a, b in zip(run["claim_us"], off["claim_us"], strict=True)]
            run["drain_ratios"] = [a / b for a, b in zip(run["drain"], off["drain"], strict=True) if a and b]
    return out


# ---------------------------------------------------------------------------- report
def table(report: dict[str, Any]) -> str:
    lines = [f"# Fairness between tenants ({report['started']})", "",
             f"{report['machine']}.  Position: one tenant's {report['big']:,} jobs enqueued, then {SMALL_TENANTS} "
             f"tenants' {SMALL_JOBS} each; `errands worker -p 1 -c {RUNNERS}`; the big tenant's starts before the "
             "small tenants' last start (and before their first), each of "
             f"{report['repeat']} runs (a start is logged by the handler, so a runner thread the OS pauses "
             "between its claim and its handler's first line shows as a late start).", "",
             "| backend | off: big before last small | on: big before last small | on: big before first small "
             "| off s | on s |", "|---|--:|--:|--:|--:|--:|"]
    for r in report["positions"]:
        runs = r.get("off", []) + r.get("on", [])
        failed = r.get("error") or next((x["error"] for x in runs if "error" in x), None)
        if failed:
            lines.append(f"| {r['backend']} | {failed} |||||")
            continue

        def each(label: str, key: str, r: dict[str, Any] = r) -> str:
            return ", ".join(f"{x[key]:,}" for x in r[label])

        lines.append(f"| {r['backend']} | {each('off', 'big_before_last_small')} "
                     f"| {each('on', 'big_before_last_small')} | {each('on', 'big_before_first_small')} "
                     f"| {each('off', 'seconds')} | {each('on', 'seconds')} |")
    c = report.get("claim_cost")
    if c:
        lines += ["", f"Claim cost on PostgreSQL with {c['waiting']:,} ready jobs (on: {TENANTS:,} tenants with "
                  f"turns; off: plain jobs): median of {c['claims']} claims of 10 in one process, and one worker's "
                  f"drain rate (`-c 10`, first {c['drain_jobs']:,} jobs), per round; medians of the rounds.", "",
                  "| database | claim µs (each round) | claim µs | drain jobs/s (each round) | drain jobs/s |",
                  "|---|---|--:|---|--:|"]
        for label, run in c["runs"].items():
            lines.append(f"| {label} | {', '.join(f'{v:.0f}' for v in run['claim_us'])} | "
                         f"{run['claim_us_median']:.0f} | {', '.join(f'{v:,.0f}' for v in run['drain'] if v)} | "
                         f"{run['drain_median'] or 0:,.0f} |")
        for line in report.get("ratios", []):
            lines += ["", line]
    return "\n".join(lines) + "\n"


def ratios(c: dict[str, Any]) -> list[str]:
    """Medians of each round's ratio (the two measured minutes apart), steadier than a ratio of medians
    on a machine whose load changes from round to round."""
    runs = c["runs"]
    out = []
    on = runs["on"]
    if on["drain_ratios"]:
        ratio = statistics.median(on["drain_ratios"])
        out.append(f"Drain with fairness on is {ratio:.0%} of the rate with it off, median of each round's ratio "
                   f"({'meets' if ratio >= 0.9 else 'misses'} the goal of no worse than 10%); a claim takes "
                   f"{statistics.median(on['claim_ratios']):.0%} of the time.")
    for label, run in runs.items():
        if label not in ("on", "off") and run["drain_ratios"]:
            out.append(f"Plain jobs with this tree against `{label}` (same rounds): drain "
                       f"{1 / statistics.median(run['drain_ratios']):.0%} of `{label}`'s rate, a claim "
                       f"{1 / statistics.median(run['claim_ratios']):.0%} of its time.")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_fill":
        print(json.dumps(fill(argv[1], int(argv[2]), bool(int(argv[3])))))
        return 0
    if argv and argv[0] == "_measure":
        print(json.dumps(measure(argv[1], int(argv[2]), int(argv[3]), float(argv[4]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: a check that the bench runs")
    p.add_argument("--backends", default="sqlite,postgres,mariadb", help="backends of the position figure")
    p.add_argument("--big", type=int, default=10_000, help="the big tenant's jobs (default 10,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of the position figure, on and off (default 3)")
    p.add_argument("--waiting", type=int, default=1_000_000, help="ready jobs for the claim cost (PostgreSQL)")
    p.add_argument("--drain", type=int, default=20_000, help="jobs timed in each drain")
    p.add_argument("--claims", type=int, default=500, help="claims of 10 timed in each round")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the claim cost (each database once a round)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up a run after this many seconds")
    p.add_argument("--src", action="append", default=[], metavar="LABEL=PATH",
                   help="also measure plain jobs with another source tree (repeatable)")
    p.add_argument("--no-claim-cost", action="store_true", help="the position figure only")
    p.add_argument("--no-save", action="store_true", help="print the table only; write no results file")
    args = p.parse_args(argv)
    if args.quick:
        args.big, args.waiting, args.drain, args.claims, args.rounds, args.repeat = 2000, 20_000, 2000, 100, 1, 1
    sources = [tuple(s.split("=", 1)) for s in args.src]
    started = datetime.now(timezone.utc)
    report: dict[str, Any] = {"started": started.strftime("%Y-%m-%d %H:%M UTC"), "machine": _machine(),
                              "big": args.big, "repeat": args.repeat, "positions": []}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        try:
            report["positions"].append(position(backend, args.big, args.repeat, args.timeout))
        except Exception as exc:
            report["positions"].append({"backend": backend, "error": f"{type(exc).__name__}: {exc}"[:200]})
    if not args.no_claim_cost:
        report["claim_cost"] = claim_cost(args, sources)  # type: ignore[arg-type]
        report["ratios"] = ratios(report["claim_cost"])
    text = table(report)
    print(text)
    if not args.no_save:
        common.save_results("fairness-" + started.strftime("%Y%m%dT%H%M%SZ"), report, text)
    return 0


def _machine() -> str:
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
