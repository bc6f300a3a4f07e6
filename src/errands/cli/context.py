"""Finding the user's app and database from flags and environment."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

import click

from ..app import Errands
from ..core.errors import ConfigurationError

CLI = "cli"
"""The actor the audit log names for every action taken from the command line."""


def load_app(path: str) -> Errands:
    """Import ``module:attr`` (or ``module``, looking for an Errands named app/errands)."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r} for --app {path!r}: {exc}") from exc
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


@dataclass
class Context:
    app_path: str | None
    database_url: str | None
    _app: Errands | None = field(default=None, repr=False)

    def app(self, *, required: bool = False) -> Errands:
        """The user's app; commands that only read or repair tables accept a bare database."""
        if self._app is None:
            if self.app_path:
                app = load_app(self.app_path)
                if self.database_url:
                    app.use_database(self.database_url)
            elif required:
                raise ConfigurationError("this command needs your app's registered jobs: pass --app module:attr "
                                         "or set ERRANDS_APP")
            else:
                app = Errands(self.database_url)
            self._app = app
        return self._app

    def close(self) -> None:
        """Close the connections the command opened (the CLI registers this on its context)."""
        if self._app is not None:
            self._app.close()
