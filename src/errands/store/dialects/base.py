"""The dialect contract: the SQL that is portable, and every point where a database differs.

A dialect is the only place that knows which database it talks to.  The stores above it
(:mod:`errands.store.jobs`, ``features``, ...) write their statements as templates with
``{jobs}``, ``{now}``, ``{now_plus}`` and ``{p}`` and let :meth:`Dialect.q` fill them in, and
the :class:`~errands.store.database.Database` opens connections and maps driver errors
through it.  A subclass overrides the attributes and methods documented "override" below.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar
from urllib.parse import parse_qsl, urlsplit

from ...core.columns import BY_NAME, CLAIMED, FAILED, JOBS, Column, Fill, Kind, claimed_index, names
from ...core.errors import ConfigurationError
from ..driver import Connection, Cursor, fetch_row, fetch_rows, last_row_id
from ..pool import BoundedPool, Pool, pool_setting
from .claim_positions import after_sql
from .inserts import INSERT_CHUNK, JobInserts

T = TypeVar("T")

JOB_COLUMNS = names(JOBS)
"""Every column of the jobs table, in the order :meth:`JobRow.from_row` reads them."""
FAILED_COLUMNS = names(FAILED)
"""Every column of the dead letter, in the order :meth:`FailedJobRow.from_row` reads them."""
CLAIM_COLUMNS = names(CLAIMED)
"""What a claim returns, in the order of :class:`ClaimedJob`'s fields."""
WORKER_COLUMNS = ("id, hostname, pid, queues, concurrency, started_at, heartbeat_at, jobs_done, lease, "
                  "heartbeat_every, command, status")
"""The workers registry's columns (``command`` and ``status``: schema version 11)."""
BACKLOG_CAP = 10_000
"""How many claimable jobs the autoscaling queries look at, at most (docs/autoscaling.md)."""
BACKLOG_AGE_SAMPLE = 1_000
"""The age gauge reads the oldest of this many next jobs in claim order: in a FIFO queue the first one
is the oldest, and 10,000 rows per queue cost PostgreSQL a heap fetch each (/metrics took 466 ms with
1,000,000 jobs waiting in five queues)."""
STARTABLE = (" AND (expires_at IS NULL OR expires_at > {now})"
             " AND (deadline_at IS NULL OR deadline_at > {now})")
"""The claim's refusal of a job past its expiry or its deadline, by the database's clock: checked on
the candidate rows the index walk finds (a plain job's NULLs end each test at once), so no worker ever
starts such a job, however many race for it; the maintenance pass (``endings.end_overdue``) ends them."""

CLAIMABLE = ("FROM {jobs} WHERE queue = {p} AND reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
             "AND NOT EXISTS (SELECT 1 FROM {queues} WHERE name = {p} AND paused = 1)")
"""The rows of one queue a worker could claim now (params: queue, queue): ready, and the queue not paused.
The claim's own conditions (:meth:`Dialect.pick`), so an autoscaler asks exactly what a new worker
would find; ``errands status`` counts the same rows as "ready" (unless the queue is paused).  Both
leave out STARTABLE: a job past its expiry or deadline counts until the maintenance pass moves it to
the dead letter (within a minute), which keeps the statements KEDA runs (docs/autoscaling.md) short."""



class ReplicaState(NamedTuple):
    """What a read replica says of itself (:meth:`Dialect.replica_state`)."""

    replicating: bool
    """Whether the server replays another's changes (PostgreSQL: in recovery; MySQL: a replication
    source is configured).  False: a server that takes writes of its own (a primary, or a promoted one)."""
    lag: float | None
    """Seconds its data is behind its source (0 when caught up, or when not replicating); None when the
    server cannot tell (MySQL's replication threads stopped), which counts as too far behind."""


def url_option(url: str, name: str) -> str | None:
    """The first ``?name=`` of a URL's query, percent-decoded (None: absent, or a URL too malformed
    to read, which its dialect then refuses with the reason)."""
    try:
        query = urlsplit(url).query
    except ValueError:
        return None
    values = [v for k, v in parse_qsl(query, keep_blank_values=True) if k == name]
    return values[0] if values else None


# Outcome of classifying a driver exception.
RETRY, UNAVAILABLE, FAIL, MISSING = "retry", "unavailable", "fail", "missing"
"""MISSING: a refusal that says a table does not exist (a FAIL to every caller but the schema check)."""

class RunFn(Protocol):
    """``run(fn, *, write, attempts)`` of a :class:`~errands.store.database.Database`: ``fn(cursor)``'s
    value, inside a transaction when ``write``."""

    def __call__(self, fn: Callable[[Cursor], T], *, write: bool, attempts: int = 8) -> T: ...

TABLES = ("jobs", "failed", "workers", "schema", "results", "batches", "locks", "rate_starts", "periodic", "queues",
          "unique_keys", "dependencies", "group_runs", "users", "sessions", "remember", "login_attempts", "audit",
          "stats", "job_errors", "steps", "queue_limits", "alerts", "fair_keys", "schedules", "run_logs")
_TABLE_NAMES = {"failed": "failed_jobs", "remember": "remember_tokens", "audit": "audit_log"}
"""Template names whose table is called otherwise (``{failed}`` is ``errands_failed_jobs``)."""


class Step(NamedTuple):
    """A migration statement that is skipped when ``unless`` (a query) returns a non-zero count.

    For servers whose DDL commits on its own (MySQL): a step that ran before a crash
    is then not run again.  Plain strings are used where migrations are transactional.
    """

    sql: str
    unless: str
    optional: bool = False
    """Passed over with a warning when the server refuses it for want of a privilege
    (:attr:`Dialect.privilege_errors`): an object beside the schema that the rest of errands does not
    need (MySQL's SQL enqueue procedure, which takes CREATE ROUTINE) never stops a migration."""


Migrations = list[tuple[int, list[str | Step]]]
"""Each version with its statements for one dialect (:meth:`Dialect.migrations`)."""


class SchemaVersion(NamedTuple):
    """One schema version of one dialect: its number, what it brings, and its statements.

    ``steps(dialect)`` returns the version's statements in the order they run, table names
    filled in by the dialect's :meth:`~Dialect.q` (so one list serves every table prefix).
    A version that has shipped is never edited: a database records the versions it ran and
    never runs one again, so a change goes in a new version at the end of the list.
    """

    version: int
    why: str
    """What the version brings, in a few words (the steps' comments say why each is so)."""
    steps: Callable[[Dialect], list[str | Step]]


def in_version_order(*migrations: SchemaVersion) -> tuple[SchemaVersion, ...]:
    """A dialect's migrations, checked as they are listed (at import): versions 1, 2, ... N, in
    that order, with none missing.  The version a dialect's code needs is derived from the list
    (:attr:`Dialect.schema_version`), so adding a version is appending one migration."""
    versions = [m.version for m in migrations]
    if not versions or versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"migrations must be versions 1 to N in order, with none missing; got {versions}")
    return migrations


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


_PRIORITY = claimed_index("priority")
_ID = claimed_index("id")
_TURN = claimed_index("fair_turn")
_turn_of = itemgetter(_TURN)


def claim_order(rows: list[Any]) -> list[Any]:
    """Claimed rows (CLAIM_COLUMNS) in the order they should start, the claim's: priority, highest
    first, then turn (fairness keys), then id.  ``UPDATE ... RETURNING`` gives no order, and a
    worker runs a batch (its prefetch: hundreds of short jobs) in this order, so keyed jobs must
    keep their turns here too.  Most batches share one priority and have no turns, and plain tuple
    order (id first) sorts those in C without a key function."""
    if len({r[_PRIORITY] for r in rows}) <= 1 and not any(map(_turn_of, rows)):
        rows.sort()
    else:
        rows.sort(key=lambda r: (-r[_PRIORITY], r[_TURN], r[_ID]))
    return rows




def int_or_none(value: Any) -> int | None:
    """A number the database returned as an int (None stays None)."""
    return None if value is None else int(value)


class Dialect(ABC):
    """One database's SQL, DDL and driver: the single thing a new backend implements.

    Class attributes are SQL fragments and facts the stores need; abstract methods are what
    every backend must say; the other methods are generic SQL that a backend may override
    where its syntax or its speed differs.  One instance per store: it also holds what a
    backend learns at run time (MySQL's claim mode, its cached paused queues).
    """

    #: The dialect's name as ``Store.dialect.name`` and ``errands doctor`` report it.
    name: str = ""
    placeholder = "%s"
    #: Appended to SELECTs that must lock the rows they read inside a transaction.
    lock_rows = " FOR UPDATE"
    #: Like ``lock_rows`` but skipping rows another transaction holds.
    lock_rows_skip: str = " FOR UPDATE SKIP LOCKED"
    #: Override: the schema, version by version: ``MIGRATIONS`` of the module beside the dialect's
    #: (``sqlite_migrations`` for ``sqlite``), built with :func:`in_version_order`.
    MIGRATIONS: tuple[SchemaVersion, ...] = ()
    #: Appended to ``LIKE ?``: the pattern's backslash escapes wildcards (SQLite has no default).
    like_escape = " ESCAPE '\\'"
    #: Whether the first use creates the tables (SQLite: a file nobody else shares a server for).
    auto_migrate = False
    #: Whether ``claim`` needs an explicit transaction (a SELECT then an UPDATE).
    claim_needs_transaction = False
    explain_prefix = "EXPLAIN "
    schema_table_ddl = "CREATE TABLE IF NOT EXISTS {schema} (version INTEGER PRIMARY KEY)"
    #: The statement delimiter ``errands migrate --sql`` switches to around a statement with a body of
    #: statements (MySQL's stored procedure), for a client that splits a script at semicolons (the
    #: ``mysql`` client's ``DELIMITER``); None: the database's own client reads such bodies as they are
    #: (psql: dollar quotes, sqlite3: ``BEGIN ... END`` of a trigger).
    script_delimiter: str | None = None
    #: Driver error codes (an exception's first argument) of a statement refused for want of a privilege.
    privilege_errors: tuple[int, ...] = ()
    #: The first 1,000 ready jobs of a queue (param: queue) by id; a dialect may steer the plan.
    first_ready_sql = ("SELECT MIN(available_at) FROM (SELECT available_at FROM {jobs} WHERE queue = {p} "
                       "AND reserved_by IS NULL AND blocked_by IS NULL AND available_at <= {now} "
                       "ORDER BY id LIMIT 1000) first_ready")
    #: Autoscaling (docs/autoscaling.md, the ``errands_backlog_jobs`` gauge): the claimable jobs of one
    #: queue (params: queue, queue), counted up to BACKLOG_CAP so that a scaler polling every few
    #: seconds never counts a backlog of millions.  Portable; KEDA's scalers run it as it is.
    backlog_jobs_sql = f"SELECT COUNT(*) FROM (SELECT 1 {CLAIMABLE} LIMIT {BACKLOG_CAP}) backlog"
    #: The share of the search windows (``insights.SEARCH_WINDOW`` jobs, ``DEAD_SEARCH_WINDOW`` dead-letter
    #: entries, and the ``GROUPED_NEWEST`` entries the dead letter's groups read) a page reads on this
    #: database: MySQL reads text through ``LIKE`` about three times slower than PostgreSQL, so it looks
    #: at half as many rows a page (the pages say how far they looked).
    search_window_share = 1.0
    #: Count jobs in a waiting state (ready, delayed, blocked) over every queue one queue at a time: for
    #: an index that leads with the queue and a server with no skip scan (MySQL's claim index).
    count_waiting_per_queue = False
    #: Whether a read replica of this database can take the stale-tolerant reads (``read_url``; SQLite: no).
    has_replicas = True
    #: The statement that makes a session read-only: every connection to a read replica runs it, so a
    #: write that slipped through to one fails there instead of landing on the wrong server.
    read_only_sql: str | None = None
    #: One row, ``replicating`` and ``lag`` (seconds, NULL: unknown), read on a replica; None: the
    #: dialect overrides :meth:`replica_state` instead.
    replica_state_sql: str | None = None
    #: Rows (``name``: the client's, ``n``: its connections) of the server's sessions on this database;
    #: None: not countable.
    connections_sql: str | None = None
    #: One row, one column: how many connections the server accepts at most.
    max_connections_sql: str | None = None
    #: The open transactions in this database that hold back the cleanup of dead rows, oldest first, at
    #: most ``%s`` of them: rows of ``id`` (a PostgreSQL pid or prepared gid, a MySQL thread id), ``kind``
    #: (session, thread, prepared), ``age_seconds``, ``state``, ``application`` (MySQL: the user), ``client``
    #: and ``query`` (its first 80 characters); never the reading session itself nor errands' own (named)
    #: sessions.  None: the database has no concurrent snapshots to hold back (SQLite).
    open_transactions_sql: str | None = None
    #: The SQL function that returns the smallest of its arguments (SQLite's scalar ``MIN``).
    least_function = "LEAST"
    bounded_delete_sql = "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {where} LIMIT {limit})"
    """A ``DELETE`` of at most ``limit`` rows of ``table`` matching ``where`` (``str.format`` fields), through
    the ids: SQLite's and PostgreSQL's DELETE take no LIMIT."""
    run_logs_insert_sql: str | None = None
    """One statement inserting any number of attempts' logs, its parameters the worker and one JSON
    array of ``[job_id, attempt, dropped, records]``; None: multi-row ``VALUES`` in chunks.  (psycopg
    parses every placeholder of a statement in Python: 5 ms for one of 200 rows, 100 µs a job; a text
    array parameter escapes each quote of the records in Python too.  One JSON text, encoded in C,
    costs neither.)"""
    #: From how many jobs an enqueue takes more than one statement (and so must be a transaction).
    transaction_from = INSERT_CHUNK + 1
    #: Create a fairness key's counter row at turn 0, or touch it (params: queue, key): either way the
    #: row is locked until the transaction ends (:mod:`errands.store.fairness`).
    fair_touch_sql = ("INSERT INTO {fair_keys} (queue, name, turn, used_at) VALUES ({p}, {p}, 0, {now}) "
                      "ON CONFLICT (queue, name) DO UPDATE SET used_at = excluded.used_at")
    #: A worker's heartbeat (params: jobs done, its status, its id), which reads the command an operator
    #: left for it in the same statement (``RETURNING``); None: the dialect has no ``UPDATE ...
    #: RETURNING`` (MySQL, MariaDB), and the store reads the command after the update, by primary key.
    heartbeat_sql: str | None = ("UPDATE {workers} SET heartbeat_at = {now}, jobs_done = {p}, status = {p} "
                                 "WHERE id = {p} RETURNING command")

    # ------------------------------------------------------------------ required SQL (abstract)
    # Each backend must say these; a missing one fails when the dialect is made, not with broken SQL.
    @property
    @abstractmethod
    def now_sql(self) -> str:
        """SQL for the database's current UTC time (``{now}`` in templates)."""

    @property
    def clock_sql(self) -> str:
        """SQL for the database's UTC time at the moment it is read, even inside a transaction
        (PostgreSQL's ``now()`` is its transaction's start): rate-limit admission maps it to the
        worker's own clock to start a run when its start was recorded."""
        return self.now_sql

    @property
    @abstractmethod
    def plus_seconds_sql(self) -> str:
        """SQL for now plus a parameter of seconds, one placeholder (``{now_plus}``)."""

    @property
    @abstractmethod
    def minute_sql(self) -> str:
        """The database's current time, truncated to the minute (the stats table's key)."""

    @property
    @abstractmethod
    def backlog_age_sql(self) -> str:
        """Whole seconds the oldest of the next BACKLOG_AGE_SAMPLE claimable jobs (claim order) has been
        due, 0 when there is none; one integer column, as KEDA's SQL scalers want (params: queue, queue)."""

    @property
    @abstractmethod
    def column_types(self) -> Mapping[Kind, str]:
        """Each kind of job column as this database's SQL type (migrations add declared columns with it)."""

    def add_job_column(self, name: str) -> list[str | Step]:
        """A migration's statements adding the job column ``name`` declared in :mod:`errands.core.columns`:
        to the jobs table, and to the dead letter when it keeps the column.  A new stored job option's
        migration is this one call in each dialect's migrations module."""
        column = BY_NAME[name]
        return [self.added_column(table, self.column_ddl(column)) for table in ("jobs", "failed")[:2 if column.dead
                                                                                                   else 1]]

    def added_column(self, table: str, ddl: str) -> str | Step:
        """``ALTER TABLE ... ADD COLUMN ddl`` (a template table name such as ``"jobs"``); MySQL guards it,
        because its DDL commits on its own and a version may run again after a crash."""
        return self.q(f"ALTER TABLE {{{table}}} ADD COLUMN {ddl}")

    def column_ddl(self, column: Column) -> str:
        """``name TYPE`` of a declared job column, for a migration that adds it (a NOT NULL number
        column gets ``DEFAULT 0`` so that existing rows are filled)."""
        ddl = f"{column.name} {self.column_types[column.kind]}"
        if column.nullable:
            return ddl
        if column.kind not in (Kind.INT, Kind.BIGINT, Kind.FLOAT):
            raise ValueError(f"column {column.name} is NOT NULL without a default: it cannot be added to a table")
        return ddl + " NOT NULL DEFAULT 0"

    def __init__(self, url: str, *, prefix: str = "errands_") -> None:
        self.url = url
        self.prefix = prefix
        self.tables = {name: prefix + _TABLE_NAMES.get(name, name) for name in TABLES}
        self.t_jobs = self.tables["jobs"]
        self.t_schema = self.tables["schema"]
        self._sql_cache: dict[str, str] = {}
        #: The name every dialect's DDL gives the index :meth:`pick` walks.
        self.claim_index_name = self.q("{jobs}_claim")
        #: The shared pool's bound and wait (``?pool_size=``, ``?pool_timeout=``, ERRANDS_POOL_*).
        self.pool_size, self.pool_timeout = pool_setting(url)
        #: ``?read_url=`` (percent-encoded): the read replica's URL given in the database URL, or None.
        self.read_url = url_option(url, "read_url") or None
        if self.read_url and not self.has_replicas:
            raise ConfigurationError(f"read_url: {self.name} has no read replicas (one file, one process "
                                     "writing); remove ?read_url= from the database URL")
        #: Whether this dialect opens read-only sessions (a read replica's store: :func:`open_store`).
        self.read_only = False
        #: The one insert path of job rows (:mod:`.inserts`), made from the job shape.
        self.inserts = self.inserts_class(self)

    # ------------------------------------------------------------------ templates
    def q(self, template: str) -> str:
        """Fill table names and clock expressions into a portable template (memoised: hot path)."""
        cached = self._sql_cache.get(template)
        if cached is None:
            cached = self._sql_cache[template] = template.format(
                **self.tables, now=self.now_sql, now_plus=self.plus_seconds_sql, p=self.placeholder)
        return cached

    def plus_column_sql(self, column: str) -> str:
        """Now plus a number of seconds held by ``column`` (``{now_plus}`` with a column for its parameter)."""
        return self.plus_seconds_sql.replace(self.placeholder, column)

    def marks(self, values: Sequence[Any]) -> str:
        """One placeholder per value, comma-separated (the inside of ``IN (...)``)."""
        return ", ".join([self.placeholder] * len(values))

    def ids_match(self, ids: Sequence[int]) -> tuple[str, list[Any]]:
        """``id IN (...)`` and its parameters; PostgreSQL overrides with one array parameter so
        that batch statements keep one text whatever their size (parsed and prepared once)."""
        return "id IN (" + self.marks(ids) + ")", list(ids)

    # ------------------------------------------------------------------ driver (override)
    @abstractmethod
    def connect(self) -> Connection:
        """Open a new DB-API connection in autocommit mode."""

    @abstractmethod
    def begin(self, conn: Connection) -> None:
        """Start a write transaction on ``conn``."""

    @abstractmethod
    def classify(self, exc: BaseException, *, replica: bool = False) -> str | None:
        """RETRY (deadlock, busy), UNAVAILABLE (connection lost, or a server that takes no statements
        now), MISSING (a table does not exist, and nothing else: only then does the schema check read
        "errands' tables do not exist, run errands migrate") or FAIL; None if not a driver error.

        A read-only refusal (the session or the server takes no writes) is UNAVAILABLE on the primary, a
        demoted writer after a failover; on a read replica's store (``replica``) it is a write errands
        must never send there: FAIL, never an outage to wait out (which would run it on the primary)."""

    def socket_of(self, conn: Connection) -> int | None:
        """The connection's socket descriptor (-1 once closed); None for a file database."""
        return None

    def wrap_run(self, run: RunFn, connection: Callable[[], Connection]) -> RunFn:
        """The database's ``run``, wrapped where a driver needs a second try (SQLite's text)."""
        return run

    def listener(self) -> Listener | None:
        """A way to sleep until jobs are enqueued, where the database has one (None: poll)."""
        return None

    def pool(self) -> Pool:
        """The small pool that threads without a connection of their own borrow from."""
        return BoundedPool(self.connect, self.pool_size, self.pool_timeout)

    def replica_state(self, cur: Cursor) -> ReplicaState:
        """Whether the server ``cur`` is on replays a primary's changes, and how far behind it is."""
        if self.replica_state_sql is None:
            raise ConfigurationError(f"{self.name} has no read replicas")
        cur.execute(self.replica_state_sql)
        row = fetch_row(cur)
        if row is None:  # pragma: no cover - the statement always returns one row
            return ReplicaState(False, None)
        lag = row["lag"]
        return ReplicaState(bool(row["replicating"]), None if lag is None else max(0.0, float(lag)))

    @abstractmethod
    def to_datetime(self, value: Any) -> datetime:
        """Convert a stored timestamp into an aware UTC datetime."""

    @abstractmethod
    def from_datetime(self, value: datetime) -> Any:
        """Convert an aware datetime into the stored representation."""

    # ------------------------------------------------------------------ schema (override)
    @property
    def schema_version(self) -> int:
        """The version this code brings a database to: the last of :attr:`MIGRATIONS`, never
        written by hand."""
        return self.MIGRATIONS[-1].version

    def migrations(self) -> Migrations:
        """Each version's statements, in version order.  A version applies in one transaction where
        the server has transactional DDL (SQLite, PostgreSQL); elsewhere its steps are guarded (``Step``)."""
        return [(m.version, m.steps(self)) for m in self.MIGRATIONS]

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        """Serialise migrations of many processes (SQLite: its write lock already does)."""
        yield

    def after_schema_check(self, cur: Cursor) -> None:  # noqa: B027 - an optional hook, empty by default
        """Once per process, after the schema is known to be current: dialect-specific repairs."""

    @abstractmethod
    def highest_id(self, cur: Cursor) -> int | None:
        """The highest id issued for the jobs table (0: none yet; None: the database cannot tell)."""

    # ------------------------------------------------------------------ claim
    @abstractmethod
    def claim(self, cur: Cursor, owner: str, queue: str, limit: int, lease: float, *, spread: int = 0) -> list[Any]:
        """Atomically reserve up to ``limit`` ready jobs of ``queue``; return their CLAIM_COLUMNS
        (attempts already counted), in claim order.  ``spread``: a retry of a claim that lost to
        concurrent transactions, which may pick its ``limit`` rows at random among the ``limit + spread``
        first ready ones (0: exactly the first ones).  Where claims do not conflict with each other
        (SKIP LOCKED on one server) a dialect may ignore it."""

    def pick(self, queue: str, limit: int, columns: str = "id", *, paused_check: bool = True,
             after: tuple[int, int, int] | None = None) -> tuple[str, tuple[Any, ...]]:
        """The heart of every claim: ready rows of one queue in index order, as a statement and its
        parameters (queue, queue again for the paused check, limit).  The claim index
        (queue, priority DESC, fair_turn, id) over unreserved, unblocked rows serves both the
        WHERE and the ORDER BY, so this stays a short index range scan however many jobs wait;
        tests guard that with EXPLAIN on every backend.  ``fair_turn`` is 0 for a job without a
        fairness key, so such jobs keep their order (priority, then id); keyed jobs of one
        priority take turns (:mod:`errands.store.fairness`).  The paused check is one lookup
        of the queue's row, evaluated once per statement.  ``after``: only the rows past this
        (priority, fair_turn, id) within its priority (:mod:`.claim_positions`; params after the queue).
        """
        paused = " AND NOT EXISTS (SELECT 1 FROM {queues} WHERE name = {p} AND paused = 1)" if paused_check else ""
        past, past_params = after_sql(after)
        sql = self.q("SELECT " + columns + " FROM {jobs} WHERE queue = {p} AND reserved_by IS NULL "
                     "AND blocked_by IS NULL AND available_at <= {now}" + past + STARTABLE + paused +
                     " ORDER BY priority DESC, fair_turn, id LIMIT {p}")
        return sql, (queue, *past_params, *((queue,) if paused_check else ()), int(limit))

    def after_pause(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """A queue was paused or resumed by this process (MySQL forgets its cached paused queues)."""

    # ------------------------------------------------------------------ inserts
    #: The class of :attr:`inserts`, this dialect's one insert path for job rows.
    inserts_class: type[JobInserts] = JobInserts

    def insert_one(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int:
        """Insert one row and return its id (the driver's last-insert id; PostgreSQL: RETURNING)."""
        cur.execute(sql, params)
        return last_row_id(cur)

    def insert_ignore(self, table: str, columns: str) -> str:
        """``INSERT`` of one row that does nothing if its key exists (SQLite and PostgreSQL syntax)."""
        marks = ", ".join(self.placeholder for _ in columns.split(","))
        return f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING"

    def upsert(self, table: str, key: str, columns: Sequence[str]) -> str:
        """``INSERT`` of one row (key first) that updates ``columns`` if the key exists."""
        marks = ", ".join(self.placeholder for _ in range(len(columns) + 1))
        updates = ", ".join(f"{c} = excluded.{c}" for c in columns)
        return (f"INSERT INTO {table} ({key}, {', '.join(columns)}) VALUES ({marks}) "
                f"ON CONFLICT ({key}) DO UPDATE SET {updates}")

    def replace_waiting_sql(self, *, capped: bool) -> str:
        """Give a waiting job an enqueue's arguments, priority and run time (``on_conflict="replace"``).

        Params: payload, priority, the due time's two (``inserts.due_params``: run_at, delay), with
        ``capped`` max_wait, then the id.  ``capped`` (debounce): the run time is at most the job's
        ``created_at`` plus max_wait, so a steady stream of enqueues cannot put its run off forever.
        ``reserved_by IS NULL`` keeps a claimed row as its worker claimed it, whatever the caller read."""
        due = self.inserts.fill_sql(Fill.DUE)
        if capped:  # created_at plus seconds: the dialect's "now plus seconds" with the column for now
            due = f"{self.least_function}({due}, {self.plus_seconds_sql.replace(self.now_sql, 'created_at')})"
        return self.q("UPDATE {jobs} SET payload = {p}, priority = {p}, available_at = " + due +
                      " WHERE id = {p} AND reserved_by IS NULL")

    age_waiting_template = "UPDATE {jobs} {step} WHERE {due} AND id IN (SELECT id FROM {jobs} WHERE {due} LIMIT {p})"
    """The aging pass's shape (``{step}``: the SET clause, ``{due}``: the condition of a job owed more):
    at most ``{p}`` rows through their ids, as SQLite's UPDATE takes no LIMIT."""

    def after_insert(self, cur: Cursor, queues: set[str]) -> None:  # noqa: B027 - an optional hook
        """Jobs of ``queues`` were inserted outside :meth:`insert_jobs` (PostgreSQL notifies)."""

    def after_unblock(self, cur: Cursor, children: Sequence[int]) -> None:  # noqa: B027 - an optional hook
        """Blocked jobs became ready (PostgreSQL wakes idle workers)."""

    # ------------------------------------------------------------------ read models
    def stats_upsert(self) -> str:
        """INSERT this minute's counts for a queue (params: queue, succeeded, failed), or add them."""
        return ("INSERT INTO {stats} (minute, queue, succeeded, failed) VALUES (" + self.minute_sql +
                ", {p}, {p}, {p}) ON CONFLICT (minute, queue) DO UPDATE SET "
                "succeeded = {stats}.succeeded + excluded.succeeded, failed = {stats}.failed + excluded.failed")

    def floor_sql(self, expr: str) -> str:
        """The whole part of a non-negative number."""
        return f"FLOOR({expr})"

    @abstractmethod
    def epoch_sql(self, column: str) -> str:
        """A time column as seconds since 1970 (UTC)."""

    def queues_in_use(self, cur: Cursor) -> set[str]:
        """The distinct queues of the jobs and the dead letter without reading either table whole.

        SQLite and PostgreSQL have no skip scan, so a recursive query hops through the claim index
        (waiting jobs) and the dead letter's queue index, one index probe per queue; reserved and
        blocked jobs, few by nature, come from their own partial indexes."""
        waiting = "SELECT queue FROM {jobs} WHERE reserved_by IS NULL AND blocked_by IS NULL"
        dead = "SELECT queue FROM {failed} WHERE queue IS NOT NULL"
        cur.execute(self.q(
            "WITH RECURSIVE w(queue) AS (SELECT (" + waiting + " ORDER BY queue LIMIT 1) UNION ALL "
            "SELECT (" + waiting + " AND queue > w.queue ORDER BY queue LIMIT 1) FROM w "
            "WHERE w.queue IS NOT NULL), "
            "d(queue) AS (SELECT (" + dead + " ORDER BY queue LIMIT 1) UNION ALL "
            "SELECT (" + dead + " AND queue > d.queue ORDER BY queue LIMIT 1) FROM d WHERE d.queue IS NOT NULL) "
            "SELECT queue FROM w WHERE queue IS NOT NULL UNION SELECT queue FROM d WHERE queue IS NOT NULL "
            "UNION SELECT DISTINCT queue FROM {jobs} WHERE reserved_by IS NOT NULL "
            "UNION SELECT DISTINCT queue FROM {jobs} WHERE blocked_by IS NOT NULL"))
        return {r["queue"] for r in fetch_rows(cur)}


def age_waiting_sql(d: Dialect) -> str:
    """Priority aging (``age_after=``): the earned priority for at most ``{p}`` waiting jobs owed more,
    in the dialect's :attr:`Dialect.age_waiting_template`.  A bounded maintenance UPDATE rather than a
    term of the claim's ORDER BY, so the claim keeps walking its index; the inner select reads the aging
    index (only the jobs that still age).  Two passes at once write the same value (the earned priority
    is a function of the row)."""
    return d.q(d.age_waiting_template.replace("{step}", _aging_step_sql(d)).replace("{due}", _aging_due_sql(d)))


def _aged_priority_sql(d: Dialect) -> str:
    """The priority a waiting job has earned: its enqueued priority plus one step per ``age_after``
    seconds since it was due, at most its cap.  Made of columns aging never writes, so it reads the
    same before and after an UPDATE that assigns it (MySQL assigns left to right)."""
    waited = f"({d.epoch_sql(d.now_sql)} - {d.epoch_sql('available_at')})"
    return f"{d.least_function}(age_cap, age_base + {d.floor_sql(waited + ' / age_after')})"


def _aging_step_sql(d: Dialect) -> str:
    """``SET`` the earned priority, and forget the cap once it is reached (the job leaves the aging
    index); the cap is assigned last, from the same expression, so every dialect agrees."""
    earned = _aged_priority_sql(d)
    return f"SET priority = {earned}, age_cap = CASE WHEN {earned} >= age_cap THEN NULL ELSE age_cap END"


def _aging_due_sql(d: Dialect) -> str:
    """The condition of a job owed more priority: waiting, still aging, below what it earned."""
    return f"age_cap IS NOT NULL AND reserved_by IS NULL AND priority < {_aged_priority_sql(d)}"
