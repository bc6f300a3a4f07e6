"""What a running handler can learn about, and tell of, the run it is part of."""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any

from .errors import ErrandsError, JobCancelled

if TYPE_CHECKING:
    from .host import AppHost
    from .rows import ClaimedJob


class JobContext:
    """The run a handler is part of: ``current_job()`` returns one.

    ``attempt`` is 1 for the first run; attempts are counted when a job is claimed.
    """

    __slots__ = ("id", "name", "queue", "attempt", "max_attempts", "worker_id", "batch_id", "_app")

    def __init__(self, id: int, name: str, queue: str, attempt: int, max_attempts: int, worker_id: str,
                 batch_id: int | None = None, app: AppHost | None = None) -> None:
        self.id = id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker_id = worker_id
        self.batch_id = batch_id
        self._app = app

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    @property
    def cancelled(self) -> bool:
        """Whether someone asked to cancel this job (one indexed read of its row)."""
        if self._app is None or self.id < 0:  # eager runs (negative ids) have no row to ask
            return False
        return self._app.store.features.cancel_requested(self.id)

    def check_cancelled(self) -> None:
        """A checkpoint: raise :class:`~errands.core.errors.JobCancelled` if cancellation was requested.

        The run then ends as cancelled (recorded, not retried)."""
        if self.cancelled:
            raise JobCancelled(f"job {self.id} was cancelled while running")

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the run got (0.0-1.0) and a short message; the CLI and dashboard show it.

        Each call is one UPDATE of the job's row: report a few times a second at most.
        """
        if not 0.0 <= float(fraction) <= 1.0:
            raise ValueError(f"progress must be between 0 and 1, got {fraction!r}")
        if self._app is None or self.id < 0:
            return
        self._app.store.features.set_progress(self.worker_id, self.id, float(fraction), message)

    def __repr__(self) -> str:
        return (f"<JobContext id={self.id} name={self.name!r} queue={self.queue!r} "
                f"attempt={self.attempt}/{self.max_attempts}>")


# Set by the worker around each run (worker/execution.py).  It holds the claimed row and the
# app itself, not a JobContext: most handlers never ask, and building an object per run costs
# more than setting the variable.
running_row: contextvars.ContextVar[tuple[ClaimedJob, AppHost] | None] = contextvars.ContextVar(
    "errands_current_job", default=None)


def context_of(row: ClaimedJob, app: AppHost | None) -> JobContext:
    return JobContext(row.id, row.name, row.queue, row.attempts, row.max_attempts, row.reserved_by, row.batch_id,
                      app)


def current_job() -> JobContext:
    """The job this handler is running for; raises outside a worker."""
    current: Any = running_row.get()
    if current is None:
        raise ErrandsError("current_job() is only available inside a job run by an errands worker")
    return context_of(*current)
