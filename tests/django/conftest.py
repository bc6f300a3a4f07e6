"""The test project (tests/django/project) set up in this process, on a fresh database per test.

The databases come from the suite's own servers (tests/conftest.py): one SQLite file,
PostgreSQL schema or MariaDB database per backend becomes the project's
``DATABASES["default"]``, migrated once with ``manage.py migrate`` (which creates errands'
tables through this app's migration) and emptied before each test.  Tests about an
unmigrated database use the suite's per-test ``db_url`` directly.  These tests need
only errands with its postgres/mysql/dashboard extras, Django (with the django-tasks
backport before Django 6), pytest and pytest-timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).parent / "project"
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")

import django  # noqa: E402

django.setup()

from asgiref.local import Local  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from helpers import scaled  # noqa: E402  (tests/helpers.py: the suite's conftest puts tests/ on sys.path)
from testsite.dburl import database_from_url  # noqa: E402

from errands.contrib.django.compat import task_backends  # noqa: E402

DJANGO_BACKENDS = ["sqlite", "postgres", "mariadb"]


@pytest.fixture(params=DJANGO_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The suite's ``backend`` without mariadb-update: the claim mode is not what these tests are about."""
    return str(request.param)


def use_database(url: str) -> None:
    """Point the project's default alias at ``url``, dropping every connection to the old one."""
    connections.close_all()
    settings.DATABASES = {"default": database_from_url(url)}
    # Django reads DATABASES once; forget what it read and the connections it made from it.
    connections._settings = None  # type: ignore[attr-defined]
    connections.__dict__.pop("settings", None)
    connections._connections = Local(connections.thread_critical)  # type: ignore[attr-defined]
    from django.contrib.contenttypes.models import ContentType

    ContentType.objects.clear_cache()


class _ProjectDatabases:
    """One migrated database per backend for the whole run, made when a test first asks for it:
    Django's migrations take about a second on PostgreSQL and MariaDB, too long to repeat per test."""

    def __init__(self, servers: dict[str, Any], tmp: pytest.TempPathFactory) -> None:
        self.servers, self.tmp = servers, tmp
        self.urls: dict[str, str] = {}
        self.drops: list[Any] = []

    def url(self, backend: str) -> str:
        if backend not in self.urls:
            if backend == "sqlite":
                url = f"sqlite:///{self.tmp.mktemp('project') / 'db.sqlite3'}"
            elif backend == "postgres":
                url, schema = self.servers["postgres"].new_url()
                self.drops.append(lambda: self.servers["postgres"].drop(schema))
            else:
                url, name = self.servers["mysql"].new_url()
                self.drops.append(lambda: self.servers["mysql"].drop(name))
            use_database(url)
            call_command("migrate", verbosity=0)
            self.urls[backend] = url
        return self.urls[backend]

    def close(self) -> None:
        connections.close_all()
        for drop in self.drops:
            drop()


@pytest.fixture(scope="session")
def _project_databases(_servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
                       ) -> Iterator[_ProjectDatabases]:
    databases = _ProjectDatabases(_servers, tmp_path_factory)
    yield databases
    databases.close()


def _empty_tables() -> None:
    """What the previous test left, gone: the rows of errands' tables (not its schema version) and
    of the project's own; content types and permissions stay as migrate made them."""
    connection = connections["default"]
    tables = [t for t in connection.introspection.table_names()
              if (t.startswith("errands_") and not t.endswith("_schema")) or t.startswith("shop_")
              or t in ("auth_user_groups", "auth_user_user_permissions", "django_session")]
    with connection.cursor() as cursor:
        for table in [*tables, "auth_user"]:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")


@pytest.fixture
def project_db(backend: str, _project_databases: _ProjectDatabases) -> Iterator[str]:
    """The backend's project database, migrated and empty; every connection closed after the test."""
    url = _project_databases.url(backend)
    use_database(url)
    _empty_tables()
    try:
        yield url
    finally:
        for alias in settings.TASKS:
            task_backends[alias].close()
        connections.close_all()


@pytest.fixture
def tasks_backend(project_db: str) -> Any:
    return task_backends["default"]


def drain(backend: Any, queues: tuple[str, ...] | None = None) -> int:
    """Run every ready task in this process (an in-process burst worker), returning how many ran."""
    backend.discover()
    return int(backend.errands.run_until_empty(list(queues or backend.worker_queues())))


def manage(db_url: str, *args: str, cwd: Path = PROJECT, env_name: str = "ERRANDS_DJANGO_DB",
           timeout: float = 120, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python manage.py ...`` of a project (the test project by default) on ``db_url``, which the
    project's settings read from the variable ``env_name``."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=cwd, env=project_env(db_url, env_name, extra_env),
                          capture_output=True, text=True, timeout=scaled(timeout))


def project_env(db_url: str, env_name: str = "ERRANDS_DJANGO_DB", extra_env: dict[str, str] | None = None
                ) -> dict[str, str]:
    """The environment of a project's process: ours, with ``db_url`` in ``env_name`` and the
    project's own settings module (not the one this process uses)."""
    env = {**os.environ, env_name: db_url, **(extra_env or {})}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env
