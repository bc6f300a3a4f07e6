"""What the backend makes of TASKS and DATABASES: errands' URL for an alias, refused options, checks."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from conftest import use_database
from django.core.exceptions import ImproperlyConfigured
from django.db.utils import ConnectionHandler

from errands.contrib.django import ErrandsBackend
from errands.contrib.django.compat import task_backends
from errands.contrib.django.database import url_for_connection


def connection(**entry: Any) -> Any:
    """A real (never opened) Django connection for a DATABASES entry."""
    return ConnectionHandler({"default": entry})["default"]


def test_postgres_url_keeps_libpq_options_and_quotes_credentials() -> None:
    import psycopg

    url = url_for_connection(connection(ENGINE="django.db.backends.postgresql", NAME="shop db", USER="app",
                                        PASSWORD="p@ss:w/rd %", HOST="db.internal", PORT="6432",
                                        OPTIONS={"sslmode": "require", "options": "-c search_path=jobs",
                                                 "isolation_level": 1, "server_side_binding": False}))
    params = psycopg.conninfo.conninfo_to_dict(url)
    assert params == {"user": "app", "password": "p@ss:w/rd %", "host": "db.internal", "port": "6432",
                      "dbname": "shop db", "sslmode": "require", "options": "-c search_path=jobs"}
    socket = url_for_connection(connection(ENGINE="django.db.backends.postgresql", NAME="shop",
                                           HOST="/var/run/postgresql"))
    assert psycopg.conninfo.conninfo_to_dict(socket) == {"dbname": "shop", "host": "/var/run/postgresql"}
    with pytest.raises(ImproperlyConfigured, match="assume_role"):
        url_for_connection(connection(ENGINE="django.db.backends.postgresql", NAME="shop",
                                      OPTIONS={"assume_role": "jobs"}))


def test_mysql_url_and_what_it_cannot_carry() -> None:
    from errands.store.dialects.mysql import MySQLDialect

    url = url_for_connection(connection(ENGINE="django.db.backends.mysql", NAME="shop", USER="app",
                                        PASSWORD="s3cr:t@", HOST="db", PORT=3307,
                                        OPTIONS={"charset": "utf8mb4",
                                                 "init_command": "SET sql_mode='STRICT_ALL_TABLES'"}))
    params = MySQLDialect(url)._params
    assert (params["host"], params["port"], params["user"], params["password"], params["database"]) == \
        ("db", 3307, "app", "s3cr:t@", "shop")
    socket = MySQLDialect(url_for_connection(connection(ENGINE="django.db.backends.mysql", NAME="shop",
                                                      HOST="/run/mysqld/mysqld.sock")))._params
    assert socket["unix_socket"] == "/run/mysqld/mysqld.sock"
    with pytest.raises(ImproperlyConfigured, match="'ssl'.*database_url"):
        url_for_connection(connection(ENGINE="django.db.backends.mysql", NAME="shop", OPTIONS={"ssl": {"ca": "x"}}))


def test_sqlite_url_and_in_memory_databases() -> None:
    url = url_for_connection(connection(ENGINE="django.db.backends.sqlite3", NAME="/srv/app/db.sqlite3"))
    assert url == "sqlite:////srv/app/db.sqlite3" and unquote(urlsplit(url).path) == "//srv/app/db.sqlite3"
    with pytest.raises(ImproperlyConfigured, match="in-memory"):
        url_for_connection(connection(ENGINE="django.db.backends.sqlite3", NAME=":memory:"))
    explicit = url_for_connection(connection(ENGINE="django.db.backends.sqlite3", NAME=":memory:"),
                                  "sqlite:////tmp/jobs.db")
    assert explicit == "sqlite:////tmp/jobs.db"


def test_bad_options_stop_django_at_start_up() -> None:
    with pytest.raises(ImproperlyConfigured, match="unknown keys 'max_atempts'.*known: .*max_attempts"):
        ErrandsBackend("x", {"OPTIONS": {"max_atempts": 2}})
    with pytest.raises(ImproperlyConfigured, match="max_attempts"):
        ErrandsBackend("x", {"OPTIONS": {"max_attempts": 0}})
    with pytest.raises(ImproperlyConfigured, match="result_ttl"):
        ErrandsBackend("x", {"OPTIONS": {"result_ttl": -1}})
    with pytest.raises(ImproperlyConfigured, match="backoff"):
        ErrandsBackend("x", {"OPTIONS": {"backoff": "sometimes"}})
    with pytest.raises(ImproperlyConfigured, match="task_modules"):
        ErrandsBackend("x", {"OPTIONS": {"task_modules": "shop.jobs"}})
    with pytest.raises(ImproperlyConfigured, match="QUEUES.*invalid queue name"):
        ErrandsBackend("x", {"QUEUES": ["mails and more"]})


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_checks(project_db: str) -> None:
    backend = task_backends["default"]
    assert [m.id for m in backend.check()] == []
    use_database("sqlite:///:memory:")
    try:
        # Django's test runner's default database: a warning, so that tests which do not enqueue still run.
        assert [m.id for m in backend.check()] == ["errands.W002"]
    finally:
        use_database(project_db)
    elsewhere = ErrandsBackend("elsewhere", {"OPTIONS": {"database": "reports"}})
    assert [m.id for m in elsewhere.check()] == ["errands.E001"]
