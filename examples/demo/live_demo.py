#!/usr/bin/env python3
"""``make demo``: a worker and the dashboard on SQLite, with sample jobs flowing, until Ctrl+C.

1. Starts from an empty ``demo-output/`` and creates the dashboard user ``demo``.
2. Starts ``errands worker -c 4`` and ``errands dashboard`` (port 8080, or ``DEMO_PORT``,
   or the next free one) as subprocesses, and prints the URL and the login.
3. Every second enqueues welcome mails and flaky syncs (which fail 70 % of the time and
   land in the dead letter after three attempts), a report every few seconds, and now and
   then a chain and a batch, so every page has something to show.

Ctrl+C stops everything (the worker finishes its running jobs).  ``DEMO_SECONDS=N`` stops
by itself after N seconds (the tests use it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from demo_app import OUTPUT, app, build_report, flaky_sync, send_welcome_email  # noqa: E402

from errands.services.passwords import hash_password  # noqa: E402

USER, PASSWORD = "demo", "demo-password"


def free_port(preferred: int) -> int:
    for port in [preferred, *range(preferred + 1, preferred + 50)]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"no free port near {preferred}")


def start(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    env.pop("ERRANDS_DATABASE_URL", None)  # the demo app names its own database
    env.pop("DATABASE_URL", None)
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "errands", "--app", "demo_app:app", *args], cwd=HERE, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_until_serving(port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def feed(tick: int) -> None:
    uid = tick * 3
    app.enqueue_many([send_welcome_email.prepare(uid + i, f"user{uid + i}@example.com") for i in range(3)])
    app.enqueue_many([flaky_sync.prepare(tick * 2 + i) for i in range(2)])
    if tick % 5 == 0:
        build_report.using(delay=3).enqueue(f"sales-{tick:05d}", rows=40)
    if tick % 15 == 0:
        app.chain(send_welcome_email.prepare(10_000 + tick, "first@example.com"),
                  build_report.prepare(f"chained-{tick}", rows=5))
        app.batch([send_welcome_email.prepare(20_000 + tick * 10 + i, f"batch{i}@example.com") for i in range(5)],
                  on_complete=build_report.prepare(f"batch-summary-{tick}", rows=5))


def main() -> int:
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    app.migrate()
    app.store.accounts.create_user(USER, hash_password(PASSWORD), "admin")
    port = free_port(int(os.environ.get("DEMO_PORT", "8080")))
    worker = start("worker", "-c", "4", log=OUTPUT / "worker.log")
    web = start("dashboard", "--port", str(port), "--insecure-cookies", log=OUTPUT / "dashboard.log")
    if not wait_until_serving(port):
        print("the dashboard did not start; see demo-output/dashboard.log", file=sys.stderr)
        for proc in (worker, web):
            proc.terminate()
        return 1
    print(f"\n  errands demo running.\n  Dashboard: http://127.0.0.1:{port}/   login: {USER} / {PASSWORD}\n"
          f"  Jobs keep flowing (mails, reports, flaky syncs, chains, batches); logs in demo-output/.\n"
          f"  Press Ctrl+C to stop.\n", flush=True)
    limit = float(os.environ.get("DEMO_SECONDS", "0")) or None
    started = time.monotonic()
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    tick = 0
    try:
        while not stop and (limit is None or time.monotonic() - started < limit):
            if worker.poll() is not None or web.poll() is not None:
                print("a demo process stopped; see demo-output/*.log", file=sys.stderr)
                return 1
            feed(tick)
            tick += 1
            time.sleep(1.0)
    finally:
        print("\nstopping the worker and the dashboard ...", flush=True)
        for proc in (worker, web):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (worker, web):
            try:
                proc.wait(timeout=35)
            except subprocess.TimeoutExpired:
                proc.kill()
        app.store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
