"""errands' database URL for a Django database alias.

The backend enqueues on Django's own connection (so a job commits or rolls back with the
caller's transaction), but workers, ``get_result`` and the dashboard open errands' own
connections to the same database.  This module turns ``DATABASES[alias]`` into the URL they
use, and refuses, with the reason, what a URL cannot say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured

from ...store.registry import by_vendor

_PG_DJANGO_ONLY = {"isolation_level", "server_side_binding", "pool", "cursor_factory", "prepare_threshold",
                   "context"}
"""PostgreSQL ``OPTIONS`` that Django consumes itself; every other key is a libpq parameter."""
_PG_REFUSED = {"assume_role": "errands' own connections would not switch role"}
_MYSQL_IGNORED = {"charset", "init_command", "isolation_level", "sql_mode", "autocommit", "connect_timeout",
                  "use_unicode", "client_flag", "conv", "read_timeout", "write_timeout"}
"""MySQL ``OPTIONS`` that only tune a session; errands sets its own session up."""


class InMemoryDatabase(ImproperlyConfigured):
    """The alias is an in-memory SQLite database, which no worker process can open."""


def url_for_connection(connection: Any, explicit: str | None = None) -> str:
    """The URL of the database behind a Django connection (``connections[alias]``).

    ``explicit`` (the backend's ``database_url`` option) wins: the way out when the alias
    uses a connection option no URL can carry.  It must name the same database.
    """
    if explicit:
        return explicit
    vendor = connection.vendor
    settings = connection.settings_dict
    alias = connection.alias
    backend = by_vendor(vendor)
    if backend is not None:
        return _URL_OF[backend.name](connection, settings, alias)
    raise ImproperlyConfigured(f"errands runs on SQLite, PostgreSQL and MySQL/MariaDB; DATABASES[{alias!r}] uses "
                               f"{settings.get('ENGINE')!r} ({vendor})")


def _sqlite(connection: Any, settings: Mapping[str, Any], alias: str) -> str:
    name = str(settings.get("NAME") or "")
    if connection.is_in_memory_db() or name.startswith("file:"):
        raise InMemoryDatabase(
            f"DATABASES[{alias!r}] is an in-memory or URI SQLite database ({name!r}): errands' workers run in "
            "other processes and need a file they can open. In tests, give the test database a file name "
            "(DATABASES[...]['TEST']['NAME']) or use Django's ImmediateBackend; otherwise set the backend's "
            "OPTIONS['database_url'].")
    return "sqlite:///" + name


def _postgres(settings: Mapping[str, Any], alias: str) -> str:
    options = dict(settings.get("OPTIONS") or {})
    for key, why in _PG_REFUSED.items():
        if options.get(key):
            raise ImproperlyConfigured(f"DATABASES[{alias!r}]['OPTIONS'][{key!r}] has no URL form ({why}); "
                                       "set the errands backend's OPTIONS['database_url'] explicitly")
    params = {}
    for key, value in options.items():
        if key in _PG_DJANGO_ONLY:
            continue
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ImproperlyConfigured(f"DATABASES[{alias!r}]['OPTIONS'][{key!r}] is not a plain value; set the "
                                       "errands backend's OPTIONS['database_url'] explicitly")
        params[key] = str(value)
    host = str(settings.get("HOST") or "")
    if host.startswith("/"):  # a Unix socket directory: libpq takes it as a parameter
        params["host"], host = host, ""
    name = settings.get("NAME")
    if name is None:
        name = "postgres"  # what Django connects to when NAME is None
    netloc = _userinfo(settings) + _hostport(host, settings.get("PORT"))
    query = urlencode(params, quote_via=quote)
    return f"postgresql://{netloc}/{quote(str(name), safe='')}" + (f"?{query}" if query else "")


def _mysql(settings: Mapping[str, Any], alias: str) -> str:
    options = dict(settings.get("OPTIONS") or {})
    socket = options.pop("unix_socket", None)
    unknown = sorted(k for k in options if k not in _MYSQL_IGNORED)
    if unknown:
        raise ImproperlyConfigured(f"DATABASES[{alias!r}]['OPTIONS'] has {', '.join(map(repr, unknown))}, which "
                                   "errands' own connections cannot take from a URL; set the errands backend's "
                                   "OPTIONS['database_url'] explicitly")
    host = str(settings.get("HOST") or "")
    if host.startswith("/"):
        socket, host = host, ""
    name = settings.get("NAME")
    if not name:
        raise ImproperlyConfigured(f"DATABASES[{alias!r}] names no database (NAME)")
    netloc = _userinfo(settings) + _hostport(host or "127.0.0.1", settings.get("PORT"))
    query = urlencode({"unix_socket": socket}, quote_via=quote) if socket else ""
    return f"mysql://{netloc}/{quote(str(name), safe='')}" + (f"?{query}" if query else "")


def _userinfo(settings: Mapping[str, Any]) -> str:
    user, password = settings.get("USER") or "", settings.get("PASSWORD") or ""
    if not user and not password:
        return ""
    return quote(str(user), safe="") + (":" + quote(str(password), safe="") if password else "") + "@"


def _hostport(host: str, port: Any) -> str:
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return host + (f":{int(port)}" if port not in (None, "") else "")


_URL_OF = {
    "sqlite": _sqlite,
    "postgresql": lambda connection, settings, alias: _postgres(settings, alias),
    "mysql": lambda connection, settings, alias: _mysql(settings, alias),
}
"""How each backend of :mod:`errands.store.registry` turns Django's settings into a URL."""
