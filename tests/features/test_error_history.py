"""The error history (issue 14): every failed attempt keeps its error type, message and time, on
every backend; tracebacks only when the app or the job opts in, trimmed; a cap per job."""

from __future__ import annotations

from typing import Any

from helpers import drain, wait_for

from errands import Errands, JobState
from errands.store.steps import HISTORY_CAP, TRACEBACK_CAP, TRACEBACK_FRAMES, trim_traceback


def _count(app: Errands, sql: str) -> int:
    def read(cur: Any) -> int:
        cur.execute(app.store.dialect.q(sql))
        return int(cur.fetchone()[0])

    return app.store.db.run(read)


def test_every_failed_attempt_is_kept_and_the_dead_letter_shows_them_all(app):
    @app.job(name="flaky", max_attempts=3, backoff=0)
    def flaky(n):
        raise ValueError(f"bad input {n}")

    handle = flaky.enqueue(7)
    drain(app)
    assert handle.status() is JobState.FAILED
    history = app.store.jobs.errors(handle.id)
    assert [(e.attempt, e.error_type, e.error_message) for e in history] == [
        (1, "ValueError", "bad input 7"), (2, "ValueError", "bad input 7"), (3, "ValueError", "bad input 7")]
    assert all(e.traceback is None for e in history)  # not kept unless asked for
    assert history[0].failed_at <= history[1].failed_at <= history[2].failed_at <= app.store.now()


def test_plain_successful_jobs_write_no_history(app):
    @app.job(name="fine")
    def fine(n): ...

    fine.enqueue(1)
    fine.enqueue(2)
    drain(app)
    assert _count(app, "SELECT COUNT(*) FROM {job_errors}") == 0


def test_retrying_a_dead_job_keeps_its_history_and_forgetting_removes_it(app):
    calls = []

    @app.job(name="twice", max_attempts=1)
    def twice():
        calls.append(1)
        raise RuntimeError(f"call {len(calls)}")

    handle = twice.enqueue()
    drain(app)
    assert app.retry_failed(handle.id) == [handle.id]
    assert [e.error_message for e in app.store.jobs.errors(handle.id)] == ["call 1"]
    drain(app)
    assert [e.error_message for e in app.store.jobs.errors(handle.id)] == ["call 1", "call 2"]
    app.store.jobs.forget_failed([handle.id])
    assert app.store.jobs.errors(handle.id) == []


def test_a_job_that_succeeds_after_failing_keeps_no_history_once_pruned(app):
    state = {"n": 0}

    @app.job(name="second_time", max_attempts=3, backoff=0)
    def second_time():
        state["n"] += 1
        if state["n"] == 1:
            raise OSError("network")

    handle = second_time.enqueue()
    drain(app)
    assert handle.status() is JobState.FINISHED
    assert len(app.store.jobs.errors(handle.id)) == 1  # until the prune pass
    assert app.store.features.prune(None)["errors"] == 1
    assert app.store.jobs.errors(handle.id) == []


def test_pruning_the_dead_letter_removes_the_history_with_it(app):
    @app.job(name="dies", max_attempts=1)
    def dies():
        raise RuntimeError("x")

    handle = dies.enqueue()
    drain(app)
    assert len(app.store.jobs.errors(handle.id)) == 1
    # The entry must be older than the retention: wait until the database clock has moved past it
    # (SQLite's counts milliseconds, so on a quick run the prune could see the same moment).
    failed_at = app.store.jobs.get_failed(handle.id).failed_at
    wait_for(lambda: (app.store.now() - failed_at).total_seconds() > 0.002, message="the clock to move on")
    app.store.features.prune(failed_ttl=1e-6)
    assert app.store.jobs.get_failed(handle.id) is None and app.store.jobs.errors(handle.id) == []


def test_tracebacks_are_kept_only_when_the_app_or_the_job_opts_in(db_url):
    app = Errands(db_url, keep_traceback=True)
    app.migrate()
    try:
        @app.job(name="kept", max_attempts=1)
        def kept():
            raise KeyError("where")

        @app.job(name="not_kept", max_attempts=1, keep_traceback=False)
        def not_kept():
            raise KeyError("there")

        a, b = kept.enqueue(), not_kept.enqueue()
        drain(app)
        [entry] = app.store.jobs.errors(a.id)
        assert entry.traceback is not None and "Traceback" in entry.traceback and "KeyError" in entry.traceback
        assert app.store.jobs.errors(b.id)[0].traceback is None
    finally:
        app.store.close()


def test_a_job_can_keep_tracebacks_when_the_app_does_not(app):
    @app.job(name="own", max_attempts=1, keep_traceback=True)
    def own():
        raise ZeroDivisionError("by zero")

    handle = own.enqueue()
    drain(app)
    assert "ZeroDivisionError" in app.store.jobs.errors(handle.id)[0].traceback


def test_history_is_capped_per_job(app):
    @app.job(name="endless", max_attempts=HISTORY_CAP + 20, backoff=0)
    def endless():
        raise RuntimeError("again")

    handle = endless.enqueue()
    drain(app)
    history = app.store.jobs.errors(handle.id)
    assert len(history) == HISTORY_CAP
    assert [e.attempt for e in history] == list(range(21, HISTORY_CAP + 21))  # the latest are kept


def test_tracebacks_are_trimmed_to_the_documented_size():
    frames = "".join(f'  File "m.py", line {i}, in f{i}\n    call()\n' for i in range(200))
    text = "Traceback (most recent call last):\n" + frames + "RuntimeError: " + "x" * 20000 + "\0"
    trimmed = trim_traceback(text)
    assert len(trimmed) <= TRACEBACK_CAP + 100 and "\0" not in trimmed
    assert trimmed.startswith("[traceback trimmed") and trimmed.endswith("x\ufffd")  # NUL made storable
    short = trim_traceback("Traceback (most recent call last):\n" + frames[:2000] + "ValueError: v")
    assert short.count("  File ") <= TRACEBACK_FRAMES and short.endswith("ValueError: v")
    assert trim_traceback("Traceback:\n  File x\nE: e") == "Traceback:\n  File x\nE: e"
