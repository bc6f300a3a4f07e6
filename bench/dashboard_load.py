"""The dashboard under many operators at once (issue 29, goal 5): ``/`` and ``/jobs`` at 64 concurrent
connections, on PostgreSQL with 1,000,000 jobs (and on SQLite with 2,000), measured with ApacheBench.

    .venv/bin/python bench/dashboard_load.py                                    # PostgreSQL, 1,000,000 jobs
    .venv/bin/python bench/dashboard_load.py --backend sqlite --jobs 2000
    .venv/bin/python bench/dashboard_load.py --src base=/tmp/base/src --src this=src --rounds 3
    make bench-dashboard-load [BENCH_ARGS=...]

What it does, in order:

1. checks that ``ab`` (ApacheBench, Debian's ``apache2-utils``) is installed, and says how to install
   it otherwise (exit status 2);
2. creates a scratch database and fills it with bench/dashboard_pages.py's fill (the same realistic
   installation: six queues, running and stale jobs, dead letters, throughput history), with
   ``--dead`` dead-letter entries (default a tenth of ``--jobs``); ``--keep`` keeps it, ``--reuse
   URL`` loads an already filled one;
3. for each round and each source tree (``--src label=path``, alternated A B / B A between rounds so
   that neither always runs on the warmer machine): starts ``errands dashboard`` the way a user does
   (the CLI, one uvicorn process) and one ``errands worker`` draining a trickle of new jobs (``--trickle``
   a second, on a queue of its own, so the filled million stays as it is), logs in over HTTP, warms up,
   then runs ``ab -k -c 64 -t SECONDS`` with the session cookie against each page;
4. prints, per tree and page, requests/s, p50, p99 and max (ab's own percentiles, whole ms), the non-2xx
   answers, the dashboard process's CPU time per request (from its CPU clock: what a request costs,
   whatever else loads the machine), and the load average before each run; then the ratios of each tree
   to the first one; writes ``bench/results/dashboard-load-<stamp>-<backend>.json`` and ``.md``.

The goal is p99 <= 300 ms for both pages on PostgreSQL with 1,000,000 jobs; nothing asserts it.
docs/performance.md ("Dashboard under 64 concurrent operators") has the method and the figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

import common  # noqa: E402
import cpu_time  # noqa: E402
import dashboard_load_app  # noqa: E402
import dashboard_pages as dp  # noqa: E402

PAGES = ("/", "/jobs")
GOAL_MS = 300
INSTALL = ("ApacheBench (ab) is not installed: `sudo apt-get install -y apache2-utils` (Debian, Ubuntu), "
           "`dnf install httpd-tools` (Fedora), `brew install httpd` (macOS) -- then run this again.")


# ---------------------------------------------------------------------------- ab


def parse_ab(text: str) -> dict[str, Any]:
    """What ab printed, as figures: requests/s, the percentiles (ms), completed and non-2xx answers."""
    def number(pattern: str, default: float = 0.0) -> float:
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else default

    percent = {int(p): float(ms) for p, ms in re.findall(r"^\s+(\d+)%\s+(\d+)", text, re.MULTILINE)}
    return {"rps": number(r"^Requests per second:\s+([\d.]+)"), "complete": int(number(r"^Complete requests:\s+(\d+)")),
            "non_2xx": int(number(r"^Non-2xx responses:\s+(\d+)")),
            "keep_alive": int(number(r"^Keep-Alive requests:\s+(\d+)")),
            "p50": percent.get(50), "p90": percent.get(90), "p99": percent.get(99), "max": percent.get(100)}


def run_ab(port: int, path: str, cookie: str, concurrency: int, seconds: float) -> dict[str, Any]:
    """``ab -k -c N -t S`` against one page as the logged-in operator."""
    cmd = ["ab", "-q", "-k", "-c", str(concurrency), "-t", str(seconds), "-n", "1000000", "-s", "120",
           "-C", cookie, "-H", "Accept: text/html", f"http://127.0.0.1:{port}{path}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180)
    if done.returncode != 0 and "Requests per second" not in done.stdout:
        raise RuntimeError(f"ab failed ({done.returncode}): {done.stderr[-1000:]}")
    return parse_ab(done.stdout)


# ---------------------------------------------------------------------------- the processes under test


class Trickle(threading.Thread):
    """New jobs, ``per_second`` of them, for the live worker to drain while the pages are loaded."""

    def __init__(self, url: str, per_second: float) -> None:
        super().__init__(daemon=True, name="trickle")
        self.app = dashboard_load_app.make(url)
        self.period = 1.0 / per_second if per_second > 0 else 0.0
        self.stopping = threading.Event()
        self.sent = 0
        self.errors: list[str] = []

    def run(self) -> None:
        while self.period and not self.stopping.wait(self.period):
            try:
                self.app.enqueue("bench.trickle", self.sent)
                self.sent += 1
            except Exception as exc:  # reported, never fatal
                self.errors.append(repr(exc))
        self.app.store.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def _errands(src: str, url: str, args: list[str], log: str) -> subprocess.Popen[bytes]:
    """``errands --app dashboard_load_app:app ARGS`` on the source tree ``src``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, HERE]), "ERRANDS_DATABASE_URL": url}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "errands", "--app", "dashboard_load_app:app", *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def start_dashboard(src: str, url: str, log: str) -> tuple[subprocess.Popen[bytes], int]:
    """``errands dashboard`` as a user starts it (plain HTTP on the loopback: cookies without Secure)."""
    port = dp._free_port()
    proc = _errands(src, url, ["dashboard", "--port", str(port), "--insecure-cookies"], log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the dashboard exited ({proc.returncode}): {common.tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the dashboard did not listen within 60 s")


def session_cookie(port: int) -> str:
    """Log in over HTTP as the bench's admin; the ``Cookie`` value ab sends."""
    client = dp.Client(port)
    try:
        client.login()
        for path in PAGES:  # warm: templates compiled, connections open, caches filled
            status, _, _ = client.request("GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path} answered {status} after the login")
        return f"errands_session={client.cookies['errands_session']}"
    finally:
        client.close()


def measure_tree(label: str, src: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One tree: its dashboard and worker started, each page loaded with ab, both stopped."""
    log = os.path.join(tempfile.gettempdir(), f"errands-dashboard-load-{label}-{os.getpid()}.log")
    worker = _errands(src, url, ["worker", "-q", dashboard_load_app.TRICKLE_QUEUE], log)
    server, port = start_dashboard(src, url, log)
    results: dict[str, Any] = {}
    try:
        cookie = session_cookie(port)
        for path in PAGES:
            for _ in range(args.warmup):
                run_ab(port, path, cookie, args.concurrency, 2)
            load = os.getloadavg()[0]
            cpu0 = cpu_time.process_clock_seconds(server.pid)
            figures = run_ab(port, path, cookie, args.concurrency, args.seconds)
            cpu1 = cpu_time.process_clock_seconds(server.pid)
            if cpu0 is not None and cpu1 is not None and figures["complete"]:
                figures["cpu_ms"] = round((cpu1 - cpu0) * 1000 / figures["complete"], 2)
            figures["load"] = round(load, 2)
            results[path] = figures
            print(f"  {label:>6} {path:<6} {_line(figures)}", file=sys.stderr)
    finally:
        dp.stop_server(server)
        common.stop_workers(worker)
        if os.path.exists(log):
            os.unlink(log)
    return results


# ---------------------------------------------------------------------------- the report


def _line(f: dict[str, Any]) -> str:
    return (f"{f['rps']:7.1f} req/s  p50 {f['p50']:5.0f}  p99 {f['p99']:5.0f}  max {f['max']:5.0f} ms  "
            f"non-2xx {f['non_2xx']}  cpu/req {f.get('cpu_ms', float('nan')):.2f} ms  load {f['load']}")


def _span(values: list[float], fmt: str = "{:.0f}") -> str:
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)}–{fmt.format(high)}"


def table(report: dict[str, Any]) -> str:
    """Per tree and page: the range over rounds of each figure, and the medians' ratios to the first tree."""
    labels = [label for label, _ in report["trees"]]
    lines = [f"## Dashboard under {report['concurrency']} concurrent connections ({report['backend']}, "
             f"{report['jobs']:,} jobs, {report['rounds']} round(s) of {report['seconds']} s per page)", "",
             f"{report['started']}, commit {report['commit']}, {report['machine']}; goal p99 <= {GOAL_MS} ms", "",
             "| tree | page | req/s | p50 ms | p99 ms | max ms | non-2xx | CPU ms/req | load avg | p99 vs "
             f"{labels[0]} | req/s vs {labels[0]} |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label in labels:
        for path in PAGES:
            runs = [r[label][path] for r in report["runs"]]
            base = [r[labels[0]][path] for r in report["runs"]]

            def med(rs: list[dict[str, Any]], key: str) -> float:
                return statistics.median(r[key] for r in rs)

            cpu = [r["cpu_ms"] for r in runs if "cpu_ms" in r]
            mark = " ✓" if max(r["p99"] for r in runs) <= GOAL_MS else ""
            lines.append(f"| {label} | `{path}` | {_span([r['rps'] for r in runs], '{:.1f}')} | "
                         f"{_span([r['p50'] for r in runs])} | {_span([r['p99'] for r in runs])}{mark} | "
                         f"{_span([r['max'] for r in runs])} | {sum(r['non_2xx'] for r in runs)} | "
                         f"{_span(cpu, '{:.2f}') if cpu else '—'} | {_span([r['load'] for r in runs], '{:.2f}')} | "
                         f"{med(runs, 'p99') / med(base, 'p99'):.2f}x | {med(runs, 'rps') / med(base, 'rps'):.2f}x |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict[str, Any]:
    from run import FreshDatabase

    trees = [(label, os.path.abspath(path)) for label, path in (s.split("=", 1) for s in args.src)] \
        or [("this", os.path.join(ROOT, "src"))]
    started = datetime.now(timezone.utc)
    db: Any = None
    url = args.reuse
    if url is None:
        db = FreshDatabase(dp.BACKENDS[args.backend], "dash_load").__enter__()
        url = db.url
    trickle: Trickle | None = None
    try:
        app = dashboard_load_app.make(url)
        if args.reuse is None:
            dp.fill_scratch(app, url, args.backend, args.jobs, args.jobs // 10 if args.dead is None else args.dead)
        jobs = dp._count_rows(app)["jobs"]
        app.store.close()
        trickle = Trickle(url, args.trickle)
        trickle.start()
        runs = []
        for round_no in range(args.rounds):
            order = trees if round_no % 2 == 0 else trees[::-1]
            print(f"round {round_no + 1}/{args.rounds}", file=sys.stderr)
            runs.append({label: measure_tree(label, src, url, args) for label, src in order})
        return {"backend": args.backend, "jobs": jobs, "concurrency": args.concurrency, "seconds": args.seconds,
                "rounds": args.rounds, "trees": trees, "runs": runs, "trickle_sent": trickle.sent,
                "trickle_errors": trickle.errors[:5], "started": started.strftime("%Y-%m-%d %H:%M UTC"),
                "commit": dp._commit(), "machine": f"{platform.node()} {os.cpu_count()} cores, "
                                                   f"Python {platform.python_version()}"}
    finally:
        if trickle is not None:
            trickle.stop()
        if db is not None:
            if args.keep:
                print(f"kept the database: --reuse '{url}'", file=sys.stderr)
            else:
                db.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("postgres", "sqlite", "mariadb"), default="postgres")
    parser.add_argument("--jobs", type=int, default=None, help="jobs (default 1,000,000; SQLite 2,000)")
    parser.add_argument("--dead", type=int, default=None, help="dead-letter entries (default a tenth of --jobs)")
    parser.add_argument("--concurrency", type=int, default=64, help="ab's concurrent connections (default 64)")
    parser.add_argument("--seconds", type=float, default=20.0, help="ab's time per page and run (default 20)")
    parser.add_argument("--warmup", type=int, default=1, help="2-second ab runs before each timed one (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the trees alternated (default 2)")
    parser.add_argument("--trickle", type=float, default=5.0, help="new jobs a second for the live worker")
    parser.add_argument("--src", action="append", default=[], help="label=path of a source tree (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the filled database (prints its URL)")
    parser.add_argument("--reuse", metavar="URL", help="load an already filled database (from --keep)")
    parser.add_argument("--no-save", action="store_true", help="print the table only; write no results file")
    args = parser.parse_args(argv)
    if shutil.which("ab") is None:
        print(INSTALL, file=sys.stderr)
        return 2
    if args.reuse:
        args.backend = dp._backend_of(args.reuse)
    if args.jobs is None:
        args.jobs = 2_000 if args.backend == "sqlite" else 1_000_000
    report = run(args)
    text = table(report)
    print(text)
    if not args.no_save:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        common.save_results(f"dashboard-load-{stamp}-{report['backend']}", report, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
