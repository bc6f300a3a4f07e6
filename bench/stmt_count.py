"""Client-side statement and commit counting for bench/costs.py (standard library only; no change to errands).

``install()`` wraps the drivers errands uses so that every statement a process sends is appended as
one line (its first keyword) to the file named by ``BENCH_STATEMENTS``, and every write
transaction's commit as a ``+COMMIT`` line:

* psycopg 3: ``Cursor.execute`` / ``executemany`` / ``copy`` and ``Connection.commit``;
* PyMySQL: ``Cursor.execute`` (its ``executemany`` goes through it) and ``Connection.commit`` / ``begin``;
* sqlite3: ``sqlite3.connect`` returns connections with a trace callback (the C types cannot be wrapped).

A commit is counted client-side as an explicit ``COMMIT`` (statement or ``commit()`` call) after a
write, or a write statement (INSERT, UPDATE, DELETE, REPLACE, WITH ... UPDATE) sent outside an
explicit transaction (autocommit): read-only transactions are not counted.  PostgreSQL's own count
(``pg_stat_database.xact_commit``, every transaction) is reported beside it by bench/costs.py.
Costs a ``write`` system call per statement: these runs are for counting, never for timing.
"""

from __future__ import annotations

import os
import threading
from typing import Any

ENV = "BENCH_STATEMENTS"
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_state = threading.local()
_fds: dict[tuple[int, str], int] = {}


def _emit(line: str) -> None:
    key = (os.getpid(), os.environ[ENV])  # a forked child opens its own
    fd = _fds.get(key)
    if fd is None:
        fd = _fds[key] = os.open(key[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (line + "\n").encode())


def _tx(conn: Any) -> dict[str, bool]:
    key = id(conn)
    txs = getattr(_state, "txs", None)
    if txs is None:
        txs = _state.txs = {}
    return txs.setdefault(key, {"open": False, "wrote": False})


def verb_of(sql: Any) -> tuple[str, bool]:
    """(first keyword, whether the statement writes) of one statement's text."""
    text = sql.decode() if isinstance(sql, bytes) else str(sql)
    words = text.lstrip(" (\n").split(None, 1)
    verb = words[0].upper() if words else "?"
    upper = text.upper()
    writes = verb in WRITES or (verb == "WITH" and any(f" {w} " in upper for w in WRITES)) or verb == "COPY"
    return verb, writes


def note(conn: Any, sql: Any) -> None:
    """Count one statement sent on ``conn`` (and the commit it implies, if any)."""
    verb, writes = verb_of(sql)
    _emit(verb)
    tx = _tx(conn)
    if verb in ("BEGIN", "START"):
        tx["open"], tx["wrote"] = True, False
    elif verb in ("COMMIT", "END"):
        committed(conn)
    elif verb == "ROLLBACK":
        tx["open"] = tx["wrote"] = False
    elif writes:
        if tx["open"]:
            tx["wrote"] = True
        else:
            _emit("+COMMIT")


def committed(conn: Any) -> None:
    tx = _tx(conn)
    if tx["wrote"]:
        _emit("+COMMIT")
    tx["open"] = tx["wrote"] = False


def _wrap_psycopg() -> None:
    try:
        import psycopg
    except ImportError:
        return
    cur_cls, conn_cls = psycopg.Cursor, psycopg.Connection
    execute, executemany, copy, commit = cur_cls.execute, cur_cls.executemany, cur_cls.copy, conn_cls.commit

    def _execute(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        _pg_note(self.connection, query)
        return execute(self, query, *a, **k)

    def _executemany(self: Any, query: Any, *a: Any, **k: Any) -> Any:
        _pg_note(self.connection, query)
        return executemany(self, query, *a, **k)

    def _copy(self: Any, statement: Any, *a: Any, **k: Any) -> Any:
        _pg_note(self.connection, "COPY")
        return copy(self, statement, *a, **k)

    def _commit(self: Any) -> Any:
        committed(self)
        return commit(self)

    cur_cls.execute, cur_cls.executemany, cur_cls.copy = _execute, _executemany, _copy  # type: ignore[method-assign]
    conn_cls.commit = _commit  # type: ignore[method-assign]


def _pg_note(conn: Any, query: Any) -> None:
    # Outside autocommit psycopg opens a transaction itself: the first statement begins it.
    if not conn.autocommit and not _tx(conn)["open"]:
        _tx(conn)["open"] = True
    text = query.as_string(conn) if hasattr(query, "as_string") else query
    note(conn, text)


def _wrap_pymysql() -> None:
    try:
        import pymysql.connections
        import pymysql.cursors
    except ImportError:
        return
    cur_cls, conn_cls = pymysql.cursors.Cursor, pymysql.connections.Connection
    execute, commit, begin = cur_cls.execute, conn_cls.commit, conn_cls.begin

    def _execute(self: Any, query: Any, args: Any = None) -> Any:
        conn = self.connection
        if not conn.get_autocommit() and not _tx(conn)["open"]:
            _tx(conn)["open"] = True
        note(conn, query)
        return execute(self, query, args)

    def _commit(self: Any) -> Any:
        _emit("COMMIT")
        committed(self)
        return commit(self)

    def _begin(self: Any) -> Any:
        note(self, "BEGIN")
        return begin(self)

    cur_cls.execute, conn_cls.commit, conn_cls.begin = _execute, _commit, _begin


def _wrap_sqlite() -> None:
    import sqlite3

    connect = sqlite3.connect
    if getattr(connect, "_counted", False):
        return

    def counted_connect(*a: Any, **k: Any) -> Any:
        conn = connect(*a, **k)
        marker = object()  # one transaction state per connection
        conn.set_trace_callback(lambda sql: note(marker, sql))
        return conn

    counted_connect._counted = True  # type: ignore[attr-defined]
    sqlite3.connect = counted_connect  # type: ignore[assignment]


def install() -> None:
    """Count from now on in this process (and in processes it forks) when ``BENCH_STATEMENTS`` is set."""
    if not os.environ.get(ENV):
        return
    _wrap_psycopg()
    _wrap_pymysql()
    _wrap_sqlite()


def read(path: str) -> dict[str, int]:
    """The counts in a ``BENCH_STATEMENTS`` file: keyword -> statements, ``+COMMIT`` -> write commits."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            for line in f:
                key = line.strip()
                if key:
                    out[key] = out.get(key, 0) + 1
    except FileNotFoundError:
        pass
    return out
