"""Connections, transactions and error mapping, the same on every database.

A thread marked with :meth:`Database.dedicate_thread` (the worker's claim loop and its heartbeat)
keeps a connection of its own, with no lock on its path; every other thread borrows one from a
small shared pool for the length of one ``run`` call (no transaction spans two calls), so a
worker holds a few connections whatever its concurrency.  No connection or pool is used across a
fork.  ``run(fn, write=...)`` hands ``fn`` a
cursor (inside a transaction when it writes), retries deadlocks and busy locks, and turns a
lost server into :class:`StoreUnavailable` and any other refusal into :class:`StoreError`.
The schema is checked (SQLite: created) once per process before the first statement.
"""

from __future__ import annotations

import logging
import os
import random
import select
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from ..core.config import mask_url
from ..core.errors import SchemaError, StoreConflict, StoreError, StoreUnavailable
from ..core.payload import safe_text
from .dialects.base import MISSING, RETRY, UNAVAILABLE, Dialect, Step
from .driver import Connection, Cursor, fetch_rows, scalar
from .pool import Pool, PoolExhausted

log = logging.getLogger("errands.store")

T = TypeVar("T")

_jitter = random.Random()
"""Jitter from errands' own generator: the application's global ``random`` state (which its tests may
seed) is never drawn from by a worker's threads."""

_INHERITED: list[Any] = []
_FORKS = [0]
"""How many forks this process descends from: a thread-local connection opened under another
count was inherited.  Cheaper than comparing os.getpid() (a system call) on every statement."""


def _count_fork() -> None:
    _FORKS[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)


class Database:
    """Connections to one database and the one way statements reach it."""

    def __init__(self, dialect: Dialect, *, read_only: bool = False) -> None:
        self.dialect = dialect
        self.read_only = read_only
        """A read replica's database: no write, no migration, no repair, sessions set read-only."""
        self.on_unavailable: Callable[[], None] | None = None
        """Called when a statement finds the database unreachable (the read router then stops using it)."""
        self.fallback: Database | None = None
        """A read replica's primary: a :meth:`run` that finds the replica unreachable runs there instead,
        so a replica lost in the middle of a page costs that page one statement more, not an error."""
        self._local = threading.local()
        self._open: list[tuple[int, Any]] = []  # every (pid, connection) opened, so close() reaches all threads
        self._open_lock = threading.Lock()
        self._schema_checked = False
        self._schema_lock = threading.Lock()
        self._guarded = dialect.wrap_run(self._attempts, self.connection)
        self._pool: Pool | None = None
        self._pool_forks = -1
        self._pool_lock = threading.Lock()

    @property
    def safe_url(self) -> str:
        return mask_url(self.dialect.url)

    # ------------------------------------------------------------------ connections
    def dedicate_thread(self, dedicated: bool = True) -> None:
        """Let this thread keep a connection of its own (True) or borrow from the pool (False, the
        default of every thread).  For the few threads that use the database all the time: the
        worker's claim-and-settle loop and its heartbeat.  Leaving closes the thread's connection."""
        if not dedicated and getattr(self._local, "dedicated", False):
            self.release_thread_connection()
        self._local.dedicated = dedicated

    @property
    def pool_size(self) -> int:
        """The shared pool's bound (``?pool_size=``, ERRANDS_POOL_SIZE)."""
        return self.dialect.pool_size

    def connection(self) -> Connection:
        """The connection of this call: the one borrowed for it from the pool, else this thread's
        own, opened on first use and never shared across a fork."""
        local = self._local
        conn: Connection | None
        if getattr(local, "lending", False):
            conn = local.borrowed
            if conn is None:  # the borrowed one broke mid-call (a failed rollback, say): borrow another
                conn = local.borrowed = self._borrow(self._shared_pool())
            return conn
        conn = cast("Connection | None", getattr(local, "conn", None))
        if conn is not None:
            if getattr(local, "forks", None) == _FORKS[0]:
                if not self._closed_by_server(conn):
                    return conn
                # The server ended this idle connection (it restarted, or timed the session out).
                # Nothing has been sent on it, so a new one is safe even for a write.
                self.release_thread_connection()
            else:
                # Inherited through fork: never use it and never let it be garbage-collected here,
                # because closing it would send a goodbye on the parent's socket.
                _INHERITED.append(conn)
                local.conn = None
        try:
            conn = self.dialect.connect()
        except Exception as exc:
            if self.dialect.classify(exc) is None:
                raise
            raise StoreUnavailable(f"database unavailable: cannot connect to {self.safe_url}: {exc}") from exc
        local.conn, local.pid, local.forks = conn, os.getpid(), _FORKS[0]
        with self._open_lock:
            self._open.append((os.getpid(), conn))
        return conn

    def _closed_by_server(self, conn: Connection) -> bool:
        """Whether an idle connection already has something to read, which can only be the server's
        goodbye (an error message, end of file): no request is outstanding on it.  One poll with no
        timeout, so a thread whose connection died in a restart reconnects instead of failing once."""
        fd = self.dialect.socket_of(conn)
        if fd is None:
            return False
        if fd < 0:
            return True
        try:
            if hasattr(select, "poll"):
                poller = select.poll()
                poller.register(fd, select.POLLIN | select.POLLPRI)
                return bool(poller.poll(0))
            return bool(select.select([fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def _shared_pool(self) -> Pool:
        """The pool of this process, created on first use and again in a forked child (whose
        inherited pool, connections and pool threads are never touched)."""
        pool = self._pool
        if pool is None or self._pool_forks != _FORKS[0]:
            with self._pool_lock:
                pool = self._pool
                if pool is None or self._pool_forks != _FORKS[0]:
                    if pool is not None:
                        _INHERITED.append(pool)
                    try:
                        pool = self._pool = self.dialect.pool()
                    except Exception as exc:
                        if self.dialect.classify(exc) is None:
                            raise
                        raise StoreUnavailable(f"database unavailable: {self.safe_url}: {exc}") from exc
                    self._pool_forks = _FORKS[0]
        return pool

    def _borrow(self, pool: Pool) -> Connection:
        """An idle pooled connection that the server has not closed meanwhile (one restart can have
        closed them all: each is dropped and the next tried, up to a fresh one)."""
        for _ in range(pool.size + 1):
            try:
                conn = pool.get()
            except PoolExhausted as exc:
                raise StoreUnavailable(f"database {self.safe_url}: {exc} (raise ?pool_size=, now "
                                       f"{pool.size}, or hold connections for shorter)") from exc
            except Exception as exc:
                if self.dialect.classify(exc) is None:
                    raise
                raise StoreUnavailable(f"database unavailable: cannot connect to {self.safe_url}: {exc}") from exc
            if not self._closed_by_server(conn):
                return conn
            pool.discard(conn)
        raise StoreUnavailable(f"database {self.safe_url}: every pooled connection was closed by the server")

    def _lent(self, fn: Callable[[Any], T], write: bool, attempts: int) -> T:
        """One call on a connection borrowed from the pool and given back after it, also when
        it fails (a broken one is discarded instead: its place opens a new one)."""
        pool = self._shared_pool()
        local = self._local
        local.borrowed = self._borrow(pool)
        local.lending = True
        try:
            return self._guarded(fn, write=write, attempts=attempts)
        finally:
            conn, local.borrowed, local.lending = local.borrowed, None, False
            if conn is not None:
                pool.put(conn)

    def release_thread_connection(self) -> None:
        """Close this thread's connection (threads that end call this too); during a pooled call,
        drop the borrowed connection instead (it broke)."""
        if getattr(self._local, "lending", False):
            conn, self._local.borrowed = self._local.borrowed, None
            if conn is not None:
                self._shared_pool().discard(conn)
            return
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            with self._open_lock:
                self._open = [(pid, c) for pid, c in self._open if c is not conn]
            try:
                conn.close()
            except Exception:  # the connection is already broken; closing is best effort
                pass

    def close(self) -> None:
        """Close every connection this process opened, in any thread, and its pool."""
        self.release_thread_connection()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pool_forks == _FORKS[0]:
            pool.close()
        with self._open_lock:
            mine = [c for pid, c in self._open if pid == os.getpid()]
            self._open = [(pid, c) for pid, c in self._open if pid != os.getpid()]
        for conn in mine:
            try:
                conn.close()
            except Exception:  # best effort: the connection may belong to a thread mid-call or be broken
                pass

    # ------------------------------------------------------------------ statements
    def run(self, fn: Callable[[Any], T], *, write: bool = False, attempts: int = 8) -> T:
        """Run ``fn(cursor)``; inside a transaction when ``write``; map driver errors.

        Deadlocks and "database is locked" are retried with a short random pause (``attempts`` in all,
        then :class:`StoreConflict`);
        a lost connection is dropped (the next call reconnects) and surfaces as
        :class:`StoreUnavailable` so the caller decides how long to wait.
        """
        try:
            self.ensure_schema()
            return self.run_unchecked(fn, write=write, attempts=attempts)
        except StoreUnavailable:
            if self.fallback is None:
                raise
            return self.fallback.run(fn, write=write, attempts=attempts)

    def run_unchecked(self, fn: Callable[[Any], T], *, write: bool = False, attempts: int = 8) -> T:
        """:meth:`run` without the schema check (``errands doctor`` must not migrate what it looks at)."""
        if write and self.read_only:
            raise StoreError(f"{self.safe_url} is a read replica: errands never writes there")
        local = self._local
        try:
            if getattr(local, "dedicated", False) or getattr(local, "lending", False):
                return self._guarded(fn, write=write, attempts=attempts)
            return self._lent(fn, write, attempts)
        except StoreUnavailable:
            if self.on_unavailable is not None:
                self.on_unavailable()
            raise

    def _attempts(self, fn: Callable[[Any], T], *, write: bool, attempts: int = 8) -> T:
        reconnected = False
        attempt = 0
        while attempt < attempts:
            attempt += 1
            conn = self.connection()
            in_tx = False
            try:
                cur = conn.cursor()
                try:
                    if write:
                        self.dialect.begin(conn)
                        in_tx = True
                    result = fn(cur)
                    if write:
                        conn.commit()
                        in_tx = False
                    return result
                finally:
                    cur.close()
            except Exception as exc:
                kind = self.dialect.classify(exc, replica=self.read_only)
                if kind is None:
                    if in_tx:
                        self._rollback(conn)
                    if isinstance(exc, UnicodeError):  # text no driver can send: a refusal like any other
                        raise StoreError(f"{self.dialect.name}: cannot store text: {safe_text(exc, 300)}") from exc
                    raise
                if kind == UNAVAILABLE:
                    self.release_thread_connection()
                    if not write and not reconnected:
                        # A read lost with its connection (the server it was on died mid-query, a
                        # pooler dropped it) is asked once more on a fresh connection: nothing was
                        # changed, and a multi-host URL connects to the next server that answers.
                        # A write is never repeated: its COMMIT may have landed.
                        reconnected = True
                        attempt -= 1
                        continue
                    raise StoreUnavailable(f"database {self.safe_url} is unavailable: {exc}") from exc
                if in_tx:
                    self._rollback(conn)
                if kind == RETRY and attempt < attempts:
                    time.sleep(_jitter.uniform(0.001, 0.005 * attempt))
                    continue
                error = StoreConflict if kind == RETRY else StoreError
                raise error(f"{self.dialect.name}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _rollback(self, conn: Connection) -> None:
        try:
            conn.rollback()
        except Exception:  # rollback of a broken connection; the error that matters is raised by the caller
            self.release_thread_connection()

    def on_cursor(self, fn: Callable[[Cursor], T], cursor: Cursor, what: str) -> T:
        """Run ``fn`` on the caller's own cursor and transaction (which the caller commits), with
        driver errors mapped as :meth:`run` maps them."""
        try:
            self.ensure_schema(cursor)
            return fn(cursor)
        except Exception as exc:
            kind = self.dialect.classify(exc)
            if kind is None:
                raise
            error = StoreUnavailable if kind == UNAVAILABLE else StoreConflict if kind == RETRY else StoreError
            raise error(f"{self.dialect.name}: {what} on the caller's transaction failed: {exc}") from exc

    def now_in(self, cur: Cursor) -> datetime:
        """The database's clock, read on ``cur``."""
        cur.execute("SELECT " + self.dialect.now_sql)
        return self.dialect.to_datetime(scalar(cur))

    def now(self) -> datetime:
        return self.run(self.now_in)

    # ------------------------------------------------------------------ schema
    def migration_sql(self) -> str:
        """The whole DDL as a script, for people who apply schema changes themselves."""
        d = self.dialect
        out = [f"-- errands schema for {d.name}, version {d.schema_version}"]
        if d.script_delimiter:
            out.append(f"-- DELIMITER lines are the {d.name} client's: run this script with it (mysql db < file.sql)")
        out.append(d.q(d.schema_table_ddl) + ";")
        for version, steps in d.migrations():
            out.append(f"-- version {version}")
            for step in steps:
                sql = step.sql if isinstance(step, Step) else step
                if d.script_delimiter and ";" in sql:  # a body of statements: the client must not split it
                    out.append(f"DELIMITER {d.script_delimiter}\n{sql} {d.script_delimiter}\nDELIMITER ;")
                else:
                    out.append(sql + ";")
            out.append(d.q("INSERT INTO {schema} (version) VALUES ") + f"({version});")
        return "\n".join(out) + "\n"

    def _read_version(self, cur: Cursor) -> int | None:
        """Schema version on ``cur``'s connection; None when errands' tables do not exist.

        Only the database's own "no such table" means that: any other refusal of this read (a Galera
        node cut off from its cluster, a server in recovery, a denied right) is raised, and the caller's
        error mapping makes it StoreUnavailable or StoreError with the database's words, never the
        advice to run ``errands migrate`` on a schema that is there."""
        try:
            cur.execute(self.dialect.q("SELECT MAX(version) FROM {schema}"))
        except Exception as exc:
            if self.dialect.classify(exc) == MISSING:
                return None
            raise
        highest = scalar(cur)
        return 0 if highest is None else int(highest)

    def current_version(self) -> int | None:
        return self.run_unchecked(self._read_version)

    def _recorded_versions(self, cur: Cursor) -> set[int]:
        """Every version recorded on ``cur``'s connection (empty when errands' tables do not exist).
        ``migrate()`` applies each version missing here, also one below the highest."""
        try:
            cur.execute(self.dialect.q("SELECT version FROM {schema}"))
        except Exception as exc:
            if self.dialect.classify(exc) == MISSING:
                return set()
            raise
        return {int(r["version"]) for r in fetch_rows(cur)}

    def _apply_migrations(self, cur: Cursor, to: int, progress: Callable[[int], None] | None = None) -> list[int]:
        d = self.dialect
        applied: list[int] = []
        with d.migration_lock(cur.connection):
            cur.execute(d.q(d.schema_table_ddl))
            done = self._recorded_versions(cur)
            for version, steps in d.migrations():
                if version > to:
                    break
                if version in done:
                    continue
                for step in steps:
                    if not isinstance(step, Step):
                        cur.execute(step)
                    elif not _in_place(cur, step):
                        _run_step(cur, step, d)
                    if progress is not None:
                        progress(1)  # a step found in place counts too: the bar ends full
                cur.execute(d.q("INSERT INTO {schema} (version) VALUES ({p})"), (version,))
                applied.append(version)
        return applied

    def _target(self, to: int | None) -> int:
        """The version ``migrate(to=...)`` stops at: the one this code needs unless told."""
        code = self.dialect.schema_version
        if to is None:
            return code
        if not 1 <= to <= code:
            raise SchemaError(f"cannot migrate to version {to}: this code knows versions 1 to {code}")
        return to

    def pending_migration_steps(self, *, to: int | None = None) -> int:
        """How many DDL steps ``migrate(to=...)`` goes through (for a progress bar): every step of each
        version not recorded, guarded ones included (``progress`` ticks for those it skips)."""
        target = self._target(to)
        done = self.run_unchecked(self._recorded_versions)
        return sum(len(steps) for version, steps in self.dialect.migrations()
                   if version <= target and version not in done)

    def migrate(self, progress: Callable[[int], None] | None = None, *, to: int | None = None,
                cursor: Cursor | None = None) -> list[int]:
        """Create or upgrade the tables; safe to run again and from many processes at once.

        ``progress(n)`` is called after each DDL step (the CLI draws a bar with it).  ``to`` stops
        after that version instead of the one this code needs: each of errands' Django migrations
        brings its own version, and the tests build a database one version at a time to compare
        it with one built in one go.  Versions already recorded are never run again.  With
        ``cursor`` the DDL runs on the caller's connection, inside its transaction (Django's
        ``migrate``); the caller commits."""
        if self.read_only:
            raise SchemaError(f"{self.safe_url} is a read replica: migrate the primary, the replica follows")
        target = self._target(to)
        if cursor is not None:
            return self._apply_migrations(cursor, target, progress)
        applied = self.run_unchecked(lambda cur: self._apply_migrations(cur, target, progress), write=True)
        if target == self.dialect.schema_version:
            self._schema_checked = True
        return applied

    def ensure_schema(self, cursor: Cursor | None = None) -> None:
        """Check (SQLite: create) the schema once per process; on ``cursor`` when the caller owns the transaction."""
        if self._schema_checked:
            return
        with self._schema_lock:
            if self._schema_checked:
                return
            version = self._read_version(cursor) if cursor is not None else self.current_version()
            self._upgrade_if_needed(version, cursor)
            if self.read_only:  # the repairs write: they are the primary's to make
                pass
            elif cursor is not None:
                self.dialect.after_schema_check(cursor)
            else:
                self.run_unchecked(self.dialect.after_schema_check)
            self._schema_checked = True

    def _upgrade_if_needed(self, version: int | None, cursor: Cursor | None) -> None:
        code = self.dialect.schema_version
        if version is not None and version > code:
            raise SchemaError(f"errands schema is at version {version}, newer than this code "
                              f"({code}); upgrade errands")
        if version is None or version < code:
            if self.read_only:
                raise SchemaError(f"the read replica {self.safe_url} has "
                                  + ("no errands tables" if version is None else f"errands schema {version}")
                                  + f", this code needs {code}: migrate the primary and let the replica catch up")
            if not self.dialect.auto_migrate:
                raise SchemaError(f"errands tables do not exist in {self.safe_url}; run `errands migrate` first"
                                  if version is None else f"errands schema is at version {version}, this "
                                  f"code needs {code}; run `errands migrate`")
            self.migrate(cursor=cursor)  # with a cursor: part of the caller's transaction


def _run_step(cur: Cursor, step: Step, d: Dialect) -> None:
    """Run a guarded step; an optional one the server refuses for want of a privilege is passed over
    with a warning that says what is missing (``errands doctor`` reports it too)."""
    try:
        cur.execute(step.sql)
    except Exception as exc:
        if not (step.optional and exc.args and exc.args[0] in d.privilege_errors):
            raise
        log.warning("errands migrate passed over a statement the database refused for want of a privilege "
                    "(%s); what it creates is optional (docs/wire-format.md), the rest of the schema is in place: "
                    "%s", safe_text(exc, 300), " ".join(step.sql.split())[:80])


def _in_place(cur: Cursor, step: Step) -> bool:
    """Whether a guarded step already ran (its ``unless`` query counts something)."""
    cur.execute(step.unless)
    return bool(scalar(cur))
