"""Hooks around job runs and enqueues, per app and per job: for logging, metrics, tracing and error reporting.

Runs (per app and per job):

* ``before(ctx)`` runs just before the handler; an exception there fails the run.
* ``after(ctx, error)`` runs after it (``error`` is None on success); its own
  exceptions are logged and never change the run's outcome.  It sees every failed
  attempt, with the exception object and its traceback.
* ``around(ctx)`` returns a context manager entered around the handler (a generator
  function is accepted and wrapped with ``contextlib.contextmanager``), e.g. a span.
* ``on_retry(job)`` runs after a failed run was given back for another attempt in
  ``job.retry_in`` seconds (the retry is committed).
* ``on_expired(job)`` runs once for a job that was not started by its expiry (``expires_in``), after
  it was ended as expired (in the dead letter as ``errands.JobExpired``; ``on_dead`` does not hear
  of it), in the process whose maintenance pass ended it.  Per app: ``app.hooks.on_expired``.
* ``on_dead(job)`` runs after a run was moved to the dead letter (seed 004's ``failed()``), once
  per dead job whichever path buried it.  Both run in the process that decided the ending
  (:func:`errands.core.endings.announce`): the worker for its runs, the supervisor for a run it
  killed or lost, the process that recovered an expired lease.

  ``job`` is the failed job's record, a :class:`~errands.core.rows.FailedJob` (id, name, queue,
  arguments, error type and message, attempts).  Hooks written for the older calls,
  ``on_retry(ctx, error_type, error_message, delay)`` and ``on_dead(ctx, error_type,
  error_message)``, keep working: which call a hook gets is decided once, when it is registered,
  from what its signature accepts (the older call when it takes those arguments, the record when
  it takes one argument; neither is refused then, not at the first failure).

App hooks wrap job hooks: app ``around`` is outermost, then the job's, then app
``before``, job ``before``, the handler, job ``after``, app ``after``.  For ``async
def`` jobs the hooks run on the worker's event loop, inside the job's own context.

Alerts (per app only): ``on_alert(alert)`` runs once for each crossing and each clearing of an
alert threshold (:mod:`errands.core.alerts`), in whichever process of the fleet noticed it, on a
thread of its own (:mod:`errands.worker.alerts`).

Enqueues (per app only): ``around_enqueue(enqueue)`` returns a context manager (or is a
generator) entered around every call that stores jobs: ``job.enqueue``, ``job.aenqueue``,
``app.enqueue``, ``app.enqueue_many``, ``app.batch`` and ``app.chain`` (not eager mode,
which stores nothing).  It sees an :class:`Enqueue`; an enqueue that fails (arguments
JSON cannot hold, the database down) raises through it.  It may set
``enqueue.headers``: a few strings stored with each job of the call inside its JSON
payload and handed to no handler; :func:`job_headers` reads them during the run.  This
is how a trace context travels from the enqueue to the run without a column.

Nothing here costs a plain job anything: the worker reads one attribute per run
(``Hooks.any``) and an enqueue one attribute per call (``Hooks.enqueuing``), and only
when they are true does it build a context or enter a hook.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .context import running_row
from .errors import ConfigurationError
from .payload import encode_headers, read_headers, with_headers

if TYPE_CHECKING:
    from .rows import FailedJob, NewJob

log = logging.getLogger("errands.core.hooks")

class Hooks:
    __slots__ = ("before_run", "after_run", "around_run", "retry", "dead", "enqueue_around", "any", "enqueuing",
                 "scope", "alert", "expired")

    def __init__(self, scope: str = "app") -> None:
        self.before_run: list[Callable[..., Any]] = []
        self.after_run: list[Callable[..., Any]] = []
        self.around_run: list[Callable[..., contextlib.AbstractContextManager[Any]]] = []
        self.retry: list[tuple[Callable[..., Any], bool]] = []
        """``on_retry`` hooks, each with whether it takes the record (else the older arguments)."""
        self.dead: list[tuple[Callable[..., Any], bool]] = []
        self.expired: list[Callable[..., Any]] = []
        """``on_expired`` hooks: each takes the expired job's record."""
        self.enqueue_around: list[Callable[..., contextlib.AbstractContextManager[Any]]] = []
        self.any = False
        """Whether any run hook is registered: read for every run, so a plain attribute."""
        self.enqueuing = False
        """Whether any enqueue hook is registered: read for every enqueue."""
        self.scope = scope
        """"app" or "job": enqueue hooks exist only for a whole app."""
        self.alert: list[Callable[..., Any]] = []
        """``on_alert`` hooks (app only): each crossing or clearing of an alert threshold."""

    def __bool__(self) -> bool:
        return self.any

    def before(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        _require(fn, 1, "a before hook", "(ctx)")
        self.before_run.append(fn)
        self.any = True
        return fn

    def after(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        _require(fn, 2, "an after hook", "(ctx, error)")
        self.after_run.append(fn)
        self.any = True
        return fn

    def around(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        _require(fn, 1, "an around hook", "(ctx)")
        self.around_run.append(_context_manager(fn))
        self.any = True
        return fn

    def on_retry(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.retry.append((fn, _takes_record(fn, "on_retry", "(ctx, error_type, error_message, delay)")))
        self.any = True
        return fn

    def on_dead(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.dead.append((fn, _takes_record(fn, "on_dead", "(ctx, error_type, error_message)")))
        self.any = True
        return fn

    def on_expired(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        _require(fn, 1, "an on_expired hook", "(job)")
        self.expired.append(fn)
        self.any = True
        return fn

    def on_alert(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.scope != "app":
            raise ConfigurationError("alert hooks apply to a whole app: register them with app.on_alert")
        _require(fn, 1, "an on_alert hook", "(alert)")
        self.alert.append(fn)
        return fn

    def around_enqueue(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.scope != "app":
            raise ConfigurationError("enqueue hooks apply to a whole app: register them with app.around_enqueue")
        _require(fn, 1, "an around_enqueue hook", "(enqueue)")
        self.enqueue_around.append(_context_manager(fn))
        self.enqueuing = True
        return fn


def _accepts(fn: Callable[..., Any], count: int) -> bool | None:
    """Whether ``fn`` can be called with ``count`` positional arguments (None: its signature is unknown)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none to read
        return None
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def _require(fn: Callable[..., Any], count: int, what: str, call: str) -> None:
    """Refuse, at registration, a hook the worker could not call as documented."""
    if not callable(fn):
        raise ConfigurationError(f"{what} must be callable, got {fn!r}")
    if _accepts(fn, count) is False:
        raise ConfigurationError(f"{what} is called with {call}, which "
                                 f"{getattr(fn, '__qualname__', repr(fn))}{_signature_text(fn)} cannot take")


def _takes_record(fn: Callable[..., Any], kind: str, legacy: str) -> bool:
    """How an ``on_retry`` / ``on_dead`` hook is called: True, with the failed job's record alone;
    False, with the older arguments ``legacy`` (what a hook that accepts them has always got)."""
    if not callable(fn):
        raise ConfigurationError(f"an {kind} hook must be callable, got {fn!r}")
    old = _accepts(fn, legacy.count(",") + 1)
    if old is not False:
        return False
    if _accepts(fn, 1):
        return True
    name = getattr(fn, "__qualname__", repr(fn))
    raise ConfigurationError(f"the {kind} hook {name}{_signature_text(fn)} takes neither the failed job's record "
                             f"({kind}(job), an errands.FailedJob) nor the older arguments {legacy}")


def _signature_text(fn: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _context_manager(fn: Callable[..., Any]) -> Callable[..., contextlib.AbstractContextManager[Any]]:
    return contextlib.contextmanager(fn) if inspect.isgeneratorfunction(fn) else fn


def chain_of(app_hooks: Hooks, job_hooks: Hooks | None) -> list[Hooks]:
    """The hook sets that apply to one run, outermost first (empty ones left out)."""
    return [h for h in (app_hooks, job_hooks) if h]


@contextlib.contextmanager
def around(chain: list[Hooks], ctx: Any) -> Iterator[None]:
    """Enter every ``around`` hook, then call the ``before`` hooks."""
    with contextlib.ExitStack() as stack:
        for hooks in chain:
            for make in hooks.around_run:
                stack.enter_context(make(ctx))
        for hooks in chain:
            for fn in hooks.before_run:
                fn(ctx)
        yield


def call_after(chain: list[Hooks], ctx: Any, error: BaseException | None) -> None:
    for hooks in reversed(chain):
        for fn in hooks.after_run:
            try:
                fn(ctx, error)
            except Exception:  # an after-hook must never change the outcome it reports
                log.exception("after-hook %r failed", fn)


def call_on_retry(chain: list[Hooks], ctx: Any, job: FailedJob) -> None:
    for hooks in reversed(chain):
        for fn, takes_record in hooks.retry:
            try:
                if takes_record:
                    fn(job)
                else:
                    fn(ctx, job.error_type, job.error_message, job.retry_in)
            except Exception:  # reported, never fatal to the worker
                log.exception("on_retry hook %r failed", fn)


def call_on_dead(chain: list[Hooks], ctx: Any, job: FailedJob) -> None:
    for hooks in reversed(chain):
        for fn, takes_record in hooks.dead:
            try:
                if takes_record:
                    fn(job)
                else:
                    fn(ctx, job.error_type, job.error_message)
            except Exception:  # reported, never fatal to the worker
                log.exception("on_dead hook %r failed", fn)


def call_on_expired(chain: list[Hooks], job: FailedJob) -> None:
    for hooks in reversed(chain):
        for fn in hooks.expired:
            try:
                fn(job)
            except Exception:  # reported, never fatal to the worker
                log.exception("on_expired hook %r failed", fn)


# ---------------------------------------------------------------------------------- enqueues
class Enqueue:
    """One call that stores jobs, as an ``around_enqueue`` hook sees it.

    ``kind`` is "enqueue" (one job, sync or async), "enqueue_many", "batch" or "chain".
    ``name`` and ``queue`` are the job name and queue when every job of the call shares
    them (None otherwise); they are known on entry.  ``jobs`` holds the prepared jobs
    once their arguments are encoded (for a single enqueue that happens inside the hook,
    so a refused argument raises through it), ``ids`` the stored ids once the insert
    returned, and ``batch_id`` the batch of ``batch``/``chain``.
    """

    __slots__ = ("kind", "name", "queue", "jobs", "headers", "ids", "batch_id", "_stamp")

    def __init__(self, kind: str, jobs: Sequence[NewJob] = (), *, name: str | None = None,
                 queue: str | None = None) -> None:
        self.kind = kind
        self.jobs: list[NewJob] = list(jobs)
        if jobs and name is None:
            names = {j.name for j in jobs}
            name = next(iter(names)) if len(names) == 1 else None
        if jobs and queue is None:
            queues = {j.queue for j in jobs}
            queue = next(iter(queues)) if len(queues) == 1 else None
        self.name = name
        self.queue = queue
        self.headers: dict[str, str] = {}
        self.ids: list[int] = []
        self.batch_id: int | None = None
        self._stamp: str | None = None

    @property
    def queues(self) -> list[str]:
        """Every queue the call stores jobs in, sorted."""
        return sorted({j.queue for j in self.jobs} or ({self.queue} if self.queue else set()))

    def stamp(self, jobs: Sequence[NewJob]) -> list[NewJob]:
        """Record ``jobs`` as this call's and return them with the headers written into their payloads."""
        if not self.jobs:
            self.jobs = list(jobs)
        return [self.stamped(j) for j in jobs] if self.headers else list(jobs)

    def stamped(self, job: NewJob) -> NewJob:
        """``job`` with this call's headers inside its payload (unchanged without headers)."""
        if not self.headers:
            return job
        if self._stamp is None:
            self._stamp = encode_headers(self.headers)
        return job._replace(payload=with_headers(job.payload, self._stamp))

    def __repr__(self) -> str:
        return f"<Enqueue {self.kind} name={self.name!r} queue={self.queue!r} jobs={len(self.jobs)} ids={self.ids}>"


@contextlib.contextmanager
def enqueuing(hooks: Hooks, enqueue: Enqueue) -> Iterator[Enqueue]:
    """Enter every ``around_enqueue`` hook around one call that stores jobs."""
    with contextlib.ExitStack() as stack:
        for make in hooks.enqueue_around:
            stack.enter_context(make(enqueue))
        yield enqueue


def job_headers() -> dict[str, str]:
    """The headers an enqueue hook stored with the job that is running now ({} if none).

    For ``around``, ``before`` and ``after`` hooks and handlers; it parses the payload
    again, so it costs a JSON decode: call it once per run."""
    current = running_row.get()
    return {} if current is None else read_headers(current[0].payload)
