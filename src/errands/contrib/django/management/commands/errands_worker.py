"""``manage.py errands_worker``: run the project's tasks, with Django set up.

The same worker as ``errands worker`` (a supervisor forking worker processes, hard
timeouts, graceful shutdown on SIGTERM); its processes are forks of this one, so each
starts with Django set up and every task module imported.  Django's connections are closed
before the fork, and each task run opens (and, as after a request, closes) its own.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from errands.config import mask_url, split_queues
from errands.errors import ErrandsError, InvalidQueueName, SchemaError, StoreUnavailable
from errands.worker.runner import WorkerSettings
from errands.worker.supervisor import Supervisor
from ._common import errands_backend

LOG_FORMAT = "%(asctime)s %(levelname)-7s [%(process)d] %(message)s"


def _env(name: str, default: object = None) -> object:
    """An option's default from its ``ERRANDS_*`` variable; argparse converts a string default with
    the option's type, so a bad value is refused like a bad flag."""
    return os.environ.get(name, default)


def _env_flag(name: str) -> bool:
    """A flag's default from ``ERRANDS_*``, as ``errands worker`` reads it (1/true/yes/on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


class Command(BaseCommand):
    help = ("Run errands workers for this project's tasks. Every option also reads its ERRANDS_* variable "
            "as `errands worker` does (ERRANDS_CONCURRENCY, ERRANDS_QUEUES, ERRANDS_BURST, ...). "
            "SIGTERM or Ctrl-C: stop claiming, let running tasks "
            "finish (up to --shutdown-timeout), give the rest back. A second signal gives them back at once.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias to work for (default: default).")
        parser.add_argument("-q", "--queue", dest="queues", action="append", default=[], metavar="NAME[,NAME]",
                            help="Queues to take tasks from, most important first (repeatable or comma list; "
                                 "default: the backend's QUEUES, then any other queue a task names).")
        parser.add_argument("-c", "--concurrency", type=_positive_int, default=_env("ERRANDS_CONCURRENCY", 1),
                            help="Tasks run at once per worker process (threads; async tasks share one event "
                                 "loop). Default 1.")
        parser.add_argument("-p", "--processes", type=_positive_int, default=_env("ERRANDS_PROCESSES", 1),
                            help="Worker processes under this supervisor. Default 1.")
        parser.add_argument("--max", dest="max_jobs", type=_positive_int, default=_env("ERRANDS_MAX_JOBS"),
                            help="Exit after this many tasks (per process).")
        parser.add_argument("--once", action="store_true", default=_env_flag("ERRANDS_ONCE"),
                            help="Run at most one task, then exit.")
        parser.add_argument("--burst", action="store_true", default=_env_flag("ERRANDS_BURST"),
                            help="Exit when no task is ready.")
        parser.add_argument("--sleep", type=_positive_float, default=_env("ERRANDS_SLEEP", 1.0),
                            help="Longest wait in seconds between polls when idle. Default 1.")
        parser.add_argument("--shutdown-timeout", type=float, default=_env("ERRANDS_SHUTDOWN_TIMEOUT", 30.0),
                            help="Seconds running tasks get to finish after SIGTERM. Default 30.")
        parser.add_argument("--lease", type=_positive_float, default=_env("ERRANDS_LEASE"),
                            help="Seconds a claim is held without a heartbeat (default: the backend's lease).")
        parser.add_argument("--prefetch", type=int, default=_env("ERRANDS_PREFETCH"),
                            help="Tasks held beyond the running ones (default: adapts to task duration).")
        parser.add_argument("--log-level", default=_env("ERRANDS_LOG_LEVEL", "INFO"),
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                            help="Level of errands' log lines when Django's LOGGING gives them no handler.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = errands_backend(options["backend"])
        self._logging(options["log_level"], options["verbosity"])
        backend.discover()
        app = backend.errands
        try:
            named = options["queues"] or [_env("ERRANDS_QUEUES", "")]  # a flag beats the variable
            queues = split_queues(named) or tuple(backend.worker_queues())
        except InvalidQueueName as exc:
            raise CommandError(str(exc)) from None
        if options["shutdown_timeout"] < 0 or (options["prefetch"] is not None and options["prefetch"] < 0):
            raise CommandError("--shutdown-timeout and --prefetch must not be negative")
        if options["lease"] is not None and options["lease"] < 1:
            raise CommandError("--lease must be at least 1 second")
        once = options["once"]
        settings = WorkerSettings(queues=queues, concurrency=options["concurrency"], burst=options["burst"] or once,
                                  max_jobs=1 if once else options["max_jobs"], sleep=options["sleep"],
                                  shutdown_timeout=options["shutdown_timeout"], lease=options["lease"],
                                  prefetch=0 if once else options["prefetch"], scheduler=False)
        try:
            app.store.run(lambda cur: None)  # a missing schema or an unreachable database fails here, once
        except SchemaError as exc:
            raise CommandError(f"{exc} (with 'errands.contrib.django' in INSTALLED_APPS, manage.py migrate "
                               "creates the tables)") from exc
        except StoreUnavailable as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"] > 0:
            self.stderr.write(f"errands worker for TASKS[{backend.alias!r}]: database {mask_url(app.database_url)}\n"
                              f"  queues: {', '.join(queues)} | processes: {options['processes']} x concurrency "
                              f"{options['concurrency']}\n  tasks: {', '.join(sorted(app.registry)) or 'none'}")
        connections.close_all()  # nothing of Django's may cross the fork
        try:
            code = Supervisor(app, settings, options["processes"]).run()
        except ErrandsError as exc:
            raise CommandError(str(exc)) from exc
        if code:
            sys.exit(code)

    @staticmethod
    def _logging(level: str, verbosity: int) -> None:
        """errands' worker logs job failures and restarts; without a handler from Django's LOGGING
        they would be lost, so give its logger one (on stderr) unless LOGGING configured it."""
        logger = logging.getLogger("errands")
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt="%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel("WARNING" if verbosity == 0 else level)
