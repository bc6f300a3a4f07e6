"""``manage.py migrate`` / ``errands_migrate`` create errands' tables; ``errands_worker`` runs the tasks."""

from __future__ import annotations

import io
from typing import Any

import pytest
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
    assert run.stderr.rstrip().endswith("errands worker: stopped, 5 jobs run")  # (the closing line, issue 26)


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
        assert "manage.py errands_migrate" in first.stderr  # also for a backend added after the first migrate
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
        from errands.store import open_store

        versions = [version for version, _ in open_store("sqlite:///:memory:").dialect.migrations()]
        assert applied == versions * 2  # both backends' tables (two prefixes), every version
        from django.core.exceptions import ImproperlyConfigured
        from shop import tasks

        with pytest.raises(ImproperlyConfigured, match="in-memory"):
            tasks.add.enqueue(1, 2)
    finally:
        use_database(project_db)
        task_backends["default"].errands  # noqa: B018 - point errands back at the test's database


def worker_options(*args: str) -> dict[str, Any]:
    """What ``manage.py errands_worker ARGS`` would run with (parsed, not run)."""
    from errands.contrib.django.management.commands.errands_worker import Command

    return vars(Command().create_parser("manage.py", "errands_worker").parse_args(list(args)))


def click_refuses(*args: str) -> bool:
    """Whether ``errands worker ARGS`` refuses its options (parsed, not run)."""
    import click

    from errands.cli.worker import worker

    try:
        with worker.make_context("worker", list(args)):
            pass
    except click.UsageError:  # BadParameter is one
        return True
    return False


@pytest.mark.parametrize(("variable", "value", "option", "expected"), [
    ("ERRANDS_LOG_LEVEL", "debug", "log_level", "DEBUG"),  # any case, as `errands --log-level`
    ("ERRANDS_LOG_LEVEL", "Warning", "log_level", "WARNING"),
    ("ERRANDS_MAX_JOBS", "", "max_jobs", None),  # an empty variable is an unset one
    ("ERRANDS_CONCURRENCY", "", "concurrency", 1),
    ("ERRANDS_CONCURRENCY", "1000", "concurrency", 1000),
    ("ERRANDS_BURST", "", "burst", False),
    ("ERRANDS_BURST", "yes", "burst", True),
    ("ERRANDS_BURST", "off", "burst", False),
    ("ERRANDS_ONCE", "1", "once", True),
    ("ERRANDS_PREFETCH", "0", "prefetch", 0),
    ("ERRANDS_SHUTDOWN_TIMEOUT", "0", "shutdown_timeout", 0.0),
    ("ERRANDS_SLEEP", "0.01", "sleep", 0.01),
])
def test_worker_variables_mean_what_they_mean_to_errands_worker(monkeypatch: pytest.MonkeyPatch, variable: str,
                                                                 value: str, option: str, expected: object) -> None:
    monkeypatch.setenv(variable, value)
    assert worker_options()[option] == expected
    if option != "log_level":  # the CLI's --log-level is the group's; the others are `errands worker`'s own
        from errands.cli.worker import worker

        with worker.make_context("worker", []) as ctx:
            assert ctx.params[option] == expected


@pytest.mark.parametrize(("args", "env", "refusal"), [
    ([], {"ERRANDS_LOG_LEVEL": "loud"}, "argument --log-level: 'loud' is not one of"),
    (["--log-level", "verbose"], {}, "argument --log-level: 'verbose' is not one of"),
    ([], {"ERRANDS_BURST": "bogus"}, "argument --burst: burst must be a boolean, got 'bogus' (from ERRANDS_BURST)"),
    ([], {"ERRANDS_ONCE": "sometimes"}, "argument --once: 'sometimes' is not a valid boolean"),
    (["-c", "1001"], {}, "argument -c/--concurrency: concurrency must be an integer from 1 to 1000, got 1001"),
    (["-c", "0"], {}, "argument -c/--concurrency: concurrency must be an integer from 1 to 1000, got 0"),
    (["-p", "257"], {}, "argument -p/--processes: processes must be an integer from 1 to 256, got 257"),
    (["--prefetch", "1001"], {}, "argument --prefetch: prefetch must be an integer from 0 to 1000, got 1001"),
    (["--prefetch", "-1"], {}, "argument --prefetch: prefetch must be an integer from 0 to 1000, got -1"),
    (["--sleep", "0.001"], {}, "argument --sleep: sleep must be a number of seconds of at least 0.01, got 0.001"),
    (["--lease", "0.5"], {}, "argument --lease: lease must be a number of seconds of at least 1, got 0.5"),
    (["--shutdown-timeout", "-1"], {},
     "argument --shutdown-timeout: shutdown_timeout must be a number of seconds of at least 0, got -1"),
    (["--max", "0"], {}, "argument --max: max_jobs must be an integer of at least 1, got 0"),
    ([], {"ERRANDS_PREFETCH": "1001"}, "prefetch must be an integer from 0 to 1000, got 1001 (from ERRANDS_PREFETCH)"),
    ([], {"ERRANDS_SLEEP": "0"},
     "argument --sleep: sleep must be a number of seconds of at least 0.01, got 0 (from ERRANDS_SLEEP)"),
])
def test_worker_refuses_what_errands_worker_refuses(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                                     env: dict[str, str], refusal: str) -> None:
    from django.core.management import CommandError

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(CommandError) as refused:
        worker_options(*args)
    assert refusal in str(refused.value)
    if "--log-level" not in refusal:
        assert click_refuses(*args)  # the same values are refused by `errands worker`


def test_worker_reads_variables_as_errands_worker_does(tasks_backend: Any, project_db: str) -> None:
    """A real run on the variables that used to differ: a lowercase level, an empty ERRANDS_MAX_JOBS,
    ERRANDS_QUEUES separated by whitespace (and commas), a boolean spelled "on"."""
    from shop import tasks

    mail, plain, other = tasks.send_mail.enqueue("x@example.com"), tasks.add.enqueue(1, 1), tasks.add.enqueue(2, 2)
    env = {"ERRANDS_LOG_LEVEL": "debug", "ERRANDS_MAX_JOBS": "", "ERRANDS_QUEUES": "emails  default,emails",
           "ERRANDS_BURST": "on"}
    run = manage(project_db, "errands_worker", extra_env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "queues: emails, default | processes: 1" in run.stderr
    assert [tasks_backend.get_result(r.id).status for r in (mail, plain, other)] == [TaskResultStatus.SUCCESSFUL] * 3
    refused = manage(project_db, "errands_worker", extra_env={"ERRANDS_BURST": "bogus"}, timeout=60)
    assert refused.returncode != 0 and "burst must be a boolean, got 'bogus'" in refused.stderr, refused.stderr
    assert "ERRANDS_BURST" in refused.stderr


def test_worker_log_shows_each_failure_once_without_djangos_task_lines(tasks_backend: Any, project_db: str) -> None:
    # DEBUG on: Django's default LOGGING prints its own loggers, django.tasks among them.
    from shop import tasks

    failing, fine = tasks.fail.enqueue("broken on purpose"), tasks.add.enqueue(2, 2)
    run = manage(project_db, "errands_worker", "--burst", "--settings", "testsite.settings_debug")
    assert run.returncode == 0, run.stderr
    output = run.stdout + run.stderr
    assert tasks_backend.get_result(failing.id).status == TaskResultStatus.FAILED
    assert output.count("Traceback (most recent call last)") == 1, output
    # the failure line, the traceback, the dead letter line
    assert output.count("ValueError: broken on purpose") == 3, output
    assert f"job {fine.id} shop.tasks.add done in" in output, output  # errands' INFO lines stay
    assert "Task id=" not in output, output  # Django's lines for the same runs
