"""``on_retry`` and ``on_dead`` fire on every path that ends an attempt, exactly once, with the job's record.

The paths: the worker settling a failed run, the supervisor settling a run it killed over its hard
timeout or whose process died, lease recovery of a dead worker's run by another worker, and an
operator's recovery (``errands recover``, the dashboard's Recover button).  Each hook appends a line
to a file (tests/apps/ending_jobs.py), so the tests see which process heard of which job, how often.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ending_jobs
import pytest
from helpers import scaled, start_worker, wait_for

from errands import Errands, JobState
from errands.services import operator
from errands.worker.runner import Worker, WorkerSettings


@pytest.fixture
def hook_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hooks.jsonl"
    path.touch()
    monkeypatch.setenv("ERRANDS_TEST_HOOK_LOG", str(path))
    return path


@pytest.fixture
def eapp(migrated_url: str, hook_log: Path) -> Iterator[Errands]:
    app = ending_jobs.app
    app.use_database(migrated_url)
    try:
        yield app
    finally:
        app.store.close()


def heard(path: Path, hook: str = "dead") -> list[dict[str, Any]]:
    return [line for line in map(json.loads, path.read_text().splitlines()) if line["hook"] == hook]


def _lapsed_claim(app: Errands, job_id: int) -> None:
    """Claim ``job_id`` as a worker that dies at once: a lease of one second, never extended."""
    [row] = app.store.jobs.claim("gone-host:1:dead", ["held"], 1, 1)
    assert row.id == job_id and row.attempts == 1
    wait_for(lambda: app.counts()["held"].stale == 1, message="the dead worker's lease to lapse")


def test_settling_a_failure_fires_on_retry_then_on_dead_once(eapp, hook_log):
    handle = ending_jobs.fails.enqueue(7, why="no such customer")
    eapp.run_until_empty(["endings"])
    [retry] = heard(hook_log, "retry")
    [dead] = heard(hook_log, "dead")
    assert retry["id"] == dead["id"] == handle.id and retry["retry_in"] == 0.0
    assert dead == {**dead, "name": "fails", "queue": "endings", "args": [7], "kwargs": {"why": "no such customer"},
                    "error_type": "ValueError", "error_message": "no such customer 7", "attempts": 2,
                    "max_attempts": 2, "retry_in": None, "pid": os.getpid()}
    assert handle.status() is JobState.FAILED


def test_a_backoff_that_raises_costs_its_job_never_the_worker(eapp, hook_log):
    handle = ending_jobs.badly_backed_off.enqueue()
    other = ending_jobs.fails.enqueue(1)
    eapp.run_until_empty(["endings"])
    [dead, _] = sorted(heard(hook_log), key=lambda line: line["id"] != handle.id)
    assert dead["id"] == handle.id and dead["error_type"] == "errands.SettleError"
    assert "ZeroDivisionError" in dead["error_message"] and "first failure" in dead["error_message"]
    assert other.status() is JobState.FAILED, "the worker went on with the other job"


@pytest.mark.parametrize("job, error_type", [("overruns", "errands.JobTimeout"), ("dies", "errands.WorkerDied")])
def test_the_supervisor_fires_on_dead_once_for_a_run_it_killed_or_lost(eapp, hook_log, db_url, tmp_path, job,
                                                                        error_type):
    handle = (ending_jobs.overruns.enqueue(60) if job == "overruns" else ending_jobs.dies.enqueue(3))
    log = tmp_path / "worker.log"
    proc = start_worker(db_url, "-q", "endings", "-c", "1", "--lease", "30", log_path=log,
                        ERRANDS_APP="ending_jobs:app", ERRANDS_TEST_HOOK_LOG=str(hook_log))
    try:
        [dead] = wait_for(lambda: heard(hook_log), timeout=60, message=f"on_dead for the {job} job")
        assert dead["id"] == handle.id and dead["error_type"] == error_type and dead["attempts"] == 1
        assert dead["pid"] == proc.pid, "the supervisor decided the ending, so its hooks run there"
        assert eapp.store.jobs.get_failed(handle.id).error_type == error_type
    finally:
        proc.terminate()
        assert proc.wait(timeout=scaled(30)) == 0, log.read_text()
    assert len(heard(hook_log)) == 1, "the hook ran once"


def test_lease_recovery_by_other_workers_fires_on_dead_once(eapp, hook_log):
    handle = ending_jobs.held.enqueue(1)
    _lapsed_claim(eapp, handle.id)
    workers = [Worker(eapp, WorkerSettings(queues=("endings",), lease=2.0, sleep=0.1)) for _ in range(2)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        [dead] = wait_for(lambda: heard(hook_log), timeout=30, message="a worker to recover the lapsed lease")
    finally:
        for w in workers:
            w.request_stop()
        for thread in threads:
            thread.join(scaled(30))
    assert dead == {**dead, "id": handle.id, "name": "held", "args": [1], "error_type": "errands.LeaseExpired",
                    "attempts": 1, "retry_in": None, "pid": os.getpid()}
    assert len(heard(hook_log)) == 1, "two workers recovering at once: one ending, one hook call"
    assert eapp.store.jobs.get_failed(handle.id).error_type == "errands.LeaseExpired"


def test_an_operators_recovery_fires_on_dead_once(eapp, hook_log):
    handle = ending_jobs.held.enqueue(2)
    _lapsed_claim(eapp, handle.id)
    recovered = operator.recover_now(eapp, "ops")
    assert recovered.buried == [handle.id]
    [dead] = heard(hook_log)
    assert dead["id"] == handle.id and dead["error_type"] == "errands.LeaseExpired" and dead["pid"] == os.getpid()
    assert operator.recover_now(eapp, "ops").buried == []
    assert len(heard(hook_log)) == 1
