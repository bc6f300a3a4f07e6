"""Finding the user's app and database from flags and environment."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, field

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
        raise ConfigurationError(
            f"--app {path!r} is a Django settings module: a Django project's errands app comes from its DATABASES "
            "and TASKS, through manage.py, which has every operator command: python manage.py errands_doctor, "
            "errands_status, errands_failed, errands_job, ... (--backend ALIAS for another TASKS backend), "
            "and errands_worker, errands_migrate")
    raise ConfigurationError(f"--app {path!r}: no Errands object named {' or '.join(candidates)} "
                             f"in module {module_name!r}")


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
