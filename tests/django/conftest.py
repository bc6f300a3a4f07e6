"""The test project (tests/django/project) set up in this process, on a fresh database per test.

The databases come from the suite's own fixtures (tests/conftest.py: ``db_url`` makes a new
SQLite file, PostgreSQL schema or MariaDB database and drops it after the test); here each
one becomes the project's ``DATABASES["default"]`` and is migrated with ``manage.py
migrate``, which creates errands' tables through this app's migration.  These tests need
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


@pytest.fixture
def project_db(db_url: str) -> Iterator[str]:
    """The test's database as the project's, migrated; errands' and Django's connections closed after."""
    use_database(db_url)
    call_command("migrate", verbosity=0)
    try:
        yield db_url
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


def manage(db_url: str, *args: str, cwd: Path = PROJECT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python manage.py ...`` of a project (the test project by default) on ``db_url``."""
    env = {**os.environ, "ERRANDS_DJANGO_DB": db_url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run([sys.executable, "manage.py", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
