"""The CLI's non-worker commands against real databases (worker runs are in tests/worker)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, wait_for

from errands import Errands
from errands.core.rows import NewJob

_apps: dict[str, Errands] = {}


@pytest.fixture
def migrated(db_url):
    app = Errands(db_url)
    app.migrate()
    _apps[db_url] = app
    yield db_url
    del _apps[db_url]
    app.store.close()


def opened(url: str) -> Errands:
    """The test's own app on ``url`` (closed by the fixture)."""
    return _apps[url]


def test_enqueue_prints_the_id_and_stores_the_job(migrated):
    done = run_cli(migrated, "enqueue", "sample_jobs.sleep_then_record", "--args", "[0.5]",
                   "--queue", "mails", "--priority", "3", "--delay", "60", "--expires-in", "30", "--deadline", "600")
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout.strip())
    row = opened(migrated).store.jobs.get_job(job_id)
    assert (row.name, row.queue, row.priority, row.payload) == (
        "sample_jobs.sleep_then_record", "mails", 3, '{"args":[0.5],"kwargs":{}}')
    assert (row.expires_at - row.available_at).total_seconds() == pytest.approx(30, abs=0.01)  # from its due time
    assert (row.deadline_at - row.created_at).total_seconds() == pytest.approx(600, abs=0.01)


@pytest.mark.parametrize("args, code, message", [
    (["enqueue", "sample_jobs.nope"], 1, "no job named 'sample_jobs.nope'"),
    (["enqueue", "sample_jobs.record", "--args", "[1,"], 2, "not valid JSON"),
    (["enqueue", "sample_jobs.record", "--kwargs", "[1]"], 2, "must be a JSON object"),
    (["enqueue", "sample_jobs.record", "--queue", "bad queue"], 1, "invalid queue name"),
    (["enqueue", "sample_jobs.record", "--args", "[1]"], 1, "do not match job"),
])
def test_enqueue_refuses_bad_input_and_stores_nothing(migrated, args, code, message):
    done = run_cli(migrated, *args)
    assert done.returncode == code
    assert message in done.stderr
    assert opened(migrated).store.jobs.list_jobs() == []


def test_enqueue_payload_too_large(migrated):
    done = run_cli(migrated, "enqueue", "sample_jobs.sleep_then_record", "--args", json.dumps(["x" * 70000]))
    assert done.returncode == 1 and "over the limit of 65536 bytes" in done.stderr
    assert opened(migrated).store.jobs.list_jobs() == []


def test_worker_and_enqueue_need_an_app(migrated):
    done = run_cli(migrated, "worker", ERRANDS_APP="")
    assert done.returncode == 78 and "--app" in done.stderr


def test_status_json_shape(migrated):
    app = opened(migrated)
    app.store.jobs.enqueue([NewJob("x", "a", "{}"), NewJob("x", "a", "{}", delay=600), NewJob("x", "b", "{}")])
    app.store.jobs.claim("w", ["b"], 1, 30)
    app.store.workers.register("h:1:x", "h", 1, ["a"], 2)
    done = run_cli(migrated, "status", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["queues"] == {
        "a": {"ready": 1, "delayed": 1, "running": 0, "stale": 0, "failed": 0, "blocked": 0},
        "b": {"ready": 0, "delayed": 0, "running": 1, "stale": 0, "failed": 0, "blocked": 0},
    }
    [worker] = report["workers"]
    assert worker["id"] == "h:1:x" and worker["alive"] is True
    text = run_cli(migrated, "status")
    assert text.returncode == 0 and "a" in text.stdout and "ready" in text.stdout


def test_status_warns_when_no_worker_runs(migrated):
    done = run_cli(migrated, "status")
    assert "no worker is running" in done.stdout


def test_failed_list_retry_forget(migrated):
    app = opened(migrated)
    ids = app.store.jobs.enqueue([NewJob("x", "a", "{}"), NewJob("x", "b", "{}"), NewJob("x", "b", "{}")])
    for job_id in ids:
        assert app.store.endings.bury(None, job_id, "ValueError", f"broken {job_id}")
    listing = run_cli(migrated, "failed", "list")
    assert listing.returncode == 0 and f"broken {ids[0]}" in listing.stdout
    as_json = json.loads(run_cli(migrated, "failed", "list", "--json").stdout)
    assert {e["id"] for e in as_json} == set(ids)
    assert run_cli(migrated, "failed", "retry", str(ids[0])).stdout.strip() == "retried 1 job(s)"
    assert run_cli(migrated, "failed", "retry", "--all", "--queue", "b").stdout.strip() == "retried 2 job(s)"
    assert app.failed() == []
    missing = run_cli(migrated, "failed", "retry", "999999")
    assert missing.returncode == 1 and "no dead-letter entry with id 999999" in missing.stderr
    assert run_cli(migrated, "failed", "retry").returncode == 2
    for job_id in ids:
        app.store.jobs.claim("w", ["a", "b"], 5, 30)
        app.store.endings.bury(None, job_id, "E", "m")
    assert run_cli(migrated, "failed", "forget", str(ids[1])).stdout.strip() == "forgot 1 job(s)"
    assert run_cli(migrated, "failed", "forget", "--all", "--yes").stdout.strip() == "forgot 2 job(s)"
    assert app.failed() == [] and app.store.jobs.list_jobs() == []


def test_migrate_and_sql(db_url):
    sql = run_cli(db_url, "migrate", "--sql")
    assert sql.returncode == 0 and "CREATE TABLE" in sql.stdout
    first = run_cli(db_url, "migrate")
    assert first.returncode == 0, first.stderr
    again = run_cli(db_url, "migrate")
    assert "already at version" in again.stdout


def test_recover_command(migrated):
    app = opened(migrated)
    app.store.jobs.enqueue([NewJob("x", "a", "{}")])
    app.store.jobs.claim("gone", ["a"], 1, 1)
    wait_for(lambda: app.counts()["a"].stale == 1, message="the 1 s lease to lapse")
    done = run_cli(migrated, "recover")
    assert done.returncode == 0 and "released 1 stale job(s)" in done.stdout


def test_database_down_exit_code():
    done = run_cli("postgresql://u:pw@127.0.0.1:1/x", "status")
    assert done.returncode == 3 and "unavailable" in done.stderr and "pw@" not in done.stderr


def test_users_commands_create_disable_enable_and_change_passwords(migrated):
    done = run_cli(migrated, "users", "create", "ada", "--role", "admin", "--password", "correct horse battery")
    assert done.returncode == 0 and "created admin ada" in done.stdout, done.stderr
    again = run_cli(migrated, "users", "create", "ada", "--password", "correct horse battery")
    assert again.returncode == 1 and "user 'ada' exists already" in again.stderr
    short = run_cli(migrated, "users", "create", "bob", "--password", "short")
    assert short.returncode == 1 and "at least 10 characters" in short.stderr
    assert run_cli(migrated, "users", "disable", "ada").returncode == 0
    assert "disabled" in run_cli(migrated, "users", "list").stdout
    assert run_cli(migrated, "users", "enable", "ada").returncode == 0
    assert run_cli(migrated, "users", "enable", "ada").returncode == 0  # already enabled: fine
    assert "active" in run_cli(migrated, "users", "list").stdout
    assert run_cli(migrated, "users", "passwd", "ada", "--password", "another long secret").returncode == 0
    missing = run_cli(migrated, "users", "disable", "nobody")
    assert missing.returncode == 1 and "no user 'nobody'" in missing.stderr
    actions = [e.action for e in opened(migrated).store.accounts.audit_log()]
    assert {"user-create", "user-disable", "user-enable", "user-password"} <= set(actions)


def test_every_cli_action_goes_through_the_services_and_is_audited_as_the_cli(migrated):
    """Operator actions from the CLI leave the same audit lines as from the dashboard, actor "cli"."""
    app = opened(migrated)
    enqueued = run_cli(migrated, "enqueue", "sample_jobs.sleep_then_record", "--args", "[0.5]", "--queue", "mails")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = int(enqueued.stdout.strip())
    [other] = app.store.jobs.enqueue([NewJob("sample_jobs.record", "bulk", '{"args":[1],"kwargs":{}}')])
    for args in (["queue", "pause", "mails"], ["queue", "resume", "mails"], ["job", "cancel", str(job_id)],
                 ["recover"], ["queue", "purge", "bulk", "--yes"]):
        done = run_cli(migrated, *args)
        assert done.returncode == 0, (args, done.stderr)
    entries = list(reversed(app.store.accounts.audit_log()))
    assert [(e.actor, e.action) for e in entries] == [
        ("cli", "enqueue"), ("cli", "pause"), ("cli", "resume"), ("cli", "cancel"), ("cli", "recover"),
        ("cli", "purge")]
    assert entries[0].target == f"jobs {job_id}" and entries[1].target == "queue mails"
    assert app.store.jobs.get_job(other) is None
