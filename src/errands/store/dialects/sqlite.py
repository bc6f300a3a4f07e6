"""SQLite: the embedded default.  One file, many processes, one writer at a time.

WAL lets readers run beside the writer; ``busy_timeout`` makes a writer wait for
the lock instead of failing; every write transaction starts with ``BEGIN
IMMEDIATE`` so it takes the write lock up front and can never deadlock on a lock
upgrade.  ``synchronous`` (``?synchronous=normal|full``, ERRANDS_SQLITE_SYNCHRONOUS)
decides whether a commit waits for an fsync of the WAL: see ``SYNCHRONOUS_MODES``.
Claiming is a single ``UPDATE ... RETURNING`` (SQLite >= 3.35), which is atomic
because SQLite has one writer.  Times are stored as REAL seconds since
the epoch, read from SQLite's own clock.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

from ...core.columns import Kind
from ...core.errors import ConfigurationError, StoreError
from ...core.rows import epoch_to_datetime
from ..driver import Connection, Cursor, scalar
from ..pool import POOL_OPTIONS
from . import sqlite_migrations
from .base import (
    BACKLOG_AGE_SAMPLE,
    CLAIM_COLUMNS,
    CLAIMABLE,
    FAIL,
    MISSING,
    RETRY,
    UNAVAILABLE,
    Dialect,
    Listener,
    PollingListener,
    RunFn,
    claim_order,
    int_or_none,
)
from .urls import number_option, query_options

T = TypeVar("T")

MIN_VERSION = (3, 35, 0)
BUSY_TIMEOUT_MS = 30000
"""How long a writer waits for another's lock unless the URL says ``?busy_timeout=`` (milliseconds)."""
NOW = "((julianday('now') - 2440587.5) * 86400.0)"
CLOCK_FUNCTION = "errands_now"
"""The SQL function that reads a store's own ``clock`` (``SQLiteDialect(clock=...)``) in place of NOW."""
SQLITE_OPTIONS = ("busy_timeout", "synchronous", *POOL_OPTIONS)
"""The query options of a SQLite URL."""
SYNCHRONOUS_ENV = "ERRANDS_SQLITE_SYNCHRONOUS"
DEFAULT_SYNCHRONOUS = "normal"
SYNCHRONOUS_MODES = ("normal", "full")
"""``PRAGMA synchronous`` values errands offers (always with WAL).  ``normal``: a commit writes the WAL
but does not fsync it (the WAL is synced at checkpoints); durable when a process crashes, but the
last transactions committed before a power loss or OS crash may roll back.  ``full``: every commit
fsyncs the WAL before it returns, so a committed enqueue survives power loss; one fsync per write
transaction (enqueue, claim, settle, heartbeat).  ``off`` is not offered: with it a power loss or
OS crash may corrupt the database file, not just lose its latest commits.  ``extra`` adds nothing
to ``full`` in WAL mode."""


def synchronous_setting(url: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The ``synchronous`` mode for ``url`` and where it came from: the URL's ``?synchronous=``, else
    ERRANDS_SQLITE_SYNCHRONOUS (empty counts as unset), else ``normal``.  The URL wins because it is
    the more specific of the two (one database, against every SQLite database of the process)."""
    env = os.environ if environ is None else environ
    given = parse_qs(urlsplit(url).query).get("synchronous")
    if given:
        raw, where = given[0], "?synchronous= in the database URL"  # the first, as for busy_timeout
    elif env.get(SYNCHRONOUS_ENV, "").strip():
        raw, where = env[SYNCHRONOUS_ENV], SYNCHRONOUS_ENV
    else:
        return DEFAULT_SYNCHRONOUS, "errands' default"
    mode = raw.strip().lower()
    if mode not in SYNCHRONOUS_MODES:
        why = (" (off is refused: a power loss or OS crash could corrupt the database file)"
               if mode in ("off", "0") else "")
        raise ConfigurationError(f"SQLite synchronous={raw!r} from {where} is not allowed: use "
                                 f"{' or '.join(SYNCHRONOUS_MODES)}{why}")
    return mode, where


def sqlite_path(url: str) -> str:
    """``sqlite:///rel.db`` -> ``rel.db``; ``sqlite:////abs.db`` -> ``/abs.db``."""
    parts = urlsplit(url)
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path:
        raise ConfigurationError(f"SQLite URL {url!r} names no file; use sqlite:///path/to/errands.db")
    return path


def _undecodable(exc: BaseException | None) -> bool:
    """Whether sqlite3 failed to read a TEXT value that is not UTF-8."""
    return isinstance(exc, sqlite3.OperationalError) and "could not decode to utf-8" in str(exc).lower()


def _text_with_escapes(data: bytes) -> str:
    """A TEXT value as str; bytes that are not UTF-8 become surrogate escapes (valid UTF-8 decodes
    exactly as usual).  The payload boundary refuses such text as BadPayload, and free text is shown
    with replacement characters (errands.core.payload)."""
    return data.decode("utf-8", "surrogateescape")


class _DataVersionListener(PollingListener):
    """Polls ``PRAGMA data_version``, which changes whenever another connection commits.

    It costs a few microseconds and touches no table, so an idle worker can look
    every few milliseconds and still use a tiny fraction of a core.  Any commit
    changes it, though, including every worker's heartbeat; so a change only leads
    to a read of the highest job id, and only a new id wakes the worker.  Jobs that
    become due without a new id (a delay or backoff ends, a dead-letter retry) are
    found by the worker's regular poll.
    """

    interval = 0.005
    idle_interval = 0.05

    def __init__(self, connect: Any, highest_id_sql: str) -> None:
        self.conn = connect()
        self.sql = highest_id_sql
        self.version: int | None = None
        self.highest = 0
        super().__init__()

    def _read(self) -> int:
        version = int(scalar(self.conn.execute("PRAGMA data_version")))
        if version != self.version:
            self.version = version
            self.highest = int(scalar(self.conn.execute(self.sql)) or 0)
        return self.highest

    def close(self) -> None:
        self.conn.close()


COLUMN_TYPES = {Kind.ID: "INTEGER", Kind.BIGINT: "INTEGER", Kind.INT: "INTEGER", Kind.FLOAT: "REAL",
                Kind.TIME: "REAL", Kind.QUEUE: "TEXT", Kind.OWNER: "TEXT", Kind.KEY: "TEXT", Kind.TEXT: "TEXT",
                Kind.PAYLOAD: "TEXT"}
"""Times are REAL seconds since 1970; text of any length."""


class SQLiteDialect(Dialect):
    name = "sqlite"
    column_types = COLUMN_TYPES
    placeholder = "?"
    lock_rows = ""  # BEGIN IMMEDIATE already holds the only write lock
    lock_rows_skip = ""
    auto_migrate = True
    has_replicas = False  # one file: nothing replicates it for errands to read from
    explain_prefix = "EXPLAIN QUERY PLAN "
    now_sql: str = NOW
    plus_seconds_sql: str = f"({NOW} + ?)"
    minute_sql: str = f"(CAST({NOW} / 60 AS INTEGER) * 60.0)"
    backlog_age_sql = ("SELECT COALESCE(CAST({now} - MIN(available_at) AS INTEGER), 0) "
                       f"FROM (SELECT available_at {CLAIMABLE} ORDER BY priority DESC, fair_turn, id "
                       f"LIMIT {BACKLOG_AGE_SAMPLE}) backlog")
    # "+queue" keeps the claim index out: through it SQLite read every row of the queue and
    # sorted them by id (600 ms for six queues of a million jobs); in rowid order it stops at
    # the thousandth ready job (2 ms).  Only asked for queues with many waiting jobs.
    first_ready_sql = ("SELECT MIN(available_at) FROM (SELECT available_at FROM {jobs} WHERE +queue = {p} "
                       "AND reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                       "ORDER BY id LIMIT 1000) first_ready")
    least_function = "MIN"  # with two arguments or more, SQLite's min() is a scalar function
    claim_needs_transaction = True
    """The claim is one statement, but it runs inside BEGIN IMMEDIATE ... COMMIT so that a claim
    that fails while its rows are read (TEXT that is not UTF-8, see ``_run``) is rolled back for
    certain: an autocommit ``UPDATE ... RETURNING`` that fails on its second row stays applied,
    and its rows would be held by no one until their lease ran out.  Two more statements per
    claim: 0.13 µs a job at 100 jobs a claim, 5 µs for a claim of one (measured here)."""

    def __init__(self, url: str, *, prefix: str = "errands_", clock: Callable[[], float] | None = None) -> None:
        """``clock``: seconds since 1970 to use as the database's time instead of SQLite's own
        (``errands.testing`` freezes and moves it).  Every ``{now}`` then calls it through a function
        each connection registers: only SQL of this store sees that time, never another process."""
        self.clock = clock
        if clock is not None:
            self.now_sql = f"{CLOCK_FUNCTION}()"
            self.plus_seconds_sql = f"({CLOCK_FUNCTION}() + ?)"
            self.minute_sql = f"(CAST({CLOCK_FUNCTION}() / 60 AS INTEGER) * 60.0)"
        if sqlite3.sqlite_version_info < MIN_VERSION:
            raise ConfigurationError(
                f"SQLite {sqlite3.sqlite_version} is too old: errands needs 3.35 or newer "
                "(for UPDATE ... RETURNING). Use a newer Python build or PostgreSQL/MySQL.")
        query_options(url, "SQLite", SQLITE_OPTIONS)
        super().__init__(url, prefix=prefix)
        self.path = sqlite_path(url)
        given = parse_qs(urlsplit(url).query).get("busy_timeout")
        self.busy_timeout_ms = BUSY_TIMEOUT_MS if not given else int(number_option(
            url, "SQLite", "busy_timeout", given[0], lowest=0, highest=2**31 - 1, whole=True,
            wanted="a whole number of milliseconds, 0 or more"))
        self.synchronous, self.synchronous_from = synchronous_setting(url)

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
        if str(scalar(conn.execute("PRAGMA journal_mode"))).lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")  # one of SYNCHRONOUS_MODES
        if self.clock is not None:
            conn.create_function(CLOCK_FUNCTION, 0, self.clock)
        return conn

    def begin(self, conn: Connection) -> None:
        cast(sqlite3.Connection, conn).execute("BEGIN IMMEDIATE")

    def wrap_run(self, run: RunFn, connection: Callable[[], Connection]) -> RunFn:
        """The database's ``run``, tolerant of TEXT that is not UTF-8.

        SQLite keeps whatever bytes another program wrote into a TEXT column, and sqlite3 refuses to
        read such a value, failing the whole statement: one bad row would stop every claim of its
        queue.  Statements that change rows and return text run in a transaction (the claim), which
        the failure rolled back; reads change nothing.  So it runs again with the bad text read as
        surrogate escapes.  Only then: the usual reading is sqlite3's C path, a third faster."""

        def tolerant(fn: Callable[[Cursor], T], *, write: bool, attempts: int = 8) -> T:
            try:
                return run(fn, write=write, attempts=attempts)
            except StoreError as exc:
                if not _undecodable(exc.__cause__):
                    raise
            conn = cast(sqlite3.Connection, connection())
            conn.text_factory = _text_with_escapes
            try:
                return run(fn, write=write, attempts=attempts)
            finally:
                conn.text_factory = str

        return tolerant

    def listener(self) -> Listener | None:
        return _DataVersionListener(self.connect, self.q("SELECT MAX(id) FROM {jobs}"))

    def classify(self, exc: BaseException, *, replica: bool = False) -> str | None:
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            if "locked" in text or "busy" in text:
                return RETRY
            if "unable to open" in text or "disk i/o" in text:
                return UNAVAILABLE
            if "no such table" in text:
                return MISSING
            return FAIL
        if isinstance(exc, sqlite3.Error):
            return FAIL
        return None

    def to_datetime(self, value: Any) -> datetime:
        return epoch_to_datetime(value)

    def from_datetime(self, value: datetime) -> Any:
        if value.tzinfo is None:
            raise ConfigurationError("run_at must be an aware datetime (e.g. datetime.now(timezone.utc))")
        return value.timestamp()

    #: The schema, version by version: sqlite_migrations.py.
    MIGRATIONS = sqlite_migrations.MIGRATIONS

    def floor_sql(self, expr: str) -> str:
        """SQLite has FLOOR only when built with its math functions (CPython's Windows build is not)."""
        return f"CAST({expr} AS INTEGER)"

    def epoch_sql(self, column: str) -> str:
        return column  # stored as epoch seconds already

    def highest_id(self, cur: Cursor) -> int | None:
        # AUTOINCREMENT keeps the highest id ever used in sqlite_sequence, and never reuses one.
        cur.execute("SELECT COALESCE(MAX(seq), 0) FROM sqlite_sequence WHERE name = ?", (self.t_jobs,))
        return int_or_none(scalar(cur))

    def claim(self, cur: Cursor, owner: str, queue: str, limit: int, lease: float, *, spread: int = 0) -> list[Any]:
        # ``spread`` is ignored: claims here skip each other's rows and never lose at commit.
        pick, pick_params = self.pick(queue, limit)
        cur.execute(self.q(
            "UPDATE {jobs} SET reserved_by = ?, reserved_at = {now}, reserved_until = {now} + ?, "
            "attempts = attempts + 1 WHERE id IN (" + pick + ") RETURNING " + CLAIM_COLUMNS),
            (owner, float(lease), *pick_params))
        return claim_order(cast(list[Any], cur.fetchall()))
