"""The in-process worker under an ASGI lifespan: no job is lost at shutdown, and shutdown never hangs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from contrib_helpers import ROOT
from helpers import drain, scaled, wait_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from errands import ConfigurationError, Errands, InvalidQueueName, JobState, SchemaError
from errands.contrib.asgi import errands_lifespan
from errands.contrib.inprocess import InProcessWorker, start_worker

THREE = pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)


def blocking_job(app: Errands) -> tuple[Any, threading.Event, threading.Event]:
    started, release = threading.Event(), threading.Event()

    @app.job(name="slow", keep_result=True)
    def slow(n: int) -> int:
        started.set()
        assert release.wait(scaled(60)), "the test never released the job"
        return n * 2

    return slow, started, release


def stopping(lifespan: Any) -> bool:
    """The worker has been told to stop (the lifespan's shutdown is under way)."""
    running = lifespan.worker
    return running is None or running.worker.stopping


@THREE
def test_a_job_running_at_shutdown_finishes_and_is_recorded(app: Errands) -> None:
    slow, started, release = blocking_job(app)
    lifespan = errands_lifespan(app, shutdown_timeout=scaled(60), sleep=0.05)
    client = TestClient(Starlette(lifespan=lifespan))
    client.__enter__()
    handle = slow.enqueue(21)
    wait_for(started.is_set, message="the job to start")
    stopper = threading.Thread(target=client.__exit__, args=(None, None, None))
    stopper.start()
    wait_for(lambda: stopping(lifespan), message="the shutdown to begin")
    assert stopper.is_alive()  # the shutdown waits for the running job...
    release.set()
    stopper.join(scaled(60))
    assert not stopper.is_alive()  # ...which finishes, and is recorded before the server goes
    assert handle.status() is JobState.SUCCEEDED and handle.result(timeout=0) == 42
    assert app.store.workers.list_workers() == []


@THREE
def test_a_job_outlasting_the_shutdown_timeout_goes_back_to_the_queue(app: Errands) -> None:
    slow, started, release = blocking_job(app)
    lifespan = errands_lifespan(app, shutdown_timeout=0.2, sleep=0.05)
    with TestClient(Starlette(lifespan=lifespan)):
        handle = slow.enqueue(21)
        wait_for(started.is_set, message="the job to start")
    # The server's shutdown returned although the handler is still blocked: it did not hang.
    assert not release.is_set()
    row = app.store.jobs.get_job(handle.id)
    assert row is not None and row.reserved_by is None and row.attempts == 0  # given back, attempt refunded
    assert handle.status() is JobState.READY
    assert app.store.workers.list_workers() == []
    release.set()  # the abandoned run ends; its outcome is no longer the old worker's to record
    assert drain(app) == 1
    assert handle.result(timeout=0) == 42
    assert app.store.jobs.get_job(handle.id) is None and app.store.jobs.get_failed(handle.id) is None


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_worker_lives_inside_the_apps_own_lifespan(app: Errands) -> None:
    events: list[str] = []

    @app.job(name="greet", keep_result=True)
    def greet(name: str) -> str:
        return f"hello {name}"

    @asynccontextmanager
    async def own(api: Starlette) -> AsyncIterator[dict[str, Any]]:
        events.append(f"own up, worker {lifespan.worker}")
        yield {"greeting": "hi"}
        events.append(f"own down, worker {lifespan.worker}")

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"{request.state.greeting} {lifespan.worker is not None and lifespan.worker.running}")

    lifespan = errands_lifespan(app, concurrency=2, sleep=0.05, lifespan=own)
    with TestClient(Starlette(routes=[Route("/", home)], lifespan=lifespan)) as client:
        assert client.get("/").text == "hi True"  # the state of the app's lifespan passes through
        assert greet.enqueue("ada").result(timeout=scaled(30)) == "hello ada"
        events.append("served")
    # Yours starts first and stops last: the jobs may use what it set up.
    assert events == ["own up, worker None", "served", "own down, worker None"]
    assert lifespan.worker is None


@pytest.mark.parametrize("backend", ["postgres", "mariadb"], indirect=True)
def test_start_up_fails_loudly_without_the_tables(db_url: str) -> None:
    bare = Errands(db_url)
    try:
        with pytest.raises(SchemaError), TestClient(Starlette(lifespan=errands_lifespan(bare))):
            pass
    finally:
        bare.store.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_in_process_worker_options_and_restart(app: Errands) -> None:
    with pytest.raises(ConfigurationError):
        errands_lifespan(app, concurrency=0)
    with pytest.raises(ConfigurationError):
        InProcessWorker(app, shutdown_timeout=-1)
    with pytest.raises(InvalidQueueName):
        InProcessWorker(app, ["not a queue name!"])
    assert InProcessWorker(app, "mails").queues == ("mails",)

    @app.job(name="twice", keep_result=True)
    def twice(n: int) -> int:
        return 2 * n

    worker = start_worker(app, concurrency=1, sleep=0.05, stop_at_exit=False)
    try:
        with pytest.raises(ConfigurationError):
            worker.start()
        assert twice.enqueue(2).result(timeout=scaled(30)) == 4
    finally:
        assert worker.stop()
    assert not worker.running and worker.error is None
    worker.start()  # a stopped worker can start again
    try:
        assert twice.enqueue(3).result(timeout=scaled(30)) == 6
    finally:
        assert worker.stop()
    assert worker.stop()  # stopping twice is harmless


EXITING_APP = """
import os, sys, time
from errands import Errands, JobState
from errands.contrib.flask import start_worker

errands = Errands(sys.argv[1])

@errands.job(name="slow")
def slow() -> None:
    time.sleep(120)

start_worker(errands, shutdown_timeout=0.2, sleep=0.05)   # stop_at_exit: atexit stops it
handle = slow.enqueue()
deadline = time.monotonic() + 60 * float(os.environ.get("ERRANDS_TEST_TIME_SCALE") or 1)  # as helpers.scaled
while handle.status() is not JobState.RUNNING:
    assert time.monotonic() < deadline, "the job never started"
    time.sleep(0.02)
print(handle.id, flush=True)
sys.exit(0)   # a normal exit, as gunicorn's graceful stop or Ctrl-C make it
"""


@THREE
def test_start_worker_gives_running_jobs_back_when_the_process_exits(app: Errands, db_url: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", EXITING_APP, db_url], env=env, capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.split()[0])
    row = app.store.jobs.get_job(job_id)
    assert row is not None and row.reserved_by is None and row.attempts == 0  # back in the queue, not lost
    assert app.store.workers.list_workers() == []
