"""The shared connection pool on PostgreSQL: ``psycopg_pool.ConnectionPool`` behind errands' Pool.

Connections are opened by the dialect's own ``connect`` (the same settings as a thread's
connection), on demand (``min_size=0``: a worker whose jobs never touch the database opens none)
and closed again after ten idle minutes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import psycopg

from ...core.extras import MissingExtra
from ..driver import Connection
from ..pool import PoolExhausted

try:
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtra("PostgreSQL connection pooling (psycopg_pool)", "postgres", exc) from exc

_SLICE = 0.1
"""A borrower waits in slices this long, so that a failed connect ends its wait at once."""
_NAME = "errands"


def _not_our_failed_connect(record: logging.LogRecord) -> bool:
    """psycopg_pool logs every failed connect at WARNING; the borrower waiting for that connection
    is handed the same failure (:meth:`PsycopgPool.get`), and says it in its own words (the command
    line's error, the worker's "database unavailable" line), so the pool's line said the cause a
    second time.  Only errands' own pool is quieted: an application's pools keep their warnings."""
    return not (record.msg == "error connecting in %r: %s" and isinstance(record.args, tuple)
                and record.args[:1] == (_NAME,))


logging.getLogger("psycopg.pool").addFilter(_not_our_failed_connect)


class _Opened(psycopg.Connection):
    """psycopg_pool opens connections through ``connection_class.connect``: this one hands the
    call to errands' dialect (passed in the pool's kwargs), which sets autocommit, timeouts and loaders."""

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Any:
        return kwargs["errands_connect"]()


class PsycopgPool:
    """errands' :class:`~errands.store.pool.Pool` over ``psycopg_pool``."""

    def __init__(self, connect: Callable[[], Any], size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self._connect = connect
        self._failed: tuple[float, BaseException] | None = None
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] = ConnectionPool(
            connection_class=_Opened, kwargs={"errands_connect": self._connect_noting}, min_size=0, max_size=size,
            timeout=timeout, open=True, name=_NAME, num_workers=1, reconnect_timeout=max(timeout, 5.0))

    def _connect_noting(self) -> Any:
        """The dialect's connect; a failure is noted, so that borrowers waiting for this
        connection fail at once with the server's reason instead of after the pool's timeout."""
        try:
            return self._connect()
        except BaseException as exc:
            with self._lock:
                self._failed = (time.monotonic(), exc)
            raise

    def get(self) -> Connection:
        start = time.monotonic()
        deadline = start + self.timeout
        while True:
            try:
                conn: Connection = self._pool.getconn(timeout=max(0.001, min(_SLICE, deadline - time.monotonic())))
                return conn
            except PoolTimeout:
                failed = self._failed
                if failed is not None and failed[0] >= start:
                    raise failed[1] from None
                if time.monotonic() >= deadline:
                    raise PoolExhausted(f"all {self.size} pooled connections stayed busy for "
                                        f"{self.timeout:g}s") from None

    def put(self, conn: Connection) -> None:
        self._pool.putconn(cast("psycopg.Connection[Any]", conn))

    def discard(self, conn: Connection) -> None:
        """Closed, then given back: psycopg_pool drops a closed connection and frees its place."""
        try:
            conn.close()
        finally:
            self._pool.putconn(cast("psycopg.Connection[Any]", conn))

    def close(self) -> None:
        self._pool.close(timeout=1.0)
