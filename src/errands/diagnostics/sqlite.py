"""SQLite facts for ``errands doctor``: the file, its journal mode, busy_timeout, pages and free pages.

SQLite runs inside each errands process, so "server version" is this Python's library and
the database clock is this host's clock.  What goes wrong in practice is the file: a path
that points somewhere new (SQLite would silently create an empty database there), a file
that is not in WAL mode (readers and the writer then block each other), a busy_timeout so
short that writers fail instead of waiting, and free pages left behind by a large backlog.
"""

from __future__ import annotations

import os
import re
import sqlite3
from typing import TYPE_CHECKING, Any

from ..store.dialects.sqlite import BUSY_TIMEOUT_MS, SYNCHRONOUS_ENV, SQLiteDialect
from .commands import command
from .model import Check, Status
from .schema import IndexSpec, LiveColumn, LiveSchema, normalise_predicate
from .unreachable import Cause

if TYPE_CHECKING:
    from ..store.dialects.base import Dialect
    from .context import DoctorContext

BUSY_TIMEOUT_WARN_MS = 5000
FREE_WARN_BYTES = 64 * 1024 * 1024
FREE_WARN_FRACTION = 0.5
ANALYZE = "ANALYZE"
"""Refreshes the planner's statistics of the jobs table (a store template)."""
_HEADER = b"SQLite format 3\x00"
UNREACHABLE: tuple[Cause, ...] = ()
"""SQLite has no server to reach: a missing file is found before connecting (:func:`before_connect`)."""
DEFAULT_PORT = 0
ENQUEUE_ENTRY_SQL = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?"
"""Whether the SQL enqueue view has its INSTEAD OF INSERT trigger (param: the view's name)."""
HELD_BACK_SQL: str | None = None
END_TRANSACTION: dict[str, str] = {}
"""SQLite has no concurrent snapshot that holds its cleanup back (the open_transactions check says so)."""


def _dialect(ctx: DoctorContext) -> SQLiteDialect:
    return ctx.store.dialect  # type: ignore[return-value]


def _file_journal(path: str) -> str | None:
    """The journal mode recorded in the file header (bytes 18-19: 1 rollback journal, 2 WAL),
    read without opening the database; None for an empty or non-SQLite file."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or not header.startswith(_HEADER):
        return None
    return "wal" if header[18] == 2 and header[19] == 2 else "rollback journal"


def before_connect(ctx: DoctorContext) -> Check | None:
    """Refuse to go on when the file does not exist: connecting would create an empty one."""
    path = _dialect(ctx).path
    if path == ":memory:":
        ctx.before["memory"] = True
        return None
    if not os.path.exists(path):
        return missing_file(path)
    ctx.before["journal_on_disk"] = _file_journal(path)
    ctx.before["path"] = os.path.abspath(path)
    ctx.before["had_schema"] = _has_table(path, _dialect(ctx).t_schema)
    return None


def missing_file_of(dialect: Dialect) -> Check | None:
    """The failed check of a SQLite database whose file does not exist (connecting would create an
    empty one: the command line's reading commands refuse instead); None for any other database."""
    if not isinstance(dialect, SQLiteDialect) or dialect.path == ":memory:" or os.path.exists(dialect.path):
        return None
    return missing_file(dialect.path)


def missing_file(path: str) -> Check:
    """No file at the URL's path; says why when the likely cause is the URL's slashes: three slashes
    make a path relative to the current directory, so ``sqlite:///tmp/x.db`` means ``./tmp/x.db``."""
    here = os.path.abspath(path)
    data = {"path": here}
    if not os.path.isabs(path):
        absolute = "/" + path
        top = absolute.split("/")[1]
        if os.path.exists(absolute) or (top and os.path.isdir("/" + top) and not os.path.isdir(top)):
            found = "exists" if os.path.exists(absolute) else "does not exist either"
            return Check("connectivity", Status.FAIL,
                         f"no SQLite database file at {here}: the URL's three slashes make {path!r} a path relative "
                         f"to the current directory ({os.getcwd()}); the absolute path {absolute} {found}",
                         fix=f"for the absolute path write four slashes: sqlite:///{absolute}"
                             + ("" if os.path.exists(absolute) else
                                f" (then `{command('migrate')}` creates the file and its tables)"), data=data)
    return Check("connectivity", Status.FAIL, f"no SQLite database file at {here}",
                 fix="check the path in the database URL (sqlite:///relative.db is relative to the current "
                     "directory, sqlite:////absolute.db absolute); if this is a new deployment, run "
                     f"`{command('migrate')}` to create the file and its tables", data=data)


def _has_table(path: str, table: str) -> bool | None:
    """Whether the file holds ``table``, read without changing it (read-only, so its journal mode
    stays as found); None when it cannot be read."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        return row is not None
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def server(ctx: DoctorContext) -> Check:
    version = ctx.read(lambda cur: cur.execute("SELECT sqlite_version()").fetchone()[0])
    return Check("server", Status.INFO, f"SQLite {version}, the library inside each errands process "
                 f"(file {ctx.before.get('path', ':memory:')})", data={"version": version})


def live_schema(ctx: DoctorContext) -> LiveSchema:
    prefix = ctx.store.prefix

    def read(cur: Any) -> LiveSchema:
        live = LiveSchema()
        cur.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ?",
                    (len(prefix), prefix))
        for (table,) in cur.fetchall():
            # cid, name, declared type, notnull, default, pk; in the table's column order
            cur.execute(f'PRAGMA table_info("{table}")')
            live.tables[table.lower()] = {r[1].lower(): LiveColumn(r[2], not r[3], r[4])
                                          for r in sorted(cur.fetchall())}
        # sql IS NULL: indexes SQLite makes for PRIMARY KEY and UNIQUE, which no DDL names.
        cur.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                    "AND substr(tbl_name, 1, ?) = ?", (len(prefix), prefix))
        for name, table, sql in cur.fetchall():
            # seqno, cid, name, desc, collation, key (0: the rowid SQLite adds after the key columns)
            cur.execute(f'PRAGMA index_xinfo("{name}")')
            keys = [r for r in sorted(cur.fetchall()) if r[5]]
            where = re.split(r"\bWHERE\b", sql, maxsplit=1, flags=re.I)
            live.indexes[name.lower()] = IndexSpec(table.lower(), tuple((r[2] or "").lower() for r in keys),
                                                   normalise_predicate(where[1] if len(where) > 1 else None),
                                                   sql.upper().startswith("CREATE UNIQUE"),
                                                   tuple(bool(r[3]) for r in keys))
        return live

    return ctx.read(read)


def claim_mode(ctx: DoctorContext) -> Check:
    return Check("claim_mode", Status.OK, "one UPDATE ... RETURNING per claim; SQLite has a single writer "
                 "(each write starts with BEGIN IMMEDIATE), so two claims never take the same job",
                 data={"mode": "update_returning"})


def settings(ctx: DoctorContext) -> list[Check]:
    def read(cur: Any) -> tuple[str, int, int]:
        journal = cur.execute("PRAGMA journal_mode").fetchone()[0].lower()
        busy = int(cur.execute("PRAGMA busy_timeout").fetchone()[0])
        sync = int(cur.execute("PRAGMA synchronous").fetchone()[0])
        return journal, busy, sync

    journal, busy, sync = ctx.read(read)
    return [_journal_check(ctx, journal, sync), _synchronous_check(ctx, journal, sync), _busy_check(busy)]


def _journal_check(ctx: DoctorContext, journal: str, sync: int) -> Check:
    data = {"journal_mode": journal, "journal_on_disk_before": ctx.before.get("journal_on_disk"),
            "synchronous": {0: "off", 1: "normal", 2: "full", 3: "extra"}.get(sync, str(sync))}
    if ctx.before.get("memory"):
        return Check("sqlite_journal", Status.WARN, f"in-memory database (journal_mode {journal}): it exists in "
                     "one connection only", fix="use a database file: workers in other processes (and other "
                     "threads of this one) cannot see an in-memory database's jobs", data=data)
    if journal != "wal":
        return Check("sqlite_journal", Status.WARN, f"journal_mode is {journal}, not WAL: readers and the writer "
                     "block each other, so status pages, enqueues and claims wait on one another",
                     fix="errands asks for WAL on every connection and SQLite refused: keep the file on a local "
                         "filesystem (WAL needs shared memory, which network filesystems lack) that errands can "
                         "write next to (the -wal and -shm files)", data=data)
    if ctx.before.get("journal_on_disk") == "rollback journal" and not ctx.before.get("had_schema"):
        return Check("sqlite_journal", Status.OK, "WAL: the file was in rollback-journal mode, as SQLite creates "
                     "files, and held no errands tables yet; errands switched it to WAL, which it keeps", data=data)
    if ctx.before.get("journal_on_disk") == "rollback journal":
        return Check("sqlite_journal", Status.WARN, "WAL now, but the file was in rollback-journal mode until "
                     "this run opened it (errands switched it back): something else resets it",
                     fix="look for a tool or script that runs PRAGMA journal_mode=DELETE on this file, or a copy "
                         "restored over it; every errands connection switches it back, but programs that open "
                         "it in between block on each other", data=data)
    return Check("sqlite_journal", Status.OK, "WAL: readers never block the writer", data=data)


_SYNC_NAMES = {0: "off", 1: "normal", 2: "full", 3: "extra"}
_SET_PER_CONNECTION = ("each process sets synchronous on its own connections, from its database URL "
                       f"(?synchronous=) or {SYNCHRONOUS_ENV}: this is the mode of processes configured like "
                       "this one (workers, web processes and the CLI may differ)")


def _not_wal(mode: str, journal: str, data: dict[str, Any]) -> Check:
    return Check("sqlite_synchronous", Status.INFO, f"synchronous={mode} with journal_mode {journal}: errands' "
                 "durability statements are for WAL (see journal mode)", data=data)


def _synchronous_check(ctx: DoctorContext, journal: str, sync: int) -> Check:
    """The durability of a commit: what ``PRAGMA synchronous`` is on errands' connections, in words."""
    dialect = _dialect(ctx)
    mode = _SYNC_NAMES.get(sync, str(sync))
    data = {"synchronous": mode, "configured": getattr(dialect, "synchronous", None),
            "set_by": getattr(dialect, "synchronous_from", None), "journal_mode": journal}
    where = f" (set by {data['set_by']})" if data["set_by"] else ""
    if journal != "wal":
        return _not_wal(mode, journal, data)
    if sync not in (1, 2, 3):
        return Check("sqlite_synchronous", Status.WARN, f"synchronous={mode}{where}: a power loss or OS crash can "
                     "lose commits and may corrupt the database file",
                     fix=f"remove whatever sets it: errands sets normal or full (?synchronous=, {SYNCHRONOUS_ENV}) "
                         "on every connection it opens", data=data)
    if sync == 1:
        return Check("sqlite_synchronous", Status.INFO, f"synchronous=normal{where}: a commit is not fsynced (the "
                     "WAL is synced at checkpoints), so jobs survive a crash of any process, but the last "
                     "transactions committed before a power loss or OS crash may be lost: an enqueue that returned "
                     "can vanish, a finished job can run again. For an fsync per commit: ?synchronous=full in the "
                     f"URL or {SYNCHRONOUS_ENV}=full", items=(_SET_PER_CONNECTION,), data=data)
    return Check("sqlite_synchronous", Status.OK, f"synchronous={mode}{where}: every commit fsyncs the WAL before "
                 "it returns, so an enqueue that returned survives a power loss or OS crash (on a disk that honours "
                 "fsync); the cost is one fsync per write transaction (enqueue, claim, settle, heartbeat)",
                 items=(_SET_PER_CONNECTION,), data=data)


def _busy_check(busy: int) -> Check:
    data = {"busy_timeout_ms": busy}
    if busy < BUSY_TIMEOUT_WARN_MS:
        return Check("sqlite_busy_timeout", Status.WARN, f"busy_timeout is {busy} ms: a write that finds another "
                     "process holding the write lock gives up after that and errands reports 'database is locked'",
                     fix=f"remove ?busy_timeout= from the database URL (errands' default is {BUSY_TIMEOUT_MS} ms) "
                         f"or raise it to at least {BUSY_TIMEOUT_WARN_MS} ms", data=data)
    return Check("sqlite_busy_timeout", Status.OK, f"busy_timeout {busy} ms: writers wait for the lock", data=data)


def jobs_table(ctx: DoctorContext, *, free_warn_bytes: int = FREE_WARN_BYTES,
               free_warn_fraction: float = FREE_WARN_FRACTION) -> Check:
    table = ctx.store.dialect.t_jobs

    def read(cur: Any) -> dict[str, Any]:
        page = int(cur.execute("PRAGMA page_size").fetchone()[0])
        pages = int(cur.execute("PRAGMA page_count").fetchone()[0])
        free = int(cur.execute("PRAGMA freelist_count").fetchone()[0])
        rows = int(cur.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
        try:  # dbstat is an optional compile-time feature of SQLite
            table_bytes = cur.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = ? OR name IN "
                                      "(SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?)",
                                      (table, table)).fetchone()[0]
        except sqlite3.OperationalError:
            table_bytes = None
        return {"file_bytes": page * pages, "free_bytes": page * free, "rows": rows,
                "table_bytes": None if table_bytes is None else int(table_bytes)}

    data = ctx.read(read)
    fraction = data["free_bytes"] / data["file_bytes"] if data["file_bytes"] else 0.0
    data["free_fraction"] = round(fraction, 3)
    size = f", {_mb(data['table_bytes'])} with its indexes" if data["table_bytes"] is not None else ""
    detail = (f"{table}: {data['rows']} rows{size}; the file is {_mb(data['file_bytes'])}, "
              f"{_mb(data['free_bytes'])} of it free pages ({fraction:.0%})")
    if data["free_bytes"] >= free_warn_bytes and fraction >= free_warn_fraction:
        return Check("jobs_table", Status.WARN, detail + ": left behind by a backlog that has drained",
                     fix="run VACUUM on the file at a quiet time (it rewrites the file, needs that much free "
                         "disk, and blocks writers while it runs)", data=data)
    return Check("jobs_table", Status.OK, detail, data=data)


def _mb(n: int) -> str:
    return f"{n / 1_048_576:.1f} MB"
