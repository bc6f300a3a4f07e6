"""Jobs for the refused-success test (tests/robustness/test_refused_success.py).

Each run notes its job id in ``settle_runs`` (the primary key, so a second run of one job fails
loudly); ``kept`` also returns a value its job keeps as its result.  A short lease, so that a test
can see the worker keep it through a refusal that outlasts it.
"""

from __future__ import annotations

from errands import Errands, current_job

app = Errands(lease=2)

RUNS_DDL = "CREATE TABLE IF NOT EXISTS settle_runs (job_id BIGINT PRIMARY KEY)"


def _note_run() -> int:
    p = app.store.dialect.placeholder
    job_id = current_job().id
    app.store.db.run(lambda cur: cur.execute(f"INSERT INTO settle_runs (job_id) VALUES ({p})", (job_id,)))
    return job_id


@app.job()
def plain(n: int) -> None:
    _note_run()


@app.job(keep_result=True)
def kept(n: int) -> dict[str, int]:
    return {"n": n, "job": _note_run()}
