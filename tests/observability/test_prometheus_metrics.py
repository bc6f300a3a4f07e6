"""Prometheus: the database's figures as a collector (dashboard, own registry, `errands metrics`) and the
workers' run counters through hooks, including prometheus_client's multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from helpers import scaled, wait_for
from obs_helpers import THREE, drain, free_port, scrape
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from errands import Errands, JobCancelled, Retry, current_job
from errands.contrib import prometheus
from errands.dashboard import create_dashboard
from errands.metrics import ErrandsCollector, render
from errands.worker.maintenance import end_overdue

APPS = Path(__file__).parent / "apps"
SRC = Path(__file__).parent.parent.parent / "src"

FAMILIES = ["errands_jobs", "errands_oldest_ready_seconds", "errands_queue_paused", "errands_succeeded_last_hour",
            "errands_failed_last_hour", "errands_workers", "errands_backlog_jobs", "errands_backlog_age_seconds",
            "errands_database_up"]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_the_collector_reads_queues_throughput_and_workers(app: Errands) -> None:
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    @app.job(name="boom", max_attempts=1)
    def boom() -> None:
        raise RuntimeError("no")

    mail.enqueue("a")
    mail.enqueue("b")
    mail.using(delay=3600).enqueue("later")
    boom.enqueue()
    app.pause_queue("mails")
    drain(app)  # the default queue: boom fails into the dead letter; the stats are flushed on exit

    registry = CollectorRegistry()
    registry.register(ErrandsCollector(app))
    value = registry.get_sample_value
    assert value("errands_jobs", {"queue": "mails", "state": "ready"}) == 2
    assert value("errands_jobs", {"queue": "mails", "state": "delayed"}) == 1
    assert value("errands_jobs", {"queue": "default", "state": "failed"}) == 1
    # The oldest open transaction besides errands' own: none here (0); SQLite has none to report.
    transaction = value("errands_oldest_transaction_seconds")
    assert transaction is None if app.store.dialect.name == "sqlite" else 0.0 <= transaction < 60, transaction
    assert value("errands_jobs", {"queue": "default", "state": "ready"}) == 0
    assert value("errands_queue_paused", {"queue": "mails"}) == 1
    assert value("errands_queue_paused", {"queue": "default"}) == 0
    assert value("errands_oldest_ready_seconds", {"queue": "mails"}) >= 0
    assert value("errands_failed_last_hour") == 1 and value("errands_succeeded_last_hour") == 0
    assert value("errands_workers", {"alive": "true"}) == 0  # the burst worker unregistered on exit
    assert value("errands_database_up") == 1
    text = generate_latest(registry).decode()
    server = [] if app.store.dialect.name == "sqlite" else ["errands_oldest_transaction_seconds"]
    assert [f.name for f in text_string_to_metric_families(text)] == FAMILIES[:-1] + server + FAMILIES[-1:]


def test_registering_does_not_touch_the_database_and_a_dead_one_reports_down(tmp_path: Path) -> None:
    app = Errands("postgresql://errands@127.0.0.1:1/nothing_listens_here")
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ErrandsCollector(app))  # describe(): names only, no connection attempt
    assert app._store is None
    assert registry.get_sample_value("errands_database_up") == 0
    assert registry.get_sample_value("errands_jobs", {"queue": "default", "state": "ready"}) is None


def test_the_dashboard_serves_it_in_both_formats(app: Errands) -> None:
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    mail.enqueue("a")
    with TestClient(create_dashboard(app, open_access=True), base_url="https://testserver") as web:
        plain = web.get("/metrics")
        assert plain.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert 'errands_jobs{queue="mails",state="ready"} 1.0' in plain.text
        assert "# TYPE errands_workers gauge" in plain.text
        open_metrics = web.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.rstrip().endswith("# EOF")
    assert samples(render(app)[0].decode()).keys() == samples(plain.text).keys()  # ages move on


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_worker_counters_move_when_jobs_run(app: Errands) -> None:
    registry = CollectorRegistry()
    metrics = prometheus.instrument(app, registry=registry)
    value = registry.get_sample_value

    @app.job(name="ok", queue="q")
    def ok(n: int) -> int:
        return n

    @app.job(name="flaky", queue="q", max_attempts=3, backoff=0)
    def flaky() -> None:
        if current_job().attempt < 3:
            raise Retry(0, "not yet")

    @app.job(name="doomed", queue="q", max_attempts=2, backoff=0)
    def doomed() -> None:
        raise ValueError("never")

    @app.job(name="stop", queue="q")
    def stop() -> None:
        raise JobCancelled("asked to stop")

    late = ok.using(expires_at=app.store.now() - timedelta(seconds=1)).prepare(3)
    app.enqueue_many([ok.prepare(1), ok.prepare(2), flaky.prepare(), doomed.prepare(), stop.prepare(), late])
    assert value("errands_enqueued_total", {"job": "ok", "queue": "q"}) == 3
    assert value("errands_enqueued_total", {"job": "doomed", "queue": "q"}) == 1
    drain(app)
    assert end_overdue(app) == 1 and value("errands_expired_total", {"job": "ok", "queue": "q"}) == 1

    def runs(job: str, outcome: str) -> float | None:
        return value("errands_runs_total", {"job": job, "queue": "q", "outcome": outcome})

    assert runs("ok", "succeeded") == 2 and runs("ok", "failed") is None
    assert runs("flaky", "failed") == 2 and runs("flaky", "succeeded") == 1
    assert runs("doomed", "failed") == 2 and runs("stop", "cancelled") == 1
    assert value("errands_retries_total", {"job": "flaky", "queue": "q"}) == 2
    assert value("errands_retries_total", {"job": "doomed", "queue": "q"}) == 1
    assert value("errands_dead_total", {"job": "doomed", "queue": "q"}) == 1
    assert value("errands_dead_total", {"job": "flaky", "queue": "q"}) is None
    assert value("errands_run_duration_seconds_count", {"job": "ok", "queue": "q"}) == 2
    assert value("errands_run_duration_seconds_bucket", {"job": "ok", "queue": "q", "le": "+Inf"}) == 2
    assert metrics.runs is prometheus.metrics_for(registry).runs  # a second app in the process shares them


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_errands_metrics_serves_the_database_and_the_worker_processes(db_url: str, tmp_path: Path) -> None:
    """Two worker processes count into PROMETHEUS_MULTIPROC_DIR; `errands metrics` serves their sum
    beside the database's figures."""
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    env = {"ERRANDS_DATABASE_URL": db_url, "ERRANDS_APP": "traced_jobs:app", "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
           "PYTHONPATH": f"{APPS}{os.pathsep}{SRC}", "PATH": "/usr/bin:/bin"}
    enqueue = Errands(db_url)
    enqueue.job(name="traced.work", queue="reports")(lambda n, label="": n)
    enqueue.job(name="traced.fail", queue="reports", max_attempts=2)(lambda n: None)
    enqueue.migrate()
    enqueue.enqueue_many([enqueue.registry["traced.work"].prepare(n) for n in range(40)]
                         + [enqueue.registry["traced.fail"].prepare(1)])
    enqueue.enqueue("traced.work", [0], delay=3600)
    enqueue.store.close()
    worker = subprocess.run([sys.executable, "-m", "errands", "worker", "--burst", "-p", "2", "-q", "reports"],
                            env=env, capture_output=True, text=True, timeout=scaled(120))
    assert worker.returncode == 0, worker.stderr
    assert len(list(prom_dir.glob("counter_*.db"))) >= 1

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "errands", "metrics", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        text = wait_for(lambda: scrape(f"http://127.0.0.1:{port}/metrics") or server.poll() is not None,
                        message="`errands metrics` to answer")
        assert isinstance(text, str), server.stderr.read()  # (True: the server exited instead)
    finally:
        server.terminate()
        server.wait(timeout=scaled(30))
        server.stderr.close()  # type: ignore[union-attr]
    found = samples(text)
    assert found[("errands_runs_total", (("job", "traced.work"), ("outcome", "succeeded"), ("queue", "reports")))] == 40
    assert found[("errands_runs_total", (("job", "traced.fail"), ("outcome", "failed"), ("queue", "reports")))] == 2
    assert found[("errands_dead_total", (("job", "traced.fail"), ("queue", "reports")))] == 1
    assert found[("errands_jobs", (("queue", "reports"), ("state", "delayed")))] == 1
    assert found[("errands_jobs", (("queue", "reports"), ("state", "failed")))] == 1
    assert found[("errands_database_up", ())] == 1
    assert server.returncode == 0
