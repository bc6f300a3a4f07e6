"""A table in shared memory where a worker process says what each of its threads runs.

The supervisor reads it without any IPC round trip: each slot holds a job id and
the monotonic deadline by which that run must end (0 = no deadline).  Linux's
monotonic clock is system-wide, so deadlines written by a child are comparable in
the parent.  Writes order the fields so that a reader never pairs one job's id
with another's deadline: the deadline is cleared first and set last.  Each slot also
counts the runs it finished, for the supervisor's closing line ("stopped: 12 jobs run"):
one counter per slot, so that only the slot's own thread ever writes it (no lock).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any

_ctx = multiprocessing.get_context("fork")


class SlotTable:
    def __init__(self, size: int) -> None:
        self.size = size
        self._cells: Any = _ctx.RawArray("d", size * 2)
        self._finished: Any = _ctx.RawArray("q", size)

    def start(self, slot: int, job_id: int, timeout: float | None) -> None:
        cells = self._cells
        cells[slot * 2 + 1] = 0.0
        cells[slot * 2] = float(job_id)
        if timeout is not None:
            cells[slot * 2 + 1] = time.monotonic() + timeout

    def clear(self, slot: int) -> None:
        """The slot's run ended (however it ended): free, and one more run counted."""
        self._cells[slot * 2 + 1] = 0.0
        self._cells[slot * 2] = 0.0
        self._finished[slot] += 1

    def finished(self) -> int:
        """Runs that ended in this table's process (a run its process died in is not among them)."""
        return sum(self._finished)

    def running(self) -> Iterator[tuple[int, int, float]]:
        """(slot, job id, deadline) for every busy slot."""
        cells = self._cells
        for slot in range(self.size):
            job_id = int(cells[slot * 2])
            if job_id:
                yield slot, job_id, cells[slot * 2 + 1]

    def busy(self) -> bool:
        """Whether any slot holds a running job."""
        cells = self._cells
        return any(cells[slot * 2] for slot in range(self.size))

    def overdue(self, now: float) -> list[int]:
        """Ids of jobs past their deadline (read twice to avoid a torn pair)."""
        late = []
        cells = self._cells
        for slot in range(self.size):
            deadline = cells[slot * 2 + 1]
            if deadline and now > deadline:
                job_id = int(cells[slot * 2])
                if job_id and cells[slot * 2 + 1] == deadline:
                    late.append(job_id)
        return late

    def reset(self) -> None:
        for i in range(self.size * 2):
            self._cells[i] = 0.0
