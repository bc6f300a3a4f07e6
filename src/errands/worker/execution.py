"""Running one claimed job and describing how it ended, without touching the database.

The outcome is a value; the worker loop decides what to write (complete, retry
later, bury).  Keeping execution free of SQL lets the same code run under a
thread, an event loop or the supervisor's accounting.  This is the per-job hot
path of a worker, so it builds as little as it can: one named tuple per run.
"""

from __future__ import annotations

import asyncio
import enum
import math
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.context import JobContext, context_of, running_row
from ..core.errors import BadPayload, Discard, JobCancelled, JobTimeout, Retry
from ..core.hooks import around, call_after, chain_of
from ..core.payload import ERROR_TEXT_CAP, decode_arguments, safe_text, without_headers
from ..core.rows import ClaimedJob

if TYPE_CHECKING:
    from ..app import Errands
    from ..core.jobs import JobDefinition

_clock = time.perf_counter


class Result(str, enum.Enum):
    OK = "ok"
    ERROR = "error"
    """The handler raised: retry if attempts are left."""
    FATAL = "fatal"
    """The job can never run (unknown name, undecodable payload, ``Discard``): bury at once."""
    CANCELLED = "cancelled"
    """It stopped because its cancellation was requested: record it, never retry."""


class Outcome(NamedTuple):
    row: ClaimedJob
    result: Result
    duration: float
    error_type: str = ""
    error_message: str = ""
    exc: BaseException | None = None
    value: Any = None
    """The handler's return value (OK runs)."""
    retry_delay: float | None = None
    """Seconds the handler asked to wait before the next attempt (``raise Retry(delay)``)."""

    @property
    def error_text(self) -> str:
        return f"{self.error_type}: {self.error_message}"


def error_name(exc: BaseException) -> str:
    """``ValueError`` for builtins, ``errands.JobTimeout`` for ours, ``module.Class`` otherwise."""
    cls = type(exc)
    module, name = safe_text(getattr(cls, "__module__", None), 120), safe_text(cls.__qualname__, 120)
    if module == "builtins":
        return name
    if module.startswith("errands."):
        return f"errands.{name}"
    return f"{module}.{name}"


def row_problem(row: ClaimedJob) -> str | None:
    """Why a claimed row cannot be run as it is (columns of the wrong type, written by hand), or None.

    SQLite keeps any value in any column, so these are checked before a run relies on them."""
    timeout = row.timeout
    if timeout is not None and (type(timeout) not in (float, int) or not 0 < timeout < math.inf):
        return f"the stored timeout {safe_text(repr(timeout), 40)} is not a positive number of seconds"
    if type(row.attempts) is not int or type(row.max_attempts) is not int or type(row.flags) is not int:
        return "the stored attempts, max_attempts or flags are not integers"
    return None


def prepare(app: Errands, row: ClaimedJob) -> tuple[JobDefinition[Any, Any], list[Any], dict[str, Any]] | Outcome:
    """Find the registered handler and decode arguments, or say why the job can never run."""
    definition = app.registry.get(row.name) if type(row.name) is str else None
    if definition is None:
        return Outcome(row, Result.FATAL, 0.0, "errands.UnknownJob",
                       safe_text(f"no job named {row.name!r} is registered in this app (known: "
                                 f"{', '.join(sorted(app.registry)) or 'none'})", ERROR_TEXT_CAP))
    try:
        args, kwargs = decode_arguments(row.payload)
    except BadPayload as exc:
        return Outcome(row, Result.FATAL, 0.0, "errands.BadPayload", str(exc), exc)
    return definition, args, kwargs


def run_sync(app: Errands, row: ClaimedJob) -> Outcome:
    """Run a plain (``def``) job in the calling thread; ``async def`` jobs go through ``run_async``."""
    prepared = prepare(app, row)
    if type(prepared) is Outcome:
        return prepared
    definition, args, kwargs = prepared  # type: ignore[misc]
    hooks = definition.behaviour.hooks
    if app.hooks.any or (hooks is not None and hooks.any):
        return _run_hooked_sync(app, row, definition, args, kwargs)
    token = running_row.set((row, app))
    started = _clock()
    try:
        value = definition.func(*args, **kwargs)
    except Exception as exc:  # a handler's failure is data for the retry decision
        return failure(row, exc, _clock() - started, definition)
    finally:
        running_row.reset(token)
    return Outcome(row, Result.OK, _clock() - started, value=value)


def _run_hooked_sync(app: Errands, row: ClaimedJob, definition: JobDefinition[Any, Any], args: list[Any],
                     kwargs: dict[str, Any]) -> Outcome:
    chain = chain_of(app.hooks, definition.behaviour.hooks)
    ctx = context_of(row, app)
    token = running_row.set((row, app))
    started = _clock()
    error: BaseException | None = None
    try:
        with around(chain, ctx):
            value = definition.func(*args, **kwargs)
    except Exception as exc:  # a handler's (or a before-hook's) failure is data for the retry decision
        error = exc
        return failure(row, exc, _clock() - started, definition)
    finally:
        call_after(chain, ctx, error)
        running_row.reset(token)
    return Outcome(row, Result.OK, _clock() - started, value=value)


async def run_async(app: Errands, row: ClaimedJob) -> Outcome:
    """Run an ``async def`` job on the worker's event loop, with a soft timeout."""
    prepared = prepare(app, row)
    if type(prepared) is Outcome:
        return prepared
    definition, args, kwargs = prepared  # type: ignore[misc]
    chain = chain_of(app.hooks, definition.behaviour.hooks)
    ctx: JobContext | None = context_of(row, app) if chain else None
    token = running_row.set((row, app))
    started = _clock()
    error: BaseException | None = None
    try:
        if chain:
            with around(chain, ctx):
                value = await _with_timeout(definition.func(*args, **kwargs), row.timeout)
        else:
            value = await _with_timeout(definition.func(*args, **kwargs), row.timeout)
    except Exception as exc:  # a handler's failure is data for the retry decision
        error = exc
        return failure(row, exc, _clock() - started, definition)
    finally:
        if chain:
            call_after(chain, ctx, error)
        running_row.reset(token)
    return Outcome(row, Result.OK, _clock() - started, value=value)


async def _with_timeout(coro: Any, timeout: float | None) -> Any:
    if timeout is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise JobTimeout(f"job exceeded its timeout of {timeout:g}s and was cancelled") from None


def failure(row: ClaimedJob, exc: BaseException, duration: float,
            definition: JobDefinition[Any, Any] | None = None) -> Outcome:
    """How a run that raised ends: retried (``Retry`` picks the delay), buried at once
    (``Discard``, or a type in the job's ``discard_on``), or cancelled.

    The message is made storable here (see :func:`errands.core.payload.safe_text`): a handler may raise
    anything, including text no database accepts and exceptions whose ``__str__`` raises."""
    text = safe_text(exc, ERROR_TEXT_CAP) or safe_text(repr(exc), ERROR_TEXT_CAP)
    if isinstance(exc, JobCancelled):
        return Outcome(row, Result.CANCELLED, duration, error_name(exc), text, exc)
    if isinstance(exc, Retry):
        return Outcome(row, Result.ERROR, duration, error_name(exc), text, exc, retry_delay=exc.delay)
    if isinstance(exc, Discard) or (definition is not None and definition.behaviour.discard_on
                                    and isinstance(exc, definition.behaviour.discard_on)):
        return Outcome(row, Result.FATAL, duration, error_name(exc), text, exc)
    return Outcome(row, Result.ERROR, duration, error_name(exc), text, exc)


def is_async_job(app: Errands, row: ClaimedJob) -> bool:
    definition = app.registry.get(row.name)
    return definition is not None and definition.is_async


def describe_arguments(row: ClaimedJob, limit: int = 200) -> str:
    """Short form of a job's arguments for log lines (the payload is already compact JSON), without
    the headers an enqueue hook appended (a trace context is no argument)."""
    text = without_headers(row.payload)
    return text if len(text) <= limit else text[: limit - 1] + "…"
