"""PostgreSQL through psycopg 3.

Claiming is one statement: a CTE picks ready rows ``FOR UPDATE SKIP LOCKED`` in
claim-index order and the UPDATE reserves them, so concurrent workers never wait
on each other and never take the same row.  The claim index is partial (only
unreserved rows), which keeps it small however many jobs are running.
Timestamps are ``timestamptz`` compared against ``now()``, the server's clock.

Behind a connection pooler (PgBouncer) ``pooler=transaction`` (``?pooler=`` in the URL or
``ERRANDS_POOLER``) makes every connection safe to share between transactions: no prepared
statements, nothing that outlives a transaction, and no LISTEN through the pooler (a worker
LISTENs on ``listen_url``, a direct connection, or polls).  See :data:`POOLER_MODES`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, cast
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ...core.columns import Fill, Kind
from ...core.config import mask_url
from ...core.errors import ConfigurationError, StoreUnavailable
from ...core.extras import MissingExtra
from ...core.rows import FAR_FUTURE, FAR_PAST, NewJob
from ..driver import Connection, Cursor, fetch_row, fetch_rows, scalar
from ..pool import POOL_OPTIONS, connection_label
from . import postgres_migrations
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
    claim_order,
    int_or_none,
)
from .claim_positions import ClaimPositions
from .inserts import FULL, InsertShape, JobInserts, shape_of
from .urls import refused, split_url

BULK_CHUNK = 5000
COPY_FROM = 200
"""Batches at least this large are written with COPY (below, one ``unnest`` INSERT is quicker)."""
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
COLUMN_TYPES = {Kind.ID: "BIGINT", Kind.BIGINT: "BIGINT", Kind.INT: "INTEGER", Kind.FLOAT: "DOUBLE PRECISION",
                Kind.TIME: "TIMESTAMPTZ", Kind.QUEUE: "VARCHAR(60)", Kind.OWNER: "VARCHAR(120)",
                Kind.KEY: "VARCHAR(255)", Kind.TEXT: "TEXT", Kind.PAYLOAD: "TEXT"}
_ARRAY_TYPES = {Kind.ID: "int8[]", Kind.BIGINT: "int8[]", Kind.INT: "int4[]", Kind.FLOAT: "float8[]",
                Kind.TIME: "timestamptz[]"}
"""The array type each kind travels in through ``unnest`` (text for the rest)."""
_COPY_TYPES = {Kind.ID: "int8", Kind.BIGINT: "int8", Kind.INT: "int4", Kind.FLOAT: "float8", Kind.TIME: "int8"}
"""The binary COPY type of each kind (text for the rest): times travel as int8 microseconds, below."""
_UNNEST_FILLS = {Fill.ZERO: "0", Fill.NOW: "now()", Fill.DUE: "COALESCE(ra, now() + make_interval(secs => d))"}
"""A computed column's value in the ``unnest`` insert (``ra``, ``d``: each row's run_at and delay)."""


CONNECT_TIMEOUT = 10
"""Seconds libpq waits for each host to answer, unless the URL says ``?connect_timeout=``."""
POOLER_ENV = "ERRANDS_POOLER"
LISTEN_URL_ENV = "ERRANDS_LISTEN_URL"
POOLER_MODES = ("transaction", "session")
"""What sits between errands and PostgreSQL.  ``transaction``: a pooler that hands a server connection
to a client for one transaction only (PgBouncer ``pool_mode = transaction``), so nothing may live
longer than a transaction: psycopg prepares no statement (``prepare_threshold=None``: a statement
prepared on one server connection would be missing, or another client's, on the next) and nobody
LISTENs through it (a notification arrives on a server connection the listener no longer holds).
``session``: a pooler that keeps one server connection per client connection, which behaves like
a direct connection.  Unset: a direct connection, as before."""
URL_OPTIONS = ("pooler", "listen_url", "read_url", *POOL_OPTIONS)
"""errands' own query options, removed before the URL reaches libpq (which refuses unknown ones)."""


def _url_option(url: str, name: str) -> str | None:
    values = [v for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True) if k == name]
    return values[0] if values else None


def pooler_setting(url: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The pooler mode for ``url`` and where it came from: ``?pooler=``, else ERRANDS_POOLER (empty
    counts as unset), else None (a direct connection).  The URL wins, as for SQLite's
    ``?synchronous=``: it is the more specific of the two.  ``none`` says "no pooler" explicitly."""
    env = os.environ if environ is None else environ
    given = _url_option(url, "pooler")
    if given is not None:
        raw, where = given, "?pooler= in the database URL"
    elif env.get(POOLER_ENV, "").strip():
        raw, where = env[POOLER_ENV], POOLER_ENV
    else:
        return None, "errands' default (no pooler)"
    mode = raw.strip().lower()
    if mode in ("", "none"):
        return None, where
    if mode not in POOLER_MODES:
        raise ConfigurationError(f"pooler={raw!r} from {where} is not allowed: use {' or '.join(POOLER_MODES)} "
                                 "(PgBouncer's pool_mode), or none for a direct connection")
    return mode, where


def listen_url_setting(url: str, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The direct URL a worker LISTENs on (bypassing a transaction pooler) and where it came from:
    ``?listen_url=`` (percent-encoded), else ERRANDS_LISTEN_URL, else None (the store's own URL)."""
    env = os.environ if environ is None else environ
    given = _url_option(url, "listen_url")
    if given:
        return given, "?listen_url= in the database URL"
    if env.get(LISTEN_URL_ENV, "").strip():
        return env[LISTEN_URL_ENV].strip(), LISTEN_URL_ENV
    return None, "not set"


def driver_url(url: str) -> str:
    """``url`` as libpq takes it: the SQLAlchemy-style scheme plain, errands' own options removed."""
    parts = urlsplit(url.replace("postgresql+psycopg://", "postgresql://", 1))
    if parts.query:
        kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in URL_OPTIONS]
        # (quote, not quote_plus: libpq reads "+" as a plus sign, so a space must travel as %20)
        parts = parts._replace(query=urlencode(kept, quote_via=quote))
    text = urlunsplit(parts)
    if not parts.netloc and parts.scheme:
        # No host (the Unix socket): urlunsplit writes "postgresql:/db" for a scheme it does not know,
        # which libpq cannot read; it needs "postgresql:///db".
        text = f"{parts.scheme}://" + text[len(parts.scheme) + 1:]
    return text


def _pg_microseconds(value: datetime) -> int:
    """An aware datetime as binary ``timestamptz`` holds it: microseconds since 2000-01-01 UTC."""
    return (value - _PG_EPOCH) // _MICROSECOND

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.types.datetime import TimestamptzLoader
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtra("PostgreSQL support (psycopg 3)", "postgres", exc) from exc

def checked_url(url: str, what: str = "PostgreSQL") -> str:
    """``url`` as libpq takes it (:func:`driver_url`), once libpq has read it: every option that is not
    errands' own (:data:`URL_OPTIONS`) must be one of libpq's connection parameters, and each port a
    number.  libpq parses without connecting (``conninfo_to_dict``); what it refuses, and a port it
    would only refuse when connecting, is a ConfigurationError here rather than "database unavailable".
    An empty entry of a host list stays allowed: libpq reads it as its default (the Unix socket)."""
    split_url(url, what)  # (urlsplit refuses some text libpq would read otherwise)
    conninfo = driver_url(url)
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        raise refused(url, what, f"libpq cannot read it: {str(exc).strip()}; errands' own options are "
                      f"{', '.join(sorted(URL_OPTIONS))}, and every other option goes to libpq, which takes its "
                      "connection parameters (sslmode, connect_timeout, target_session_attrs, application_name, "
                      "...: https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS)") from None
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise refused(url, what, f"port {port!r} is not a number from 1 to 65535")
    return conninfo


_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.LockNotAvailable)
READ_ONLY = "25006"
"""``read_only_sql_transaction``: the connection reached a standby (a URL without
``target_session_attrs=read-write``, a pooler or a virtual IP not yet moved after a failover), or a server
made read-only (``default_transaction_read_only``, a managed service out of disk).  Nothing was written,
and a writable primary may be one reconnect away, so errands treats it as the database being unavailable:
the connection is dropped, callers wait and retry, and a worker keeps its finished results until it can
record them, instead of taking the refusal as a failure of the job (measured in tests/e2e/test_failover.py:
through a standby, a worker logged "could not record this run's success" and tried to bury finished jobs)."""


def _pg(conn: Connection) -> psycopg.Connection[Any]:
    """A connection this dialect opened, as the psycopg connection it is."""
    return cast("psycopg.Connection[Any]", conn)


class _ClampedTimestamptz(TimestamptzLoader):
    """timestamptz values outside Python's years 1-9999 ('infinity', a job due in the year 33,000
    written before errands bounded delays) read as FAR_PAST or FAR_FUTURE instead of failing the
    whole query, and with it a page of the dashboard."""

    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError as exc:
            return FAR_PAST if "too small" in str(exc) else FAR_FUTURE


class _NotifyListener(Listener):
    """A dedicated autocommit connection that LISTENs on the store's channel."""

    def __init__(self, connect: Any, channel: str) -> None:
        self.conn = connect()  # direct or session-pooled: LISTEN lasts as long as the session
        try:
            self.conn.execute(f'LISTEN "{channel}"')
        except BaseException:  # a standby refuses LISTEN: close now, not when a garbage collection comes
            self.conn.close()
            raise

    def wait(self, timeout: float) -> bool:
        try:
            for _ in self.conn.notifies(timeout=timeout, stop_after=1):
                return True
        except psycopg.Error as exc:
            raise StoreUnavailable(f"lost the LISTEN connection: {exc}") from exc
        return False

    def close(self) -> None:
        self.conn.close()


class PostgresInserts(JobInserts):
    """PostgreSQL's bulk forms of the one insert path: ``unnest`` of arrays, and binary ``COPY``."""

    d: PostgresDialect

    def __init__(self, d: PostgresDialect) -> None:
        super().__init__(d)
        self._id_sequence: str | None = None
        """The jobs table's id sequence, looked up once (for COPY's reserved ids)."""

    def fill_sql(self, fill: Fill | None, *, now: bool = False) -> str:
        # A NULL run_at is typed by the cast: a prepared statement then takes a datetime later.
        if fill is Fill.DUE and not now:
            return "COALESCE({p}::timestamptz, {now_plus})"
        return super().fill_sql(fill, now=now)

    def due_params(self, j: NewJob) -> tuple[Any, float]:
        return j.run_at, float(j.delay)  # psycopg sends an aware datetime as timestamptz

    def insert_jobs(self, cur: Cursor, jobs: Sequence[NewJob], shape: InsertShape | None = None) -> list[int]:
        """One fixed statement per shape whatever the batch size: columns travel as arrays and
        ``unnest`` turns them back into rows, so the statement is parsed and planned once (psycopg
        prepares it after a few uses) instead of once per batch size; from COPY_FROM jobs, COPY.

        Waking idle workers costs nothing extra: each statement returns ``pg_notify`` per row, and
        PostgreSQL folds identical notifications of one transaction into one, delivered only if the
        enqueue commits.
        """
        # A caller's own cursor may come from another driver (psycopg2 under Django or SQLAlchemy):
        # then no prepared statements and no COPY, only what every DB-API cursor does.
        ours = isinstance(cur, psycopg.Cursor)
        shape = shape or shape_of(jobs)
        if shape is FULL:
            jobs = self.stored_times(cur, jobs)  # (seconds from now made moments; datetimes as they are)
        if len(jobs) == 1:
            j = jobs[0]
            sql = self._cached(f"pg1:{shape.key}", lambda: self.head(shape) + self.row(shape)
                               + self._returning)
            params = (*shape.values(j), *self.due_params(j))
            if ours and self.d.prepares:
                cast(Any, cur).execute(sql, params, prepare=True)
            else:
                cur.execute(sql, params)
            return [int(scalar(cur))]
        if len(jobs) >= COPY_FROM and ours:
            return self._copy_jobs(cur, jobs, shape)
        sql = self._cached(f"pg-unnest:{shape.key}", lambda: self._unnest_sql(shape))
        ids: list[int] = []
        for start in range(0, len(jobs), BULK_CHUNK):
            chunk = jobs[start:start + BULK_CHUNK]
            columns = [list(c) for c in zip(*map(shape.values, chunk), strict=True)]
            cur.execute(sql, (*columns, [j.run_at for j in chunk], [float(j.delay) for j in chunk]))
            ids += sorted(int(r["id"]) for r in fetch_rows(cur))  # (with pg_notify's empty column)
        return ids

    @property
    def _returning(self) -> str:
        return f" RETURNING id, pg_notify('{self.d.channel}', queue)"

    def _unnest_sql(self, shape: InsertShape) -> str:
        """``INSERT ... SELECT FROM unnest(arrays) WITH ORDINALITY``: a shape's field columns as arrays,
        then the due time's run_at and delay; rows in input order, so ids ascend with it."""
        aliases = [f"c{i}" for i in range(len(shape.fields))]
        arrays = [f"%s::{_ARRAY_TYPES.get(c.kind, 'text[]')}" for c in shape.fields]
        computed = [_UNNEST_FILLS[c.fill] for c in shape.computed if c.fill is not None]
        return self.d.q("INSERT INTO {jobs} (" + shape.names + ") SELECT " + ", ".join(aliases + computed)
                      + " FROM unnest(" + ", ".join(arrays + ["%s::timestamptz[]", "%s::float8[]"])
                      + ") WITH ORDINALITY AS u(" + ", ".join(aliases) + ", ra, d, ord) ORDER BY ord"
                      + self._returning)

    def _copy_jobs(self, cur: Cursor, jobs: Sequence[NewJob], shape: InsertShape) -> list[int]:
        """Large batches: reserve ids from the sequence, then COPY the rows (the fastest way in).

        ``available_at`` is the server's ``now()`` (read in the same statement as the ids)
        plus each delay, so the database clock still decides when a job is due.  Runs inside
        the store's write transaction (or the caller's), so the ids, rows and notifications
        commit together.

        The COPY is binary, and times travel as what binary ``timestamptz`` is on the wire:
        a 64-bit count of microseconds since 2000-01-01 UTC (``int8`` to psycopg).  Dumping a
        datetime per row, or having the server parse one as text, cost more than all the
        other columns together.
        """
        if self._id_sequence is None:
            # Looked up once: pg_get_serial_sequence() inside nextval() runs again for every id
            # (a thousand catalog lookups cost more than writing the thousand rows).
            cur.execute("SELECT pg_get_serial_sequence(%s, 'id')", (self.d.t_jobs,))
            self._id_sequence = scalar(cur)
        cur.execute("SELECT now() AS now, array_agg(nextval(%s::regclass)) AS ids FROM generate_series(1, %s)",
                    (self._id_sequence, len(jobs)))
        reserved = fetch_row(cur)
        assert reserved is not None  # an aggregate returns one row
        ids = sorted(reserved["ids"])
        now_us = _pg_microseconds(reserved["now"])
        types = ["int8"] + [_COPY_TYPES.get(c.kind, "text") for c in shape.columns]
        values = shape.values
        times = [i for i, c in enumerate(shape.fields) if c.kind is Kind.TIME]
        if times and any(getattr(j, shape.fields[i].name) is not None for j in jobs for i in times):
            plain_values = shape.values

            def values(j: NewJob) -> tuple[Any, ...]:  # expires_at, deadline_at: microseconds as well
                row = list(plain_values(j))
                for i in times:
                    if row[i] is not None:
                        row[i] = _pg_microseconds(row[i])
                return tuple(row)
        # The computed columns are the same for every row but the due time: a row is the job's values,
        # then ``before``, its due time, ``after`` (no call per column per row: this loop is the COPY's cost).
        fills = [c.fill for c in shape.computed]
        at = fills.index(Fill.DUE)
        fixed = [0 if fill is Fill.ZERO else now_us for fill in fills]
        before, after = tuple(fixed[:at]), tuple(fixed[at + 1:])
        with cast(Any, cur).copy(self.d.q("COPY {jobs} (id, " + shape.names + ") FROM STDIN (FORMAT BINARY)")) as copy:
            copy.set_types(types)
            write = copy.write_row
            for job_id, j in zip(ids, jobs, strict=True):
                if j.run_at is not None:
                    due = _pg_microseconds(j.run_at)
                elif j.delay:
                    due = now_us + round(j.delay * 1_000_000)
                else:
                    due = now_us
                write((job_id, *values(j), *before, due, *after))
        self.d.after_insert(cur, {j.queue for j in jobs})
        return [int(i) for i in ids]


class PostgresDialect(Dialect):
    name = "postgresql"
    column_types = COLUMN_TYPES
    inserts_class = PostgresInserts
    now_sql = "now()"
    clock_sql = "clock_timestamp()"
    plus_seconds_sql = "(now() + make_interval(secs => %s))"
    # The rows picked once, in a materialised CTE: a LIMIT ... SKIP LOCKED subquery inside IN may be run
    # again per row and pick more than the bound.  Rows another pass holds are skipped; the outer
    # condition judges a row again as it is once locked.
    age_waiting_template = ("WITH picked AS MATERIALIZED (SELECT id FROM {jobs} WHERE {due} LIMIT {p} FOR UPDATE "
                            "SKIP LOCKED) UPDATE {jobs} {step} FROM picked WHERE {jobs}.id = picked.id AND {due}")
    minute_sql = "date_trunc('minute', now())"
    run_logs_insert_sql = ("INSERT INTO {run_logs} (job_id, attempt, worker, logged_at, dropped, records) "
                           "SELECT (e->>0)::bigint, (e->>1)::int, {p}, {now}, (e->>2)::int, e->>3 "
                           "FROM json_array_elements({p}::json) AS e")
    backlog_age_sql = ("SELECT CAST(COALESCE(FLOOR(EXTRACT(EPOCH FROM {now} - MIN(available_at))), 0) AS BIGINT) "
                       f"FROM (SELECT available_at {CLAIMABLE} ORDER BY priority DESC, fair_turn, id "
                       f"LIMIT {BACKLOG_AGE_SAMPLE}) backlog")
    transaction_from = COPY_FROM
    connections_sql = ("SELECT application_name AS name, count(*) AS n FROM pg_stat_activity "
                       "WHERE datname = current_database() GROUP BY application_name")
    max_connections_sql = "SELECT current_setting('max_connections')::int"
    # Client sessions in a transaction (or holding a snapshot) and prepared transactions: both keep VACUUM
    # from removing rows that died after they began.  errands' own sessions carry ``errands <pid>@<host>``
    # as application_name (their transactions last milliseconds) and are left out.
    open_transactions_sql = (
        "SELECT * FROM (SELECT pid::text AS id, 'session' AS kind, "
        "EXTRACT(EPOCH FROM now() - coalesce(xact_start, backend_start))::float8 AS age_seconds, state, "
        "application_name AS application, coalesce(host(client_addr), 'local') AS client, "
        "left(query, 80) AS query FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
        "AND (xact_start IS NOT NULL OR backend_xmin IS NOT NULL) AND left(application_name, 8) <> 'errands ' "
        "UNION ALL SELECT gid, 'prepared', EXTRACT(EPOCH FROM now() - prepared)::float8, 'prepared', "
        "owner::text, '', '' FROM pg_prepared_xacts WHERE database = current_database()) t "
        "ORDER BY age_seconds DESC LIMIT %s")
    read_only_sql = "SET default_transaction_read_only = on"
    # On a hot standby: unknown (NULL) when no WAL receiver runs (cut off from its primary, or fed from an
    # archive only: everything received is replayed, yet that says nothing of what the primary wrote
    # since; any user sees whether the receiver's row is there), caught up (0) when everything received
    # is replayed, else the age of the last transaction replayed.  A server out of recovery takes writes
    # itself: no lag to speak of.
    replica_state_sql = ("SELECT pg_is_in_recovery() AS replicating, CASE WHEN NOT pg_is_in_recovery() THEN 0 "
                         "WHEN NOT EXISTS (SELECT 1 FROM pg_stat_wal_receiver) THEN NULL "
                         "WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0 "
                         "ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END AS lag")
    """Batches from COPY_FROM on are written with COPY after reserving ids: one transaction."""

    def __init__(self, url: str, *, prefix: str = "errands_") -> None:
        conninfo = checked_url(url)
        super().__init__(url, prefix=prefix)
        #: ``transaction``, ``session`` or None (direct), and where that was said (``errands doctor``).
        self.pooler, self.pooler_from = pooler_setting(url)
        #: A direct URL for the worker's LISTEN (None: the store's URL, or polling under ``transaction``).
        self.listen_url, self.listen_url_from = listen_url_setting(url)
        self._conninfo = conninfo
        if self.listen_url is not None:
            checked_url(self.listen_url, f"listen URL (from {self.listen_url_from}), PostgreSQL")
        #: Whether statements may be prepared on the server (never through a transaction pooler).
        self.prepares = self.pooler != "transaction"
        #: Where each worker's claims start while a claim from the start is costly (a pinned snapshot).
        self.claim_positions = ClaimPositions(self.open_transactions_sql)

    def ids_match(self, ids: Sequence[int]) -> tuple[str, list[Any]]:
        """One ``bigint[]`` parameter sent as its text literal, made in C by ``str.join``: psycopg's
        dump of a list of ints costs about 1 µs per element (it looks up a dumper for each), most
        of a plain success's settle (issue 29).  ``int.__repr__`` accepts ints only (a TypeError for
        anything else), so the literal holds nothing but digits, signs and commas."""
        return "id = ANY(%s::bigint[])", ["{" + ",".join(map(int.__repr__, ids)) + "}"]

    @property
    def channel(self) -> str:
        return f"{self.prefix}jobs"

    @property
    def listens(self) -> bool:
        """Whether workers get a LISTEN wake-up; False means they poll every ``--sleep`` when idle."""
        return self.listen_url is not None or self.pooler != "transaction"

    def listener(self) -> Listener | None:
        """LISTEN on ``listen_url`` when given, else on the store's URL, except through a transaction
        pooler: there no LISTEN would be heard, so None, and the worker's claim loop polls instead."""
        if not self.listens:
            return None
        target = self.listen_url or self.url
        try:
            return _NotifyListener(lambda: self._open(driver_url(target), listen=True), self.channel)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot LISTEN on {mask_url(target)}: {exc}") from exc

    def pool(self) -> Any:
        from .postgres_pool import PsycopgPool  # psycopg_pool is imported only by processes that pool

        return PsycopgPool(self.connect, self.pool_size, self.pool_timeout)

    def connect(self) -> psycopg.Connection[Any]:
        return self._open(self._conninfo)

    def _open(self, conninfo: str, *, listen: bool = False) -> psycopg.Connection[Any]:
        """An autocommit connection with no session state of errands' own.  Through a transaction
        pooler psycopg never prepares (a prepared statement belongs to one server connection, and
        the next transaction may get another); the listener's direct connection may."""
        named: dict[str, Any] = {} if "application_name" in conninfo else {"application_name": connection_label()}
        # The URL's own connect_timeout wins: libpq spends it on each host of a multi-host URL in turn,
        # so after a failover that left the first host unreachable (packets dropped, not refused) every
        # new connection waits that long before trying the next host.
        if "connect_timeout" not in conninfo:
            named["connect_timeout"] = CONNECT_TIMEOUT
        conn = psycopg.connect(conninfo, autocommit=True, **named)
        if not self.prepares and not listen:
            conn.prepare_threshold = None
        conn.adapters.register_loader("timestamptz", _ClampedTimestamptz)
        if self.read_only and self.pooler != "transaction":  # (through such a pooler a SET would not last)
            conn.execute(self.read_only_sql)
        return conn

    def begin(self, conn: Connection) -> None:
        _pg(conn).execute("BEGIN")

    def socket_of(self, conn: Connection) -> int | None:
        conn = _pg(conn)
        if conn.closed or conn.broken:
            return -1
        try:
            return int(conn.fileno())
        except psycopg.Error:
            return -1

    def classify(self, exc: BaseException, *, replica: bool = False) -> str | None:
        if isinstance(exc, _RETRYABLE):
            return RETRY
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return UNAVAILABLE
        if isinstance(exc, psycopg.Error):
            state = str(getattr(exc, "sqlstate", None) or "")
            if state == READ_ONLY:
                return FAIL if replica else UNAVAILABLE
            if state.startswith(("08", "57P")):
                return UNAVAILABLE
            if state in ("42P01", "3F000"):  # undefined_table; invalid_schema_name (a prefix's schema not there)
                return MISSING
            return FAIL
        return None

    def highest_id(self, cur: Cursor) -> int | None:
        # The sequence's last value (NULL before its first use): no table scan, and finished jobs count.
        cur.execute("SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence(%s, 'id')::regclass), 0)",
                    (self.t_jobs,))
        return int_or_none(scalar(cur))

    def to_datetime(self, value: Any) -> datetime:
        # timestamptz arrives aware, in the session's time zone (the server's ``timezone`` setting, PGTZ):
        # the same instant, read as UTC as every dialect's times are.
        moment: datetime = value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=timezone.utc)
        if not moment.utcoffset():
            return moment
        try:
            return moment.astimezone(timezone.utc)
        except OverflowError:  # within hours of Python's first or last date
            return FAR_PAST if moment.year == 1 else FAR_FUTURE

    def from_datetime(self, value: datetime) -> Any:
        if value.tzinfo is None:
            raise ConfigurationError("run_at must be an aware datetime (e.g. datetime.now(timezone.utc))")
        return value

    @contextmanager
    def migration_lock(self, conn: Connection) -> Iterator[None]:
        # Transaction-scoped: released at commit, so many processes may call migrate() at once.
        _pg(conn).execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.t_schema,))
        yield

    #: The schema, version by version: postgres_migrations.py.
    MIGRATIONS = postgres_migrations.MIGRATIONS

    # ------------------------------------------------------------------ feature statements
    def insert_one(self, cur: Cursor, sql: str, params: Sequence[Any]) -> int:
        cur.execute(sql + " RETURNING id", params)
        return int(scalar(cur))

    def after_insert(self, cur: Cursor, queues: set[str]) -> None:
        """Wake idle workers of ``queues`` when the caller's transaction commits (one statement).

        Jobs that use a feature (a kept result, a unique key, a batch...) skip the fast path's
        INSERT, which carries the wake-up: notify here, once per queue, or an idle worker would
        only find them at its next poll (--sleep).  Delivered at commit, like the fast path's."""
        if queues:
            cur.execute("SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", (self.channel, sorted(queues)))

    def epoch_sql(self, column: str) -> str:
        return f"EXTRACT(EPOCH FROM {column})"

    def after_unblock(self, cur: Cursor, children: Sequence[int]) -> None:
        # Idle workers learn at once that the next job of a chain is ready.
        cur.execute(self.q("SELECT DISTINCT queue FROM {jobs} WHERE id = ANY(%s)"), (list(children),))
        self.after_insert(cur, {queue for (queue,) in cur.fetchall()})

    def claim(self, cur: Cursor, owner: str, queue: str, limit: int, lease: float, *, spread: int = 0) -> list[Any]:
        # ``spread`` is ignored: claims here skip each other's rows and never lose at commit.
        # The claim commits without waiting for its WAL to reach the disk (synchronous_commit off,
        # for this statement's transaction only): that wait was most of an idle worker's pickup
        # time.  If the server crashes before the flush, the claim is undone and the job is simply
        # claimable again, which at-least-once delivery allows; the settle that follows commits
        # synchronously and so makes the claim durable too.
        # While a long transaction pins a snapshot and a claim from the start walks many dead index
        # entries, most claims start after this worker's last claimed job: claim_positions.py.
        positions = self.claim_positions
        position = positions.of(owner, queue)
        after = position.after(positions.clock()) if positions.held(cur) else None
        pick, pick_params = self.pick(queue, limit, after=after)
        started = positions.clock()
        cur.execute(self.q(
            "WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true)), "
            "picked AS (" + pick + " FOR UPDATE SKIP LOCKED) "
            "UPDATE {jobs} AS j SET reserved_by = %s, reserved_at = now(), "
            "reserved_until = now() + make_interval(secs => %s), attempts = j.attempts + 1 "
            "FROM picked, async WHERE j.id = picked.id RETURNING "
            + ", ".join("j." + c.strip() for c in CLAIM_COLUMNS.split(","))),
            (*pick_params, owner, float(lease)))
        rows = claim_order(cast(list[Any], cur.fetchall()))
        ended = positions.clock()
        position.claimed(rows, full=after is None, cost=ended - started, now=ended)
        return rows
