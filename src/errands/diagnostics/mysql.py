"""MySQL and MariaDB facts for ``errands doctor``: version, claim mode and why, session settings,
storage engine, catalog and free space.

The claim mode is found the way the store finds it, with the store's own probe
(:meth:`MySQLDialect.supports_skip_locked`), and compared with the mode the store was
configured with (``claim_setting``).  A version string is only shown, never parsed.
errands sets READ COMMITTED and UTC on each of its connections; the doctor reads them back
on the store's own connection, because something in between (a proxy, ``init_connect``)
can undo them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

# From the module itself, as store/dialects/mysql.py does: after ``pymysql.install_as_MySQLdb()`` (Django on
# PyMySQL) the ``pymysql.err`` attribute can be a second copy whose classes the driver never raises.
from pymysql.err import MySQLError

from ..core.errors import StoreError, StoreUnavailable
from ..store.dialects import mysql_lock
from .model import Check, Status
from .schema import IndexSpec, LiveColumn, LiveSchema
from .unreachable import Cause

if TYPE_CHECKING:
    from ..store.dialects.mysql import MySQLDialect
    from .context import DoctorContext

_UNKNOWN_VARIABLE = 1193
FREE_WARN_BYTES = 64 * 1024 * 1024
FREE_WARN_FRACTION = 0.5

ANALYZE = "ANALYZE TABLE {jobs}"
"""Refreshes the planner's statistics of the jobs table (a store template)."""

UNREACHABLE = (
    Cause(r"Unknown database '([^']+)'", "the server at {address} has no database {found!r}",
          "create it (CREATE DATABASE `{found}` CHARACTER SET utf8mb4;), then run `{migrate}`; or fix the "
          "database name in the URL", configuration=True),
    Cause(r"Access denied for user '([^']+)'@'([^']+)'", "the server refused user {found!r} from this host",
          "fix the user or password in the URL (percent-encode @ : / and % in it), or create the account as "
          "root: CREATE USER '{found}'@'%' IDENTIFIED BY '...'; GRANT ALL ON `{database}`.* TO '{found}'@'%';",
          configuration=True),
    Cause(r"WSREP has not yet prepared node|Primary Component",
          "the server at {host}:{port} is a Galera node that refuses statements: it is not in the cluster's "
          "Primary Component (cut off from the other nodes, still joining, or told to reject queries)",
          "wait for it to rejoin, or point errands at a node of the Primary Component (or a proxy that "
          "routes to one); `SHOW STATUS LIKE 'wsrep_%'` on the node tells its state (docs/galera.md)"),
    Cause(r"read-only|read_only", "the server at {host}:{port} takes no writes (read_only): a replica, or a "
          "writer demoted by a failover that the address still points at",
          "point errands at the server that takes writes (or the proxy in front of it)"),
    Cause(r"Unknown MySQL server host|Name or service not known|getaddrinfo failed",
          "the host name {host!r} does not resolve",
          "fix the host in the URL (an IP address, or a name this host's DNS knows)"),
    Cause(r"Connection refused", "nothing accepts connections at {address}",
          "start MySQL/MariaDB there, or fix the port in the URL (they listen on 3306 unless configured "
          "otherwise; `mysqladmin -h HOST -P PORT ping` tells when one of {address} answers)"),
    Cause(r"timed out", "no answer from {address} before the connect timeout",
          "check that the host is up and that no firewall drops connections to its port ({address})"),
)
"""Connection failures, most specific first (see diagnostics/unreachable.py)."""
DEFAULT_PORT = 3306
ENQUEUE_ENTRY_SQL = ("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() "
                     "AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = %s")
"""Whether the SQL enqueue procedure is there, as this user sees it (param: its name)."""
HELD_BACK_SQL = ("SELECT CONCAT('InnoDB history list: ', `COUNT`, ' undo logs not yet purged (server-wide)') "
                 "AS detail, 0 AS stuck FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'")
"""How far InnoDB's purge is behind: it grows while a transaction (on any database of the server) stays open."""
END_TRANSACTION = {
    "thread": "end it: KILL {id} (or COMMIT/ROLLBACK in that session); set idle_transaction_timeout (MariaDB) or "
              "a shorter wait_timeout (MySQL) so that an idle session cannot hold one open again; "
              "information_schema.INNODB_TRX lists the others",
}
"""How to end what the open_transactions check found, by its kind (``{id}``: the oldest one's thread id)."""


def before_connect(ctx: DoctorContext) -> Check | None:
    return None


def _dialect(ctx: DoctorContext) -> MySQLDialect:
    return ctx.store.dialect  # type: ignore[return-value]


def _one(cur: Any, sql: str, params: Any = None) -> Any:
    cur.execute(sql, params)
    return cur.fetchone()


def server(ctx: DoctorContext) -> Check:
    version, comment = ctx.read(lambda cur: _one(cur, "SELECT @@version, @@version_comment"))
    kind = "MariaDB" if "mariadb" in f"{version} {comment}".lower() else "MySQL"
    return Check("server", Status.INFO, f"{kind} {version} ({comment})",
                 data={"version": version, "comment": comment, "kind": kind})


def live_schema(ctx: DoctorContext) -> LiveSchema:
    prefix = ctx.store.prefix

    def read(cur: Any) -> LiveSchema:
        live = LiveSchema()
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_TYPE = 'BASE TABLE' AND LEFT(TABLE_NAME, %s) = %s", (len(prefix), prefix))
        # The migration lock's table (a Galera cluster's, created on demand like the schema table) is errands' own.
        lock_table = (prefix + mysql_lock.TABLE).lower()
        live.tables = {r[0].lower(): {} for r in cur.fetchall() if r[0].lower() != lock_table}
        cur.execute("SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT "
                    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                    "AND LEFT(TABLE_NAME, %s) = %s ORDER BY TABLE_NAME, ORDINAL_POSITION", (len(prefix), prefix))
        for table, column, kind, nullable, default in cur.fetchall():
            if table.lower() == lock_table:
                continue
            live.tables.setdefault(table.lower(), {})[column.lower()] = LiveColumn(kind, nullable == "YES", default)
        # COLLATION: 'A' ascending, 'D' descending (NULL: not sorted).
        cur.execute("SELECT INDEX_NAME, TABLE_NAME, NON_UNIQUE, COLUMN_NAME, COLLATION "
                    "FROM information_schema.STATISTICS "
                    "WHERE TABLE_SCHEMA = DATABASE() AND LEFT(TABLE_NAME, %s) = %s AND INDEX_NAME <> 'PRIMARY' "
                    "ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX", (len(prefix), prefix))
        parts: dict[str, tuple[str, bool, list[str], list[bool]]] = {}
        for name, table, non_unique, column, collation in cur.fetchall():
            part = parts.setdefault(name.lower(), (table.lower(), not int(non_unique), [], []))
            part[2].append(str(column).lower())
            part[3].append(collation == "D")
        live.indexes = {name: IndexSpec(table, tuple(columns), None, unique, tuple(descending))
                        for name, (table, unique, columns, descending) in parts.items()}
        return live

    return ctx.read(read)


def claim_mode(ctx: DoctorContext) -> Check:
    dialect = _dialect(ctx)
    works = ctx.read(dialect.supports_skip_locked)
    forced = None if dialect.claim_setting == "auto" else dialect.claim_setting
    data = {"mode": "skip_locked" if works and forced != "update" else "update", "forced": forced,
            "forced_by": dialect.claim_set_by if forced else None, "server_accepts_skip_locked": works}
    if dialect.claim_set_by == "url":
        said, remove = f"the database URL says ?claim={forced}", f"remove claim={forced} from the database URL"
    else:
        said, remove = f"errands was given claim={forced!r}", f"drop claim={forced!r} where errands opens its store"
    lacks = "this server rejects SKIP LOCKED (MySQL before 8.0 and MariaDB before 10.6 lack it)"
    if forced == "update" and works:
        return Check("claim_mode", Status.WARN, f"conditional-UPDATE fallback, because {said}, although this server "
                     "supports SKIP LOCKED",
                     fix=f"{remove}: with SKIP LOCKED, concurrent claims skip each other's rows instead of picking "
                         "again when another worker won their candidates", data=data)
    if forced == "update":
        return Check("claim_mode", Status.INFO, f"conditional-UPDATE fallback, because {said}; {lacks} anyway",
                     data=data)
    if not works and forced == "skip_locked":
        return Check("claim_mode", Status.FAIL, f"{said}, but {lacks}: every claim fails with a syntax error",
                     fix=f"{remove} (errands then falls back by itself) or upgrade the server", data=data)
    if not works:
        return Check("claim_mode", Status.INFO, f"conditional-UPDATE fallback, because {lacks}; errands switches "
                     "at the first claim (upgrading the server gives claims that skip each other's rows)", data=data)
    how = f"because {said}" if forced == "skip_locked" else "the server accepts it (probed)"
    return Check("claim_mode", Status.OK, f"SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE, in one transaction: "
                 f"{how}", data=data)


def _session_variable(cur: Any, names: tuple[str, str]) -> tuple[str, str]:
    """(session, global) value of the first variable name the server knows (MariaDB before
    11.1 calls ``transaction_isolation`` ``tx_isolation``)."""
    for name in names:
        try:
            row = _one(cur, f"SELECT @@SESSION.{name}, @@GLOBAL.{name}")
            return str(row[0]), str(row[1])
        except MySQLError as exc:
            if not exc.args or exc.args[0] != _UNKNOWN_VARIABLE or name == names[-1]:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


GALERA_STATUS = ("wsrep_cluster_size", "wsrep_cluster_status", "wsrep_ready", "wsrep_local_state_comment")
"""The status variables of a Galera node the doctor reads (SHOW GLOBAL STATUS: a node that refuses
statements still answers SHOW)."""
GALERA_DOC = "docs/galera.md"


def galera(ctx: DoctorContext) -> Check:
    """Whether this server is a Galera node and, if so, whether it takes statements now: its
    wsrep status and the session's ``wsrep_sync_wait``, judged by :func:`galera_verdict`."""

    def read(cur: Any) -> dict[str, str]:
        cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
        values = {str(name).lower(): str(value) for name, value in cur.fetchall()}
        if values.get("wsrep_on", "OFF").upper() != "ON":
            return values
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ", ".join("%s" for _ in GALERA_STATUS) + ")",
                    GALERA_STATUS)
        values.update({str(name).lower(): str(value) for name, value in cur.fetchall()})
        cur.execute("SHOW SESSION VARIABLES LIKE 'wsrep_sync_wait'")
        values.update({str(name).lower(): str(value) for name, value in cur.fetchall()})
        return values

    try:
        values = ctx.read(read)
    except StoreError as exc:  # (StoreUnavailable, a lost server, ends the diagnosis as in every check)
        if isinstance(exc, StoreUnavailable):
            raise
        return Check("galera", Status.WARN, f"could not read the wsrep status: {' '.join(str(exc).split())}",
                     fix="grant the user the right to SHOW STATUS, or check the node by hand: "
                         "SHOW STATUS LIKE 'wsrep_%'")
    return galera_verdict(values)


def galera_verdict(values: Mapping[str, str]) -> Check:
    """The Galera check from the node's wsrep variables and status (names lowercased): a pure function,
    so each state is tested without a cluster.  A node outside the Primary Component, or not ready,
    refuses every statement (errands reads that as the database being unavailable and waits)."""
    data: dict[str, Any] = dict(values)
    if values.get("wsrep_on", "OFF").upper() != "ON":
        return Check("galera", Status.OK, "not a Galera node (wsrep_on is "
                     f"{values.get('wsrep_on', 'absent')})", data=data)
    size, component = values.get("wsrep_cluster_size", "?"), values.get("wsrep_cluster_status", "?")
    ready, state = values.get("wsrep_ready", "?"), values.get("wsrep_local_state_comment", "?")
    sync_wait = values.get("wsrep_sync_wait", "?")
    where = f"Galera node, {component} component of {size} node(s), {state}, wsrep_ready {ready}"
    if component.lower() != "primary":
        return Check("galera", Status.FAIL, f"{where}: this node is cut off from the cluster's Primary Component "
                     "and refuses statements (errands waits as for a database that is down)",
                     fix="point errands at a node of the Primary Component, or a proxy that routes to one; on this "
                         "node SHOW STATUS LIKE 'wsrep_%' tells when it rejoins (" + GALERA_DOC + ")", data=data)
    if ready.upper() != "ON":
        return Check("galera", Status.FAIL, f"{where}: this node is not ready and refuses statements",
                     fix=f"wait for it to finish joining (wsrep_local_state_comment Synced), or point errands at "
                         f"another node ({GALERA_DOC})", data=data)
    if state.lower() != "synced":
        return Check("galera", Status.WARN, f"{where}: this node is not Synced (a donor, or still catching up), so "
                     "statements may stall or read behind the cluster",
                     fix=f"point errands at a Synced node while this one catches up ({GALERA_DOC})", data=data)
    patterns = (f"supported: one writer node (or a proxy that sends every write to one node), or every node with "
                f"claims that back off on certification conflicts; reads on another node than the write see it "
                f"only with wsrep_sync_wait (session: {sync_wait}); {GALERA_DOC}")
    if size.isdigit() and int(size) == 2:
        return Check("galera", Status.WARN, f"{where}: two nodes lose their Primary Component when either one "
                     "fails, and both then refuse statements; " + patterns,
                     fix="add a third node, or the Galera arbitrator (garbd)", data=data)
    return Check("galera", Status.OK, f"{where}; {patterns}", data=data)


def settings(ctx: DoctorContext) -> list[Check]:
    prefix = ctx.store.prefix

    def read(cur: Any) -> tuple[tuple[str, str], str, list[tuple[str, str]]]:
        isolation = _session_variable(cur, ("transaction_isolation", "tx_isolation"))
        zone = str(_one(cur, "SELECT @@SESSION.time_zone")[0])
        cur.execute("SELECT TABLE_NAME, ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                    "AND TABLE_TYPE = 'BASE TABLE' AND LEFT(TABLE_NAME, %s) = %s", (len(prefix), prefix))
        return isolation, zone, [(str(t), str(e)) for t, e in cur.fetchall()]

    (session, default), zone, engines = ctx.read(read)
    checks = []
    data = {"session": session, "server_default": default}
    if session.upper().replace(" ", "-") != "READ-COMMITTED":
        checks.append(Check("mysql_isolation", Status.FAIL, f"errands' connection runs at {session}, not READ "
                            "COMMITTED, although errands sets it on connect: claims and recovery then take gap locks "
                            "and deadlock more", fix="let errands' SET SESSION TRANSACTION ISOLATION LEVEL READ "
                            "COMMITTED through (a proxy may drop session settings; check init_connect), or set "
                            "transaction_isolation = READ-COMMITTED on the server", data=data))
    else:
        checks.append(Check("mysql_isolation", Status.OK, f"READ COMMITTED on errands' connections (server default "
                            f"{default})", data=data))
    if zone not in ("+00:00", "UTC"):
        checks.append(Check("mysql_time_zone", Status.FAIL, f"errands' connection has time_zone {zone}, not "
                            "+00:00, although errands sets it on connect: stored times would be read in another zone",
                            fix="let errands' SET SESSION time_zone = '+00:00' through (a proxy may drop session "
                                "settings; check init_connect)", data={"time_zone": zone}))
    else:
        checks.append(Check("mysql_time_zone", Status.OK, "UTC on errands' connections", data={"time_zone": zone}))
    other = sorted(f"{t} ({e})" for t, e in engines if e.lower() != "innodb")
    if other:
        checks.append(Check("mysql_engine", Status.FAIL, "tables not on InnoDB: row locks, SKIP LOCKED and "
                            "transactions need it", items=tuple(other),
                            fix="convert each one: ALTER TABLE <name> ENGINE=InnoDB", data={"not_innodb": other}))
    elif engines:
        checks.append(Check("mysql_engine", Status.OK, f"all {len(engines)} errands tables on InnoDB",
                            data={"not_innodb": []}))
    checks.append(galera(ctx))
    return checks


def jobs_table(ctx: DoctorContext, *, free_warn_bytes: int = FREE_WARN_BYTES,
               free_warn_fraction: float = FREE_WARN_FRACTION) -> Check:
    table = ctx.store.dialect.t_jobs

    def read(cur: Any) -> tuple[Any, ...]:
        row = _one(cur, "SELECT TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH, DATA_FREE FROM information_schema.TABLES "
                        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", (table,))
        per_table = _one(cur, "SELECT @@innodb_file_per_table")[0]
        return (*row, per_table)

    rows, data_bytes, index_bytes, free, per_table = ctx.read(read)
    used = int(data_bytes or 0) + int(index_bytes or 0)
    free = int(free or 0)
    fraction = free / (used + free) if used + free else 0.0
    data = {"rows_estimate": int(rows or 0), "data_bytes": int(data_bytes or 0), "index_bytes": int(index_bytes or 0),
            "free_bytes": free, "free_fraction": round(fraction, 3), "file_per_table": bool(int(per_table or 0))}
    where = "in its own file" if data["file_per_table"] else "in the shared tablespace (free space is the tablespace's)"
    detail = (f"{table}: about {data['rows_estimate']} rows, {used / 1_048_576:.1f} MB with indexes, "
              f"{free / 1_048_576:.1f} MB free ({fraction:.0%}) {where}; InnoDB's figures are estimates")
    if data["file_per_table"] and free >= free_warn_bytes and fraction >= free_warn_fraction:
        return Check("jobs_table", Status.WARN, detail + ": left behind by a backlog that has drained",
                     fix=f"OPTIMIZE TABLE {table} at a quiet time (InnoDB rebuilds the table; it needs that much "
                         "free disk)", data=data)
    return Check("jobs_table", Status.OK, detail, data=data)
