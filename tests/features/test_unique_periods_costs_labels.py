"""Unique periods, weighted rate limits and display labels (issue 14), on every backend."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from helpers import APPS, cli_env, drain, scaled, wait_for

from errands import ConfigurationError, Errands, InvalidOption, JobState


def _rows(app: Errands, sql: str, *params: Any) -> list[tuple]:
    def read(cur: Any) -> list[tuple]:
        cur.execute(app.store.dialect.q(sql), params)
        return [tuple(r) for r in cur.fetchall()]

    return app.store.db.run(read)


def _execute(app: Errands, sql: str, *params: Any) -> None:
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(sql), params), write=True)


# ---------------------------------------------------------------------- unique periods
def test_a_unique_key_stays_taken_for_its_period_after_the_job_finished(app):
    @app.job(name="report", unique=True, unique_for=3600)
    def report(month): ...

    first = report.enqueue("2026-01")
    drain(app)
    assert first.status() is JobState.FINISHED
    again = report.enqueue("2026-01")  # within the hour: the finished job's id, no new job
    assert again.id == first.id and app.store.jobs.list_jobs() == []
    other = report.enqueue("2026-02")
    assert other.id != first.id
    # Once the period is over the key is free again.
    _execute(app, "UPDATE {unique_keys} SET expires_at = {now_plus}", -1.0)
    later = report.enqueue("2026-01")
    assert later.id not in (first.id, other.id)


def test_a_unique_key_without_a_period_is_free_once_the_job_ended(app):
    @app.job(name="sync", unique=True)
    def sync(n): ...

    first = sync.enqueue(1)
    drain(app)
    assert sync.enqueue(1).id != first.id


def test_per_call_unique_period_and_dead_or_cancelled_jobs_hold_the_key_too(app):
    @app.job(name="mail", max_attempts=1)
    def mail(to):
        raise RuntimeError("smtp down")

    dead = mail.using(unique_key="welcome:1", unique_for=600).enqueue("a@example.com")
    drain(app)
    assert dead.status() is JobState.FAILED
    assert mail.using(unique_key="welcome:1", unique_for=600).enqueue("a@example.com").id == dead.id
    waiting = mail.using(unique_key="welcome:2", unique_for=600, delay=3600).enqueue("b@example.com")
    assert waiting.cancel() == "cancelled"
    assert mail.using(unique_key="welcome:2").enqueue("b@example.com").id == waiting.id
    # Without a period the key of a dead job is free (as before).
    plain = mail.using(unique_key="welcome:3").enqueue("c@example.com")
    drain(app)
    assert mail.using(unique_key="welcome:3").enqueue("c@example.com").id != plain.id


def test_expired_keys_are_pruned_and_live_ones_kept(app):
    @app.job(name="r", unique=True, unique_for=3600)
    def r(n): ...

    r.enqueue(1)
    r.enqueue(2)
    drain(app)
    app.store.features.prune(None)
    assert len(_rows(app, "SELECT name FROM {unique_keys}")) == 2  # still within their period
    _execute(app, "UPDATE {unique_keys} SET expires_at = {now_plus}", -1.0)
    assert app.store.features.prune(None)["unique_keys"] == 2
    assert _rows(app, "SELECT name FROM {unique_keys}") == []


def test_bad_unique_periods_are_refused(app):
    with pytest.raises(ConfigurationError, match="unique_for"):
        app.job(name="bad", unique=True, unique_for=-1)(lambda: None)

    @app.job(name="ok")
    def ok(): ...

    for bad in (-1, "soon", True, float("nan"), 1e12):
        with pytest.raises(InvalidOption, match="unique_for"):
            ok.using(unique_key="k", unique_for=bad)


def _enqueue_together(db_url: str, tmp_path: Any, key: str, period: str) -> set[str]:
    gate = tmp_path / f"gate-{len(list(tmp_path.glob('gate-*')))}"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, str(APPS / "enqueue_unique.py"), db_url, key, "50", str(gate),
                               period], env=cli_env(db_url), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    wait_for(lambda: len(list(gate.glob("ready-*"))) == 4 or any(p.poll() is not None for p in procs),
             message="four enqueueing processes to be ready")
    (gate / "go").touch()
    outputs = [p.communicate(timeout=scaled(240)) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    return {out.strip() for out, _ in outputs}


@pytest.mark.slow
def test_enqueuers_racing_on_a_finished_or_expired_key_agree(db_url, tmp_path):
    app = Errands(db_url)
    app.migrate()

    @app.job(name="once")
    def once(): ...

    try:
        first = once.using(unique_key="k", unique_for=3600).enqueue()
        drain(app)
        # Within the period: every process gets the finished job back, nothing new is stored.
        assert _enqueue_together(db_url, tmp_path, "k", "3600") == {str(first.id)}
        assert app.store.jobs.list_jobs() == []
        # Period over: the processes race to take the key over, and exactly one job is made.
        _execute(app, "UPDATE {unique_keys} SET expires_at = {now_plus}", -1.0)
        ids = _enqueue_together(db_url, tmp_path, "k", "3600")
        assert len(ids) == 1 and len(ids.pop().split()) == 1
        assert len(app.store.jobs.list_jobs()) == 1
    finally:
        app.store.close()


# ---------------------------------------------------------------------- weighted rate limits
def test_costly_runs_use_several_units_of_the_limit(app):
    @app.job(name="api", rate_limit="5/hour", cost=2)
    def api(n): ...

    api.enqueue(1)                   # 2 units
    api.using(cost=3).enqueue(2)     # 3 units: the window is full
    api.using(cost=1).enqueue(3)     # refused: nothing left this hour
    assert drain(app) == 2
    units = _rows(app, "SELECT units FROM {rate_starts} WHERE name = 'api' ORDER BY id")
    assert [u for (u,) in units] == [2, 3]
    [left] = app.store.jobs.list_jobs()
    assert left.attempts == 0 and left.cost is None
    assert (left.available_at - app.store.now()).total_seconds() > 3000


def test_a_cost_above_the_limit_is_refused(app):
    @app.job(name="api", rate_limit="5/minute")
    def api(): ...

    with pytest.raises(InvalidOption, match="more than its rate limit"):
        api.using(cost=6).enqueue()
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidOption, match="cost"):
            api.using(cost=bad)
    with pytest.raises(ConfigurationError, match="more than the rate limit"):
        app.job(name="big", rate_limit="5/minute", cost=6)(lambda: None)
    assert app.store.jobs.list_jobs() == []


def test_costs_survive_the_dead_letter(app):
    @app.job(name="api", rate_limit="10/hour", max_attempts=1)
    def api():
        raise RuntimeError("no")

    handle = api.using(cost=4).enqueue()
    drain(app)
    assert app.store.jobs.get_failed(handle.id).cost == 4
    app.retry_failed(handle.id)
    assert app.store.jobs.get_job(handle.id).cost == 4


# ---------------------------------------------------------------------- labels
def test_labels_are_stored_with_the_job_its_dead_letter_entry_and_its_result(app):
    @app.job(name="invoice", max_attempts=1)
    def invoice(n):
        if n < 0:
            raise ValueError("negative")
        return n

    waiting = invoice.using(label="Invoice #42", delay=3600).enqueue(42)
    assert app.store.jobs.get_job(waiting.id).label == "Invoice #42"
    kept = invoice.using(label="Invoice #43", keep_result=True).enqueue(43)
    dead = invoice.using(label="Invoice #-1").enqueue(-1)
    [prepared] = app.enqueue_many([invoice.using(label="Invoice #44", delay=3600).prepare(44)])
    drain(app)
    assert app.store.features.get_result(kept.id).label == "Invoice #43"
    assert app.store.jobs.get_failed(dead.id).label == "Invoice #-1"
    assert app.store.jobs.get_job(prepared.id).label == "Invoice #44"
    app.retry_failed(dead.id)
    assert app.store.jobs.get_job(dead.id).label == "Invoice #-1"
    assert waiting.cancel() == "cancelled"
    assert app.store.features.get_result(waiting.id).label == "Invoice #42"


def test_bad_labels_are_refused_with_a_clear_error(app):
    @app.job(name="x")
    def x(): ...

    for bad in ("a" * 256, "nul\0", "\ud800", 42, b"bytes"):
        with pytest.raises(InvalidOption, match="label must be a string of at most 255"):
            x.using(label=bad)
    assert x.using(label="é" * 255).enqueue() is not None
    assert x.using(label="").enqueue() is not None


def test_plain_jobs_keep_the_fast_insert(app):
    @app.job(name="plain")
    def plain(n): ...

    @app.job(name="costed", rate_limit="5/s", cost=1)
    def costed(): ...

    # The store's own test for the fast insert: the fields after run_at all at their defaults.
    assert plain.prepare(1).is_plain
    assert costed.prepare().is_plain  # a cost of 1 is no cost


@pytest.fixture
def v3_db(db_url):
    """A database at schema version 3 holding a waiting job, a dead job, a result and a unique key."""
    from errands.store import open_store

    old = open_store(db_url)
    try:
        assert old.migrate(to=3) == [1, 2, 3]
        q = old.dialect.q
        # run_unchecked: the store's run() would upgrade (SQLite) or refuse a version 3 schema.
        old.db.run_unchecked(lambda cur: [cur.execute(q(sql)) for sql in (
            "INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, available_at, created_at, "
            "unique_key) VALUES ('default', 'old', '{{\"args\":[],\"kwargs\":{{}}}}', 0, 0, 3, {now}, {now}, 'held')",
            "INSERT INTO {unique_keys} (name, job_id) SELECT 'held', MAX(id) FROM {jobs}",
            "INSERT INTO {failed} (id, queue, name, payload, priority, attempts, max_attempts, created_at, "
            "failed_at, error_type, error_message) VALUES (999, 'default', 'old', '{{\"args\":[],\"kwargs\":{{}}}}', "
            "0, 3, 3, {now}, {now}, 'E', 'm')",
            "INSERT INTO {results} (id, queue, name, state, attempts, finished_at, expires_at) VALUES "
            "(998, 'default', 'old', 'succeeded', 1, {now}, {now})")], write=True)
    finally:
        old.close()
    return db_url


def test_version_4_upgrades_a_populated_version_3_database(v3_db):
    app = Errands(v3_db)

    @app.job(name="old", max_attempts=1)
    def old(): ...

    try:
        applied = app.migrate()
        assert applied[0] == 4 and applied == sorted(applied)  # version 4, then any later ones
        assert app.store.current_version() == app.store.dialect.schema_version
        [job] = app.store.jobs.list_jobs()
        assert job.label is None and job.cost is None
        assert app.store.jobs.get_failed(999).label is None and app.store.jobs.errors(999) == []
        assert old.using(unique_key="held").enqueue().id == job.id  # the old key still holds
        assert drain(app) == 1
        assert app.retry_failed(999) == [999]
    finally:
        app.store.close()
