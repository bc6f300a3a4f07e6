"""A periodic job every second, for the scheduler test (three schedulers, each slot once)."""

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
