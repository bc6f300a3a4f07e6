"""Compare errands in two checkouts, A B A B, with the benchmark's own runs (bench/errands_bench.py).

    .venv/bin/python bench/ab.py --base /path/to/older/checkout --rounds 8 \
        --case drain:1:sqlite --case drain:2:sqlite --case bulk:1:sqlite --case drain:2:postgresql

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
DEFAULT_JOBS = {"drain": 20000, "bulk": 50000, "enqueue": 5000}


def _fresh_url(backend: str, workdir: str, n: int) -> tuple[str, str | None]:
    if backend == "sqlite":
        return f"sqlite:///{workdir}/q.db", None
    import psycopg

    name = f"errands_ab_{os.getpid()}_{n}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name, name


def _drop(name: str | None) -> None:
    if name is not None:
        import psycopg

        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")


def run_once(root: str, mode: str, processes: int, backend: str, jobs: int, n: int) -> float:
    workdir = tempfile.mkdtemp(prefix="errands-ab-")
    url, name = _fresh_url(backend, workdir, n)
    try:
        python = os.path.join(root, ".venv", "bin", "python")
        done = subprocess.run([python, os.path.join(root, "bench", "errands_bench.py"), "--mode", mode,
                               "--jobs", str(jobs), "--processes", str(processes), "--db-url", url,
                               "--workdir", workdir], capture_output=True, text=True, cwd=root, timeout=600)
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        value = json.loads(line).get("value") if line.startswith("{") else None
        if not isinstance(value, (int, float)):
            raise RuntimeError(f"{root}: {mode} on {backend} gave no figure: {line or done.stderr[-500:]}")
        return float(value)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        _drop(name)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="the other checkout (with its own .venv)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--case", action="append", default=[], help="mode:processes:backend[:jobs], repeatable")
    args = ap.parse_args()
    cases = args.case or ["drain:1:sqlite", "drain:2:sqlite", "bulk:1:sqlite", "enqueue:1:sqlite",
                          "drain:2:postgresql", "bulk:1:postgresql"]
    sides = {"base": os.path.abspath(args.base), "this": ROOT}
    lines = [f"# A/B: {sides['this']} against {sides['base']}", "",
             f"{args.rounds} rounds, A B / B A alternating; load average at start {os.getloadavg()[0]:.1f}", "",
             "| case | base runs (jobs/s) | this runs (jobs/s) | ratio of medians | median of round ratios |",
             "|---|---|---|--:|--:|"]
    n = 0
    for case in cases:
        mode, processes, backend, *rest = case.split(":")
        jobs = int(rest[0]) if rest else DEFAULT_JOBS[mode]
        got: dict[str, list[float]] = {"base": [], "this": []}
        for r in range(args.rounds):
            for side in (("base", "this") if r % 2 == 0 else ("this", "base")):
                n += 1
                got[side].append(run_once(sides[side], mode, int(processes), backend, jobs, n))
        ratio = statistics.median(got["this"]) / statistics.median(got["base"])
        pairs = statistics.median(t / b for b, t in zip(got["base"], got["this"], strict=True))
        row = (f"| {mode} {processes}p {backend} ({jobs:,}) | {', '.join(f'{v:,.0f}' for v in got['base'])} | "
               f"{', '.join(f'{v:,.0f}' for v in got['this'])} | {ratio:.3f} | {pairs:.3f} |")
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
