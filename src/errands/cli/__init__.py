"""``errands``: the command line.  One module per command group; this one wires them together.

Exit codes (also in ``errands --help``): 0 success; 1 errands refused the request
(bad input, unknown job, missing entry); 2 usage error; 3 database unavailable;
78 configuration error (app cannot be loaded, schema missing, no such database or role).

Every error is one ``Error: ...`` line on stderr (a fix may follow, indented), in the form click
itself prints usage errors with, so the two read alike.
"""

from __future__ import annotations

import click

from ..core.config import mask_url
from ..core.errors import ConfigurationError, ErrandsError, SchemaError, StoreUnavailable
from ..core.logs import FORMATS, configure_logging
from ..core.settings import cli_default_map, find_pyproject
from ..diagnostics import refused_connection
from .admin import migrate, recover
from .alerts import alerts
from .context import URL_SOURCES, Context
from .control import batch, job, queue
from .dashboard import dashboard, users
from .doctor import doctor
from .failed import failed
from .jobs import enqueue, status
from .metrics import metrics
from .schedules import periodic
from .worker import worker
from .workers import workers
from .workflows import workflow

EXIT_REFUSED, EXIT_UNAVAILABLE, EXIT_CONFIG = 1, 3, 78


class ExitRefused(click.ClickException):
    """An errands error as click prints its own (``Error: ...`` on stderr), with errands' exit code:
    1 here, 3 and 78 in the two below."""

    exit_code = EXIT_REFUSED


class ExitUnavailable(ExitRefused):
    exit_code = EXIT_UNAVAILABLE


class ExitConfig(ExitRefused):
    exit_code = EXIT_CONFIG


class _Group(click.Group):
    """Turns errands' own errors into one clear line and a documented exit code, and reads
    ``[tool.errands]`` of pyproject.toml as defaults for every flag (flags and ``ERRANDS_*``
    variables still win)."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: object) -> click.Context:
        if parent is None and "default_map" not in extra:
            try:
                extra["default_map"] = cli_default_map(find_pyproject(), self.commands)
            except ConfigurationError as exc:
                raise ExitConfig(str(exc)) from exc
        return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except StoreUnavailable as exc:
            raise _unavailable(ctx, exc) from exc
        except (ConfigurationError, SchemaError) as exc:
            raise ExitConfig(str(exc)) from exc
        except ErrandsError as exc:
            raise ExitRefused(str(exc)) from exc


def _unavailable(ctx: click.Context, exc: StoreUnavailable) -> ExitRefused:
    """A server that answered "no such database" (or role) is configuration, exit 78:
    retrying, as a service manager does after exit 3, cannot fix it.  The fix is the one ``errands
    doctor`` gives (the CREATE statement).  A server that did not answer stays exit 3."""
    url = ctx.obj.url_in_use() if isinstance(ctx.obj, Context) else None
    refused = refused_connection(url, str(exc)) if url else None
    if url is None or refused is None:
        return ExitUnavailable(str(exc))
    return ExitConfig(f"{mask_url(url)}: {refused.means}\n  fix: {refused.fix}")


@click.group(cls=_Group, epilog="Exit codes: 0 ok, 1 refused (bad input or missing entry), 2 usage, "
                                "3 database unavailable, 78 configuration (app or schema).")
@click.option("--app", "app_path", envvar="ERRANDS_APP", show_envvar=True, metavar="MODULE:ATTR",
              help="Your Errands object, e.g. myproject.tasks:app (env ERRANDS_APP).")
@click.option("--database-url", envvar="ERRANDS_DATABASE_URL", show_envvar=True, metavar="URL",
              help="Overrides the app's database (env ERRANDS_DATABASE_URL).")
@click.option("--log-level", envvar="ERRANDS_LOG_LEVEL", default="INFO", show_default=True, show_envvar=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", envvar="ERRANDS_LOG_FORMAT", default="text", show_default=True, show_envvar=True,
              type=click.Choice(FORMATS), help="json: one JSON object a line, with job fields, for log shippers.")
@click.version_option(package_name="errands")
@click.pass_context
def main(ctx: click.Context, app_path: str | None, database_url: str | None, log_level: str, log_format: str
         ) -> None:
    """errands: background jobs in the database you already run.

    Every flag can also come from an ERRANDS_* variable (shown in each command's --help) or from
    [tool.errands] in pyproject.toml ([tool.errands.worker], [tool.errands.dashboard] for those
    commands); DATABASE_URL is the last fallback for the database.
    """
    configure_logging(log_level, log_format)
    source = URL_SOURCES.get(ctx.get_parameter_source("database_url"), "--database-url")
    ctx.obj = Context(app_path, database_url, source)
    ctx.call_on_close(ctx.obj.close)


for command in (worker, enqueue, status, failed, recover, migrate, queue, job, batch, workflow, periodic, dashboard,
                users, doctor, metrics, alerts, workers):
    main.add_command(command)
