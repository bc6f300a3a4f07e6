"""The app of the expiry race (tests/features/test_expiry.py): ``record(n)`` writes, as it starts, the
database's own record of its claim time and its expiry, one line per run, to ERRANDS_TEST_OUT."""

from __future__ import annotations

import os
import time

from errands import Errands, current_job

app = Errands()


@app.job(name="expiring.record")
def record(n: int) -> None:
    job = current_job()
    row = app.store.jobs.get_job(job.id)
    assert row is not None and row.reserved_at is not None and row.expires_at is not None
    with open(os.environ["ERRANDS_TEST_OUT"], "a") as out:
        out.write(f"{job.id} {row.reserved_at.timestamp()!r} {row.expires_at.timestamp()!r}\n")
    time.sleep(0.01)
