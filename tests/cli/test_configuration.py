"""Configuration as teams keep it: flags, ERRANDS_* variables, [tool.errands] in pyproject.toml,
DATABASE_URL, the app's settings object; JSON logs; progress of long CLI actions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from helpers import APPS, SRC, run_cli, scaled

from errands import ConfigurationError, Errands
from errands.cli import main
from errands.core.settings import AppSettings


def _commands_options(name: str) -> list[click.Option]:
    command = main.commands[name]
    return [p for p in command.params if isinstance(p, click.Option) and p.name != "help"]


@pytest.mark.parametrize("command", ["worker", "dashboard"])
def test_every_worker_and_dashboard_flag_has_an_errands_variable(command):
    missing = [o.opts[-1] for o in _commands_options(command)
               if not (isinstance(o.envvar, str) and o.envvar.startswith("ERRANDS_"))]
    assert missing == []


def _plain_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no ERRANDS_* or DATABASE_URL unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRANDS_") and k != "DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), str(SRC)])
    env.update(extra)
    return env


def _errands(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "errands", *args], cwd=cwd, env=_plain_env(**env),
                          capture_output=True, text=True, timeout=scaled(120))


def test_pyproject_gives_defaults_that_variables_and_flags_override(tmp_path):
    db = tmp_path / "jobs.db"
    (tmp_path / "pyproject.toml").write_text(f"""
[project]
name = "shop"

[tool.errands]
app = "sample_jobs:app"
database-url = "sqlite:///{db}"
log-level = "WARNING"

[tool.errands.worker]
concurrency = 2
burst = true
queue = ["mails", "default"]
""")
    nested = tmp_path / "src" / "shop"
    nested.mkdir(parents=True)
    from_file = _errands(["--log-level", "INFO", "worker"], nested)  # found by walking up from a subfolder
    assert from_file.returncode == 0, from_file.stderr  # burst = true: exits once the queues are empty
    assert f"database sqlite:///{db}" in from_file.stderr
    assert "queues: mails, default | processes: 1 x concurrency 2" in from_file.stderr
    from_env = _errands(["worker"], nested, ERRANDS_CONCURRENCY="4", ERRANDS_LOG_LEVEL="INFO")
    assert "x concurrency 4" in from_env.stderr, from_env.stderr
    from_flag = _errands(["worker", "-c", "5"], nested, ERRANDS_CONCURRENCY="4")
    assert "x concurrency 5" in from_flag.stderr, from_flag.stderr
    elsewhere = _errands(["worker"], nested, ERRANDS_CONFIG="none", ERRANDS_BURST="1")
    assert elsewhere.returncode == 78 and "needs your app's registered jobs" in elsewhere.stderr


def test_a_typo_in_the_config_file_is_refused_with_the_known_keys(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.errands.worker]\nconcurency = 2\n")
    done = _errands(["worker", "--burst"], tmp_path)
    assert done.returncode == 78
    assert "unknown key 'concurency' in [tool.errands.worker]" in done.stderr and "concurrency" in done.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.errands\n")
    broken = _errands(["status"], tmp_path)
    assert broken.returncode == 78 and "is not valid TOML" in broken.stderr


def test_errands_variables_set_flags(tmp_path):
    db = f"sqlite:///{tmp_path / 'env.db'}"
    done = _errands(["worker"], tmp_path, ERRANDS_APP="sample_jobs:app", ERRANDS_DATABASE_URL=db, ERRANDS_BURST="true",
                    ERRANDS_CONCURRENCY="3", ERRANDS_QUEUES="default,mails", ERRANDS_CONFIG="none")
    assert done.returncode == 0, done.stderr
    assert "queues: default, mails | processes: 1 x concurrency 3" in done.stderr


def test_database_url_is_the_last_fallback(tmp_path):
    db = tmp_path / "fallback.db"
    done = _errands(["migrate"], tmp_path, DATABASE_URL=f"sqlite:///{db}", ERRANDS_CONFIG="none")
    assert done.returncode == 0, done.stderr
    assert db.exists()
    other = tmp_path / "preferred.db"
    _errands(["migrate"], tmp_path, DATABASE_URL=f"sqlite:///{db}", ERRANDS_DATABASE_URL=f"sqlite:///{other}",
             ERRANDS_CONFIG="none")
    assert other.exists()


def test_app_settings_merge_in_order_and_check_their_values(tmp_path, monkeypatch):
    file = tmp_path / "pyproject.toml"
    file.write_text('[tool.errands]\nlease = 40\ntable-prefix = "shop_"\nresult-ttl = 600\n[tool.errands.worker]\n'
                    'concurrency = 3\n')
    env = {"ERRANDS_LEASE": "50", "ERRANDS_KEEP_RESULTS": "yes"}
    assert AppSettings.load(pyproject=file, environ={}).lease == 40
    merged = AppSettings.load(pyproject=file, environ=env)
    assert (merged.lease, merged.table_prefix, merged.keep_results, merged.result_ttl) == (50, "shop_", True, 600)

    class DjangoSettings:  # as a Django settings module: prefixed upper-case names
        ERRANDS_LEASE = 60
        ERRANDS_FAILED_TTL = None
        DEBUG = True

    from_object = AppSettings.load(DjangoSettings, pyproject=file, environ=env)
    assert (from_object.lease, from_object.failed_ttl) == (60, None)
    assert AppSettings.load({"lease": 70}, pyproject=file, environ=env, lease=80).lease == 80
    monkeypatch.delenv("ERRANDS_LEASE", raising=False)
    monkeypatch.setenv("ERRANDS_DATABASE_URL", f"sqlite:///{tmp_path / 'a.db'}")
    monkeypatch.chdir(tmp_path)
    app = Errands.from_settings({"default_queue": "mails"})  # finds ./pyproject.toml
    assert (app.lease, app.table_prefix, app.default_queue, app.database_url) == (
        40.0, "shop_", "mails", f"sqlite:///{tmp_path / 'a.db'}")
    for bad, message in (({"lease": "soon"}, "'soon' is not a valid lease"),
                         ({"keep_results": "maybe"}, "expected true or false"),
                         ({"payload_limit": 1.5}, "expected a whole number")):
        with pytest.raises(ConfigurationError, match=message):
            AppSettings.load(bad, pyproject=False, environ={})
    with pytest.raises(ConfigurationError, match="ERRANDS_LEASE: 'x' is not a valid lease"):
        AppSettings.load(pyproject=False, environ={"ERRANDS_LEASE": "x"})
    with pytest.raises(ConfigurationError, match="unknown setting 'leese'"):
        AppSettings.load(pyproject=False, environ={}, leese=3)


def test_json_logs_carry_the_job_fields(tmp_path):
    db = f"sqlite:///{tmp_path / 'logs.db'}"
    env = {"ERRANDS_CONFIG": "none", "ERRANDS_APP": "dashboard_jobs:app"}
    assert run_cli(db, "enqueue", "quick", "--args", "[1]", **env).returncode == 0
    assert run_cli(db, "enqueue", "fixable", "--args", json.dumps([str(tmp_path / "missing")]), **env).returncode == 0
    done = run_cli(db, "--log-format", "json", "worker", "--burst", **env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    finished = [e for e in lines if e.get("job_name") == "quick"]
    assert finished, done.stderr
    entry = finished[0]
    assert entry["level"] == "INFO" and entry["queue"] == "default" and entry["attempt"] == 1
    assert entry["job_id"] == 1 and entry["duration_ms"] >= 0 and "done in" in entry["message"]
    failed = [e for e in lines if e.get("job_name") == "fixable" and e["level"] == "WARNING"]
    assert any("RuntimeError: <b>not fixed yet</b>" in e.get("exception", "") for e in failed), failed
    assert any("moved to the dead letter" in e["message"] and e["job_id"] == 2 for e in failed), failed


def _bury(app: Errands, n: int, queue: str = "default") -> list[int]:
    """``n`` dead-letter entries, made the way production makes them: jobs that fail their last attempt."""

    @app.job(name="always_fails", queue=queue, max_attempts=1)
    def always_fails(i: int) -> None:
        raise RuntimeError(f"broken {i}")

    ids = [h.id for h in app.enqueue_many([always_fails.prepare(i) for i in range(n)])]
    app.run_worker([queue], burst=True, concurrency=4)
    assert len(app.store.insights.failed_ids()) == n
    return ids


def test_bulk_retry_and_forget_go_in_chunks_with_a_progress_bar(app, db_url, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module("errands.services.operator"), "BULK_CHUNK", 7)
    ids = _bury(app, 20)
    runner = CliRunner()
    env = {"ERRANDS_DATABASE_URL": db_url, "ERRANDS_CONFIG": "none"}
    done = runner.invoke(main, ["failed", "retry", "--all"], env=env)
    assert done.exit_code == 0, done.output
    assert "retried 20 job(s)" in done.output and "retrying" in done.output
    assert app.store.insights.failed_ids() == [] and sorted(j.id for j in app.store.jobs.list_jobs(limit=100)) == ids
    app.run_worker(["default"], burst=True, concurrency=4)
    done = runner.invoke(main, ["failed", "forget", "--all", "--yes"], env=env)
    assert done.exit_code == 0 and "forgot 20 job(s)" in done.output and "forgetting" in done.output
    assert app.store.insights.failed_ids() == []
    actions = [e.action for e in app.store.accounts.audit_log()]
    assert "retry" in actions and "forget" in actions


def test_purge_cancels_the_waiting_jobs_of_one_queue(app, db_url):
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    @app.job(name="report", queue="reports")
    def report() -> None: ...

    handles = app.enqueue_many([mail.prepare(f"u{i}@example.com") for i in range(12)])
    kept = report.enqueue()
    env = {"ERRANDS_DATABASE_URL": db_url, "ERRANDS_CONFIG": "none"}
    asked = CliRunner().invoke(main, ["queue", "purge", "mails"], env=env, input="n\n")
    assert asked.exit_code == 1 and "cancel 12 waiting job(s) of queue mails?" in asked.output
    done = CliRunner().invoke(main, ["queue", "purge", "mails", "--yes"], env=env)
    assert done.exit_code == 0 and "cancelled 12 waiting job(s) of queue mails" in done.output, done.output
    assert [j.id for j in app.store.jobs.list_jobs(limit=100)] == [kept.id]
    assert app.job_state(handles[0].id).value == "cancelled"
    bad = CliRunner().invoke(main, ["queue", "purge", "no such queue!", "--yes"], env=env)
    assert bad.exit_code == 1 and "invalid queue name" in bad.output
    assert app.store.features.get_result(handles[0].id).message == "purged from its queue"


def test_purge_leaves_a_job_a_worker_claimed_meanwhile(app):
    """The purge listed the job as waiting, then a worker claimed it: the cancel, decided under the
    row lock, leaves it running (a plain cancel would ask it to stop)."""
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    job = mail.enqueue("a@example.com")
    assert [c.id for c in app.store.jobs.claim("w:1:x", ["mails"], 1, 60.0)] == [job.id]
    assert app.store.features.cancel(job.id, 60.0, waiting_only=True) == "running"
    row = app.store.jobs.get_job(job.id)
    assert row.reserved_by == "w:1:x" and row.cancel_requested_at is None
    assert app.store.features.cancel(job.id, 60.0) == "requested"


def test_migrate_reports_each_step(db_url):
    done = CliRunner().invoke(main, ["migrate"], env={"ERRANDS_DATABASE_URL": db_url, "ERRANDS_CONFIG": "none"})
    assert done.exit_code == 0, done.output
    applied = "applied schema version(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
    assert "migrating" in done.output and applied in done.output
    again = CliRunner().invoke(main, ["migrate"], env={"ERRANDS_DATABASE_URL": db_url, "ERRANDS_CONFIG": "none"})
    assert "schema already at version 12" in again.output


def test_every_command_and_subcommand_takes_defaults_from_the_file(tmp_path):
    (tmp_path / "pyproject.toml").write_text(f'[tool.errands]\ndatabase-url = "sqlite:///{tmp_path / "c.db"}"\n'
                                             '[tool.errands.failed.list]\njson = true\n'
                                             '[tool.errands.metrics]\nport = 9999\n')
    assert _errands(["migrate"], tmp_path).returncode == 0
    listed = _errands(["failed", "list"], tmp_path)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr  # --json from the file
    assert "default: 9999" in _errands(["metrics", "--help"], tmp_path).stdout
    (tmp_path / "pyproject.toml").write_text("[tool.errands.failed.lst]\njson = true\n")
    typo = _errands(["status"], tmp_path)
    assert typo.returncode == 78 and "unknown key 'lst' in [tool.errands.failed]; known: forget, list, retry" \
        in typo.stderr
