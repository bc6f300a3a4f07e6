"""Execution: running claimed jobs and describing how each ended, without writing to the database.

The outcome is a value (:class:`~errands.core.endings.RunOutcome`); settling has it decided and
written (:mod:`errands.core.endings`: complete, retry later, bury).
Keeping execution free of SQL lets the same functions run under a thread, an event loop,
eager mode or the supervisor's accounting.  :class:`Runners` are the worker's runner threads
(and the event loop its async jobs share): they take jobs from the buffer admission fills and
hand each outcome to settling.  This is the per-job hot path of a worker, so it builds as
little as it can: one named tuple per run, no call layer between taking a job and handing
its outcome on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue as queue_mod
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.context import JobContext, Stopping, context_of, running_row
from ..core.endings import Result, RunOutcome
from ..core.errors import BadPayload, Interrupted, JobCancelled, JobTimeout, Retry, Snooze
from ..core.hooks import around, call_after, chain_of
from ..core.payload import ERROR_TEXT_CAP, decode_arguments, safe_text, without_headers
from ..core.rows import ClaimedJob
from ..core.runlogs import Capture, RunLog, capturing, record_factory

if TYPE_CHECKING:
    from ..core.jobs import JobDefinition
    from .host import RunHost
    from .slots import SlotTable
    from .state import WorkerState

log = logging.getLogger("errands.worker")
_clock = time.perf_counter
_INF = float("inf")
START_TOLERANCE = 0.010
"""Seconds a rate-limited run may start after the moment the database recorded its start (a
thread's wake-up on a busy machine); a run its runner reaches later is given back unrun and
granted a start again (issue 26), so the handlers' own starts keep to the limit within this much."""
ASYNC_HARD_GRACE = 2.0
"""Seconds the supervisor waits past an async job's soft timeout before killing."""


_capture_lock = threading.Lock()
_capture_installed = [False]


def install_capture() -> None:
    """Wrap ``logging``'s record factory once per process so that the records a run makes join its
    log (:mod:`errands.core.runlogs`); the first worker with run logs on does it."""
    with _capture_lock:
        if not _capture_installed[0]:
            logging.setLogRecordFactory(record_factory(logging.getLogRecordFactory()))
            _capture_installed[0] = True


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
    if type(row.attempts) is not int or type(row.max_attempts) is not int or type(row.flags) is not int \
            or type(row.snoozes) is not int:
        return "the stored attempts, max_attempts, flags or snoozes are not integers"
    return None


def prepare(app: RunHost, row: ClaimedJob, found: JobDefinition[Any, Any] | None = None,
            ) -> tuple[JobDefinition[Any, Any], list[Any], dict[str, Any]] | RunOutcome:
    """Find the registered handler and decode arguments, or say why the job can never run.
    ``found``: the handler the caller already looked up for this row (a runner thread does)."""
    definition = found or (app.registry.get(row.name) if type(row.name) is str else None)
    if definition is None:
        # A name that is text but not registered here may be a rolling deploy's new job: held back.
        return RunOutcome(row, Result.UNKNOWN if type(row.name) is str else Result.FATAL, 0.0, "errands.UnknownJob",
                       safe_text(f"no job named {row.name!r} is registered in this app (known: "
                                 f"{', '.join(sorted(app.registry)) or 'none'})", ERROR_TEXT_CAP))
    try:
        args, kwargs = decode_arguments(row.payload)
        if definition.enums:
            args, kwargs = definition.enums.to_members(args, kwargs)
    except BadPayload as exc:
        return RunOutcome(row, Result.FATAL, 0.0, "errands.BadPayload", str(exc), exc)
    return definition, args, kwargs


def run_sync(app: RunHost, row: ClaimedJob, stopping: Stopping | None = None,
             found: JobDefinition[Any, Any] | None = None) -> RunOutcome:
    """Run a plain (``def``) job in the calling thread; ``async def`` jobs go through ``run_async``.
    ``stopping``: the worker's stop flag, which ``current_job().stopping`` reads; ``found``: the
    row's handler, when the caller has looked it up already."""
    prepared = prepare(app, row, found)
    if type(prepared) is RunOutcome:
        return prepared
    definition, args, kwargs = prepared  # type: ignore[misc]
    hooks = definition.behaviour.hooks
    if app.hooks.any or (hooks is not None and hooks.any):
        return _run_hooked_sync(app, row, definition, args, kwargs, stopping)
    token = running_row.set((row, app, stopping))
    started = _clock()
    try:
        value = definition.func(*args, **kwargs)
    except Exception as exc:  # a handler's failure is data for the retry decision
        return failure(row, exc, _clock() - started)
    finally:
        running_row.reset(token)
    return RunOutcome(row, Result.OK, _clock() - started, value=value)


def _run_hooked_sync(app: RunHost, row: ClaimedJob, definition: JobDefinition[Any, Any], args: list[Any],
                     kwargs: dict[str, Any], stopping: Stopping | None = None) -> RunOutcome:
    chain = chain_of(app.hooks, definition.behaviour.hooks)
    ctx = context_of(row, app, stopping)
    token = running_row.set((row, app, stopping))
    started = _clock()
    error: BaseException | None = None
    try:
        with around(chain, ctx):
            value = definition.func(*args, **kwargs)
    except Exception as exc:  # a handler's (or a before-hook's) failure is data for the retry decision
        error = exc
        return failure(row, exc, _clock() - started)
    finally:
        call_after(chain, ctx, error)
        running_row.reset(token)
    return RunOutcome(row, Result.OK, _clock() - started, value=value)


async def run_async(app: RunHost, row: ClaimedJob, stopping: Stopping | None = None) -> RunOutcome:
    """Run an ``async def`` job on the worker's event loop, with a soft timeout."""
    prepared = prepare(app, row)
    if type(prepared) is RunOutcome:
        return prepared
    definition, args, kwargs = prepared  # type: ignore[misc]
    chain = chain_of(app.hooks, definition.behaviour.hooks)
    ctx: JobContext | None = context_of(row, app, stopping) if chain else None
    token = running_row.set((row, app, stopping))
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
        return failure(row, exc, _clock() - started)
    finally:
        if chain:
            call_after(chain, ctx, error)
        running_row.reset(token)
    return RunOutcome(row, Result.OK, _clock() - started, value=value)


async def _with_timeout(coro: Any, timeout: float | None) -> Any:
    if timeout is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise JobTimeout(f"job exceeded its timeout of {timeout:g}s and was cancelled") from None


def failure(row: ClaimedJob, exc: BaseException, duration: float) -> RunOutcome:
    """How a run that raised ends: cancelled, snoozed, or an error for the retry policy
    (:func:`errands.core.endings.decide` reads the exception: ``Retry`` picks the delay, ``Discard``,
    ``discard_on`` and ``retry_on`` say whether it may retry).

    The message is made storable here (see :func:`errands.core.payload.safe_text`): a handler may raise
    anything, including text no database accepts and exceptions whose ``__str__`` raises."""
    text = safe_text(exc, ERROR_TEXT_CAP) or safe_text(repr(exc), ERROR_TEXT_CAP)
    if isinstance(exc, JobCancelled):
        return RunOutcome(row, Result.CANCELLED, duration, error_name(exc), text, exc)
    if isinstance(exc, Snooze):
        return RunOutcome(row, Result.SNOOZED, duration, error_name(exc), text, exc, retry_delay=exc.seconds)
    if isinstance(exc, Interrupted):
        return RunOutcome(row, Result.INTERRUPTED, duration, error_name(exc), text, exc)
    if isinstance(exc, Retry):
        return RunOutcome(row, Result.ERROR, duration, error_name(exc), text, exc, retry_delay=exc.delay)
    return RunOutcome(row, Result.ERROR, duration, error_name(exc), text, exc)


def is_async_job(app: RunHost, row: ClaimedJob) -> bool:
    definition = app.registry.get(row.name)
    return definition is not None and definition.is_async


def describe_arguments(row: ClaimedJob, limit: int = 200) -> str:
    """Short form of a job's arguments for log lines (the payload is already compact JSON), without
    the headers an enqueue hook appended (a trace context is no argument)."""
    text = without_headers(row.payload)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _cancel_pending() -> None:
    """Cancel every other task of the running loop and wait until each has finished."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class Runners:
    """The runner threads of one worker process, and the event loop its async jobs share.

    ``record`` takes each outcome (:meth:`errands.worker.settling.Settling.record`); it is
    called straight from the thread that ran the job."""

    def __init__(self, app: RunHost, state: WorkerState, slots: SlotTable | None,
                 record: Callable[[ClaimedJob, RunOutcome], None]) -> None:
        self.app = app
        self.store = app.store
        self.state = state
        self.slots = slots
        self._record = record
        self.threads: list[threading.Thread] = []
        self.futures: dict[int, Any] = {}
        """Running async jobs by id (the thread-safe futures their runner threads wait on)."""
        self._tasks: dict[int, asyncio.Task[RunOutcome]] = {}
        """Their tasks, touched only in the event loop's thread (cancellation cancels these)."""
        self._cancel_requested = state.cancel_requested
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._log_limits = app.run_logs
        """How much of each run's logging to keep (None: off, and runs pay nothing for it)."""
        self._captures: list[Capture | None] = []
        """Each runner thread's capture of its runs' records (:mod:`errands.core.runlogs`), by slot."""
        self._task_logs: dict[int, RunLog] = {}
        """The records of async runs whose task ended, by job id, until their runner thread takes them."""
        self._unlogged: frozenset[str] = frozenset()
        """Names of the jobs whose runs' records are not kept (``@app.job(run_logs=False)``)."""

    def start(self, concurrency: int) -> None:
        limits = self._log_limits
        if limits is not None:
            install_capture()
        self._captures = [None if limits is None else Capture(limits) for _ in range(concurrency)]
        self._unlogged = frozenset(name for name, definition in self.app.registry.items()
                                   if definition.behaviour.run_logs is False)
        for n in range(concurrency):
            t = threading.Thread(target=self._runner, args=(n,), name=f"errands-runner-{n}", daemon=True)
            t.start()
            self.threads.append(t)

    def _runner(self, slot: int) -> None:
        state = self.state
        get, db_ok, stop, stop_now = state.work.get, state.db_ok, state.stop, state.stop_now
        run_one, not_before, starts = self._run_one, state.not_before, state.starts
        clock = time.monotonic
        capturing.set(self._captures[slot] if slot < len(self._captures) else None)  # this thread's context
        try:
            while True:
                row = get()
                due = None
                if not_before and row is not None:  # a rate-limited start, recorded for that moment
                    due = not_before.pop(row.id, None)
                    if due is not None:
                        stop_now.wait(max(0.0, due - clock()))
                # Jobs usually need the database too: while it is away, start nothing new.
                while not db_ok.is_set() and not db_ok.wait(0.5):
                    if stop_now.is_set():
                        return
                if row is None or stop_now.is_set():
                    return
                if stop.is_set():  # stopping: leave it held, the shutdown gives it back unrun
                    with state.count_lock:
                        state.outstanding -= 1
                    state.wake.set()
                    continue
                if due is not None:
                    recorded = starts.pop(row.id, [])
                    if clock() - due > START_TOLERANCE:
                        # Too late after the start the database recorded for it: started now, it could
                        # meet the next window's prompt starts in one period.  Given back unrun (and its
                        # recorded start taken back), it is granted a new start at its next claim.
                        state.missed_start(row, recorded)
                        continue
                run_one(slot, row)
        finally:
            self.store.release_thread_connection()  # a handler may have used the app's store

    def _run_one(self, slot: int, row: ClaimedJob) -> None:
        capture = self._captures[slot] if slot < len(self._captures) else None
        if self._unlogged and row.name in self._unlogged:
            capture = None
        if capture is not None:  # this thread's records join the run's log (an async run's: its task's)
            capture.start(row.id, row.attempts)
        try:
            outcome = self._execute(slot, row)
        except BaseException as exc:  # noqa: B036 - a handler's SystemExit, or a fault of errands' own:
            # the thread must survive it, and the run must end in a retry or the dead letter (never
            # be given back unrun, which would refund its attempt and loop for ever).
            outcome = failure(row, exc, 0.0)
            log.error("job %s: its run failed outside the handler's own error handling: %s", row.id,
                      outcome.error_text, exc_info=exc)
        finally:
            logs = None if capture is None else capture.finish() or self._task_logs.pop(row.id, None)
        if logs:
            outcome = outcome._replace(logs=logs)
        self._record(row, outcome)

    def _execute(self, slot: int, row: ClaimedJob) -> RunOutcome:
        timeout = row.timeout
        if not ((timeout is None or type(timeout) is float and 0.0 < timeout < _INF) and type(row.attempts) is int
                and type(row.max_attempts) is int and type(row.flags) is int):  # the usual case, checked inline
            problem = row_problem(row)
            if problem is not None:
                return RunOutcome(row, Result.FATAL, 0.0, "errands.BadPayload", problem)
        definition = self.app.registry.get(row.name) if type(row.name) is str else None
        is_async = definition is not None and definition.is_async
        slots = self.slots
        if slots is not None:
            if timeout is not None and is_async:
                timeout += ASYNC_HARD_GRACE
            slots.start(slot, row.id, timeout)
        try:
            if is_async:
                future = asyncio.run_coroutine_threadsafe(self._run_task(row), self._event_loop())
                self.futures[row.id] = future
                try:
                    return self._future_outcome(future, row)
                finally:
                    self.futures.pop(row.id, None)
            return run_sync(self.app, row, self.state.stopping, definition)
        finally:
            if slots is not None:
                slots.clear(slot)

    def _future_outcome(self, future: Any, row: ClaimedJob) -> RunOutcome:
        try:
            outcome: RunOutcome = future.result()
            return outcome
        except BaseException as exc:  # cancelled (by request or at shutdown), or a bug in execution itself
            if row.id in self._cancel_requested:
                return RunOutcome(row, Result.CANCELLED, 0.0, "errands.JobCancelled",
                               "cancelled while running (its task was cancelled)", exc)
            return failure(row, exc, 0.0)

    async def _run_task(self, row: ClaimedJob) -> RunOutcome:
        """An async run as a task of the event loop that cancellation can reach.  Cancelling the task
        (not the thread-safe future, which would report the run over at once) lets the handler see
        CancelledError at its next await and finish its cleanup (finally blocks, after-hooks) before
        the run is recorded as cancelled."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks[row.id] = task
        capture = None
        if self._log_limits is not None and row.name not in self._unlogged:  # in the task's own context
            capture = Capture(self._log_limits)
            capture.start(row.id, row.attempts)
            capturing.set(capture)
        if row.id in self._cancel_requested:  # requested before the task first ran
            task.cancel()
        try:
            return await run_async(self.app, row, self.state.stopping)
        finally:
            self._tasks.pop(row.id, None)
            logs = None if capture is None else capture.finish()
            if logs:  # (kept for the runner thread: a cancelled task's outcome is made there)
                self._task_logs[row.id] = logs

    def _cancel_task(self, job_id: int) -> None:
        """In the event loop: cancel the task of a running async job (if it started; else it cancels itself)."""
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None:
            with self._loop_lock:  # runner threads may meet their first async job at once
                if self.loop is None:
                    loop = asyncio.new_event_loop()
                    self._loop_thread = threading.Thread(target=loop.run_forever, name="errands-event-loop",
                                                         daemon=True)
                    self._loop_thread.start()
                    self.loop = loop
        return self.loop

    def cancel(self, requested: set[int]) -> None:
        """Cancel the tasks of the running async jobs among ``requested`` (ids whose cancellation
        the database holds); each is cancelled once."""
        for job_id in requested & set(self.futures):
            if job_id not in self._cancel_requested:
                self._cancel_requested.add(job_id)
                if self.loop is not None:
                    log.info("job %d: cancellation requested; cancelling its task", job_id)
                    self.loop.call_soon_threadsafe(self._cancel_task, job_id)

    def unstarted(self) -> list[int]:
        """Take back buffered jobs no runner has started (they are released on shutdown)."""
        state = self.state
        ids: list[int] = []
        while True:
            try:
                row = state.work.get_nowait()
            except queue_mod.Empty:
                return ids
            if row is not None:
                ids.append(row.id)
                with state.count_lock:
                    state.outstanding -= 1

    def stop_event_loop(self, timeout: float) -> None:
        """Cancel the tasks still running (given back by the shutdown) and let them finish their
        cleanup, then stop the loop: a loop stopped with pending tasks destroys them mid-run."""
        loop = self.loop
        if loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(timeout=timeout)
        except Exception as exc:  # a task that ignores cancellation, or a loop already gone
            log.warning("async jobs did not finish their cancellation: %s", safe_text(exc, 200))
        loop.call_soon_threadsafe(loop.stop)
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=timeout)
        if not loop.is_running():
            loop.close()
