"""``manage.py migrate`` / ``errands_migrate`` create errands' tables; ``errands_worker`` runs the tasks."""

from __future__ import annotations

import io
from typing import Any

from conftest import manage, use_database
from django.core.management import call_command

from errands.contrib.django.compat import TaskResultStatus, task_backends


def test_errands_worker_runs_tasks_in_its_own_processes(tasks_backend: Any, project_db: str) -> None:
    from shop import tasks
    from shop.models import Order

    order = Order.objects.create(total=3)
    results = [tasks.add.enqueue(1, 2), tasks.send_mail.enqueue("ada@example.com"),
               tasks.mark_order.enqueue(order.pk, "packed"), tasks.fail.enqueue("nope"),
               tasks.add_async.enqueue(5, 5)]
    run = manage(project_db, "errands_worker", "--burst", "-p", "2", "-c", "2")
    assert run.returncode == 0, run.stderr
    assert "queues: default, emails" in run.stderr and "shop.tasks.mark_order" in run.stderr
    statuses = [tasks_backend.get_result(r.id).status for r in results]
    assert statuses == [TaskResultStatus.SUCCESSFUL] * 3 + [TaskResultStatus.FAILED, TaskResultStatus.SUCCESSFUL]
    assert tasks_backend.get_result(results[2].id).return_value == f"order {order.pk}: packed"
    order.refresh_from_db()
    assert order.note == "packed"
    assert "ValueError" in run.stderr  # the failure is logged by the worker


def test_worker_takes_only_the_queues_asked_for(tasks_backend: Any, project_db: str) -> None:
    from shop import tasks

    mail, plain = tasks.send_mail.enqueue("x@example.com"), tasks.add.enqueue(1, 1)
    run = manage(project_db, "errands_worker", "--burst", "-q", "emails")
    assert run.returncode == 0, run.stderr
    assert tasks_backend.get_result(mail.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks_backend.get_result(plain.id).status == TaskResultStatus.READY
    bad = manage(project_db, "errands_worker", "--burst", "-q", "no spaces allowed")
    assert bad.returncode != 0 and "invalid queue name" in bad.stderr


def test_worker_options_come_from_errands_variables_too(tasks_backend: Any, project_db: str) -> None:
    from shop import tasks

    mail, plain = tasks.send_mail.enqueue("x@example.com"), tasks.add.enqueue(1, 1)
    env = {"ERRANDS_BURST": "true", "ERRANDS_QUEUES": "emails", "ERRANDS_CONCURRENCY": "3"}
    run = manage(project_db, "errands_worker", extra_env=env)  # burst from the variable: it exits
    assert run.returncode == 0, run.stderr
    assert "queues: emails | processes: 1 x concurrency 3" in run.stderr
    assert tasks_backend.get_result(mail.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks_backend.get_result(plain.id).status == TaskResultStatus.READY
    flag = manage(project_db, "errands_worker", "-c", "2", "-q", "default", extra_env=env)  # flags win
    assert flag.returncode == 0 and "queues: default | processes: 1 x concurrency 2" in flag.stderr, flag.stderr
    assert tasks_backend.get_result(plain.id).status == TaskResultStatus.SUCCESSFUL
    bad = manage(project_db, "errands_worker", extra_env={**env, "ERRANDS_CONCURRENCY": "many"})
    assert bad.returncode != 0 and "--concurrency" in bad.stderr and "many" in bad.stderr


def test_tables_from_errands_migrate_then_django_migrate(backend: str, db_url: str) -> None:
    """A database Django has not migrated: the worker says what to run; errands_migrate creates the
    tables; Django's migrate afterwards finds them there and adds nothing twice."""
    first = manage(db_url, "errands_worker", "--burst")
    if backend == "sqlite":
        assert first.returncode == 0, first.stderr  # SQLite: errands creates its tables itself
    else:
        assert first.returncode != 0 and "manage.py migrate" in first.stderr, first.stderr
    migrated = manage(db_url, "errands_migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert ("already up to date" if backend == "sqlite" else "applied versions 1, 2, 3") in migrated.stdout
    assert manage(db_url, "migrate", "-v", "0").returncode == 0
    again = manage(db_url, "errands_migrate", "--backend", "retrying")
    assert "already up to date" in again.stdout, again.stdout
    assert manage(db_url, "errands_worker", "--burst").returncode == 0


def test_errands_migrate_prints_sql_and_refuses_other_backends(project_db: str) -> None:
    out = io.StringIO()
    call_command("errands_migrate", "--sql", stdout=out)
    assert "CREATE TABLE IF NOT EXISTS errands_jobs" in out.getvalue()
    out = io.StringIO()
    call_command("errands_migrate", stdout=out)
    assert out.getvalue().strip() == "errands schema: already up to date"  # manage.py migrate made them
    bad = manage(project_db, "errands_worker", "--backend", "nope")
    assert bad.returncode != 0 and "TASKS has no usable backend 'nope'" in bad.stderr


def test_migration_runs_on_djangos_connection_of_an_in_memory_database(project_db: str) -> None:
    """Django's test runner migrates an in-memory SQLite database: the tables must land there too,
    while enqueueing into it (which no worker could see) is refused with the reason."""
    import pytest
    from django.db import connections

    from errands.contrib.django.schema import migrate_connection

    use_database("sqlite:///:memory:")
    try:
        applied = migrate_connection(connections["default"])
        assert applied == [1, 2, 3, 1, 2, 3]  # both backends' tables (two prefixes)
        from django.core.exceptions import ImproperlyConfigured
        from shop import tasks

        with pytest.raises(ImproperlyConfigured, match="in-memory"):
            tasks.add.enqueue(1, 2)
    finally:
        use_database(project_db)
        task_backends["default"].errands  # noqa: B018 - point errands back at the test's database
