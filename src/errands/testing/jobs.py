"""What a test asks of the jobs table: what is waiting, run it all, enqueue the due periodic jobs.

Everything reads the real tables through the store, so a test sees what a worker would: the
stored name, the arguments as they came back from JSON, the queue, the state by the database's
clock.  Assertion helpers raise ``AssertionError`` with the jobs that are there, so a failing
test says what was enqueued instead of only that something was not.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..app import Errands
from ..core.errors import BadPayload
from ..core.jobs import JobDefinition
from ..core.payload import decode_arguments
from ..core.rows import JobRow, JobState
from ..worker.maintenance import end_overdue
from ..worker.scheduler import Scheduler

__all__ = ["Enqueued", "Jobs"]

LISTED = 10_000
"""The most jobs one look at the table reads (a test that enqueues more asks per queue)."""
DELIBERATE = ("errands.Retry:", "errands.Discard:", "errands.JobExpired:")
"""Failures a handler chose (``raise Retry(...)``, ``Discard``), and jobs that expired unstarted, which
``drain`` does not report."""


@dataclass(frozen=True)
class Enqueued:
    """One job waiting in the jobs table, as a worker would find it."""

    id: int
    name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    state: JobState
    available_at: datetime
    priority: int
    attempts: int
    last_error: str | None

    def __str__(self) -> str:
        due = f" until {self.available_at.isoformat()}" if self.state is JobState.DELAYED else ""
        return f"#{self.id} {_call(self.name, self.args, self.kwargs)} in {self.queue!r}, {self.state.value}{due}"


class Jobs:
    """Helpers over one app's jobs table: :meth:`drain`, :meth:`enqueued`, :meth:`assert_enqueued`,
    :meth:`assert_not_enqueued`, :meth:`run_schedules`.  The ``errands_jobs`` fixture is one."""

    def __init__(self, app: Errands) -> None:
        self.app = app
        self._scheduler = Scheduler(app, threading.Event(), clock=lambda: app.store.now())

    # ------------------------------------------------------------------ running
    def drain(self, queues: Sequence[str] | None = None, *, limit: int = 1000, raise_errors: bool = True) -> int:
        """Run ready jobs in this process until none is left; returns how many ran.

        ``queues``: every queue your jobs name and every queue holding a job, unless given.  Jobs
        that are not due (a delay, a retry's backoff) stay: move the clock and drain again.  At most
        ``limit`` runs: more, with jobs still ready, fails (a job that keeps enqueueing itself).
        Waiting jobs past their expiry or deadline are then ended, as a worker's maintenance pass would
        (their ``on_expired`` / ``on_dead`` hooks run).
        ``raise_errors``: a run that failed during the drain (waiting for its retry, or in the dead
        letter) fails the test with its error; ``raise Retry(...)`` and ``Discard`` do not count."""
        store = self.app.store
        names = list(queues) if queues else sorted(set(self.app.default_queues()) | set(store.jobs.counts()))
        before = self._failures()
        ran = self.app.run_worker(names, burst=True, max_jobs=limit, sleep=0.05)
        end_overdue(self.app)  # what a worker's maintenance pass does: past expiry or deadline, ended now
        if raise_errors:
            new = sorted(self._failures().items() - before.items())
            if new:
                lines = "\n".join(f"  #{job_id} {name}: {error}" for job_id, (name, error) in new)
                raise AssertionError(f"{len(new)} job(s) failed while draining (raise_errors=False to allow it):\n"
                                     f"{lines}")
        if ran >= limit:
            left = [job for job in self.enqueued() if job.state is JobState.READY and job.queue in names
                    and job.queue not in set(store.features.paused_queues())]
            if left:
                raise AssertionError(f"drain ran {ran} jobs, its limit, and {len(left)} are still ready (a job that "
                                     f"enqueues itself?); the first: {left[0]}")
        return ran

    def _failures(self) -> dict[int, tuple[str, str]]:
        """Job id -> (name, error and attempt) of waiting jobs whose last run failed and of dead-letter
        entries: a run that fails again changes its entry, so a drain sees every new failure."""
        out = {row.id: (row.name, f"{row.last_error} (attempt {row.attempts} of {row.max_attempts}, will retry)")
               for row in self._rows() if row.last_error is not None and not row.last_error.startswith(DELIBERATE)}
        for dead in self.app.store.jobs.list_failed(limit=LISTED):
            text = f"{dead.error_type}: {dead.error_message}"
            if not text.startswith(DELIBERATE):
                out[dead.id] = (dead.name, f"{text} (in the dead letter after {dead.attempts} attempt(s))")
        return out

    def run_schedules(self) -> list[Enqueued]:
        """Enqueue the periodic jobs whose slot is due by the database's clock, as a worker's scheduler
        would; returns the jobs this call enqueued.  A schedule's first look only records its slot
        (it starts with the next one), so freeze the clock, call this, advance, call it again."""
        before = {job.id for job in self.enqueued()}
        self._scheduler.tick()
        return [job for job in self.enqueued() if job.id not in before]

    # ------------------------------------------------------------------ looking
    def _rows(self, queue: str | None = None) -> list[JobRow]:
        return self.app.store.jobs.list_jobs(queue, limit=LISTED)

    def enqueued(self, job: JobDefinition[Any, Any] | str | None = None, *, queue: str | None = None) -> list[Enqueued]:
        """The jobs waiting in the table (ready, delayed, blocked or running), oldest first; of one job
        (a definition or its name) and queue when given.  Jobs that ran are no longer there."""
        name = _name(job)
        now = self.app.store.now()
        out = []
        for row in self._rows(queue):
            if name is not None and row.name != name:
                continue
            try:
                args, kwargs = decode_arguments(row.payload)
            except BadPayload:
                args, kwargs = ["<payload errands cannot read>"], {}
            out.append(Enqueued(row.id, row.name, row.queue, args, kwargs, row.state(now), row.available_at,
                                row.priority, row.attempts, row.last_error))
        return out

    def assert_enqueued(self, job: JobDefinition[Any, Any] | str, args: Sequence[Any] | None = None,
                        kwargs: Mapping[str, Any] | None = None, *, queue: str | None = None,
                        count: int | None = None) -> list[Enqueued]:
        """Assert that ``job`` is waiting, with these arguments (compared as the handler would receive
        them: ``f(42)`` matches ``kwargs={"user_id": 42}``) in ``queue``; ``count``: exactly that many
        (default: at least one).  Returns the matching jobs."""
        matching, wanted = self._matching(job, args, kwargs, queue)
        if (count is None and matching) or len(matching) == count:
            return matching
        expected = "at least 1" if count is None else str(count)
        raise AssertionError(f"expected {expected} job(s) {wanted}, found {len(matching)}; {self._listing()}")

    def assert_not_enqueued(self, job: JobDefinition[Any, Any] | str | None = None, args: Sequence[Any] | None = None,
                            kwargs: Mapping[str, Any] | None = None, *, queue: str | None = None) -> None:
        """Assert that no such job is waiting (with no ``job``: no job at all, of ``queue`` if given)."""
        if job is None:
            found = self.enqueued(queue=queue)
            wanted = "" if queue is None else f" in {queue!r}"
        else:
            found, wanted = self._matching(job, args, kwargs, queue)
            wanted = " " + wanted
        if found:
            raise AssertionError(f"expected no job{wanted}, found {len(found)}; {self._listing()}")

    def _matching(self, job: JobDefinition[Any, Any] | str, args: Sequence[Any] | None,
                  kwargs: Mapping[str, Any] | None, queue: str | None) -> tuple[list[Enqueued], str]:
        name = _name(job)
        assert name is not None
        definition = self.app.registry.get(name)
        where = "in any queue" if queue is None else f"in {queue!r}"
        if args is None and kwargs is None:
            return self.enqueued(name, queue=queue), f"{name} {where}"
        expected_args, expected_kwargs = list(args or ()), dict(kwargs or {})
        if definition is not None:  # as stored: through the argument codec (tuples come back as lists)
            expected_args, expected_kwargs = decode_arguments(definition.prepare(*expected_args,
                                                                                  **expected_kwargs).payload)
        wanted = _bound(definition, expected_args, expected_kwargs)
        found = [j for j in self.enqueued(name, queue=queue) if _bound(definition, j.args, j.kwargs) == wanted]
        return found, f"{_call(name, expected_args, expected_kwargs)} {where}"

    def _listing(self) -> str:
        jobs = self.enqueued()
        if not jobs:
            return "the jobs table is empty"
        shown = "\n".join(f"  {job}" for job in jobs[:50])
        more = f"\n  ... and {len(jobs) - 50} more" if len(jobs) > 50 else ""
        return f"the jobs table holds {len(jobs)}:\n{shown}{more}"


def _call(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    shown = [*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())]
    return f"{name}({', '.join(shown)})"


def _name(job: JobDefinition[Any, Any] | str | None) -> str | None:
    if job is None or isinstance(job, str):
        return job
    if isinstance(job, JobDefinition):
        return job.name
    raise TypeError(f"expected a job (its definition or its name), got {job!r}")


def _bound(definition: JobDefinition[Any, Any] | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The arguments as the handler's parameters receive them (defaults filled in), so that a positional
    and a keyword call compare equal; as given when the handler is unknown or they do not fit it."""
    if definition is not None:
        try:
            bound = inspect.signature(definition.func).bind(*args, **kwargs)
        except (TypeError, ValueError):
            pass
        else:
            bound.apply_defaults()
            return dict(bound.arguments)
    return (list(args), dict(kwargs))
