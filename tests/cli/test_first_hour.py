"""Issue 26, part 2: the command line's traps in a new user's first hour.

Which database a command uses is said on stderr, with where it came from, and when it is not the
one the ``--app`` application's own code uses; a reading command never creates a SQLite file; a
server that says "no such database" (or role) is configuration (78), not an outage (3); one error
prefix; ``--app shop.py:app`` gets a hint; an idle worker's stop prints a closing line.
In-process (``invoke_cli``) except the worker's stop, which needs a real process and its signals.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from helpers import invoke_cli, run_cli, scaled, start_worker, wait_for

from errands import Errands
from errands.core.rows import NewJob

EXIT_CONFIG, EXIT_UNAVAILABLE = 78, 3


def _unset(**extra: str | None) -> dict[str, str]:
    """invoke_cli's keywords for a shell without ERRANDS_APP / ERRANDS_DATABASE_URL (None unsets)."""
    return {"ERRANDS_APP": None, "ERRANDS_DATABASE_URL": None, "DATABASE_URL": None,  # type: ignore[dict-item]
            "ERRANDS_CONFIG": "none", **extra}


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], str]:
    """A user's module whose app names its own SQLite file, tmp_path/shop.db: a fresh module for
    each call, as each ``errands`` process imports its own (in this process a command's
    ``use_database`` stays on the imported app)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def new_module() -> str:
        name = f"shop_{secrets.token_hex(4)}"
        own = tmp_path / "shop.db"
        (tmp_path / f"{name}.py").write_text(f"from errands import Errands\n\napp = Errands('sqlite:///{own}')\n")
        return f"{name}:app"

    return new_module


# ---------------------------------------------------------------------- 1. the CLI's URL vs the app's own
def test_a_database_other_than_the_apps_own_is_said_once_with_the_password_masked(shop, tmp_path):
    app_path, own = shop(), tmp_path / "shop.db"
    other = "postgresql://shop:s3cret@127.0.0.1:1/shop"  # nothing listens on port 1: exit 3 after the notice
    done = invoke_cli(other, "status", **_unset(ERRANDS_APP=app_path, ERRANDS_DATABASE_URL=other))
    assert done.returncode == EXIT_UNAVAILABLE, done.stderr
    notice = (f"errands: using postgresql://shop:***@127.0.0.1:1/shop from ERRANDS_DATABASE_URL; the app {app_path}'s "
              f"own code uses sqlite:///{own} (jobs your code enqueues go there)")
    assert done.stderr.splitlines()[0] == notice and done.stderr.count("errands: using") == 1, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    app_path = shop()
    by_flag = invoke_cli(other, "--database-url", f"sqlite:///{own}.other", "migrate", **_unset(ERRANDS_APP=app_path))
    assert by_flag.returncode == 0, by_flag.stderr
    assert f"from --database-url; the app {app_path}'s own code uses sqlite:///{own}" in by_flag.stderr


def test_the_apps_own_database_is_named_with_where_it_came_from(shop, tmp_path):
    app_path, own = shop(), tmp_path / "shop.db"
    Errands(f"sqlite:///{own}").migrate()
    done = invoke_cli("", "status", **_unset(ERRANDS_APP=app_path))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"errands: database sqlite:///{own} (the app {app_path})"
    same = invoke_cli("", "--database-url", f"sqlite:///{own}", "status", "--json", **_unset(ERRANDS_APP=shop()))
    assert same.returncode == 0 and "errands: using" not in same.stderr, same.stderr
    assert f"errands: database sqlite:///{own} (--database-url)" in same.stderr  # the same database: no notice
    assert json.loads(same.stdout)["queues"] == {}  # stdout holds the JSON alone


# ---------------------------------------------------------------------- 2. reading commands create nothing
READING = [["status"], ["status", "--json"], ["failed", "list"], ["failed", "list", "--json"], ["failed", "show", "1"],
           ["queue", "list"], ["job", "show", "1"], ["batch", "1"], ["workflow", "show", "1"], ["recover"],
           ["alerts"], ["failed", "retry", "--all"], ["queue", "pause", "mails"], ["users", "list"]]
"""Commands that read, or change what a database already holds: none of them creates one."""


def test_reading_commands_refuse_a_missing_sqlite_file_and_create_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in READING:
        done = invoke_cli("", *args, **_unset())
        assert done.returncode == EXIT_CONFIG, (args, done.returncode, done.stdout, done.stderr)
        assert done.stdout == "", (args, done.stdout)
        first, fix = done.stderr.splitlines()[:2]
        command = " ".join(args[:1] if args[0] in ("status", "batch", "recover", "alerts") else args[:2])
        assert first == (f"Error: no SQLite database file at {tmp_path / 'errands.db'} (sqlite:///errands.db, from the "
                         "default: no --app, --database-url or ERRANDS_DATABASE_URL was given); "
                         f"`errands {command}` creates no database (only migrate, worker, enqueue and users create "
                         "do)"), (args, first)
        assert "--app module:attr" in fix and "--database-url URL or ERRANDS_DATABASE_URL" in fix, fix
        assert not (tmp_path / "errands.db").exists(), args


def test_creating_commands_still_create_it_and_every_command_names_its_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    default = "errands: database sqlite:///errands.db (the default: no --app, --database-url or ERRANDS_DATABASE_URL"
    done = invoke_cli("", "migrate", **_unset())
    assert done.returncode == 0 and (tmp_path / "errands.db").exists(), done.stderr
    assert done.stderr.startswith(default), done.stderr
    for args in (["status"], ["failed", "list"], ["queue", "list"]):
        read = invoke_cli("", *args, **_unset())
        assert read.returncode == 0 and read.stderr.startswith(default), (args, read.stderr)
    listed = invoke_cli("", "failed", "list", "--json", **_unset())
    assert json.loads(listed.stdout) == []
    (tmp_path / "errands.db").unlink()
    # An app module of this test's own (the imported sample_jobs.app of this process may have been
    # pointed at another database by an earlier in-process command).
    monkeypatch.syspath_prepend(str(tmp_path))
    module = f"jobs_{secrets.token_hex(4)}"
    (tmp_path / f"{module}.py").write_text("from errands import Errands\n\napp = Errands('sqlite:///errands.db')\n\n\n"
                                           "@app.job(name='record')\ndef record() -> None: ...\n")
    enqueued = invoke_cli("", "enqueue", "record", **_unset(ERRANDS_APP=f"{module}:app",
                                                            ERRANDS_DATABASE_URL="sqlite:///errands.db"))
    assert enqueued.returncode == 0 and enqueued.stdout.strip().isdigit(), enqueued.stderr
    assert (tmp_path / "errands.db").exists()
    assert "errands: database sqlite:///errands.db (ERRANDS_DATABASE_URL)" in enqueued.stderr


# ---------------------------------------------------------------------- 3. no such database / role: 78
@pytest.mark.parametrize("backend", ["postgres", "mariadb"])
def test_a_database_that_does_not_exist_is_configuration_with_the_create_statement(backend, db_url):
    missing = f"errands_no_such_{secrets.token_hex(3)}"
    url = urlunsplit(urlsplit(db_url)._replace(path=f"/{missing}", query=""))
    create = f'CREATE DATABASE "{missing}"' if backend == "postgres" else f"CREATE DATABASE `{missing}`"
    for args in (["status"], ["--app", "sample_jobs:app", "worker", "--burst"]):
        done = invoke_cli(url, *args)
        assert done.returncode == EXIT_CONFIG, (args, done.returncode, done.stderr)
        assert done.stderr.count(f"has no database '{missing}'") == 1 and create in done.stderr, done.stderr
        # The cause once: no line from the connection pool, nor the driver's own words beside errands'.
        assert "error connecting" not in done.stderr and "unavailable" not in done.stderr, done.stderr
        assert "does not exist" not in done.stderr and "Unknown database" not in done.stderr, done.stderr


@pytest.mark.parametrize("backend", ["postgres", "mariadb"])
def test_a_role_that_does_not_exist_is_configuration_too(backend, db_url):
    parts = urlsplit(db_url)
    url = urlunsplit(parts._replace(netloc=f"no_such_role@{parts.hostname}:{parts.port}"))
    done = invoke_cli(url, "status")
    assert done.returncode == EXIT_CONFIG, (done.returncode, done.stderr)
    assert ('CREATE ROLE "no_such_role"' if backend == "postgres" else "CREATE USER 'no_such_role'") in done.stderr


# ---------------------------------------------------------------------- 4. one error prefix
def test_every_error_reads_error_colon_as_clicks_own_do(tmp_path):
    url = f"sqlite:///{tmp_path / 'errands.db'}"
    Errands(url).migrate()
    for args, code in ((["job", "show", "99"], 1), (["failed", "show", "99"], 1), (["failed", "retry"], 2),
                       (["enqueue", "no.such.job"], 1), (["worker"], 78)):
        extra = {"ERRANDS_APP": None} if args == ["worker"] else {}
        done = invoke_cli(url, *args, **extra)  # type: ignore[arg-type]
        assert done.returncode == code, (args, done.returncode, done.stderr)
        errors = [line for line in done.stderr.splitlines() if "rror:" in line]
        assert errors and all(line.startswith("Error: ") for line in errors), (args, done.stderr)


# ---------------------------------------------------------------------- 5. --app shop.py:app
@pytest.mark.parametrize("given, meant", [("shop.py:app", "drop the .py: --app shop:app"),
                                          ("pkg/shop.py:app", "drop the .py and write the folders with dots: "
                                                              "--app pkg.shop:app"),
                                          ("./shop.py", "drop the .py: --app shop)")])
def test_an_app_given_as_a_file_gets_the_module_form(tmp_path, given, meant):
    done = invoke_cli(f"sqlite:///{tmp_path / 'errands.db'}", "--app", given, "status")
    assert done.returncode == EXIT_CONFIG and meant in done.stderr, done.stderr


# ---------------------------------------------------------------------- 6. the worker's closing line
def test_an_idle_worker_stopped_by_sigterm_prints_a_closing_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'errands.db'}"
    app = Errands(url)
    app.migrate()
    log = tmp_path / "worker.log"
    proc = start_worker(url, log_path=log)
    try:
        wait_for(lambda: app.store.workers.list_workers(), timeout=20, message="the worker process to register")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=scaled(20)) == 0
    except (AssertionError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
        raise
    finally:
        app.close()
    assert log.read_text().splitlines()[-1] == "errands worker: stopped, 0 jobs run", log.read_text()
    # Two runs, each failing (no test_runs table here): a failed run is a run too.
    app.store.jobs.enqueue([NewJob("sample_jobs.record", "default", '{"args":[],"kwargs":{}}')] * 2)
    app.close()
    burst = run_cli(url, "worker", "--burst", "--processes", "2")
    assert burst.returncode == 0, burst.stderr
    assert burst.stderr.splitlines()[-1] == "errands worker: stopped, 2 jobs run", burst.stderr
