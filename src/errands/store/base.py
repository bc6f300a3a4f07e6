"""The store: every SQL statement about jobs goes through one of these verbs.

``SQLStore`` holds the flow that is the same on every database (which rows a
settle touches, what moves in one transaction) and SQL that is portable.  Each
dialect module subclasses it and supplies what genuinely differs: how to
connect, how to open a write transaction, how to claim, how to express "the
database's clock plus N seconds", how timestamps come back, and its DDL.

Invariants kept here (see docs/architecture.md):

* every move between ``jobs`` and ``failed_jobs`` is one transaction that locks
  the rows it moves, so a job is never in both tables nor in neither;
* every settle is conditional on ``reserved_by`` still naming the caller, so a
  worker that lost its lease changes nothing;
* time comparisons use the database clock (``{now}`` in the templates).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import select
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from ..core.errors import SchemaError, StoreError, StoreUnavailable
from ..core.limits import clamp_delay
from ..core.payload import ERROR_TEXT_CAP, safe_text
from ..core.retry import DelayFunction, decide
from ..core.rows import (
    FLAG_BATCH,
    ClaimedJob,
    FailedJobRow,
    JobRow,
    NewJob,
    QueueCounts,
    RecoveryReport,
    WorkerRow,
    as_float,
    as_int,
)
from .accounts import AccountVerbs
from .features import FeatureVerbs
from .insights import InsightVerbs

log = logging.getLogger("errands.store")
_jitter = random.Random()
"""Jitter from errands' own generator: the application's global ``random`` state (which its tests may
seed) is never drawn from by a worker's threads."""

T = TypeVar("T")

JOB_COLUMNS = ("id, queue, name, payload, priority, attempts, max_attempts, timeout, available_at, "
               "created_at, reserved_by, reserved_at, reserved_until, last_error, unique_key, blocked_by, batch_id, "
               "concurrency_key, flags, cancel_requested_at, progress, progress_message")
FAILED_COLUMNS = ("id, queue, name, payload, priority, attempts, max_attempts, timeout, created_at, "
                  "failed_at, error_type, error_message")
CLAIM_COLUMNS = "id, queue, name, payload, priority, attempts, max_attempts, timeout, reserved_by, flags, batch_id"
"""What a claim returns, in the order of :class:`ClaimedJob`'s fields."""
WORKER_COLUMNS = "id, hostname, pid, queues, concurrency, started_at, heartbeat_at, jobs_done"

ERROR_MESSAGE_CAP = ERROR_TEXT_CAP
_new_claimed = functools.partial(tuple.__new__, ClaimedJob)
"""ClaimedJob from a claimed row without ``_make``'s Python-level length check (hundreds per
claim): every dialect's claim returns exactly CLAIM_COLUMNS."""
_PLAIN = (None, None, None, 0, None)
"""The feature fields of a NewJob that uses none (unique_key, after, concurrency_key, flags, batch_id):
such jobs take the fast insert paths."""
INSERT_CHUNK = 500

_INHERITED: list[Any] = []
_FORKS = [0]
"""How many forks this process descends from: a thread-local connection opened under another
count was inherited.  Cheaper than comparing os.getpid() (a system call) on every statement."""


def _count_fork() -> None:
    _FORKS[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_count_fork)

# Outcome of classifying a driver exception.
RETRY, UNAVAILABLE, FAIL = "retry", "unavailable", "fail"


class Step(NamedTuple):
    """A migration statement that is skipped when ``unless`` (a query) returns a non-zero count.

    For servers whose DDL commits on its own (MySQL): a step that ran before a crash
    is then not run again.  Plain strings are used where migrations are transactional.
    """

    sql: str
    unless: str


class Listener(ABC):
    """Wakes an idle worker when jobs are enqueued (PostgreSQL LISTEN/NOTIFY)."""

    @abstractmethod
    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if jobs may have arrived."""

    @abstractmethod
    def close(self) -> None: ...


class PollingListener(Listener):
    """A listener for databases without LISTEN: polls a cheap value that changes on enqueue.

    It polls every ``interval`` while jobs keep arriving and slows to ``idle_interval``
    after ``active_for`` seconds without a change: each wake-up of a sleeping thread
    costs tens of microseconds of CPU here, so a worker idle for long stays well
    under 1 % of a core, while one that is receiving jobs picks them up quickly.
    """

    interval = 0.02
    idle_interval = 0.1
    active_for = 2.0

    def __init__(self) -> None:
        self.last = self._read()
        self.changed_at = time.monotonic()

    @abstractmethod
    def _read(self) -> Any:
        """The value to watch (read on the listener's own connection)."""

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            value = self._read()
            now = time.monotonic()
            if value != self.last:
                self.last, self.changed_at = value, now
                return True
            left = deadline - now
            if left <= 0:
                return False
            pause = self.interval if now - self.changed_at < self.active_for else self.idle_interval
            time.sleep(min(pause, left))


class SQLStore(FeatureVerbs, AccountVerbs, InsightVerbs, ABC):
    """Verb-level access to errands' tables on one database."""

    dialect: str = ""
    placeholder = "%s"
    #: Appended to SELECTs that must lock the rows they read inside a transaction.
    lock_rows = " FOR UPDATE"
    #: Like ``lock_rows`` but skipping rows another transaction holds.
    lock_rows_skip: str = " FOR UPDATE SKIP LOCKED"
    schema_version = 3
    #: Appended to ``LIKE ?``: the pattern's backslash escapes wildcards (SQLite has no default).
    like_escape = " ESCAPE '\\'"
    auto_migrate = False
    #: Whether ``_claim`` needs an explicit transaction (a SELECT then an UPDATE).
    claim_needs_transaction = False

    def __init__(self, url: str, *, prefix: str = "errands_") -> None:
        self.url = url
        self.prefix = prefix
        self.t_jobs = f"{prefix}jobs"
        self.t_failed = f"{prefix}failed_jobs"
        self.t_workers = f"{prefix}workers"
        self.t_schema = f"{prefix}schema"
        self.t_results = f"{prefix}results"
        self.t_batches = f"{prefix}batches"
        self.t_locks = f"{prefix}locks"
        self.t_rate_starts = f"{prefix}rate_starts"
        self.t_periodic = f"{prefix}periodic"
        self.t_queues = f"{prefix}queues"
        self.t_unique_keys = f"{prefix}unique_keys"
        self.t_dependencies = f"{prefix}dependencies"
        self.t_group_runs = f"{prefix}group_runs"
        self.t_users = f"{prefix}users"
        self.t_sessions = f"{prefix}sessions"
        self.t_remember = f"{prefix}remember_tokens"
        self.t_login_attempts = f"{prefix}login_attempts"
        self.t_audit = f"{prefix}audit_log"
        self.t_stats = f"{prefix}stats"
        self._local = threading.local()
        self._sql_cache: dict[str, str] = {}
        self._open: list[tuple[int, Any]] = []  # every (pid, connection) opened, so close() reaches all threads
        self._open_lock = threading.Lock()
        self._schema_checked = False
        self._schema_lock = threading.Lock()

    # ------------------------------------------------------------------ dialect hooks
    @abstractmethod
    def _connect(self) -> Any:
        """Open a new DB-API connection in autocommit mode."""

    @abstractmethod
    def _begin(self, conn: Any) -> None:
        """Start a write transaction on ``conn``."""

    @abstractmethod
    def _classify(self, exc: BaseException) -> str | None:
        """RETRY (deadlock, busy), UNAVAILABLE (connection lost) or FAIL; None if not a driver error."""

    @abstractmethod
    def now_sql(self) -> str:
        """SQL expression for the database's current UTC time."""

    @abstractmethod
    def plus_seconds_sql(self) -> str:
        """SQL expression for now plus a parameter of seconds (one placeholder)."""

    @abstractmethod
    def to_datetime(self, value: Any) -> datetime:
        """Convert a stored timestamp into an aware UTC datetime."""

    @abstractmethod
    def from_datetime(self, value: datetime) -> Any:
        """Convert an aware datetime into the stored representation."""

    @abstractmethod
    def migrations(self) -> list[tuple[int, list[str | Step]]]:
        """Numbered DDL steps.  A version applies in one transaction where the server has
        transactional DDL (SQLite, PostgreSQL); elsewhere its steps are guarded (``Step``)."""

    @abstractmethod
    def _claim(self, conn: Any, owner: str, queue: str, limit: int, lease: float) -> list[tuple]:
        """Atomically reserve up to ``limit`` ready jobs of ``queue``; return their CLAIM_COLUMNS
        (attempts already counted), in claim order."""

    @staticmethod
    def claim_order(rows: list[tuple]) -> list[tuple]:
        """Claimed rows (CLAIM_COLUMNS) in the order they should start: priority, highest first,
        then id.  ``UPDATE ... RETURNING`` gives no order.  Most batches share one priority, and
        plain tuple order (id first) sorts those in C without a key function."""
        if len({r[4] for r in rows}) <= 1:
            rows.sort()
        else:
            rows.sort(key=lambda r: (-r[4], r[0]))
        return rows

    def _insert_returning_ids(self, cur: Any, sql: str, params: list[Any], count: int) -> list[int]:
        cur.execute(sql + " RETURNING id", params)
        return sorted(int(r[0]) for r in cur.fetchall())

    @contextmanager
    def _migration_lock(self, conn: Any) -> Iterator[None]:
        yield

    def listener(self) -> Listener | None:
        """A way to sleep until jobs are enqueued, where the database has one (None: poll)."""
        return None

    def _after_schema_check(self, cur: Any) -> None:  # noqa: B027 - an optional hook, empty by default
        """Once per process, after the schema is known to be current: dialect-specific repairs."""

    # ------------------------------------------------------------------ plumbing
    def q(self, template: str) -> str:
        """Fill table names and clock expressions into a portable template (memoised: hot path)."""
        cached = self._sql_cache.get(template)
        if cached is None:
            cached = self._sql_cache[template] = self._render(template)
        return cached

    def _render(self, template: str) -> str:
        return template.format(jobs=self.t_jobs, failed=self.t_failed, workers=self.t_workers,
                               schema=self.t_schema, results=self.t_results, batches=self.t_batches,
                               locks=self.t_locks, rate_starts=self.t_rate_starts, periodic=self.t_periodic,
                               queues=self.t_queues, unique_keys=self.t_unique_keys,
                               dependencies=self.t_dependencies, group_runs=self.t_group_runs,
                               users=self.t_users, sessions=self.t_sessions, remember=self.t_remember,
                               login_attempts=self.t_login_attempts, audit=self.t_audit, stats=self.t_stats,
                               now=self.now_sql(), now_plus=self.plus_seconds_sql(),
                               p=self.placeholder)

    def _in(self, values: Sequence[Any]) -> str:
        return ", ".join([self.placeholder] * len(values))

    def ids_match(self, ids: Sequence[int]) -> tuple[str, list[Any]]:
        """``id IN (...)`` and its parameters; PostgreSQL overrides with one array parameter so
        that batch statements keep one text whatever their size (parsed and prepared once)."""
        return "id IN (" + self._in(ids) + ")", list(ids)

    def connection(self) -> Any:
        """This thread's connection, opened on first use and never shared across a fork."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None:
            if getattr(local, "forks", None) == _FORKS[0]:
                if not self._closed_by_server(conn):
                    return conn
                # The server ended this idle connection (it restarted, or timed the session out).
                # Nothing has been sent on it, so a new one is safe even for a write.
                self._drop_connection()
            else:
                # Inherited through fork: never use it and never let it be garbage-collected here,
                # because closing it would send a goodbye on the parent's socket.
                _INHERITED.append(conn)
                local.conn = None
        try:
            conn = self._connect()
        except Exception as exc:
            if self._classify(exc) is None:
                raise
            raise StoreUnavailable(f"database unavailable: cannot connect to {self.safe_url}: {exc}") from exc
        local.conn, local.pid, local.forks = conn, os.getpid(), _FORKS[0]
        with self._open_lock:
            self._open.append((os.getpid(), conn))
        return conn

    def _socket_of(self, conn: Any) -> int | None:
        """The connection's socket descriptor (-1 once closed); None for a file database."""
        return None

    def _closed_by_server(self, conn: Any) -> bool:
        """Whether an idle connection already has something to read, which can only be the server's
        goodbye (an error message, end of file): no request is outstanding on it.  One poll with no
        timeout, so a thread whose connection died in a restart reconnects instead of failing once."""
        fd = self._socket_of(conn)
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

    def _drop_connection(self) -> None:
        """Close this thread's connection (threads that end call this too)."""
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            with self._open_lock:
                self._open = [(pid, c) for pid, c in self._open if c is not conn]
            try:
                conn.close()
            except Exception:  # the connection is already broken; closing is best effort
                pass

    release_thread_connection = _drop_connection

    @property
    def safe_url(self) -> str:
        from ..core.config import mask_url

        return mask_url(self.url)

    def run(self, fn: Callable[[Any], T], *, write: bool = False, attempts: int = 8) -> T:
        """Run ``fn(cursor)``; inside a transaction when ``write``; map driver errors.

        Deadlocks and "database is locked" are retried with a short random pause;
        a lost connection is dropped (the next call reconnects) and surfaces as
        :class:`StoreUnavailable` so the caller decides how long to wait.
        """
        self._ensure_schema()
        return self._run(fn, write=write, attempts=attempts)

    def _run(self, fn: Callable[[Any], T], *, write: bool, attempts: int = 8) -> T:
        for attempt in range(1, attempts + 1):
            conn = self.connection()
            in_tx = False
            try:
                cur = conn.cursor()
                try:
                    if write:
                        self._begin(conn)
                        in_tx = True
                    result = fn(cur)
                    if write:
                        conn.commit()
                        in_tx = False
                    return result
                finally:
                    cur.close()
            except Exception as exc:
                kind = self._classify(exc)
                if kind is None:
                    if in_tx:
                        self._rollback(conn)
                    if isinstance(exc, UnicodeError):  # text no driver can send: a refusal like any other
                        raise StoreError(f"{self.dialect}: cannot store text: {safe_text(exc, 300)}") from exc
                    raise
                if kind == UNAVAILABLE:
                    self._drop_connection()
                    raise StoreUnavailable(f"database {self.safe_url} is unavailable: {exc}") from exc
                if in_tx:
                    self._rollback(conn)
                if kind == RETRY and attempt < attempts:
                    time.sleep(_jitter.uniform(0.001, 0.005 * attempt))
                    continue
                raise StoreError(f"{self.dialect}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _rollback(self, conn: Any) -> None:
        try:
            conn.rollback()
        except Exception:  # rollback of a broken connection; the error that matters is raised by the caller
            self._drop_connection()

    def close(self) -> None:
        """Close every connection this process opened, in any thread."""
        self._drop_connection()
        with self._open_lock:
            mine = [c for pid, c in self._open if pid == os.getpid()]
            self._open = [(pid, c) for pid, c in self._open if pid != os.getpid()]
        for conn in mine:
            try:
                conn.close()
            except Exception:  # best effort: the connection may belong to a thread mid-call or be broken
                pass

    # ------------------------------------------------------------------ schema
    def migration_sql(self) -> str:
        out = [f"-- errands schema for {self.dialect}, version {self.schema_version}"]
        out.append(self.q(self.schema_table_ddl()) + ";")
        for version, steps in self.migrations():
            out.append(f"-- version {version}")
            out.extend((s.sql if isinstance(s, Step) else s) + ";" for s in steps)
            out.append(self.q("INSERT INTO {schema} (version) VALUES ") + f"({version});")
        return "\n".join(out) + "\n"

    def schema_table_ddl(self) -> str:
        return "CREATE TABLE IF NOT EXISTS {schema} (version INTEGER PRIMARY KEY)"

    def _read_version(self, cur: Any) -> int | None:
        """Schema version on ``cur``'s connection; None when errands' tables do not exist."""
        try:
            cur.execute(self.q("SELECT MAX(version) FROM {schema}"))
        except Exception as exc:
            if self._classify(exc) == FAIL:
                return None
            raise
        row = cur.fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def current_version(self) -> int | None:
        return self._run(self._read_version, write=False)

    def _recorded_versions(self, cur: Any) -> set[int]:
        """Every version recorded on ``cur``'s connection (empty when errands' tables do not exist).
        ``migrate()`` applies each version missing here, also one below the highest."""
        try:
            cur.execute(self.q("SELECT version FROM {schema}"))
        except Exception as exc:
            if self._classify(exc) == FAIL:
                return set()
            raise
        return {int(r[0]) for r in cur.fetchall()}

    def _apply_migrations(self, cur: Any, progress: Callable[[int], None] | None = None) -> list[int]:
        applied: list[int] = []
        with self._migration_lock(cur.connection):
            cur.execute(self.q(self.schema_table_ddl()))
            done = self._recorded_versions(cur)
            for version, steps in self.migrations():
                if version in done:
                    continue
                for step in steps:
                    if not isinstance(step, Step):
                        cur.execute(step)
                    elif not self._in_place(cur, step):
                        cur.execute(step.sql)
                    if progress is not None:
                        progress(1)  # a step found in place counts too: the bar ends full
                cur.execute(self.q("INSERT INTO {schema} (version) VALUES ({p})"), (version,))
                applied.append(version)
        return applied

    @staticmethod
    def _in_place(cur: Any, step: Step) -> bool:
        """Whether a guarded step already ran (its ``unless`` query counts something)."""
        cur.execute(step.unless)
        row = cur.fetchone()
        return bool(row and row[0])

    def pending_migration_steps(self) -> int:
        """How many DDL steps ``migrate()`` goes through (for a progress bar): every step of each
        version not recorded, guarded ones included (``progress`` ticks for those it skips)."""
        done = self._run(self._recorded_versions, write=False)
        return sum(len(steps) for version, steps in self.migrations() if version not in done)

    def migrate(self, progress: Callable[[int], None] | None = None, *, cursor: Any = None) -> list[int]:
        """Create or upgrade the tables; safe to run again and from many processes at once.

        ``progress(n)`` is called after each DDL step (the CLI draws a bar with it).  With
        ``cursor`` the DDL runs on the caller's connection, inside its transaction (Django's
        ``migrate``); the caller commits."""
        if cursor is not None:
            return self._apply_migrations(cursor, progress)
        applied = self._run(lambda cur: self._apply_migrations(cur, progress), write=True)
        self._schema_checked = True
        return applied

    def _ensure_schema(self, cursor: Any = None) -> None:
        """Check (SQLite: create) the schema once per process; on ``cursor`` when the caller owns the transaction."""
        if self._schema_checked:
            return
        with self._schema_lock:
            if self._schema_checked:
                return
            version = self._read_version(cursor) if cursor is not None else self.current_version()
            if version is not None and version > self.schema_version:
                raise SchemaError(f"errands schema is at version {version}, newer than this code "
                                  f"({self.schema_version}); upgrade errands")
            if version is None or version < self.schema_version:
                if not self.auto_migrate:
                    raise SchemaError(f"errands tables do not exist in {self.safe_url}; run `errands migrate` first"
                                      if version is None else f"errands schema is at version {version}, this "
                                      f"code needs {self.schema_version}; run `errands migrate`")
                if cursor is not None:
                    self.migrate(cursor=cursor)  # part of the caller's transaction
                else:
                    self.migrate()
            if cursor is not None:
                self._after_schema_check(cursor)
            else:
                self._run(self._after_schema_check, write=False)
            self._schema_checked = True

    # ------------------------------------------------------------------ rows
    def _job(self, r: Sequence[Any]) -> JobRow:
        """A row read for people (listings, ``get_job``): numbers that are no numbers read as 0 or
        None, times outside Python's dates as FAR_PAST/FAR_FUTURE, so that any row can be shown."""
        t, n, f = self.to_datetime, as_int, as_float
        return JobRow(n(r[0]), r[1], r[2], r[3], n(r[4]), n(r[5]), n(r[6]), f(r[7]), t(r[8]), t(r[9]), r[10],
                      None if r[11] is None else t(r[11]), None if r[12] is None else t(r[12]), r[13],
                      r[14], None if r[15] is None else n(r[15]), None if r[16] is None else n(r[16]), r[17],
                      n(r[18]), None if r[19] is None else t(r[19]), f(r[20]), r[21])

    def _failed(self, r: Sequence[Any]) -> FailedJobRow:
        t, n = self.to_datetime, as_int
        return FailedJobRow(n(r[0]), r[1], r[2], r[3], n(r[4]), n(r[5]), n(r[6]), as_float(r[7]), t(r[8]), t(r[9]),
                            r[10], r[11])

    def _worker(self, r: Sequence[Any]) -> WorkerRow:
        t, n = self.to_datetime, as_int
        return WorkerRow(r[0], r[1], n(r[2]), r[3], n(r[4]), t(r[5]), t(r[6]), n(r[7]))

    # ------------------------------------------------------------------ clock
    def now(self) -> datetime:
        return self.run(self._now_in)

    # ------------------------------------------------------------------ enqueue
    def enqueue(self, jobs: Sequence[NewJob], cursor: Any = None) -> list[int]:
        """Insert jobs with multi-row INSERTs; returns their ids in the given order.

        With ``cursor`` the rows are written on the caller's own connection and
        transaction, so they exist only if the caller commits.
        """
        if not jobs:
            return []
        rich = jobs[0][8:] != _PLAIN if len(jobs) == 1 else any(j[8:] != _PLAIN for j in jobs)

        def insert(cur: Any) -> list[int]:
            return self._insert_rich(cur, jobs) if rich else self._insert_jobs(cur, jobs)

        if cursor is not None:
            try:
                self._ensure_schema(cursor)
                return insert(cursor)
            except Exception as exc:
                kind = self._classify(exc)
                if kind is None:
                    raise
                error = StoreUnavailable if kind == UNAVAILABLE else StoreError
                raise error(f"{self.dialect}: enqueue on the caller's transaction failed: {exc}") from exc
        return self.run(insert, write=rich or self._enqueue_in_transaction(len(jobs)))

    def _enqueue_in_transaction(self, count: int) -> bool:
        """Whether inserting ``count`` jobs takes more than one statement (then it must be atomic)."""
        return count > INSERT_CHUNK

    def _insert_jobs(self, cur: Any, jobs: Sequence[NewJob]) -> list[int]:
        """Multi-row INSERTs of at most INSERT_CHUNK rows; ids in input order."""
        row_sql = self.q("({p}, {p}, {p}, {p}, 0, {p}, {p}, COALESCE({p}, {now_plus}), {now})")
        ids: list[int] = []
        for start in range(0, len(jobs), INSERT_CHUNK):
            chunk = jobs[start:start + INSERT_CHUNK]
            params: list[Any] = []
            for j in chunk:
                params += [j.queue, j.name, j.payload, j.priority, j.max_attempts, j.timeout,
                           None if j.run_at is None else self.from_datetime(j.run_at), float(j.delay)]
            sql = self._sql_cache.get(f"insert:{len(chunk)}") or self._sql_cache.setdefault(
                f"insert:{len(chunk)}", self.q("INSERT INTO {jobs} (queue, name, payload, priority, attempts, "
                                               "max_attempts, timeout, available_at, created_at) VALUES ")
                + ", ".join([row_sql] * len(chunk)))
            if len(chunk) == 1:
                # One row: the driver's last-insert id (this connection's own, so exact) is free,
                # while RETURNING costs SQLite a second pass through the statement.
                cur.execute(sql, params)
                ids.append(int(cur.lastrowid))
            else:
                ids += self._insert_returning_ids(cur, sql, params, len(chunk))
        return ids

    # ------------------------------------------------------------------ claim and settle
    def claim(self, owner: str, queues: Sequence[str], limit: int, lease: float) -> list[ClaimedJob]:
        """Reserve up to ``limit`` jobs, taking queues in the given order of preference."""
        rows: list[ClaimedJob] = []
        for queue in queues:
            want = limit - len(rows)
            if want <= 0:
                break
            def claim_one(cur: Any, queue: str = queue, want: int = want) -> list[tuple]:
                return self._claim(cur, owner, queue, want, lease)

            got = self.run(claim_one, write=self.claim_needs_transaction)
            rows.extend(map(_new_claimed, got))
        return rows

    def pick_sql(self, columns: str = "id", *, paused_check: bool = True) -> str:
        """The heart of every claim: ready rows of one queue in index order.

        Parameters: queue, (queue again for the paused check,) limit.  The claim index
        (queue, priority DESC, id) over unreserved, unblocked rows serves both the WHERE
        and the ORDER BY, so this stays a short index range scan however many jobs wait;
        tests guard that with EXPLAIN on every backend.  The paused check is one lookup
        of the queue's row, evaluated once per statement.
        """
        paused = " AND NOT EXISTS (SELECT 1 FROM {queues} WHERE name = {p} AND paused = 1)" if paused_check else ""
        return self.q("SELECT " + columns + " FROM {jobs} WHERE queue = {p} AND reserved_by IS NULL "
                      "AND blocked_by IS NULL AND available_at <= {now}" + paused +
                      " ORDER BY priority DESC, id LIMIT {p}")

    def pick_params(self, queue: str, limit: int, *, paused_check: bool = True) -> tuple[Any, ...]:
        return (queue, queue, int(limit)) if paused_check else (queue, int(limit))

    explain_prefix = "EXPLAIN "

    @property
    def claim_index_name(self) -> str:
        """The name every dialect's DDL gives the index :meth:`pick_sql` walks."""
        return self.q("{jobs}_claim")

    def explain_claim(self, queue: str = "default", limit: int = 10) -> str:
        """The database's plan for :meth:`pick_sql`, one line per plan row."""
        return self.run(lambda cur: self.explain_claim_in(cur, queue, limit))

    def explain_claim_in(self, cur: Any, queue: str = "default", limit: int = 10) -> str:
        """:meth:`explain_claim` on ``cur``: without the schema check of :meth:`run` (``errands
        doctor`` looks at a schema it must not migrate)."""
        cur.execute(self.explain_prefix + self.pick_sql(), self.pick_params(queue, limit))
        return "\n".join(" | ".join("" if v is None else str(v) for v in row) for row in cur.fetchall())

    def complete(self, owner: str, ids: Sequence[int]) -> int:
        """Delete finished jobs still reserved by ``owner``; returns how many were ours.

        Only for runs that need nothing else recorded: a job that others wait for, keeps a
        result or counts in a batch is finished with :meth:`finish`.  (A dependant enqueued
        while its dependency was already running is released by ``sweep_blocked``.)
        """
        if not ids:
            return 0

        def delete(cur: Any) -> int:
            match, params = self.ids_match(ids)
            cur.execute(self.q("DELETE FROM {jobs} WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.run(delete)

    def retry_later(self, owner: str, job_id: int, delay: float, error: str) -> bool:
        """Put a failed run back in line after ``delay`` seconds of database time."""

        def update(cur: Any) -> bool:
            cur.execute(self.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                               "available_at = {now_plus}, last_error = {p} WHERE id = {p} AND reserved_by = {p}"),
                        (clamp_delay(delay), safe_text(error, ERROR_MESSAGE_CAP), job_id, owner))
            return cur.rowcount == 1

        return self.run(update)

    def bury(self, owner: str | None, job_id: int, error_type: str, error_message: str) -> bool:
        """Move a job to the dead letter in one transaction (``owner=None``: whoever holds it)."""

        def move(cur: Any) -> bool:
            where = "id = {p}" + ("" if owner is None else " AND reserved_by = {p}")
            params = [job_id] if owner is None else [job_id, owner]
            return self._bury_locked(cur, where, params, error_type, error_message) == 1

        return self.run(move, write=True)

    def _bury_locked(self, cur: Any, where: str, params: Sequence[Any], error_type: str,
                     error_message: str) -> int:
        """Move the matching rows to the dead letter; a batch member counts as failed there.

        Jobs that depend on a buried one stay blocked (visible, not lost): they run if the
        buried job is retried and then succeeds.
        """
        cur.execute(self.q("SELECT id, flags, batch_id FROM {jobs} WHERE " + where) + self.lock_rows, params)
        rows = cur.fetchall()
        if not rows:
            return 0
        ids = [r[0] for r in rows]
        marks = self._in(ids)
        cur.execute(self.q("INSERT INTO {failed} (" + FAILED_COLUMNS + ", unique_key, batch_id, concurrency_key, "
                           "flags) SELECT id, queue, name, payload, priority, attempts, max_attempts, timeout, "
                           "created_at, {now}, {p}, {p}, unique_key, batch_id, concurrency_key, flags FROM {jobs} "
                           "WHERE id IN (") + marks + ")",
                    [safe_text(error_type, 255), safe_text(error_message, ERROR_MESSAGE_CAP), *ids])
        cur.execute(self.q("DELETE FROM {jobs} WHERE id IN (") + marks + ")", ids)
        for r in rows:
            if int(r[1] or 0) & FLAG_BATCH and r[2] is not None:
                self._count_in_batch(cur, int(r[2]), done=0, failed=1)
        return len(ids)

    def release(self, owner: str, ids: Sequence[int], *, refund: bool = True) -> int:
        """Give jobs back unrun (shutdown); ``refund`` returns the attempt counted at claim."""
        if not ids:
            return 0
        refund_sql = ", attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END" if refund else ""

        def update(cur: Any) -> int:
            match, params = self.ids_match(ids)
            cur.execute(self.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL"
                               + refund_sql + " WHERE reserved_by = {p} AND ") + match, [owner, *params])
            return int(cur.rowcount)

        return self.run(update)

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int:
        """Heartbeat: push the lease of running jobs forward; returns how many are still ours."""
        if not ids:
            return 0

        def update(cur: Any) -> int:
            match, params = self.ids_match(ids)
            cur.execute(self.q("UPDATE {jobs} SET reserved_until = {now_plus} WHERE reserved_by = {p} AND ") + match,
                        [float(lease), owner, *params])
            return int(cur.rowcount)

        return self.run(update)

    def recover_stale(self, job_ids: Sequence[int] | None = None) -> RecoveryReport:
        """Release jobs whose lease expired; bury those that have used every attempt.

        Attempts were counted at claim time, so a job that kills its worker every
        time reaches ``max_attempts`` and lands in the dead letter instead of looping.
        """

        def recover(cur: Any) -> RecoveryReport:
            sql = self.q("SELECT id, attempts, max_attempts FROM {jobs} WHERE reserved_by IS NOT NULL "
                         "AND reserved_until < {now}")
            params: list[Any] = []
            if job_ids is not None:
                if not job_ids:
                    return RecoveryReport([], [])
                sql += " AND id IN (" + self._in(job_ids) + ")"
                params = list(job_ids)
            cur.execute(sql + self.lock_rows_skip, params)
            rows = cur.fetchall()
            # A lost lease comes back at once (no backoff) while attempts are left.
            release = [r[0] for r in rows if decide(r[1], r[2], None) is not None]
            bury = [r[0] for r in rows if decide(r[1], r[2], None) is None]
            if release:
                cur.execute(self.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                   "last_error = {p} WHERE id IN (") + self._in(release) + ")",
                            ["errands.LeaseExpired: the worker stopped heart-beating during this attempt", *release])
            if bury:
                self._bury_locked(cur, "id IN (" + self._in(bury) + ")", bury, "errands.LeaseExpired",
                                  "the worker stopped heart-beating (it died or hung) during the last "
                                  "attempt, and no attempts are left")
            return RecoveryReport(release, bury)

        return self.run(recover, write=True)

    def reserved_by(self, owner: str) -> list[int]:
        """Ids of jobs ``owner`` holds (the supervisor asks this after a worker process died)."""

        def read(cur: Any) -> list[int]:
            cur.execute(self.q("SELECT id FROM {jobs} WHERE reserved_by = {p}"), (owner,))
            return sorted(int(r[0]) for r in cur.fetchall())

        return self.run(read)

    def force_release(self, owner: str, ids: Sequence[int], error_type: str, error_message: str,
                      backoff_for: Callable[[str], DelayFunction | None]) -> tuple[list[int], list[int]]:
        """Fail the current attempt of jobs whose worker process was killed or died.

        Used by the supervisor.  The retry policy (:func:`errands.core.retry.decide`) sends each job
        back after its job's backoff (``backoff_for(name)``) or to the dead letter.
        """

        def settle(cur: Any) -> tuple[list[int], list[int]]:
            if not ids:
                return [], []
            cur.execute(self.q("SELECT id, attempts, max_attempts, name FROM {jobs} WHERE reserved_by = {p} "
                               "AND id IN (") + self._in(ids) + ")" + self.lock_rows, [owner, *ids])
            rows = cur.fetchall()
            delays = {r[0]: decide(r[1], r[2], backoff_for(r[3])) for r in rows}
            again = [job_id for job_id, delay in delays.items() if delay is not None]
            dead = [job_id for job_id, delay in delays.items() if delay is None]
            message = safe_text(f"{error_type}: {error_message}", ERROR_MESSAGE_CAP)
            for job_id in again:
                cur.execute(self.q("UPDATE {jobs} SET reserved_by = NULL, reserved_at = NULL, reserved_until = NULL, "
                                   "available_at = {now_plus}, last_error = {p} WHERE id = {p}"),
                            (delays[job_id], message, job_id))
            if dead:
                self._bury_locked(cur, "id IN (" + self._in(dead) + ")", dead, error_type, error_message)
            return again, dead

        return self.run(settle, write=True)

    # ------------------------------------------------------------------ dead letter
    def list_failed(self, queue: str | None = None, limit: int = 100, offset: int = 0) -> list[FailedJobRow]:
        def read(cur: Any) -> list[FailedJobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.q("SELECT " + FAILED_COLUMNS + " FROM {failed}" + where +
                               " ORDER BY failed_at DESC, id DESC LIMIT {p} OFFSET {p}"),
                        [*params, int(limit), int(offset)])
            return [self._failed(r) for r in cur.fetchall()]

        return self.run(read)

    def get_failed(self, job_id: int) -> FailedJobRow | None:
        def read(cur: Any) -> FailedJobRow | None:
            cur.execute(self.q("SELECT " + FAILED_COLUMNS + " FROM {failed} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else self._failed(row)

        return self.run(read)

    def retry_failed(self, ids: Sequence[int] | None = None, *, queue: str | None = None) -> list[int]:
        """Move dead-letter entries back to ``jobs`` (fresh attempts, ready now), in one transaction.

        ``ids=None`` means every entry (of ``queue`` when given).
        """

        def move(cur: Any) -> list[int]:
            if ids is not None and not ids:
                return []
            where, params = self._failed_filter(ids, queue)
            cur.execute(self.q("SELECT id, flags, batch_id FROM {failed}") + where + self.lock_rows, params)
            rows = cur.fetchall()
            found = sorted(r[0] for r in rows)
            # A retried batch member is pending again (its batch's callbacks, if fired, do not fire twice).
            regained: dict[int, int] = {}
            for _, flags, batch_id in rows:
                if int(flags or 0) & FLAG_BATCH and batch_id is not None:
                    regained[int(batch_id)] = regained.get(int(batch_id), 0) + 1
            for batch_id, n in sorted(regained.items()):
                cur.execute(self.q("UPDATE {batches} SET failed = failed - {p} WHERE id = {p}"), (n, batch_id))
            for start in range(0, len(found), INSERT_CHUNK):
                chunk = found[start:start + INSERT_CHUNK]
                marks = self._in(chunk)
                # A new job may hold the unique key meanwhile: the retried one then goes without it;
                # otherwise the key points at the retried job again.
                cur.execute(self.q("SELECT f.id, f.unique_key, j.id FROM {failed} f LEFT JOIN {unique_keys} k "
                                   "ON k.name = f.unique_key LEFT JOIN {jobs} j ON j.id = k.job_id "
                                   "WHERE f.unique_key IS NOT NULL AND f.id IN (") + marks + ")", chunk)
                for job_id, key, holder in cur.fetchall():
                    if holder is not None:
                        cur.execute(self.q("UPDATE {failed} SET unique_key = NULL WHERE id = {p}"), (job_id,))
                    else:
                        cur.execute(self.q(self._upsert("{unique_keys}", "name", ("job_id",))), (key, job_id))
                cur.execute(self.q("INSERT INTO {jobs} (id, queue, name, payload, priority, attempts, max_attempts, "
                                   "timeout, available_at, created_at, last_error, unique_key, batch_id, "
                                   "concurrency_key, flags) SELECT id, queue, name, payload, "
                                   "priority, 0, max_attempts, timeout, {now}, created_at, "
                                   "error_message, unique_key, batch_id, concurrency_key, flags FROM {failed} "
                                   "WHERE id IN (") + marks + ")", chunk)
                cur.execute(self.q("DELETE FROM {failed} WHERE id IN (") + marks + ")", chunk)
            return found

        return self.run(move, write=True)

    def _failed_filter(self, ids: Sequence[int] | None, queue: str | None) -> tuple[str, list[Any]]:
        """`` WHERE ...`` selecting dead-letter entries by ids and/or queue (empty: all of them)."""
        clauses: list[str] = []
        params: list[Any] = []
        if ids is not None:
            clauses.append("id IN (" + self._in(ids) + ")")
            params += list(ids)
        if queue is not None:
            clauses.append("queue = " + self.placeholder)
            params.append(queue)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def forget_failed(self, ids: Sequence[int] | None = None, *, queue: str | None = None) -> int:
        """Delete dead-letter entries for good."""

        def delete(cur: Any) -> int:
            if ids is not None and not ids:
                return 0
            where, params = self._failed_filter(ids, queue)
            cur.execute(self.q("DELETE FROM {failed}") + where, params)
            return int(cur.rowcount)

        return self.run(delete)

    # ------------------------------------------------------------------ reading
    def highest_job_id(self) -> int | None:
        """The highest job id this database has issued (0: none yet), from the id sequence itself,
        so a job that ran and left every table still counts; None when the database cannot tell."""

        def read(cur: Any) -> int | None:
            row = self._highest_id_row(cur)
            return None if row is None or row[0] is None else int(row[0])

        return self.run(read)

    @abstractmethod
    def _highest_id_row(self, cur: Any) -> Sequence[Any] | None:
        """One row whose first column is the highest id issued for the jobs table (see above)."""

    def get_job(self, job_id: int) -> JobRow | None:
        def read(cur: Any) -> JobRow | None:
            cur.execute(self.q("SELECT " + JOB_COLUMNS + " FROM {jobs} WHERE id = {p}"), (job_id,))
            row = cur.fetchone()
            return None if row is None else self._job(row)

        return self.run(read)

    def list_jobs(self, queue: str | None = None, limit: int = 100) -> list[JobRow]:
        def read(cur: Any) -> list[JobRow]:
            where, params = ("", []) if queue is None else (" WHERE queue = {p}", [queue])
            cur.execute(self.q("SELECT " + JOB_COLUMNS + " FROM {jobs}" + where + " ORDER BY id LIMIT {p}"),
                        [*params, int(limit)])
            return [self._job(r) for r in cur.fetchall()]

        return self.run(read)

    def counts(self) -> dict[str, QueueCounts]:
        """Per-queue counts of every state, computed against the database clock."""

        def read(cur: Any) -> dict[str, QueueCounts]:
            cur.execute(self.q(
                "SELECT queue, "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                "THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NULL AND available_at > {now} "
                "THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until >= {now} THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NOT NULL AND reserved_until < {now} THEN 1 ELSE 0 END), "
                "SUM(CASE WHEN reserved_by IS NULL AND blocked_by IS NOT NULL THEN 1 ELSE 0 END) "
                "FROM {jobs} GROUP BY queue"))
            result = {r[0]: QueueCounts(int(r[1] or 0), int(r[2] or 0), int(r[3] or 0), int(r[4] or 0),
                                        blocked=int(r[5] or 0))
                      for r in cur.fetchall()}
            cur.execute(self.q("SELECT queue, COUNT(*) FROM {failed} GROUP BY queue"))
            for queue, failed in cur.fetchall():
                base = result.get(queue, QueueCounts())
                result[queue] = QueueCounts(base.ready, base.delayed, base.running, base.stale, int(failed),
                                            base.blocked)
            return dict(sorted(result.items()))

        return self.run(read)

    # ------------------------------------------------------------------ workers
    def register_worker(self, worker_id: str, hostname: str, pid: int, queues: Sequence[str],
                        concurrency: int) -> None:
        def insert(cur: Any) -> None:
            cur.execute(self.q("INSERT INTO {workers} (" + WORKER_COLUMNS + ") VALUES "
                               "({p}, {p}, {p}, {p}, {p}, {now}, {now}, 0)"),
                        (worker_id, hostname, pid, ",".join(queues), concurrency))

        self.run(insert)

    def heartbeat(self, worker_id: str, jobs_done: int) -> None:
        def update(cur: Any) -> None:
            cur.execute(self.q("UPDATE {workers} SET heartbeat_at = {now}, jobs_done = {p} WHERE id = {p}"),
                        (jobs_done, worker_id))

        self.run(update)

    def unregister_worker(self, worker_id: str) -> None:
        self.run(lambda cur: cur.execute(self.q("DELETE FROM {workers} WHERE id = {p}"), (worker_id,)))

    def list_workers(self) -> list[WorkerRow]:
        def read(cur: Any) -> list[WorkerRow]:
            cur.execute(self.q("SELECT " + WORKER_COLUMNS + " FROM {workers} ORDER BY started_at, id"))
            return [self._worker(r) for r in cur.fetchall()]

        return self.run(read)

    def prune_workers(self, older_than: float) -> int:
        """Forget registry rows whose heartbeat is older than ``older_than`` seconds."""

        def delete(cur: Any) -> int:
            cur.execute(self.q("DELETE FROM {workers} WHERE heartbeat_at < {now_plus}"), (-float(older_than),))
            return int(cur.rowcount)

        return self.run(delete)
