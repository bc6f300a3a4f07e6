"""Deploys that lose no job to a name: a job no worker registers is held back for the app's grace, a
worker says at start which waiting names it does not know, and a script's jobs keep an importable name.

Issue 25, point 7: a rolling deploy's new jobs wait for the workers that know them instead of going to
the dead letter at the first worker of the old release that sees them.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
from helpers import cli_env, run_cli, scaled, wait_for_db_clock

from errands import Errands, JobState
from errands.core.rows import NewJob
from errands.services.deploys import unregistered_waiting

NEW_NAME = "shop.jobs.send_coupon"
PAYLOAD = json.dumps({"args": [7], "kwargs": {}})


def _enqueue_unknown(app: Errands, name: str = NEW_NAME, queue: str = "default") -> int:
    """What the next release's code does during a rolling deploy: enqueue a job this app lacks."""
    [job_id] = app.store.jobs.enqueue([NewJob(name, queue, PAYLOAD)])
    return job_id


@pytest.fixture
def old_release(migrated_url: str) -> Errands:
    app = Errands(migrated_url, unknown_job_grace=3.0)

    @app.job(name="shop.jobs.send_invoice")
    def send_invoice(n: int) -> None: ...

    return app


def test_a_job_no_worker_registers_is_held_back_with_its_attempt_refunded(old_release, caplog):
    job_id = _enqueue_unknown(old_release)
    other = _enqueue_unknown(old_release)
    with caplog.at_level(logging.WARNING, logger="errands.worker"):
        old_release.run_until_empty()
    for held in (job_id, other):
        row = old_release.store.jobs.get_job(held)
        assert row is not None and row.reserved_by is None and row.attempts == 0, "given back, attempt refunded"
        assert row.state(old_release.store.now()) is JobState.DELAYED and "errands.UnknownJob" in row.last_error
    assert old_release.store.jobs.get_failed(job_id) is None
    warnings = [r.getMessage() for r in caplog.records if NEW_NAME in r.getMessage()]
    assert len(warnings) == 1, "said once per name, not once per job"
    assert "shop.jobs.send_invoice" in warnings[0], "the warning lists the names this worker registers"


def test_the_next_release_runs_what_the_old_one_held_back(old_release, migrated_url):
    job_id = _enqueue_unknown(old_release)
    old_release.run_until_empty()
    new_release = Errands(migrated_url)
    ran: list[int] = []

    @new_release.job(name=NEW_NAME)
    def send_coupon(n: int) -> None:
        ran.append(n)

    wait_for_db_clock(new_release.store, new_release.store.jobs.get_job(job_id).available_at)
    new_release.run_until_empty()
    assert ran == [7]
    assert new_release.job_state(job_id) is JobState.FINISHED
    assert new_release.store.jobs.get_failed(job_id) is None


def test_past_its_grace_the_job_goes_to_the_dead_letter_and_on_dead_hears_it(old_release):
    dead: list[str] = []
    old_release.on_dead(lambda job: dead.append(job.error_type))
    job_id = _enqueue_unknown(old_release)
    created = old_release.store.jobs.get_job(job_id).created_at
    wait_for_db_clock(old_release.store, created + timedelta(seconds=3.0))
    old_release.run_until_empty()
    entry = old_release.store.jobs.get_failed(job_id)
    assert entry is not None and entry.error_type == "errands.UnknownJob"
    assert "held back for 3s" in entry.error_message and entry.attempts == 1
    assert dead == ["errands.UnknownJob"]


def test_with_no_grace_an_unknown_job_is_buried_at_once(migrated_url):
    app = Errands(migrated_url, unknown_job_grace=0)
    job_id = _enqueue_unknown(app)
    app.run_until_empty()
    assert app.store.jobs.get_failed(job_id).error_type == "errands.UnknownJob"


def test_a_worker_names_at_start_the_waiting_jobs_it_does_not_register(app, db_url):
    _enqueue_unknown(app, "__main__.hello")
    _enqueue_unknown(app, "other_module.sample_jobs.record")
    assert unregistered_waiting(app, ["default"]) == sorted(["__main__.hello", "other_module.sample_jobs.record"])
    done = run_cli(db_url, "worker", "--burst", "-q", "default", ERRANDS_UNKNOWN_JOB_GRACE="600")
    assert done.returncode == 0, done.stderr
    assert "jobs waiting in these queues have names this app does not register: __main__.hello" in done.stderr
    assert "given name=" in done.stderr or "name=\\\"...\\\"" in done.stderr or 'name="..."' in done.stderr
    assert "__main__. was enqueued by a script run directly" in done.stderr


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_script_run_directly_enqueues_names_the_worker_registers(migrated_url, tmp_path):
    """``python shop.py`` used to enqueue ``__main__.send``, which ``errands --app shop:app worker``
    (registering ``shop.send``) moved to the dead letter after one attempt."""
    out = tmp_path / "ran.txt"
    (tmp_path / "shop.py").write_text(textwrap.dedent(f'''
        from errands import Errands

        app = Errands({migrated_url!r})

        @app.job
        def send(n: int) -> None:
            with open({str(out)!r}, "a") as f:
                f.write(f"{{n}}\\n")

        if __name__ == "__main__":
            print(send.enqueue(5).name)
        '''))
    env = cli_env(migrated_url, ERRANDS_APP="shop:app")
    env["PYTHONPATH"] = str(tmp_path) + ":" + env["PYTHONPATH"]
    made = subprocess.run([sys.executable, "shop.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=scaled(60))
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "shop.send"
    ran = subprocess.run([sys.executable, "-m", "errands", "worker", "--burst"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=scaled(120))
    assert ran.returncode == 0, ran.stderr
    assert out.read_text() == "5\n"
