"""Finding the user's app and database from flags and environment."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

import click

from ..app import Errands
from ..core.config import mask_url, same_database
from ..core.errors import ConfigurationError
from ..diagnostics.sqlite import missing_file_of

CLI = "cli"
"""The actor the audit log names for every action taken from the command line."""


def load_app(path: str) -> Errands:
    """Import ``module:attr`` (or ``module``, looking for an Errands named app/errands)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError, ValueError) as exc:  # TypeError: "./shop", ValueError: an empty name
        raise ConfigurationError(f"cannot import {module_name!r} for --app {path!r}: {exc}"
                                 f"{_file_path_hint(module_name, attr)}") from exc
    candidates = [attr] if attr else ["app", "errands"]
    for name in candidates:
        obj = getattr(module, name, None)
        if isinstance(obj, Errands):
            return obj
    if hasattr(module, "TASKS") or hasattr(module, "INSTALLED_APPS"):
        raise ConfigurationError(f"--app {path!r} is a Django settings module: a Django project's errands app comes "
                                 f"from its DATABASES and TASKS, through manage.py: {_manage_py_command()}")
    raise ConfigurationError(f"--app {path!r}: no Errands object named {' or '.join(candidates)} "
                             f"in module {module_name!r}")


def _file_path_hint(module_name: str, attr: str) -> str:
    """``--app shop.py:app`` and ``--app pkg/shop.py:app`` name a file, where --app takes a module."""
    path = module_name.replace(os.sep, "/")
    if not (path.endswith(".py") or "/" in path):
        return ""
    parts = [part for part in path.removesuffix(".py").split("/") if part not in ("", ".")]
    steps = "drop the .py" + (" and write the folders with dots" if len(parts) > 1 else "")
    return f" ({steps}: --app {'.'.join(parts)}{':' + attr if attr else ''})"


def _manage_py_command() -> str:
    """What to run instead, for the command being run (``errands job show 5``: ``errands_job``)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None and ctx.parent.parent is not None:
        ctx = ctx.parent
    name = ctx.info_name if ctx is not None and ctx.parent is not None else None
    if name in ("dashboard", "users"):
        return ("mount the dashboard behind Django's logins (errands.contrib.django.dashboard); manage.py has "
                "errands_status, errands_doctor and the other operator commands")
    every = "errands_status, errands_doctor, errands_failed, errands_job... and errands_worker, errands_migrate"
    return f"run python manage.py errands_{name} ({every})" if name else f"python manage.py {every}"


URL_SOURCES: dict[click.core.ParameterSource | None, str] = {
    click.core.ParameterSource.COMMANDLINE: "--database-url",
    click.core.ParameterSource.ENVIRONMENT: "ERRANDS_DATABASE_URL",
    click.core.ParameterSource.DEFAULT_MAP: "database-url in [tool.errands] of pyproject.toml"}
"""Where the ``errands`` group's ``--database-url`` came from, in the words of the notices."""


@dataclass
class Context:
    app_path: str | None
    database_url: str | None
    url_source: str = "--database-url"
    """Where ``database_url`` came from (one of :data:`URL_SOURCES`' values), when it is set."""
    _app: Errands | None = field(default=None, repr=False)

    def app(self, *, required: bool = False, missing_ok: bool = False, names_database: bool = False) -> Errands:
        """The user's app; commands that only read or repair tables accept a bare database.

        Says on stderr, once, which database the command uses and where that came from, and when
        it is not the one the ``--app`` application's own code uses, that too: jobs the code
        enqueues go to the other one.  ``names_database``: the command prints the database in its
        own banner (worker, dashboard, metrics, doctor), so only that difference is said.

        A SQLite file that does not exist is refused (exit 78) unless ``missing_ok``: connecting
        would create an empty database, and a reading command would answer "no jobs" from it.
        Creating commands (migrate, worker, enqueue, users create) and doctor (which reports the
        missing file itself) pass it."""
        if self._app is None:
            app, own = self._load(required)
            self._app = app
            if not names_database:
                _ = app.store  # opened now: a bad URL or a missing driver is refused first, in one line
            if not missing_ok:
                self._refuse_missing_file(app)
            self._announce(app, own, names_database)
        return self._app

    def _load(self, required: bool) -> tuple[Errands, str | None]:
        """The app, and the URL its own code was built with (None without ``--app``)."""
        if self.app_path:
            app = load_app(self.app_path)
            own = app.database_url
            if self.database_url:
                app.use_database(self.database_url)
            return app, own
        if required:
            raise ConfigurationError("this command needs your app's registered jobs: pass --app module:attr "
                                     "or set ERRANDS_APP")
        return Errands(self.database_url), None

    def source(self) -> str:
        """Where the database this command uses was named, for the notices."""
        if self.database_url:
            return self.url_source
        if self.app_path:
            return f"the app {self.app_path}"
        if os.environ.get("DATABASE_URL"):
            return "DATABASE_URL"
        return "the default: no --app, --database-url or ERRANDS_DATABASE_URL was given"

    def _announce(self, app: Errands, own: str | None, names_database: bool) -> None:
        used = app.database_url
        if own is not None and self.database_url and not same_database(own, used):
            click.echo(f"errands: using {mask_url(used)} from {self.source()}; the app {self.app_path}'s own code "
                       f"uses {mask_url(own)} (jobs your code enqueues go there)", err=True)
        elif not names_database:
            click.echo(f"errands: database {mask_url(used)} ({self.source()})", err=True)

    def _refuse_missing_file(self, app: Errands) -> None:
        missing = missing_file_of(app.store.dialect)
        if missing is None:
            return
        command = click.get_current_context().command_path
        raise ConfigurationError(
            f"{missing.detail} ({mask_url(app.database_url)}, from {self.source()}); `{command}` creates no "
            "database (only migrate, worker, enqueue and users create do)\n  fix: point errands at your database "
            f"with --app module:attr (your app's own), --database-url URL or ERRANDS_DATABASE_URL; {missing.fix}")

    def url_in_use(self) -> str | None:
        """The database URL of the loaded app (None before it is loaded)."""
        return self._app.database_url if self._app is not None else self.database_url

    def close(self) -> None:
        """Close the connections the command opened (the CLI registers this on its context)."""
        if self._app is not None:
            self._app.close()
