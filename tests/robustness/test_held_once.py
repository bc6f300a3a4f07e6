"""A worker never holds, nor runs, one job twice at once, on every backend.

Seen after a PostgreSQL crash: the server lost a claim the worker had already received, so
the job was ready again while its id sat in the worker's buffer, and the same worker claimed
it a second time and ran both copies 55 ms apart.  Here the lost claim is made by hand (the
row's reservation cleared while its run is in progress), which is what the crash left behind.
"""

from __future__ import annotations

import threading
from typing import Any

from helpers import scaled, wait_for

from errands import Errands
from errands.worker.runner import Worker, WorkerSettings


def test_a_job_claimed_again_while_held_is_not_run_twice(app: Errands) -> None:
    release = threading.Event()
    started: list[int] = []
    running = [0]
    most = [0]
    lock = threading.Lock()

    @app.job(name="slow")
    def slow() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            started.append(1)
        release.wait(scaled(30))
        with lock:
            running[0] -= 1

    handle = slow.enqueue()
    worker = Worker(app, WorkerSettings(queues=("default",), concurrency=2, sleep=0.05, listen=False, prefetch=0))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: started, message="the job to start")
        # The crash: the database forgets the claim while the run goes on.
        app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
            "UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL WHERE id = {p}"),
            (handle.id,)))
        # The same worker claims it again (its idle runner asks for work): attempts counts the claim.
        wait_for(lambda: _attempts(app, handle.id) == 2, message="the second claim of the job")
        assert worker.held_ids == [handle.id]
        release.set()
        wait_for(lambda: app.store.jobs.get_job(handle.id) is None, message="the run to be recorded")
    finally:
        release.set()
        worker.request_stop()
        thread.join(scaled(30))
    assert len(started) == 1 and most[0] == 1
    assert app.store.jobs.list_failed() == []


def _attempts(app: Errands, job_id: int) -> Any:
    row = app.store.jobs.get_job(job_id)
    return None if row is None else row.attempts
