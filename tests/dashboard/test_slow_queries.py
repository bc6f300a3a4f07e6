"""A slow query behind one request must not stall the dashboard for everyone else.

Database calls run in worker threads, not on the event loop: while one request waits for a
table lock held by another session, /healthz and other pages still answer.
"""

from __future__ import annotations

import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest
import uvicorn
from helpers import scaled, wait_for

from errands import Errands
from errands.dashboard import create_dashboard


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(app: Errands) -> Iterator[str]:
    port = _port()
    server = uvicorn.Server(uvicorn.Config(create_dashboard(app, open_access=True), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), message="uvicorn to start")
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=scaled(30))


def _get(url: str, timeout: float = 30.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=scaled(timeout)) as response:
        return response.status, response.read()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_request_waiting_on_a_lock_does_not_block_other_requests(served, app, db_url):
    import psycopg

    locker = psycopg.connect(db_url.split("?")[0], options=_search_path(db_url))
    try:
        locker.execute("LOCK TABLE errands_jobs IN ACCESS EXCLUSIVE MODE")  # held until rollback
        slow: dict[str, object] = {}
        waiting = threading.Thread(target=lambda: slow.update(result=_get(served + "/api/jobs")))
        waiting.start()
        # The listing's query queues behind the lock (a lock of this test's table not granted yet).
        wait_for(lambda: waiting_on_the_lock(locker) or not waiting.is_alive(), message="the listing to wait")
        assert waiting.is_alive(), "the jobs listing should be waiting for the lock"
        status, body = _get(served + "/healthz", timeout=10)  # answered while the other request waits
        assert status == 200 and b'"ok"' in body
        status, _ = _get(served + "/api/me", timeout=10)
        assert status == 200
        assert waiting.is_alive()
    finally:
        locker.rollback()
        locker.close()
    waiting.join(timeout=scaled(30))
    assert slow["result"][0] == 200  # type: ignore[index]


def waiting_on_the_lock(locker) -> bool:  # type: ignore[no-untyped-def]
    return bool(locker.execute("SELECT count(*) FROM pg_locks WHERE NOT granted "
                               "AND relation = 'errands_jobs'::regclass").fetchone()[0])


def _search_path(url: str) -> str:
    from urllib.parse import parse_qs, urlsplit

    return parse_qs(urlsplit(url).query).get("options", [""])[0]
