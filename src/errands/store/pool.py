"""A small bounded pool of DB-API connections, shared by the threads that own no connection.

Runner threads of a worker (job code that enqueues), the dashboard, an in-process worker and
Django's threads borrow a connection for one ``Database.run`` call and give it back, so that a
worker holds a few connections whatever its concurrency (issue 13).  PostgreSQL uses
``psycopg_pool`` (:mod:`errands.store.dialects.postgres_pool`); SQLite and MySQL use
:class:`BoundedPool`: the well-kept generic pools (SQLAlchemy's, DBUtils) would add a dependency
to the core for what a ``deque`` and a counter do here.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from ..core.errors import ConfigurationError
from .driver import Connection

POOL_SIZE = 4
"""Connections the shared pool opens at most unless ``?pool_size=`` or ERRANDS_POOL_SIZE says otherwise."""
POOL_TIMEOUT = 30.0
"""Seconds a thread waits for a free pooled connection (``?pool_timeout=``, ERRANDS_POOL_TIMEOUT)."""
POOL_OPTIONS = ("pool_size", "pool_timeout")
"""URL query options errands reads itself and never passes to a driver."""


class PoolExhausted(Exception):
    """No pooled connection came free in time (the database maps it to StoreUnavailable)."""


class Pool(Protocol):
    """What :class:`~errands.store.database.Database` needs of a pool."""

    size: int

    def get(self) -> Connection:
        """A connection for one call; raises :class:`PoolExhausted` after the pool's timeout."""

    def put(self, conn: Connection) -> None:
        """Give ``conn`` back for the next borrower."""

    def discard(self, conn: Connection) -> None:
        """Close ``conn`` (found broken) and free its place."""

    def close(self) -> None:
        """Close every idle connection; borrowed ones are closed when given back."""


def pool_setting(url: str, environ: Mapping[str, str] | None = None) -> tuple[int, float]:
    """The pool's size and wait timeout: the URL's ``?pool_size=``/``?pool_timeout=``, else the
    ERRANDS_POOL_SIZE/ERRANDS_POOL_TIMEOUT variables, else 4 connections and 30 seconds."""
    env = os.environ if environ is None else environ
    options = parse_qs(urlsplit(url).query)
    values: list[float] = []
    for name, default, lowest in (("pool_size", POOL_SIZE, 1), ("pool_timeout", POOL_TIMEOUT, 0.001)):
        given = options.get(name)
        raw = given[0] if given else env.get("ERRANDS_" + name.upper())
        try:
            value = float(default if raw in (None, "") else raw)
        except ValueError:
            raise ConfigurationError(f"{name}={raw!r} is not a number") from None
        if value < lowest or (name == "pool_size" and value != int(value)):
            wanted = "a whole number of connections, at least 1" if lowest == 1 else "seconds, more than 0"
            raise ConfigurationError(f"{name}={raw!r}: expected {wanted}")
        values.append(value)
    return int(values[0]), values[1]


def connection_label(pid: int | None = None, host: str | None = None) -> str:
    """The name a connection gives the server where it can (PostgreSQL's ``application_name``, set
    when connecting, so no session state): ``errands <pid>@<host>``, which ``errands status`` and
    ``doctor`` match against the workers table to count each worker's connections."""
    pid = os.getpid() if pid is None else pid
    host = socket.gethostname() if host is None else host
    return f"errands {pid}@{host}"[:63]  # PostgreSQL keeps 63 bytes


class BoundedPool:
    """At most ``size`` connections opened by ``connect``, idle ones reused last-in first-out (the
    most recently used is the one least likely to have been timed out by the server).

    Borrowing an idle connection and giving it back take no lock: a ``deque``'s ``pop`` and
    ``append`` are atomic, and a single enqueue on SQLite is some 30 µs, of which a semaphore and a
    ``LifoQueue`` (two condition variables written in Python) took 3-4.  The lock and its condition
    are for the rare paths: opening a connection, and waiting while all ``size`` are lent.
    """

    def __init__(self, connect: Callable[[], Connection], size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self._connect = connect
        self._idle: deque[Connection] = deque()
        self._opened = 0
        """Connections that exist now, idle or lent (changed under the lock)."""
        self._waiting = 0
        """Threads waiting for a connection (changed under the lock)."""
        self._freed = threading.Condition(threading.Lock())
        self._closed = False

    def get(self) -> Connection:
        try:
            return self._idle.pop()
        except IndexError:
            pass
        deadline = time.monotonic() + self.timeout
        with self._freed:
            while True:
                if self._idle:
                    return self._idle.pop()
                if self._opened < self.size:
                    self._opened += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolExhausted(f"all {self.size} pooled connections stayed busy for {self.timeout:g}s")
                self._waiting += 1
                try:
                    self._freed.wait(left)
                finally:
                    self._waiting -= 1
        try:
            return self._connect()
        except BaseException:
            self._forget_one()
            raise

    def put(self, conn: Connection) -> None:
        """Back to the idle stack (closed instead once the pool is closed)."""
        if self._closed:
            self.discard(conn)
            return
        self._idle.append(conn)
        # A waiter counts itself under the lock before it looks at the idle stack, so either it
        # sees this connection there or it is counted here by now.
        if self._waiting:
            with self._freed:
                self._freed.notify()

    def discard(self, conn: Connection) -> None:
        try:
            _close(conn)
        finally:
            self._forget_one()

    def _forget_one(self) -> None:
        with self._freed:
            self._opened -= 1
            self._freed.notify()

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return
            self.discard(conn)


def _close(conn: Connection) -> None:
    try:
        conn.close()
    except Exception:  # best effort: a broken connection
        pass
