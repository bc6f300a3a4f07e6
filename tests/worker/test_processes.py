"""Real worker processes started through the CLI (``python -m errands worker``), on every backend.

Each test drives supervisors and their forked worker processes with signals and
watches the database: ``test_runs`` (written by the handlers in
tests/apps/sample_jobs.py, job id as primary key, so a second run of a job
cannot go unnoticed), the jobs table and the dead letter.  Waiting is always
"poll the database (or /proc) until the event happened", never a fixed sleep,
and every process started here is killed in the fixture's teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sample_jobs
from helpers import child_pids, pid_alive, pid_state, scaled, start_worker, wait_for

from errands import Errands

# Seconds; heartbeats every lease/3, stale recovery every max(1, lease/2).  Scaled: on a busy machine a
# heartbeat can come late, and a lease that lapses meanwhile is not what these tests are about.
LEASE_SECONDS = scaled(2)
LEASE = f"{LEASE_SECONDS:g}"


# ---------------------------------------------------------------------- fixtures
@pytest.fixture
def jobs_app(db_url: str) -> Iterator[Errands]:
    """sample_jobs.app pointed at this test's database, migrated, with an empty test_runs table."""
    migrator = Errands(db_url)
    migrator.migrate()
    migrator.store.close()
    app = sample_jobs.app
    app.use_database(db_url)
    sample_jobs.ensure_runs_table()
    try:
        yield app
    finally:
        app.store.close()


class Workers:
    """`errands worker` supervisors started by one test; all of them are killed at teardown."""

    def __init__(self, db_url: str, tmp_path: Path) -> None:
        self.db_url = db_url
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[Path] = []
        self.known_children: set[int] = set()

    def start(self, *args: str) -> subprocess.Popen[str]:
        log = self.tmp_path / f"worker-{len(self.procs)}.log"
        proc = start_worker(self.db_url, *args, log_path=log)
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def child(self, proc: subprocess.Popen[str], timeout: float = 20) -> int:
        """Pid of the single worker process a supervisor forked."""
        kids = wait_for(lambda: child_pids(proc.pid), timeout, message=f"a worker process under {proc.pid}")
        assert len(kids) == 1, f"expected one worker process under supervisor {proc.pid}, found {kids}"
        self.known_children.add(kids[0])
        return kids[0]

    def wait_exit(self, procs: list[subprocess.Popen[str]], timeout: float) -> list[int]:
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        codes = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"worker {proc.pid} still running after {timeout}s\n{self.tail()}") from None
        return codes

    def tail(self, lines: int = 40) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            out.append(f"--- {log.name} (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.known_children.update(child_pids(proc.pid))
        for pid in sorted(self.known_children):  # only pids this test saw under its own supervisors
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=scaled(10))


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path)
    try:
        yield w
    finally:
        w.kill_all()
        print(w.tail())  # pytest shows captured output of failing tests only


# ---------------------------------------------------------------------- reading the database
def query(app: Errands, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    def read(cur: Any) -> list[tuple[Any, ...]]:
        cur.execute(app.store.dialect.q(sql), params)
        return [tuple(r) for r in cur.fetchall()]

    return app.store.db.run(read)


def runs(app: Errands) -> dict[int, tuple[int, int, str | None]]:
    """test_runs as {key: (attempt, pid, note)}."""
    return {int(k): (int(a), int(p), n) for k, a, p, n in
            query(app, "SELECT job_id, attempt, pid, note FROM test_runs")}


def count(app: Errands, table: str) -> int:
    return int(query(app, f"SELECT COUNT(*) FROM {{{table}}}")[0][0])


def jobs_and_failed(app: Errands) -> tuple[int, int]:
    return count(app, "jobs"), count(app, "failed")


def signal_tree(supervisor: int, child: int, sig: int) -> None:
    """Signal a supervisor and its worker process (which sits in a process group of its own)."""
    os.kill(supervisor, sig)
    os.kill(child, sig)


# ---------------------------------------------------------------------- 1. many processes
TOTAL_JOBS = 20_000
ENQUEUE_CHUNK = 5_000


@pytest.mark.slow
def test_no_job_runs_twice_across_eight_worker_processes(jobs_app, workers):
    ids: list[int] = []
    for _ in range(TOTAL_JOBS // ENQUEUE_CHUNK):
        ids += [h.id for h in jobs_app.enqueue_many([sample_jobs.record.prepare() for _ in range(ENQUEUE_CHUNK)])]
    assert len(set(ids)) == TOTAL_JOBS

    started = time.monotonic()
    # Separate CLI invocations and several processes per supervisor: 4 x 2 = 8 worker processes,
    # each claiming up to 4 jobs at a time for its 4 threads.
    procs = [workers.start("--burst", "--processes", "2", "-c", "4") for _ in range(4)]
    codes = workers.wait_exit(procs, timeout=240)
    elapsed = time.monotonic() - started
    print(f"{TOTAL_JOBS} jobs drained by 8 worker processes in {elapsed:.1f}s")
    assert codes == [0] * 4, workers.tail()

    done = runs(jobs_app)
    assert len(done) == TOTAL_JOBS
    assert set(done) == set(ids)
    assert {attempt for attempt, _, _ in done.values()} == {1}, "some job needed more than one attempt"
    assert len({pid for _, pid, _ in done.values()}) == 8, "every worker process should have taken a share"
    assert jobs_and_failed(jobs_app) == (0, 0)


# ---------------------------------------------------------------------- 2. crashes
def test_killed_worker_job_is_run_again_after_its_lease_expires(jobs_app, workers):
    job = sample_jobs.record_attempt_then_sleep.enqueue(120)
    first = workers.start("--lease", LEASE)
    first_child = workers.child(first)
    wait_for(lambda: job.id * 100 + 1 in runs(jobs_app), message="the first attempt to start")

    first.send_signal(signal.SIGKILL)  # the supervisor; PR_SET_PDEATHSIG takes its worker process along
    assert first.wait(timeout=scaled(10)) == -signal.SIGKILL
    wait_for(lambda: not pid_alive(first_child), timeout=10, message="the worker process to die with its parent")
    row = jobs_app.store.jobs.get_job(job.id)
    assert row is not None and row.reserved_by is not None and row.attempts == 1

    second = workers.start("--lease", LEASE)
    second_child = workers.child(second)
    wait_for(lambda: job.id * 100 + 2 in runs(jobs_app), timeout=30, message="the second attempt to start")

    done = runs(jobs_app)
    assert done == {job.id * 100 + 1: (1, first_child, ""), job.id * 100 + 2: (2, second_child, "")}
    row = jobs_app.store.jobs.get_job(job.id)
    assert row is not None and row.attempts == 2 and row.reserved_by is not None
    assert row.reserved_by.split(":")[1] == str(second_child)
    assert row.last_error is not None and row.last_error.startswith("errands.LeaseExpired")
    assert count(jobs_app, "failed") == 0


def test_job_that_kills_its_worker_ends_in_the_dead_letter(jobs_app, workers):
    job = sample_jobs.kill_own_worker.enqueue()
    started = time.monotonic()
    proc = workers.start("--burst", "--lease", LEASE)
    # The supervisor charges each death to the job, replaces the process, and after the third
    # attempt buries the job; the next process finds nothing to do and --burst ends the run.
    assert workers.wait_exit([proc], timeout=60) == [0], workers.tail()
    elapsed = time.monotonic() - started

    assert jobs_and_failed(jobs_app) == (0, 1)
    failed = jobs_app.store.jobs.get_failed(job.id)
    assert failed is not None
    assert failed.error_type == "errands.WorkerDied"
    assert "signal 9" in failed.error_message
    assert failed.attempts == failed.max_attempts == 3
    assert elapsed < scaled(30), f"three crashes took {elapsed:.1f}s"


# ---------------------------------------------------------------------- 3. heartbeat
def test_job_longer_than_its_lease_is_never_taken_twice(jobs_app, workers):
    a = workers.start("--lease", LEASE)
    b = workers.start("--lease", LEASE)
    wait_for(lambda: len(jobs_app.store.workers.list_workers()) == 2, timeout=20, message="both workers to register")

    job = sample_jobs.sleep_then_record.enqueue(3 * LEASE_SECONDS)
    row = wait_for(lambda: (r := jobs_app.store.jobs.get_job(job.id)) is not None and r.reserved_by and r,
                   message="the job to be claimed")
    owner = row.reserved_by
    longest_hold = 0.0
    while (row := jobs_app.store.jobs.get_job(job.id)) is not None:
        # Still the first claim, and the lease keeps being pushed forward by the heartbeat.
        assert (row.reserved_by, row.attempts) == (owner, 1), "the running job was claimed again"
        assert row.reserved_until is not None and row.reserved_until >= jobs_app.store.now()
        longest_hold = max(longest_hold, (row.reserved_until - row.reserved_at).total_seconds())
        time.sleep(0.1)  # how often the row is sampled while the job runs (the loop ends when it is gone)
    assert longest_hold > 2 * LEASE_SECONDS, f"the lease was never extended past {longest_hold:.1f}s"

    assert runs(jobs_app) == {job.id: (1, int(owner.split(":")[1]), "")}
    assert jobs_and_failed(jobs_app) == (0, 0)
    assert a.poll() is None and b.poll() is None, "both workers were alive throughout"


# ---------------------------------------------------------------------- 4. zombie
def test_paused_worker_that_lost_its_lease_cannot_settle(jobs_app, workers, tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()

    def open_gate(job, attempt: int) -> None:
        (gates / f"{job.id}-{attempt}").touch()

    zombie = workers.start("--lease", LEASE, "-c", "2")
    zombie_child = workers.child(zombie)
    # Each attempt records itself, then waits for its gate; the first attempt of `bad` then raises.
    ok = sample_jobs.gated_attempt.enqueue(str(gates), False)
    bad = sample_jobs.gated_attempt.enqueue(str(gates), True)
    keys = {ok.id * 100 + 1, bad.id * 100 + 1}
    wait_for(lambda: keys <= set(runs(jobs_app)), message="both first attempts to start")
    signal_tree(zombie.pid, zombie_child, signal.SIGSTOP)
    wait_for(lambda: pid_state(zombie_child) == "T" and pid_state(zombie.pid) == "T", message="the stop")

    rescuer = workers.start("--lease", LEASE, "-c", "2")
    rescuer_child = workers.child(rescuer)
    keys = {ok.id * 100 + 2, bad.id * 100 + 2}
    wait_for(lambda: keys <= set(runs(jobs_app)), timeout=30, message="the second worker to take both jobs")
    rescuer_ids = {jobs_app.store.jobs.get_job(j.id).reserved_by for j in (ok, bad)}
    assert len(rescuer_ids) == 1 and rescuer_ids.pop().split(":")[1] == str(rescuer_child)

    # Wake the zombie with both first attempts free to end: it settles one success (DELETE) and one
    # failure (UPDATE for a retry) of jobs it no longer holds.  Stop it gracefully, so by its exit
    # every settle it tried is done; the rescuer's runs are still waiting at their gates meanwhile.
    open_gate(ok, 1)
    open_gate(bad, 1)
    signal_tree(zombie.pid, zombie_child, signal.SIGCONT)
    zombie.send_signal(signal.SIGTERM)
    assert workers.wait_exit([zombie], timeout=20) == [0], workers.tail()
    log = workers.logs[0].read_text()
    assert "late failure of a worker that lost its lease" in log, "the zombie never finished its runs"
    for job in (ok, bad):
        row = jobs_app.store.jobs.get_job(job.id)
        assert row is not None, f"job {job.id} left the jobs table while the rescuer still ran it"
        assert row.reserved_by is not None and row.reserved_by.split(":")[1] == str(rescuer_child)
        assert row.attempts == 2
    assert count(jobs_app, "failed") == 0
    assert rescuer.poll() is None

    open_gate(ok, 2)
    open_gate(bad, 2)
    wait_for(lambda: count(jobs_app, "jobs") == 0, timeout=30, message="the rescuer to finish both jobs")
    assert count(jobs_app, "failed") == 0
    assert runs(jobs_app) == {
        ok.id * 100 + 1: (1, zombie_child, ""), bad.id * 100 + 1: (1, zombie_child, ""),
        ok.id * 100 + 2: (2, rescuer_child, ""), bad.id * 100 + 2: (2, rescuer_child, ""),
    }


# ---------------------------------------------------------------------- 5. graceful shutdown
def test_sigterm_lets_the_running_job_finish(jobs_app, workers):
    proc = workers.start("--lease", LEASE, "-c", "1")
    running = sample_jobs.mark_start_sleep_record.enqueue(2)
    waiting = sample_jobs.record.enqueue()  # concurrency 1: not claimed before the signal
    wait_for(lambda: -running.id in runs(jobs_app), message="the job to start")

    proc.send_signal(signal.SIGTERM)
    assert workers.wait_exit([proc], timeout=30) == [0], workers.tail()

    child = runs(jobs_app)[-running.id][1]
    assert runs(jobs_app) == {-running.id: (1, child, "start"), running.id: (1, child, "done")}
    assert count(jobs_app, "failed") == 0
    assert jobs_app.store.jobs.get_job(running.id) is None
    left = jobs_app.store.jobs.list_jobs()
    assert [(r.id, r.reserved_by, r.attempts) for r in left] == [(waiting.id, None, 0)]


@pytest.mark.slow
def test_sigterm_to_every_process_at_once_still_lets_running_jobs_finish(jobs_app, workers):
    """As systemd (KillMode=control-group), Kubernetes or ``kill -- -PGID`` stop a service: the
    worker process hears SIGTERM from its service manager and again from the supervisor."""
    proc = workers.start("--lease", LEASE, "-c", "1", "--shutdown-timeout", "60")
    running = sample_jobs.mark_start_sleep_record.enqueue(2)
    wait_for(lambda: -running.id in runs(jobs_app), message="the job to start")
    child = workers.child(proc)
    signal_tree(proc.pid, child, signal.SIGTERM)
    assert workers.wait_exit([proc], timeout=30) == [0], workers.tail()
    assert runs(jobs_app)[running.id][2] == "done"  # it finished instead of being given back
    assert jobs_app.store.jobs.get_job(running.id) is None and count(jobs_app, "failed") == 0


def test_sigterm_while_worker_processes_are_starting_stops_them_all(jobs_app, workers):
    """The stop is forwarded to processes that have just been forked; none may miss it and run on."""
    for _ in range(3):  # the window is a few milliseconds wide: try it more than once
        proc = workers.start("--processes", "4", "--lease", LEASE)
        wait_for(lambda pid=proc.pid: child_pids(pid), timeout=20, interval=0.001, message="a worker process")
        proc.send_signal(signal.SIGTERM)
        assert workers.wait_exit([proc], timeout=15) == [0], workers.tail()
    assert jobs_app.store.workers.list_workers() == [], "every worker process unregistered on its way out"


# ---------------------------------------------------------------------- 6. hard timeout
def test_overrunning_job_is_stopped_retried_and_buried(jobs_app, workers):
    job = sample_jobs.overrun.enqueue(30)  # timeout=1, max_attempts=2
    started = time.monotonic()
    proc = workers.start("--burst", "--lease", LEASE)
    first_child = workers.child(proc)
    wait_for(lambda: job.id * 100 + 1 in runs(jobs_app), message="the first attempt")
    # The supervisor kills the process after 1 s and puts the job back with the failure noted.
    retried = wait_for(lambda: (r := jobs_app.store.jobs.get_job(job.id)) is not None and r.attempts == 2 and r,
                       timeout=15, message="the second attempt to be claimed")
    assert retried.last_error is not None and retried.last_error.startswith("errands.JobTimeout")
    assert workers.wait_exit([proc], timeout=20) == [0], workers.tail()
    elapsed = time.monotonic() - started

    assert not pid_alive(first_child)
    done = runs(jobs_app)
    assert sorted(done) == [job.id * 100 + 1, job.id * 100 + 2]
    assert done[job.id * 100 + 1][1] != done[job.id * 100 + 2][1], "the retry ran in a replacement process"
    assert jobs_and_failed(jobs_app) == (0, 1)
    failed = jobs_app.store.jobs.get_failed(job.id)
    assert failed is not None and failed.error_type == "errands.JobTimeout" and failed.attempts == 2
    assert "timeout of 1s" in failed.error_message
    assert elapsed < scaled(15), f"two 1 s timeouts took {elapsed:.1f}s"


# ---------------------------------------------------------------------- second signal, --once, --max
def test_second_sigterm_gives_the_running_job_back_at_once(jobs_app, workers):
    proc = workers.start("--lease", "30", "-c", "1", "--shutdown-timeout", "60")
    job = sample_jobs.mark_start_sleep_record.enqueue(60)
    wait_for(lambda: -job.id in runs(jobs_app), message="the job to start")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    log = workers.logs[-1]  # the first signal is being handled: stop claiming, wait for the job
    wait_for(lambda: "signal again to stop now" in log.read_text(), message="the first SIGTERM to be handled")
    proc.send_signal(signal.SIGTERM)
    assert workers.wait_exit([proc], timeout=20) == [0], workers.tail()
    assert time.monotonic() - started < scaled(15)  # not the 60 s job, not the 60 s shutdown timeout
    row = jobs_app.store.jobs.get_job(job.id)
    # Released for another worker at once, attempt refunded: it did not fail, it was interrupted.
    assert row is not None and row.reserved_by is None and row.attempts == 0
    assert count(jobs_app, "failed") == 0


def test_once_runs_one_job_and_max_stops_after_n(jobs_app, workers):
    jobs = [sample_jobs.record.enqueue() for _ in range(5)]
    once = workers.start("--once")
    assert workers.wait_exit([once], timeout=30) == [0], workers.tail()
    assert len(runs(jobs_app)) == 1 and count(jobs_app, "jobs") == 4
    limited = workers.start("--max", "3", "-c", "2")
    assert workers.wait_exit([limited], timeout=30) == [0], workers.tail()
    assert len(runs(jobs_app)) == 4 and count(jobs_app, "jobs") == 1
    left = jobs_app.store.jobs.list_jobs()
    assert [(r.id, r.reserved_by, r.attempts) for r in left] == [(jobs[-1].id, None, 0)]
