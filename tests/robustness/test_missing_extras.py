"""Issue 11, case 8: a CLI command that needs an extra which is not installed says so in one line.

Each test runs the real ``errands`` command line in a child process in which the optional modules
cannot be imported (``sys.modules[name] = None`` before errands is imported, as if the package were
absent), and expects exit code 78, exactly one line on stderr naming the extra and the ``pip install``
that brings it, and no traceback.  The core (SQLite, click) must keep working with every extra gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SRC, scaled

from errands.core.errors import ConfigurationError
from errands.core.extras import MissingExtra, require

EXIT_CONFIG = 78
EVERY_EXTRA = ("starlette", "jinja2", "python_multipart", "multipart", "uvicorn", "prometheus_client",
               "opentelemetry", "a2wsgi", "psycopg", "pymysql", "flask", "django")
"""Top-level modules of every errands[...] extra: with all of them blocked, only the core is left."""

RUN = """
import sys
blocked, args = sys.argv[1].split(","), sys.argv[2:]
for name in filter(None, blocked):
    sys.modules[name] = None  # "import name" now fails with ModuleNotFoundError, as if not installed
sys.argv = ["errands", *args]
from errands.cli import main
main()
"""


def errands_without(blocked: tuple[str, ...], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": os.pathsep.join([str(SRC), str(cwd)]),
           "ERRANDS_CONFIG": "none", "LANG": "C.UTF-8"}
    return subprocess.run([sys.executable, "-c", RUN, ",".join(blocked), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=scaled(60))


def assert_one_line(done: subprocess.CompletedProcess[str], expected: str) -> None:
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert done.returncode == EXIT_CONFIG, (done.returncode, output)
    assert done.stderr.splitlines() == [expected], done.stderr


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'errands.db'}"


# ---------------------------------------------------------------------- errands dashboard / metrics / users
@pytest.mark.parametrize("missing", ["starlette", "jinja2", "python_multipart", "uvicorn", "prometheus_client"])
def test_dashboard_names_its_extra_for_each_missing_module(tmp_path, db, missing):
    blocked = (missing, "multipart") if missing == "python_multipart" else (missing,)
    done = errands_without(blocked, "--database-url", db, "dashboard", "--port", "1", cwd=tmp_path)
    assert_one_line(done, "Error: errands dashboard needs the dashboard extra: pip install 'errands[dashboard]' "
                          f"(no module named {missing!r})")
    assert not (tmp_path / "errands.db").exists()  # refused before touching the database


def test_metrics_names_its_extra(tmp_path, db):
    done = errands_without(("prometheus_client",), "--database-url", db, "metrics", "--port", "0", cwd=tmp_path)
    assert_one_line(done, "Error: errands metrics needs the metrics extra: pip install 'errands[metrics]' "
                          "(no module named 'prometheus_client')")


@pytest.mark.parametrize("args", [["create", "ada", "--role", "admin"], ["passwd", "ada"], ["disable", "ada"]])
def test_users_changes_name_the_dashboard_extra_before_asking_for_a_password(tmp_path, db, args):
    # No --password: the refusal must come before the prompt (stdin is empty, a prompt would abort).
    done = errands_without(("starlette",), "--database-url", db, "users", *args, cwd=tmp_path)
    assert_one_line(done, "Error: errands users needs the dashboard extra: pip install 'errands[dashboard]' "
                          "(no module named 'starlette')")
    assert "password" not in done.stdout


def test_the_core_alone_still_runs_every_command_that_needs_no_extra(tmp_path, db):
    for args in (["--help"], ["migrate"], ["status"], ["failed", "list"], ["users", "list"], ["recover"],
                 ["queue", "list"], ["doctor"]):
        done = errands_without(EVERY_EXTRA, "--database-url", db, *args, cwd=tmp_path)
        assert "Traceback" not in done.stdout + done.stderr, (args, done.stderr)
        assert done.returncode == 0, (args, done.returncode, done.stdout + done.stderr)


def test_every_extra_missing_dashboard_and_metrics_still_one_line(tmp_path, db):
    for command, extra in (("dashboard", "dashboard"), ("metrics", "metrics")):
        done = errands_without(EVERY_EXTRA, "--database-url", db, command, cwd=tmp_path)
        assert done.returncode == EXIT_CONFIG and len(done.stderr.splitlines()) == 1, done.stderr
        assert f"pip install 'errands[{extra}]'" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------------- the drivers
@pytest.mark.parametrize("url, blocked, line", [
    ("postgresql://app@127.0.0.1/app", "psycopg",
     "Error: PostgreSQL support (psycopg 3) needs the postgres extra: pip install 'errands[postgres]' "
     "(no module named 'psycopg')"),
    ("mysql://app@127.0.0.1/app", "pymysql",
     "Error: MySQL/MariaDB support (PyMySQL) needs the mysql extra: pip install 'errands[mysql]' "
     "(no module named 'pymysql')"),
])
def test_a_missing_driver_is_the_same_kind_of_line(tmp_path, url, blocked, line):
    assert_one_line(errands_without((blocked,), "--database-url", url, "status", cwd=tmp_path), line)


def test_doctor_says_which_extra_a_missing_driver_needs(tmp_path):
    done = errands_without(("psycopg",), "--database-url", "postgresql://app@127.0.0.1/app", "doctor", cwd=tmp_path)
    assert "Traceback" not in done.stderr and done.returncode == 1, done.stdout + done.stderr
    assert "needs the postgres extra" in done.stdout and "fix: pip install 'errands[postgres]'" in done.stdout


# ---------------------------------------------------------------------- integrations imported by --app
@pytest.mark.parametrize("module, blocked, extra", [
    ("errands.contrib.opentelemetry", "opentelemetry", "otel"),
    ("errands.contrib.prometheus", "prometheus_client", "metrics"),
    ("errands.metrics", "prometheus_client", "metrics"),
    ("errands.contrib.asgi", "starlette", "dashboard"),
    ("errands.contrib.flask", "a2wsgi", "flask"),
])
def test_an_app_that_imports_an_integration_without_its_extra(tmp_path, db, module, blocked, extra):
    (tmp_path / "integrated.py").write_text(f"import {module}\nfrom errands import Errands\napp = Errands()\n")
    done = errands_without((blocked,), "--app", "integrated:app", "--database-url", db, "worker", "--burst",
                           cwd=tmp_path)
    assert_one_line(done, "Error: cannot import 'integrated' for --app 'integrated:app': "
                          f"{module} needs the {extra} extra: pip install 'errands[{extra}]' "
                          f"(no module named {blocked!r})")


# ---------------------------------------------------------------------- the helper itself
def test_require_returns_the_module_or_the_first_alternative_that_imports():
    import json

    assert require("json", "x", "feature") is json
    assert require(("errands_no_such_module", "json"), "x", "feature") is json


def test_missing_extra_is_a_configuration_error_and_an_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "errands_optional_thing", None)
    with pytest.raises(MissingExtra) as caught:
        require("errands_optional_thing", "thing", "errands thing")
    error = caught.value
    assert isinstance(error, ConfigurationError) and isinstance(error, ImportError)
    assert str(error) == ("errands thing needs the thing extra: pip install 'errands[thing]' "
                          "(no module named 'errands_optional_thing')")
    assert (error.extra, error.feature, error.name) == ("thing", "errands thing", "errands_optional_thing")
