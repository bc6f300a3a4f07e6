"""Issue 15, point 9: each worker is judged alive by its own lease, never by the reader's.

A worker started with ``--lease 2`` and SIGKILLed is dead once 2 s passed without a heartbeat: its
jobs are stale then, and ``errands status``, the workers page, the overview's counts and the stale
job's explanation all say so, although the dashboard's own app has a lease of 5 s (which, doubled,
was the old rule).  Time is moved by writing the rows back (no sleeping).
"""

from __future__ import annotations

import json
import signal
import socket

from conftest import login
from helpers import child_pids, pid_alive, run_cli, scaled, start_worker, wait_for

WORKER_LEASE = 2.0


def _backdate(app, seconds: float, worker_id: str, job_id: int | None = None) -> None:  # type: ignore[no-untyped-def]
    """As if ``seconds`` had passed since the worker's last heartbeat (and its claim's last extension)."""
    d = app.store.dialect

    def write(cur) -> None:  # type: ignore[no-untyped-def]
        cur.execute(d.q("UPDATE {workers} SET heartbeat_at = {now_plus} WHERE id = {p}"), (-seconds, worker_id))
        if job_id is not None:
            cur.execute(d.q("UPDATE {jobs} SET reserved_until = {now_plus} WHERE id = {p}"),
                        (WORKER_LEASE - seconds, job_id))

    app.store.db.run(write)


def test_a_sigkilled_worker_with_a_short_lease_is_dead_once_its_own_lease_passed(web, dash_app, db_url, tmp_path):
    assert dash_app.lease * 2 > WORKER_LEASE + 1  # the old rule (twice the reader's lease) would say "alive"
    proc = start_worker(db_url, "--lease", str(WORKER_LEASE), "-q", "mails", log_path=tmp_path / "worker.log")
    try:
        child = wait_for(lambda: child_pids(proc.pid), timeout=30, message="the worker process")[0]
        [row] = wait_for(lambda: dash_app.store.workers.list_workers(), timeout=30, message="the worker to register")
        assert row.lease == WORKER_LEASE and row.heartbeat_every is not None
        assert abs(row.heartbeat_every - WORKER_LEASE / 3) < 1e-6  # it records what it does
        proc.send_signal(signal.SIGKILL)  # the supervisor; its worker process dies with it
        proc.wait(timeout=scaled(10))
        wait_for(lambda: not pid_alive(child), timeout=10, message="the worker process to die")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # The job it held when it died (claimed for it here: the sample app knows no "mail" job).
    job = dash_app.registry["mail"].enqueue("a@b.c")
    assert [c.id for c in dash_app.store.jobs.claim(row.id, ["mails"], 1, WORKER_LEASE)] == [job.id]
    _backdate(dash_app, WORKER_LEASE + 1, row.id, job.id)  # 3 s of silence: past its lease, within 2 x 5 s

    assert dash_app.counts()["mails"].stale == 1
    status = json.loads(run_cli(db_url, "status", "--json").stdout)
    [worker] = status["workers"]
    assert worker["alive"] is False and worker["lease"] == WORKER_LEASE and worker["alive_within"] == WORKER_LEASE
    assert "no worker is running" in run_cli(db_url, "status").stdout
    login(web)
    [seen] = web.get("/api/workers").json()["workers"]
    assert seen["alive"] is False and seen["current_jobs"] == [job.id]
    overview = web.get("/api/overview").json()
    assert overview["workers_alive"] == 0 and overview["workers_stale"] == 1 and overview["no_worker"] is True
    assert overview["totals"]["stale"] == 1
    page = web.get("/workers").text
    assert "⚠ stale" in page and "▶ alive" not in page and "lease 2 s" in page
    why = " ".join(web.get(f"/api/jobs/{job.id}").json()["why"])
    assert row.id in why and "not alive" in why and "its lease of 2 s" in why


def test_a_worker_with_a_long_lease_is_alive_between_its_rare_heartbeats(web, dash_app):
    """The other way round: a 60 s lease beats every 20 s; 15 s of silence is normal for it, though
    three times the dashboard's own lease."""
    store = dash_app.store
    store.workers.register("slow:1:x", socket.gethostname(), 1, ["mails"], 1, 60.0, 20.0)
    _backdate(dash_app, 15, "slow:1:x")
    login(web)
    [seen] = web.get("/api/workers").json()["workers"]
    assert seen["alive"] is True and seen["alive_within"] == 60.0
    assert web.get("/api/overview").json()["workers_alive"] == 1
    _backdate(dash_app, 61, "slow:1:x")
    assert web.get("/api/overview").json()["workers_alive"] == 0


def test_a_row_without_a_recorded_lease_keeps_the_old_rule(web, dash_app):
    """A worker of an errands before schema 7 records no lease: twice the reader's, as before."""
    dash_app.store.workers.register("old:1:x", socket.gethostname(), 1, ["mails"], 1)
    _backdate(dash_app, dash_app.lease * 2 - 1, "old:1:x")
    login(web)
    [seen] = web.get("/api/workers").json()["workers"]
    assert seen["alive"] is True and seen["lease"] is None and seen["alive_within"] == dash_app.lease * 2
    assert "no lease recorded" in web.get("/workers").text


def test_live_workers_forget_a_row_by_its_own_lease(app):
    """Pruning judges each row by its own lease too: a long-lease worker silent for less than four of
    its leases stays, a short-lease one silent for longer than two minutes goes."""
    store = app.store
    store.workers.register("long:1:x", "h", 1, ["a"], 1, 600.0, 200.0)
    store.workers.register("short:1:x", "h", 2, ["a"], 1, 2.0, 0.7)
    _backdate(app, 1000, "long:1:x")
    _backdate(app, 130, "short:1:x")
    assert store.workers.prune(older_than=120, per_lease=4, at_least=120) == 1
    assert [w.id for w in store.workers.list_workers()] == ["long:1:x"]
