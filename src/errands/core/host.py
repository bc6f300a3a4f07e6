"""What the core needs from the app and its store, as Protocols of its own.

The core sits at the bottom: a job handle asks the app for a job's state and a running
handler reports progress through the store, yet the core must not import either (that was the
import loop app -> jobs -> app).  These Protocols name exactly what it calls; ``Errands`` and
the store satisfy them structurally, so nothing registers and nothing imports upward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .rows import FailedJobRow, JobState, NewJob, ResultRow


class CoreJobs(Protocol):
    """The job verbs handles call (``store.jobs``)."""

    def enqueue(self, jobs: Sequence[NewJob], cursor: Any = None) -> list[int]: ...

    def get_failed(self, job_id: int) -> FailedJobRow | None: ...


class CoreFeatures(Protocol):
    """The feature verbs handles and job contexts call (``store.features``)."""

    def get_result(self, job_id: int) -> ResultRow | None: ...

    def cancel_requested(self, job_id: int) -> bool: ...

    def set_progress(self, owner: str, job_id: int, fraction: float, message: str | None) -> bool: ...

    def set_checkpoint(self, owner: str, job_id: int, checkpoint: str) -> bool: ...


class CoreStore(Protocol):
    """The parts of the store job handles and job contexts call through."""

    @property
    def jobs(self) -> CoreJobs: ...

    @property
    def features(self) -> CoreFeatures: ...


class AppHost(Protocol):
    """The app as job definitions, handles and contexts see it (``Errands`` is one)."""

    hooks: Any
    """The app's :class:`~errands.core.hooks.Hooks` (named loosely: the hooks module sits above this one)."""
    eager_mode: bool
    payload_limit: int
    keep_results: bool

    @property
    def store(self) -> CoreStore: ...

    def job_state(self, job_id: int, name: str | None = None) -> JobState: ...

    def cancel(self, job: Any) -> str: ...

    def run_eagerly(self, definition: Any, new: NewJob, args: Sequence[Any] | None = None,
                    kwargs: dict[str, Any] | None = None) -> Any:
        """Run ``definition``'s call inline (eager mode) and return its ``JobHandle``."""
