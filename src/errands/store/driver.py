"""The store's edge with a database driver: what it asks of a cursor and a connection, and rows by name.

sqlite3, psycopg 3 and PyMySQL (and the cursor of a caller's own transaction, e.g. Django's) all
satisfy :class:`Cursor` and :class:`Connection` structurally; nothing here imports a driver.  Rows
are read by column name (:func:`fetch_rows`, :func:`fetch_row`), never by position: a statement's
select list and the code that reads it cannot fall out of step.  The one exception is a job row,
which the one decoder in :mod:`errands.core.rows` reads from the declared column order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, cast

Row = dict[str, Any]
"""One row, by column name (the name or ``AS`` alias in the select list)."""


class Cursor(Protocol):
    """A DB-API 2.0 cursor, as far as errands uses one."""

    @property
    def description(self) -> Any:
        """One sequence per column of the last result, its name first (None: no result)."""

    @property
    def rowcount(self) -> int: ...

    @property
    def connection(self) -> Any:
        """The connection this cursor belongs to (DB-API's optional extension, which all three
        drivers have): migrations take a lock on it."""

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, params: Iterable[Any], /) -> Any: ...

    def fetchone(self) -> Any:
        """The next row as a sequence, or None."""

    def fetchall(self) -> Sequence[Any]: ...

    def close(self) -> Any: ...


class Connection(Protocol):
    """A DB-API 2.0 connection in autocommit mode (a dialect's ``begin`` opens a transaction)."""

    def cursor(self) -> Any:
        """A new :class:`Cursor` (typed loosely: drivers overload it)."""

    def commit(self) -> Any: ...

    def rollback(self) -> Any: ...

    def close(self) -> Any: ...


def column_names(cur: Cursor) -> list[str]:
    """The names of the last result's columns, lower-cased (MySQL keeps an alias's case, PostgreSQL folds it)."""
    return [str(d[0]).lower() for d in cur.description or ()]


def fetch_rows(cur: Cursor) -> list[Row]:
    """Every row of the last result, by column name."""
    keys = column_names(cur)
    return [dict(zip(keys, values, strict=True)) for values in cur.fetchall()]


def fetch_row(cur: Cursor) -> Row | None:
    """The next row of the last result by column name, or None."""
    values = cur.fetchone()
    return None if values is None else dict(zip(column_names(cur), values, strict=True))


def last_row_id(cur: Cursor) -> int:
    """The id the last single-row INSERT on ``cur`` generated: ``lastrowid`` of sqlite3 and PyMySQL
    (this connection's own, so exact); psycopg has none, and PostgreSQL inserts say ``RETURNING id``."""
    return int(cast(Any, cur).lastrowid)


def first_column(cur: Cursor) -> list[Any]:
    """The one column of every row of the last result (ids a multi-row INSERT returned): a list
    built in C, where rows by name would cost a dict each (an enqueue of 500 jobs reads 500 ids)."""
    return [values[0] for values in cur.fetchall()]


def scalar(cur: Cursor) -> Any:
    """The single value of a one-row, one-column result (a count, a maximum, the clock); None if no row."""
    values = cur.fetchone()
    return None if values is None else values[0]
