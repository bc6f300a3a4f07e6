"""The life of a job on every backend, driven by an in-process worker and the store's verbs."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from helpers import wait_for

from errands import Errands, JobNotFound, JobState
from errands.core.endings import CancelledRun, Completed, RetryAt, Snoozed
from errands.core.rows import FLAG_RESULT, NewJob
from errands.worker.runner import Worker, WorkerSettings


def run_jobs(app: Errands, max_jobs: int | None = None, queues=("default",), concurrency: int = 1) -> int:
    settings = WorkerSettings(queues=tuple(queues), concurrency=concurrency, burst=True, max_jobs=max_jobs,
                              sleep=0.05)
    worker = Worker(app, settings)
    worker.run()
    return worker.jobs_done


def test_success_deletes_the_row(app):
    ran = []

    @app.job(name="ok")
    def ok(x):
        ran.append(x)

    handle = ok.enqueue(41)
    assert handle.status() is JobState.READY
    assert run_jobs(app) == 1
    assert ran == [41]
    assert app.store.jobs.get_job(handle.id) is None
    assert app.store.jobs.list_jobs() == []
    assert handle.status() is JobState.FINISHED


def test_failure_retries_after_exactly_the_backoff_delay(app):
    @app.job(name="boom", max_attempts=3, backoff=100)
    def boom():
        raise RuntimeError("kaput")

    handle = boom.enqueue()
    before = app.store.now()
    run_jobs(app, max_jobs=1)
    after = app.store.now()
    row = app.store.jobs.get_job(handle.id)
    assert row is not None and row.reserved_by is None and row.attempts == 1
    assert before + timedelta(seconds=100) <= row.available_at <= after + timedelta(seconds=100)
    assert row.last_error == "RuntimeError: kaput"
    assert handle.status() is JobState.DELAYED
    assert app.store.jobs.claim("someone", ["default"], 10, 30) == []  # not before the delay


def test_backoff_grows_with_attempts(app):
    @app.job(name="boom", max_attempts=5, backoff=[0, 0, 500])
    def boom():
        raise RuntimeError("again")

    handle = boom.enqueue()
    run_jobs(app, max_jobs=2)  # attempts 1 and 2 retry immediately
    before = app.store.now()
    run_jobs(app, max_jobs=1)  # attempt 3 waits 500 s
    row = app.store.jobs.get_job(handle.id)
    assert row.attempts == 3
    assert row.available_at >= before + timedelta(seconds=500)


def test_exhausted_job_lands_in_the_dead_letter_without_traceback(app):
    @app.job(name="boom", max_attempts=2, backoff=0)
    def boom(n):
        raise ValueError("bad input " + "x" * 5000)

    handle = boom.enqueue(7)
    run_jobs(app)
    assert app.store.jobs.get_job(handle.id) is None
    [entry] = app.failed()
    assert entry.id == handle.id and entry.name == "boom" and entry.attempts == 2
    assert entry.error_type == "ValueError"
    assert entry.error_message.startswith("bad input xxx")
    assert len(entry.error_message) == 2000
    assert "Traceback" not in entry.error_message
    assert entry.payload == '{"args":[7],"kwargs":{}}'
    assert handle.status() is JobState.FAILED
    assert app.counts()["default"].failed == 1


def test_retry_from_the_dead_letter_gives_fresh_attempts(app):
    calls = []

    @app.job(name="flaky", max_attempts=1)
    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first time")

    handle = flaky.enqueue()
    run_jobs(app)
    assert [f.id for f in app.failed()] == [handle.id]
    assert app.retry_failed(handle.id) == [handle.id]
    assert app.failed() == []
    row = app.store.jobs.get_job(handle.id)
    assert row.attempts == 0 and row.reserved_by is None
    run_jobs(app)
    assert len(calls) == 2 and app.store.jobs.list_jobs() == [] and app.failed() == []


def test_retry_all_and_by_queue_and_forget(app):
    @app.job(name="dies", max_attempts=1)
    def dies():
        raise RuntimeError("no")

    a = dies.enqueue()
    b = dies.using(queue="other").enqueue()
    c = dies.using(queue="other").enqueue()
    run_jobs(app, queues=("default", "other"))
    assert {f.id for f in app.failed()} == {a.id, b.id, c.id}
    assert app.retry_failed(queue="other") == sorted([b.id, c.id])
    assert [f.id for f in app.failed()] == [a.id]
    run_jobs(app, queues=("other",))
    assert app.forget_failed(a.id) == 1
    assert {f.id for f in app.failed()} == {b.id, c.id}
    assert sorted(app.retry_failed()) == sorted([b.id, c.id])
    assert app.failed() == []
    assert app.store.jobs.forget_failed() == 0
    with pytest.raises(JobNotFound):
        app.retry_failed(a.id)
    with pytest.raises(JobNotFound):
        app.forget_failed(a.id)


def test_unknown_job_name_goes_to_the_dead_letter(app):
    app.unknown_job_grace = 0  # (with a grace it is held back first: tests/features/test_deploys.py)
    [job_id] = app.store.jobs.enqueue([NewJob("nobody.registered.this", "default", '{"args":[],"kwargs":{}}')])

    @app.job(name="known")
    def known(): ...

    known.enqueue()
    assert run_jobs(app) == 2  # the worker carried on
    [entry] = app.failed()
    assert entry.id == job_id
    assert entry.error_type == "errands.UnknownJob"
    assert "nobody.registered.this" in entry.error_message
    assert entry.attempts == 1


def test_undecodable_payload_goes_to_the_dead_letter(app):
    [job_id] = app.store.jobs.enqueue([NewJob("known", "default", "{not json")])

    @app.job(name="known")
    def known(): ...

    run_jobs(app)
    [entry] = app.failed()
    assert entry.id == job_id and entry.error_type == "errands.BadPayload"


def test_async_handlers_run(app):
    seen = []

    @app.job(name="aj")
    async def aj(x):
        seen.append(x)

    aj.enqueue(1)
    run_jobs(app)
    assert seen == [1]


def test_aenqueue(app):
    import asyncio

    @app.job(name="aj")
    async def aj(x): ...

    handle = asyncio.run(aj.aenqueue(5))
    assert app.store.jobs.get_job(handle.id).name == "aj"


def test_async_job_timeout_is_enforced_in_process(app):
    import asyncio

    @app.job(name="slow", timeout=0.2, max_attempts=1)
    async def slow():
        await asyncio.sleep(30)

    slow.enqueue()
    run_jobs(app)
    [entry] = app.failed()
    assert entry.error_type == "errands.JobTimeout" and "0.2s" in entry.error_message


def test_priority_higher_first_then_fifo(app):
    order = []

    @app.job(name="p")
    def p(tag):
        order.append(tag)

    p.enqueue("a0")
    p.using(priority=5).enqueue("b5")
    p.enqueue("c0")
    p.using(priority=-3).enqueue("d-3")
    p.using(priority=5).enqueue("e5")
    p.using(priority=10).enqueue("f10")
    run_jobs(app)
    assert order == ["f10", "b5", "e5", "a0", "c0", "d-3"]


def test_queue_order_is_preference(app):
    order = []

    @app.job(name="p")
    def p(tag):
        order.append(tag)

    p.using(queue="low").enqueue("low1")
    p.using(queue="high").enqueue("high1")
    p.using(queue="low").enqueue("low2")
    run_jobs(app, queues=("high", "low"))
    assert order == ["high1", "low1", "low2"]


def test_a_delayed_job_is_never_claimed_early(app):
    @app.job(name="later")
    def later(): ...

    soon = later.using(delay=1.5).enqueue()
    far = later.using(delay=3600).enqueue()
    assert app.counts()["default"].delayed == 2
    assert app.store.jobs.claim("w", ["default"], 10, 30) == []
    # By the database's clock, not ours: claims come back empty until one takes the job, and that one
    # ran at or after the job fell due (reserved_at and available_at are both the database's times).
    due = app.store.jobs.get_job(soon.id).available_at
    claimed = wait_for(lambda: app.store.jobs.claim("w", ["default"], 10, 30), interval=0.1,
                       message="the job to fall due and be claimed")
    assert [r.id for r in claimed] == [soon.id]
    assert app.store.jobs.get_job(soon.id).reserved_at >= due
    assert app.store.jobs.get_job(far.id).state(app.store.now()) is JobState.DELAYED


def test_run_at_absolute_time(app):
    @app.job(name="at")
    def at(): ...

    past = at.using(run_at=datetime.now(timezone.utc) - timedelta(seconds=5)).enqueue()
    future = at.using(run_at=datetime.now(timezone.utc) + timedelta(hours=1)).enqueue()
    claimed = app.store.jobs.claim("w", ["default"], 10, 30)
    assert [r.id for r in claimed] == [past.id]
    assert app.store.jobs.get_job(future.id).reserved_by is None


def test_enqueue_many_is_one_batch_with_ids_in_order(app):
    @app.job(name="m")
    def m(i): ...

    handles = app.enqueue_many([m.prepare(i) for i in range(1200)])
    assert len(handles) == 1200 and len({h.id for h in handles}) == 1200
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    assert app.store.jobs.get_job(handles[700].id).payload == '{"args":[700],"kwargs":{}}'
    assert app.counts()["default"].ready == 1200


def test_enqueue_many_keeps_every_rows_own_values(app):
    """Rows of one batch that differ in everything, and payloads with quotes, backslashes and %s
    (MySQL writes the rest of a row into the statement and sends only the payloads)."""

    @app.job(name="m%s", max_attempts=3, timeout=2.5)
    def m(text): ...

    texts = ["it's", "back\\slash", "100% %s %(x)s", 'quote " and \' both', "plain"]
    due = datetime.now(timezone.utc) + timedelta(hours=2)
    jobs = []
    for i in range(1100):
        text = texts[i % len(texts)]
        if i % 4 == 0:
            jobs.append(m.prepare(text))
        elif i % 4 == 1:
            jobs.append(m.using(queue="q.x-1", priority=7).prepare(text))
        elif i % 4 == 2:
            jobs.append(m.using(delay=600, max_attempts=9, timeout=30).prepare(text))
        else:
            jobs.append(m.using(run_at=due).prepare(text))
    now = app.store.now()
    handles = app.enqueue_many(jobs)
    assert [h.id for h in handles] == sorted(h.id for h in handles)
    for i in (0, 1, 2, 3, 4, 5, 6, 7, 1097, 1098, 1099):
        row = app.store.jobs.get_job(handles[i].id)
        assert row.name == "m%s" and json.loads(row.payload)["args"] == [texts[i % len(texts)]]
        kind = i % 4
        assert row.queue == ("q.x-1" if kind == 1 else "default")
        assert row.priority == (7 if kind == 1 else 0)
        assert row.max_attempts == (9 if kind == 2 else 3)
        assert row.timeout == (30 if kind == 2 else 2.5)
        if kind in (0, 1):
            assert abs((row.available_at - now).total_seconds()) < 60
        elif kind == 2:
            assert 540 < (row.available_at - now).total_seconds() < 660
        else:
            assert abs((row.available_at - due).total_seconds()) < 0.01


def test_claim_counts_the_attempt_and_sets_a_lease(app):
    @app.job(name="c", max_attempts=4)
    def c(): ...

    h = c.enqueue()
    before = app.store.now()
    [row] = app.store.jobs.claim("me", ["default"], 5, 30)
    assert row.id == h.id and row.attempts == 1 and row.reserved_by == "me"
    stored = app.store.jobs.get_job(h.id)
    assert stored.reserved_by == "me" and stored.attempts == 1
    assert stored.reserved_until >= before + timedelta(seconds=29)
    assert h.status() is JobState.RUNNING
    assert app.store.jobs.claim("other", ["default"], 5, 30) == []


def test_settling_requires_holding_the_lease(app):
    @app.job(name="c")
    def c(): ...

    h = c.enqueue()
    app.store.jobs.claim("me", ["default"], 1, 30)
    endings = app.store.endings
    assert endings.complete("someone-else", [h.id]) == 0
    assert endings.apply("someone-else", [RetryAt(h.id, 1, 0, "X", "x"), Snoozed(h.id, 0), CancelledRun(h.id, "c", 60),
                                          Completed(h.id, FLAG_RESULT, None, "1", 60)]) == []
    assert not endings.bury("someone-else", h.id, "X", "y")
    assert app.store.jobs.extend_leases("someone-else", [h.id], 30) == 0
    assert app.store.jobs.get_job(h.id).reserved_by == "me"
    assert endings.complete("me", [h.id]) == 1


def test_stale_lease_is_recovered_and_exhausted_ones_are_buried(app):
    @app.job(name="c", max_attempts=2)
    def c(): ...

    h = c.enqueue()
    [row] = app.store.jobs.claim("dead-worker", ["default"], 1, 1)  # lease of 1 s, never extended
    assert app.recover_stale().released == []
    # The lease lapses by the database's clock, which counts() and recover_stale() both read.
    wait_for(lambda: app.counts()["default"].stale == 1, message="the 1 s lease to lapse")
    report = app.recover_stale()
    assert report.released == [h.id] and report.buried == []
    [row] = app.store.jobs.claim("second", ["default"], 1, 1)
    assert row.attempts == 2
    wait_for(lambda: app.counts()["default"].stale == 1, message="the second 1 s lease to lapse")
    report = app.recover_stale()
    assert report.buried == [h.id]
    [entry] = app.failed()
    assert entry.error_type == "errands.LeaseExpired" and entry.attempts == 2


def test_release_on_shutdown_refunds_the_attempt(app):
    @app.job(name="c")
    def c(): ...

    h = c.enqueue()
    app.store.jobs.claim("me", ["default"], 1, 30)
    assert app.store.jobs.release("me", [h.id]) == 1
    row = app.store.jobs.get_job(h.id)
    assert row.reserved_by is None and row.attempts == 0


def test_worker_registry(app):
    app.store.workers.register("host:1:abc", "host", 1, ["a", "b"], 4)
    [w] = app.store.workers.list_workers()
    assert (w.id, w.queues, w.concurrency, w.jobs_done) == ("host:1:abc", "a,b", 4, 0)
    app.store.workers.heartbeat("host:1:abc", 12)
    assert app.store.workers.list_workers()[0].jobs_done == 12
    assert app.store.workers.prune(older_than=3600) == 0
    app.store.workers.unregister("host:1:abc")
    assert app.store.workers.list_workers() == []


def test_migrate_is_idempotent_and_versioned(app):
    assert app.migrate() == []
    assert app.store.current_version() == app.store.dialect.schema_version
    assert "CREATE TABLE" in app.store.migration_sql()


def test_transactional_enqueue_on_the_callers_cursor(app):
    @app.job(name="t")
    def t(): ...

    conn = app.store.dialect.connect()
    try:
        app.store.dialect.begin(conn)
        cur = conn.cursor()
        [h] = app.enqueue_many([t.prepare()], cursor=cur)
        conn.rollback()
        assert app.store.jobs.get_job(h.id) is None
        app.store.dialect.begin(conn)
        [h] = app.enqueue_many([t.prepare()], cursor=cur)
        conn.commit()
        assert app.store.jobs.get_job(h.id) is not None
    finally:
        conn.close()


def test_transactional_enqueue_on_a_fresh_sqlite_database_creates_the_tables(tmp_path):
    import sqlite3

    app = Errands(f"sqlite:///{tmp_path / 'fresh.db'}")

    @app.job(name="t")
    def t(): ...

    conn = sqlite3.connect(tmp_path / "fresh.db", isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        [h] = app.enqueue_many([t.prepare()], cursor=conn.cursor())
        conn.execute("COMMIT")
        assert app.store.jobs.get_job(h.id) is not None
    finally:
        conn.close()
        app.store.close()


def test_new_ids_never_collide_with_dead_letter_ids(app):
    """Ids stay unique across both tables, so a retried job keeps its id and never clashes."""

    @app.job(name="d", max_attempts=1)
    def d():
        raise RuntimeError("x")

    first = d.enqueue()
    run_jobs(app)
    second = d.enqueue()
    assert second.id > first.id
    run_jobs(app)
    assert sorted(app.retry_failed()) == [first.id, second.id]


def test_large_batches_keep_order_delays_and_run_at(app):
    """Big batches take another path on some databases (COPY on PostgreSQL): same promises."""

    @app.job(name="big")
    def big(i): ...

    later = datetime.now(timezone.utc) + timedelta(hours=2)
    prepared = [big.using(delay=3600).prepare(i) if i % 10 == 0 else big.prepare(i) for i in range(2600)]
    prepared[5] = big.using(run_at=later, priority=7).prepare(5)
    awkward = 'tab\t newline\n backslash\\ quote" é ✓ \u0000'
    prepared[7] = big.prepare(awkward)
    handles = app.enqueue_many(prepared)
    assert app.store.jobs.get_job(handles[7].id).arguments == ([awkward], {})
    assert [h.id for h in handles] == sorted(h.id for h in handles) and len(set(handles)) == 2600
    assert app.store.jobs.get_job(handles[1234].id).payload == '{"args":[1234],"kwargs":{}}'
    five = app.store.jobs.get_job(handles[5].id)
    assert five.priority == 7 and abs((five.available_at - later).total_seconds()) < 0.01
    counts = app.counts()["default"]
    assert (counts.ready, counts.delayed) == (2600 - 261, 261)
    first = app.store.jobs.claim("w", ["default"], 3, 30)
    assert [r.id for r in first] == [handles[1].id, handles[2].id, handles[3].id]
