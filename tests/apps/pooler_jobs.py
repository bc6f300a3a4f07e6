"""Jobs for the PgBouncer tests: each root job records its run and enqueues one follow-up.

Runs are recorded in ``pooler_runs`` without a key, so a job that ran twice shows up as two
rows (counted, not hidden by a duplicate-key error); the follow-ups are enqueued from inside
the handler through the same pooler, which is what the issue's application did.
"""

from __future__ import annotations

import os

from errands import Errands, current_job

app = Errands()

RUNS_DDL = "CREATE TABLE IF NOT EXISTS pooler_runs (job_id BIGINT NOT NULL, pid INTEGER NOT NULL)"


def _record() -> None:
    ctx = current_job()
    app.store.db.run(lambda cur: cur.execute("INSERT INTO pooler_runs (job_id, pid) VALUES (%s, %s)",
                                             (ctx.id, os.getpid())))


@app.job(queue="default", max_attempts=5, backoff=0)
def step(follow: bool) -> None:
    """Record this run; a root job (``follow``) then enqueues its one follow-up."""
    _record()
    if follow:
        step.enqueue(False)
