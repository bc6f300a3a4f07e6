"""What a running handler can learn about, and tell of, the run it is part of."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ErrandsError, Interrupted, JobCancelled, StoreError
from .payload import decode_checkpoint, encode_checkpoint

if TYPE_CHECKING:
    from .host import AppHost
    from .rows import ClaimedJob


class JobContext:
    """The run a handler is part of: ``current_job()`` returns one.

    ``attempt`` is 1 for the first run; attempts are counted when a job is claimed.
    """

    __slots__ = ("id", "name", "queue", "attempt", "max_attempts", "worker_id", "batch_id", "_app", "resumptions",
                 "_checkpoint", "_stopping")

    def __init__(self, id: int, name: str, queue: str, attempt: int, max_attempts: int, worker_id: str,
                 batch_id: int | None = None, app: AppHost | None = None, *, checkpoint: str | None = None,
                 resumptions: int = 0, stopping: Stopping | None = None) -> None:
        self.id = id
        self.name = name
        self.queue = queue
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.worker_id = worker_id
        self.batch_id = batch_id
        self._app = app
        self.resumptions = resumptions
        """How often a stopping worker gave this job back from a checkpoint before this run."""
        self._checkpoint = checkpoint
        self._stopping = stopping

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

    @property
    def stopping(self) -> bool:
        """Whether the worker running this job was told to stop (SIGTERM, a graceful shutdown) or is
        about to lose this run's lease (its heartbeats have failed for half a lease): a long job should
        store a checkpoint and let :class:`~errands.core.errors.Interrupted` end the run (see
        :meth:`checkpoint`).  Reads a flag of the worker: costs nothing, ask it as often as you like."""
        stopping = self._stopping
        return stopping is not None and stopping()

    @property
    def checkpoint_value(self) -> Any:
        """The value the last :meth:`checkpoint` of an earlier attempt stored (None: none), as the claim
        of this attempt read it: where to resume.  It does not change during a run (keep your own
        position as you go).  BadPayload when the stored text cannot be read."""
        return decode_checkpoint(self._checkpoint)

    def checkpoint(self, value: Any) -> None:
        """Store where this run is (a JSON value: a cursor, an offset, counters; at most
        ``CHECKPOINT_LIMIT``, 64 KiB, as JSON) in the job's row, in a transaction of its own, only
        while the run is still this worker's.  The next attempt reads it as :attr:`checkpoint_value`,
        however this one ends: killed (SIGKILL, a lost machine), failed, or stopped.

        Then, when the worker is :attr:`stopping`, it raises :class:`~errands.core.errors.Interrupted`:
        let it propagate, and the job is given back at once with its attempt refunded (up to the job's
        ``max_resumptions``), to resume elsewhere.  It raises ``Interrupted`` too when the run is no
        longer this worker's (its lease lapsed and another worker took the job): nothing was stored.
        Raises :class:`~errands.core.errors.CheckpointTooLarge` or TypeError for a value it cannot
        store (nothing is stored).  Each call is one UPDATE: checkpoint every few seconds, not per row."""
        text = encode_checkpoint(value)
        if self._app is not None and self.id >= 0:  # eager runs (negative ids) have no row to write
            try:
                stored = self._app.store.features.set_checkpoint(self.worker_id, self.id, text)
            except StoreError as exc:
                if not self.stopping:
                    raise
                # Stopping because the database is away (the leases are at risk): the run ends as
                # interrupted, given back from the checkpoint stored before, if it is still ours then.
                raise Interrupted(f"job {self.id} stopped: its worker is stopping and the checkpoint could "
                                  f"not be stored ({exc})") from exc
            if not stored:
                raise Interrupted(f"job {self.id} is no longer this worker's run (its lease lapsed): the "
                                  "checkpoint was not stored")
        if self.stopping:
            raise Interrupted(f"job {self.id} stopped at a checkpoint: its worker is stopping")

    def __repr__(self) -> str:
        return (f"<JobContext id={self.id} name={self.name!r} queue={self.queue!r} "
                f"attempt={self.attempt}/{self.max_attempts}>")


Stopping = Callable[[], bool]
"""Whether the worker running a job is stopping (the worker's ``WorkerState.stopping``)."""

# Set by the worker around each run (worker/execution.py).  It holds the claimed row, the app
# itself and the worker's stop flag, not a JobContext: most handlers never ask, and building an
# object per run costs more than setting the variable.
running_row: contextvars.ContextVar[tuple[ClaimedJob, AppHost, Stopping | None] | None] = contextvars.ContextVar(
    "errands_current_job", default=None)


def context_of(row: ClaimedJob, app: AppHost | None, stopping: Stopping | None = None) -> JobContext:
    return JobContext(row.id, row.name, row.queue, row.attempts, row.max_attempts, row.reserved_by, row.batch_id,
                      app, checkpoint=row.checkpoint, resumptions=row.resumptions, stopping=stopping)


def current_job() -> JobContext:
    """The job this handler is running for; raises outside a worker."""
    current: Any = running_row.get()
    if current is None:
        raise ErrandsError("current_job() is only available inside a job run by an errands worker")
    return context_of(*current)
