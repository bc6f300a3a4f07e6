"""Errors are classified by cause, on every backend: a statement the database refuses for one row
costs that row (it goes to the dead letter as errands.SettleError), never the worker process or,
through exit code 78, every process of the supervisor.  A trigger plays the database that refuses
to write one job's retry."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import poison_jobs
import pytest
from helpers import cli_env, scaled

from errands import Errands


@pytest.fixture
def jobs_app(db_url: str) -> Iterator[Errands]:
    migrator = Errands(db_url)
    migrator.migrate()
    migrator.store.close()
    app = poison_jobs.app
    app.use_database(db_url)
    app.store.db.run(lambda cur: cur.execute(poison_jobs.RUNS_DDL))
    try:
        yield app
    finally:
        app.store.close()


def refuse_retries_of(app: Errands, backend: str, job_id: int) -> None:
    jobs = app.store.dialect.t_jobs
    when = f"NEW.last_error IS NOT NULL AND NEW.id = {int(job_id)}"
    if backend == "sqlite":
        statements = [f"CREATE TRIGGER refuse_retry BEFORE UPDATE ON {jobs} WHEN {when} "
                      "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"]
    elif backend == "postgres":
        statements = ["CREATE FUNCTION refuse_retry() RETURNS trigger AS $$ BEGIN "
                      "RAISE EXCEPTION 'refused by a trigger'; END $$ LANGUAGE plpgsql",
                      f"CREATE TRIGGER refuse_retry BEFORE UPDATE ON {jobs} FOR EACH ROW WHEN ({when}) "
                      "EXECUTE FUNCTION refuse_retry()"]
    else:
        statements = [f"CREATE TRIGGER refuse_retry BEFORE UPDATE ON {jobs} FOR EACH ROW BEGIN IF {when} THEN "
                      "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; END"]
    for sql in statements:
        app.store.db.run(lambda cur, sql=sql: cur.execute(sql))


def test_a_refused_retry_costs_its_job_only(jobs_app: Errands, backend: str, tmp_path: Path) -> None:
    app = jobs_app
    before = [poison_jobs.good.enqueue(n) for n in range(10)]
    victim = poison_jobs.surrogate_error.enqueue()  # fails; its retry is what the database refuses
    after = [poison_jobs.good.enqueue(n) for n in range(10, 20)]
    refuse_retries_of(app, backend, victim.id)

    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "errands", "worker", "--burst", "-p", "2", "-c", "2"],
                              env=cli_env(app.database_url, ERRANDS_APP="poison_jobs:app"), stdout=out,
                              stderr=subprocess.STDOUT, timeout=scaled(120))
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]

    runs = app.store.db.run(lambda cur: (cur.execute("SELECT job_id FROM poison_runs"), cur.fetchall())[1])
    assert sorted(int(r[0]) for r in runs) == sorted(h.id for h in before + after)
    assert app.store.jobs.list_jobs() == []
    [entry] = app.store.jobs.list_failed()
    assert entry.id == victim.id and entry.error_type == "errands.SettleError"
    assert "refused by a trigger" in entry.error_message
