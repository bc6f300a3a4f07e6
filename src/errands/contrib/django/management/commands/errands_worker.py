"""``manage.py errands_worker``: run the project's tasks, with Django set up.

The same worker as ``errands worker`` (a supervisor forking worker processes, hard
timeouts, graceful shutdown on SIGTERM); its processes are forks of this one, so each
starts with Django set up and every task module imported.  Django's connections are closed
before the fork, and each task run opens (and, as after a request, closes) its own.

Its options are ``errands worker``'s: their flags, help, types, limits, defaults and ``ERRANDS_*``
variables come from that click command itself (which generates them from the one declaration of
each worker option, :mod:`errands.worker.settings`), so the two cannot disagree on what a value
means or which values are refused, nor lack an option the other has.
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
from errands.cli.worker import worker_settings
from errands.core.config import mask_url
from errands.core.errors import ErrandsError, SchemaError, StoreUnavailable
from errands.core.logs import ensure_errands_output
from errands.services.deploys import unregistered_waiting, unregistered_warning
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


def _argument(option: click.Option) -> dict[str, Any]:
    """argparse keywords for one of ``errands worker``'s options, help and limits included."""
    text = _HELP.get(option.name or "", option.help or "")
    if option.default is not None and not option.is_flag and not option.multiple:
        text += f" Default {option.default}."
    text = text.replace("%", "%%")  # (argparse formats help with %)
    if option.is_flag:
        return {"dest": option.name, "action": _Flag, "help": text}
    if option.multiple:  # the variable is read in handle(): argparse converts no list default
        return {"dest": option.name, "action": "append", "default": [], "type": _converter(option),
                "metavar": option.metavar, "help": text}
    return {**_option(option.name or ""), "metavar": option.metavar, "help": text}


_HELP = {"queues": "Queues to take tasks from, most important first (repeatable or comma list; ERRANDS_QUEUES: "
                   "names separated by spaces or commas; default: the backend's QUEUES, then any other queue a "
                   "task names)."}
"""Where the project's command says more than ``errands worker``'s help."""


class _Flag(argparse.Action):
    """``store_true`` whose default may come from an ``ERRANDS_*`` variable, read by the option's
    click type as ``errands worker`` reads it (``ERRANDS_BURST=bogus`` is refused, not false)."""

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
        for option in cli_worker.params:  # errands worker's options: flags, help, values and refusals
            if isinstance(option, click.Option) and option.name in _OPTIONS:
                parser.add_argument(*option.opts, **_argument(option))
        parser.add_argument("--log-level", **_option("log_level"), metavar=levels,
                            help="Level of errands' log lines when Django's LOGGING gives them no handler "
                                 "(any case). Default INFO.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = errands_backend(options["backend"])
        self._logging(options["log_level"], options["verbosity"])
        backend.discover()
        app = backend.errands
        settings = worker_settings({**options, "queues": options["queues"] or _env_queues()},
                                   backend.worker_queues)
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
                              f"  queues: {', '.join(settings.queues)} | processes: {options['processes']} x "
                              f"concurrency {settings.concurrency}\n"
                              f"  tasks: {', '.join(sorted(app.registry)) or 'none'}")
        unknown = unregistered_waiting(app, settings.queues)
        if unknown:
            self.stderr.write(unregistered_warning(app, unknown))
        connections.close_all()  # nothing of Django's may cross the fork
        supervisor = Supervisor(app, settings, options["processes"])
        try:
            code = supervisor.run()
        except ErrandsError as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"] > 0:  # the closing line, as `errands worker` prints it (also after an idle run)
            runs = supervisor.jobs_run
            self.stderr.write(f"errands worker: stopped, {runs} job{'' if runs == 1 else 's'} run"
                              + (f" (exit code {code})" if code else ""))
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


def _env_queues() -> list[Any]:
    """``ERRANDS_QUEUES`` as ``errands worker`` reads it: names separated by whitespace (click's
    splitting of a repeatable option's variable), each of which may be a comma list."""
    option = _OPTIONS["queues"]
    text = _env(option.envvar if isinstance(option.envvar, str) else None)
    if text is None:
        return []
    convert = _converter(option)
    try:
        return [convert(part) for part in option.type.split_envvar_value(text)]
    except argparse.ArgumentTypeError as exc:
        raise CommandError(f"{exc} (from {option.envvar})") from None
