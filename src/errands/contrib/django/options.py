"""The backend's ``OPTIONS``, checked once when Django builds the backend.

::

    TASKS = {"default": {
        "BACKEND": "errands.contrib.django.ErrandsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"database": "default", "max_attempts": 3},
    }}

A misspelt key or a value of the wrong kind is an ``ImproperlyConfigured`` naming it, at
start-up, not a surprise in a worker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ...core.retry import BackoffSpec, make_backoff
from ...core.settings import DEFAULTS

DAY = 86400.0


@dataclass(frozen=True)
class BackendOptions:
    database: str = "default"
    """The Django database alias errands' tables live in (enqueues join its transactions)."""
    database_url: str | None = None
    """errands' own connections (workers, results, dashboard): derived from ``database`` when None."""
    table_prefix: str = "errands_"
    max_attempts: int = 1
    """Runs a task gets before it is FAILED; Django's own backends run a task once."""
    backoff: BackoffSpec = "exponential"
    timeout: float | None = None
    """Seconds a run may take (the worker kills it after that); None: no limit."""
    result_ttl: float = DAY
    """Seconds results stay readable through ``get_result`` after a task ended."""
    lease: float = DEFAULTS["lease"]
    """Seconds a worker's claim stays its own without a heartbeat (the app's lease)."""
    task_modules: tuple[str, ...] = field(default_factory=tuple)
    """Modules that define tasks besides each installed app's ``tasks`` module."""

    @classmethod
    def parse(cls, alias: str, raw: Mapping[str, Any]) -> BackendOptions:
        where = f"TASKS[{alias!r}]['OPTIONS']"
        if not isinstance(raw, Mapping):
            raise ImproperlyConfigured(f"{where} must be a dict")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ImproperlyConfigured(f"{where} has unknown keys {', '.join(map(repr, unknown))}; "
                                       f"known: {', '.join(sorted(known))}")
        values = dict(raw)
        for check in (_check_strings, _check_numbers, _check_backoff, _check_modules):
            check(where, values)
        return cls(**values)


# Each check reads one group of options, raises ImproperlyConfigured naming the key, and
# normalises what it accepts in place (seconds as floats, modules as a tuple).
def _check_strings(where: str, values: dict[str, Any]) -> None:
    for key in ("database", "table_prefix"):
        if key in values and (not isinstance(values[key], str) or not values[key]):
            raise ImproperlyConfigured(f"{where}[{key!r}] must be a non-empty string")
    if values.get("database_url") is not None and not isinstance(values["database_url"], str):
        raise ImproperlyConfigured(f"{where}['database_url'] must be a URL string")


def _check_numbers(where: str, values: dict[str, Any]) -> None:
    if "max_attempts" in values:
        n = values["max_attempts"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ImproperlyConfigured(f"{where}['max_attempts'] must be an integer >= 1, got {n!r}")
    for key, allow_none in (("timeout", True), ("result_ttl", False), ("lease", False)):
        if key not in values or (values[key] is None and allow_none):
            continue
        v = values[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ImproperlyConfigured(f"{where}[{key!r}] must be a positive number of seconds, got {v!r}")
        values[key] = float(v)


def _check_backoff(where: str, values: dict[str, Any]) -> None:
    if "backoff" in values:
        try:
            make_backoff(values["backoff"])
        except Exception as exc:
            raise ImproperlyConfigured(f"{where}['backoff']: {exc}") from exc


def _check_modules(where: str, values: dict[str, Any]) -> None:
    if "task_modules" in values:
        modules = values["task_modules"]
        if isinstance(modules, str) or not isinstance(modules, Sequence) \
                or not all(isinstance(m, str) and m for m in modules):
            raise ImproperlyConfigured(f"{where}['task_modules'] must be a list of module paths")
        values["task_modules"] = tuple(modules)
