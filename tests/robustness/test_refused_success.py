"""A failure to record a success never buries the job, on any backend.

A job that ran and succeeded is done: its effects happened.  If the database then refuses to record
that success (here a trigger refuses it, as a Galera node's certification, a constraint or a full disk
may), the worker keeps the job (its lease extended), offers the record again with growing pauses while
it goes on with other jobs, and when the whole record (the result) keeps being refused it records a
plain success: the result lost, never the job dead (``errands.SettleError`` in the dead letter, the
behaviour before) nor run a second time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import settle_jobs
from helpers import scaled, wait_for, wait_for_db_clock

from errands import Errands, JobHandle
from errands.core import endings
from errands.worker.runner import Worker
from errands.worker.settings import WorkerSettings


@pytest.fixture
def jobs_app(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Errands]:
    migrator = Errands(db_url)
    migrator.migrate()
    migrator.store.close()
    app = settle_jobs.app
    app.use_database(db_url)
    app.store.db.run(lambda cur: cur.execute(settle_jobs.RUNS_DDL))
    app.store.db.run(lambda cur: cur.execute("CREATE TABLE refusals (job_id BIGINT, what VARCHAR(10))"))
    monkeypatch.setattr(endings, "RECORD_AGAIN_FIRST", 0.05)  # the offers within a second or two
    monkeypatch.setattr(endings, "RECORD_AGAIN_CAP", 0.2)
    try:
        yield app
    finally:
        app.store.close()


def refuse_on(app: Errands, backend: str) -> None:
    """Triggers that refuse, for the jobs listed in ``refusals``: the DELETE of the job's row
    (what = 'delete': every way of recording its end) or the INSERT of its result (what = 'result')."""
    d = app.store.dialect
    cases = [("refuse_delete", "DELETE", d.t_jobs, "OLD", "delete"),
             ("refuse_result", "INSERT", d.q("{results}"), "NEW", "result")]
    for name, event, table, row, what in cases:
        when = f"EXISTS (SELECT 1 FROM refusals WHERE job_id = {row}.id AND what = '{what}')"
        if backend == "sqlite":
            statements = [f"CREATE TRIGGER {name} BEFORE {event} ON {table} WHEN {when} "
                          "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"]
        elif backend == "postgres":
            statements = [f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN IF {when} THEN "
                          f"RAISE EXCEPTION 'refused by a trigger'; END IF; RETURN {row}; END $$ LANGUAGE plpgsql",
                          f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"]
        else:
            statements = [f"CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW BEGIN IF {when} THEN "
                          "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; END"]
        for sql in statements:
            app.store.db.run(lambda cur, sql=sql: cur.execute(sql))


def query(app: Errands, sql: str) -> list[tuple[object, ...]]:
    return app.store.db.run(lambda cur: (cur.execute(app.store.dialect.q(sql)), [tuple(r) for r in cur.fetchall()])[1])


def refuse(app: Errands, what: str, *jobs: JobHandle) -> None:
    for job in jobs:
        app.store.db.run(lambda cur, j=job.id: cur.execute(
            f"INSERT INTO refusals (job_id, what) VALUES ({int(j)}, '{what}')"))


def start(app: Errands) -> tuple[Worker, threading.Thread]:
    worker = Worker(app, WorkerSettings.of(["default"], concurrency=2, sleep=0.05, scheduler=False, listen=False))
    thread = threading.Thread(target=worker.run, name="worker-under-test", daemon=True)
    thread.start()
    return worker, thread


def stop(worker: Worker, thread: threading.Thread) -> None:
    worker.request_stop()
    thread.join(scaled(30))
    assert not thread.is_alive()


def ran(app: Errands) -> list[int]:
    return sorted(int(r[0]) for r in query(app, "SELECT job_id FROM settle_runs"))


def waiting(app: Errands, *jobs: JobHandle) -> list[tuple[object, ...]]:
    return query(app, "SELECT id, reserved_by FROM {jobs} WHERE id IN (" + ", ".join(str(j.id) for j in jobs) + ")")


def test_a_refused_success_waits_with_its_lease_and_is_recorded_whole(jobs_app: Errands, backend: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    app = jobs_app
    monkeypatch.setattr(endings, "SUCCESS_RECORD_TRIES", 1_000)  # the whole record, however long it is refused
    refuse_on(app, backend)
    plain, kept = settle_jobs.plain.enqueue(0), settle_jobs.kept.enqueue(1)
    refuse(app, "delete", plain, kept)  # every way of recording their end is refused until the test lifts it

    worker, thread = start(app)
    try:
        wait_for(lambda: ran(app) == sorted([plain.id, kept.id]), timeout=scaled(30), message="the jobs to run")
        # They wait, still this worker's: their leases are kept past the end of the ones they were claimed with...
        [(until,)] = query(app, f"SELECT MAX(reserved_until) FROM {{jobs}} WHERE id IN ({plain.id}, {kept.id})")
        wait_for_db_clock(app.store, app.store.dialect.to_datetime(until) + timedelta(seconds=0.5), timeout=scaled(30))
        assert sorted(waiting(app, plain, kept)) == [(plain.id, worker.id), (kept.id, worker.id)]
        # ... and the worker goes on with other jobs meanwhile.
        others = [settle_jobs.plain.enqueue(n) for n in range(10, 20)]
        wait_for(lambda: not waiting(app, *others), timeout=scaled(30), message="the other jobs to be recorded")
        assert len(waiting(app, plain, kept)) == 2
        # The refusal lifted: both are recorded, the kept result with them.
        app.store.db.run(lambda cur: cur.execute("DELETE FROM refusals"))
        wait_for(lambda: not waiting(app, plain, kept), timeout=scaled(30), message="the waiting successes")
    finally:
        stop(worker, thread)
    assert query(app, "SELECT id FROM {failed}") == []  # no success in the dead letter
    assert ran(app) == sorted([plain.id, kept.id, *(h.id for h in others)])  # once each (the key refuses a second)
    assert kept.result(timeout=0) == {"n": 1, "job": kept.id}


def test_a_success_whose_result_is_refused_for_good_ends_a_plain_success(jobs_app: Errands, backend: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    app = jobs_app
    refuse_on(app, backend)
    lost = settle_jobs.kept.enqueue(2)
    refuse(app, "result", lost)
    worker, thread = start(app)
    try:
        wait_for(lambda: ran(app) == [lost.id] and not waiting(app, lost), timeout=scaled(30),
                 message="the job whose result is refused to be recorded as a plain success")
    finally:
        stop(worker, thread)
    assert query(app, "SELECT id FROM {failed}") == []  # before: errands.SettleError in the dead letter
    assert query(app, f"SELECT id FROM {{results}} WHERE id = {lost.id}") == []  # the result is what was lost
    assert ran(app) == [lost.id]
    said = [r.getMessage() for r in caplog.records]
    assert any(f"job {lost.id}: recorded as a success without its result" in m for m in said), said


def test_a_burst_worker_whose_success_is_never_recorded_leaves_and_gives_the_job_back(
        jobs_app: Errands, backend: str, caplog: pytest.LogCaptureFixture) -> None:
    """A refusal that never lifts, of even the plain success: a burst worker does not wait for ever; it
    gives the job back (it runs again, which is better than dead) and says so."""
    app = jobs_app
    refuse_on(app, backend)
    stuck = settle_jobs.plain.enqueue(3)
    refuse(app, "delete", stuck)
    app.run_until_empty(["default"], scheduler=False, listen=False)
    assert ran(app) == [stuck.id]
    assert query(app, "SELECT id FROM {failed}") == []
    assert query(app, f"SELECT reserved_by FROM {{jobs}} WHERE id = {stuck.id}") == [(None,)]  # back in line
    assert any("goes back to the queue and will run again" in r.getMessage() for r in caplog.records)
