"""Expiry and deadlines across retries on every backend (issue 25, points 1 and 6): an expired job
never runs, ends as expired (its state, the job page's read model, ``errands job show``, the hook),
counts as failed in its batch; a deadline buries a retry that would start too late with
DeadlineExceeded; and two worker processes racing never start a job after its expiry."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
from click.testing import CliRunner
from helpers import cli_env, scaled, wait_for

from errands import Errands, JobExpired, JobState
from errands.cli import main
from errands.core.rows import NewJob
from errands.services.operator import job_detail
from errands.worker.maintenance import end_overdue


def test_an_expired_job_never_runs_and_ends_as_expired_once(app: Errands) -> None:
    ran: list[int] = []
    heard: list[tuple[int, str]] = []

    @app.job(name="quote", expires_in=3600)
    def quote(n: int) -> None:
        ran.append(n)

    app.hooks.on_expired(lambda job: heard.append((job.id, job.error_type)))
    quote.on_expired(lambda job: heard.append((job.id, "job hook")))
    app.on_dead(lambda job: heard.append((job.id, "on_dead")))
    gone = quote.using(expires_at=app.store.now() - timedelta(seconds=1)).enqueue(1)
    fresh = quote.enqueue(2)
    batch = app.batch([quote.using(expires_at=app.store.now() - timedelta(seconds=1)).prepare(3)])
    assert app.store.jobs.get_job(fresh.id).expires_at > app.store.now() + timedelta(minutes=59)
    app.run_until_empty()
    assert ran == [2]
    assert gone.status() is JobState.EXPIRED, "refused by the claim before the pass ends it"
    assert "no worker will" in job_detail(app, gone.id).to_json()["why"][0]
    assert end_overdue(app) == 2 and end_overdue(app) == 0
    assert sorted(heard) == sorted([(gone.id, "errands.JobExpired"), (gone.id, "job hook"),
                                    (batch.jobs[0].id, "errands.JobExpired"), (batch.jobs[0].id, "job hook")])
    assert gone.status() is JobState.EXPIRED
    with pytest.raises(JobExpired, match="expired before it started"):
        gone.result(timeout=0)
    page = job_detail(app, gone.id).to_json()  # what the job page and GET /api/jobs/{id} show
    assert page["state"] == "expired" and page["error_type"] == "errands.JobExpired"
    assert "not started by its expiry" in page["error_message"]
    shown = CliRunner().invoke(main, ["--database-url", app.store.url, "job", "show", str(gone.id)])
    assert shown.exit_code == 0 and "state: expired" in shown.output, shown.output
    counted = app.batch_status(batch.id)
    assert counted is not None and (counted.done, counted.failed) == (0, 1), "an expired member counts as failed"


def test_a_retry_past_the_deadline_is_buried_as_deadline_exceeded_and_on_dead_hears_it(app: Errands) -> None:
    dead: list[tuple[int, str]] = []

    @app.job(name="charge", max_attempts=5, backoff=lambda attempt: 3600.0, deadline=60)
    def charge(n: int) -> None:
        raise ValueError(f"declined {n}")

    app.on_dead(lambda job: dead.append((job.id, job.error_type)))
    handle = charge.enqueue(1)
    patient = charge.using(deadline=7200).enqueue(2)
    app.run_until_empty()
    entry = app.store.jobs.get_failed(handle.id)
    assert entry is not None and entry.error_type == "errands.DeadlineExceeded" and entry.attempts == 1
    assert "ValueError: declined 1" in entry.error_message
    assert app.store.jobs.get_job(patient.id).attempts == 1, "its retry starts before its deadline: waits"
    # A retry waiting when its deadline passes is never claimed; the pass buries it.
    [late] = app.store.jobs.enqueue([NewJob("charge", "default", '{"args":[3],"kwargs":{}}', max_attempts=5,
                                            deadline_at=app.store.now() - timedelta(seconds=1))])
    app.run_until_empty()
    assert end_overdue(app) == 1
    assert app.store.jobs.get_failed(late).error_type == "errands.DeadlineExceeded"
    assert dead == [(handle.id, "errands.DeadlineExceeded"), (late, "errands.DeadlineExceeded")]


def test_two_worker_processes_never_start_a_job_after_its_expiry(migrated_url: str, tmp_path) -> None:
    """Many jobs whose expiries fall while two worker processes drain them: each job ran once, claimed before
    its expiry by the database's own record, or ended as expired; none both."""
    app = Errands(migrated_url)
    out = tmp_path / "runs.txt"
    env = cli_env(migrated_url, ERRANDS_APP="expiring_jobs:app", ERRANDS_TEST_OUT=str(out))
    workers = [subprocess.Popen([sys.executable, "-m", "errands", "worker", "-p", "2", "-c", "2", "--prefetch", "1"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
    try:
        wait_for(lambda: len(app.store.workers.list_workers()) == 2, timeout=60, message="two workers")
        now = app.store.now()
        last = now + timedelta(seconds=0.5)  # 10 ms a run, 4 runners: the later half expires unstarted
        jobs = [NewJob("expiring.record", "default", f'{{"args":[{i}],"kwargs":{{}}}}',
                       expires_at=now + timedelta(seconds=0.05 + 0.002 * i)) for i in range(200)]
        ids = app.store.jobs.enqueue(jobs)
        wait_for(lambda: app.store.now() > last and not any(r.reserved_by for r in app.store.jobs.list_jobs(limit=500)),
                 timeout=30, message="every job ran or expired")
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.communicate(timeout=scaled(60))
    runs = [line.split() for line in out.read_text().splitlines()] if out.exists() else []
    ran = [int(r[0]) for r in runs]
    assert len(ran) == len(set(ran)), "a job ran twice"
    late = [r for r in runs if r[3] != "1"]
    assert not late, f"claimed at or after its expiry (id, claimed, expires, by the database): {late}"
    end_overdue(app, limit=1000)
    dead = [app.store.jobs.get_failed(i) for i in ids]
    expired = {f.id for f in dead if f is not None and f.error_type == "errands.JobExpired"}
    assert not expired & set(ran) and expired | set(ran) == set(ids)
    assert ran and expired, "the race needs both outcomes to mean anything"
    app.store.close()
