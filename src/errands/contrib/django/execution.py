"""A Django task as an errands job: the function a worker calls for it.

The worker runs it like any job; around the task's own function it does what a Django
task expects of its runner: a ``TaskContext`` as first argument for ``takes_context``
tasks, Django's ``task_started`` / ``task_finished`` signals, the return value normalised
to JSON as Django's backends do (a value that cannot be fails the run), and, for plain
functions, the connection housekeeping Django does around a request
(``close_old_connections`` before and after), since a worker thread lives for many tasks.

``task_finished`` says what ``get_result`` will say: ``READY`` for a failed attempt that will
be retried, ``FAILED`` for the last one, for ``Discard`` and for a cancellation (``JobCancelled``
raised in the task, or an async task cancelled because its cancellation was requested), which
errands never retries.  An async task cancelled by its timeout is a failed attempt like any other.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections
from django.utils import timezone

from ...core.context import JobContext, current_job
from ...core.errors import Discard, ErrandsError, JobCancelled
from ...core.rows import JobState
from ...worker.execution import error_name
from .compat import TaskContext, TaskResult, TaskResultStatus, normalize_json, task_finished, task_started
from .results import as_enqueued, error_of, worker_ids


def job_function(task: Any, backend: Any) -> Callable[..., Any]:
    """What errands registers for ``task``: same arguments as the task (minus ``context``)."""
    func = task.func
    parameters = list(inspect.signature(func).parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    sender = type(backend)

    if inspect.iscoroutinefunction(func):
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            result = _running(task, backend.alias, args, kwargs)
            await sync_to_async(task_started.send)(sender=sender, task_result=result)
            try:
                value = normalize_json(await func(*_context(task, result), *args, **kwargs))
            except asyncio.CancelledError as exc:  # no Exception, yet the run ends: say so, without awaiting
                _in_own_thread(backend, _cancelled, sender, result, exc, backend)
                raise
            except Exception as exc:
                await sync_to_async(_finished)(sender, result, exc)
                raise
            await sync_to_async(_finished)(sender, result, None, value)
            return value

        run: Callable[..., Any] = run_async
    else:
        def run_sync(*args: Any, **kwargs: Any) -> Any:
            close_old_connections()
            try:
                result = _running(task, backend.alias, args, kwargs)
                task_started.send(sender=sender, task_result=result)
                try:
                    value = normalize_json(func(*_context(task, result), *args, **kwargs))
                except Exception as exc:
                    _finished(sender, result, exc)  # inside the except: receivers may log exc_info
                    raise
                _finished(sender, result, None, value)
                return value
            finally:
                close_old_connections()

        run = run_sync
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    run.__name__, run.__qualname__, run.__module__ = func.__name__, func.__qualname__, func.__module__
    run.__doc__ = func.__doc__
    return run


def _context(task: Any, result: Any) -> tuple[Any, ...]:
    return (TaskContext(task_result=result),) if task.takes_context else ()


def _running(task: Any, alias: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The TaskResult a running task (and the signals) see: this run's id, attempt and worker."""
    job: JobContext = current_job()
    now = timezone.now()
    return TaskResult(task=as_enqueued(task, job.queue, None), id=str(job.id), status=TaskResultStatus.RUNNING,
                      enqueued_at=None, started_at=now, last_attempted_at=now, finished_at=None, args=list(args),
                      kwargs=dict(kwargs), backend=alias, errors=[], worker_ids=worker_ids(job.attempt, job.worker_id))


def _finished(sender: type, result: Any, exc: BaseException | None, value: Any = None) -> None:
    object.__setattr__(result, "finished_at", timezone.now())
    if exc is None:
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
    else:
        job = current_job()
        final = job.is_last_attempt or isinstance(exc, (Discard, JobCancelled))  # as worker/execution.failure
        object.__setattr__(result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY)
        result.errors.append(error_of(error_name(exc), str(exc) or repr(exc)))
    task_finished.send(sender=sender, task_result=result)


def _cancelled(sender: type, result: Any, exc: BaseException, backend: Any) -> None:
    """``task_finished`` for an async task the worker cancelled.  On request (the job's row says
    so, or its record once the worker has settled it) it is a cancellation, recorded as
    ``JobCancelled`` and never retried; otherwise (its timeout) a failed attempt like any other."""
    job = current_job()
    try:
        requested = job.cancelled or backend.errands.job_state(job.id) is JobState.CANCELLED
    except ErrandsError:  # the database is away: what is known is that the attempt ended
        requested = False
    _finished(sender, result, JobCancelled("cancelled while running (its task was cancelled)") if requested else exc)


def _in_own_thread(backend: Any, function: Callable[..., None], *args: Any) -> None:
    """``function(*args)`` in a thread of its own, the event loop waiting for it.

    A cancelled task must not await: the worker has already moved on and may stop its event loop,
    destroying the task half-way.  Nor may receivers use the ORM on the loop's thread (Django
    refuses).  So the loop blocks for them, once, on this rare path.  The thread sees the task's
    context (the running job) and closes the connections it opened (Django's and errands')."""
    context = contextvars.copy_context()

    def run() -> None:
        try:
            context.run(function, *args)
        finally:
            connections.close_all()
            backend.errands.store.release_thread_connection()

    with ThreadPoolExecutor(1, thread_name_prefix="errands-django-finished") as pool:
        pool.submit(run).result()
