"""PostgreSQL facts for ``errands doctor``: server version, catalog, autovacuum and dead rows.

A queue table is the worst case for MVCC: every job is inserted, updated at least once and
deleted, so each leaves dead row versions behind in the table and in the claim index until
VACUUM removes them.  errands' DDL gives the jobs table aggressive autovacuum settings; the
doctor checks that they are in place, that autovacuum runs, and how many dead rows wait.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

import psycopg

from ..core.config import mask_url
from ..store.dialects.postgres import PostgresDialect, driver_url
from ..store.driver import fetch_row, fetch_rows, scalar
from ..worker.settings import SLEEP
from .commands import command
from .model import Check, Status, age_text
from .schema import IndexSpec, LiveColumn, LiveSchema, normalise_predicate
from .transactions import OPEN_TRANSACTION_WARN_SECONDS
from .unreachable import Cause

if TYPE_CHECKING:
    from .context import DoctorContext

MIN_VERSION_NUM = 120000
"""The claim statement uses ``WITH ... AS MATERIALIZED`` (PostgreSQL 12)."""
DEAD_WARN_ROWS = 10_000
DEAD_WARN_FRACTION = 0.2

ANALYZE = "ANALYZE {jobs}"
"""Refreshes the planner's statistics of the jobs table (a store template)."""

UNREACHABLE = (
    Cause(r'database "([^"]+)" does not exist', "the server at {host}:{port} has no database {found!r}",
          "create it (`createdb -h {host} -p {port} -U <a role allowed to> {found}`, or CREATE DATABASE \"{found}\" "
          "as a superuser), then run `{migrate}`; or fix the database name in the URL", configuration=True),
    Cause(r'role "([^"]+)" does not exist', "the server at {host}:{port} has no role {found!r}",
          "create it as a superuser (CREATE ROLE \"{found}\" LOGIN PASSWORD '...'; GRANT CREATE, CONNECT ON "
          "DATABASE \"{database}\" TO \"{found}\"), or fix the user name in the URL", configuration=True),
    Cause(r'password authentication failed for user "([^"]+)"', "the server refused the password of {found!r}",
          "fix the password in the URL (percent-encode @ : / and % in it), or set it with ALTER ROLE \"{found}\" "
          "PASSWORD '...'"),
    Cause(r'no pg_hba\.conf entry for host "([^"]+)"', "the server's pg_hba.conf admits no connection from "
          "{found} as {user!r} to {database!r}", "add a line for this host to pg_hba.conf (e.g. host {database} "
          "{user} {found}/32 scram-sha-256) and reload PostgreSQL (SELECT pg_reload_conf())"),
    Cause(r"failed to resolve host|could not translate host name", "the host name {host!r} does not resolve",
          "fix the host in the URL (an IP address, or a name this host's DNS knows)"),
    Cause(r"read-only transaction|in recovery|starting up|shutting down",
          "the server at {host}:{port} takes no writes now: a standby (after a failover the URL may still name "
          "the old primary), or a server starting, recovering or shutting down",
          "wait for it, or list every server in the URL with target_session_attrs=read-write "
          "(postgresql://primary,standby/db?target_session_attrs=read-write) so that errands finds the one "
          "that takes writes"),
    Cause(r"Connection refused", "nothing accepts connections at {host}:{port}",
          "start PostgreSQL there, or fix the port in the URL (PostgreSQL listens on 5432 unless configured "
          "otherwise; `pg_isready -h {host} -p {port}` tells when it answers)"),
    Cause(r"timeout expired|timed out", "no answer from {host}:{port} before the connect timeout",
          "check that the host is up and that no firewall drops connections to port {port}"),
)
"""Connection failures, most specific first (see diagnostics/unreachable.py)."""
DEFAULT_PORT = 5432
ENQUEUE_ENTRY_SQL = ("SELECT COUNT(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                     "WHERE n.nspname = current_schema() AND p.proname = %s")
"""Whether the SQL enqueue function is in errands' schema (param: its name)."""
HELD_BACK_SQL = ("SELECT 'replication slot ' || slot_name || CASE WHEN active THEN '' ELSE ' (inactive)' END || "
                 "' holds the cleanup ' || age(xmin) || ' transactions back' AS detail, NOT active AS stuck "
                 "FROM pg_replication_slots "
                 "WHERE xmin IS NOT NULL AND (database IS NULL OR database = current_database())")
"""Replication slots whose ``xmin`` (a standby's hot_standby_feedback) holds VACUUM back, as an open
transaction does; an inactive one holds it until someone drops the slot.  (A logical slot's
``catalog_xmin`` holds the system catalogs only, not the jobs table.)"""
_TIMEOUT = ("; set idle_in_transaction_session_timeout (e.g. ALTER DATABASE ... SET "
            "idle_in_transaction_session_timeout = '5min') so that an idle session cannot hold one open again")
END_TRANSACTION = {
    "session": "end it: SELECT pg_terminate_backend({id}) (or COMMIT/ROLLBACK in that session)" + _TIMEOUT,
    "prepared": "finish it: COMMIT PREPARED '{id}' or ROLLBACK PREPARED '{id}' (pg_prepared_xacts lists them)",
    "slot": "drop a slot nobody uses: SELECT pg_drop_replication_slot('<name>'), or bring its standby back",
}
"""How to end what the open_transactions check found, by its kind (``{id}``: the oldest one's pid or gid)."""


def before_connect(ctx: DoctorContext) -> Check | None:
    return None


def server(ctx: DoctorContext) -> Check:
    version, num = ctx.read(lambda cur: cur.execute(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int").fetchone())
    data = {"version": version, "version_num": num}
    if num < MIN_VERSION_NUM:
        return Check("server", Status.FAIL, f"PostgreSQL {version}: errands' claim statement needs 12 or newer "
                     "(WITH ... AS MATERIALIZED)", fix="upgrade the PostgreSQL server to 12 or newer", data=data)
    return Check("server", Status.INFO, f"PostgreSQL {version}", data=data)


def live_schema(ctx: DoctorContext) -> LiveSchema:
    prefix = ctx.store.prefix

    def read(cur: Any) -> LiveSchema:
        live = LiveSchema()
        cur.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND left(c.relname, %s) = %s",
                    (len(prefix), prefix))
        live.tables = {r[0].lower(): {} for r in cur.fetchall()}
        cur.execute("SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, "
                    "column_default FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND left(table_name, %s) = %s "
                    "ORDER BY table_name, ordinal_position", (len(prefix), prefix))
        for table, column, kind, length, nullable, default in cur.fetchall():
            live.tables.setdefault(table.lower(), {})[column.lower()] = LiveColumn(
                kind if length is None else f"{kind}({length})", nullable == "YES", default)
        # Indexes behind a PRIMARY KEY or UNIQUE constraint are named by PostgreSQL, not by the DDL.
        # indoption's lowest bit marks a descending column.
        cur.execute(
            "SELECT i.relname, t.relname, x.indisunique, x.indisvalid, pg_get_expr(x.indpred, x.indrelid), "
            " ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) "
            "       JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum ORDER BY k.ord), "
            " ARRAY(SELECT (o.opt & 1) = 1 FROM unnest(x.indoption::int2[]) WITH ORDINALITY AS o(opt, ord) "
            "       ORDER BY o.ord) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = current_schema() AND left(t.relname, %s) = %s "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)", (len(prefix), prefix))
        for name, table, unique, valid, predicate, columns, descending in cur.fetchall():
            live.indexes[name.lower()] = IndexSpec(table.lower(), tuple(c.lower() for c in columns),
                                                   normalise_predicate(predicate), bool(unique), tuple(descending))
            if not valid:
                live.invalid.add(name.lower())
        return live

    return ctx.read(read)


def claim_mode(ctx: DoctorContext) -> Check:
    return Check("claim_mode", Status.OK, "SKIP LOCKED: one statement picks ready rows FOR UPDATE SKIP LOCKED and "
                 "reserves them, so workers never wait on each other's rows", data={"mode": "skip_locked"})


def _options(text: str) -> dict[str, str]:
    """``WITH (a = 0.01, b = 1000)`` -> {'a': '0.01', 'b': '1000'}."""
    m = re.search(r"WITH \((.*)\)", text, re.I | re.S)
    if not m:
        return {}
    pairs = (part.split("=", 1) for part in m.group(1).split(","))
    return {k.strip().lower(): v.strip() for k, v in pairs}


def settings(ctx: DoctorContext) -> list[Check]:
    """Autovacuum on the jobs table, the server's role and replication, then the pooler in force and
    how idle workers are woken."""
    return [*_autovacuum(ctx), replication(ctx), *pooler_checks(ctx)]


def _autovacuum(ctx: DoctorContext) -> list[Check]:
    table = ctx.store.dialect.t_jobs
    expected = ctx.expected.tables.get(table)
    wanted = _options(expected.options) if expected else {}

    def read(cur: Any) -> tuple[str, list[str] | None]:
        on = cur.execute("SELECT current_setting('autovacuum')").fetchone()[0]
        cur.execute("SELECT c.reloptions FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relname = %s", (table,))
        row = cur.fetchone()
        return on, (row[0] if row else None)

    on, reloptions = ctx.read(read)
    have = dict(o.split("=", 1) for o in reloptions or [])
    exists = ctx.live is not None and table in ctx.live.tables
    differs = {k: v for k, v in wanted.items() if have.get(k) != v} if exists else {}
    data = {"autovacuum": on, "table_options": have, "expected_options": wanted}
    if on != "on":
        return [Check("postgres_autovacuum", Status.WARN, "autovacuum is off on this server: dead rows of finished "
                      "jobs pile up in the jobs table and its claim index, and claims slow down",
                      fix="set autovacuum = on in postgresql.conf (or schedule VACUUM errands_jobs every few minutes)",
                      data=data)]
    if differs:
        setting = ", ".join(f"{k} = {v}" for k, v in wanted.items())
        return [Check("postgres_autovacuum", Status.WARN, f"{table} lacks errands' autovacuum or page settings "
                      f"({', '.join(sorted(differs))}): it is vacuumed only after 20 % of it is dead",
                      fix=f"ALTER TABLE {table} SET ({setting})", data=data)]
    return [Check("postgres_autovacuum", Status.OK, f"autovacuum on, with errands' settings on {table}", data=data)]


# ---------------------------------------------------------------------- role and replication
ROLE_SQL = ("SELECT pg_is_in_recovery() AS standby, current_setting('synchronous_commit') AS synchronous_commit, "
            "current_setting('synchronous_standby_names') AS synchronous_standby_names, "
            "EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) AS replay_age")
"""Whether this server is a standby, and the two settings that decide what a commit waits for.  On a
standby ``replay_age`` is how long ago the last replayed transaction committed on the primary (NULL
before the first one): its lag while the primary is busy, the primary's idle time otherwise."""
STANDBYS_SQL = ("SELECT application_name, client_addr::text AS client_addr, state, sync_state, "
                "pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn) AS lag_bytes, "
                "EXTRACT(EPOCH FROM replay_lag) AS lag_seconds FROM pg_stat_replication ORDER BY application_name")
"""The standbys streaming from this primary.  Without superuser, pg_monitor or pg_read_all_stats a
user sees their names only (state, sync_state and positions are NULL)."""
_UNWAITED = ("off", "local")
"""``synchronous_commit`` values with which a commit never waits for a standby."""
_WHAT_ASYNC_LOSES = ("a failover loses what the standby had not received when the primary died: enqueues "
                     "already acknowledged to the caller disappear (their ids are handed out again), and jobs "
                     "whose completion was lost run again after their lease")


def _standby_line(row: dict[str, Any]) -> str:
    where = f" ({row['client_addr']})" if row["client_addr"] else ""
    if row["sync_state"] is None:
        return f"{row['application_name'] or '(unnamed)'}{where}: state hidden from this user"
    lag = "" if row["lag_bytes"] is None else f", {int(row['lag_bytes'])} bytes behind"
    seconds = "" if row["lag_seconds"] is None else f" ({float(row['lag_seconds']):.3f} s)"
    return f"{row['application_name'] or '(unnamed)'}{where}: {row['sync_state']}, {row['state']}{lag}{seconds}"


def replication(ctx: DoctorContext) -> Check:
    """The server's role (primary or standby) and, on a primary, its standbys and what a commit waits for:
    the difference between losing nothing on a failover and losing the last acknowledged writes."""

    def read(cur: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        cur.execute(ROLE_SQL)
        role = fetch_row(cur)
        assert role is not None
        if role["standby"]:
            return role, []
        cur.execute(STANDBYS_SQL)
        return role, fetch_rows(cur)

    role, standbys = ctx.read(read)
    data: dict[str, Any] = {
        "role": "standby" if role["standby"] else "primary", "synchronous_commit": role["synchronous_commit"],
        "synchronous_standby_names": role["synchronous_standby_names"],
        "standbys": [{k: (float(v) if k.startswith("lag_") and v is not None else v) for k, v in r.items()}
                     for r in standbys]}
    if role["standby"]:
        age = role["replay_age"]
        data["replay_age_seconds"] = None if age is None else float(age)
        since = "" if age is None else f"; its last replayed transaction committed {_ago(float(age))} on the primary"
        return Check("postgres_replication", Status.WARN, "this server is a standby (in recovery, read-only): "
                     "workers cannot claim or settle, and enqueues fail" + since,
                     fix="point the database URL at the primary, or list every server with "
                         "?target_session_attrs=read-write (postgresql://u:p@host1,host2/db?"
                         "target_session_attrs=read-write) so that connections find the primary after a "
                         "failover", data=data)
    return _primary_verdict(role, standbys, data)


def _primary_verdict(role: dict[str, Any], standbys: list[dict[str, Any]], data: dict[str, Any]) -> Check:
    names, commit = role["synchronous_standby_names"].strip(), role["synchronous_commit"]
    items = tuple(_standby_line(r) for r in standbys)
    states = {r["sync_state"] for r in standbys}
    settings = f"synchronous_commit = {commit}, synchronous_standby_names = '{names}'"
    synchronous = states & {"sync", "quorum"}
    if names and not synchronous and None not in states and commit not in _UNWAITED:
        return Check("postgres_replication", Status.FAIL, f"primary whose commits wait for a synchronous standby "
                     f"({settings}), but none of them is connected: every enqueue and settle hangs",
                     fix="start or reconnect the standby, or empty synchronous_standby_names (ALTER SYSTEM SET "
                         "synchronous_standby_names = ''; SELECT pg_reload_conf())", items=items, data=data)
    if not standbys:
        return Check("postgres_replication", Status.OK, "primary, no standby: a failover has nothing to "
                     f"fail over to ({settings})", data=data)
    count = f"{len(standbys)} standby" + ("s" if len(standbys) > 1 else "")
    if None in states:
        if not names:
            return _async_warning(f"primary with {count}, all asynchronous (synchronous_standby_names is "
                                  "empty)", items, data)
        return Check("postgres_replication", Status.INFO, f"primary with {count} ({settings}); their "
                     "replication state and lag are hidden from this user",
                     fix="GRANT pg_monitor TO this user to see which standby is synchronous and how far behind",
                     items=items, data=data)
    if not synchronous:
        return _async_warning(f"primary with {count}, none synchronous ({settings})", items, data)
    if commit in _UNWAITED:
        return _async_warning(f"primary with a synchronous standby, but synchronous_commit = {commit}: commits "
                              "do not wait for it", items, data)
    waited = sum(1 for r in standbys if r["sync_state"] in ("sync", "quorum"))
    return Check("postgres_replication", Status.OK, f"primary with {count}, {waited} synchronous ({settings}): a "
                 "commit returns once a synchronous standby has it, so a failover to that standby loses no "
                 "acknowledged write", items=items, data=data)


def _async_warning(detail: str, items: tuple[str, ...], data: dict[str, Any]) -> Check:
    return Check("postgres_replication", Status.WARN, f"{detail}: {_WHAT_ASYNC_LOSES}",
                 fix="list a standby in synchronous_standby_names (e.g. 'ANY 1 (standby1, standby2)') and keep "
                     "synchronous_commit = on (or remote_apply), if losing those writes on a failover matters",
                 items=items, data=data)


# ---------------------------------------------------------------------- connection poolers
def _probe(dialect: PostgresDialect) -> dict[str, Any]:
    """What two of errands' own connections tell about a pooler between errands and the server.

    A pooler answers the startup with a process id of its own, so the id psycopg was given and
    ``pg_backend_pid()`` differ.  Transaction pooling shows when server backends move between
    client connections: client A reads its backend, client B opens a transaction (so holds a
    backend) and reads its backend, then A reads again.  With a direct connection or session
    pooling, A keeps its backend and B has another; with transaction pooling either B got A's
    backend (given back after A's statement) or A got a new one while B held the old.
    """
    first, second = dialect.connect(), dialect.connect()
    try:
        before = scalar(first.execute("SELECT pg_backend_pid()"))
        second.execute("BEGIN")
        other = scalar(second.execute("SELECT pg_backend_pid()"))
        after = scalar(first.execute("SELECT pg_backend_pid()"))
        second.execute("COMMIT")
        behind = first.info.backend_pid != before or second.info.backend_pid != other
        return {"pooler_seen": behind, "transaction_pooling_seen": other == before or after != before}
    finally:
        first.close()
        second.close()


def _pooler_verdict(said: str | None, where: str, seen: dict[str, Any]) -> tuple[Status, str, str | None]:
    """Compare the configured mode with what the probe saw: (status, sentence, fix)."""
    transaction, pooled = seen["transaction_pooling_seen"], seen["pooler_seen"] or seen["transaction_pooling_seen"]
    tell = "add ?pooler=transaction to the database URL (or set ERRANDS_POOLER=transaction)"
    if transaction and said != "transaction":
        return (Status.FAIL, "connections go through a transaction pooler (a server backend moved between "
                f"errands' connections), but errands was told pooler={said or 'none'} ({where}): psycopg's "
                "prepared statements collide on shared backends ('prepared statement \"_pg3_0\" already "
                "exists') and LISTEN through the pooler never wakes a worker", tell)
    if said == "transaction":
        how = "transaction pooling seen" if transaction else \
            "a pooler seen" if pooled else "no pooler seen (a direct connection works this way too)"
        return (Status.OK, f"pooler=transaction ({where}), {how}: no prepared statements, no session state, "
                "transaction-scoped locks only, no LISTEN through the pooler", None)
    if said == "session":
        how = "a pooler seen, keeping one backend per connection" if pooled else "no pooler seen"
        return (Status.OK, f"pooler=session ({where}), {how}: errands works as on a direct connection "
                "(the pool must hold a server connection for every client connection)", None)
    if pooled:
        return (Status.WARN, "a pooler sits between errands and PostgreSQL (its process id is not the "
                "server's), keeping one backend per connection as session pooling does; errands was not told",
                "add ?pooler=session to the database URL, or ?pooler=transaction if its pool_mode is transaction")
    return Status.OK, "direct connection to PostgreSQL (no pooler seen)", None


def _wakeup(dialect: PostgresDialect) -> Check:
    """How an idle worker learns of a new job: LISTEN (where) or polling, and the latency to expect."""
    if not dialect.listens:
        return Check("postgres_wakeup", Status.INFO, "workers poll: no LISTEN through a transaction pooler and no "
                     f"listen_url; an idle worker asks for jobs every --sleep seconds (default {SLEEP:g} s), so "
                     f"expect a pickup latency of up to --sleep (about {SLEEP:g} s) when idle, none while busy",
                     fix="for millisecond pickups give workers a direct URL to LISTEN on: ?listen_url=<percent-"
                         "encoded postgresql://... URL> or ERRANDS_LISTEN_URL",
                     data={"listen": False, "poll_interval": SLEEP})
    target = dialect.listen_url or dialect.url
    data = {"listen": True, "listen_url": mask_url(target), "listen_url_from": dialect.listen_url_from}
    if dialect.listen_url:
        try:
            conn = psycopg.connect(driver_url(dialect.listen_url), autocommit=True, connect_timeout=10)
        except Exception as exc:  # a doctor reports a bad listen_url rather than failing
            return Check("postgres_wakeup", Status.FAIL, f"cannot connect to listen_url ({data['listen_url_from']}): "
                         f"{' '.join(str(exc).split())}", fix="fix listen_url: workers would fail to LISTEN",
                         data=data)
        with conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            direct = row is not None and conn.info.backend_pid == row[0]
        if not direct:
            return Check("postgres_wakeup", Status.WARN, f"listen_url {data['listen_url']} goes through a pooler "
                         "too: LISTEN works only if that pooler is in session mode", fix="point listen_url at "
                         "PostgreSQL itself (or at a session-mode pool)", data=data)
    return Check("postgres_wakeup", Status.OK, f"LISTEN/NOTIFY on {data['listen_url']}: an idle worker picks "
                 f"up a new job within milliseconds (--sleep, default {SLEEP:g} s, is only a safety poll)", data=data)


def pooler_checks(ctx: DoctorContext) -> list[Check]:
    """Which pooler mode is in force (configured and seen), and how idle workers are woken."""
    dialect = cast(PostgresDialect, ctx.store.dialect)
    try:
        seen = _probe(dialect)
    except Exception as exc:  # the probe opens its own connections; a failure there is reported, not raised
        return [Check("postgres_pooler", Status.WARN, f"could not probe for a pooler: {' '.join(str(exc).split())}",
                      fix=f"run `{command('doctor')}` again; the other checks stand")]
    status, detail, fix = _pooler_verdict(dialect.pooler, dialect.pooler_from, seen)
    data = {"configured": dialect.pooler, "configured_from": dialect.pooler_from, **seen}
    return [Check("postgres_pooler", status, detail, fix=fix, data=data), _wakeup(dialect)]


def jobs_table(ctx: DoctorContext, *, dead_warn_rows: int = DEAD_WARN_ROWS,
               dead_warn_fraction: float = DEAD_WARN_FRACTION) -> Check:
    table = ctx.store.dialect.t_jobs

    def read(cur: Any) -> tuple[Any, ...]:
        cur.execute(
            "SELECT pg_total_relation_size(c.oid), s.n_live_tup, s.n_dead_tup, "
            " EXTRACT(EPOCH FROM now() - greatest(s.last_autovacuum, s.last_vacuum)), "
            " (SELECT EXTRACT(EPOCH FROM max(now() - a.xact_start)) FROM pg_stat_activity a "
            "   WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE n.nspname = current_schema() AND c.relname = %s", (table,))
        return tuple(cur.fetchone())

    size, live, dead, vacuumed, oldest = ctx.read(read)
    live, dead = int(live or 0), int(dead or 0)
    fraction = dead / (live + dead) if live + dead else 0.0
    data = {"total_bytes": int(size), "live_rows": live, "dead_rows": dead, "dead_fraction": round(fraction, 3),
            "seconds_since_vacuum": None if vacuumed is None else float(vacuumed),
            "oldest_transaction_seconds": None if oldest is None else float(oldest)}
    when = "never vacuumed" if vacuumed is None else f"last vacuumed {_ago(float(vacuumed))}"
    detail = (f"{table}: {int(size) / 1_048_576:.1f} MB with indexes, about {live} live and {dead} dead rows "
              f"({fraction:.0%} dead), {when}")
    if dead >= dead_warn_rows and fraction >= dead_warn_fraction:
        held = ""
        if oldest is not None and float(oldest) >= OPEN_TRANSACTION_WARN_SECONDS:
            held = (f"; a transaction has been open for {age_text(float(oldest))}: VACUUM cannot remove rows "
                    "that died after it began, so end it (pg_stat_activity shows it)")
        return Check("jobs_table", Status.WARN, detail + ": claims walk past the dead rows in the claim index",
                     fix=f"run VACUUM (ANALYZE) {table} now{held}; if dead rows keep coming back, check "
                         "that autovacuum keeps up (see postgres_autovacuum)", data=data)
    return Check("jobs_table", Status.OK, detail, data=data)


def _ago(seconds: float) -> str:
    return age_text(seconds) + " ago"
