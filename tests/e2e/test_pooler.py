"""errands through PgBouncer (issue 13): transaction pooling and session pooling.

A private PgBouncer (``pgbouncer.py``) with a small server pool sits in front of the shared
PostgreSQL; each test makes its own database on the shared server and drops it afterwards.
Several worker supervisors started through the CLI drain jobs whose handlers each enqueue a
follow-up: every job must run exactly once, none may stay reserved, and no worker may exit 78
(the "prepared statement already exists" failure of the issue).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from helpers import APPS, SRC, scaled, wait_for
from pgbouncer import PrivatePgBouncer, require_pgbouncer

pytestmark = pytest.mark.timeout(scaled(300))

ROOTS = 1000
"""Root jobs; each enqueues one follow-up, so 2,000 jobs run in all."""
SUPERVISORS = 4
CONCURRENCY = 4
POOL_SIZE = 6
"""Server connections PgBouncer opens per database in transaction mode, for 4 x 4 runners and more."""
SESSION_POOL_SIZE = 60


def _admin(database: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{database}", autocommit=True, connect_timeout=5)


@pytest.fixture
def database() -> Iterator[str]:
    """A database of its own on the shared server (public schema: PgBouncer 1.18 cannot pass
    ``options=-csearch_path`` on, which the other PostgreSQL tests use)."""
    name = f"errands_pooler_{secrets.token_hex(4)}"
    try:
        with _admin() as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except Exception as exc:  # the shared server is down: as conftest does for every PostgreSQL test
        pytest.skip(f"PostgreSQL on 127.0.0.1:5432 is unreachable: {exc}")
    try:
        yield name
    finally:
        with _admin() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _bouncer(mode: str, pool_size: int) -> Iterator[PrivatePgBouncer]:
    bouncer = PrivatePgBouncer(require_pgbouncer(), pool_mode=mode, default_pool_size=pool_size)
    try:
        bouncer.start()
        yield bouncer
    finally:
        bouncer.destroy()


@pytest.fixture
def transaction_bouncer() -> Iterator[PrivatePgBouncer]:
    yield from _bouncer("transaction", POOL_SIZE)


@pytest.fixture
def session_bouncer() -> Iterator[PrivatePgBouncer]:
    # Session pooling pins a server connection to each client connection for its life: the pool must
    # hold every connection the workers open (a client beyond it waits for one to be given back).
    yield from _bouncer("session", SESSION_POOL_SIZE)


def _env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRANDS_")}
    env.update({"ERRANDS_DATABASE_URL": url, "ERRANDS_APP": "pooler_jobs:app", "ERRANDS_CONFIG": "none",
                "PYTHONPATH": os.pathsep.join([str(APPS), str(SRC), env.get("PYTHONPATH", "")])})
    env.update(extra)
    return env


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "errands", *args], env=_env(url), capture_output=True, text=True,
                          timeout=scaled(120))


Admin = Callable[[str], Any]
"""Opens a direct superuser connection (autocommit) to a database of the server behind the pooler."""


def _counts(database: str, admin: Admin = _admin) -> tuple[int, int, int, int]:
    """(runs recorded, distinct jobs run, jobs left in the table, of those reserved), read directly."""
    with admin(database) as conn:
        runs, distinct = conn.execute("SELECT count(*), count(DISTINCT job_id) FROM pooler_runs").fetchone()
        left, reserved = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE reserved_by IS NOT NULL) FROM errands_jobs").fetchone()
    return int(runs), int(distinct), int(left), int(reserved)


def _registered(database: str, admin: Admin = _admin) -> int:
    with admin(database) as conn:
        return int(conn.execute("SELECT count(*) FROM errands_workers").fetchone()[0])


def drain_through(bouncer: PrivatePgBouncer, database: str, tmp_path: Path, *, roots: int = ROOTS,
                  supervisors: int = SUPERVISORS, concurrency: int = CONCURRENCY, timeout: float = 180,
                  admin: Admin = _admin, **options: str) -> dict[str, Any]:
    """Migrate and enqueue through the pooler, run the supervisors until every job ran, stop them
    (bench/pooler.py runs it at the issue's size).  ``admin`` reaches the server behind the pooler
    directly: the shared one by default, a private one's ``connect`` otherwise."""
    url = bouncer.url(database, **options)
    done = _cli(url, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    with admin(database) as conn:
        conn.execute("CREATE TABLE pooler_runs (job_id BIGINT NOT NULL, pid INTEGER NOT NULL)")
    enqueue = ("import pooler_jobs as p; from errands import Errands\n"
               f"p.app.enqueue_many([p.step.prepare(True) for _ in range({roots})])")
    done = subprocess.run([sys.executable, "-c", enqueue], env=_env(url), capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, done.stdout + done.stderr
    began = time.monotonic()
    logs = [tmp_path / f"worker-{i}.log" for i in range(supervisors)]
    workers = []
    for log in logs:
        with open(log, "w") as out:
            workers.append(subprocess.Popen([sys.executable, "-m", "errands", "worker", "-c", str(concurrency),
                                             "--sleep", "0.2"], env=_env(url), stdout=out,
                                            stderr=subprocess.STDOUT, text=True))
    try:
        wait_for(lambda: _registered(database, admin) == supervisors or any(w.poll() is not None for w in workers),
                 timeout=max(60.0, 3.0 * supervisors), message="every worker registered")
        wait_for(lambda: _counts(database, admin)[0] >= 2 * roots and _counts(database, admin)[2] == 0
                 or any(w.poll() is not None for w in workers), timeout=timeout, interval=0.2,
                 message=f"{2 * roots} runs through PgBouncer")
        seconds = time.monotonic() - began
        early = [(i, w.returncode) for i, w in enumerate(workers) if w.poll() is not None]
        assert not early, f"workers exited early: {early}\n" + "\n".join(log.read_text()[-2000:] for log in logs)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        codes = [w.wait(scaled(60)) for w in workers]
    runs, distinct, left, reserved = _counts(database, admin)
    servers = sum(int(p["sv_active"]) + int(p["sv_idle"]) + int(p["sv_used"]) for p in bouncer.show("POOLS")
                  if p["database"] == database)
    output = "\n".join(log.read_text() for log in logs)
    return {"runs": runs, "distinct": distinct, "left": left, "reserved": reserved, "codes": codes,
            "seconds": seconds, "output": output, "servers": servers, "jobs": 2 * roots}


def _check_drained(result: dict[str, Any]) -> None:
    assert 78 not in result["codes"], result["output"][-4000:]
    assert "prepared statement" not in result["output"], result["output"][-4000:]
    assert set(result["codes"]) == {0}, (result["codes"], result["output"][-4000:])
    assert result["distinct"] == result["jobs"], result
    assert result["runs"] == result["jobs"], f"{result['runs'] - result['distinct']} job(s) ran twice"
    assert (result["left"], result["reserved"]) == (0, 0)
    print(f"\n{result['jobs']} jobs in {result['seconds']:.1f}s, duplicates {result['runs'] - result['distinct']}, "
          f"{result['servers']} server connections")


def test_transaction_pooling_runs_every_job_once(transaction_bouncer: PrivatePgBouncer, database: str,
                                                 tmp_path: Path) -> None:
    result = drain_through(transaction_bouncer, database, tmp_path, pooler="transaction")
    _check_drained(result)
    assert "LISTEN" not in result["output"]


def test_transaction_pooling_with_a_direct_listen_url(transaction_bouncer: PrivatePgBouncer, database: str,
                                                      tmp_path: Path) -> None:
    direct = quote(f"postgresql://postgres@127.0.0.1:5432/{database}", safe="")
    _check_drained(drain_through(transaction_bouncer, database, tmp_path, pooler="transaction", listen_url=direct))


def test_session_pooling_runs_every_job_once(session_bouncer: PrivatePgBouncer, database: str,
                                             tmp_path: Path) -> None:
    _check_drained(drain_through(session_bouncer, database, tmp_path, pooler="session"))


def _doctor(url: str) -> dict[str, dict[str, Any]]:
    import json

    done = _cli(url, "doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_doctor_tells_the_pooler_mode_and_how_workers_wake(transaction_bouncer: PrivatePgBouncer,
                                                           database: str) -> None:
    url = transaction_bouncer.url(database, pooler="transaction")
    assert _cli(url, "migrate").returncode == 0
    untold = _doctor(transaction_bouncer.url(database))
    assert untold["postgres_pooler"]["status"] == "fail"
    assert "?pooler=transaction" in untold["postgres_pooler"]["fix"]
    told = _doctor(url)
    assert told["postgres_pooler"]["status"] == "ok", told["postgres_pooler"]
    assert told["postgres_pooler"]["data"]["transaction_pooling_seen"] is True
    assert told["postgres_wakeup"]["data"] == {"listen": False, "poll_interval": 1.0}
    assert "pickup latency of up to --sleep" in told["postgres_wakeup"]["detail"]
    direct = quote(f"postgresql://postgres@127.0.0.1:5432/{database}", safe="")
    listening = _doctor(transaction_bouncer.url(database, pooler="transaction", listen_url=direct))
    assert listening["postgres_wakeup"]["status"] == "ok" and listening["postgres_wakeup"]["data"]["listen"]


def test_doctor_under_session_pooling(session_bouncer: PrivatePgBouncer, database: str) -> None:
    url = session_bouncer.url(database, pooler="session")
    assert _cli(url, "migrate").returncode == 0
    checks = _doctor(url)
    assert checks["postgres_pooler"]["status"] == "ok"
    assert checks["postgres_pooler"]["data"]["pooler_seen"] is True
    assert checks["postgres_pooler"]["data"]["transaction_pooling_seen"] is False
    assert checks["postgres_wakeup"]["data"]["listen"] is True
    assert _doctor(session_bouncer.url(database))["postgres_pooler"]["status"] == "warn"
