"""Periodic slots, admission by the database, cron and rate-limit parsing, the feature CLI,
and the upgrade of a version 1 schema."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from helpers import drain, run_cli

from errands import ConfigurationError, Cron, Errands, JobState
from errands.core.limits import parse_rate_limit
from errands.core.rows import Limit


@pytest.fixture
def migrated(db_url):
    app = Errands(db_url)
    app.migrate()
    app.store.close()
    return db_url


def test_a_new_schedule_starts_with_its_next_slot_and_runs_a_missed_slot_once(app):
    @app.periodic("*/5 * * * *", name="report")
    def report(): ...

    schedule = app.schedules["report"]
    t0 = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)
    store = app.store
    assert store.features.claim_periodic_slot("report", t0, schedule.prepare("a")) is None  # first sight: recorded only
    first = store.features.claim_periodic_slot("report", t0 + timedelta(minutes=5), schedule.prepare("b"))
    assert first is not None
    assert store.features.claim_periodic_slot("report", t0 + timedelta(minutes=5), schedule.prepare("b")) is None  # noqa: E501 - once
    assert store.features.claim_periodic_slot("report", t0, schedule.prepare("a")) is None  # never backwards
    # Down for an hour: the scheduler asks for the latest slot only, which runs once.
    late = store.features.claim_periodic_slot("report", t0 + timedelta(hours=1), schedule.prepare("c"))
    assert late is not None and store.features.periodic_slots()["report"] == t0 + timedelta(hours=1)
    assert len(store.jobs.list_jobs()) == 2


def test_scheduler_enqueues_from_a_worker(app):
    import threading

    from errands.worker.scheduler import Scheduler

    @app.periodic("* * * * * *", name="every_second")
    def every_second(): ...

    scheduler = Scheduler(app, threading.Event())
    scheduler.tick()  # first sight
    assert app.store.jobs.list_jobs() == []
    scheduler.seen.clear()
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q("UPDATE {periodic} SET last_slot = {now_plus}"), (-10.0,)),  # noqa: E501
                  write=True)
    scheduler.tick()
    assert [r.name for r in app.store.jobs.list_jobs()] == ["every_second"]


def test_a_dead_workers_concurrency_slot_comes_back_when_its_lease_expires(app):
    @app.job(name="g", concurrency_limit=1)
    def g(): ...

    g.enqueue()
    g.enqueue()
    limit = [Limit("concurrency", "g", 1)]
    [first] = app.store.jobs.claim("dead-worker", ["default"], 1, lease=1)
    assert app.store.features.admit("dead-worker", [(first.id, limit)]) == ([first.id], [])
    [second] = app.store.jobs.claim("live-worker", ["default"], 1, lease=30)
    assert app.store.features.admit("live-worker", [(second.id, limit)]) == ([], [second.id])  # the slot is taken
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(
        "UPDATE {jobs} SET available_at = {now}, reserved_until = {now_plus} WHERE id = {p}"),
        (-1.0, first.id)), write=True)  # the dead worker's lease ran out
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q("UPDATE {jobs} SET available_at = {now} WHERE id = {p}"),  # noqa: E501
                                          (second.id,)), write=True)
    [again] = app.store.jobs.claim("live-worker", ["default"], 1, lease=30)
    assert again.id == second.id and app.store.features.admit("live-worker", [(again.id, limit)]) == ([again.id], [])


def test_refused_runs_get_their_attempt_back(app):
    @app.job(name="r", rate_limit="1/hour")
    def r(): ...

    a, b = r.enqueue(), r.enqueue()
    drain(app)
    row = app.store.jobs.get_job(b.id)
    assert a.status() is JobState.FINISHED and row.attempts == 0 and row.reserved_by is None
    assert (row.available_at - app.store.now()).total_seconds() > 3000  # due when the window frees a start


@pytest.mark.parametrize("spec, expected", [("10/minute", (10, 60.0)), ("5/s", (5, 1.0)), ("100/30s", (100, 30.0)),
                                            ("3/day", (3, 86400.0)), ("2 / 0.5 seconds", (2, 0.5))])
def test_rate_limit_specs(spec, expected):
    limit = parse_rate_limit(spec)
    assert (limit.count, limit.period) == expected


@pytest.mark.parametrize("spec", ["ten/minute", "5", "0/s", "5/fortnight", ""])
def test_bad_rate_limit_specs_are_refused(spec):
    with pytest.raises(ConfigurationError):
        parse_rate_limit(spec)


def test_cron_fields_time_zones_and_daylight_saving():
    utc = timezone.utc
    assert Cron("*/15 9-17 * * mon-fri").next_after(datetime(2026, 12, 4, 17, 50, tzinfo=utc)) == \
        datetime(2026, 12, 7, 9, 0, tzinfo=utc)  # Friday evening -> Monday morning
    assert Cron("0 0 29 2 *").next_after(datetime(2026, 1, 1, tzinfo=utc)) == datetime(2028, 2, 29, tzinfo=utc)
    berlin = Cron("30 2 * * *", "Europe/Berlin")
    # 02:30 does not exist on 29 March 2026 (clocks jump to 03:00): that day is skipped.
    assert berlin.next_after(datetime(2026, 3, 28, 12, tzinfo=utc)) == datetime(2026, 3, 30, 0, 30, tzinfo=utc)
    # 02:30 happens twice on 25 October 2026: it runs once, at the first.
    assert berlin.next_after(datetime(2026, 10, 24, 12, tzinfo=utc)) == datetime(2026, 10, 25, 0, 30, tzinfo=utc)
    assert berlin.next_after(datetime(2026, 10, 25, 0, 30, tzinfo=utc)) == datetime(2026, 10, 26, 1, 30, tzinfo=utc)
    # An hour field of "*" runs at both: 00:30 UTC (02:30 CEST), 01:30 UTC (02:30 CET), in UTC order.
    hourly = Cron("30 * * * *", "Europe/Berlin")
    assert hourly.next_after(datetime(2026, 10, 25, 0, 30, tzinfo=utc)) == datetime(2026, 10, 25, 1, 30, tzinfo=utc)
    assert hourly.last_at_or_before(datetime(2026, 10, 25, 1, 29, tzinfo=utc)) == \
        datetime(2026, 10, 25, 0, 30, tzinfo=utc)
    assert Cron("@hourly").last_at_or_before(datetime(2026, 12, 2, 17, 3, tzinfo=utc)) == \
        datetime(2026, 12, 2, 17, 0, tzinfo=utc)
    assert Cron("*/10 * * * * *").next_after(datetime(2026, 12, 2, 17, 3, 21, tzinfo=utc)) == \
        datetime(2026, 12, 2, 17, 3, 30, tzinfo=utc)
    # When both day fields are set, either matches (as in cron).
    either = Cron("0 0 13 * fri")
    assert either.next_after(datetime(2026, 12, 1, tzinfo=utc)) == datetime(2026, 12, 4, tzinfo=utc)


@pytest.mark.parametrize("expression", ["* * *", "61 * * * *", "* * * * mon-xyz", "*/0 * * * *", "5-1 * * * *"])
def test_bad_cron_expressions_are_refused(expression):
    with pytest.raises(ConfigurationError):
        Cron(expression)


def test_unknown_time_zone_is_refused():
    with pytest.raises(ConfigurationError):
        Cron("* * * * *", "Mars/Olympus_Mons")


def test_queue_and_job_commands(migrated):
    import json

    app = Errands(migrated)
    from errands.core.rows import NewJob

    [waiting, other] = app.store.jobs.enqueue([NewJob("sample_jobs.record", "default", '{"args":[],"kwargs":{}}'),
                                          NewJob("sample_jobs.record", "default", '{"args":[],"kwargs":{}}')])
    assert run_cli(migrated, "queue", "pause", "mails").returncode == 0
    listing = run_cli(migrated, "queue", "list")
    assert "mails" in listing.stdout and "paused" in listing.stdout
    assert run_cli(migrated, "queue", "resume", "mails").returncode == 0
    assert app.paused_queues() == []
    shown = run_cli(migrated, "job", "show", str(waiting), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["state"] == "ready"
    cancelled = run_cli(migrated, "job", "cancel", str(waiting))
    assert cancelled.returncode == 0 and "cancelled" in cancelled.stdout
    assert json.loads(run_cli(migrated, "job", "show", str(waiting), "--json").stdout)["state"] == "cancelled"
    missing = run_cli(migrated, "job", "show", "999999")
    assert missing.returncode == 1 and "never existed" in missing.stderr
    assert run_cli(migrated, "batch", "12345").returncode == 1
    assert other != waiting
    app.store.close()


def test_a_version_1_schema_is_upgraded_in_place(db_url):
    from errands.store import open_store

    old = open_store(db_url)
    assert old.migrate(to=1) == [1]
    # run_unchecked: the store's run() would upgrade (SQLite) or refuse a version 1 schema.
    old.db.run_unchecked(lambda cur: cur.execute(old.dialect.q(
        "INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, available_at, created_at) "
        "VALUES ('default', 'u', {p}, 0, 0, 3, {now}, {now})"), ('{"args":[],"kwargs":{}}',)))
    old.close()
    app = Errands(db_url)

    @app.job(name="u")
    def u(): ...

    assert app.migrate() == [v for v, _ in app.store.dialect.migrations()][1:]
    assert app.store.current_version() == app.store.dialect.schema_version
    assert drain(app) == 1
    u.using(unique_key="k").enqueue()
    assert u.using(unique_key="k").enqueue().id == app.store.jobs.list_jobs()[0].id
    app.store.close()
