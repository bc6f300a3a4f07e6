"""What errands knows about a job, as Django's ``TaskResult``.

errands keeps a job in one of three places, and each says something different:

=====================  ===========================  =============================================
where                  Django status                what is known
=====================  ===========================  =============================================
jobs table             READY (waiting, delayed,     arguments, enqueue time, attempts so far, the
                       blocked) or RUNNING          previous attempt's error, the current run's
                       (reserved, also a lapsed     start and worker
                       lease)
dead letter            FAILED                       arguments, enqueue time, attempts, the last
                                                    error, when it failed
results table          SUCCESSFUL (return value),   when it ended, attempts; not the arguments
                       or FAILED when cancelled     nor the enqueue time (errands does not keep
                                                    them there)
=====================  ===========================  =============================================

errands keeps an error as ``Type: message`` (tracebacks go to the worker's log only), so a
``TaskError``'s ``traceback`` is that line.  It records how many attempts a job took, but
not which worker made each: ``worker_ids`` has one entry per attempt, the worker's id where
errands still knows it (a running job) and ``"unknown"`` elsewhere, so that
``TaskResult.attempts`` (its length) is right.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from ...core.payload import decode_arguments
from ...core.rows import FailedJobRow, JobRow, JobState, ResultRow
from ...store import Store
from .compat import TaskError, TaskResult, TaskResultStatus

UNKNOWN_WORKER = "unknown"

Found = tuple[JobRow, datetime] | FailedJobRow | ResultRow


def lookup(store: Store, job_id: int) -> Found | None:
    """Where the job is now.  A job moves jobs -> dead letter -> jobs (an operator's retry), or
    jobs -> results; reading in that order, a second pass covers a retry that happened between
    two reads."""
    for _ in range(2):
        row = store.jobs.get_job(job_id)
        if row is not None:
            return row, store.now()
        failed = store.jobs.get_failed(job_id)
        if failed is not None:
            return failed
        ended = store.features.get_result(job_id)
        if ended is not None:
            return ended
    return None


def name_of(found: Found) -> str:
    return found[0].name if isinstance(found, tuple) else found.name


def build(task: Any, alias: str, found: Found) -> Any:
    """The TaskResult of ``found`` (``task`` is the registered task of its name)."""
    if isinstance(found, tuple):
        return _from_job(task, alias, *found)
    if isinstance(found, FailedJobRow):
        args, kwargs = _arguments(found.payload)
        return _result(as_enqueued(task, found.queue, found.priority), found.id, TaskResultStatus.FAILED, alias,
                       args=args, kwargs=kwargs, enqueued_at=found.created_at, finished_at=found.failed_at,
                       errors=[error_of(found.error_type, found.error_message)],
                       workers=worker_ids(found.attempts, None))
    if found.state is JobState.SUCCEEDED:
        result = _result(as_enqueued(task, found.queue, None), found.id, TaskResultStatus.SUCCESSFUL, alias,
                         finished_at=found.finished_at, workers=worker_ids(found.attempts, None))
        object.__setattr__(result, "_return_value", found.result)
        return result
    # Cancelled through errands (Django's API has no cancel): the task did not complete.
    return _result(as_enqueued(task, found.queue, None), found.id, TaskResultStatus.FAILED, alias,
                   finished_at=found.finished_at, workers=worker_ids(found.attempts, None),
                   errors=[error_of("errands.JobCancelled", found.message or "cancelled")])


def _from_job(task: Any, alias: str, row: JobRow, now: datetime) -> Any:
    state = row.state(now)
    running = state in (JobState.RUNNING, JobState.STALE)
    errors = []
    if row.last_error:
        kind, _, text = row.last_error.partition(": ")
        errors.append(error_of(kind, text))
    args, kwargs = _arguments(row.payload)
    return _result(as_enqueued(task, row.queue, row.priority), row.id,
                   TaskResultStatus.RUNNING if running else TaskResultStatus.READY, alias, args=args, kwargs=kwargs,
                   enqueued_at=row.created_at, started_at=row.reserved_at if running else None,
                   last_attempted_at=row.reserved_at if running else None, errors=errors,
                   workers=worker_ids(row.attempts, row.reserved_by if running else None))


def _result(task: Any, job_id: int, status: Any, alias: str, *, args: list[Any] | None = None,
            kwargs: dict[str, Any] | None = None, enqueued_at: datetime | None = None,
            started_at: datetime | None = None, last_attempted_at: datetime | None = None,
            finished_at: datetime | None = None, errors: list[Any] | None = None,
            workers: list[str] | None = None) -> Any:
    return TaskResult(task=task, id=str(job_id), status=status, enqueued_at=_local(enqueued_at),
                      started_at=_local(started_at), last_attempted_at=_local(last_attempted_at),
                      finished_at=_local(finished_at), args=args or [], kwargs=kwargs or {}, backend=alias,
                      errors=errors or [], worker_ids=workers or [])


def as_enqueued(task: Any, queue: str, priority: int | None) -> Any:
    """The task as this job was enqueued (its queue and priority), when the backend still accepts
    them (a queue may have left QUEUES since); else the task as registered."""
    changes: dict[str, Any] = {}
    if queue != task.queue_name:
        changes["queue_name"] = queue
    if priority is not None and priority != task.priority:
        changes["priority"] = priority
    if not changes:
        return task
    try:
        return task.using(**changes)
    except Exception:  # e.g. the queue was removed from QUEUES since
        return task


def _arguments(payload: str) -> tuple[list[Any], dict[str, Any]]:
    try:
        return decode_arguments(payload)
    except ValueError:
        return [], {}


def _local(value: datetime | None) -> datetime | None:
    """errands' times are aware UTC; with ``USE_TZ = False`` Django expects naive local times."""
    if value is None or settings.USE_TZ:
        return value
    return timezone.make_naive(value)


def error_of(error_type: str, message: str) -> Any:
    """A TaskError from errands' error name: ``ValueError`` is a builtin (``builtins.ValueError``
    imports), ``errands.JobTimeout`` and ``module.Class`` already are paths."""
    path = error_type if "." in error_type else f"builtins.{error_type or 'Exception'}"
    return TaskError(exception_class_path=path, traceback=f"{error_type}: {message}")


def worker_ids(attempts: int, current: str | None) -> list[str]:
    """One entry per attempt (Django counts attempts as ``len(worker_ids)``)."""
    if attempts <= 0:
        return []
    return [UNKNOWN_WORKER] * (attempts - 1) + [current or UNKNOWN_WORKER]
