"""A database that takes no statements now is "unavailable", never "tables missing" nor a hard failure.

A Galera node cut off from its cluster's Primary Component still accepts connections but refuses
statements with 1047 ("WSREP has not yet prepared node for application use") or 1180 ("... Not
connected to Primary Component"); a PostgreSQL standby answers a write with 25006 after a failover,
and a server in recovery with 57P03.  Each must read as the database being down for now (the worker
pauses and comes back to the same runs; the CLI exits 3, "try again"), and the schema check must
report it as such, not as errands' tables missing (exit 78, "run errands migrate").  The refusing
node is played by a connection whose statements raise the node's error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.errors as pg_errors
import pytest
from helpers import invoke_cli
from pymysql.err import OperationalError  # (never pymysql.err.X: see store/dialects/mysql.py)

from errands import Errands, SchemaError, StoreUnavailable
from errands.store.dialects.base import FAIL, MISSING, RETRY, UNAVAILABLE
from errands.store.dialects.mysql import MySQLDialect
from errands.store.dialects.postgres import PostgresDialect
from errands.store.dialects.sqlite import SQLiteDialect

NOT_READY = "WSREP has not yet prepared node for application use"

MYSQL = MySQLDialect("mysql://root@127.0.0.1/test")
POSTGRES = PostgresDialect("postgresql://postgres@127.0.0.1/test")
SQLITE = SQLiteDialect("sqlite:///:memory:")


@pytest.mark.parametrize(("code", "message", "kind"), [
    (1047, NOT_READY, UNAVAILABLE),
    (1047, "Unknown command", FAIL),  # a server that is no Galera node: a refusal like any other
    (1180, 'Got error 6 "No such device or address" during COMMIT', UNAVAILABLE),
    (1180, "Got error 1 during COMMIT: Not connected to Primary Component", UNAVAILABLE),
    (1180, 'Got error 139 "Too big row" during COMMIT', FAIL),  # the engine's refusal of this transaction
    (1290, "The MariaDB server is running with the --read-only option so it cannot execute this statement",
     UNAVAILABLE),
    (1290, "The MariaDB server is running with the --skip-grant-tables option so it cannot execute this statement",
     FAIL),
    (1836, "Running in read-only mode", UNAVAILABLE),
    (1213, "Deadlock found when trying to get lock; try restarting transaction", RETRY),
    (1146, "Table 'shop.errands_schema' doesn't exist", MISSING),
    (1792, "Cannot execute statement in a READ ONLY transaction", UNAVAILABLE),
    (1062, "Duplicate entry '1' for key 'PRIMARY'", FAIL),
])
def test_mysql_refusals_are_classified_by_cause(code: int, message: str, kind: str) -> None:
    exc = OperationalError(code, message)  # the class PyMySQL raises for codes it does not map
    assert MYSQL.classify(exc) == kind
    # On a read replica's store a read-only refusal is errands' own mistake, never an outage to wait out.
    read_only = code in (1290, 1836, 1792) and kind == UNAVAILABLE
    assert MYSQL.classify(exc, replica=True) == (FAIL if read_only else kind)


@pytest.mark.parametrize(("error", "kind"), [
    (pg_errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"), UNAVAILABLE),
    (pg_errors.CannotConnectNow("the database system is in recovery mode"), UNAVAILABLE),
    (pg_errors.AdminShutdown("terminating connection due to administrator command"), UNAVAILABLE),
    (pg_errors.CrashShutdown("terminating connection because of crash of another server process"), UNAVAILABLE),
    (pg_errors.DeadlockDetected("deadlock detected"), RETRY),
    (pg_errors.UniqueViolation("duplicate key value"), FAIL),
    (pg_errors.UndefinedTable('relation "errands_schema" does not exist'), MISSING),
    (pg_errors.InvalidSchemaName('schema "jobs" does not exist'), MISSING),
])
def test_postgres_refusals_are_classified_by_cause(error: psycopg.Error, kind: str) -> None:
    assert POSTGRES.classify(error) == kind
    read_only = isinstance(error, pg_errors.ReadOnlySqlTransaction)
    assert POSTGRES.classify(error, replica=True) == (FAIL if read_only else kind)


def test_only_no_such_table_means_missing_on_sqlite() -> None:
    assert SQLITE.classify(sqlite3.OperationalError("no such table: errands_schema")) == MISSING
    assert SQLITE.classify(sqlite3.OperationalError("disk I/O error")) == UNAVAILABLE
    assert SQLITE.classify(sqlite3.OperationalError("database is locked")) == RETRY


# ---------------------------------------------------------------------- a node that refuses statements
class _RefusingCursor:
    """A cursor of a Galera node out of its Primary Component: SET and SHOW pass, every other statement
    is refused with 1047, as the node does."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: Any = None) -> Any:
        if sql.lstrip().upper().startswith(("SET", "SHOW")):
            return self._cursor.execute(sql, params)
        raise OperationalError(1047, NOT_READY)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __enter__(self) -> _RefusingCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self._cursor.close()


class _RefusingConnection:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self, *args: Any) -> _RefusingCursor:
        return _RefusingCursor(self._conn.cursor(*args))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.fixture
def refusing_node(migrated_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated MariaDB database reached through connections that refuse statements as a cut-off
    Galera node does (in this process: the CLI runs here through click's runner)."""
    connect = MySQLDialect.connect
    monkeypatch.setattr(MySQLDialect, "connect", lambda self: _RefusingConnection(connect(self)))
    yield migrated_url


@pytest.mark.parametrize("backend", ["mariadb"])
def test_the_schema_check_of_a_refusing_node_says_unavailable(refusing_node: str) -> None:
    app = Errands(refusing_node)
    try:
        with pytest.raises(StoreUnavailable, match="WSREP has not yet prepared node") as info:
            app.store.check()
        assert not isinstance(info.value, SchemaError)
        with pytest.raises(StoreUnavailable):
            app.store.current_version()
    finally:
        app.store.close()


@pytest.mark.parametrize("backend", ["mariadb"])
def test_status_against_a_refusing_node_exits_3_not_78(refusing_node: str) -> None:
    done = invoke_cli(refusing_node, "status")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "WSREP has not yet prepared node" in done.stderr
    assert "migrate" not in done.stderr and "do not exist" not in done.stderr


@pytest.mark.parametrize("backend", ["mariadb"])
def test_doctor_against_a_refusing_node_names_the_galera_state(refusing_node: str) -> None:
    done = invoke_cli(refusing_node, "doctor")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Galera node that refuses statements" in done.stdout, done.stdout
    assert "do not exist" not in done.stdout and "errands migrate" not in done.stdout


class _StatusCursor:
    """A cursor answering SHOW REPLICA STATUS with the given rows, in the server's own column case."""

    def __init__(self, rows: list[dict[str, object]]) -> None:
        self.rows = rows
        self.description = [(name,) for name in (rows[0] if rows else {"Slave_IO_State": None})]

    def execute(self, sql: str, params: object = None) -> None:
        assert sql == "SHOW REPLICA STATUS"

    def fetchall(self) -> list[tuple[object, ...]]:
        return [tuple(row.values()) for row in self.rows]


@pytest.mark.parametrize(("rows", "replicating", "lag"), [
    ([], False, 0.0),  # replicates nothing: a primary
    ([{"Slave_IO_State": "Waiting for master", "Seconds_Behind_Master": 3}], True, 3.0),  # MariaDB's spelling
    ([{"Replica_IO_State": "Waiting for source", "Seconds_Behind_Source": 0}], True, 0.0),  # MySQL 8's
    ([{"Slave_IO_State": "", "Seconds_Behind_Master": None}], True, None),  # replication stopped: unknown
    ([{"Seconds_Behind_Master": 2}, {"Seconds_Behind_Master": 7}], True, 7.0),  # multi-source: the furthest
])
def test_a_mysql_replica_says_its_lag_by_the_servers_own_column_names(rows: list[dict[str, object]],
                                                                       replicating: bool, lag: float | None) -> None:
    state = MYSQL.replica_state(_StatusCursor(rows))  # type: ignore[arg-type]
    assert (state.replicating, state.lag) == (replicating, lag)
