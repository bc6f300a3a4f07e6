"""``ErrandsBackend``: Django's Tasks framework on errands.

::

    TASKS = {"default": {"BACKEND": "errands.contrib.django.ErrandsBackend",
                         "QUEUES": ["default", "emails"]}}

Each ``@task`` function becomes an errands job named by the task's module path, registered
when Django validates the task (at ``@task``, in every process that imports the module).
``enqueue`` writes the job on Django's own connection of the ``database`` alias, inside an
atomic block that joins the caller's transaction: a rollback takes the job with it.
``get_result`` reads errands' tables (see :mod:`.results`).  Results are always kept (for
``result_ttl``) since that is what ``get_result`` reads.

Mapping: ``priority`` is errands' priority unchanged (both: larger runs first, within a
queue; Django's range -100..100 fits errands' 32-bit one); ``queue_name`` is the queue;
``run_after`` is ``run_at``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules

from ...app import Errands
from ...core.config import check_queue_name
from ...core.errors import InvalidQueueName, PayloadNotSerializable, SchemaError
from ...core.jobs import JobDefinition
from .compat import (
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
)
from .database import InMemoryDatabase, url_for_connection
from .execution import job_function
from .options import BackendOptions
from .results import build, lookup, name_of

APP_NAME = "errands.contrib.django"


class ErrandsBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendOptions.parse(alias, params.get("OPTIONS", {}))
        self.queue_order: list[str] = list(dict.fromkeys(params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])))
        """QUEUES in the order given (Django keeps a set): the order a worker takes them in."""
        for name in self.queue_order:
            try:
                check_queue_name(name)
            except InvalidQueueName as exc:
                raise ImproperlyConfigured(f"TASKS[{alias!r}]['QUEUES']: {exc}") from None
        self._tasks: dict[str, Any] = {}
        self._app: Errands | None = None
        self._lock = threading.RLock()
        self._discovered = False

    # ------------------------------------------------------------------ the errands app
    @property
    def errands(self) -> Errands:
        """The errands app behind this backend: its jobs are this backend's tasks.

        Its URL follows the alias' current settings, so a test runner that swaps in a test
        database is followed too.
        """
        url = url_for_connection(connections[self.config.database], self.config.database_url)
        with self._lock:
            app = self._app
            if app is None:
                o = self.config
                app = Errands(url, table_prefix=o.table_prefix, keep_results=True, result_ttl=o.result_ttl,
                              lease=o.lease, max_attempts=o.max_attempts, backoff=o.backoff, timeout=o.timeout)
                for task in self._tasks.values():
                    self._register(app, task)
                self._app = app
            elif app.database_url != url:
                app.store.close()
                app.use_database(url)
            return app

    def close(self) -> None:
        """Close errands' own connections of this process (Django's are Django's to close)."""
        with self._lock:
            if self._app is not None:
                self._app.store.close()

    def _register(self, app: Errands, task: Any) -> JobDefinition[Any, Any]:
        name = task.module_path
        definition = app.registry.get(name)
        if definition is not None:
            return definition
        # max_attempts, backoff and timeout: OPTIONS are the app's job defaults (Errands(...) above).
        register = app.job(name=name, queue=task.queue_name, priority=task.priority, keep_result=True)
        return register(job_function(task, self))

    def _definition(self, task: Any) -> JobDefinition[Any, Any]:
        app = self.errands
        with self._lock:
            return self._register(app, self._tasks[task.module_path])

    def discover(self) -> None:
        """Import every module that defines tasks: each installed app's ``tasks`` module and the
        ``task_modules`` option.  Workers do this at start; ``get_result`` when it meets a task
        this process has not imported yet."""
        if self._discovered:
            return
        autodiscover_modules("tasks")
        for module in self.config.task_modules:
            import_module(module)
        self._discovered = True

    def worker_queues(self) -> list[str]:
        """The queues a worker takes by default: QUEUES in order, then any other queue a task names."""
        queues = list(self.queue_order)
        for task in self._tasks.values():
            if task.queue_name not in queues:
                queues.append(task.queue_name)
        return queues or [DEFAULT_TASK_QUEUE_NAME]

    # ------------------------------------------------------------------ Django's backend API
    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        try:
            check_queue_name(task.queue_name)
        except InvalidQueueName as exc:
            raise InvalidTask(str(exc)) from None
        name = task.module_path
        with self._lock:
            known = self._tasks.get(name)
            if known is None:
                self._tasks[name] = task
                if self._app is not None:
                    self._register(self._app, task)
            elif known.func is not task.func:
                raise InvalidTask(f"another task is already registered as {name!r} on backend {self.alias!r}")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        try:
            args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise PayloadNotSerializable(f"arguments of task {task.module_path!r} must be JSON values (str, int, "
                                         f"float, bool, None, lists and dicts of them): {exc}") from None
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            options["run_at"] = _aware(task.run_after)
        definition = self._definition(task)
        alias = self.config.database
        try:
            # savepoint=False: inside the caller's atomic block this adds no savepoint; outside one
            # it is a transaction of its own.  Either way the row commits with everything around it.
            with transaction.atomic(using=alias, savepoint=False), connections[alias].cursor() as cursor:
                handle = definition.using(cursor=cursor.cursor, **options).enqueue(*args, **kwargs)
        except SchemaError as exc:
            raise SchemaError(f"{exc} (in a Django project: add {APP_NAME!r} to INSTALLED_APPS and run "
                              "manage.py migrate, or manage.py errands_migrate)") from exc
        result = TaskResult(task=task, id=str(handle.id), status=TaskResultStatus.READY, enqueued_at=timezone.now(),
                            started_at=None, last_attempted_at=None, finished_at=None, args=args, kwargs=kwargs,
                            backend=self.alias, errors=[], worker_ids=[])
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        text = str(result_id)
        if not text.isdigit() or not text.isascii():
            raise TaskResultDoesNotExist(f"no task result {result_id!r} (errands' ids are integers)")
        found = lookup(self.errands.store, int(text))
        if found is None:
            raise TaskResultDoesNotExist(f"no task result {result_id!r}: never enqueued, rolled back, or its "
                                         f"record expired (results are kept {self.config.result_ttl:g}s)")
        name = name_of(found)
        task = self._tasks.get(name)
        if task is None:
            self.discover()
            task = self._tasks.get(name)
        if task is None:
            raise TaskResultDoesNotExist(f"task result {result_id!r} is a run of {name!r}, which is not a task of "
                                         f"backend {self.alias!r} in this process (is its module imported, or "
                                         "listed in OPTIONS['task_modules']?)")
        return build(task, self.alias, found)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        yield from super().check(**kwargs)
        if self.config.database not in settings.DATABASES:
            yield checks.Error(f"TASKS[{self.alias!r}]['OPTIONS']['database'] names {self.config.database!r}, "
                               "which is not in DATABASES", id="errands.E001")
            return
        from django.apps import apps

        if not apps.is_installed(APP_NAME):
            yield checks.Warning(f"{APP_NAME!r} is not in INSTALLED_APPS: manage.py migrate will not create "
                                 "errands' tables and manage.py errands_worker will not exist",
                                 hint=f"add {APP_NAME!r} to INSTALLED_APPS", id="errands.W001")
        try:
            url_for_connection(connections[self.config.database], self.config.database_url)
        except InMemoryDatabase as exc:  # Django's test runner's default: tests that do not enqueue still run
            yield checks.Warning(str(exc), id="errands.W002")
        except ImproperlyConfigured as exc:
            yield checks.Error(str(exc), id="errands.E002")


def errands_backend(alias: str = "default") -> ErrandsBackend:
    """``TASKS[alias]``, which must be an :class:`ErrandsBackend`: what the management commands and
    the dashboard work for.  Anything else (no such alias, a backend Django cannot build, another
    kind of backend) is refused with the reason."""
    try:
        backend = task_backends[alias]
    except Exception as exc:  # InvalidTaskBackend, or the backend's own ImproperlyConfigured
        raise ImproperlyConfigured(f"TASKS has no usable backend {alias!r}: {exc}") from exc
    if not isinstance(backend, ErrandsBackend):
        raise ImproperlyConfigured(f"TASKS[{alias!r}] is {type(backend).__name__}, "
                                   "not errands.contrib.django.ErrandsBackend")
    return backend


def _aware(value: datetime) -> datetime:
    """``run_after`` as an aware time: naive values (``USE_TZ = False``) are in Django's TIME_ZONE."""
    if timezone.is_aware(value):
        return value
    return timezone.make_aware(value, timezone.get_default_timezone())
