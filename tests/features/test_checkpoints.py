"""Resumable long jobs (issue 27, point 3): ``current_job().checkpoint(value)`` stores where a run is,
``checkpoint_value`` gives it to the next attempt, and a stop during a checkpointed run gives the job
back without spending an attempt (``Interrupted``), up to ``max_resumptions``; on every backend.
The SIGKILL path, with real worker processes, is the docs example's test (test_checkpoint_example.py)."""

from __future__ import annotations

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


def walker(app: Errands, max_resumptions: int = 100) -> tuple[Any, list[tuple[int, int, int]], threading.Event]:
    """A job that walks 0..9 with a checkpoint per step and, on its first run, waits at step 3 until its
    worker is stopping; ``seen`` gets (attempt, where it started, resumptions) of each run."""
    seen: list[tuple[int, int, int]] = []
    at_three = threading.Event()

    @app.job(name="walk", max_attempts=1, max_resumptions=max_resumptions)
    def walk() -> None:
        job = current_job()
        start = job.checkpoint_value or 0
        seen.append((job.attempt, start, job.resumptions))
        for step in range(start, 10):
            if step == 3 and len(seen) == 1:
                at_three.set()
                wait_for(lambda: job.stopping, timeout=20, interval=0.005, message="the worker to stop")
            job.checkpoint(step + 1)

    return walk, seen, at_three


def stop_at_three(app: Errands, at_three: threading.Event) -> None:
    """Run a worker until the walk reaches step 3, then stop it as SIGTERM does (gracefully)."""
    worker = Worker(app, WorkerSettings(queues=("default",), sleep=0.05, shutdown_timeout=scaled(20)))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert at_three.wait(scaled(20)), "the walk never reached step 3"
    worker.request_stop()
    thread.join(scaled(20))
    assert not thread.is_alive()


def test_a_stop_during_a_checkpointed_job_gives_it_back_without_spending_an_attempt(app):
    walk, seen, at_three = walker(app)
    handle = walk.enqueue()
    stop_at_three(app, at_three)
    # Given back: attempt refunded (its only one), one resumption, the checkpoint where it stopped.
    assert stored(app, handle.id) == {"attempts": 0, "resumptions": 1, "checkpoint": "4", "owner": None}
    drain(app)
    assert seen == [(1, 0, 0), (1, 4, 1)]  # the next attempt resumed at step 4, still attempt 1 of 1
    assert app.failed() == [] and app.store.jobs.get_job(handle.id) is None


def test_past_max_resumptions_a_stop_spends_an_attempt(app):
    walk, seen, at_three = walker(app, max_resumptions=0)
    handle = walk.enqueue()
    stop_at_three(app, at_three)
    [entry] = app.failed()  # its only attempt was spent: the dead letter, keeping the checkpoint
    assert entry.id == handle.id and entry.error_type == "errands.Interrupted" and entry.checkpoint == "4"
    assert app.retry_failed(handle.id) == [handle.id]  # a retry from the dead letter resumes from it
    assert stored(app, handle.id)["checkpoint"] == "4"
    drain(app)
    assert seen == [(1, 0, 0), (1, 4, 0)]


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


def test_a_checkpoint_is_size_limited_and_written_only_by_the_runs_worker(app):
    outcome: list[Any] = []

    @app.job(name="big", max_attempts=1)
    def big() -> None:
        job = current_job()
        job.checkpoint("x" * 100)
        try:
            job.checkpoint("x" * CHECKPOINT_LIMIT)  # its JSON has two quotes more than the limit
        except CheckpointTooLarge as exc:
            outcome.append(str(exc))

    handle = big.enqueue()
    drain(app)
    assert "over the limit of 65536" in outcome[0]
    assert app.store.jobs.get_job(handle.id) is None  # the run went on after the refusal and succeeded

    other = big.enqueue()
    [claimed] = app.store.jobs.claim("w1", ["default"], 1, 30)
    features = app.store.features
    assert features.set_checkpoint("w1", other.id, '"a"') and features.set_checkpoint("w1", other.id, '"a"')
    assert not features.set_checkpoint("w2", other.id, '"b"')  # not w2's run: nothing written
    assert stored(app, other.id)["checkpoint"] == '"a"' and claimed.checkpoint is None


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
    walk, seen, at_three = walker(app)
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
        assert at_three.wait(scaled(20)), "the walk never reached step 3"
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
    if row is not None:  # given back at step 4 (and perhaps again, while the leases were still at risk)
        assert row.resumptions >= 1 and row.attempts == 0 and int(row.checkpoint) >= 4
    assert seen[1:2] in ([], [(1, 4, 1)])  # the next run resumed at step 4
