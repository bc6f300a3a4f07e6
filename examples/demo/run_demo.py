#!/usr/bin/env python3
"""Drive the demo: enqueue jobs, run ``errands worker`` on them, show what happened.

    make demo                          # from the repository root
    .venv/bin/python examples/demo/run_demo.py

1. Starts from an empty ``demo-output/`` (the SQLite database lives there too).
2. Enqueues 40 welcome mails, 10 reports and 30 flaky syncs; some with a higher
   priority, a few delayed by 2 seconds.
3. Runs ``errands --app demo_app:app worker -c 4 --burst`` as a subprocess and
   prints a progress line from ``app.counts()`` every half second.  ``--burst``
   exits when nothing is *ready*, so while delayed or backed-off jobs remain the
   demo starts the worker again once they are due.
4. Prints the outbox, the reports, the dead letter and the CLI commands to try next.

Exits 0 when every job ended as expected (done, or in the dead letter after its
attempts), 1 otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from demo_app import (  # noqa: E402  (needs the path above)
    OUTBOX,
    OUTPUT,
    REPORTS,
    app,
    build_report,
    flaky_sync,
    send_welcome_email,
)

MAILS, REPORT_COUNT, FLAKY = 40, 10, 30
TOTAL = MAILS + REPORT_COUNT + FLAKY
TIME_LIMIT = 90.0  # seconds; the demo normally needs about ten
PRINT_EVERY = 0.5
TICK = 0.1


def enqueue_jobs() -> None:
    started = time.perf_counter()
    # Bulk: prepare() validates and encodes each call, enqueue_many() stores them with one multi-row INSERT.
    # Every eighth user is a paying customer whose mail should go first: using() changes options per call.
    mails = [(send_welcome_email.using(priority=10) if uid % 8 == 0 else send_welcome_email)
             .prepare(uid, f"user{uid}@example.com") for uid in range(1, MAILS + 1)]
    app.enqueue_many(mails)
    # One at a time, the way a web request would; three reports are scheduled 2 s from now.
    for month in range(1, REPORT_COUNT + 1):
        job = build_report.using(delay=2) if month > REPORT_COUNT - 3 else build_report
        job.enqueue(f"sales-2024-{month:02d}", rows=28 + month)
    flaky = [(flaky_sync.using(delay=2) if n % 10 == 0 else flaky_sync).prepare(n) for n in range(1, FLAKY + 1)]
    app.enqueue_many(flaky)
    ms = (time.perf_counter() - started) * 1000
    print(f"enqueued {TOTAL} jobs in {ms:.0f} ms: {MAILS} x send_welcome_email (every 8th with priority 10), "
          f"{REPORT_COUNT} x build_report (3 delayed 2 s), {FLAKY} x flaky_sync (3 delayed 2 s; fails 70 % "
          "of the time, 3 attempts, backoff 0.5 s then 1 s)")


def totals() -> dict[str, int]:
    sums = {"ready": 0, "delayed": 0, "running": 0, "stale": 0, "failed": 0}
    for counts in app.counts().values():
        for key in sums:
            sums[key] += getattr(counts, key)
    sums["done"] = TOTAL - sum(sums.values())
    return sums


def files(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


class Progress:
    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.started = time.monotonic()
        self.last = 0.0

    def show(self, t: dict[str, int], runs: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PRINT_EVERY:
            return
        self.last = now
        line = (f"[{now - self.started:5.1f}s] ready {t['ready']:>3}  delayed {t['delayed']:>3}  "
                f"running {t['running']:>2}  failed {t['failed']:>3}  done {t['done']:>3}/{TOTAL}  | "
                f"outbox {len(files(OUTBOX, '*.eml')):>2}  reports {len(files(REPORTS, '*.csv')):>2}  | "
                f"worker runs {runs}")
        if self.tty:
            sys.stdout.write("\r" + line + "\033[K")
            sys.stdout.flush()
        else:
            print(line, flush=True)

    def end(self) -> None:
        if self.tty:
            sys.stdout.write("\n")


def start_worker(log: object) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env.pop("ERRANDS_DATABASE_URL", None)  # the demo app names its own database
    env.pop("DATABASE_URL", None)
    command = [sys.executable, "-m", "errands", "--app", "demo_app:app", "worker", "-c", "4", "--burst"]
    return subprocess.Popen(command, cwd=HERE, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT)


def run_workers() -> int:
    """Start ``--burst`` workers until no job is ready, delayed or running; returns how many ran."""
    progress = Progress()
    runs = 0
    worker: subprocess.Popen[bytes] | None = None
    with open(OUTPUT / "worker.log", "ab") as log:
        try:
            while True:
                if worker is not None and worker.poll() is not None:
                    if worker.returncode != 0:
                        progress.end()
                        raise SystemExit(f"errands worker exited with code {worker.returncode}; "
                                         f"see {OUTPUT / 'worker.log'}")
                    worker = None
                t = totals()
                if worker is None:
                    if t["stale"]:
                        app.recover_stale()  # a worker died holding jobs: give them back now
                    if t["ready"]:
                        worker = start_worker(log)
                        runs += 1
                    elif not (t["delayed"] or t["running"] or t["stale"]):
                        progress.show(t, runs, force=True)
                        break
                progress.show(t, runs)
                if time.monotonic() - progress.started > TIME_LIMIT:
                    progress.end()
                    raise SystemExit(f"the demo did not finish within {TIME_LIMIT:.0f} s; "
                                     f"see {OUTPUT / 'worker.log'}")
                time.sleep(TICK)
        finally:
            if worker is not None and worker.poll() is None:
                worker.terminate()  # SIGTERM: stop claiming, finish running jobs, give back the rest
                try:
                    worker.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    worker.kill()
    progress.end()
    return runs


def shown(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return str(path)


def cli_prefix() -> str:
    """How the user can run the CLI against the demo app from the current directory."""
    script = Path(sys.executable).parent / "errands"
    runner = shown(script) if script.exists() else f"{shown(Path(sys.executable))} -m errands"
    return f"PYTHONPATH={shown(HERE)} {runner} --app demo_app:app"


def summary(elapsed: float, runs: int) -> bool:
    mails = files(OUTBOX, "*.eml")
    reports = files(REPORTS, "*.csv")
    dead = app.failed(limit=1000)
    t = totals()
    print(f"\nfinished in {elapsed:.1f} s with {runs} worker run(s) "
          "(--burst exits when nothing is ready; the demo restarts it for delayed and backed-off jobs)\n")

    print(f"outbox   {shown(OUTBOX)}/: {len(mails)} message(s)")
    if mails:
        print("  " + mails[0].name + ":")
        for line in mails[0].read_text(encoding="utf-8").splitlines()[:5]:
            print("    " + line)
    print(f"reports  {shown(REPORTS)}/: {len(reports)} file(s): {', '.join(p.name for p in reports)}")

    print(f"\ndead letter (app.failed()): {len(dead)} job(s) that used up their attempts")
    if dead:
        print(f"  {'id':>4}  {'job':<20}{'attempts':>8}  error")
        for row in sorted(dead, key=lambda r: r.id):
            print(f"  {row.id:>4}  {row.name:<20}{row.attempts:>8}  {row.error_type}: {row.error_message}")
    flaky_done = t["done"] - len(mails) - len(reports)
    print(f"  flaky_sync: {flaky_done} succeeded (some after a retry), "
          f"{sum(r.name == 'flaky_sync' for r in dead)} gave up after 3 attempts")

    cli = cli_prefix()
    print(f"\nworker log: {shown(OUTPUT / 'worker.log')}")
    print("\ntry next (the same database, through the CLI):")
    print(f"  {cli} status")
    print(f"  {cli} failed list")
    print(f"  {cli} failed retry --all")
    print(f"  {cli} worker -c 4     # runs them again; Ctrl-C stops it")
    print("  make demo    # start over")

    ok = (len(mails) == MAILS and len(reports) == REPORT_COUNT
          and t["ready"] + t["delayed"] + t["running"] + t["stale"] == 0
          and all(r.name == "flaky_sync" for r in dead))
    if not ok:
        print("\nunexpected end state: every mail and report should exist and only flaky_sync jobs should be "
              f"in the dead letter (counts: {t})", file=sys.stderr)
    return ok


def main() -> int:
    started = time.monotonic()
    if OUTPUT.exists():
        shutil.rmtree(OUTPUT)
    OUTBOX.mkdir(parents=True)
    REPORTS.mkdir(parents=True)
    print(f"errands demo: database {shown(OUTPUT / 'demo.db')} (SQLite; tables are created on first use)")
    try:
        enqueue_jobs()
        print("running: errands --app demo_app:app worker -c 4 --burst")
        runs = run_workers()
        return 0 if summary(time.monotonic() - started, runs) else 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        app.store.close()


if __name__ == "__main__":
    sys.exit(main())
