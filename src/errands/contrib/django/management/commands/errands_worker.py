"""``manage.py errands_worker``: run the project's tasks, with Django set up.

The same worker as ``errands worker`` (a supervisor forking worker processes, hard
timeouts, graceful shutdown on SIGTERM); its processes are forks of this one, so each
starts with Django set up and every task module imported.  Django's connections are closed
before the fork, and each task run opens (and, as after a request, closes) its own.

Its options read the values of ``errands worker``'s: the types, limits, defaults and
``ERRANDS_*`` variables come from that click command itself, so the two cannot disagree on
what a value means or which values are refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from django.conf import settings as django_settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from errands.cli import main as cli_main
from errands.cli.worker import worker as cli_worker
from errands.core.config import mask_url, split_queues
from errands.core.errors import ErrandsError, InvalidQueueName, SchemaError, StoreUnavailable
from errands.core.logs import ensure_errands_output
from errands.worker.settings import SHUTDOWN_TIMEOUT, WorkerSettings
from errands.worker.supervisor import Supervisor

from ._common import errands_backend

DJANGO_TASK_LOGGERS = ("django.tasks", "django_tasks")
"""Where Django 6 and the django-tasks backport log each task's start and end (a failure's traceback too)."""
_OPTIONS: dict[str, click.Option] = {p.name: p for p in (*cli_worker.params, *cli_main.params)
                                     if isinstance(p, click.Option) and p.name}


class _FromEnv(str):
    """A default read from an ``ERRANDS_*`` variable.  argparse converts a string default with
    the option's type, as it converts a flag's value; this says where a refused value came from."""

    variable = ""


def _env(name: str | None) -> _FromEnv | None:
    """The variable's value, or None when it is unset or empty (click treats an empty one as unset)."""
    text = os.environ.get(name or "")
    if not text:
        return None
    value = _FromEnv(text)
    value.variable = name or ""
    return value


def _converter(option: click.Option) -> Callable[[str], Any]:
    """``errands worker``'s conversion of ``option`` as an argparse type: the same values
    accepted, the same ones refused, with click's reason."""
    def convert(text: str) -> Any:
        try:
            return option.type.convert(text, option, None)
        except click.BadParameter as exc:
            origin = f" (from {text.variable})" if isinstance(text, _FromEnv) else ""
            raise argparse.ArgumentTypeError(f"{exc.message}{origin}") from None

    convert.__name__ = option.type.name
    return convert


def _option(name: str) -> dict[str, Any]:
    """argparse keywords for ``errands worker``'s option ``name``: its type, and its default
    from its ``ERRANDS_*`` variable, else click's."""
    option = _OPTIONS[name]
    default = _env(option.envvar if isinstance(option.envvar, str) else None)
    return {"dest": name, "type": _converter(option), "default": option.default if default is None else default}


class _Flag(argparse.Action):
    """``store_true`` whose default may come from an ``ERRANDS_*`` variable, read by
    ``click.BOOL`` as ``errands worker`` reads it (``ERRANDS_BURST=bogus`` is refused, not false)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        option = _OPTIONS[dest]
        default = _env(option.envvar if isinstance(option.envvar, str) else None)
        super().__init__(option_strings, dest, nargs=0, default=False if default is None else default,
                         type=_converter(option), **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, True)


class Command(BaseCommand):
    help = ("Run errands workers for this project's tasks. Every option also reads its ERRANDS_* variable "
            "as `errands worker` does (ERRANDS_CONCURRENCY, ERRANDS_QUEUES, ERRANDS_BURST, ...). "
            "SIGTERM or Ctrl-C: stop claiming, let running tasks "
            "finish (up to --shutdown-timeout), give the rest back. A second signal gives them back at once.")

    def add_arguments(self, parser: CommandParser) -> None:
        levels = "{" + ",".join(_OPTIONS["log_level"].type.choices) + "}"  # type: ignore[attr-defined]
        parser.add_argument("--backend", default="default", help="The TASKS alias to work for (default: default).")
        parser.add_argument("-q", "--queue", dest="queues", action="append", default=[], metavar="NAME[,NAME]",
                            help="Queues to take tasks from, most important first (repeatable or comma list; "
                                 "ERRANDS_QUEUES: names separated by spaces or commas; "
                                 "default: the backend's QUEUES, then any other queue a task names).")
        parser.add_argument("-c", "--concurrency", **_option("concurrency"), metavar="1-1000",
                            help="Tasks run at once per worker process (threads; async tasks share one event "
                                 "loop). Default 1.")
        parser.add_argument("-p", "--processes", **_option("processes"), metavar="1-256",
                            help="Worker processes under this supervisor. Default 1.")
        parser.add_argument("--max", **_option("max_jobs"), metavar="N",
                            help="Exit after this many tasks (per process).")
        parser.add_argument("--once", action=_Flag, help="Run at most one task, then exit.")
        parser.add_argument("--burst", action=_Flag, help="Exit when no task is ready.")
        parser.add_argument("--sleep", **_option("sleep"), metavar="SECONDS",
                            help="Longest wait in seconds between polls when idle (at least 0.01). Default 1.")
        parser.add_argument("--shutdown-timeout", **_option("shutdown_timeout"), metavar="SECONDS",
                            help=f"Seconds running tasks get to finish after SIGTERM. Default {SHUTDOWN_TIMEOUT:g}.")
        parser.add_argument("--lease", **_option("lease"), metavar="SECONDS",
                            help="Seconds a claim is held without a heartbeat, at least 1 "
                                 "(default: the backend's lease).")
        parser.add_argument("--prefetch", **_option("prefetch"), metavar="0-1000",
                            help="Tasks held beyond the running ones (default: adapts to task duration).")
        parser.add_argument("--log-level", **_option("log_level"), metavar=levels,
                            help="Level of errands' log lines when Django's LOGGING gives them no handler "
                                 "(any case). Default INFO.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = errands_backend(options["backend"])
        self._logging(options["log_level"], options["verbosity"])
        backend.discover()
        app = backend.errands
        try:
            queues = split_queues(options["queues"] or _env_queues()) or tuple(backend.worker_queues())
        except InvalidQueueName as exc:
            raise CommandError(str(exc)) from None
        once = options["once"]
        settings = WorkerSettings(queues=queues, concurrency=options["concurrency"], burst=options["burst"] or once,
                                  max_jobs=1 if once else options["max_jobs"], sleep=options["sleep"],
                                  shutdown_timeout=options["shutdown_timeout"], lease=options["lease"],
                                  prefetch=0 if once else options["prefetch"], scheduler=False)
        try:
            app.store.check()  # a missing schema or an unreachable database fails here, once
        except SchemaError as exc:
            raise CommandError(f"{exc} (with 'errands.contrib.django' in INSTALLED_APPS, manage.py migrate "
                               "creates the tables; or run manage.py errands_migrate, which also creates those "
                               "of a backend or table_prefix added after the first migrate)") from exc
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
        they would be lost, so give its logger one (on stderr) unless LOGGING configured it.

        Django's Tasks log every run too, on ``django.tasks`` (printed by Django's default LOGGING
        when DEBUG is on): beside errands' own lines that was each task twice, and a failure's
        traceback twice.  errands' lines say it all (the job, its outcome, the traceback once), so
        the worker leaves Django's out, unless LOGGING names that logger itself."""
        ensure_errands_output("WARNING" if verbosity == 0 else level)
        configured = (getattr(django_settings, "LOGGING", None) or {}).get("loggers", {})
        for name in DJANGO_TASK_LOGGERS:
            if name not in configured:
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _env_queues() -> list[str]:
    """``ERRANDS_QUEUES`` as ``errands worker`` reads it: names separated by whitespace (click's
    splitting of a repeatable option's variable), each of which may be a comma list."""
    option = _OPTIONS["queues"]
    text = _env(option.envvar if isinstance(option.envvar, str) else None)
    return [] if text is None else list(option.type.split_envvar_value(text))
