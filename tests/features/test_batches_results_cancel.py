"""Batches, results and status, cancellation and progress, on every backend."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from helpers import drain, scaled

from errands import Errands, JobCancelled, JobFailed, JobState, current_job


def test_batch_counts_progress_and_calls_back_once(app):
    seen = []

    @app.job(name="part", max_attempts=1)
    def part(n):
        if n == 3:
            raise ValueError("three is bad")

    @app.job(name="done")
    def done(label):
        b = app.batch_status(current_job().batch_id)
        seen.append((label, b.done, b.failed, b.total))

    batch = app.batch([part.prepare(n) for n in range(5)], on_complete=done.prepare("complete"),
                      on_failure=done.prepare("failure"))
    status = batch.status()
    assert (status.total, status.done, status.failed, status.percent, status.finished) == (5, 0, 0, 0.0, False)
    drain(app)
    status = batch.status()
    assert (status.done, status.failed, status.percent, status.finished) == (4, 1, 100.0, True)
    assert sorted(x[0] for x in seen) == ["complete", "failure"]
    assert ("complete", 4, 1, 5) in seen


def test_results_are_kept_and_read_from_another_app(app, db_url):
    @app.job(name="square", keep_result=True)
    def square(x):
        return {"square": x * x}

    handle = square.enqueue(7)
    drain(app)
    other = Errands(db_url)  # another process would see the same
    from errands.core.jobs import JobHandle

    elsewhere = JobHandle(other, handle.id, handle.name)
    assert elsewhere.status() is JobState.SUCCEEDED
    assert elsewhere.result(timeout=scaled(5)) == {"square": 49}
    assert asyncio.run(elsewhere.aresult(timeout=scaled(5))) == {"square": 49}
    other.store.close()


def test_results_keep_their_types_through_the_codec(app):
    """A datetime, date, UUID or Decimal result comes back as one (it came back as null: JSON alone
    cannot hold them); a dict of the result's own with a "__type__" key is no tag; an Enum member
    is refused (kept as null, logged) rather than turned into its plain value."""
    import datetime as dt
    import enum
    import uuid
    from decimal import Decimal

    class Colour(str, enum.Enum):
        RED = "red"

    value = {"at": dt.datetime(2026, 12, 3, 19, 0, tzinfo=dt.timezone.utc), "day": dt.date(2026, 12, 3),
             "id": uuid.UUID(int=7), "amount": Decimal("10.10"), "own": {"__type__": "mine", "value": 1},
             "list": [Decimal("1.5"), None, "x"]}

    @app.job(name="typed", keep_result=True)
    def typed():
        return value

    @app.job(name="coloured", keep_result=True)
    def coloured():
        return Colour.RED

    @app.job(name="bare_decimal", keep_result=True)
    def bare_decimal():
        return Decimal("0.1")

    handles = typed.enqueue(), coloured.enqueue(), bare_decimal.enqueue()
    drain(app)
    got = handles[0].result(timeout=scaled(5))
    assert got == value and type(got["amount"]) is Decimal and type(got["at"]) is dt.datetime
    assert handles[1].status() is JobState.SUCCEEDED and handles[1].result(timeout=scaled(5)) is None
    assert handles[2].result(timeout=scaled(5)) == Decimal("0.1")


def test_result_waits_raises_for_the_dead_letter_and_times_out(app):
    @app.job(name="slow", keep_result=True)
    def slow():
        time.sleep(0.3)
        return 1

    @app.job(name="bad", max_attempts=1)
    def bad():
        raise KeyError("gone")

    late = slow.enqueue()
    with pytest.raises(TimeoutError):
        late.result(timeout=0.2)
    worker = threading.Thread(target=drain, args=(app,))
    worker.start()
    assert late.result(timeout=scaled(10)) == 1
    worker.join()
    failing = bad.enqueue()
    drain(app)
    with pytest.raises(JobFailed) as info:
        failing.result(timeout=scaled(5))
    assert info.value.error_type == "KeyError"


def test_results_expire_and_old_dead_letter_entries_are_pruned(db_url):
    app = Errands(db_url, result_ttl=0.05, failed_ttl=0.05)
    app.migrate()

    @app.job(name="v", keep_result=True, max_attempts=1)
    def v(fail):
        if fail:
            raise RuntimeError("x")
        return 5

    ok, dead = v.enqueue(False), v.enqueue(True)
    drain(app)
    assert ok.status() is JobState.SUCCEEDED and dead.status() is JobState.FAILED
    time.sleep(0.2)  # lets both 0.05 s TTLs pass: prune() is the check itself, so it cannot be polled
    pruned = app.store.features.prune(app.failed_ttl)
    assert pruned["results"] == 1 and pruned["failed"] == 1
    assert ok.status() is JobState.FINISHED and dead.status() is JobState.FINISHED
    app.store.close()


def test_cancelling_a_waiting_job_records_it_and_it_never_runs(app):
    ran = []

    @app.job(name="w")
    def w():
        ran.append(1)

    handle = w.enqueue()
    assert handle.cancel() == "cancelled"
    assert handle.status() is JobState.CANCELLED
    assert drain(app) == 0 and ran == []
    with pytest.raises(JobCancelled):
        handle.result(timeout=scaled(1))
    assert app.cancel(handle.id) == "gone"


def test_a_running_sync_job_sees_its_cancellation_at_a_checkpoint(app):
    started = threading.Event()

    @app.job(name="loop")
    def loop():
        started.set()
        for _ in range(round(scaled(200))):  # about 10 s of work, checking for a cancellation as it goes
            current_job().check_cancelled()
            time.sleep(0.05)

    handle = loop.enqueue()
    worker = threading.Thread(target=drain, args=(app,))
    worker.start()
    assert started.wait(scaled(10))
    assert handle.cancel() == "requested"
    worker.join(scaled(20))
    assert not worker.is_alive()
    assert handle.status() is JobState.CANCELLED
    assert app.failed() == []


def test_a_running_async_job_is_cancelled_at_its_next_await(app):
    started = threading.Event()

    @app.job(name="aloop")
    async def aloop():
        started.set()
        await asyncio.sleep(60)

    handle = aloop.enqueue()
    worker = threading.Thread(target=drain, args=(app,))
    worker.start()
    assert started.wait(scaled(10))
    handle.cancel()
    worker.join(scaled(20))
    assert not worker.is_alive() and handle.status() is JobState.CANCELLED


def test_progress_is_visible_while_the_job_runs(app):
    reported, release = threading.Event(), threading.Event()

    @app.job(name="p")
    def p():
        current_job().progress(0.4, "page 4 of 10")
        reported.set()
        release.wait(scaled(10))

    handle = p.enqueue()
    worker = threading.Thread(target=drain, args=(app,))
    worker.start()
    assert reported.wait(scaled(10))
    row = app.store.jobs.get_job(handle.id)
    assert (row.progress, row.progress_message) == (0.4, "page 4 of 10")
    release.set()
    worker.join(scaled(10))


def test_paused_queue_is_not_claimed_until_resumed(app):
    ran = []

    @app.job(name="q", queue="mails")
    def q():
        ran.append(1)

    q.enqueue()
    app.pause_queue("mails")
    assert app.paused_queues() == ["mails"]
    assert drain(app, queues=("mails",)) == 0 and ran == []
    app.resume_queue("mails")
    assert drain(app, queues=("mails",)) == 1 and ran == [1]


def test_retry_asks_for_its_own_delay_and_discard_skips_the_attempts(app):
    from errands import Discard, Retry

    @app.job(name="later", max_attempts=5)
    def later():
        raise Retry(delay=500)

    @app.job(name="never", max_attempts=5)
    def never():
        raise Discard("customer has no phone number")

    @app.job(name="typed", max_attempts=5, discard_on=(LookupError,))
    def typed():
        raise KeyError("missing")

    a, b, c = later.enqueue(), never.enqueue(), typed.enqueue()
    before = app.store.now()
    drain(app)
    row = app.store.jobs.get_job(a.id)
    assert row.attempts == 1 and (row.available_at - before).total_seconds() >= 499
    assert b.status() is JobState.FAILED and c.status() is JobState.FAILED
    entry = app.store.jobs.get_failed(b.id)
    assert entry.attempts == 1 and entry.error_type == "errands.Discard"
    assert app.store.jobs.get_failed(c.id).attempts == 1


def test_hooks_run_in_order_and_on_dead_reports_the_error(app):
    events = []

    @app.around_job
    def trace(ctx):
        events.append(f"app-around-in:{ctx.name}")
        yield
        events.append("app-around-out")

    @app.before_job
    def before(ctx):
        events.append("app-before")

    @app.after_job
    def after(ctx, error):
        events.append(f"app-after:{type(error).__name__ if error else None}")

    @app.job(name="h", max_attempts=1)
    def h(fail):
        events.append("run")
        if fail:
            raise ValueError("boom")

    @h.before
    def job_before(ctx):
        events.append("job-before")

    @h.on_dead
    def dead(ctx, error_type, message):
        events.append(f"dead:{ctx.id}:{error_type}:{message}")

    ok = h.enqueue(False)
    drain(app)
    assert events == ["app-around-in:h", "app-before", "job-before", "run", "app-around-out", "app-after:None"]
    events.clear()
    bad = h.enqueue(True)
    drain(app)
    assert events[-1] == f"dead:{bad.id}:ValueError:boom" and "app-after:ValueError" in events
    assert ok.id != bad.id


def test_eager_mode_runs_inline_and_run_until_empty_drains(app):
    calls = []

    @app.job(name="e", keep_result=True)
    def e(x):
        calls.append(x)
        return x + 1

    @app.job(name="boom")
    def boom():
        raise RuntimeError("inline")

    with app.eager():
        handle = e.enqueue(1)
        assert calls == [1] and handle.result() == 2 and handle.status() is JobState.SUCCEEDED
        with pytest.raises(RuntimeError, match="inline"):
            boom.enqueue()
    assert app.store.jobs.list_jobs() == []  # nothing was stored
    e.enqueue(5)
    e.enqueue(6)
    assert app.run_until_empty() == 2 and calls == [1, 5, 6]


def test_transactional_enqueue_with_using_cursor(app):
    @app.job(name="t")
    def t(n): ...

    store = app.store
    conn = store.dialect.connect()
    try:
        store.dialect.begin(conn)
        t.using(cursor=conn.cursor()).enqueue(1)
        conn.rollback()
        assert store.jobs.list_jobs() == []  # rolled back with the caller's transaction: no job
        store.dialect.begin(conn)
        kept = t.using(cursor=conn.cursor()).enqueue(2)
        assert store.jobs.list_jobs() == [] or store.dialect.name == "sqlite"  # not visible before the commit
        conn.commit()
    finally:
        conn.close()
    assert [r.arguments for r in store.jobs.list_jobs()] == [([2], {})] and store.jobs.get_job(kept.id) is not None


def test_async_enqueue_on_the_callers_cursor_joins_its_transaction(app):
    import asyncio

    @app.job(name="t")
    def t(n): ...

    store = app.store
    conn = store.dialect.connect()

    async def scenario() -> None:
        store.dialect.begin(conn)
        await t.using(cursor=conn.cursor()).aenqueue(1)
        conn.rollback()
        assert store.jobs.list_jobs() == []
        store.dialect.begin(conn)
        await t.using(cursor=conn.cursor()).aenqueue(2)
        conn.commit()

    try:
        asyncio.run(scenario())
    finally:
        conn.close()
    assert [r.arguments for r in store.jobs.list_jobs()] == [([2], {})]
    if store.dialect.name == "sqlite":  # noqa: E501 - the application's own connection, bound to its thread as sqlite3 does by default
        import sqlite3

        own = sqlite3.connect(app.database_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            own.execute("BEGIN IMMEDIATE")
            asyncio.run(t.using(cursor=own.cursor()).aenqueue(3))
            own.execute("COMMIT")
        finally:
            own.close()
        assert [r.arguments for r in store.jobs.list_jobs()] == [([2], {}), ([3], {})]
