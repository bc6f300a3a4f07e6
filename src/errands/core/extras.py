"""Optional dependencies (the ``errands[...]`` extras), refused the same way everywhere.

A module of an extra that is not installed becomes :class:`MissingExtra`, whose one-line
message names the feature, the extra and the ``pip install`` that fixes it::

    errands dashboard needs the dashboard extra: pip install 'errands[dashboard]' (no module named 'uvicorn')

It is a :class:`~errands.core.errors.ConfigurationError`, so the CLI prints that line and exits 78
without a traceback, and also an ``ImportError``, so code that guards an optional import with
``except ImportError`` keeps working.  Two ways to use it, for the two kinds of import:

* inside a function (imported when a feature is used)::

      uvicorn = require("uvicorn", "dashboard", "errands dashboard")

* at the top of a module that cannot work without the extra (the imports stay visible to linters
  and type checkers)::

      try:
          from prometheus_client import CollectorRegistry
      except ImportError as exc:
          raise MissingExtra("errands.metrics", "metrics", exc) from exc
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ConfigurationError


class MissingExtra(ConfigurationError, ImportError):
    """A module of an ``errands[extra]`` is not installed (or cannot be imported)."""

    def __init__(self, feature: str, extra: str, cause: ImportError) -> None:
        self.feature, self.extra = feature, extra
        missing = (cause.name or "").split(".")[0]
        why = f"no module named {missing!r}" if isinstance(cause, ModuleNotFoundError) and missing else \
            " ".join(str(cause).split())
        super().__init__(f"{feature} needs the {extra} extra: pip install 'errands[{extra}]' ({why})",
                         name=cause.name)


def require(module: str | tuple[str, ...], extra: str, feature: str) -> ModuleType:
    """Import ``module`` (or the first importable of several alternatives) and return it; if none
    imports, raise :class:`MissingExtra` naming ``feature`` and ``extra``."""
    names = (module,) if isinstance(module, str) else module
    first: ImportError | None = None
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            first = first or exc
    assert first is not None
    raise MissingExtra(feature, extra, first) from first
