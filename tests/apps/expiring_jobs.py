"""The app of the expiry race (tests/features/test_expiry.py): ``record(n)`` writes, as it starts, the
database's own record of its claim time and its expiry, one line per run, to ERRANDS_TEST_OUT, with the
database's own comparison of the two: read back as datetimes, SQLite's REAL seconds are rounded to the
microsecond, and a claim a fraction of a microsecond before its expiry would read as at it."""

from __future__ import annotations

import os
import time
from typing import Any

from errands import Errands, current_job

app = Errands()


@app.job(name="expiring.record")
def record(n: int) -> None:
    job = current_job()
    row = app.store.jobs.get_job(job.id)
    assert row is not None and row.reserved_at is not None and row.expires_at is not None

    def claimed_before_expiry(cur: Any) -> int:
        cur.execute(app.store.dialect.q("SELECT CASE WHEN reserved_at < expires_at THEN 1 ELSE 0 END "
                                        "FROM {jobs} WHERE id = {p}"), (job.id,))
        return int(cur.fetchone()[0])

    before = app.store.db.run(claimed_before_expiry)
    with open(os.environ["ERRANDS_TEST_OUT"], "a") as out:
        out.write(f"{job.id} {row.reserved_at.timestamp()!r} {row.expires_at.timestamp()!r} {before}\n")
    time.sleep(0.01)
