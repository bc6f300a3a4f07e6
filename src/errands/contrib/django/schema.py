"""errands' tables in a Django project's database.

``manage.py migrate`` creates them: each of this app's migrations runs errands' own migrations up
to its ``SCHEMA_VERSION`` on the connection Django is migrating, inside Django's migration
transaction where the database has transactional DDL (SQLite, PostgreSQL), so it works on a test
database and on an in-memory one as well.  errands records its schema versions in its own table, so
a version already there (``errands_migrate`` ran first) is not run again.  A new errands schema
version ships with one more Django migration calling :func:`migrate_connection` with ``to=`` that
version; a test holds the last one's ``SCHEMA_VERSION`` to the code's.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from ...store import Store, open_store
from .compat import task_backends

DDL_URLS = {"sqlite": "sqlite:///unused.db", "postgresql": "postgresql:///unused", "mysql": "mysql:///unused"}
"""A store made only to produce DDL never connects: its URL just picks the dialect."""


def errands_backends() -> list[Any]:
    """Every backend in ``TASKS`` that is an ErrandsBackend (in settings order)."""
    from .backend import ErrandsBackend

    found = []
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        try:
            cls = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError):
            continue  # Django reports a broken TASKS entry itself
        if isinstance(cls, type) and issubclass(cls, ErrandsBackend):
            found.append(task_backends[alias])
    return found


def migrate_connection(connection: Any, *, to: int | None = None) -> list[int]:
    """Create or upgrade the tables of every errands backend that lives in ``connection``'s
    database, on that connection (and in its transaction, if one is open), up to version ``to``
    (default: the version this errands needs).  Returns the schema versions applied."""
    applied: list[int] = []
    prefixes = {b.config.table_prefix for b in errands_backends() if b.config.database == connection.alias}
    for prefix in sorted(prefixes):
        store = ddl_store(connection.vendor, prefix)
        with connection.cursor() as cursor:
            # errands' own migration routine on the caller's cursor: the same steps, locks and
            # version records as `errands migrate`, in the transaction Django opened.
            applied += store.migrate(to=to, cursor=cursor.cursor)
    return applied


def ddl_store(vendor: str, prefix: str) -> Store:
    if vendor not in DDL_URLS:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"errands runs on SQLite, PostgreSQL and MySQL/MariaDB, not {vendor!r}")
    return open_store(DDL_URLS[vendor], prefix=prefix)
