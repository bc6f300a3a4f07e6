"""Resumable long jobs (issue 27, point 3): ``current_job().checkpoint(value)`` stores where a run is,
``checkpoint_value`` gives it to the next attempt, and a stop during a checkpointed run gives the job
back without spending an attempt (``Interrupted``), up to ``max_resumptions``; on every backend.
The SIGKILL path, with real worker processes, is the docs example's test (test_checkpoint_example.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import drain, scaled, wait_for

from errands import CheckpointTooLarge, Errands, Interrupted, StoreUnavailable, current_job
from errands.core.payload import CHECKPOINT_LIMIT
from errands.worker.runner import Worker, WorkerSettings


@pytest.fixture
def app(db_url: str) -> Iterator[Errands]:
    app = Errands(db_url, lease=5, backoff=0)
    app.migrate()
    yield app
    app.store.close()


def stored(app: Errands, job_id: int) -> dict[str, Any]:
    def read(cur: Any) -> dict[str, Any]:
        cur.execute(app.store.dialect.q("SELECT attempts, resumptions, checkpoint, reserved_by FROM {jobs} "
                                        "WHERE id = {p}"), (job_id,))
        attempts, resumptions, checkpoint, owner = cur.fetchone()
        return {"attempts": attempts, "resumptions": resumptions, "checkpoint": checkpoint, "owner": owner}

    return app.store.db.run(read)


def walker(app: Errands, stops: int = 1, **options: Any) -> tuple[Any, list[tuple[int, int, int]], threading.Event]:
    """A job that walks 0..9 with a checkpoint per step; each of its first ``stops`` runs, after its first
    step, waits until its worker is stopping (``at_step`` is set then).  ``seen`` gets (attempt, where it
    started, resumptions) of each run."""
    seen: list[tuple[int, int, int]] = []
    at_step = threading.Event()

    @app.job(name="walk", max_attempts=1, **options)
    def walk() -> None:
        job = current_job()
        start = job.checkpoint_value or 0
        seen.append((job.attempt, start, job.resumptions))
        for step in range(start, 10):
            if step == start + 1 and len(seen) <= stops:
                at_step.set()
                wait_for(lambda: job.stopping, timeout=20, interval=0.005, message="the worker to stop")
            job.checkpoint(step + 1)

    return walk, seen, at_step


def stop_mid_way(app: Errands, at_step: threading.Event) -> None:
    """Run a worker until the walk waits mid-way, then stop it as SIGTERM does (gracefully)."""
    at_step.clear()
    worker = Worker(app, WorkerSettings(queues=("default",), sleep=0.05, shutdown_timeout=scaled(20)))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert at_step.wait(scaled(20)), "the walk never got mid-way"
    worker.request_stop()
    thread.join(scaled(20))
    assert not thread.is_alive()


def test_a_stop_gives_the_job_back_without_spending_an_attempt_up_to_max_resumptions(app):
    """(Then, on the same database, :func:`largest_and_larger_checkpoints`: one database per backend.)"""
    walk, seen, at_step = walker(app, stops=2, max_resumptions=1)
    handle = walk.enqueue()
    stop_mid_way(app, at_step)
    # Given back: attempt refunded (its only one), one resumption, the checkpoint where it stopped.
    assert stored(app, handle.id) == {"attempts": 0, "resumptions": 1, "checkpoint": "2", "owner": None}
    stop_mid_way(app, at_step)
    # Past max_resumptions the stop spends the attempt: its only one, so the dead letter, which keeps the
    # checkpoint; a retry from there resumes from it.
    [entry] = app.failed()
    assert entry.id == handle.id and entry.error_type == "errands.Interrupted" and entry.checkpoint == "4"
    assert app.retry_failed(handle.id) == [handle.id]
    drain(app)
    assert seen == [(1, 0, 0), (1, 2, 1), (1, 4, 0)]
    assert app.failed() == [] and app.store.jobs.get_job(handle.id) is None
    largest_and_larger_checkpoints(app)


def largest_and_larger_checkpoints(app: Errands) -> None:
    """A checkpoint of the largest size is stored (each backend's column holds it) and a larger one refused."""
    refused: list[str] = []

    @app.job(name="big", max_attempts=2)
    def big() -> None:
        job = current_job()
        if job.attempt == 1:
            job.checkpoint("é" * ((CHECKPOINT_LIMIT - 2) // 2))  # 65,536 bytes of JSON: the most it may take
            try:
                job.checkpoint("x" * CHECKPOINT_LIMIT)  # its JSON has two quotes more than the limit
            except CheckpointTooLarge as exc:
                refused.append(str(exc))
            raise ValueError("the next attempt reads the largest checkpoint back")
        refused.append(job.checkpoint_value)

    big.enqueue()
    drain(app)
    assert "over the limit of 65536" in refused[0] and refused[1] == "é" * ((CHECKPOINT_LIMIT - 2) // 2)
    assert app.failed() == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the worker's own logic: any backend shows it
def test_a_failed_attempt_keeps_its_checkpoint_for_the_next(app):
    starts: list[Any] = []

    @app.job(name="flaky", max_attempts=2)
    def flaky() -> None:
        job = current_job()
        starts.append(job.checkpoint_value)
        job.checkpoint({"after": 500, "rows": [1, 2]})
        if job.attempt == 1:
            raise ValueError("the second attempt resumes")

    flaky.enqueue()
    drain(app)
    assert starts == [None, {"after": 500, "rows": [1, 2]}]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_an_async_job_sees_the_stop_and_is_given_back_from_its_checkpoint(app):
    seen: list[Any] = []
    at_step = threading.Event()

    @app.job(name="awalk", max_attempts=1)
    async def awalk() -> None:
        job = current_job()
        seen.append((job.checkpoint_value, job.resumptions))
        job.checkpoint("half")
        if len(seen) == 1:
            at_step.set()
            for _ in range(int(scaled(4000))):  # 20 s at most
                if job.stopping:
                    break
                await asyncio.sleep(0.005)
            job.checkpoint("stopped")

    awalk.enqueue()
    stop_mid_way(app, at_step)
    drain(app)
    assert seen == [(None, 0), ("stopped", 1)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_interrupted_raised_by_hand_outside_a_stop_gives_the_job_back_too(app):
    runs: list[int] = []

    @app.job(name="polite", max_attempts=1)
    def polite() -> None:
        runs.append(current_job().resumptions)
        if len(runs) == 1:
            raise Interrupted("maintenance window")

    polite.enqueue()
    drain(app)
    assert runs == [0, 1] and app.failed() == []


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the worker's own logic: any backend shows it
def test_a_worker_that_cannot_extend_its_leases_tells_its_jobs_to_stop(app, monkeypatch):
    walk, seen, at_step = walker(app)
    handle = walk.enqueue()
    away = threading.Event()
    extend = app.store.jobs.extend_leases

    def extend_unless_away(*args: Any, **kwargs: Any) -> int:
        if away.is_set():
            raise StoreUnavailable("the database is away (a test)")
        return extend(*args, **kwargs)

    monkeypatch.setattr(app.store.jobs, "extend_leases", extend_unless_away)
    worker = Worker(app, WorkerSettings(queues=("default",), sleep=0.05, lease=1.0))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert at_step.wait(scaled(20)), "the walk never got mid-way"
        away.set()  # from now on no heartbeat extends the leases: half a lease later, stopping

        def given_back() -> bool:
            row = app.store.jobs.get_job(handle.id)
            return len(seen) > 1 or (row is not None and row.resumptions >= 1)

        wait_for(given_back, timeout=20, message="the run to be given back")
        away.clear()
    finally:
        worker.request_stop()
        thread.join(scaled(20))
    row = app.store.jobs.get_job(handle.id)
    assert seen[0] == (1, 0, 0) and app.failed() == []
    if row is not None:  # given back at step 2 (and perhaps again, while the leases were still at risk)
        assert row.resumptions >= 1 and row.attempts == 0 and int(row.checkpoint) >= 2
    assert seen[1:2] in ([], [(1, 2, 1)])  # the next run resumed at step 2
