"""The ``Errands`` object: a registry of jobs, the settings, and the store they share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from .config import check_queue_name, database_url
from .errors import ConfigurationError, UnknownJob
from .jobs import JobDefinition, JobHandle, JobOptions
from .retry import BackoffSpec, make_backoff
from .store import FailedJobRow, JobState, NewJob, QueueCounts, RecoveryReport, SQLStore, open_store

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_PAYLOAD_LIMIT = 64 * 1024


class Errands:
    """One application's jobs and the database that holds them.

    ``Errands()`` reads ``ERRANDS_DATABASE_URL`` (then ``DATABASE_URL``) and falls
    back to ``sqlite:///errands.db``, which creates its own tables on first use.
    """

    def __init__(self, database_url_: str | None = None, *, database_url: str | None = None,
                 payload_limit: int = DEFAULT_PAYLOAD_LIMIT, lease: float = 30.0,
                 table_prefix: str = "errands_", default_queue: str = "default") -> None:
        self.database_url = _database_url(database_url_ or database_url)
        if payload_limit <= 0:
            raise ConfigurationError("payload_limit must be a positive number of bytes")
        if lease < 1:
            raise ConfigurationError("lease must be at least one second")
        self.payload_limit = payload_limit
        self.lease = float(lease)
        self.table_prefix = table_prefix
        self.default_queue = check_queue_name(default_queue)
        self.registry: dict[str, JobDefinition[Any, Any]] = {}
        self._store: SQLStore | None = None
        self._store_lock = threading.Lock()

    def __repr__(self) -> str:
        from .config import mask_url

        return f"<Errands {mask_url(self.database_url)} jobs={len(self.registry)}>"

    # ------------------------------------------------------------------ store
    @property
    def store(self) -> SQLStore:
        if self._store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = open_store(self.database_url, prefix=self.table_prefix)
        return self._store

    def use_database(self, url: str) -> None:
        """Point this app at another database (the CLI's ``--database-url``)."""
        self.database_url = url
        self._store = None

    def migrate(self) -> list[int]:
        """Create or upgrade errands' tables; returns the versions applied now."""
        return self.store.migrate()

    # ------------------------------------------------------------------ registry
    @overload
    def job(self, func: Callable[P, R], /) -> JobDefinition[P, R]: ...

    @overload
    def job(self, func: None = None, /, *, name: str | None = None, queue: str | None = None,
            priority: int = 0, max_attempts: int = 3, backoff: BackoffSpec = "exponential",
            jitter: float = 0.0, timeout: float | None = None
            ) -> Callable[[Callable[P, R]], JobDefinition[P, R]]: ...

    def job(self, func: Callable[P, R] | None = None, /, *, name: str | None = None, queue: str | None = None,
            priority: int = 0, max_attempts: int = 3, backoff: BackoffSpec = "exponential",
            jitter: float = 0.0, timeout: float | None = None) -> Any:
        """Register a function (sync or ``async def``) as a job."""

        def register(f: Callable[P, R]) -> JobDefinition[P, R]:
            job_name = name or f"{f.__module__}.{f.__qualname__}"
            if job_name in self.registry and self.registry[job_name].func is not f:
                raise ConfigurationError(f"a different job is already registered as {job_name!r}")
            options = JobOptions(queue=queue or self.default_queue, priority=priority, max_attempts=max_attempts,
                                 timeout=timeout).validated()
            definition = JobDefinition(self, f, job_name, options, make_backoff(backoff, jitter=jitter))
            self.registry[job_name] = definition
            return definition

        return register(func) if func is not None else register

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
        definition = self.get_job(job) if isinstance(job, str) else job
        if options:
            definition = definition.using(**options)
        return definition.enqueue(*args, **(kwargs or {}))

    def enqueue_many(self, jobs: Iterable[NewJob], cursor: Any = None) -> list[JobHandle]:
        """Store many prepared jobs with multi-row INSERTs (``job.prepare(...)`` makes them).

        ``cursor``: a DB-API cursor of the caller's own connection to the same
        database; the jobs then commit or roll back with the caller's transaction.
        """
        batch = list(jobs)
        for new in batch:
            if not isinstance(new, NewJob):
                raise TypeError(f"enqueue_many takes job.prepare(...) values, got {type(new).__name__}")
            self.get_job(new.name)
        ids = self.store.enqueue(batch, cursor=cursor)
        return [JobHandle(self, job_id, new.name) for job_id, new in zip(ids, batch, strict=True)]

    # ------------------------------------------------------------------ operations
    def job_state(self, job_id: int) -> JobState:
        row = self.store.get_job(job_id)
        if row is not None:
            return row.state(self.store.now())
        if self.store.get_failed(job_id) is not None:
            return JobState.FAILED
        return JobState.FINISHED

    def counts(self) -> dict[str, QueueCounts]:
        return self.store.counts()

    def failed(self, queue: str | None = None, limit: int = 100, offset: int = 0) -> list[FailedJobRow]:
        return self.store.list_failed(queue, limit, offset)

    def retry_failed(self, job_id: int | None = None, *, queue: str | None = None) -> list[int]:
        """Move one dead-letter entry (or all, or all of a queue) back to the jobs table."""
        return self.store.retry_failed(None if job_id is None else [job_id], queue=queue)

    def forget_failed(self, job_id: int | None = None, *, queue: str | None = None) -> int:
        return self.store.forget_failed(None if job_id is None else [job_id], queue=queue)

    def recover_stale(self) -> RecoveryReport:
        return self.store.recover_stale()

    def run_worker(self, queues: Sequence[str] | None = None, *, concurrency: int = 1, burst: bool = False,
                   max_jobs: int | None = None, sleep: float = 1.0) -> int:
        """Process jobs in this process (threads, soft timeouts); returns how many ran.

        ``errands worker`` adds a supervising process that enforces hard timeouts.
        """
        from .worker.runner import Worker, WorkerSettings

        settings = WorkerSettings(queues=tuple(queues or self.default_queues()), concurrency=concurrency,
                                  burst=burst, max_jobs=max_jobs, sleep=sleep)
        worker = Worker(self, settings)
        worker.run()
        return worker.jobs_done

    def default_queues(self) -> list[str]:
        """Every queue a registered job names, default queue first."""
        queues = [self.default_queue]
        for definition in self.registry.values():
            if definition.options.queue not in queues:
                queues.append(definition.options.queue)
        return queues


def _database_url(explicit: str | None) -> str:
    return database_url(explicit)
