"""Compare errands in two checkouts, A B A B, with the benchmark's own runs (bench/errands_bench.py).

    .venv/bin/python bench/ab.py --base /path/to/older/checkout --rounds 8 \
        --case drain:1:sqlite --case drain:2:sqlite --case bulk:1:sqlite --case drain:2:postgresql \
        --case latency:1:mariadb

A case is ``mode:processes:backend[:jobs]``; backends are sqlite, postgresql and mariadb (the local
servers; ERRANDS_BENCH_POSTGRES_URL / ERRANDS_BENCH_MYSQL_URL name others).  Each case reports every
figure its mode gives: jobs/s for enqueue, bulk and drain, the workers' CPU µs per job for drain, and
the pickup p50 and p99 (ms) for latency.  ``--all`` runs the set issue 24 compares on all three backends.

Each checkout needs its own ``.venv`` (``git worktree add`` + ``make venv``).  Runs alternate between
the two checkouts, the order flipping every round, each on a fresh database, so a machine whose load
drifts (a shared one) shifts both sides alike.  Prints each side's runs, the ratio of the medians
(this checkout / base) and the median of the per-round ratios, and writes them to
bench/results/ab-<stamp>.md.  Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PG_ADMIN = os.environ.get("ERRANDS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL_ADMIN = os.environ.get("ERRANDS_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
DEFAULT_JOBS = {"drain": 20000, "bulk": 50000, "enqueue": 5000, "latency": 200}
FIGURES = {"enqueue": [("value", "jobs/s", True)], "bulk": [("value", "jobs/s", True)],
           "drain": [("value", "jobs/s", True), ("cpu_us_per_job", "CPU µs/job", False)],
           "latency": [("p50_ms", "pickup p50 ms", False), ("p99_ms", "pickup p99 ms", False)]}
"""What each mode measures: (key in the benchmark's JSON line, label, whether higher is better)."""
ALL_CASES = [f"{mode}:{p}:{backend}" for backend in ("sqlite", "postgresql", "mariadb")
             for mode, p in (("enqueue", 1), ("bulk", 1), ("drain", 1), ("drain", 2), ("latency", 1))]


def _server(backend: str, sql: str) -> None:
    """One statement on the backend's server, outside any database of the benchmark's."""
    if backend == "postgresql":
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(sql)
        return
    from urllib.parse import urlsplit

    import pymysql

    parts = urlsplit(MYSQL_ADMIN)
    conn = pymysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306, user=parts.username or "root",
                           password=parts.password or "", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _fresh_url(backend: str, workdir: str, n: int) -> tuple[str, str | None]:
    if backend == "sqlite":
        return f"sqlite:///{workdir}/q.db", None
    name = f"errands_ab_{os.getpid()}_{n}"
    _server(backend, f"DROP DATABASE IF EXISTS {name}")
    _server(backend, f"CREATE DATABASE {name}")
    admin = PG_ADMIN if backend == "postgresql" else MYSQL_ADMIN
    return admin.rsplit("/", 1)[0] + "/" + name, name


def _drop(backend: str, name: str | None) -> None:
    if name is not None:
        _server(backend, f"DROP DATABASE IF EXISTS {name}")


def run_once(root: str, mode: str, processes: int, backend: str, jobs: int, n: int) -> dict[str, float]:
    workdir = tempfile.mkdtemp(prefix="errands-ab-")
    url, name = _fresh_url(backend, workdir, n)
    try:
        python = os.path.join(root, ".venv", "bin", "python")
        size = ["--samples", str(jobs)] if mode == "latency" else ["--jobs", str(jobs)]
        done = subprocess.run([python, os.path.join(root, "bench", "errands_bench.py"), "--mode", mode, *size,
                               "--processes", str(processes), "--db-url", url,
                               "--workdir", workdir], capture_output=True, text=True, cwd=root, timeout=600)
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        result = json.loads(line) if line.startswith("{") else {}
        figures = {key: result.get(key) for key, _, _ in FIGURES[mode]}
        if not all(isinstance(v, (int, float)) for v in figures.values()):
            raise RuntimeError(f"{root}: {mode} on {backend} gave no figure: {line or done.stderr[-500:]}")
        return {k: float(v) for k, v in figures.items()}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        _drop(backend, name)


def checked_case(case: str) -> str:
    """A ``--case`` as argparse's type: a mode or backend it does not know is a usage error naming the
    choices (it was a KeyError after the first rounds had run)."""
    parts = case.split(":")
    if len(parts) not in (3, 4) or parts[0] not in FIGURES or not parts[1].isdigit() \
            or parts[2] not in ("sqlite", "postgresql", "mariadb") or (len(parts) == 4 and not parts[3].isdigit()):
        raise argparse.ArgumentTypeError(f"{case!r}: want mode:processes:backend[:jobs], mode one of "
                                         f"{', '.join(FIGURES)}, backend sqlite, postgresql or mariadb")
    return case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the other checkout (with its own .venv)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--case", action="append", default=[], type=checked_case,
                    help="mode:processes:backend[:jobs], repeatable")
    ap.add_argument("--all", action="store_true", help="every mode on every backend (issue 24's comparison)")
    args = ap.parse_args()
    cases = ALL_CASES if args.all else args.case or ["drain:1:sqlite", "drain:2:sqlite", "bulk:1:sqlite",
                                                     "enqueue:1:sqlite", "drain:2:postgresql", "bulk:1:postgresql"]
    sides = {"base": os.path.abspath(args.base), "this": ROOT}
    lines = [f"# A/B: {sides['this']} against {sides['base']}", "",
             f"{args.rounds} rounds, A B / B A alternating; load average at start {os.getloadavg()[0]:.1f}", "",
             "Ratios are this / base; *worse by* turns them into how much worse this checkout is (negative: "
             "better), whichever way the figure points (jobs/s up, µs and ms down).", "",
             "| case | figure | base runs | this runs | ratio of medians | median of round ratios | worse by |",
             "|---|---|---|---|--:|--:|--:|"]
    n = 0
    for case in cases:
        mode, processes, backend, *rest = case.split(":")
        jobs = int(rest[0]) if rest else DEFAULT_JOBS[mode]
        got: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
        for r in range(args.rounds):
            for side in (("base", "this") if r % 2 == 0 else ("this", "base")):
                n += 1
                got[side].append(run_once(sides[side], mode, int(processes), backend, jobs, n))
        for key, label, higher_better in FIGURES[mode]:
            base, this = [g[key] for g in got["base"]], [g[key] for g in got["this"]]
            ratio = statistics.median(this) / statistics.median(base)
            pairs = statistics.median(t / b for b, t in zip(base, this, strict=True))
            worse = (1 / ratio - 1) if higher_better else (ratio - 1)
            shown = ", ".join(f"{v:,.0f}" if v >= 100 else f"{v:.2f}" for v in base), \
                ", ".join(f"{v:,.0f}" if v >= 100 else f"{v:.2f}" for v in this)
            row = (f"| {mode} {processes}p {backend} ({jobs:,}) | {label} | {shown[0]} | {shown[1]} | {ratio:.3f} | "
                   f"{pairs:.3f} | {worse:+.1%} |")
            print(row, flush=True)
            lines.append(row)
    lines += ["", f"load average at end {os.getloadavg()[0]:.1f}"]
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    out = os.path.join(HERE, "results", f"ab-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"written {os.path.relpath(out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
