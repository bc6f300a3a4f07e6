"""Jobs for the many-process feature tests (tests/features/test_many_processes.py).

Handlers write what happened into ``feature_events``: the job's name, its group,
and when it started and ended by this host's clock (all processes share it).
"""

from __future__ import annotations

import os
import time

from errands import Errands, current_job

app = Errands(lease=float(os.environ.get("ERRANDS_TEST_LEASE", "30")))

TYPES = {"sqlite": ("INTEGER", "REAL"), "postgresql": ("BIGINT", "DOUBLE PRECISION"), "mysql": ("BIGINT", "DOUBLE")}


def ensure_events_table() -> None:
    integer, real = TYPES[app.store.dialect.name]
    app.store.db.run(lambda cur: cur.execute(
        f"CREATE TABLE IF NOT EXISTS feature_events (job_id {integer} PRIMARY KEY, name VARCHAR(100) NOT NULL, "
        f"grp VARCHAR(100), started_at {real} NOT NULL, ended_at {real}, pid INTEGER NOT NULL)"))


def _record(started: float, group: str | None = None) -> None:
    ctx = current_job()
    p = app.store.dialect.placeholder
    app.store.db.run(lambda cur: cur.execute(
        f"INSERT INTO feature_events (job_id, name, grp, started_at, ended_at, pid) VALUES ({p}, {p}, {p}, {p}, "
        f"{p}, {p})", (ctx.id, ctx.name, group, started, time.time(), os.getpid())))


@app.job(name="limited", rate_limit="5/1s", queue="limited")
def limited(n: int) -> None:
    _record(time.time())


@app.job(name="burst", rate_limit="20/s", queue="burst")
def burst(n: int) -> None:
    """A partner API's 20 calls a second (issue 26): the handler's first line is its start."""
    _record(time.time())


@app.job(name="weighted", rate_limit="10/1s", queue="weighted", cost=2)
def weighted(n: int) -> None:
    _record(time.time())


@app.job(name="keyed", rate_limit="3/2s", rate_limit_key=lambda customer, n: f"customer:{customer}", queue="keyed")
def keyed(customer: int, n: int) -> None:
    """At most 3 starts per 2 seconds per customer (each customer its own window)."""
    _record(time.time(), f"customer:{customer}")


@app.job(name="grouped", concurrency_limit=2, concurrency_key=lambda customer, n: f"customer:{customer}",
         queue="grouped")
def grouped(customer: int, n: int) -> None:
    started = time.time()
    time.sleep(0.15)
    _record(started, f"customer:{customer}")


@app.job(name="solo", concurrency_limit=1, queue="solo")
def solo(n: int) -> None:
    """Short runs of a group of one: its slot changes hands often (the wake-up path)."""
    started = time.time()
    time.sleep(0.02)
    _record(started, "solo")


@app.job(name="plain")
def plain(n: int) -> None:
    _record(time.time())


@app.job(name="part")
def part(n: int) -> None:
    _record(time.time())


@app.job(name="batch_done")
def batch_done() -> None:
    _record(time.time(), f"batch:{current_job().batch_id}")


@app.job(name="wf_part")
def wf_part(n: int) -> int:
    """A workflow step: its result is n squared."""
    started = time.time()
    _record(started, f"wf_part:{n}")
    return n * n


@app.job(name="wf_total")
def wf_total(values: list[int], tag: str) -> int:
    """A fan-in step: the sum of the results it receives."""
    _record(time.time(), tag)
    return sum(values)


def ensure_runs_table() -> None:
    """``feature_runs``: one row per run, so a job that runs twice (its worker was killed after
    the run, before it settled) shows both runs."""
    integer, real = TYPES[app.store.dialect.name]
    auto = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgresql": "BIGSERIAL PRIMARY KEY",
            "mysql": "BIGINT AUTO_INCREMENT PRIMARY KEY"}[app.store.dialect.name]
    app.store.db.run(lambda cur: cur.execute(
        f"CREATE TABLE IF NOT EXISTS feature_runs (id {auto}, job_id {integer} NOT NULL, "
        f"started_at {real} NOT NULL, ended_at {real} NOT NULL)"))


@app.job(name="wf_slow")
def wf_slow(n: int) -> int:
    """A workflow step that takes a moment; each run is recorded in ``feature_runs``."""
    started = time.time()
    time.sleep(0.02)
    p = app.store.dialect.placeholder
    job_id = current_job().id
    app.store.db.run(lambda cur: cur.execute(
        f"INSERT INTO feature_runs (job_id, started_at, ended_at) VALUES ({p}, {p}, {p})",
        (job_id, started, time.time())))
    return n


@app.job(name="wf_sum")
def wf_sum(values: list[int]) -> int:
    """A fan-in step recorded in ``feature_runs`` (it may run twice under chaos)."""
    started = time.time()
    p = app.store.dialect.placeholder
    job_id = current_job().id
    app.store.db.run(lambda cur: cur.execute(
        f"INSERT INTO feature_runs (job_id, started_at, ended_at) VALUES ({p}, {p}, {p})",
        (job_id, started, time.time())))
    return sum(values)


@app.job(name="tenant_work", queue="fair", fairness_key=lambda tenant, n: tenant)
def tenant_work(tenant: str, n: int) -> None:
    """A tenant's job: the claim takes turns between tenants (fairness_key)."""
    _record(time.time(), tenant)
