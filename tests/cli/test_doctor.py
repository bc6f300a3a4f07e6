"""``errands doctor`` against real databases: a healthy one, drifted ones, missing and unreachable ones,
and the facts each dialect reports (WAL, claim mode, isolation, dead rows, workers)."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import cli_env, run_cli, scaled, start_worker, wait_for
from prometheus_client import CollectorRegistry

from errands import Errands
from errands.core.rows import NewJob
from errands.diagnostics import Status, diagnose
from errands.diagnostics import mysql as mysql_facts
from errands.diagnostics import postgres as postgres_facts
from errands.diagnostics import sqlite as sqlite_facts
from errands.diagnostics.checks import dialect_facts
from errands.diagnostics.context import DoctorContext
from errands.diagnostics.schema import DDLNotUnderstood, _Replay, expected_schema
from errands.diagnostics.transactions import open_transactions
from errands.metrics import ErrandsCollector
from errands.store import open_store
from errands.store.dialects.base import FAILED_COLUMNS, JOB_COLUMNS, WORKER_COLUMNS
from errands.store.dialects.sqlite import BUSY_TIMEOUT_MS
from errands.worker.liveness import forget_worker_after

COMMON = ["connectivity", "server", "schema_version", "schema_drift", "claim_index", "claim_mode", "clock_skew",
          "jobs_table", "open_transactions", "workers"]
PER_DIALECT = {"sqlite": ["sqlite_journal", "sqlite_busy_timeout"], "postgresql": ["postgres_autovacuum"],
               "mysql": ["mysql_isolation", "mysql_time_zone", "mysql_engine", "galera"]}
DROP_CLAIM_INDEX = {"sqlite": "DROP INDEX errands_jobs_claim", "postgresql": "DROP INDEX errands_jobs_claim",
                    "mysql": "ALTER TABLE errands_jobs DROP INDEX errands_jobs_claim"}
NARROW_CLAIM_INDEX = {
    "sqlite": "CREATE INDEX errands_jobs_claim ON errands_jobs (queue, id)",
    "postgresql": "CREATE INDEX errands_jobs_claim ON errands_jobs (queue, id)",
    "mysql": "ALTER TABLE errands_jobs DROP INDEX errands_jobs_claim, ADD KEY errands_jobs_claim (queue, id)"}


def doctor(url: str, *args: str, **env: str) -> tuple[int, dict[str, Any]]:
    done = run_cli(url, "doctor", "--json", *args, **env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in report["checks"] if c["name"] == name]
    assert len(found) == 1, (name, [c["name"] for c in report["checks"]])
    return found[0]


def execute(app: Errands, sql: str, *params: Any) -> None:
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q(sql), params))


# ---------------------------------------------------------------------- healthy
def test_healthy_database_passes_and_reports_every_check(app, db_url):
    code, report = doctor(db_url)
    assert code == 0, report
    assert report["needs_action"] == [] and report["exit_code"] == 0
    names = [c["name"] for c in report["checks"]]
    assert set(COMMON + PER_DIALECT[app.store.dialect.name]) <= set(names), names
    assert all(c["status"] != "fail" for c in report["checks"])
    for name in ("connectivity", "schema_version", "schema_drift", "claim_index", "clock_skew"):
        assert check(report, name)["status"] == "ok", check(report, name)
    skew = check(report, "clock_skew")["data"]
    assert isinstance(skew["skew_seconds"], float) and abs(skew["skew_seconds"]) < 5
    assert re.search(r"clock is \d+\.\d{3} s (ahead of|behind) this host's", check(report, "clock_skew")["detail"])
    latest = app.store.dialect.schema_version
    assert check(report, "schema_version")["data"] == {"recorded": latest, "code": latest}
    # No session but errands' own is in a transaction (SQLite has no concurrent snapshot to speak of).
    transactions = check(report, "open_transactions")
    assert transactions["status"] == ("info" if app.store.dialect.name == "sqlite" else "ok"), transactions
    # Nothing is running: the registry check says so, without failing (no job is ready).
    assert check(report, "workers")["status"] == "warn"

    text = run_cli(db_url, "doctor")
    assert text.returncode == 0, text.stdout + text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("errands doctor: ") and lines[-1].startswith("nothing needs action")
    assert any(re.match(r"^(✓|\+) ok +schema drift +tables, columns and indexes match", line) for line in lines)
    assert any(re.match(r"^! warn +workers +no live worker", line) for line in lines)
    assert "\x1b[" not in text.stdout  # colour only on a terminal; the words carry the meaning


# ---------------------------------------------------------------------- drift
def test_dropped_claim_index_is_drift_with_the_statement_to_restore_it(app, db_url):
    execute(app, DROP_CLAIM_INDEX[app.store.dialect.name])
    code, report = doctor(db_url)
    assert code == 1
    assert {"schema_drift", "claim_index"} <= set(report["needs_action"])
    drift = check(report, "schema_drift")
    assert drift["data"]["missing_indexes"] == ["errands_jobs_claim"]
    assert "index errands_jobs_claim on errands_jobs is missing" in drift["items"]
    restore = "ADD KEY errands_jobs_claim (queue, reserved_by, blocked_by, priority DESC, fair_turn, id, " \
        "available_at)" if app.store.dialect.name == "mysql" else \
        "CREATE INDEX errands_jobs_claim ON errands_jobs (queue, priority DESC, fair_turn, id) WHERE " \
        "reserved_by IS NULL AND blocked_by IS NULL"
    assert restore in drift["fix"] and restore in check(report, "claim_index")["fix"]
    # The statement in the fix really restores the schema.
    execute(app, drift["fix"].splitlines()[-1])
    assert doctor(db_url)[0] == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
def test_a_claim_index_of_other_columns_is_named_by_the_drift_check_and_the_claim_check(app, db_url):
    dialect = app.store.dialect.name
    if dialect != "mysql":
        execute(app, DROP_CLAIM_INDEX[dialect])
    execute(app, NARROW_CLAIM_INDEX[dialect])
    code, report = doctor(db_url)
    assert code == 1 and {"schema_drift", "claim_index"} <= set(report["needs_action"])
    assert check(report, "schema_drift")["data"]["changed_indexes"] == ["errands_jobs_claim"]
    claim = check(report, "claim_index")
    assert claim["status"] == "fail" and claim["data"]["present"] is True
    # The reason is the drift check's own sentence about that index.
    assert "errands_jobs_claim is not the index errands defines (covers (queue, id), errands expects" in claim["detail"]
    assert claim["fix"].startswith("drop index errands_jobs_claim, then: ")


def test_dropped_column_is_drift_with_the_column_definition(app, db_url):
    execute(app, "ALTER TABLE errands_jobs DROP COLUMN progress_message")
    code, report = doctor(db_url)
    assert code == 1 and report["needs_action"] == ["schema_drift"]
    drift = check(report, "schema_drift")
    assert drift["data"]["missing_columns"] == ["errands_jobs.progress_message"]
    assert "ALTER TABLE errands_jobs ADD COLUMN progress_message" in drift["fix"]


def _made_objects(app, version: int) -> bool:
    """Whether ``version`` adds tables, columns or indexes (a version may only set options, e.g. a
    storage parameter, or do nothing on a dialect: its lost row is simply migrated again)."""
    now, then = expected_schema(app.store, version), expected_schema(app.store, version - 1)
    return set(now.indexes) != set(then.indexes) or any(
        t not in then.tables or set(spec.columns) != set(then.tables[t].columns) for t, spec in now.tables.items())


def test_a_lost_version_row_is_reported_with_the_row_to_restore(app, db_url):
    versions = [v for v, _ in app.store.dialect.migrations()]
    latest = versions[-1]
    lost = max(v for v in versions if _made_objects(app, v))  # its row and those after it go
    before = lost - 1
    execute(app, f"DELETE FROM {{schema}} WHERE version >= {lost}")
    code, report = doctor(db_url)
    assert code == 1
    version = check(report, "schema_version")
    assert version["status"] == "fail" and version["data"] == {"recorded": before, "code": latest}
    assert version["fix"].count("INSERT INTO") == latest - before  # no row for a version that does not exist
    assert all(f"INSERT INTO errands_schema (version) VALUES ({v})" in version["fix"] for v in range(lost, latest + 1))
    # The latest version's columns are not called extra while the recorded version is the one before.
    assert check(report, "schema_drift")["status"] == "ok"
    assert check(report, "workers")["status"] == "info"  # not read: the store's verbs need a current schema


def test_an_older_schema_says_run_migrate(app, db_url):
    execute(app, "DELETE FROM {schema} WHERE version >= 3")
    execute(app, "DROP TABLE errands_stats")
    code, report = doctor(db_url)
    assert code == 1
    assert "run `errands migrate`" in check(report, "schema_version")["fix"]


def test_a_newer_schema_says_upgrade_errands(app, db_url):
    execute(app, "INSERT INTO {schema} (version) VALUES (99)")
    code, report = doctor(db_url)
    assert code == 1
    version = check(report, "schema_version")
    assert "newer than this code" in version["detail"] and "upgrade errands" in version["fix"]


# ---------------------------------------------------------------------- missing, unreachable
def test_unmigrated_database_says_run_migrate_and_creates_nothing(db_url):
    code, report = doctor(db_url)
    assert code == 1
    if db_url.startswith("sqlite"):
        failed = check(report, "connectivity")
        assert "no SQLite database file" in failed["detail"]
        path = Path(db_url.removeprefix("sqlite:///"))
        assert not path.exists()
        path.touch()  # an empty file: SQLite opens it as a database without tables
        code, report = doctor(db_url)
        assert code == 1
    failed = check(report, "schema_version")
    assert failed["status"] == "fail" and "run `errands migrate`" in failed["fix"]
    assert report["needs_action"] == ["schema_version"]
    store = open_store(db_url)
    try:
        assert store.current_version() is None  # the doctor looked without migrating
    finally:
        store.close()


@pytest.mark.parametrize("url, message, fix", [
    ("postgresql://postgres@127.0.0.1:1/test", "nothing accepts connections at 127.0.0.1:1",
     "start PostgreSQL there, or fix the port in the URL (PostgreSQL listens on 5432"),
    ("mysql://root@127.0.0.1:1/test", "nothing accepts connections at 127.0.0.1:1",
     "start MySQL/MariaDB there, or fix the port in the URL (they listen on 3306"),
    ("postgresql://postgres@no-such-host.invalid/test", "the host name 'no-such-host.invalid' does not resolve",
     "fix the host in the URL"),
    ("mysql://root@no-such-host.invalid/test", "the host name 'no-such-host.invalid' does not resolve",
     "fix the host in the URL"),
    ("sqlite:////nonexistent-dir/errands.db", "no SQLite database file at /nonexistent-dir/errands.db",
     "check the path in the database URL"),
    ("sqlite:///tmp/errands-doctor-relative.db", "the URL's three slashes make 'tmp/errands-doctor-relative.db' a path "
     "relative to the current directory", "for the absolute path write four slashes: "
     "sqlite:////tmp/errands-doctor-relative.db"),
    ("oracle://db/x", "the database URL is unusable", "fix the URL"),
])
def test_unreachable_database_is_one_clear_failure(url, message, fix):
    """Each cause is named, with the fix for it (the fix line was the same generic advice for a wrong
    port, a missing database, a missing role and a host that does not resolve)."""
    done = run_cli(url, "doctor", ERRANDS_APP="")
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert re.match(r"^(✗|x) FAIL +connectivity +", lines[1]) and message in lines[1], done.stdout
    assert lines[2].strip().startswith("fix: " + fix), done.stdout
    assert lines[-1] == "1 check needs action: connectivity (exit code 1)"


@pytest.mark.parametrize("backend", ["postgres", "mysql"], indirect=True)
def test_a_missing_database_or_role_names_it_and_the_statement_that_creates_it(backend, db_url):
    """Against the test servers: the database and the user do not exist; the doctor says which and how
    to create it, with the names from the URL filled in (and the server's log line is not repeated)."""
    scheme, rest = db_url.split("://", 1)
    server = rest.split("/", 1)[0].split("@", 1)[1]
    cases = [(f"{scheme}://{rest.split('/', 1)[0]}/errands_no_such_db",
              "has no database 'errands_no_such_db'",
              'CREATE DATABASE "errands_no_such_db"' if scheme.startswith("postgres")
              else "CREATE DATABASE `errands_no_such_db`"),
             (f"{scheme}://errands_no_such_role@{server}/test",
              "has no role 'errands_no_such_role'" if scheme.startswith("postgres")
              else "refused user 'errands_no_such_role'",
              'CREATE ROLE "errands_no_such_role" LOGIN' if scheme.startswith("postgres")
              else "CREATE USER 'errands_no_such_role'@'%'")]
    for url, message, statement in cases:
        done = run_cli(url, "doctor", ERRANDS_APP="")
        assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
        failed = done.stdout.splitlines()
        assert message in failed[1] and statement in failed[2], done.stdout
        assert "error connecting" not in done.stderr, done.stderr


def test_a_sqlite_file_another_program_made_is_no_journal_warning(tmp_path):
    """A database file SQLite tools create is in rollback-journal mode: errands switching it to WAL on its
    first visit is no sign that "something else resets it"."""
    path = tmp_path / "made-elsewhere.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE someone_elses (x)")
    conn.close()
    code, report = doctor(f"sqlite:///{path}", ERRANDS_APP="")
    journal = check(report, "sqlite_journal")
    assert journal["status"] == "ok" and "held no errands tables yet" in journal["detail"], journal


def test_an_app_that_cannot_be_loaded_is_a_failed_check():
    done = run_cli("sqlite:///unused.db", "doctor", ERRANDS_APP="no_such_module:app")
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert re.search(r"^(✗|x) FAIL +app +cannot load the app: cannot import 'no_such_module'", done.stdout, re.M)


# ---------------------------------------------------------------------- SQLite
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_file_switched_out_of_wal_is_reported(app, db_url):
    app.store.close()
    path = db_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    conn.close()
    code, report = doctor(db_url)
    journal = check(report, "sqlite_journal")
    assert journal["status"] == "warn" and "rollback-journal mode" in journal["detail"]
    assert journal["data"]["journal_on_disk_before"] == "rollback journal"
    assert code == 0  # errands switched it back; nothing is broken now
    assert check(doctor(db_url)[1], "sqlite_journal")["status"] == "ok"


def test_sqlite_in_memory_database_is_not_wal():
    done = run_cli("sqlite:///:memory:", "doctor", "--json", ERRANDS_APP="")
    journal = check(json.loads(done.stdout), "sqlite_journal")
    assert journal["status"] == "warn" and journal["data"]["journal_mode"] == "memory"
    assert "in-memory" in journal["detail"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_short_busy_timeout_and_free_pages(app, db_url):
    code, report = doctor(db_url + "?busy_timeout=100")
    busy = check(report, "sqlite_busy_timeout")
    assert busy["status"] == "warn" and busy["data"]["busy_timeout_ms"] == 100 and "busy_timeout" in busy["fix"]
    assert f"errands' default is {BUSY_TIMEOUT_MS} ms" in busy["fix"]
    app.store.jobs.enqueue([NewJob("x", "default", json.dumps({"args": ["x" * 2000], "kwargs": {}}))
                       for _ in range(500)])
    execute(app, "DELETE FROM {jobs}")
    ctx = DoctorContext(app, app.store, expected_schema(app.store))
    table = sqlite_facts.jobs_table(ctx)
    assert table.status is Status.OK and table.data["free_bytes"] > 500 * 2000
    bloated = sqlite_facts.jobs_table(ctx, free_warn_bytes=1, free_warn_fraction=0.01)
    assert bloated.status is Status.WARN and "VACUUM" in (bloated.fix or "")


# ---------------------------------------------------------------------- MySQL / MariaDB
@pytest.mark.parametrize("backend", ["mariadb", "mariadb-update"], indirect=True)
def test_mariadb_claim_mode_and_why(app, db_url, backend):
    code, report = doctor(db_url)
    assert code == 0
    mode = check(report, "claim_mode")
    assert mode["data"]["server_accepts_skip_locked"] is True
    if backend == "mariadb-update":
        assert mode["status"] == "warn" and mode["data"]["mode"] == "update"
        assert "fallback, because the database URL says ?claim=update" in mode["detail"]
        assert "remove claim=update" in mode["fix"]
    else:
        assert mode["status"] == "ok" and "SKIP LOCKED" in mode["detail"]
    assert check(report, "mysql_isolation")["data"]["session"] == "READ-COMMITTED"
    assert "MB free" in check(report, "jobs_table")["detail"]


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_mysql_session_settings_undone_by_something_else_fail(app):
    ctx = DoctorContext(app, app.store, expected_schema(app.store))
    # What a proxy that drops errands' SET statements leaves: the server's defaults.
    ctx.read(lambda cur: cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
    ctx.read(lambda cur: cur.execute("SET SESSION time_zone = '+02:00'"))
    checks = {c.name: c for c in mysql_facts.settings(ctx)}
    assert checks["mysql_isolation"].status is Status.FAIL and "REPEATABLE-READ" in checks["mysql_isolation"].detail
    assert checks["mysql_time_zone"].status is Status.FAIL and "+02:00" in checks["mysql_time_zone"].detail
    execute(app, "ALTER TABLE errands_stats ENGINE=MyISAM")
    engine = {c.name: c for c in mysql_facts.settings(ctx)}["mysql_engine"]
    assert engine.status is Status.FAIL and engine.items == ("errands_stats (MyISAM)",)


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_claim_mode_follows_a_claim_argument_given_to_the_store(app, db_url):

    store = open_store(db_url, claim="update")
    try:
        mode = mysql_facts.claim_mode(DoctorContext(app, store, expected_schema(store)))
    finally:
        store.close()
    assert mode.status is Status.WARN and mode.data["mode"] == "update"
    assert mode.data["forced"] == "update" and mode.data["forced_by"] == "argument"
    assert "because errands was given claim='update'" in mode.detail and "drop claim='update'" in (mode.fix or "")


_DJANGO_ON_PYMYSQL = """
import json, sys
import pymysql
pymysql.install_as_MySQLdb()
import MySQLdb.constants.CLIENT, MySQLdb.converters, MySQLdb.cursors  # what Django's MySQL backend imports

# The precondition of the bug: the attribute now names a copy whose classes the driver never raises.
raised_by_driver = sys.modules["pymysql.err"]
assert pymysql.err is not raised_by_driver and pymysql.err.MySQLError is not raised_by_driver.MySQLError

from errands import Errands
from errands.diagnostics import mysql as facts
from errands.diagnostics.context import DoctorContext
from errands.diagnostics.schema import expected_schema

app = Errands(sys.argv[1], lease=5)
try:
    ctx = DoctorContext(app, app.store, expected_schema(app.store))
    checks = [facts.claim_mode(ctx), *facts.settings(ctx)]
    # An unknown variable (error 1193) is caught and the next name asked, whatever the server's version.
    fallback = ctx.read(lambda cur: facts._session_variable(cur, ("errands_no_such_variable", "autocommit")))
finally:
    app.store.close()
print(json.dumps({"checks": {c.name: [c.status.value, c.detail] for c in checks}, "fallback": fallback}))
"""


@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_mysql_checks_catch_driver_errors_after_install_as_mysqldb(app, db_url):
    """Django on PyMySQL calls ``pymysql.install_as_MySQLdb()``; run in a child process so that
    the rebound ``pymysql.err`` does not leak into the other tests."""
    done = subprocess.run([sys.executable, "-c", _DJANGO_ON_PYMYSQL, db_url], env=cli_env(db_url),
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["fallback"][0] == "1"  # errands' connections are autocommit
    checks = result["checks"]
    assert set(checks) == {"claim_mode", "mysql_isolation", "mysql_time_zone", "mysql_engine", "galera"}
    assert all(status == "ok" for status, _ in checks.values()), checks
    assert "READ COMMITTED on errands' connections" in checks["mysql_isolation"][1]


# ---------------------------------------------------------------------- Galera
@pytest.mark.parametrize("backend", ["mariadb"], indirect=True)
def test_galera_check_on_a_server_that_is_no_galera_node(app):
    found = mysql_facts.galera(DoctorContext(app, app.store, expected_schema(app.store)))
    assert found.status is Status.OK and found.detail.startswith("not a Galera node")


SYNCED = {"wsrep_on": "ON", "wsrep_cluster_size": "3", "wsrep_cluster_status": "Primary", "wsrep_ready": "ON",
          "wsrep_local_state_comment": "Synced", "wsrep_sync_wait": "0"}


@pytest.mark.parametrize(("changed", "status", "said"), [
    ({}, Status.OK, "Primary component of 3 node(s), Synced"),
    ({"wsrep_on": "OFF"}, Status.OK, "not a Galera node (wsrep_on is OFF)"),
    ({"wsrep_cluster_status": "non-Primary", "wsrep_ready": "OFF", "wsrep_cluster_size": "1",
      "wsrep_local_state_comment": "Initialized"}, Status.FAIL, "cut off from the cluster's Primary Component"),
    ({"wsrep_ready": "OFF", "wsrep_local_state_comment": "Joining"}, Status.FAIL, "not ready and refuses statements"),
    ({"wsrep_local_state_comment": "Donor/Desynced"}, Status.WARN, "not Synced"),
    ({"wsrep_cluster_size": "2"}, Status.WARN, "two nodes lose their Primary Component"),
])
def test_galera_verdict_from_the_wsrep_status(changed, status, said):
    found = mysql_facts.galera_verdict({**SYNCED, **changed})
    assert found.status is status and said in found.detail, found.detail
    if status is not Status.OK:
        assert found.fix
    if found.detail.startswith("Galera node") and status is Status.OK:
        assert "wsrep_sync_wait (session: 0)" in found.detail and "docs/galera.md" in found.detail


def test_galera_verdict_without_wsrep_variables():
    """MySQL 8 has no wsrep variables at all."""
    assert mysql_facts.galera_verdict({}).detail == "not a Galera node (wsrep_on is absent)"


# ---------------------------------------------------------------------- PostgreSQL
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_dead_rows_after_deletes(app, db_url):
    app.store.jobs.enqueue([NewJob("x", "default", "{}") for _ in range(300)])
    execute(app, "DELETE FROM {jobs}")
    # Statistics reach the shared counters when a session goes idle, at most once a second:
    # ask for the next flush now instead of waiting.
    app.store.db.run(lambda cur: cur.execute("SELECT pg_stat_force_next_flush()"))
    ctx = DoctorContext(app, app.store, expected_schema(app.store))
    facts = postgres_facts
    table = wait_for(lambda: (c := facts.jobs_table(ctx)).data["dead_rows"] >= 300 and c, timeout=15,
                     message="300 dead rows in pg_stat_user_tables")
    assert re.search(r"about 0 live and \d+ dead rows \(100% dead\)", table.detail), table.detail
    code, report = doctor(db_url)
    assert check(report, "jobs_table")["data"]["dead_rows"] >= 300
    warned = facts.jobs_table(ctx, dead_warn_rows=100)
    assert warned.status is Status.WARN and "VACUUM (ANALYZE) errands_jobs" in (warned.fix or "")


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_replication_on_a_server_alone(app, db_url):
    """The shared server streams to no standby: a primary with nothing to fail over to, which is fine.
    (Standbys, synchronous or not, and a doctor pointed at one: tests/e2e/test_failover.py.)"""
    found = postgres_facts.replication(DoctorContext(app, app.store, expected_schema(app.store)))
    assert found.status is Status.OK, found
    assert found.data["role"] == "primary" and found.data["standbys"] == []
    assert "no standby" in found.detail and "synchronous_standby_names = ''" in found.detail
    code, report = doctor(db_url)
    assert check(report, "postgres_replication")["status"] == "ok"


# ---------------------------------------------------------------------- open transactions
@contextlib.contextmanager
def snapshot_held(app: Errands) -> Iterator[str]:
    """A session of another program (not named ``errands ...``) in a transaction that has read the jobs
    table, so it holds a snapshot; yields its pid (PostgreSQL) or thread id (MariaDB); commits on exit."""
    table = app.store.dialect.t_jobs
    if app.store.dialect.name == "postgresql":
        import psycopg

        from errands.store.dialects.postgres import driver_url

        with psycopg.connect(driver_url(app.database_url)) as pg:  # not autocommit: SELECT begins a transaction
            pg.execute(f"SELECT count(*) FROM {table}").fetchone()
            yield str(pg.info.backend_pid)
            pg.commit()
        return
    import pymysql

    my = pymysql.connect(**app.store.dialect._params)  # type: ignore[attr-defined]
    with my, my.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cur.execute(f"SELECT COUNT(*) FROM {table}")
        yield str(my.thread_id())
        my.commit()


def oldest_gauge(app: Errands) -> float | None:
    registry = CollectorRegistry()
    registry.register(ErrandsCollector(app))
    return registry.get_sample_value("errands_oldest_transaction_seconds")


@pytest.mark.parametrize("backend", ["postgres", "mariadb"], indirect=True)
def test_a_transaction_left_open_is_named_until_it_ends(app, db_url):
    """A session idle in its transaction pins the dead job rows: the doctor names it once it is older than
    the threshold (here a fifth of a second), /metrics shows its age, and both fall back when it commits."""
    ctx = DoctorContext(app, app.store, expected_schema(app.store))
    facts = dialect_facts(app.store.dialect.name)
    threshold = 0.2

    def found() -> Any:
        return open_transactions(ctx, facts, warn_seconds=threshold)

    assert found().status is Status.OK, found()
    with snapshot_held(app) as session:
        # (interval: InnoDB refreshes INNODB_TRX only when it was last read over 0.1 s before)
        warned = wait_for(lambda: (c := found()).status is Status.WARN and c, timeout=10, interval=0.25,
                          message=f"a warning about session {session}")
        who = "pid" if app.store.dialect.name == "postgresql" else "thread"
        assert f"{who} {session}: idle in transaction for " in warned.items[0], warned.items
        assert re.search(r"a transaction has been open for \d+\.\d s", warned.detail), warned.detail
        assert "claim rescans more dead index entries" in warned.detail
        assert session in (warned.fix or "") and ("pg_terminate_backend" in warned.fix or "KILL" in warned.fix)
        oldest = warned.data["transactions"][0]
        assert oldest["id"] == session and oldest["age_seconds"] >= threshold, warned.data
        assert (oldest_gauge(app) or 0.0) >= threshold
        code, report = doctor(db_url)  # the default threshold (5 minutes): named in the data, not warned
        assert check(report, "open_transactions")["status"] == "ok"
        assert check(report, "open_transactions")["data"]["transactions"][0]["id"] == session
    after = wait_for(lambda: (c := found()).status is Status.OK and c, timeout=10, interval=0.25,
                     message=f"session {session} to be forgotten once committed")
    assert session not in [r["id"] for r in after.data["transactions"]], after
    assert (oldest_gauge(app) or 0.0) < threshold


@pytest.mark.parametrize("backend", ["postgres", "mariadb"], indirect=True)
def test_open_transactions_refused_to_this_user_are_not_checked_and_leave_the_gauge_out(app, monkeypatch, caplog):
    """A user without PROCESS (MySQL) gets an error from INNODB_TRX: here any failing statement stands in."""
    monkeypatch.setattr(app.store.dialect, "open_transactions_sql", "SELECT x FROM errands_no_such_view LIMIT %s")
    found = open_transactions(DoctorContext(app, app.store, expected_schema(app.store)),
                              dialect_facts(app.store.dialect.name))
    assert found.status is Status.INFO and found.detail.startswith("not checked: this database user may not"), found
    registry = CollectorRegistry()
    registry.register(ErrandsCollector(app))
    with caplog.at_level("DEBUG", logger="errands.metrics"):
        assert registry.get_sample_value("errands_oldest_transaction_seconds") is None
    assert registry.get_sample_value("errands_database_up") == 1
    assert "cannot read the oldest open transaction" in caplog.text


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_has_no_open_transactions_to_report(app):
    found = open_transactions(DoctorContext(app, app.store, expected_schema(app.store)), sqlite_facts)
    assert found.status is Status.INFO and found.detail.startswith("SQLite")
    assert oldest_gauge(app) is None


# ---------------------------------------------------------------------- workers
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
def test_workers_live_stale_and_unserved(app, db_url):
    store = app.store
    store.workers.register("gone-host:1:dead", "gone-host", 1, ["default"], 1)
    long_ago = store.dialect.from_datetime(datetime.now(timezone.utc) - timedelta(hours=1))
    execute(app, "UPDATE {workers} SET heartbeat_at = {p}", long_ago)
    store.jobs.enqueue([NewJob("sample_jobs.record", "orphan", "{}")])

    code, report = doctor(db_url)
    workers = check(report, "workers")
    assert code == 1 and workers["status"] == "fail" and "no live worker, and 1 job is ready" in workers["detail"]
    assert workers["data"]["stale"] == ["gone-host:1:dead"]
    assert any(i.startswith("gone-host:1:dead: STALE") for i in workers["items"])

    proc = start_worker(db_url, "--no-scheduler")
    try:
        live = wait_for(lambda: [w for w in store.workers.list_workers() if w.id != "gone-host:1:dead"], timeout=30,
                        message="the worker's registry row")
        worker_id = live[0].id
        code, report = doctor(db_url)
        workers = check(report, "workers")
        assert code == 1 and "ready jobs in orphan, which no live worker takes" in workers["detail"]
        assert "worker -q orphan" in workers["fix"]

        execute(app, "DELETE FROM {jobs} WHERE queue = 'orphan'")
        code, report = doctor(db_url)
        workers = check(report, "workers")
        assert code == 0 and workers["status"] == "warn"  # the stale row is still there
        assert f"after {forget_worker_after(app.lease):.0f} s of silence" in workers["fix"]
        assert workers["data"]["alive"] == [worker_id]
        assert any(re.match(re.escape(worker_id) + r": alive, queues \S+, concurrency 1, last heartbeat", i)
                   for i in workers["items"]), workers["items"]
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))


# ---------------------------------------------------------------------- the DDL reader
@pytest.mark.parametrize("url", ["sqlite:///unused.db", "postgresql://h/db", "mysql://u@h/db"])
def test_expected_schema_is_read_from_every_dialects_ddl(url):
    store = open_store(url)
    expected = expected_schema(store)
    columns = {t: set(spec.columns) for t, spec in expected.tables.items()}
    assert {c.strip() for c in JOB_COLUMNS.split(",")} <= columns["errands_jobs"]
    assert {c.strip() for c in FAILED_COLUMNS.split(",")} <= columns["errands_failed_jobs"]
    assert {c.strip() for c in WORKER_COLUMNS.split(",")} <= columns["errands_workers"]
    assert "errands_schema" in expected.tables and "errands_stats" in expected.tables
    claim = expected.indexes["errands_jobs_claim"].spec
    if store.dialect.name == "mysql":
        assert claim.columns == ("queue", "reserved_by", "blocked_by", "priority", "fair_turn", "id",
                                 "available_at")
    else:
        assert claim.columns == ("queue", "priority", "fair_turn", "id")
        assert claim.predicate == "reserved_byisnullandblocked_byisnull"
    version_1 = expected_schema(store, 1)
    assert "blocked_by" not in version_1.tables["errands_jobs"].columns and "errands_stats" not in version_1.tables


def test_unknown_ddl_is_refused_rather_than_ignored():
    with pytest.raises(DDLNotUnderstood):
        _Replay(1).apply("CREATE VIEW errands_v AS SELECT 1")
    replay = _Replay(1)
    replay.apply("CREATE TABLE t (id INT)")
    with pytest.raises(DDLNotUnderstood):
        replay.apply("ALTER TABLE t RENAME COLUMN id TO key")


def test_python_api_needs_no_cli(app):
    report = diagnose(app)
    assert report.exit_code == 0 and report.get("schema_drift") is not None
    assert report.as_dict()["checks"][0]["name"] == "connectivity"
