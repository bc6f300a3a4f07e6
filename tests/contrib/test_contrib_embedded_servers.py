"""The in-process worker inside real development and production servers, as users run them:
uvicorn with an ``errands_lifespan`` app, and ``flask run`` with and without its reloader.

Each server is a subprocess on a free port; the tests wait for what they need to see (a worker's
row, a log line, an answer on the port), never for a fixed time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from contrib_helpers import ROOT, free_port
from helpers import scaled, wait_for

from errands import Errands
from errands.contrib.inprocess import InProcessWorker
from errands.services.report import status_report

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

SERVED_APP = textwrap.dedent("""
    import os

    from starlette.applications import Starlette

    from errands import Errands
    from errands.contrib.asgi import errands_lifespan

    errands = Errands(os.environ["ERRANDS_DATABASE_URL"])


    @errands.job(name="double", keep_result=True)
    def double(n: int) -> int:
        return n * 2


    @errands.job(name="explode", max_attempts=1)
    def explode() -> None:
        raise ValueError("boom in the served app")


    api = Starlette(lifespan=errands_lifespan(errands))
""")

FLASK_APP = textwrap.dedent("""
    import os

    from flask import Flask

    from errands import Errands
    from errands.contrib.flask import start_worker

    errands = Errands(os.environ["ERRANDS_DATABASE_URL"])


    @errands.job(name="double", keep_result=True)
    def double(n: int) -> int:
        return n * 2


    def create_app():
        app = Flask(__name__)
        app.extensions["errands_worker"] = start_worker(errands)

        @app.get("/ping")
        def ping():
            return {"pid": os.getpid()}

        return app
""")


def server_env(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ERRANDS_", "FLASK_", "WERKZEUG_"))}
    env.update(ERRANDS_DATABASE_URL=db_url, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    return env


def workers(app: Errands) -> list[dict[str, object]]:
    return list(status_report(app)["workers"])


@pytest.fixture
def jobs_app(db_url: str) -> Iterator[Errands]:
    """The test's own view of the served apps' database, with the same job names."""
    app = Errands(db_url)

    @app.job(name="double", keep_result=True)
    def double(n: int) -> int:
        return n * 2

    @app.job(name="explode", max_attempts=1)
    def explode() -> None: ...

    app.migrate()
    yield app
    app.store.close()


def stop(server: subprocess.Popen[bytes], how: signal.Signals, *, group: bool = False) -> int:
    if group:
        os.killpg(server.pid, how)
    else:
        server.send_signal(how)
    return server.wait(timeout=scaled(60))


@SQLITE
def test_uvicorn_lifespan_worker_logs_its_start_each_job_and_its_stop(jobs_app: Errands, db_url: str,
                                                                       tmp_path: Path) -> None:
    (tmp_path / "served.py").write_text(SERVED_APP)
    log = tmp_path / "uvicorn.log"
    port = free_port()
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "served:api", "--host", "127.0.0.1", "--port",
                                   str(port)], cwd=tmp_path, env=server_env(db_url), stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        def registered() -> bool:
            assert server.poll() is None, log.read_text()
            return bool(workers(jobs_app))

        wait_for(registered, timeout=60, message="the lifespan's worker to register")
        wait_for(lambda: "in-process errands worker" in log.read_text(), message="the worker's start line")
        handle = jobs_app.get_job("double").enqueue(21)
        assert handle.result(timeout=scaled(30)) == 42
        failing = jobs_app.get_job("explode").enqueue()
        wait_for(lambda: f"job {failing.id} explode" in log.read_text() and "moved to the dead letter"
                 in log.read_text(), message="the failure's lines")
        wait_for(lambda: f"job {handle.id} double done in" in log.read_text(), message="the job's INFO line")
        assert stop(server, signal.SIGTERM) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    assert "started: queues" in text and "stopped after 2 job(s)" in text, text
    assert text.count("Traceback (most recent call last)") == 1, text  # the failure's, once
    assert workers(jobs_app) == []


@SQLITE
def test_jobs_done_reaches_status_long_before_the_next_heartbeat(jobs_app: Errands) -> None:
    # A lease of 300 s: the next full heartbeat would be 100 s away.
    worker = InProcessWorker(jobs_app, lease=300, sleep=0.05).start()
    try:
        handle = jobs_app.get_job("double").enqueue(1)
        assert handle.result(timeout=scaled(30)) == 2
        wait_for(lambda: [w["jobs_done"] for w in workers(jobs_app)] == [1], timeout=10,
                 message="errands status to count the finished job")
    finally:
        assert worker.stop()


def flask_run(db_url: str, folder: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path, int]:
    (folder / "served_flask.py").write_text(FLASK_APP)
    port = free_port()
    log = folder / "flask.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "flask", "--app", "served_flask:create_app", "run",
                                   "--port", str(port), *args], cwd=folder, env=server_env(db_url),
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=_as_from_a_terminal)
    return server, log, port


def _as_from_a_terminal() -> None:
    """Ctrl-C's signal as a terminal's process gets it: a suite started in the background (``cmd &``
    in a script, nohup, some CI runners) ignores SIGINT, and a child inherits that, so flask run would
    never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def serving_pid(server: subprocess.Popen[bytes], log: Path, port: int) -> int:
    """Wait until the server answers; the pid of the process that answered."""
    def answered() -> int | None:
        assert server.poll() is None, log.read_text()
        try:
            return int(httpx2.get(f"http://127.0.0.1:{port}/ping", timeout=scaled(5)).json()["pid"])
        except httpx2.TransportError:
            return None

    return int(wait_for(answered, timeout=60, message="flask run to answer"))


@SQLITE
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("reload", ["--reload", "--no-reload"])
def test_flask_run_has_one_worker_in_the_serving_process_and_none_after_a_stop(jobs_app: Errands, db_url: str,
                                                                                 tmp_path: Path, reload: str,
                                                                                 how: str) -> None:
    server, log, port = flask_run(db_url, tmp_path, "--debug" if reload == "--reload" else "--no-debug", reload)
    try:
        pid = serving_pid(server, log, port)
        wait_for(lambda: workers(jobs_app), message="the worker to register")
        # The reloader's parent built the app before it started the serving child: had it started
        # a worker, its row would be here by now.
        assert [w["pid"] for w in workers(jobs_app)] == [pid], log.read_text()
        assert (pid != server.pid) == (reload == "--reload")
        assert jobs_app.get_job("double").enqueue(4).result(timeout=scaled(30)) == 8
        # SIGTERM as `kill PID` or a service manager sends it; SIGINT as Ctrl-C sends it, to the group.
        stop(server, signal.Signals[how], group=how == "SIGINT")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert workers(jobs_app) == [], log.read_text()  # unregistered by the time flask run has exited
