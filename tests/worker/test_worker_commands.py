"""Worker processes quieted, resumed and stopped from outside, and recycled on memory: a real
``errands worker`` (a supervisor and its forked process, on connections of its own) obeys the
commands this test leaves through ``errands.services.workers``, on every database.

Waiting is for events (a registry row, a heartbeat that passed, a row gone, an exit), never a fixed
sleep.  The claim mode of MariaDB (``mariadb-update``) plays no part here, so it is not run twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import child_pids, pid_alive, scaled, start_worker, wait_for

from errands import Errands
from errands.core.rows import WorkerRow
from errands.services import workers as fleet

LIMIT_MB = 200
"""``--max-memory``: well above a fresh worker process (about 40-60 MB), well below one that hoarded."""


@pytest.fixture
def fleet_app(migrated_url: str) -> Iterator[Errands]:
    import fleet_jobs

    app = fleet_jobs.app
    app.use_database(migrated_url)
    try:
        yield app
    finally:
        app.store.close()


@pytest.fixture
def supervisor(migrated_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    log = tmp_path / "worker.log"
    proc = start_worker(migrated_url, "--lease", "2", "--max-memory", str(LIMIT_MB), "--shutdown-timeout", "30",
                        log_path=log, ERRANDS_APP="fleet_jobs:app")
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            children = child_pids(proc.pid)
            proc.kill()
            for pid in children:
                if pid_alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))
        print(log.read_text(errors="replace")[-4000:])  # shown when the test failed


def registered(app: Errands) -> list[WorkerRow]:
    return app.store.workers.list_workers()


def the_worker(app: Errands, not_id: str | None = None) -> WorkerRow:
    """The one registered worker (another than ``not_id``), once there is one."""
    return wait_for(lambda: next((w for w in registered(app) if w.id != not_id), None), timeout=scaled(30),
                    message="a worker to register")


def beats_after(app: Errands, worker_id: str, times: int = 1) -> None:
    """Wait until the worker heart-beat ``times`` more times (each beat is a new heartbeat_at)."""
    for _ in range(times):
        [before] = [w.heartbeat_at for w in registered(app) if w.id == worker_id]
        wait_for(lambda: any(w.id == worker_id and w.heartbeat_at > before for w in registered(app)),  # noqa: B023
                 timeout=scaled(10), message="a heartbeat")


def gone(app: Errands, job_id: int) -> bool:
    return app.store.jobs.get_job(job_id) is None


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"])
def test_a_worker_recycles_on_memory_then_obeys_quiet_resume_and_stop_from_outside(fleet_app, supervisor, tmp_path):
    import fleet_jobs

    proc, log = supervisor
    first = the_worker(fleet_app)

    # --max-memory: a job leaves the process above the limit; it exits, a fresh process takes over.
    hog = fleet_jobs.hoard.enqueue(LIMIT_MB + 50)
    worker = the_worker(fleet_app, not_id=first.id)
    wait_for(lambda: first.id not in {w.id for w in registered(fleet_app)}, timeout=scaled(10),
             message="the recycled process to unregister")
    assert gone(fleet_app, hog.id), "the job that crossed the limit finished first"
    assert proc.poll() is None and worker.pid != first.pid
    assert f"above --max-memory {LIMIT_MB} MB: recycling" in log.read_text()

    # quiet: the process stays alive, listed as quiet, and claims nothing.
    assert fleet.command_worker(fleet_app, "test", "quiet", worker.id).workers == [worker.id]
    wait_for(lambda: [(w.command, w.status) for w in registered(fleet_app)] == [("quiet", "quiet")],
             timeout=scaled(10), message="the worker to acknowledge quiet")
    waiting = fleet_jobs.quick.enqueue()
    beats_after(fleet_app, worker.id)
    row = fleet_app.store.jobs.get_job(waiting.id)
    assert row is not None and row.reserved_by is None and row.attempts == 0, "a quiet worker claimed a job"
    assert proc.poll() is None and pid_alive(worker.pid)

    # resume: it claims again.
    fleet.command_worker(fleet_app, "test", "resume", worker.id)
    wait_for(lambda: gone(fleet_app, waiting.id), timeout=scaled(10), message="the resumed worker to run the job")

    # stop: as SIGTERM; the running job finishes, the process exits and is not replaced.
    gate = tmp_path / "gate"
    long = fleet_jobs.gated.enqueue(str(gate))
    wait_for(lambda: (r := fleet_app.store.jobs.get_job(long.id)) is not None and r.reserved_by == worker.id,
             timeout=scaled(10), message="the long job to be claimed")
    fleet.command_worker(fleet_app, "test", "stop", worker.id)
    wait_for(lambda: [w.status for w in registered(fleet_app)] == ["stopping"], timeout=scaled(10),
             message="the worker to acknowledge the stop")
    assert proc.poll() is None, "the worker waits for its running job"
    gate.touch()
    assert proc.wait(timeout=scaled(20)) == 0
    assert gone(fleet_app, long.id), "the running job finished (it was not given back)"
    assert registered(fleet_app) == []
    text = log.read_text()
    assert "told to stop from outside" in text and "quieted from outside" in text and "resumed" in text
    audit = [(e.action, e.target) for e in fleet_app.store.accounts.audit_log()]
    assert audit == [("stop", f"worker {worker.id}"), ("resume", f"worker {worker.id}"),
                     ("quiet", f"worker {worker.id}")]


def test_a_quieted_worker_gives_back_what_it_buffered_and_finishes_what_runs(tmp_path):
    """In process (the claim loop is the same): the jobs it prefetched but did not start go back to the
    queue with their attempt refunded; the running one finishes; a stop then ends ``run_worker``."""
    app = Errands(f"sqlite:///{tmp_path / 'quiet.db'}")
    gate, started = threading.Event(), threading.Event()

    @app.job(name="blocker")
    def blocker() -> None:
        started.set()
        gate.wait(scaled(30))

    @app.job(name="later")
    def later() -> None: ...

    try:
        first = blocker.enqueue()
        rest = [later.enqueue().id for _ in range(5)]
        runner = threading.Thread(target=app.run_worker, kwargs={"concurrency": 1, "prefetch": 5, "lease": 1.0},
                                  daemon=True)  # (should the stop be missed, the run would not hold pytest up)
        runner.start()
        assert started.wait(scaled(10))
        wait_for(lambda: all(app.store.jobs.get_job(i).reserved_by for i in rest), timeout=scaled(10),  # type: ignore[union-attr]
                 message="the prefetch to hold the other jobs")
        [worker] = registered(app)
        fleet.command_worker(app, "test", "quiet", worker.id)
        wait_for(lambda: not any(app.store.jobs.get_job(i).reserved_by for i in rest), timeout=scaled(10),  # type: ignore[union-attr]
                 message="the buffered jobs to go back")
        assert {app.store.jobs.get_job(i).attempts for i in rest} == {0}  # type: ignore[union-attr]
        assert registered(app)[0].status == "quiet"
        gate.set()
        wait_for(lambda: gone(app, first.id), timeout=scaled(10), message="the running job to finish")
        fleet.command_worker(app, "test", "stop", worker.id)
        runner.join(scaled(10))
        assert not runner.is_alive()
        assert all(app.store.jobs.get_job(i).reserved_by is None for i in rest)  # type: ignore[union-attr]
    finally:
        gate.set()
        app.close()
