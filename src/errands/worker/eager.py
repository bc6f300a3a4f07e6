"""Eager mode: run a job inline at enqueue, for the test suites of errands' users.

No database is touched: the run gets a context (``current_job()`` works; progress
reports and cancellation checks do nothing) and the app's and job's hooks, and its
outcome lives in the handle.  A failing run raises at ``enqueue`` when ``propagate``
is on (the default), so a test sees the handler's own exception.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import TYPE_CHECKING, Any

from ..core.endings import Result, RunOutcome
from ..core.errors import JobCancelled, JobFailed
from ..core.jobs import JobHandle
from ..core.rows import ClaimedJob, JobState, NewJob
from .execution import run_async, run_sync

if TYPE_CHECKING:
    from ..core.jobs import JobDefinition
    from .host import RunHost

_ids = itertools.count(1)


class EagerHandle(JobHandle):
    """A handle whose run already happened."""

    __slots__ = ("outcome",)

    def __init__(self, app: RunHost, job_id: int, name: str, outcome: RunOutcome) -> None:
        super().__init__(app, job_id, name)
        self.outcome = outcome

    def status(self) -> JobState:
        return {Result.OK: JobState.SUCCEEDED, Result.CANCELLED: JobState.CANCELLED,
                Result.SNOOZED: JobState.DELAYED}.get(self.outcome.result, JobState.FAILED)

    def _outcome(self) -> tuple[bool, Any]:
        o = self.outcome
        if o.result is Result.OK:
            return True, o.value
        if o.result is Result.CANCELLED:
            raise JobCancelled(f"job {self.id} ({self.name}) was cancelled")
        if o.result is Result.SNOOZED:  # eager mode stores nothing, so nothing runs it again
            raise JobFailed(f"job {self.id} ({self.name}) snoozed, and eager mode does not run it again: "
                            f"{o.error_text}", o.error_type, o.error_message)
        raise JobFailed(f"job {self.id} ({self.name}) failed: {o.error_text}", o.error_type, o.error_message)

    def cancel(self) -> str:
        return "gone"


def run_inline(app: RunHost, definition: JobDefinition[Any, Any], new: NewJob, propagate: bool) -> JobHandle:
    row = ClaimedJob(-next(_ids), new.queue, new.name, new.payload, new.priority, 1, new.max_attempts, new.timeout,
                     "eager", batch_id=new.batch_id, flags=new.flags)
    if definition.is_async:
        outcome = _run_async_inline(app, row)
    else:
        outcome = run_sync(app, row)
    if propagate and outcome.result is not Result.OK and outcome.exc is not None:
        raise outcome.exc
    return EagerHandle(app, row.id, row.name, outcome)


def _run_async_inline(app: RunHost, row: ClaimedJob) -> RunOutcome:
    """``asyncio.run`` in a thread of its own, so an eager enqueue works inside a running loop too."""
    box: list[RunOutcome] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(run_async(app, row))), name="errands-eager")
    thread.start()
    thread.join()
    return box[0]
