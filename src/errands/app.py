"""The ``Errands`` object: a registry of jobs, the settings, and the store they share."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from .core.config import check_queue_name, database_url, mask_url, read_url
from .core.cron import Cron
from .core.endings import RecoveryReport, announce
from .core.errors import ConfigurationError, EnqueueError, InvalidOption, JobNotFound, UnknownJob
from .core.hooks import Enqueue, Hooks, enqueuing
from .core.jobs import JobDefinition, JobHandle, JobOptions, JobSpec, default_job_name, job_id_of
from .core.limits import ID_MAX
from .core.payload import decode_arguments, decode_result, encode_result, with_inputs
from .core.retry import DEFAULT_POLICY, JobPolicy
from .core.rows import BatchRow, WorkflowRow, dead_state
from .core.schedules import DEFAULT_CATCH_UP, DEFAULT_CATCH_UP_LIMIT, CatchUp
from .core.settings import AppOptions, AppSettings
from .core.workflows import Chain, Group, Node, Workflow, chain
from .store import FailedJobRow, JobState, NewJob, QueueCounts, Store, open_store
from .store.replicas import ReadRouter, configured_read_url
from .worker.eager import run_inline
from .worker.runner import Worker
from .worker.settings import WorkerSettings

if TYPE_CHECKING:  # typing_extensions is no runtime dependency: Unpack only types ``**options``
    from typing_extensions import Unpack

    from .core.jobs import JobSpecArgs
    from .core.settings import AppOptionArgs
    from .worker.settings import WorkerOptions

P = ParamSpec("P")
R = TypeVar("R")


class Schedule:
    """A periodic job: its cron expression and the arguments each slot's run gets."""

    def __init__(self, job: JobDefinition[Any, Any], cron: Cron, args: Sequence[Any], kwargs: dict[str, Any],
                 catch_up: CatchUp | None = None) -> None:
        self.job = job
        self.cron = cron
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.catch_up = catch_up or CatchUp()

    @property
    def name(self) -> str:
        return self.job.name

    def prepare(self, slot_key: str) -> NewJob:
        """The run for one slot: its unique key names the slot, so it is enqueued at most once."""
        return self.job.using(unique_key=f"periodic:{self.name}:{slot_key}"[:255]).prepare(*self.args, **self.kwargs)


def _name_taken(job_name: str, func: Callable[..., Any], *, explicit: bool) -> str:
    """The refusal of a second job under one name, with the fix: two module-level lambdas, or two
    functions of one name, get the same default name."""
    message = f"a different job is already registered as {job_name!r}"
    if explicit:
        return f"{message}: choose another name=... for this one"
    if getattr(func, "__name__", None) == "<lambda>":
        return (f"{message} (every lambda of a module gets that name): register each one with its own name, "
                'app.job(name="...")(lambda ...)')
    return f'{message} (the default name, module.function): give one of them its own name, @app.job(name="...")'



class BatchHandle:
    """What ``app.batch`` and ``app.chain`` return: the batch id, the members, and its progress."""

    def __init__(self, app: Errands, batch_id: int, jobs: list[JobHandle]) -> None:
        self.id = batch_id
        self.jobs = jobs
        self._app = app

    def status(self) -> BatchRow:
        """Total, done, failed, percentage and whether it finished, read from the database."""
        row = self._app.store.features.get_batch(self.id)
        if row is None:
            raise ConfigurationError(f"batch {self.id} does not exist (or was pruned)")
        return row

    def workflow(self) -> WorkflowRow:
        """Its steps with their states (see :meth:`Workflows.status`)."""
        row = self._app.workflows.status(self.id)
        if row is None:
            raise ConfigurationError(f"batch {self.id} does not exist (or was pruned)")
        return row

    def cancel(self) -> int:
        """Cancel every member that has not started; returns how many (see :meth:`Workflows.cancel`)."""
        return self._app.workflows.cancel(self.id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} id={self.id} jobs={len(self.jobs)}>"

    if not TYPE_CHECKING:  # hidden from type checkers, which keep flagging the call

        def __getattr__(self, name: str) -> Any:
            if name in ("enqueue", "delay", "apply_async"):  # app.chain(...).enqueue(), as for a workflow
                raise AttributeError(f"{type(self).__name__} has no .{name}(): the jobs are already stored "
                                     "(app.chain(...) and app.batch(...) enqueue at once); this is their handle")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class WorkflowHandle(BatchHandle):
    """What ``workflow.enqueue()`` returns: the workflow's id, its jobs and a way to follow it."""

    def status(self) -> BatchRow:  # noqa: D102 - as BatchHandle's: total, done, failed, percent, finished
        return super().status()


class BlockedHandle(JobHandle):
    """Eager mode: a workflow step that did not run because a step it waits for failed."""

    __slots__ = ()

    def status(self) -> JobState:
        return JobState.BLOCKED


def _flatten(node: Chain | Group) -> list[NewJob]:
    wf = Workflow()
    wf.add(node)
    return wf.members()


def _json_copy(handle: JobHandle) -> Any:
    """An eager result as the database would carry it to a later step (through JSON)."""
    value = handle.result(timeout=0)
    return decode_result(encode_result(value))


def _eager_inputs(spec: Any, position: int, outcomes: list[Any]) -> Any:
    if isinstance(spec, list):
        return [_eager_inputs(item, position, outcomes) for item in spec]
    return outcomes[position + spec][1]


class Workflows:
    """``app.workflows``: follow and stop workflows (and chains and batches) already stored.

    Building one is ``app.workflow()``; what happens to it afterwards lives here rather than as
    more verbs on the application object."""

    def __init__(self, app: Errands) -> None:
        self._app = app

    def status(self, workflow_id: int) -> WorkflowRow | None:
        """A workflow's (or chain's, or batch's) progress and each step with its state, parents
        and error; None when there is no such workflow (or it was pruned)."""
        return self._app.store.workflows.get(workflow_id)

    def cancel(self, workflow_id: int) -> int:
        """Cancel every step of a workflow (or chain, or batch) that has not started; running
        steps finish.  Returns how many steps were cancelled."""
        return self._app.store.workflows.cancel(workflow_id, float(self._app.result_ttl))


class JobPolicies:
    """``app.policies``: how each of an app's jobs ends its attempts, the one place that looks a job's
    policy up or falls back (the worker, the supervisor and recovery all ask it)."""

    def __init__(self, app: Errands) -> None:
        self._app = app

    def policy_of(self, name: str) -> JobPolicy:
        """The job's backoff and retry rules, how long its result and cancellation records stay, and
        whether its tracebacks are kept.  A name no job of the app has gets the app's fallback (no
        backoff, every exception retries)."""
        app = self._app
        definition = app.registry.get(name)
        if definition is None:
            return JobPolicy(None, DEFAULT_POLICY, app.result_ttl, app.result_ttl, app.keep_traceback, known=False,
                             unknown_grace=app.unknown_job_grace)
        b = definition.behaviour
        return JobPolicy(definition.backoff, b.policy, b.result_ttl or app.result_ttl, app.result_ttl,
                         app.keep_traceback if b.keep_traceback is None else b.keep_traceback)


class Errands:
    """One application's jobs and the database that holds them.

    ``Errands()`` reads ``ERRANDS_DATABASE_URL`` (then ``DATABASE_URL``) and falls
    back to ``sqlite:///errands.db``, which creates its own tables on first use.
    """

    @classmethod
    def from_settings(cls, source: Any = None, *, pyproject: str | os.PathLike[str] | bool = True,
                      **overrides: Any) -> Errands:
        """An app configured from ``source`` (Django settings, a Flask config, a dict), ``ERRANDS_*``
        variables and ``[tool.errands]`` in pyproject.toml; see :mod:`errands.core.settings` for the order.

        ``overrides`` win over everything (e.g. ``eager=True`` in tests)."""
        eager = bool(overrides.pop("eager", False))
        settings = AppSettings.load(source, pyproject=pyproject, **overrides)
        return cls(eager=eager, **settings.as_kwargs())

    def __init__(self, database_url_: str | None = None, **options: Unpack[AppOptionArgs]) -> None:
        """``options``: the fields of :class:`~errands.core.settings.AppOptions`, where each one's
        default and meaning are declared (``Errands(url, lease=60, keep_results=True)``).  A bad
        value raises here, before anything connects: ``ConfigurationError`` (``InvalidQueueName``
        for ``default_queue``), and ``TypeError`` for a keyword that is no option.  Among them:
        ``default_queue``, ``max_attempts``, ``backoff``, ``timeout`` and ``max_snoozes``, the defaults
        of every job of this app that does not set its own (:class:`errands.core.jobs.JobDefaults`
        gives the order); ``eager``: run jobs inline at enqueue (for tests; see :meth:`eager`); the
        ``alert_*`` thresholds (see :meth:`on_alert` and :mod:`errands.core.alerts`)."""
        given = AppOptions(**options)
        self.database_url = _database_url(database_url_ or given.database_url)
        self.keep_results = given.keep_results
        self.workflows = Workflows(self)
        """Follow and cancel stored workflows: ``app.workflows.status(id)``, ``app.workflows.cancel(id)``."""
        self.policies = JobPolicies(self)
        """How each job ends its attempts (:class:`JobPolicies`)."""
        self.keep_traceback = bool(given.keep_traceback)
        self.result_ttl = float(given.result_ttl)
        self.failed_ttl = None if given.failed_ttl is None else float(given.failed_ttl)
        self.eager_mode = given.eager
        self._eager_propagate = True
        self.hooks = Hooks()
        self.schedules: dict[str, Schedule] = {}
        self.payload_limit = given.payload_limit
        self.lease = float(given.lease)
        self.table_prefix = given.table_prefix
        self.default_queue = given.default_queue
        self.job_defaults = given.job_defaults
        self.alert_thresholds = given.alert_thresholds
        self.unknown_job_grace = float(given.unknown_job_grace)
        """Seconds a job of a name no worker registers is held back before the dead letter."""
        self.run_logs = given.run_log_limits
        """How much of each attempt's logging workers keep with it (None: run logs are off)."""
        self.read_url = read_url(given.read_url)
        """The read replica (:func:`errands.core.config.read_url`); ``?read_url=`` in the database URL wins."""
        configured_read_url(self.database_url, self.read_url)  # a bad one fails here, before anything connects
        self.read_max_lag = float(given.read_max_lag)
        self.registry: dict[str, JobDefinition[Any, Any]] = {}
        self._store: Store | None = None
        self._router: ReadRouter | None = None
        self._store_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<Errands {mask_url(self.database_url)} jobs={len(self.registry)}>"

    # ------------------------------------------------------------------ store
    @property
    def store(self) -> Store:
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = open_store(self.database_url, prefix=self.table_prefix)
        return self._store

    @property
    def reads(self) -> Store:
        """The store for reads that may be a few seconds old (the dashboard's lists and figures, ``errands
        status``, ``/metrics``, the backlog): the read replica while it answers within ``read_max_lag``,
        else the primary (:mod:`errands.store.replicas`).  Never for a write, nor a read that must see one."""
        return self.read_router.store()

    @property
    def read_router(self) -> ReadRouter:
        """The one place that decides where :attr:`reads` go, and says why (``read_router.source()``)."""
        if self._router is None:
            store = self.store
            with self._store_lock:
                if self._router is None:
                    replica = configured_read_url(self.database_url, self.read_url)
                    self._router = ReadRouter(store, replica, self.read_max_lag)
        return self._router

    def use_database(self, url: str, *, store: Store | None = None) -> None:
        """Point this app at another database (the CLI's ``--database-url``).  ``store``: one already
        open on ``url`` to use instead of opening one (``errands.testing``: SQLite with its own clock)."""
        configured_read_url(url, self.read_url)
        self.database_url = url
        self._store = store
        router, self._router = self._router, None
        if router is not None:
            router.close()  # its replica belonged to the other database

    def close(self) -> None:
        """Close every database connection this app opened in this process (in any thread)."""
        store, router = self._store, self._router
        if router is not None:
            router.close()
        if store is not None:
            store.close()

    def migrate(self) -> list[int]:
        """Create or upgrade errands' tables; returns the versions applied now."""
        return self.store.migrate()

    # ------------------------------------------------------------------ registry
    @overload
    def job(self, func: Callable[P, R], /) -> JobDefinition[P, R]: ...

    @overload
    def job(self, func: None = None, /,
            **options: Unpack[JobSpecArgs]) -> Callable[[Callable[P, R]], JobDefinition[P, R]]: ...

    def job(self, func: Callable[P, R] | None = None, /, **options: Unpack[JobSpecArgs]) -> Any:
        """Register a function (sync or ``async def``) as a job: ``@app.job`` or ``@app.job(queue="mails")``.

        ``options``: the fields of :class:`~errands.core.jobs.JobSpec`, where each one's default and
        meaning are declared (``queue``, ``max_attempts``, ``backoff``, ``timeout``, ``unique``,
        ``rate_limit``, ``concurrency_limit``, ``retry_on``, ...).  Those left as None take the app's
        defaults (``timeout=math.inf``: no limit even if the app sets one).  A bad option raises
        here, before the function is even given: ``ConfigurationError`` (``InvalidOption`` for a
        queue, priority, attempts or timeout no enqueue could use)."""
        spec = JobSpec(**options)
        job_options, job_backoff, behaviour = self.job_defaults.for_job(spec)
        name = spec.name

        def register(f: Callable[P, R]) -> JobDefinition[P, R]:
            job_name = name or default_job_name(f)
            if job_name in self.registry and self.registry[job_name].func is not f:
                raise ConfigurationError(_name_taken(job_name, f, explicit=name is not None))
            definition = JobDefinition(self, f, job_name, job_options, job_backoff, behaviour)
            self.registry[job_name] = definition
            return definition

        return register(func) if func is not None else register

    def periodic(self, cron: str, *, timezone: str | None = None, args: Sequence[Any] = (),
                 kwargs: dict[str, Any] | None = None, catch_up: str = DEFAULT_CATCH_UP,
                 catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
                 **job_options: Any) -> Callable[[Callable[P, R]], JobDefinition[P, R]]:
        """Register a job that runs on a cron schedule, e.g. ``@app.periodic("*/5 * * * *")``.

        Every worker runs a scheduler; each slot is enqueued exactly once however many run
        (the database records the last slot of each schedule).  ``timezone`` is an IANA name
        (default UTC).  ``catch_up``: what runs of the slots missed while no scheduler ran:
        ``"latest"`` (the default: the latest one, once), ``"none"``, or ``"all"`` (each of them,
        at most ``catch_up_limit``, the most recent).  Schedules can also be stored in the
        database and changed while workers run (``errands periodic add``, the dashboard).
        """
        schedule_cron = Cron(cron, timezone)
        policy = CatchUp(catch_up, catch_up_limit)

        def register(f: Callable[P, R]) -> JobDefinition[P, R]:
            definition: JobDefinition[P, R] = self.job(**job_options)(f)
            schedule = Schedule(definition, schedule_cron, args, kwargs or {}, policy)
            try:  # the arguments every run will get: refused now, not at the first slot
                definition.prepare(*schedule.args, **schedule.kwargs)
            except EnqueueError as exc:
                del self.registry[definition.name]
                raise ConfigurationError(f"periodic job {definition.name}: {exc}") from None
            self.schedules[definition.name] = schedule
            return definition

        return register

    # ------------------------------------------------------------------ hooks
    def before_job(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(ctx)`` before every run (see :mod:`errands.core.hooks`)."""
        return self.hooks.before(fn)

    def after_job(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(ctx, error)`` after every run; ``error`` is None on success."""
        return self.hooks.after(fn)

    def around_job(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(ctx)`` returning a context manager (or a generator) wrapped around every run."""
        return self.hooks.around(fn)

    def on_dead(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(job)`` whenever a run lands in the dead letter; ``job`` is the failed job's record
        (:class:`errands.FailedJob`).  The older ``fn(ctx, error_type, error_message)`` works too."""
        return self.hooks.on_dead(fn)

    def on_retry(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(job)`` whenever a failed run is given back for a retry (in ``job.retry_in`` seconds).
        The older ``fn(ctx, error_type, error_message, delay)`` works too."""
        return self.hooks.on_retry(fn)

    def around_enqueue(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(enqueue)`` returning a context manager (or a generator) wrapped around every call that
        stores jobs (see :class:`errands.core.hooks.Enqueue`)."""
        return self.hooks.around_enqueue(fn)

    def on_alert(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn(alert)`` once for each crossing and each clearing of an alert threshold, fleet-wide:
        ``alert`` is an :class:`errands.Alert` (kind, value, threshold, crossed, at, queue).  It runs
        in the process that noticed the change (a worker, or a dashboard), on a thread of its own: a
        hook that raises is logged, one that hangs costs that thread only."""
        return self.hooks.on_alert(fn)

    def get_job(self, name: str) -> JobDefinition[Any, Any]:
        try:
            return self.registry[name]
        except KeyError:
            raise UnknownJob(f"no job named {name!r} is registered in this app "
                             f"(known: {', '.join(sorted(self.registry)) or 'none'})") from None

    # ------------------------------------------------------------------ enqueue
    def enqueue(self, job: str | JobDefinition[Any, Any], args: Sequence[Any] = (),
                kwargs: dict[str, Any] | None = None, **options: Any) -> JobHandle:
        """Enqueue a registered job by name or definition, e.g. from a CLI or another service."""
        if isinstance(job, str):
            definition = self.get_job(job)
        elif isinstance(job, JobDefinition):
            definition = job
        else:
            raise TypeError(self._not_a_job(job))
        if options:
            definition = definition.using(**options)
        return definition.enqueue(*args, **(kwargs or {}))

    def _not_a_job(self, value: object) -> str:
        """Why ``app.enqueue(value)`` cannot be, e.g. a lambda or the undecorated function."""
        given = getattr(value, "__qualname__", None) or type(value).__name__
        known = next((d.name for d in self.registry.values() if d.func is value), None)
        if known is not None:
            return (f"app.enqueue takes a registered job or its name, not the plain function {given}: it is "
                    f"registered as {known!r}, so pass {known!r} or the object @app.job returned")
        return (f"only registered jobs can be enqueued (functions decorated with @app.job, or their names), "
                f"got {type(value).__name__} {given}: register it first, job = app.job(name=\"...\")(func), "
                "then job.enqueue(...)")

    def enqueue_many(self, jobs: Iterable[NewJob], cursor: Any = None) -> list[JobHandle]:
        """Store many prepared jobs with multi-row INSERTs (``job.prepare(...)`` makes them).

        ``cursor``: a DB-API cursor of the caller's own connection to the same
        database; the jobs then commit or roll back with the caller's transaction.
        """
        batch = self._checked(jobs)
        if self.eager_mode:
            return [self.run_eagerly(self.get_job(new.name), new) for new in batch]
        if self.hooks.enqueuing:
            with enqueuing(self.hooks, Enqueue("enqueue_many", batch)) as call:
                ids = call.ids = self.store.jobs.enqueue(call.stamp(batch), cursor=cursor)
        else:
            ids = self.store.jobs.enqueue(batch, cursor=cursor)
        return [JobHandle(self, job_id, new.name) for job_id, new in zip(ids, batch, strict=True)]

    def _checked(self, jobs: Iterable[NewJob]) -> list[NewJob]:
        batch = list(jobs)
        for new in batch:
            if not isinstance(new, NewJob):
                raise TypeError(f"expected job.prepare(...) values, got {type(new).__name__}")
            self.get_job(new.name)
        return batch

    def batch(self, jobs: Iterable[NewJob], *, on_complete: NewJob | None = None,
              on_failure: NewJob | None = None, queue: str | None = None, priority: int | None = None,
              pass_results: bool = False) -> BatchHandle:
        """Enqueue jobs as one batch whose progress the database counts.

        ``on_complete`` is enqueued once when every member has ended (succeeded or in the dead
        letter); ``on_failure`` once, when the first member lands in the dead letter.  Both run
        exactly once even when the last members end at the same moment on different workers;
        inside them ``current_job().batch_id`` names the batch.  ``pass_results``: ``on_complete``
        receives the members' results as its first argument, a list in member order (None for a
        member that did not succeed).  An ``on_failure`` job whose handler has a ``failure``
        parameter receives the failed member's record there.  ``queue``/``priority``: of every
        member and callback.
        """
        members = self._checked(jobs)
        if not members:
            raise InvalidOption("a batch needs at least one job")
        return self._store_batch("batch", members, on_complete=on_complete, on_failure=on_failure, queue=queue,
                                 priority=priority, pass_results=pass_results)

    def chain(self, *jobs: Node, on_failure: NewJob | None = None, on_complete: NewJob | None = None,
              queue: str | None = None, priority: int | None = None, pass_results: bool = False) -> BatchHandle:
        """Enqueue jobs that run one after the other, each once the previous one succeeded.

        When one ends in the dead letter, ``on_failure`` runs and the rest of the chain stays
        blocked (visible, not lost; retrying the dead job resumes the chain).  Links may be
        groups and chains (``errands.group``, ``errands.chain``).  ``pass_results``: each link
        receives the result of the link before as its first argument (a list after a group).
        """
        members = self._checked(_flatten(chain(*jobs, pass_results=pass_results)))
        self._check_steps(members)
        return self._store_batch("chain", members, on_complete=on_complete, on_failure=on_failure,
                                 queue=queue, priority=priority)

    def workflow(self, name: str | None = None, *, policy: str = "block", on_complete: NewJob | None = None,
                 on_failure: NewJob | None = None, queue: str | None = None,
                 priority: int | None = None) -> Workflow:
        """A graph of jobs to build with ``add()`` and store with ``enqueue()``, in one transaction.

        ``policy``: when a step ends in the dead letter, the steps after it stay "block"ed
        (visible; retrying the dead step resumes the workflow) or are "cancel"led.
        """
        return Workflow(name, policy, on_complete, on_failure, queue, priority, store=self._enqueue_workflow)

    def _enqueue_workflow(self, wf: Workflow) -> WorkflowHandle:
        members = self._checked(wf.members())
        self._check_steps(members)
        handle = self._store_batch("workflow", members, on_complete=wf.on_complete, on_failure=wf.on_failure,
                                   queue=wf.queue, priority=wf.priority, name=wf.name, policy=wf.policy)
        wf.id, wf.handles = handle.id, handle.jobs
        return WorkflowHandle(self, handle.id, handle.jobs)

    def _store_batch(self, kind: str, members: list[NewJob], *, on_complete: NewJob | None,
                     on_failure: NewJob | None, queue: str | None, priority: int | None,
                     pass_results: bool = False, name: str | None = None,
                     policy: str | None = None) -> BatchHandle:
        self._checked([c for c in (on_complete, on_failure) if c is not None])
        if on_complete is not None:
            self._check_steps([on_complete], receives=pass_results)
        changes: dict[str, Any] = {}
        if queue is not None:
            check_queue_name(queue)
            changes["queue"] = queue
        if priority is not None:
            JobOptions(priority=priority).validated()
            changes["priority"] = priority
        if changes:
            members = [m._replace(**changes) for m in members]
            on_complete, on_failure = (None if c is None else c._replace(**changes) for c in (on_complete, on_failure))
        if self.eager_mode:
            return self._run_batch_eagerly(members)
        wants_failure = on_failure is not None and "failure" in self.get_job(on_failure.name).parameters
        options: dict[str, Any] = dict(name=name, policy=policy, result_ttl=float(self.result_ttl),
                                       pass_results=pass_results, failure_record=wants_failure)
        if self.hooks.enqueuing:
            with enqueuing(self.hooks, Enqueue(kind, members)) as call:
                complete, fail = (None if c is None else call.stamped(c) for c in (on_complete, on_failure))
                batch_id, ids = self.store.features.create_batch(kind, call.stamp(members), complete, fail, **options)
                call.batch_id, call.ids = batch_id, ids
        else:
            batch_id, ids = self.store.features.create_batch(kind, members, on_complete, on_failure, **options)
        return BatchHandle(self, batch_id, [JobHandle(self, i, new.name) for i, new in zip(ids, members, strict=True)])

    def _check_steps(self, members: Sequence[NewJob], *, receives: bool = False) -> None:
        """Each step's arguments against its handler, counting the result it receives (calls
        made with ``job.s(...)`` were not checked when they were made)."""
        for new in members:
            args, kwargs = decode_arguments(new.payload)
            self.get_job(new.name).check_arguments(args, kwargs, receives=receives or new.inputs is not None)

    def _run_batch_eagerly(self, members: list[NewJob]) -> BatchHandle:
        """Eager mode: run the members in order, each receiving its inputs from earlier results;
        a member whose dependency failed does not run (it would stay blocked)."""
        handles: list[JobHandle] = []
        outcomes: list[Any] = []  # (succeeded, value as JSON would carry it) per position
        for position, new in enumerate(members):
            deps = [position + a for a in new.after if a < 0]
            if any(not outcomes[d][0] for d in deps):
                outcomes.append((False, None))
                handles.append(BlockedHandle(self, -1, new.name))
                continue
            if new.inputs is not None:
                new = new._replace(payload=with_inputs(new.payload, has_first=True, first=_eager_inputs(
                    new.inputs, position, outcomes)))
            handle = self.run_eagerly(self.get_job(new.name), new)
            state = handle.status()
            outcomes.append((state is JobState.SUCCEEDED, _json_copy(handle) if state is JobState.SUCCEEDED else None))
            handles.append(handle)
        return BatchHandle(self, 0, handles)

    def batch_status(self, batch_id: int) -> BatchRow | None:
        return self.store.features.get_batch(batch_id)

    # ------------------------------------------------------------------ eager mode (for tests)
    @contextlib.contextmanager
    def eager(self, propagate: bool = True) -> Iterator[None]:
        """Run jobs inline, at enqueue, inside this block (in your own test suite).

        Handlers run with ``current_job()`` set and their hooks; with ``propagate`` a failing
        handler's exception reaches the caller of ``enqueue``.  Nothing touches the database.
        """
        before = self.eager_mode, self._eager_propagate
        self.eager_mode, self._eager_propagate = True, propagate
        try:
            yield
        finally:
            self.eager_mode, self._eager_propagate = before

    def run_eagerly(self, definition: JobDefinition[Any, Any], new: NewJob, args: Sequence[Any] | None = None,
                    kwargs: dict[str, Any] | None = None) -> JobHandle:
        return run_inline(self, definition, new, self._eager_propagate)

    def run_until_empty(self, queues: Sequence[str] | None = None, **options: Unpack[WorkerOptions]) -> int:
        """Run ready jobs in this process until none is left; returns how many ran (for tests).

        :meth:`run_worker` in burst mode, polling every 50 ms at most unless ``sleep`` says otherwise."""
        if not options.setdefault("burst", True):
            raise ConfigurationError("run_until_empty runs until no job is ready: burst=False is run_worker's")
        options.setdefault("sleep", 0.05)
        return self.run_worker(queues, **options)

    # ------------------------------------------------------------------ operations
    def job_state(self, job_id: int, name: str | None = None) -> JobState:
        """Where a job is now.

        FINISHED: it left every table (it ran, was forgotten, or its kept result expired).
        UNKNOWN: no job ever had this id here (it is beyond every id the database issued).
        ``name``: raise :class:`JobNotFound` when the job stored under this id has another name
        (a handle that names the wrong job must not read another job's fate as its own)."""
        if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= ID_MAX:
            return JobState.UNKNOWN
        store = self.store
        row = store.jobs.get_job(job_id)
        if row is not None:
            _same_job(job_id, row.name, name)
            return row.state(store.now())
        failed = store.jobs.get_failed(job_id)
        if failed is not None:
            _same_job(job_id, failed.name, name)
            return dead_state(failed.error_type, failed.error_message)
        result = store.features.get_result(job_id)
        if result is not None:
            _same_job(job_id, result.name, name)
            return result.state
        highest = store.jobs.highest_job_id()
        if highest is not None and job_id > highest:
            return JobState.UNKNOWN
        return JobState.FINISHED

    def cancel(self, job: Any) -> str:
        """Cancel a job (a handle or an id).

        Returns "cancelled" when it was waiting (it will never run), "requested" when it is
        running (its handler sees ``current_job().cancelled``; async handlers are cancelled at
        their next await), or "gone" when it had already ended.  Cancellations are recorded
        with the results.

        Library API: writes no audit line (why: :mod:`errands.services.operator`).  The audited door:
        ``errands.services.operator.cancel_job(app, actor, job_id)``, as the CLI and dashboard do.
        """
        return self.store.features.cancel(job_id_of(job), self.result_ttl)

    def pause_queue(self, queue: str) -> None:
        """Workers stop claiming from ``queue`` (running jobs finish) until it is resumed.

        Library API: writes no audit line (why: :mod:`errands.services.operator`).  The audited door:
        ``errands.services.operator.set_paused(app, actor, queue, True)``."""
        self.store.features.set_paused(check_queue_name(queue), True)

    def resume_queue(self, queue: str) -> None:
        """Workers claim from ``queue`` again.

        Library API: writes no audit line (why: :mod:`errands.services.operator`).  The audited door:
        ``errands.services.operator.set_paused(app, actor, queue, False)``."""
        self.store.features.set_paused(check_queue_name(queue), False)

    def paused_queues(self) -> list[str]:
        return self.store.features.paused_queues()

    def counts(self) -> dict[str, QueueCounts]:
        return self.store.jobs.counts()

    def failed(self, queue: str | None = None, limit: int = 100, offset: int = 0) -> list[FailedJobRow]:
        return self.store.jobs.list_failed(queue, limit, offset)

    def retry_failed(self, job_id: int | None = None, *, queue: str | None = None) -> list[int]:
        """Move one dead-letter entry (or all, or all of a queue) back to the jobs table.

        Library API: writes no audit line (why: :mod:`errands.services.operator`).  The audited door:
        ``errands.services.operator.retry_failed(app, actor, ids)`` (the ids of a queue's entries:
        ``operator.matching_failed(app, operator.JobFilter(queue=...))``)."""
        moved = self.store.jobs.retry_failed(None if job_id is None else [job_id], queue=queue)
        if job_id is not None and not moved:
            raise JobNotFound(f"no dead-letter entry with id {job_id}")
        return moved

    def forget_failed(self, job_id: int | None = None, *, queue: str | None = None) -> int:
        """Delete one dead-letter entry (or all, or all of a queue); returns how many.

        Library API: writes no audit line (why: :mod:`errands.services.operator`).  The audited door:
        ``errands.services.operator.forget_failed(app, actor, ids)``."""
        count = self.store.jobs.forget_failed(None if job_id is None else [job_id], queue=queue)
        if job_id is not None and not count:
            raise JobNotFound(f"no dead-letter entry with id {job_id}")
        return count

    def recover_stale(self) -> RecoveryReport:
        """End the attempts whose lease expired (their worker died): back in line while attempts are
        left, else the dead letter.  Workers do this on their own every half lease; the ``on_retry``
        and ``on_dead`` hooks of what this call ends run here, in this process."""
        report = self.store.endings.recover_stale(self.policies)
        for row, settlement in report.ended:
            announce(self, row, settlement)
        return report

    def run_worker(self, queues: Sequence[str] | None = None, **options: Unpack[WorkerOptions]) -> int:
        """Process jobs in this process (threads, soft timeouts); returns how many ran.

        ``queues``: most important first (default: every queue a registered job names);
        ``options``: every option of :class:`~errands.worker.settings.WorkerSettings`, with its
        default there (``concurrency``, ``burst``, ``max_jobs``, ``sleep``, ...), checked before
        anything runs (a refused one raises ConfigurationError).  ``errands worker`` adds a
        supervising process that enforces hard timeouts.
        """
        worker = Worker(self, WorkerSettings.of(queues or self.default_queues(), **options))
        worker.run()
        return worker.jobs_done

    def default_queues(self) -> list[str]:
        """Every queue a registered job names, default queue first."""
        queues = [self.default_queue]
        for definition in self.registry.values():
            if definition.options.queue not in queues:
                queues.append(definition.options.queue)
        return queues


def _same_job(job_id: int, stored: str, expected: str | None) -> None:
    if expected is not None and stored != expected:
        raise JobNotFound(f"job {job_id} is a {stored!r} job, not {expected!r}")


def _database_url(explicit: str | None) -> str:
    return database_url(explicit)
