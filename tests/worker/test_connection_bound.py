"""Issue 13: a worker holds a bounded number of connections whatever its concurrency.

A worker with ``-c 64`` whose jobs all enqueue a follow-up (``tests/apps/fanout_jobs.py``) is
counted by the server while all 64 jobs run: at most ``pool_size + 3`` connections per worker
process (claim and settle, heartbeat, listener, and the shared pool), where it used to hold one
per runner thread.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import child_pids, start_worker, wait_for

from errands import Errands
from errands.store.pool import POOL_SIZE, connection_label

CONCURRENCY = 64
PER_PROCESS = POOL_SIZE + 3


def _pg_connections(url: str, pids: list[int]) -> int:
    import psycopg

    labels = [connection_label(pid, socket.gethostname()) for pid in pids]
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s)",
                           (labels,)).fetchone()
    return int(row[0])


def _mariadb_connections(url: str) -> int:
    import pymysql

    parts = urlsplit(url)
    with pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=parts.username or "root",
                         password=parts.password or "") as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM information_schema.processlist WHERE db = %s", (parts.path.strip("/"),))
        return int(cur.fetchone()[0])


def _stand_in() -> None:
    """The test enqueues ``fan_out`` by name; the worker runs tests/apps/fanout_jobs.py's."""


@pytest.mark.parametrize("backend", ["postgres", "mariadb"])
def test_a_worker_with_64_threads_that_enqueue_holds_a_few_connections(db_url: str, tmp_path: Path) -> None:
    env = {"ERRANDS_APP": "fanout_jobs:app", "ERRANDS_TEST_NOTES": str(tmp_path)}
    app = Errands(db_url)
    app.migrate()
    fan_out = app.job(name="fan_out", queue="default")(_stand_in)
    for _ in range(CONCURRENCY):
        fan_out.enqueue()
    app.store.close()
    worker = start_worker(db_url, "-c", str(CONCURRENCY), log_path=tmp_path / "worker.log", **env)
    try:
        wait_for(lambda: len(list(tmp_path.glob("running-*"))) >= CONCURRENCY, timeout=60,
                 message="every job running (each has enqueued its follow-up)")
        pids = [worker.pid, *child_pids(worker.pid)]
        held = _pg_connections(db_url, pids) if db_url.startswith("postgresql") else _mariadb_connections(db_url)
        assert 0 < held <= PER_PROCESS, f"{held} connections for one worker process with -c {CONCURRENCY}"
    finally:
        (tmp_path / "release").touch()
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
