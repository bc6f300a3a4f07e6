"""MySQL 8 and MariaDB through PyMySQL.

Two ways to claim, chosen by behaviour rather than by version string:

* ``skip_locked`` (MySQL 8, MariaDB 10.6+): ``SELECT ... FOR UPDATE SKIP LOCKED``
  then ``UPDATE`` of those ids, in one short READ COMMITTED transaction.
* ``update`` (MySQL 5.7, MariaDB < 10.6): a plain read of the next few ready ids,
  a conditional ``UPDATE ... WHERE id IN (those) AND reserved_by IS NULL ORDER BY
  ... LIMIT n`` stamped with this claim's database time, then a read of the rows
  carrying that stamp.  InnoDB re-checks the WHERE on rows another transaction
  just changed, so two workers cannot both win a row.

The first claim probes for SKIP LOCKED once (:meth:`MySQLDialect.supports_skip_locked`);
a server without it switches this store to ``update`` for good.  ``?claim=update`` (or
``skip_locked``) in the URL, or the ``claim=`` argument, forces one path, which is how
the tests cover both on the same server.  Deadlocks and lock wait timeouts are retried
by the base class.  Timestamps are ``DATETIME(6)`` in UTC, compared against
``UTC_TIMESTAMP(6)``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from operator import itemgetter
from typing import Any, TypeVar, cast
from urllib.parse import unquote

from ...core.columns import Kind, claimed_index
from ...core.config import mask_url
from ...core.errors import ConfigurationError, StoreUnavailable
from ...core.extras import MissingExtra
from ...core.rows import FAR_PAST, NewJob
from ..driver import Connection, Cursor, fetch_row, fetch_rows, scalar
from ..pool import POOL_OPTIONS
from . import mysql_lock, mysql_migrations
from .base import (
    BACKLOG_AGE_SAMPLE,
    CLAIM_COLUMNS,
    CLAIMABLE,
    FAIL,
    MISSING,
    RETRY,
    STARTABLE,
    UNAVAILABLE,
    Dialect,
    Listener,
    PollingListener,
    ReplicaState,
    Step,
    int_or_none,
)
from .inserts import FULL, INSERT_CHUNK, InsertShape, JobInserts, due_now, shape_of
from .urls import HostPort, host_list, number_option, query_options, refused, split_url

try:
    import pymysql

    # Imported from the module itself, never read through the ``pymysql.err`` attribute: in a process
    # where ``pymysql.install_as_MySQLdb()`` ran (Django on PyMySQL), importing ``MySQLdb.*`` loads
    # second copies of pymysql's submodules and rebinds that attribute to a copy whose classes the
    # driver never raises, so ``isinstance`` against it would miss every error.
    from pymysql.cursors import Cursor as PyMySQLCursor
    from pymysql.err import InterfaceError, MySQLError, OperationalError, ProgrammingError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtra("MySQL/MariaDB support (PyMySQL)", "mysql", exc) from exc

T = TypeVar("T")
_rng = random.Random()
"""errands' own generator for a spread claim's picks (the application's ``random`` state is never used)."""

NOW = "UTC_TIMESTAMP(6)"
_RETRY_CODES = {1205, 1213}  # lock wait timeout, deadlock
_GONE_CODES = {1040, 1053, 1077, 1152, 1158, 1159, 1160, 1161, 1927, 2002, 2003, 2006, 2013, 2055, 4031}
_NOT_READY = {
    # ER_UNKNOWN_COM_ERROR, as Galera uses it: "WSREP has not yet prepared node for application use" (a
    # node cut off from the Primary Component, joining, or told to with wsrep_reject_queries).  The plain
    # "Unknown command" of a server that is no Galera node stays a refusal.
    1047: ("wsrep",),
    # ER_ERROR_DURING_COMMIT: "Got error %d during COMMIT" is any engine's refusal to commit, but from the
    # wsrep layer it says that the node lost the cluster: "Not connected to Primary Component", "Provider
    # in bad state", or the errno wsrep maps that to (6, ENXIO: "No such device or address").
    1180: ("primary component", "provider in bad state", "no such device or address"),
    # ER_OPTION_PREVENTS_STATEMENT with --read-only (and MySQL's --super-read-only): a writer demoted to a
    # replica after a failover, still behind the address (a proxy, a DNS name) until it moves on.
    1290: ("read-only", "read_only"),
    # ER_READ_ONLY_MODE: InnoDB started read only.
    1836: ("read-only", "read only"),
}
"""Refusals that mean "this server does not take statements now", by code, each with the words of its
message that say so where the code alone is shared with real refusals (error codes and their texts are
MySQL's and MariaDB's; Galera's from its wsrep API)."""
_SYNTAX_ERROR = 1064
_UNKNOWN_VARIABLE = 1193
_NODE_NOT_READY = 1047  # ER_UNKNOWN_COM_ERROR, what a Galera node that is not ready answers
DEFAULT_PORT = 3306
MYSQL_OPTIONS = ("claim", "unix_socket", "connect_timeout", "wsrep_sync_wait", "read_url", *POOL_OPTIONS)
"""The query options of a MySQL URL (each read by errands; none goes to PyMySQL as it is)."""
WSREP_STATUS_SQL = "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_provider_name')"
"""Whether a wsrep (Galera) provider is loaded and the node ready; allowed on a node that is not."""
_NO_SUCH_TABLE = 1146  # ER_NO_SUCH_TABLE
_READ_ONLY_TRANSACTION = 1792  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: the session's own read-only
_READ_ONLY_CODES = (1290, 1836, _READ_ONLY_TRANSACTION)
"""Read-only refusals: 1290/1836 when the server is read-only (their words in :data:`_NOT_READY`), and 1792."""
COLUMN_TYPES = {Kind.ID: "BIGINT", Kind.BIGINT: "BIGINT", Kind.INT: "INT", Kind.FLOAT: "DOUBLE",
                Kind.TIME: "DATETIME(6)", Kind.QUEUE: "VARCHAR(60)", Kind.OWNER: "VARCHAR(120)",
                Kind.KEY: "VARCHAR(255)", Kind.TEXT: "TEXT", Kind.PAYLOAD: "MEDIUMTEXT"}


_ID, _ATTEMPTS, _OWNER = claimed_index("id"), claimed_index("attempts"), claimed_index("reserved_by")
assert _ATTEMPTS < _OWNER  # (the claim's rewrite of a picked row relies on this order)


def _rest_getter(shape: InsertShape) -> Callable[[NewJob], tuple[Any, ...]]:
    """A job's values for every field column of ``shape`` but the payload, and its due time: what
    tells two rows of a batch apart once their payloads are left out (one C call a job)."""
    fields = NewJob._fields
    return itemgetter(*(fields.index(c.name) for c in shape.fields if c.name != "payload"),
                      fields.index("run_at"), fields.index("delay"))
CLAIM_MODES = ("auto", "skip_locked", "update")


def _said(exc: BaseException) -> str:
    """A driver error as "code message", without the quoting of its args tuple (the doctor's patterns
    look for the server's own words in it)."""
    args = exc.args
    return f"({args[0]}) {args[1]}" if len(args) == 2 else str(exc)


def _not_ready(code: int | None, exc: BaseException) -> bool:
    """Whether a refusal says that the server takes no statements now (:data:`_NOT_READY`)."""
    words = _NOT_READY.get(code) if code is not None else None
    if not words:
        return False
    message = str(exc.args[1] if len(exc.args) > 1 else exc).lower()
    return any(w in message for w in words)


def spread_pick(rows: Sequence[T], count: int, rng: random.Random | None = None) -> list[T]:
    """``count`` of ``rows`` chosen at random, in their order (the claim order).  The module's
    generator is looked up at each call (not bound as a default), so a test can seed it."""
    chosen = set((rng or _rng).sample(range(len(rows)), count))
    return [r for i, r in enumerate(rows) if i in chosen]


class _NewRowsListener(PollingListener):
    """Polls the highest job id on its own connection: one indexed single-row read, no locks.

    MySQL has no LISTEN, so this is the cheapest signal that something was enqueued;
    jobs that merely become due (a delay ends) are found by the worker's regular poll.

    While jobs keep arriving it looks every 10 ms: a new job waits for the next look, so the
    interval is the pickup's spread (every 20 ms gave a p99 of 20 ms, the target's edge).  A look
    is one round trip; idle, after ``active_for`` without a new job, it slows to ``idle_interval``
    as before, so an idle worker's CPU does not change.
    """

    interval = 0.01

    def __init__(self, dialect: MySQLDialect) -> None:
        self.conn = dialect.connect()
        self.sql = dialect.q("SELECT MAX(id) FROM {jobs}")
        super().__init__()

    def _read(self) -> int:
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql)
                return int(scalar(cur) or 0)
        except MySQLError as exc:
            raise StoreUnavailable(f"lost the polling connection: {exc}") from exc

    def close(self) -> None:
        self.conn.close()


class MySQLInserts(JobInserts):
    """MySQL's bulk form of the one insert path: rows rendered once per distinct rest of a row,
    only payloads sent as parameters; ids by ``RETURNING`` where the server has it (MariaDB)."""

    d: MySQLDialect

    def insert_jobs(self, cur: Cursor, jobs: Sequence[NewJob], shape: InsertShape | None = None) -> list[int]:
        """Multi-row INSERTs with one parameter a row, its payload; the rest of a row is escaped once.

        PyMySQL escapes parameters in Python, one call per value: eight a row made escaping the
        largest cost of a bulk enqueue after the server's own work (22 µs a job on MariaDB, against
        5 µs for a bare four-column INSERT).  The rows of a batch mostly differ only in their
        payload, so the rest of a row (every other column of the shape, and the due time) is
        rendered by the driver's own ``mogrify`` once per distinct combination and written into
        the statement, and only the payloads go as parameters.  Another driver's cursor (a
        caller's own, e.g. Django's) and single rows take the portable path.
        """
        if len(jobs) == 1 or not isinstance(cur, PyMySQLCursor):
            return super().insert_jobs(cur, jobs, shape)
        shape = shape or shape_of(jobs)
        if shape is FULL:
            jobs = self.stored_times(cur, jobs)
        head = self.head(shape)
        rest_of = _rest_getter(shape)
        rows_of: dict[tuple[Any, ...], str] = {}
        """Per distinct rest of a row: the row's text, its payload a placeholder."""
        ids: list[int] = []
        for start in range(0, len(jobs), INSERT_CHUNK):
            chunk = jobs[start:start + INSERT_CHUNK]
            rows: list[str] = []
            for j in chunk:
                key = rest_of(j)
                row = rows_of.get(key)
                if row is None:
                    row = rows_of[key] = self._row_text(cur, shape, j)
                rows.append(row)
            ids += self.returning_ids(cur, head + ", ".join(rows), [j.payload for j in chunk], len(chunk))
        return ids

    def _row_text(self, cur: PyMySQLCursor, shape: InsertShape, j: NewJob) -> str:
        """One row of a shape rendered by the driver, its payload left a placeholder.  A job due now
        says so with the clock alone: the server parses every row's expressions, and the due time's
        is a third of a row's."""
        values, at = shape.values(j), shape.index("payload")
        now = due_now(j)
        computed = "".join(", " + self.fill_sql(c.fill, now=now) for c in shape.computed)
        before: str = cur.mogrify("(" + "%s, " * at, values[:at])
        after: str = cur.mogrify(self.d.q("".join(", {p}" for _ in values[at + 1:]) + computed + ")"),
                            values[at + 1:] + (() if now else self.due_params(j)))
        # (a % in a value must stay one when the payloads are formatted in)
        return before.replace("%", "%%") + "%s" + after.replace("%", "%%")

    def returning_ids(self, cur: Cursor, sql: str, params: list[Any] | None, count: int) -> list[int]:
        if self.d.returning is not False:
            try:
                ids = super().returning_ids(cur, sql, params, count)
                self.d.returning = True
                return ids
            except ProgrammingError as exc:
                if exc.args[0] != _SYNTAX_ERROR or self.d.returning:
                    raise
                self.d.returning = False  # MySQL: no INSERT ... RETURNING
        cur.execute(sql, params)
        # A multi-row INSERT gets consecutive ids; LAST_INSERT_ID() is the first of them.
        cur.execute("SELECT LAST_INSERT_ID() AS first, @@auto_increment_increment AS step")
        row = fetch_row(cur)
        assert row is not None  # a SELECT without FROM returns one row
        return [int(row["first"]) + i * int(row["step"]) for i in range(count)]


class MySQLDialect(Dialect):
    name = "mysql"
    column_types = COLUMN_TYPES
    inserts_class = MySQLInserts
    # MySQL and MariaDB refuse LIMIT in an IN subquery, and take it on a one-table DELETE.
    bounded_delete_sql = "DELETE FROM {table} WHERE {where} LIMIT {limit}"
    now_sql = NOW
    plus_seconds_sql = f"({NOW} + INTERVAL ROUND(%s * 1000000) MICROSECOND)"
    # MySQL takes no LIMIT in an IN subquery, and updates one table with its own LIMIT; the order is the
    # aging index's (a replica replays the same rows).
    age_waiting_template = "UPDATE {jobs} {step} WHERE {due} ORDER BY age_cap, id LIMIT {p}"
    minute_sql = "(UTC_TIMESTAMP() - INTERVAL SECOND(UTC_TIMESTAMP()) SECOND)"
    backlog_age_sql = (f"SELECT COALESCE(TIMESTAMPDIFF(SECOND, MIN(available_at), {NOW}), 0) "
                       f"FROM (SELECT available_at {CLAIMABLE} ORDER BY priority DESC, fair_turn, id "
                       f"LIMIT {BACKLOG_AGE_SAMPLE}) backlog")
    # MySQL tells no client name: every session on this database counts under one empty name.
    connections_sql = "SELECT '' AS name, count(*) AS n FROM information_schema.processlist WHERE db = DATABASE()"
    max_connections_sql = "SELECT @@max_connections"
    # InnoDB's open transactions of sessions on this database (purge cannot remove row versions older than
    # the oldest read view).  MySQL tells no client name, so errands' own sessions count too (theirs last
    # milliseconds); the reading session is left out.  A thread idle in its transaction shows as Sleep.
    # InnoDB refreshes this view at most every 0.1 s after its last read, and trx_started has whole seconds.
    open_transactions_sql = (
        "SELECT CAST(t.trx_mysql_thread_id AS CHAR) AS id, 'thread' AS kind, "
        "TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1000000 AS age_seconds, "
        "CASE p.COMMAND WHEN 'Sleep' THEN 'idle in transaction' ELSE p.COMMAND END AS state, "
        "p.USER AS application, p.HOST AS client, LEFT(p.INFO, 80) AS query "
        "FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE p.DB = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID() ORDER BY t.trx_started LIMIT %s")
    read_only_sql = "SET SESSION TRANSACTION READ ONLY"
    schema_table_ddl = "CREATE TABLE IF NOT EXISTS {schema} (version INTEGER PRIMARY KEY) ENGINE=InnoDB"
    script_delimiter = "//"
    # ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_PROCACCESS_DENIED_ERROR
    privilege_errors = (1044, 1142, 1227, 1370)
    count_waiting_per_queue = True
    search_window_share = 0.5
    heartbeat_sql = None  # neither MySQL nor MariaDB has UPDATE ... RETURNING
    fair_touch_sql = ("INSERT INTO {fair_keys} (queue, name, turn, used_at) VALUES (%s, %s, 0, {now}) "
                      "ON DUPLICATE KEY UPDATE used_at = VALUES(used_at)")

    def __init__(self, url: str, *, prefix: str = "errands_", claim: str | None = None) -> None:
        options = query_options(url, "MySQL", MYSQL_OPTIONS)
        super().__init__(url, prefix=prefix)
        from_url = options.pop("claim", None)
        options.pop("read_url", None)  # known: the read replica's URL, read by Dialect.__init__ (read_url)
        mode = claim or from_url or "auto"
        if mode not in CLAIM_MODES:
            raise ConfigurationError(f"claim mode must be one of {', '.join(CLAIM_MODES)}, got {mode!r}")
        #: The claim mode as configured, never changed afterwards (``claim_mode`` is the one in use,
        #: which ``auto`` settles at the first claim); ``errands doctor`` reads both.
        self.claim_setting = mode
        #: Where a forced mode came from: ``"argument"`` (``claim=``), ``"url"`` (``?claim=``) or None.
        self.claim_set_by: str | None = "argument" if claim else "url" if from_url else None
        self.claim_mode = mode
        if mode == "update":
            self._use_conditional_update()
        self.returning: bool | None = None
        self._params = self._connect_params(url, options)
        #: Every node of the URL's host list, in the order :meth:`connect` tries them.
        self.hosts = host_list(url, "MySQL", DEFAULT_PORT) or [HostPort("127.0.0.1", DEFAULT_PORT)]
        self._params["host"], self._params["port"] = self.hosts[0]
        #: ``SET SESSION wsrep_sync_wait`` at connect (``?wsrep_sync_wait=``, Galera), None: left as is.
        self.wsrep_sync_wait: int | None = None
        if options.get("wsrep_sync_wait", "") != "":
            self.wsrep_sync_wait = int(number_option(url, "MySQL", "wsrep_sync_wait", options["wsrep_sync_wait"],
                                                     lowest=0, highest=15, whole=True))

    @staticmethod
    def _connect_params(url: str, options: dict[str, str]) -> dict[str, Any]:
        """PyMySQL's arguments but the host and port (one per node: :meth:`connect`)."""
        parts = split_url(url, "MySQL")
        database = parts.path.lstrip("/")
        if not database:
            raise refused(url, "MySQL", "names no database; add /dbname")
        userinfo, _, _ = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        params: dict[str, Any] = {
            "user": unquote(user or "root"),
            "password": unquote(password),
            "database": unquote(database),
            "charset": "utf8mb4",
            "autocommit": True,
            "connect_timeout": 10,
        }
        if options.get("connect_timeout", "") != "":
            params["connect_timeout"] = number_option(url, "MySQL", "connect_timeout", options["connect_timeout"],
                                                      lowest=0.001, highest=31536000, wanted="seconds, more than 0")
        if options.get("unix_socket"):
            params["unix_socket"] = options["unix_socket"]
        return params

    # ------------------------------------------------------------------ connection
    def connect(self) -> Connection:
        """A connection to the first node of the host list that answers and is ready, tried in order
        from the first every time (so a reconnect after a lost connection leaves a dead node).

        A node is passed over when it refuses the connection, does not answer within
        ``?connect_timeout=`` (the handshake and session setup included), or answers as a Galera node
        not ready for statements: setup refused with error 1047 or 1180, or ``wsrep_ready`` OFF where
        a wsrep provider is loaded.  With one host its error is raised as the driver gave it; with
        several, one error lists each node's."""
        failures: list[tuple[HostPort, MySQLError]] = []
        for node in self.hosts:
            try:
                return self._connect_to(node)
            except MySQLError as exc:
                if len(self.hosts) == 1:
                    raise
                failures.append((node, exc))
        said = "; ".join(f"{node}: {_said(exc)}" for node, exc in failures)
        code = failures[-1][1].args[0] if failures[-1][1].args else None
        raise OperationalError(code, f"no node of {', '.join(map(str, self.hosts))} answered ready: {said}")

    def _connect_to(self, node: HostPort) -> Connection:
        timeout = self._params["connect_timeout"]
        # PyMySQL bounds only the TCP connect by connect_timeout: a node that accepts and then never
        # answers (stopped, or swamped) would hold the handshake for ever.  The read timeout bounds the
        # handshake and the session setup, and is lifted afterwards (statements may take long).
        conn: Connection = pymysql.connect(**{**self._params, "host": node.host, "port": node.port,
                                              "read_timeout": timeout})
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                self._set_session(cur, node)
                self._check_ready(cur, node)
                if self.read_only:
                    cur.execute(self.read_only_sql)
        except BaseException:
            conn.close()
            raise
        cast(Any, conn)._read_timeout = None  # PyMySQL applies it at the next read
        return conn

    def _set_session(self, cur: Cursor, node: HostPort) -> None:
        if self.wsrep_sync_wait is None:
            cur.execute("SET SESSION time_zone = '+00:00'")
            return
        try:
            cur.execute("SET SESSION time_zone = '+00:00', SESSION wsrep_sync_wait = %s", (self.wsrep_sync_wait,))
        except MySQLError as exc:
            if exc.args and exc.args[0] == _UNKNOWN_VARIABLE:
                raise ConfigurationError(
                    f"?wsrep_sync_wait= in {mask_url(self.url)} needs MariaDB Galera Cluster (or another wsrep "
                    f"server): the server at {node} has no wsrep_sync_wait variable; remove the option") from exc
            raise

    def _check_ready(self, cur: Cursor, node: HostPort) -> None:
        """Refuse a Galera node that is not ready for statements (cut off from the Primary Component,
        or still joining).  Such a node still takes SET, SHOW and SELECTs without tables, so the setup
        alone does not tell; one SHOW does, on MySQL and MariaDB alike (an empty answer: no wsrep)."""
        cur.execute(WSREP_STATUS_SQL)
        status = {str(r["variable_name"]).lower(): str(r["value"]) for r in fetch_rows(cur)}
        if status.get("wsrep_provider_name") and status.get("wsrep_ready", "").upper() != "ON":
            raise OperationalError(_NODE_NOT_READY, f"the Galera node at {node} is not ready (wsrep_ready "
                                   f"{status.get('wsrep_ready')}): not part of the cluster's Primary Component")

    def begin(self, conn: Connection) -> None:
        cast(Any, conn).begin()  # PyMySQL's own: a transaction without a statement

    def listener(self) -> Listener | None:
        try:
            return _NewRowsListener(self)
        except MySQLError as exc:
            raise StoreUnavailable(f"cannot poll {mask_url(self.url)}: {exc}") from exc

    def socket_of(self, conn: Connection) -> int | None:
        sock = getattr(conn, "_sock", None)  # PyMySQL has no public accessor; None once closed
        try:
            return -1 if sock is None else int(sock.fileno())
        except OSError:
            return -1

    def classify(self, exc: BaseException, *, replica: bool = False) -> str | None:
        if isinstance(exc, InterfaceError):
            return UNAVAILABLE
        if isinstance(exc, MySQLError):
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            if code in _RETRY_CODES:
                return RETRY
            if code == _NO_SUCH_TABLE:
                return MISSING
            if code in _READ_ONLY_CODES and (code == _READ_ONLY_TRANSACTION or _not_ready(code, exc)):
                return FAIL if replica else UNAVAILABLE
            if code in _GONE_CODES or (isinstance(exc, OperationalError) and code is None) or _not_ready(code, exc):
                return UNAVAILABLE
            return FAIL
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return UNAVAILABLE
        return None

    #: How migrations are serialised: ``auto`` (a lock row on a Galera node, where ``@@wsrep_on`` is ON,
    #: else GET_LOCK), ``row`` or ``named`` (GET_LOCK).  See :mod:`.mysql_lock`.
    migration_lock_kind = "auto"
    #: The lock row's lease, renewal, and how long a migrator waits for it.
    migration_lease = mysql_lock.LeaseTimes()

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        """Serialise migrations: DDL commits implicitly in MySQL, so a lock (not a transaction) does.
        On Galera a lock row, as GET_LOCK holds on one node only (:mod:`.mysql_lock`)."""
        if self._lock_row_wanted(conn):
            with self._migration_lock_row().held():
                yield
            return
        # Lock names are server-wide: the name carries the database, or every database on the server
        # (each test's, each tenant's) would wait for the others' migrations.  At most 64 characters.
        name = "LEFT(CONCAT(%s, '@', DATABASE()), 64)"
        with conn.cursor() as cur:
            cur.execute(f"SELECT GET_LOCK({name}, 60)", (self.t_schema,))
        try:
            yield
        finally:
            with conn.cursor() as cur:
                cur.execute(f"SELECT RELEASE_LOCK({name})", (self.t_schema,))

    def replica_state(self, cur: Cursor) -> ReplicaState:
        """``SHOW REPLICA STATUS`` (MySQL 8.0.22+, MariaDB 10.5.1+; else ``SHOW SLAVE STATUS``): no row is a
        server that replicates nothing; ``Seconds_Behind_Source`` (``_Master``) NULL is replication
        stopped, an unknown lag.  With several sources (multi-source replication), the furthest behind."""
        for statement in ("SHOW REPLICA STATUS", "SHOW SLAVE STATUS"):
            try:
                cur.execute(statement)
            except ProgrammingError as exc:  # 1064: a server that predates the first spelling
                if exc.args and exc.args[0] == _SYNTAX_ERROR and statement.startswith("SHOW REPLICA"):
                    continue
                raise
            rows = fetch_rows(cur)
            if not rows:
                return ReplicaState(False, 0.0)
            lags = [row.get("seconds_behind_source", row.get("seconds_behind_master")) for row in rows]
            known = [float(lag) for lag in lags if lag is not None]
            return ReplicaState(True, max(known) if len(known) == len(lags) else None)
        raise AssertionError("unreachable")  # pragma: no cover

    def _migration_lock_row(self) -> mysql_lock.LockRow:
        """The lock row of one migration (``{prefix}migration_lock``), on a connection of its own."""
        return mysql_lock.LockRow(self.connect, self.prefix + mysql_lock.TABLE, self.migration_lease, MySQLError)

    def _lock_row_wanted(self, conn: Connection) -> bool:
        if self.migration_lock_kind != "auto":
            return self.migration_lock_kind == "row"
        with conn.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")  # (MySQL has no such variable: no row)
            row = fetch_row(cur)
        return row is not None and str(row["value"]).upper() == "ON"

    # ------------------------------------------------------------------ time
    def added_column(self, table: str, ddl: str) -> str | Step:
        # Skipped when the column is there: MySQL 8 has no ADD COLUMN IF NOT EXISTS.
        return Step(self.q(f"ALTER TABLE {{{table}}} ADD COLUMN {ddl}"),
                    "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                    f"AND TABLE_NAME = '{self.q('{' + table + '}')}' AND COLUMN_NAME = '{ddl.split()[0]}'")

    def highest_id(self, cur: Cursor) -> int | None:
        # The next AUTO_INCREMENT value, minus one.  MySQL 8 caches it in information_schema for a
        # day unless the session says otherwise; MariaDB has no such cache (nor the variable).
        try:
            cur.execute("SET SESSION information_schema_stats_expiry = 0")
        except MySQLError:
            pass
        cur.execute("SELECT AUTO_INCREMENT - 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s", (self.t_jobs,))
        return int_or_none(scalar(cur))

    def to_datetime(self, value: Any) -> datetime:
        if type(value) is datetime:
            return value.replace(tzinfo=timezone.utc)
        return FAR_PAST  # a zero date ('0000-00-00', which PyMySQL returns as text) or NULL

    def from_datetime(self, value: datetime) -> Any:
        if value.tzinfo is None:
            raise ConfigurationError("run_at must be an aware datetime (e.g. datetime.now(timezone.utc))")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    # ------------------------------------------------------------------ schema
    #: The schema, version by version: mysql_migrations.py.
    MIGRATIONS = mysql_migrations.MIGRATIONS

    def after_schema_check(self, cur: Cursor) -> None:
        # Before MySQL 8 (and MariaDB 10.2.4) InnoDB resets AUTO_INCREMENT to MAX(id)+1 on restart,
        # which could hand out again an id that now lives in the dead letter.  Keep the counter above it.
        cur.execute(self.q("SELECT MAX(id) FROM {failed}"))
        highest = scalar(cur)
        if highest is None:
            return
        cur.execute("SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_NAME = %s", (self.t_jobs,))
        counter = scalar(cur)
        if counter is not None and int(counter) <= int(highest):
            cur.execute(self.q("ALTER TABLE {jobs} AUTO_INCREMENT = ") + str(int(highest) + 1))

    # ------------------------------------------------------------------ feature statements
    like_escape = " ESCAPE '\\\\'"  # MySQL reads backslashes in string literals as escapes

    def queues_in_use(self, cur: Cursor) -> set[str]:
        """Hop through the claim index (it holds every job: MySQL has no partial indexes) one queue
        at a time from the client: a literal bound is a range seek, while MariaDB runs the same
        step inside a recursive query, or a DISTINCT, as a scan of the whole index (92 and 27 ms
        at 300,000 jobs, against under 1 ms).  The dead letter's (queue, failed_at) index has no
        DESC part, and DISTINCT reads it with a loose index scan."""
        found: set[str] = set()
        step = self.q("SELECT queue FROM {jobs} WHERE queue > %s ORDER BY queue LIMIT 1")
        last = ""
        while True:
            cur.execute(step, (last,))
            row = fetch_row(cur)
            if row is None:
                break
            last = row["queue"]
            found.add(last)
        cur.execute(self.q("SELECT DISTINCT queue FROM {failed}"))
        return found | {r["queue"] for r in fetch_rows(cur)}

    def epoch_sql(self, column: str) -> str:
        # Times are stored as UTC DATETIMEs; TIMESTAMPDIFF ignores the session's time zone.
        return f"TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', {column})"

    def stats_upsert(self) -> str:
        return ("INSERT INTO {stats} (minute, queue, succeeded, failed) VALUES (" + self.minute_sql +
                ", %s, %s, %s) ON DUPLICATE KEY UPDATE succeeded = succeeded + VALUES(succeeded), "
                "failed = failed + VALUES(failed)")

    def insert_ignore(self, table: str, columns: str) -> str:
        marks = ", ".join("%s" for _ in columns.split(","))
        return f"INSERT IGNORE INTO {table} ({columns}) VALUES ({marks})"

    def upsert(self, table: str, key: str, columns: Sequence[str]) -> str:
        marks = ", ".join("%s" for _ in range(len(columns) + 1))
        updates = ", ".join(f"{c} = VALUES({c})" for c in columns)
        return f"INSERT INTO {table} ({key}, {', '.join(columns)}) VALUES ({marks}) ON DUPLICATE KEY UPDATE {updates}"

    # ------------------------------------------------------------------ claim
    claim_needs_transaction = True

    def claim(self, cur: Cursor, owner: str, queue: str, limit: int, lease: float, *, spread: int = 0) -> list[Any]:
        # ``spread`` (a retry of a claim that lost at commit): on a multi-primary Galera cluster each node
        # locks only its own rows, so workers on different nodes pick the same first rows and all but one
        # fail certification at commit (error 1213); picking at random among more rows parts them.
        if self.claim_mode == "auto":
            if self.supports_skip_locked(cur):
                self.claim_mode = "skip_locked"
            else:
                self._use_conditional_update()  # server without SKIP LOCKED; never ask again
        if self.claim_mode == "skip_locked":
            return self._claim_skip_locked(cur, owner, queue, limit, lease, spread)
        return self._claim_conditional_update(cur, owner, queue, limit, lease, spread)

    def ids_match(self, ids: Sequence[int]) -> tuple[str, list[Any]]:
        """``id IN (1,2,...)`` written out, no parameters: PyMySQL interpolates every parameter on the
        client, in Python (``escape`` per value, about 0.4 µs each: the claim's UPDATE and the settle's
        DELETE paid it for every job, issue 29), and a plain int literal is all it would write.
        ``int.__repr__`` accepts ints only (a TypeError for anything else), so nothing but digits and
        signs reach the text."""
        return "id IN (" + ",".join(map(int.__repr__, ids)) + ")", []

    def supports_skip_locked(self, cur: Cursor) -> bool:
        """Whether the server accepts ``FOR UPDATE SKIP LOCKED`` (MySQL 8, MariaDB 10.6+), found by
        behaviour rather than from a version string: a locking read that matches no row, so it
        locks nothing, which a server without it rejects as a syntax error (that leaves an open
        transaction as it was).  ``errands doctor`` asks the same question this way."""
        try:
            cur.execute(self.q("SELECT id FROM {jobs} WHERE 1 = 0 FOR UPDATE SKIP LOCKED"))
            cur.fetchall()
        except ProgrammingError as exc:
            if exc.args and exc.args[0] == _SYNTAX_ERROR:
                return False
            raise
        return True

    def _use_conditional_update(self) -> None:
        self.claim_mode = "update"
        self.lock_rows_skip = self.lock_rows  # recovery locks rows plainly on such servers

    def _claim_skip_locked(self, cur: Cursor, owner: str, queue: str, limit: int, lease: float,
                           spread: int = 0) -> list[Any]:
        if self._paused(cur, queue):
            return []
        pick, params = self.pick(queue, int(limit) + spread, CLAIM_COLUMNS, paused_check=False)
        cur.execute(pick + " FOR UPDATE SKIP LOCKED", params)
        rows = cur.fetchall()
        if not rows:
            return []
        if len(rows) > limit:  # a spread retry: ``limit`` of them at random, in claim order (the rest unlock at commit)
            rows = spread_pick(rows, limit)
        # Times are computed by the server in the UPDATE: nothing per row to convert in Python.
        # The UPDATE reads the clock again, a moment after the pick: a job whose expiry or deadline falls
        # in between is left alone (STARTABLE again), so no reserved_at is ever past either.
        match, _ = self.ids_match([r[_ID] for r in rows])
        cur.execute(self.q("UPDATE {jobs} SET reserved_by = %s, reserved_at = {now}, reserved_until = {now_plus}, "
                           "attempts = attempts + 1 WHERE ") + match + self.q(STARTABLE), [owner, float(lease)])
        if cur.rowcount != len(rows):  # rare: read back which of the picked rows this claim took
            cur.execute(self.q("SELECT id FROM {jobs} WHERE reserved_by = %s AND ") + match, [owner])
            taken = {r["id"] for r in fetch_rows(cur)}
            rows = [r for r in rows if r[_ID] in taken]
        # The rows as they are now: one more attempt, reserved by this owner.
        a, o = _ATTEMPTS, _OWNER
        return [(*r[:a], r[a] + 1, *r[a + 1:o], owner, *r[o + 1:]) for r in rows]

    #: Seconds a claiming process trusts its last read of the paused queues.
    paused_ttl = 1.0

    def _paused(self, cur: Cursor, queue: str) -> bool:
        """Whether ``queue`` is paused.  Read apart from the locking pick (so that no lock is taken
        on the queues table) and at most once a second: a round trip per claim cost MySQL
        workers a tenth of their throughput.  Workers therefore stop within a second of a pause."""
        now = time.monotonic()
        if now >= self._paused_until:
            cur.execute(self.q("SELECT name FROM {queues} WHERE paused = 1"))
            self._paused_names = frozenset(r["name"] for r in fetch_rows(cur))
            self._paused_until = now + self.paused_ttl
        return queue in self._paused_names

    _paused_names: frozenset[str] = frozenset()
    _paused_until = 0.0

    def after_pause(self) -> None:
        self._paused_until = 0.0  # read the paused queues again at the next claim

    #: Ready rows past ``limit`` that one fallback claim considers.
    claim_window = 32

    def _claim_conditional_update(self, cur: Cursor, owner: str, queue: str, limit: int,
                                  lease: float, spread: int = 0) -> list[Any]:
        # The UPDATE cannot walk the claim index in order (it changes reserved_by, a column of that
        # index), so on its own it sorts, and keeps locked until commit, every ready row of the queue
        # on every claim: claims serialise and each costs O(ready jobs).  A plain read of the next
        # ready ids through the index bounds that to limit + claim_window rows.  The UPDATE is still
        # conditional on reserved_by IS NULL, which InnoDB re-checks under the row lock, so two claims
        # cannot take the same row; when others took every candidate meanwhile, pick again.
        if self._paused(cur, queue):
            return []
        for _ in range(8):
            cur.execute(*self.pick(queue, int(limit) + self.claim_window + spread, paused_check=False))
            candidates = [r["id"] for r in fetch_rows(cur)]
            if not candidates:
                return []
            if spread and len(candidates) > limit:  # a spread retry: its own random share of the window
                candidates = spread_pick(candidates, max(int(limit), len(candidates) // 2))
            cur.execute("SELECT " + NOW)
            now = scalar(cur)
            until = now + timedelta(seconds=lease)
            cur.execute(self.q("UPDATE {jobs} SET reserved_by = %s, reserved_at = %s, reserved_until = %s, "
                               "attempts = attempts + 1 WHERE id IN (" + self.marks(candidates) + ") "
                               "AND reserved_by IS NULL AND available_at <= %s AND (expires_at IS NULL OR "
                               "expires_at > %s) AND (deadline_at IS NULL OR deadline_at > %s) "
                               "ORDER BY priority DESC, fair_turn, id LIMIT %s"),
                        (owner, now, until, *candidates, now, now, now, int(limit)))
            if cur.rowcount:
                break
        else:
            return []
        # This owner claims from one thread, so (owner, claim time) names exactly this batch.
        cur.execute(self.q("SELECT " + CLAIM_COLUMNS + " FROM {jobs} WHERE reserved_by = %s AND reserved_at = %s "
                           "AND queue = %s ORDER BY priority DESC, fair_turn, id"), (owner, now, queue))
        return list(cur.fetchall())
