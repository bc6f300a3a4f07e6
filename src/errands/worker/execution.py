"""Running one claimed job and describing how it ended, without touching the database.

The outcome is a value; the worker loop decides what to write (complete, retry
later, bury).  Keeping execution free of SQL lets the same code run under a
thread, an event loop or the supervisor's accounting.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import JobTimeout, UnknownJob
from ..store.rows import ClaimedJob
from .context import JobContext, reset_current, set_current

if TYPE_CHECKING:
    from ..app import Errands


class Result(str, enum.Enum):
    OK = "ok"
    ERROR = "error"
    """The handler raised: retry if attempts are left."""
    FATAL = "fatal"
    """The job can never run (unknown name, undecodable payload): bury at once."""


@dataclass(frozen=True)
class Outcome:
    row: ClaimedJob
    result: Result
    duration: float
    error_type: str = ""
    error_message: str = ""
    exc: BaseException | None = None

    @property
    def error_text(self) -> str:
        return f"{self.error_type}: {self.error_message}"


def error_name(exc: BaseException) -> str:
    """``ValueError`` for builtins, ``errands.JobTimeout`` for ours, ``module.Class`` otherwise."""
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    if cls.__module__.startswith("errands."):
        return f"errands.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def prepare(app: Errands, row: ClaimedJob) -> tuple[Any, list[Any], dict[str, Any]] | Outcome:
    """Find the registered handler and decode arguments, or say why the job can never run."""
    try:
        definition = app.get_job(row.name)
    except UnknownJob as exc:
        return Outcome(row, Result.FATAL, 0.0, "errands.UnknownJob", str(exc), exc)
    try:
        args, kwargs = row.arguments
    except (ValueError, TypeError, AttributeError) as exc:
        return Outcome(row, Result.FATAL, 0.0, "errands.BadPayload", f"stored arguments are not valid JSON: {exc}",
                       exc)
    return definition, args, kwargs


def run_sync(app: Errands, row: ClaimedJob, worker_id: str) -> Outcome:
    """Run a plain (``def``) job in the calling thread; ``async def`` jobs go through ``run_async``."""
    prepared = prepare(app, row)
    if isinstance(prepared, Outcome):
        return prepared
    definition, args, kwargs = prepared
    token = set_current(JobContext(row.id, row.name, row.queue, row.attempts, row.max_attempts, worker_id))
    started = time.perf_counter()
    try:
        definition.func(*args, **kwargs)
    except Exception as exc:  # a handler's failure is data for the retry decision
        return failure(row, exc, time.perf_counter() - started)
    finally:
        reset_current(token)
    return Outcome(row, Result.OK, time.perf_counter() - started)


async def run_async(app: Errands, row: ClaimedJob, worker_id: str) -> Outcome:
    """Run an ``async def`` job on the worker's event loop, with a soft timeout."""
    prepared = prepare(app, row)
    if isinstance(prepared, Outcome):
        return prepared
    definition, args, kwargs = prepared
    token = set_current(JobContext(row.id, row.name, row.queue, row.attempts, row.max_attempts, worker_id))
    started = time.perf_counter()
    try:
        await _with_timeout(definition.func(*args, **kwargs), row.timeout)
    except Exception as exc:  # a handler's failure is data for the retry decision
        return failure(row, exc, time.perf_counter() - started)
    finally:
        reset_current(token)
    return Outcome(row, Result.OK, time.perf_counter() - started)


async def _with_timeout(coro: Any, timeout: float | None) -> Any:
    if timeout is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise JobTimeout(f"job exceeded its timeout of {timeout:g}s and was cancelled") from None


def failure(row: ClaimedJob, exc: BaseException, duration: float) -> Outcome:
    return Outcome(row, Result.ERROR, duration, error_name(exc), str(exc) or repr(exc), exc)


def is_async_job(app: Errands, row: ClaimedJob) -> bool:
    definition = app.registry.get(row.name)
    return definition is not None and definition.is_async


def describe_arguments(row: ClaimedJob, limit: int = 200) -> str:
    """Short form of a job's arguments for log lines (the payload is already compact JSON)."""
    text = row.payload
    return text if len(text) <= limit else text[: limit - 1] + "…"
