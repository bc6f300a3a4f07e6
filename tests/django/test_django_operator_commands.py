"""``manage.py errands_<command>``: errands' operator commands on the project's DATABASES and TASKS,
and ``errands --app <settings module>`` pointing there instead of failing obscurely."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from conftest import PROJECT, manage, project_env
from django.core.management import call_command
from django.core.management.base import CommandError
from helpers import scaled

from errands.contrib.django.compat import TaskResultStatus
from errands.contrib.django.management.commands._operator import OPERATOR_COMMANDS


def ok(db_url: str, *args: str) -> str:
    done = manage(db_url, *args)
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_every_operator_command_is_a_manage_py_command(project_db: str) -> None:
    listed = ok(project_db, "help", "--commands").split()
    assert {f"errands_{name}" for name in OPERATOR_COMMANDS} | {"errands_worker", "errands_migrate"} <= set(listed)
    assert "Usage: manage.py errands_job [OPTIONS] COMMAND" in ok(project_db, "errands_job", "--help")


def test_status_doctor_failed_and_job_read_the_projects_database(tasks_backend: Any, project_db: str) -> None:
    from shop import tasks

    tasks.add.enqueue(1, 2)
    failing = tasks.fail.enqueue("for the dead letter")
    ok(project_db, "errands_worker", "--burst", "-v", "0")
    doctor = manage(project_db, "errands_doctor")  # (nothing waits: no worker is needed now)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "schema version     version" in doctor.stdout and "nothing needs action" in doctor.stdout, doctor.stdout
    waiting = tasks.add.enqueue(3, 4)
    doctor = manage(project_db, "errands_doctor")  # a job is ready and no worker runs it: the fix is manage.py's
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "start workers: python manage.py errands_worker" in doctor.stdout, doctor.stdout
    assert "errands --app" not in doctor.stdout, doctor.stdout
    status = json.loads(ok(project_db, "errands_status", "--json"))
    assert status["queues"]["default"]["ready"] == 1 and status["queues"]["default"]["failed"] == 1, status
    assert "for the dead letter" in ok(project_db, "errands_failed", "list")
    assert "shop.tasks.add" in ok(project_db, "errands_job", "show", str(waiting.id))
    ok(project_db, "errands_failed", "retry", str(failing.id))
    ok(project_db, "errands_worker", "--burst", "-v", "0")
    assert tasks_backend.get_result(failing.id).status == TaskResultStatus.FAILED  # it failed again, once more
    other = json.loads(ok(project_db, "errands_status", "--backend", "retrying", "--json"))
    assert other["queues"] == {}  # the other TASKS backend: its own tables, empty
    refused = manage(project_db, "errands_job", "show", "999999")
    assert refused.returncode == 1 and "999999" in refused.stderr, refused.stderr  # errands' own exit code


def test_call_command_passes_errands_options_in_order(tasks_backend: Any, project_db: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from shop import tasks

    tasks.send_mail.enqueue("ada@example.com")
    call_command("errands_status", "--json")
    assert json.loads(capsys.readouterr().out)["queues"]["emails"]["ready"] == 1
    call_command("errands_enqueue", "shop.tasks.add", "--args", "[2, 3]", "--queue", "emails")
    assert capsys.readouterr().out.strip()  # the new job's id
    call_command("errands_status", "--json")
    assert json.loads(capsys.readouterr().out)["queues"]["emails"]["ready"] == 2
    with pytest.raises(CommandError) as refused:
        call_command("errands_enqueue", "shop.tasks.nope")
    assert refused.value.returncode == 1


def test_errands_cli_given_the_settings_module_points_to_manage_py(project_db: str) -> None:
    env = {**project_env(project_db), "PYTHONPATH": str(PROJECT)}
    for command, instead in ((["status"], "manage.py errands_status"), (["job", "show", "1"], "manage.py errands_job")):
        done = subprocess.run([sys.executable, "-m", "errands", "--app", "testsite.settings", *command], cwd=PROJECT,
                              env=env, capture_output=True, text=True, timeout=scaled(60))
        assert done.returncode == 78, done.stderr
        assert "Django settings module" in done.stderr and instead in done.stderr, done.stderr
