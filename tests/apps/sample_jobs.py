"""Jobs used by tests that start real worker processes through the CLI.

The app reads ERRANDS_DATABASE_URL like a user's app would.  Handlers write what
happened into ``test_runs`` (job id is the primary key), so a job that ran twice
fails loudly with a duplicate-key error and shows up in the dead letter.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from errands import Errands, current_job

app = Errands(lease=float(os.environ.get("ERRANDS_TEST_LEASE", "30")))

RUNS_DDL = "CREATE TABLE IF NOT EXISTS test_runs (job_id BIGINT PRIMARY KEY, attempt INTEGER NOT NULL, " \
           "pid INTEGER NOT NULL, note VARCHAR(100))"


def ensure_runs_table() -> None:
    app.store.db.run(lambda cur: cur.execute(RUNS_DDL))


def _record(note: str = "", key: int | None = None) -> None:
    ctx = current_job()
    p = app.store.dialect.placeholder
    app.store.db.run(lambda cur: cur.execute(
        f"INSERT INTO test_runs (job_id, attempt, pid, note) VALUES ({p}, {p}, {p}, {p})",
        (ctx.id if key is None else key, ctx.attempt, os.getpid(), note)))


@app.job(queue="default")
def take_any(value: Any) -> None:
    """Takes any value JSON holds (errands checks int, float, str and bool annotations, not Any)."""


@app.job(queue="default")
def record() -> None:
    """Runs once; a second run of the same job hits the primary key."""
    _record()


@app.job(queue="default", max_attempts=5, backoff=0)
def sleep_then_record(seconds: float) -> None:
    time.sleep(seconds)
    _record()


@app.job(queue="default", max_attempts=5, backoff=0)
def sleep_then_note(seconds: float) -> None:
    """Like sleep_then_record, but notes the run in the file ERRANDS_TEST_NOTES ("job attempt pid" a
    line), not in the database: a handler's own database write is ambiguous while the server stops
    (committed, yet the client hears "lost connection"), and a note on local disk never is."""
    time.sleep(seconds)
    ctx = current_job()
    fd = os.open(os.environ["ERRANDS_TEST_NOTES"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{ctx.id} {ctx.attempt} {os.getpid()}\n".encode())  # one small O_APPEND write: atomic
    finally:
        os.close(fd)


@app.job(queue="default", max_attempts=3, backoff=0)
def record_attempt_then_sleep(seconds: float) -> None:
    """Records each attempt under key job_id * 100 + attempt, then sleeps (to be killed mid-job)."""
    ctx = current_job()
    _record(key=ctx.id * 100 + ctx.attempt)
    time.sleep(seconds)


@app.job(queue="default", max_attempts=3, backoff=0)
def kill_own_worker() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@app.job(queue="default", max_attempts=2, backoff=0, timeout=1)
def overrun(seconds: float) -> None:
    ctx = current_job()
    _record(key=ctx.id * 100 + ctx.attempt)
    time.sleep(seconds)


@app.job(queue="default", max_attempts=3, backoff=0)
def mark_start_sleep_record(seconds: float) -> None:
    """Marks its start (key -job_id, note 'start'), sleeps, then records the run (key job_id)."""
    ctx = current_job()
    _record(note="start", key=-ctx.id)
    time.sleep(seconds)
    _record(note="done")


@app.job(queue="default", max_attempts=3, backoff=0)
def gated_attempt(gate_dir: str, fail_first: bool) -> None:
    """Records each attempt (key job_id * 100 + attempt), then waits until the test creates the file
    ``<gate_dir>/<job id>-<attempt>``; the first attempt then raises when ``fail_first``."""
    ctx = current_job()
    _record(key=ctx.id * 100 + ctx.attempt)
    gate = os.path.join(gate_dir, f"{ctx.id}-{ctx.attempt}")
    deadline = time.monotonic() + 120 * float(os.environ.get("ERRANDS_TEST_TIME_SCALE") or 1)  # as helpers.scaled
    while not os.path.exists(gate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody opened {gate}")
        time.sleep(0.02)
    if ctx.attempt == 1 and fail_first:
        raise RuntimeError("late failure of a worker that lost its lease")
