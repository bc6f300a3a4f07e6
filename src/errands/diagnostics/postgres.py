"""PostgreSQL facts for ``errands doctor``: server version, catalog, autovacuum and dead rows.

A queue table is the worst case for MVCC: every job is inserted, updated at least once and
deleted, so each leaves dead row versions behind in the table and in the claim index until
VACUUM removes them.  errands' DDL gives the jobs table aggressive autovacuum settings; the
doctor checks that they are in place, that autovacuum runs, and how many dead rows wait.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .model import Check, Status
from .schema import IndexSpec, LiveSchema, normalise_predicate

if TYPE_CHECKING:
    from .context import Context

MIN_VERSION_NUM = 120000
"""The claim statement uses ``WITH ... AS MATERIALIZED`` (PostgreSQL 12)."""
DEAD_WARN_ROWS = 10_000
DEAD_WARN_FRACTION = 0.2
OLD_TRANSACTION_SECONDS = 600.0

ANALYZE = "ANALYZE {jobs}"
"""Refreshes the planner's statistics of the jobs table (a store template)."""

def before_connect(ctx: Context) -> Check | None:
    return None


def server(ctx: Context) -> Check:
    version, num = ctx.read(lambda cur: cur.execute(
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int").fetchone())
    data = {"version": version, "version_num": num}
    if num < MIN_VERSION_NUM:
        return Check("server", Status.FAIL, f"PostgreSQL {version}: errands' claim statement needs 12 or newer "
                     "(WITH ... AS MATERIALIZED)", fix="upgrade the PostgreSQL server to 12 or newer", data=data)
    return Check("server", Status.INFO, f"PostgreSQL {version}", data=data)


def live_schema(ctx: Context) -> LiveSchema:
    prefix = ctx.store.prefix

    def read(cur: Any) -> LiveSchema:
        live = LiveSchema()
        cur.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND left(c.relname, %s) = %s",
                    (len(prefix), prefix))
        live.tables = {r[0].lower(): set() for r in cur.fetchall()}
        cur.execute("SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND left(table_name, %s) = %s", (len(prefix), prefix))
        for table, column in cur.fetchall():
            live.tables.setdefault(table.lower(), set()).add(column.lower())
        # Indexes behind a PRIMARY KEY or UNIQUE constraint are named by PostgreSQL, not by the DDL.
        cur.execute(
            "SELECT i.relname, t.relname, x.indisunique, x.indisvalid, pg_get_expr(x.indpred, x.indrelid), "
            " ARRAY(SELECT a.attname::text FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) "
            "       JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum ORDER BY k.ord) "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = current_schema() AND left(t.relname, %s) = %s "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)", (len(prefix), prefix))
        for name, table, unique, valid, predicate, columns in cur.fetchall():
            live.indexes[name.lower()] = IndexSpec(table.lower(), tuple(c.lower() for c in columns),
                                                   normalise_predicate(predicate), bool(unique))
            if not valid:
                live.invalid.add(name.lower())
        return live

    return ctx.read(read)


def claim_mode(ctx: Context) -> Check:
    return Check("claim_mode", Status.OK, "SKIP LOCKED: one statement picks ready rows FOR UPDATE SKIP LOCKED and "
                 "reserves them, so workers never wait on each other's rows", data={"mode": "skip_locked"})


def _options(text: str) -> dict[str, str]:
    """``WITH (a = 0.01, b = 1000)`` -> {'a': '0.01', 'b': '1000'}."""
    m = re.search(r"WITH \((.*)\)", text, re.I | re.S)
    if not m:
        return {}
    pairs = (part.split("=", 1) for part in m.group(1).split(","))
    return {k.strip().lower(): v.strip() for k, v in pairs}


def settings(ctx: Context) -> list[Check]:
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
        return [Check("postgres_autovacuum", Status.WARN, f"{table} lacks errands' autovacuum settings "
                      f"({', '.join(sorted(differs))}): it is vacuumed only after 20 % of it is dead",
                      fix=f"ALTER TABLE {table} SET ({setting})", data=data)]
    return [Check("postgres_autovacuum", Status.OK, f"autovacuum on, with errands' settings on {table}", data=data)]


def jobs_table(ctx: Context, *, dead_warn_rows: int = DEAD_WARN_ROWS,
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
        if oldest is not None and float(oldest) >= OLD_TRANSACTION_SECONDS:
            held = (f"; a transaction has been open for {_span(float(oldest))}: VACUUM cannot remove rows "
                    "that died after it began, so end it (pg_stat_activity shows it)")
        return Check("jobs_table", Status.WARN, detail + ": claims walk past the dead rows in the claim index",
                     fix=f"run VACUUM (ANALYZE) {table} now{held}; if dead rows keep coming back, check "
                         "that autovacuum keeps up (see postgres_autovacuum)", data=data)
    return Check("jobs_table", Status.OK, detail, data=data)


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ago(seconds: float) -> str:
    return _span(seconds) + " ago"
