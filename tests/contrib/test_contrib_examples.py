"""The example apps run as a user would run them: enqueue through the app's endpoint, the
in-process worker runs the job, the result is visible; bad input gets a clear 4xx.

FastAPI through Starlette's TestClient and as a real uvicorn process; Flask through its test
client and behind a real WSGI server, both through the mounted dashboard's WSGI bridge.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from contrib_helpers import EXAMPLES, ROOT, SECRET, USERS, free_port, links, load_example
from helpers import scaled, wait_for

from errands import Errands

THREE = pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def finished(web: Any, job_id: int) -> dict[str, Any] | None:
    state = web.get(f"/jobs/{job_id}").json()
    return state if state["state"] == "succeeded" else None


@THREE
def test_enqueue_endpoint_then_the_in_process_worker_runs_the_job(web_factory: Any) -> None:
    web = web_factory()
    assert web.login("ada").status == 303
    r = web.post("/jobs", json={"job": "count_words", "args": ["errands keeps jobs in your database"]})
    assert r.status == 202, r.text
    job_id = r.json()["id"]
    assert r.json()["job"] == "count_words"
    state = wait_for(lambda: finished(web, job_id), message="the in-process worker to run the job")
    assert state == {"id": job_id, "state": "succeeded", "result": 6}
    # The worker that ran it is the one inside this process, and the only one.
    workers = web.get("/errands/api/workers").json()["workers"]
    assert [w["pid"] for w in workers] == [os.getpid()]
    # The dashboard reaches the same database through the mount: an admin pauses a queue.
    r = web.post("/errands/api/queues/default/pause", headers={"X-CSRF-Token": web.csrf()})
    assert r.status == 200
    assert web_factory.errands.paused_queues() == ["default"]
    r = web.post("/jobs", json={"job": "count_words", "kwargs": {"text": "waits while paused"}})
    assert r.status == 202
    paused_id = r.json()["id"]
    assert web.get(f"/jobs/{paused_id}").json()["state"] == "ready"
    web.post("/errands/api/queues/default/resume", headers={"X-CSRF-Token": web.csrf()})
    assert wait_for(lambda: finished(web, paused_id), message="the job to run once resumed")["result"] == 3


@SQLITE
def test_bad_input_gets_a_clear_4xx_and_stores_nothing(web_factory: Any, framework: str) -> None:
    web = web_factory()
    assert web.post("/jobs", json={"job": "count_words", "args": ["x"]}).status == 401  # not signed in
    assert web.get("/jobs/1").status == 401
    web.login("vic")
    r = web.post("/jobs", json={"job": "nope", "args": []})
    assert r.status == 400
    assert r.json()["error"] == "no job named 'nope' is registered in this app (known: count_words)"
    r = web.post("/jobs", json={"job": "count_words", "args": ["a", "b"]})
    assert r.status == 400 and "arguments do not match job 'count_words'" in r.json()["error"]
    r = web.post("/jobs", json={"job": "count_words", "kwargs": {"text": "x" * 70_000}})
    assert r.status == 400 and r.json()["type"] == "PayloadTooLarge"
    invalid = 422 if framework == "fastapi" else 400
    r = web.post("/jobs", data=b"count_words('x')", headers={"Content-Type": "application/json"})
    assert r.status == invalid
    assert "JSON" in r.text or "json" in r.text
    for body in ([1, 2], {"args": []}, {"job": "count_words", "args": "x"}, {"job": "count_words", "kwargs": [1]}):
        r = web.post("/jobs", json=body)
        assert r.status == invalid, (body, r.status, r.text)
    assert not any(c.ready for c in web_factory.errands.counts().values())


def _client_login(client: httpx2.Client) -> None:
    r = client.post("/login", data={"username": "ada", "password": USERS["ada"][1], "next": "/errands/"})
    assert r.status_code == 303 and r.headers["location"] == "/errands/"


def _example_round_trip(client: httpx2.Client, pid: int) -> None:
    _client_login(client)
    page = client.get("/errands/")
    assert page.status_code == 200
    assert [link for link in links(page.text) if not link.startswith(("/errands/", "#", "?"))] == []
    r = client.post("/jobs", json={"job": "count_words", "args": ["one two three four"]})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]

    def done() -> Any:
        state = client.get(f"/jobs/{job_id}").json()
        return state if state["state"] == "succeeded" else None

    assert wait_for(done, message="the job to run in the server's process")["result"] == 4
    assert [w["pid"] for w in client.get("/errands/api/workers").json()["workers"]] == [pid]


@THREE
def test_fastapi_example_under_uvicorn(db_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, ERRANDS_DATABASE_URL=db_url, EXAMPLE_ADMIN_PASSWORD=USERS["ada"][1],
               EXAMPLE_VIEWER_PASSWORD=USERS["vic"][1], EXAMPLE_SECRET_KEY=SECRET, EXAMPLE_INSECURE_COOKIES="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "uvicorn.log"
    with open(log, "w") as out:
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "app:create_app", "--factory", "--host",
                                   "127.0.0.1", "--port", str(port)], cwd=EXAMPLES / "fastapi_app", env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=scaled(10)) as client:
            def up() -> bool:
                assert server.poll() is None, log.read_text()
                try:
                    return client.get("/errands/healthz").status_code == 200
                except httpx2.TransportError:
                    return False

            wait_for(up, timeout=60, message="uvicorn to serve the example")
            _example_round_trip(client, server.pid)
        # SIGTERM: uvicorn runs the lifespan's shutdown, which stops the worker; then it exits by the
        # same signal (uvicorn re-raises it once it has shut down cleanly).
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=scaled(60)) in (0, -signal.SIGTERM), log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    text = log.read_text()
    assert "Application shutdown complete" in text, text
    check = Errands(db_url)
    try:
        assert check.store.workers.list_workers() == []  # unregistered on the way out
    finally:
        check.store.close()


@SQLITE
def test_flask_example_behind_a_real_wsgi_server(db_url: str) -> None:
    from werkzeug.serving import make_server

    app = load_example("flask_app").create_app(db_url, users=USERS, secret_key=SECRET, secure_cookies=False)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    ext = app.extensions["errands"]
    try:
        with httpx2.Client(base_url=f"http://127.0.0.1:{server.server_port}", timeout=scaled(10)) as client:
            _example_round_trip(client, os.getpid())
            # Many requests at once through the WSGI -> ASGI bridge, each with its own principal.
            with httpx2.Client(base_url=client.base_url, timeout=scaled(10)) as stranger, ThreadPoolExecutor(8) as pool:
                pages = ["/errands/", "/errands/jobs", "/errands/api/overview", "/errands/queues"] * 6

                def fetch(i: int) -> tuple[int, int]:
                    return client.get(pages[i]).status_code, stranger.get(pages[i]).status_code

                assert sorted(set(pool.map(fetch, range(len(pages))))) == [(200, 303), (200, 401)]
    finally:
        server.shutdown()
        thread.join(scaled(10))
        server.server_close()
        try:
            assert ext["worker"].stop()
        finally:
            ext["dashboard"].close()
            ext["errands"].store.close()
