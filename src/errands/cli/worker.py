"""``errands worker``: process jobs until stopped.

Its options are generated from the one declaration of each worker option
(:mod:`errands.worker.settings`): flag, variable, default and help, and a value is checked by the
rule that checks ``app.run_worker``'s keywords, so a refused value reads the same here as from
every other entry point.  ``manage.py errands_worker`` reads its options from this command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import click

from ..core.config import mask_url
from ..core.errors import ConfigurationError
from ..services.deploys import unregistered_waiting, unregistered_warning
from ..worker.settings import OPTIONS, PROCESSES, OptionSpec, WorkerSettings
from ..worker.supervisor import Supervisor
from .context import Context

F = TypeVar("F", bound=Callable[..., Any])


class OptionType(click.ParamType):
    """A worker option's value as click reads it (a flag, its variable, ``[tool.errands.worker]``):
    text read as the option's kind, then checked by the option's own rule, whose message is the
    refusal."""

    def __init__(self, spec: OptionSpec) -> None:
        self.spec = spec
        self.name = spec.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self.spec.check(self._read(value) if isinstance(value, str) else value)
        except ConfigurationError as exc:
            self.fail(str(exc), param, ctx)

    def _read(self, text: str) -> Any:
        """``text`` as a value of the option's kind; unreadable text is left for the check to refuse."""
        kind = self.spec.kind
        if kind is bool:
            found = click.types.BoolParamType.str_to_bool(text)
            return text if found is None else found
        for read in (int, float) if kind is float else (int,):  # "0" reads as 0, as it was written
            try:
                return read(text)
            except ValueError:
                pass
        return text


class QueuesType(OptionType):
    """The queue option: each value (one comma list) checked name by name, and kept as written;
    :func:`worker_settings` joins the lists."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        super().convert(split_names(value) if isinstance(value, str) else value, param, ctx)
        return value


class FlagType(OptionType, click.types.BoolParamType):
    """:class:`OptionType` of a boolean option: click treats the option as a boolean flag."""


def split_names(text: str) -> list[str]:
    """The names of a comma list (``-q mails,default``), blanks skipped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def option_name(spec: OptionSpec) -> str:
    """The command's parameter for an option: ``no_scheduler`` for ``--no-scheduler``."""
    return f"no_{spec.name}" if spec.negated else spec.name


def _option(spec: OptionSpec) -> Callable[[F], F]:
    common: dict[str, Any] = {"envvar": spec.envvar, "show_envvar": True, "help": spec.help}
    if spec.kind is bool:
        return click.option(*spec.flags, option_name(spec), is_flag=True, default=False, type=FlagType(spec),
                            **common)
    if spec.kind is str:
        return click.option(*spec.flags, spec.name, multiple=True, type=QueuesType(spec), metavar=spec.metavar,
                            **common)
    return click.option(*spec.flags, spec.name, type=OptionType(spec), metavar=spec.metavar, default=spec.default,
                        show_default=spec.default is not None, **common)


_ONCE = click.option("--once", is_flag=True, envvar="ERRANDS_ONCE", show_envvar=True,
                     help="Run at most one job, then exit (exits at once if none is ready): "
                          "--burst --max 1 --prefetch 0.")


def _worker_options(command: F) -> F:
    """Every worker option, ``--processes`` after ``--concurrency`` and ``--once`` after ``--max``."""
    decorators = []
    for spec in OPTIONS.values():
        decorators.append(_option(spec))
        if spec.name == "concurrency":
            decorators.append(_option(PROCESSES))
        elif spec.name == "max_jobs":
            decorators.append(_ONCE)
    for decorate in reversed(decorators):  # click lists the options in the order they are applied, last first
        command = decorate(command)
    return command


def worker_settings(params: Mapping[str, Any], default_queues: Callable[[], Iterable[str]]) -> WorkerSettings:
    """The settings of the options as parsed (by click here, by argparse for ``manage.py
    errands_worker``): ``--no-...`` flags read back, the queue lists joined (``default_queues``
    when none was given), ``--once`` applied."""
    values: dict[str, Any] = {}
    for name, spec in OPTIONS.items():
        given = params[option_name(spec)]
        values[name] = not given if spec.negated else given
    queues = tuple(name for text in values.pop("queues") or () for name in split_names(text))  # (deduplicated there)
    if params.get("once"):
        values.update(burst=True, max_jobs=1, prefetch=0)
    return WorkerSettings(queues=queues or tuple(default_queues()), **values)


@click.command()
@_worker_options
@click.pass_obj
def worker(ctx: Context, processes: int, **params: Any) -> None:
    """Claim and run jobs.

    SIGTERM or Ctrl-C: stop claiming, let running jobs finish (up to
    --shutdown-timeout), give the rest back, exit 0.  A second signal gives
    running jobs back at once.  Jobs over their timeout are killed with their
    process, recorded as failed attempts, and the process is replaced.
    """
    app = ctx.app(required=True, missing_ok=True, names_database=True)  # (SQLite: the first worker creates it)
    settings = worker_settings(params, app.default_queues)
    app.store.check()  # fail fast on a missing schema, before forking
    unknown = unregistered_waiting(app, settings.queues)
    if unknown:
        click.echo(unregistered_warning(app, unknown), err=True)
    jobs = ", ".join(sorted(app.registry)) or "none"
    click.echo(f"errands worker: database {mask_url(app.database_url)}\n"
               f"  queues: {', '.join(settings.queues)} | processes: {processes} x concurrency "
               f"{settings.concurrency} | lease {settings.lease or app.lease:g}s\n  jobs: {jobs}"
               + (f"\n  periodic: {', '.join(sorted(app.schedules))}" if app.schedules and settings.scheduler
                  and not settings.burst else ""), err=True)
    supervisor = Supervisor(app, settings, processes)
    code = supervisor.run()
    # The closing line, also after an idle run: the start printed a banner, and a stop that printed
    # nothing after "stopping: ..." left the reader unsure that it had ended.
    runs = supervisor.jobs_run
    click.echo(f"errands worker: stopped, {runs} job{'' if runs == 1 else 's'} run"
               + (f" (exit code {code})" if code else ""), err=True)
    raise SystemExit(code)
