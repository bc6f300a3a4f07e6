"""The one insert path of job rows, made from the job shape; a dialect's faster bulk forms override it.

Every enqueue writes its rows here (:meth:`JobInserts.insert_jobs`): one job takes the single-row
statement, more take multi-row INSERTs, and a dialect subclass adds the bulk form its database is
fastest with (PostgreSQL's ``unnest`` and binary ``COPY``, MySQL's rows rendered once per distinct
rest of a row).  Each variant takes its columns from one :class:`InsertShape`, made from
:mod:`errands.core.columns`: a column declared there is written by all of them or by none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol

from ...core.columns import INSERTED, PLAIN_INSERTED, Column, Fill, Kind, names
from ...core.rows import NewJob, all_plain
from ..driver import Cursor, first_column, last_row_id, scalar

INSERT_CHUNK = 500
"""Most rows one multi-row INSERT carries (a driver takes at most 65,535 parameters)."""
_RUN_AT = itemgetter(NewJob._fields.index("run_at"))
TIME_FIELDS = tuple(c.name for c in INSERTED if c.fill is Fill.FIELD and c.kind is Kind.TIME)
"""Times a NewJob carries as aware datetimes (``expires_at``, ``deadline_at``), stored in each dialect's form."""


class Templates(Protocol):
    """What inserting needs of a dialect: its templates and its way of storing a time."""

    def q(self, template: str) -> str: ...

    def from_datetime(self, value: datetime) -> Any: ...

    def to_datetime(self, value: Any) -> datetime: ...


class InsertShape:
    """The job columns one INSERT writes, in statement order, and how each job's values are read.

    Made from :mod:`errands.core.columns`: the columns filled from a NewJob field come first (read
    with one ``itemgetter``, in C), then those the statement computes (0, the clock, the due time,
    whose two parameters come last).  A batch of plain jobs writes ``PLAIN``, the columns every job
    has; a batch with any feature writes ``FULL``.  Every dialect's insert variants (one row,
    multi-row, ``unnest``, ``COPY``, MySQL's bulk form) take their columns from a shape, so a new
    column is written by all of them or by none."""

    def __init__(self, key: str, columns: tuple[Column, ...]) -> None:
        self.key = key
        self.fields = tuple(c for c in columns if c.fill is Fill.FIELD)
        self.computed = tuple(c for c in columns if c.fill is not Fill.FIELD)
        self.columns = self.fields + self.computed
        self.names = names(self.columns)
        at = [NewJob._fields.index(c.name) for c in self.fields]
        self.values: Callable[[NewJob], tuple[Any, ...]] = itemgetter(*at)
        """The job's values for ``fields``, in order."""
        self.values_and_due: Callable[[NewJob], tuple[Any, ...]] = itemgetter(
            *at, NewJob._fields.index("run_at"), NewJob._fields.index("delay"))
        """The same, then the due time's parameters as the job holds them (run_at, delay)."""

    def params(self, jobs: Sequence[NewJob], store_time: Callable[[datetime], Any]) -> list[Any]:
        """The parameters of a multi-row INSERT of ``jobs``, row after row: made in C, then each
        ``run_at`` given (few jobs have one) turned into the dialect's stored form."""
        out = list(chain.from_iterable(map(self.values_and_due, jobs)))
        if any(map(_RUN_AT, jobs)):
            width = len(self.fields) + 2
            for i in range(len(self.fields), len(out), width):
                if out[i] is not None:
                    out[i] = store_time(out[i])
        return out

    def index(self, name: str) -> int:
        """The position of field column ``name`` in :attr:`values`."""
        return next(i for i, c in enumerate(self.fields) if c.name == name)


PLAIN = InsertShape("plain", PLAIN_INSERTED)
FULL = InsertShape("full", INSERTED)


def shape_of(jobs: Sequence[NewJob]) -> InsertShape:
    """The columns a batch's insert writes: only the plain ones unless some job uses a feature."""
    return PLAIN if all_plain(jobs) else FULL


def due_now(j: NewJob) -> bool:
    return j.run_at is None and not j.delay


class JobInserts:
    """The job rows of one dialect, written as :meth:`insert_jobs` says (see the module docstring)."""

    def __init__(self, d: Templates) -> None:
        self.d = d
        self._sql: dict[str, str] = {}
        """Statements by shape, variant and row count, made once."""

    def head(self, shape: InsertShape) -> str:
        """``INSERT INTO jobs (columns) VALUES `` for a shape (its rows follow)."""
        return self.d.q("INSERT INTO {jobs} (" + shape.names + ") VALUES ")

    def row(self, shape: InsertShape, *, now: bool = False) -> str:
        """One row of a shape's VALUES: a placeholder per field column, then the computed ones.  ``now``:
        the job is due now, which the clock alone says (its due time takes no parameters then)."""
        return self.d.q("(" + ", ".join(["{p}"] * len(shape.fields) + [self.fill_sql(c.fill, now=now)
                                                                      for c in shape.computed]) + ")")

    def fill_sql(self, fill: Fill | None, *, now: bool = False) -> str:
        """The SQL template of a computed column's value at enqueue."""
        if fill is Fill.ZERO:
            return "0"
        if fill is Fill.NOW or (fill is Fill.DUE and now):
            return "{now}"
        if fill is Fill.DUE:
            return "COALESCE({p}, {now_plus})"
        raise ValueError(f"no SQL fills a column with {fill!r}")

    def due_params(self, j: NewJob) -> tuple[Any, float]:
        """The due time's parameters: ``run_at`` as stored (None: not given) and ``delay``."""
        return None if j.run_at is None else self.d.from_datetime(j.run_at), float(j.delay)

    def stored_times(self, cur: Cursor, jobs: Sequence[NewJob]) -> Sequence[NewJob]:
        """``jobs`` with their :data:`TIME_FIELDS` in the dialect's stored form (only a batch of the
        full shape can hold any; most hold none and are returned as they are).  A number there is
        seconds after now by the database's clock, read once for the batch."""
        if not any(getattr(j, name) is not None for j in jobs for name in TIME_FIELDS):
            return jobs
        now = None
        if any(isinstance(getattr(j, name), (int, float)) for j in jobs for name in TIME_FIELDS):
            cur.execute(self.d.q("SELECT {now}"))
            now = self.d.to_datetime(scalar(cur))

        def stored(value: datetime | float) -> Any:
            if not isinstance(value, datetime):
                assert now is not None
                value = now + timedelta(seconds=value)
            return self.d.from_datetime(value)

        return [j._replace(**{name: stored(getattr(j, name)) for name in TIME_FIELDS if getattr(j, name) is not None})
                for j in jobs]

    def _cached(self, key: str, make: Callable[[], str]) -> str:
        sql = self._sql.get(key)
        if sql is None:
            sql = self._sql[key] = make()
        return sql

    def insert_jobs(self, cur: Cursor, jobs: Sequence[NewJob], shape: InsertShape | None = None) -> list[int]:
        """Insert job rows, ids in input order: the one insert path of this dialect.

        Writes the columns of ``shape`` (by default :func:`shape_of` the jobs; a caller that knows it
        says so: the enqueue already asked whether the batch is plain), never a feature's side
        tables (those are :meth:`errands.store.steps.Steps.insert_rich`'s).  One job takes
        :meth:`insert_job`; more take multi-row INSERTs of at most INSERT_CHUNK rows (a driver
        takes at most 65,535 parameters), a trailing row alone the single-row path.  A dialect
        overrides this where the database has a faster bulk form, from the same shape."""
        shape = shape or shape_of(jobs)
        if shape is FULL:
            jobs = self.stored_times(cur, jobs)
        if len(jobs) == 1:
            return [self.one(cur, jobs[0], shape)]
        ids: list[int] = []
        for start in range(0, len(jobs), INSERT_CHUNK):
            chunk = jobs[start:start + INSERT_CHUNK]
            if len(chunk) == 1:
                ids.append(self.one(cur, chunk[0], shape))
                continue
            key = f"insert:{shape.key}:{len(chunk)}"
            sql = self._sql.get(key) or self._sql.setdefault(
                key, self.head(shape) + ", ".join([self.row(shape)] * len(chunk)))
            ids += self.returning_ids(cur, sql, shape.params(chunk, self.d.from_datetime), len(chunk))
        return ids

    def one(self, cur: Cursor, j: NewJob, shape: InsertShape) -> int:
        """The single enqueue, a web request's: one fixed statement per shape, and the driver's
        last-insert id (this connection's own, so exact) where RETURNING would cost SQLite a second
        pass.  A job due now says so with the clock alone: on SQLite the row's expressions are a
        measurable part of the 25 µs the statement takes."""
        if due_now(j):
            cur.execute(self._cached(f"insert1:{shape.key}:now", lambda: self.head(shape)
                                     + self.row(shape, now=True)), shape.values(j))
        else:
            cur.execute(self._cached(f"insert1:{shape.key}", lambda: self.head(shape)
                                     + self.row(shape)), (*shape.values(j), *self.due_params(j)))
        return last_row_id(cur)

    def returning_ids(self, cur: Cursor, sql: str, params: list[Any] | None, count: int) -> list[int]:
        """Run a multi-row INSERT and return the new ids, ascending."""
        cur.execute(sql + " RETURNING id", params)
        return sorted(map(int, first_column(cur)))
