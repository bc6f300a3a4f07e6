"""Every backend errands runs on, in one table: URL schemes, Django vendor, doctor's module.

Adding a backend is a dialect module under ``store/dialects`` and one entry here; the URL
lookup of :func:`errands.store.open_store`, ``errands doctor`` and the Django integration
all read this table.  Dialect modules are imported only when used (each imports its driver).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .dialects.base import Dialect


class Backend(NamedTuple):
    name: str
    """The dialect's name (``Dialect.name``)."""
    module: str
    """The dialect module, under ``errands.store.dialects``."""
    dialect_class: str
    schemes: tuple[str, ...]
    """URL schemes that open this backend."""
    django_vendor: str
    """``connection.vendor`` of Django's backend for the same database."""
    diagnostics: str
    """The module of ``errands.diagnostics`` holding this backend's checks."""


BACKENDS = (
    Backend("sqlite", "sqlite", "SQLiteDialect", ("sqlite",), "sqlite", "sqlite"),
    Backend("postgresql", "postgres", "PostgresDialect", ("postgres", "postgresql", "postgresql+psycopg"),
            "postgresql", "postgres"),
    Backend("mysql", "mysql", "MySQLDialect", ("mysql", "mariadb", "mysql+pymysql"), "mysql", "mysql"),
)


def by_scheme(scheme: str) -> Backend | None:
    return next((b for b in BACKENDS if scheme.lower() in b.schemes), None)


def by_name(name: str) -> Backend:
    return next(b for b in BACKENDS if b.name == name)


def by_vendor(vendor: str) -> Backend | None:
    return next((b for b in BACKENDS if b.django_vendor == vendor), None)


def dialect_class(backend: Backend) -> type[Dialect]:
    """The backend's dialect class (importing its driver, which may raise MissingExtra)."""
    module = importlib.import_module(f".dialects.{backend.module}", __package__)
    cls: type[Dialect] = getattr(module, backend.dialect_class)
    return cls
