"""A periodic job every second, for the scheduler test (three schedulers, each slot once), and a job that a
schedule stored in the database runs (edited in place while the schedulers run)."""

from __future__ import annotations

import time
from datetime import datetime

from errands import Errands, current_job

app = Errands()


@app.periodic("* * * * * *", name="tick", keep_result=True)
def tick() -> float:
    """Returns the run's slot, named by its unique key (``periodic:tick:<ISO time>``); not when the row was
    created, which is the slot only to within the scheduler's reaction time, longer on a busy machine."""
    row = app.store.jobs.get_job(current_job().id)
    if row is None or row.unique_key is None:
        return time.time()
    return datetime.fromisoformat(row.unique_key.split(":", 2)[2]).timestamp()


@app.job(name="stamp", keep_result=True)
def stamp(n: int) -> list[float]:
    """[the run's slot, its argument]: which definition of the stored schedule enqueued it."""
    row = app.store.jobs.get_job(current_job().id)
    slot = time.time() if row is None or row.unique_key is None else \
        datetime.fromisoformat(row.unique_key.split(":", 2)[2]).timestamp()
    return [slot, n]
