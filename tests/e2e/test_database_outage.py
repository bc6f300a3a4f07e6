"""The database stopped and started under a running worker loses no job (PostgreSQL, MariaDB).

Each backend gets a private server (tests/e2e/private_servers.py) that the test
stops with a clean fast shutdown and starts again on the same port and data
directory, while a real ``errands worker`` process (CLI: supervisor + one worker
process with 4 runner threads) is in the middle of 3,000 jobs.  Two long jobs
are running when the server goes away and finish after it is back.

``sleep_then_note`` appends "job attempt pid" to a file on local disk, so every run of
every job is counted: exactly once is checked, not just at least once.  (The handler's
record is not a database write: an INSERT of the handler's own can commit while the
server shuts down and still report "lost connection"; its retry would then be a second
run that no queue can prevent: the at-least-once case that handlers must tolerate.)

Two outages: one shorter than the lease (the default 30 s), and one longer than
the lease, after which the worker must not hand out again the jobs it finished
while the database was down (their completion could not be recorded).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sample_jobs
from helpers import cli_env, scaled, wait_for
from private_servers import PASSWORD, PrivateServer, die_with_parent, private_server  # noqa: F401

from errands import Errands, StoreUnavailable

pytestmark = pytest.mark.slow

JOBS = 3000
LONG_JOBS = 2
CONCURRENCY = 4
LOG_RECORD = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) ")


def scalar(app: Errands, sql: str) -> Any:
    def read(cur: Any) -> Any:
        cur.execute(sql)
        return cur.fetchone()[0]

    return app.store.db.run(read)


def scalar_or_none(app: Errands, sql: str) -> Any:
    """``scalar`` that answers None while the database cannot be reached."""
    try:
        return scalar(app, sql)
    except StoreUnavailable:
        return None


def start_worker(db_url: str, *args: str, log_path: Path, notes: Path) -> subprocess.Popen[str]:
    """``errands worker`` like helpers.start_worker, but killed by the kernel if pytest itself dies,
    so that no worker keeps polling a server that is gone (its processes die with it)."""
    with open(log_path, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "errands", "worker", *args],
                                env=cli_env(db_url, ERRANDS_TEST_NOTES=str(notes)),
                                stdout=out, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=die_with_parent(signal.SIGKILL))


@pytest.fixture
def app(private_server: PrivateServer) -> Iterator[Errands]:  # noqa: F811
    """sample_jobs.app (the worker's app) pointed at the private server, with empty tables."""
    if not private_server.running:  # an earlier test failed in the middle of its outage
        private_server.start()
    app = sample_jobs.app
    previous = app.database_url
    app.use_database(private_server.url)
    app.migrate()
    sample_jobs.ensure_runs_table()
    for table in ("errands_jobs", "errands_failed_jobs", "errands_workers", "test_runs"):
        app.store.db.run(lambda cur, table=table: cur.execute(f"DELETE FROM {table}"))
    try:
        yield app
    finally:
        app.store.close()
        app.use_database(previous)


@pytest.mark.parametrize("lease, outage", [pytest.param(30, 3.0, id="outage-shorter-than-lease"),
                                           pytest.param(3, 5.0, id="outage-longer-than-lease")])
def test_stopping_and_starting_the_database_under_a_worker_loses_no_job(
        app: Errands, private_server: PrivateServer, tmp_path: Path,  # noqa: F811
        lease: float, outage: float) -> None:
    timings: dict[str, float] = {}
    began = time.monotonic()
    short = app.enqueue_many([sample_jobs.sleep_then_note.prepare(0.001) for _ in range(JOBS)])
    timings["enqueue"] = time.monotonic() - began

    log_path, notes = tmp_path / "worker.log", tmp_path / "runs.txt"
    notes.touch()
    worker = start_worker(private_server.url, "-c", str(CONCURRENCY), "--lease", f"{lease:g}",
                          "--shutdown-timeout", "10", log_path=log_path, notes=notes)

    def noted() -> list[tuple[int, int]]:
        """(job id, attempt) of every run so far."""
        lines = notes.read_text().splitlines()
        return [(int(job), int(attempt)) for job, attempt, _ in (line.split() for line in lines)]

    def worker_log() -> str:
        return log_path.read_text(errors="replace")

    try:
        began = time.monotonic()
        wait_for(lambda: len(noted()) >= JOBS // 10, timeout=60,
                 message=f"the worker to finish {JOBS // 10} jobs")
        timings["first 10%"] = time.monotonic() - began
        # Two jobs that are running when the server stops and finish after it is back.
        long = app.enqueue_many([sample_jobs.sleep_then_note.using(priority=10).prepare(outage + 1.5)
                                 for _ in range(LONG_JOBS)])
        long_ids = ", ".join(str(h.id) for h in long)
        wait_for(lambda: scalar(app, f"SELECT COUNT(*) FROM errands_jobs WHERE id IN ({long_ids}) "
                                     "AND reserved_by IS NOT NULL") == LONG_JOBS,
                 timeout=30, message="the long jobs to start")
        done_before = len(noted())
        log_before = log_path.stat().st_size

        timings["stop"] = private_server.stop()
        time.sleep(outage)  # the outage itself: the database stays down this long, whatever happens meanwhile
        ran_in_outage = len(noted()) - done_before
        assert worker.poll() is None, f"the worker exited during the outage:\n{worker_log()[-3000:]}"
        outage_log = worker_log()[log_before:]
        timings["start"] = private_server.start()

        began = time.monotonic()
        wait_for(lambda: scalar_or_none(app, "SELECT COUNT(*) FROM errands_jobs") == 0, timeout=90,
                 interval=0.2, message="the jobs table to empty after the restart")
        timings["drain"] = time.monotonic() - began
        assert worker.poll() is None, f"the worker exited:\n{worker_log()[-3000:]}"

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(scaled(30)) == 0, worker_log()[-3000:]
    finally:
        if worker.poll() is None:  # failed above: its worker process dies with it (PR_SET_PDEATHSIG)
            worker.kill()
            worker.wait()

    log = worker_log()
    assert "crashed" not in log and "died" not in log, log[-5000:]
    # Waiting, not spinning: the claim loop backs off (0.5 s, 1 s, 2 s, ...), the heartbeat
    # fails once per beat, and only the jobs that were running fail - a few dozen records at most.
    # A run that ends well is not noise: runners finish what they had started, and may start a few
    # buffered jobs before the first failed statement pauses them.
    records = [line for line in outage_log.splitlines() if LOG_RECORD.match(line) and " done in " not in line]
    claims = [line for line in records if "database unavailable, retrying in" in line]
    assert claims, f"the worker logged no claim retry during the outage:\n{outage_log[-3000:]}"
    assert len(claims) <= 8, f"{len(claims)} claim retries in {outage:g}s:\n" + "\n".join(claims)
    assert len(records) <= 60, f"{len(records)} log records in a {outage:g}s outage:\n" + "\n".join(records)
    # The first failed statement pauses the runners: they do not work through the prefetched jobs (up
    # to 500) while nothing can be recorded (measured: 6 to 57 runs between the count and the pause).
    assert ran_in_outage < 250, f"{ran_in_outage} jobs ran while the database was down"

    # Every job ran exactly once: one row per job id, nothing failed, nothing left.
    failed = app.failed(limit=JOBS)
    assert not failed, [(f.id, f.error_type, f.error_message[:200]) for f in failed[:10]]
    runs = noted()
    ran = [job for job, _ in runs]
    expected = {h.id for h in short + long}
    assert len(ran) == len(set(ran)) == JOBS + LONG_JOBS and set(ran) == expected, \
        f"{len(ran)} runs, {len(set(ran))} distinct, missing {sorted(expected - set(ran))[:20]}"
    # No handler failed (nothing in the dead letter, every job ran once): the jobs running at the stop
    # finished and were recorded after the restart.  A run on a second attempt can only come from a
    # claim whose commit the shutdown made ambiguous: the worker never saw those rows, and they came
    # back when their lease expired.  Nothing ever needs a third.
    retried = sorted((job, attempt) for job, attempt in runs if attempt > 1)
    assert all(attempt == 2 for _, attempt in retried), retried
    assert all(attempt == 1 for job, attempt in runs if job in {h.id for h in long}), "a long job ran twice"
    assert scalar(app, "SELECT COUNT(*) FROM errands_workers") == 0
    print(f"\n{private_server.kind} lease {lease:g}s outage {outage:g}s: {done_before} jobs done before the "
          "stop; " + ", ".join(f"{k} {v:.2f}s" for k, v in timings.items())
          + f"; {len(claims)} claim retries, {len(records)} log records during the outage, "
            f"{len(retried)} job(s) needed a second attempt, {ran_in_outage} ran during the outage")


def test_enqueue_while_the_database_is_down_and_after_it_is_back(
        app: Errands, private_server: PrivateServer) -> None:  # noqa: F811
    first = sample_jobs.record.enqueue()  # the app now holds an open connection
    private_server.stop()
    try:
        for _ in range(2):  # the connection the shutdown broke, then a refused reconnect
            with pytest.raises(StoreUnavailable) as info:
                sample_jobs.record.enqueue()
            message = str(info.value)
            assert f"127.0.0.1:{private_server.port}/errands_e2e" in message, message
            assert PASSWORD not in message and "errands:***@" in message, message
    finally:
        private_server.start()
    second = sample_jobs.record.enqueue()  # same Errands object, same store
    assert second.id > first.id

    # A restart while the app is idle: its connection is dead, the next call just reconnects.
    private_server.stop()
    private_server.start()
    third = sample_jobs.record.enqueue()
    assert [row.id for row in app.store.jobs.list_jobs()] == [first.id, second.id, third.id]
