"""What a running handler can learn about the run it is part of."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING

from ..errors import ErrandsError

if TYPE_CHECKING:
    from ..store.rows import ClaimedJob


class JobContext:
    """The run a handler is part of: ``current_job()`` returns one.

    ``attempt`` is 1 for the first run; attempts are counted when a job is claimed.
    """

    __slots__ = ("id", "name", "queue", "attempt", "max_attempts", "worker_id")

    def __init__(self, id: int, name: str, queue: str, attempt: int, max_attempts: int, worker_id: str) -> None:
        self.id = id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker_id = worker_id

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def __repr__(self) -> str:
        return (f"<JobContext id={self.id} name={self.name!r} queue={self.queue!r} "
                f"attempt={self.attempt}/{self.max_attempts}>")


# Set by the worker around each run (worker/execution.py).  It holds the claimed row itself,
# not a JobContext: most handlers never ask, and building an object per run costs more
# than setting the variable.
running_row: contextvars.ContextVar[ClaimedJob | None] = contextvars.ContextVar("errands_current_job", default=None)


def current_job() -> JobContext:
    """The job this handler is running for; raises outside a worker."""
    row = running_row.get()
    if row is None:
        raise ErrandsError("current_job() is only available inside a job run by an errands worker")
    return JobContext(row.id, row.name, row.queue, row.attempts, row.max_attempts, row.reserved_by)
