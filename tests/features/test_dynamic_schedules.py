"""Schedules stored in the database (issue 27, part 1): added, edited, paused, resumed and deleted while
schedulers run, audited; claims refused under a stale version; rows that cannot be schedules skipped;
catch-up policies; and real zones' 2026 daylight-saving days walked with the test plugin's database clock.

(Three scheduler processes picking up an in-place edit: test_many_processes.py.)"""

from __future__ import annotations

import logging
import threading
from datetime import date, datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from helpers import scaled, wait_for

from errands import ConfigurationError, Errands
from errands.core.schedules import ScheduleRow
from errands.services import schedules as svc
from errands.testing.jobs import Jobs
from errands.worker.runner import Worker, WorkerSettings
from errands.worker.scheduler import Scheduler


def _jobs_of(app: Errands) -> None:
    @app.job(name="sched.stamp")
    def stamp(label: str, n: int = 0) -> None: ...

    @app.periodic("0 * * * *", name="sched.hourly")
    def hourly() -> None: ...


def _slots(app: Errands) -> dict[str, list[tuple[datetime, Any]]]:
    """Each schedule's enqueued runs: (slot, arguments), by the unique key ``periodic:<schedule>:<slot>``."""
    out: dict[str, list[tuple[datetime, Any]]] = {}
    for row in app.store.jobs.list_jobs(limit=1000):
        if row.unique_key and row.unique_key.startswith("periodic:"):
            _, name, slot = row.unique_key.split(":", 2)
            out.setdefault(name, []).append((datetime.fromisoformat(slot), row.payload))
    return {k: sorted(v, key=lambda s: s[0]) for k, v in out.items()}


RAW = {"job": "sched.stamp", "cron": "* * * * * *", "timezone": None, "payload": '{"args":["x"],"kwargs":{}}',
       "queue": None, "priority": None, "catch_up": "latest", "catch_up_limit": None}


def test_stored_schedules_are_added_edited_paused_and_deleted_with_audit(app, caplog):
    _jobs_of(app)
    view = svc.add_schedule(app, "ann", "nightly", "sched.stamp", "30 2 * * *", timezone="Europe/Berlin",
                            args=["a"], queue="night", priority=5)
    assert (view.source, view.version, view.timezone, view.queue, view.priority, len(view.next)) == (
        "database", 1, "Europe/Berlin", "night", 5, 3)
    assert view.arguments == {"args": ["a"], "kwargs": {}}
    refusals = {
        "defined in the code": dict(name="sched.hourly", job="sched.stamp", cron="* * * * *"),
        "no job named 'nope' is registered": dict(name="x", job="nope", cron="* * * * *"),
        "cron minute": dict(name="x", job="sched.stamp", cron="61 * * * *"),
        "unknown time zone": dict(name="x", job="sched.stamp", cron="* * * * *", timezone="Mars/Olympus"),
        "sched.stamp": dict(name="x", job="sched.stamp", cron="* * * * *", args=[]),  # label is missing
        "catch_up must be one of": dict(name="x", job="sched.stamp", cron="* * * * *", args=["a"], catch_up="some"),
        "exists": dict(name="nightly", job="sched.stamp", cron="* * * * *", args=["a"]),
        "a schedule's name": dict(name="no spaces", job="sched.stamp", cron="* * * * *"),
    }
    for message, values in refusals.items():
        with pytest.raises(ConfigurationError, match=message):
            svc.add_schedule(app, "ann", **values)
    with pytest.raises(ConfigurationError, match="no setting 'colour'"):
        svc.edit_schedule(app, "ann", "nightly", colour="red")
    with pytest.raises(svc.ScheduleNotFound, match="change it there"):
        svc.edit_schedule(app, "ann", "sched.hourly", args=[])

    edited = svc.edit_schedule(app, "bob", "nightly", args=["b"], kwargs={"n": 2})
    assert edited.version == 2 and edited.arguments == {"args": ["b"], "kwargs": {"n": 2}}
    # A scheduler that read version 1 cannot claim a slot any more: it reads again, then claims.
    store, later = app.store, app.store.now() + timedelta(hours=1)
    job = store.schedules.rows()[0]
    assert store.schedules.claim_slots("nightly", [(later, None)], version=job.version - 1) is None
    assert store.schedules.claim_slots("nightly", [(later, None)], version=job.version) == []
    assert store.schedules.claim_slots("nightly", [(later, None)], version=job.version) == []  # once

    paused = svc.set_schedule_paused(app, "ann", "nightly", True)
    assert (paused.paused, paused.version, paused.next) == (True, 3, [])
    assert svc.set_schedule_paused(app, "ann", "nightly", False).version == 4
    views = svc.schedules_view(app)
    assert [(v.name, v.source) for v in views] == [("sched.hourly", "code"), ("nightly", "database")]

    # Rows another program wrote that cannot be schedules: logged and skipped, the others still run.
    for name, bad in (("bad-cron", {"cron": "99 * * * *"}), ("bad-job", {"job": "nope"}),
                      ("bad-args", {"payload": "not json"}), ("bad-catch-up", {"catch_up": "sometimes"}),
                      ("good", {})):
        store.schedules.add(name, {**RAW, **bad})
    scheduler = Scheduler(app, threading.Event(), clock=lambda: store.now() + timedelta(seconds=2))
    with caplog.at_level(logging.WARNING, "errands.scheduler"):
        scheduler.tick()
    assert [n for n in _slots(app)] == ["good"]
    assert sorted(r.args[0] for r in caplog.records if "skipped" in r.getMessage()) == [
        "bad-args", "bad-catch-up", "bad-cron", "bad-job"]
    problems = {v.name: v.problem for v in svc.schedules_view(app) if v.problem}
    assert sorted(problems) == ["bad-args", "bad-catch-up", "bad-cron", "bad-job"]

    assert svc.delete_schedule(app, "ann", "nightly") is True
    assert "nightly" not in store.features.periodic_slots()
    with pytest.raises(svc.ScheduleNotFound):
        svc.delete_schedule(app, "ann", "nightly")
    audit = [(a.actor, a.action, a.target) for a in store.accounts.audit_log(10)][::-1]
    assert audit == [("ann", "schedule-add", "schedule nightly"), ("bob", "schedule-edit", "schedule nightly"),
                     ("ann", "schedule-pause", "schedule nightly"), ("ann", "schedule-resume", "schedule nightly"),
                     ("ann", "schedule-delete", "schedule nightly")]


# ---------------------------------------------------------------------------------- the plugin's clock
plugin_app = Errands()


@plugin_app.job(name="sched.run")
def run(label: str) -> None: ...


@plugin_app.periodic("*/10 * * * *", name="sched.code_all", catch_up="all", catch_up_limit=3)
def code_all() -> None: ...


@pytest.fixture
def clocked(errands_app_factory):  # type: ignore[no-untyped-def]
    app = errands_app_factory(plugin_app)
    return app, errands_app_factory.clock(app), Jobs(app)


def test_catch_up_none_latest_and_all_and_an_edit_picked_up_at_the_next_tick(clocked):
    app, clock, jobs = clocked
    clock.freeze("2026-06-01T12:00:00+00:00")
    for mode in ("none", "latest", "all"):
        svc.add_schedule(app, "ops", mode, "sched.run", "*/10 * * * *", args=[mode], catch_up=mode,
                         catch_up_limit=3 if mode == "all" else None)
    assert jobs.run_schedules() == []  # 12:00 is before or at each start
    clock.advance(10 * 60 + 5)
    assert sorted(j.args[0] if j.args else j.name for j in jobs.run_schedules()) == [
        "all", "latest", "none", "sched.code_all"]
    clock.advance(55 * 60)  # 13:05:05: 12:20 to 13:00 passed with no scheduler running
    other = Scheduler(app, threading.Event(), clock=app.store.now)  # a second worker's, waking up too
    other.read_stored()
    jobs.run_schedules()
    other.tick()
    jobs.run_schedules()
    ran = {name: [s.strftime("%H:%M") for s, _ in slots] for name, slots in _slots(app).items()}
    assert ran == {"none": ["12:10"],  # 13:00 is 5 minutes old: skipped
                   "latest": ["12:10", "13:00"],
                   "all": ["12:10", "12:40", "12:50", "13:00"],  # at most 3 of the 5 missed, once each
                   "sched.code_all": ["12:10", "12:40", "12:50", "13:00"]}

    svc.edit_schedule(app, "ops", "latest", args=["edited"])  # in place: same cron, new arguments
    svc.set_schedule_paused(app, "ops", "none", True)
    clock.advance(5 * 60)  # 13:10:05
    assert sorted(j.args[0] for j in jobs.run_schedules() if j.args) == ["all", "edited"]
    svc.set_schedule_paused(app, "ops", "none", False)
    clock.advance(10 * 60)  # 13:20:05: resumed, it runs again (13:10 passed while paused: never)
    assert sorted(j.args[0] for j in jobs.run_schedules() if j.args) == ["all", "edited", "none"]
    assert [s.strftime("%H:%M") for s, _ in _slots(app)["none"]] == ["12:10", "13:20"]


DST_DAYS = [
    # zone, 2026 transition day, runs of the 01:30 and 02:30 schedules, slots of an hourly one ("30 * * * *")
    ("America/New_York", date(2026, 3, 8), 1, 0, 23),   # 02:00 EST -> 03:00 EDT: 02:30 does not exist
    # 02:00 EDT -> 01:00 EST: 01:30 happens twice, runs once; the hourly one runs at both (25 real hours)
    ("America/New_York", date(2026, 11, 1), 1, 1, 25),
    ("Europe/Berlin", date(2026, 3, 29), 1, 0, 23),     # 02:00 CET -> 03:00 CEST: 02:30 does not exist
    # 03:00 CEST -> 02:00 CET: 02:30 happens twice, runs once; the hourly one runs at both
    ("Europe/Berlin", date(2026, 10, 25), 1, 1, 25),
    ("Europe/Istanbul", date(2026, 10, 25), 1, 1, 24),  # no daylight saving since 2016: an ordinary day
]


def test_schedules_on_the_2026_daylight_saving_days_of_real_zones(clocked):
    """Each day walked in 15-minute steps of the frozen database clock; each schedule added at the
    day's local midnight (it starts with its next slot)."""
    app, clock, _ = clocked
    scheduler = Scheduler(app, threading.Event(), clock=app.store.now)  # what Jobs.run_schedules ticks
    for zone, day, at_0130, at_0230, hourly in DST_DAYS:
        tz = ZoneInfo(zone)
        start = datetime.combine(day, time(0), tz).astimezone(timezone.utc)
        end = datetime.combine(day + timedelta(days=1), time(0), tz).astimezone(timezone.utc)
        clock.freeze(start)
        tag = f"{zone.split('/')[1]}-{day:%m%d}"
        for name, cron in (("0130", "30 1 * * *"), ("0230", "30 2 * * *"), ("hourly", "30 * * * *")):
            svc.add_schedule(app, "ops", f"{tag}-{name}", "sched.run", cron, timezone=zone, args=[name])
        while clock.now() < end:
            scheduler.tick()
            clock.advance(15 * 60)
        slots = _slots(app)
        ran = {name: [s.astimezone(tz) for s, _ in slots.get(f"{tag}-{name}", [])] for name in ("0130", "0230")}
        assert (len(ran["0130"]), len(ran["0230"]), len(slots[f"{tag}-hourly"])) == (at_0130, at_0230, hourly), \
            (zone, day, ran)
        assert all(s.date() == day for runs in ran.values() for s in runs)
        if ran["0130"]:  # the first 01:30 when there are two: daylight time's (the one before the change)
            assert ran["0130"][0].strftime("%H:%M") == "01:30"
            assert ran["0130"][0].utcoffset() == datetime.combine(day, time(1, 30), tz).utcoffset()
        for name in ("0130", "0230", "hourly"):
            svc.delete_schedule(app, "ops", f"{tag}-{name}")
        clock.unfreeze()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_worker_of_an_app_without_code_schedules_runs_a_stored_one(app):
    ran: list[str] = []

    @app.job(name="sched.only")
    def only(label: str) -> None:
        ran.append(label)

    svc.add_schedule(app, "ops", "every-second", "sched.only", "* * * * * *", args=["stored"])
    worker = Worker(app, WorkerSettings(queues=("default",), concurrency=1, sleep=0.05, listen=False, prefetch=0))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: ran, timeout=scaled(30), message="a run of the stored schedule")
    finally:
        worker.request_stop()
        thread.join(scaled(30))
    assert ran[0] == "stored"


def test_a_schedule_row_is_a_value_with_its_definition():
    row = ScheduleRow("a", "j", "* * * * *", None, "{}", None, None, "latest", None, False, 1)
    assert row.definition == ("a", "j", "* * * * *", None, "{}", None, None, "latest", None, False, 1)
