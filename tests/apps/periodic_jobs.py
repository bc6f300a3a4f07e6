"""A periodic job every second, for the scheduler test (three schedulers, each slot once)."""

from __future__ import annotations

import time

from errands import Errands, current_job

app = Errands()


@app.periodic("* * * * * *", name="tick", keep_result=True)
def tick() -> float:
    """Returns when the run was created (its slot, to within the scheduler's reaction time)."""
    row = app.store.get_job(current_job().id)
    return row.created_at.timestamp() if row else time.time()
