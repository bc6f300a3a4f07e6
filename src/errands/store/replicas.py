"""Read replicas: the one place that decides whether a read that may be a little old goes to the replica.

An app with ``read_url`` (or ``?read_url=`` in its database URL) holds two stores: the primary, which
every claim, settle, enqueue, operator action, schema check and read-your-own-writes goes to, and a
read-only store on the replica (:func:`open_store` with ``read_only=True``: sessions set read-only,
no write, no migration, no repair).  The services ask ``app.reads`` for the reads a person or a
scraper looks at (the dashboard's lists and figures, ``errands status``, ``/metrics``, the backlog);
``app.reads`` asks the :class:`ReadRouter` here, which answers with the replica while it answers and
lags at most ``read_max_lag`` seconds, and with the primary otherwise.

The router looks at the replica at most every :data:`CHECK_EVERY` seconds (one statement: the
dialect's :meth:`~errands.store.dialects.base.Dialect.replica_state`) and keeps the answer; a replica
found down (or lost in the middle of a read) is not tried again before a back-off that doubles from
:data:`DOWN_BACKOFF_FIRST` to :data:`DOWN_BACKOFF_MOST` seconds, so no request pays a connection
attempt to a replica known to be down.  Only one thread looks at a time; the others use the last answer.
A statement that finds the replica gone between two looks runs again on the primary
(``Database.fallback``): the page that was being read still answers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..core.config import mask_url
from ..core.errors import ConfigurationError, StoreError
from ..core.payload import safe_text
from . import open_store
from .composed import Store
from .dialects.base import url_option
from .registry import by_scheme

_OWN_WRITES: ContextVar[bool] = ContextVar("errands_reads_own_writes", default=False)
"""Set by :meth:`ReadRouter.own_writes`: the reads of this context go to the primary."""

CHECK_EVERY = 2.0
"""Seconds between two looks at a replica's lag (one short statement on the replica)."""
DOWN_BACKOFF_FIRST = 1.0
"""Seconds before a replica found down is tried again; doubled at each failure up to DOWN_BACKOFF_MOST."""
DOWN_BACKOFF_MOST = 30.0

UP, LAGGING, UNKNOWN, DOWN, PENDING, NONE = "replica", "lagging", "unknown lag", "down", "not checked", "none"
AFTER_CHANGE = "after a change"
"""Why the reads go where they go (:attr:`ReadSource.state`)."""


@dataclass(frozen=True)
class ReadSource:
    """Where the reads that may be a little old go now, and why: the dashboard's and ``errands status``' line."""

    state: str
    """UP (the replica), or why the primary: LAGGING, UNKNOWN, DOWN, PENDING, NONE (no replica configured),
    AFTER_CHANGE (the reads of a block under :meth:`ReadRouter.own_writes`)."""
    lag: float | None = None
    """The replica's lag in seconds when it was last looked at (None: unknown or not looked at)."""
    bound: float | None = None
    """``read_max_lag``."""
    detail: str = ""
    """What went wrong, for a replica that is down (the database's message)."""
    replica_url: str | None = None
    """The replica's URL, its password masked."""

    @property
    def replica(self) -> bool:
        """Whether the reads go to the replica."""
        return self.state == UP

    def describe(self) -> str:
        """One line: ``reads: replica, lag 0.2 s`` or why the reads go to the primary."""
        if self.state == NONE:
            return "reads: primary (no read replica configured)"
        if self.state == UP:
            return f"reads: replica, lag {self.lag or 0.0:.1f} s"
        if self.state == LAGGING:
            return f"replica lags {self.lag or 0.0:.0f} s (bound {self.bound:g} s): reading from the primary"
        if self.state == UNKNOWN:
            return "replica's lag unknown (replication stopped?): reading from the primary"
        if self.state == DOWN:
            return "replica down: reading from the primary"
        if self.state == AFTER_CHANGE:
            return "reads: primary (just after a change, which the replica may not show yet)"
        return "replica not checked yet: reading from the primary"

    def to_json(self) -> dict[str, Any]:
        return {"source": "replica" if self.replica else "primary", "state": self.state, "lag_seconds": self.lag,
                "max_lag_seconds": self.bound, "replica": self.replica_url, "detail": self.detail,
                "line": self.describe()}


def check_replica_url(primary_url: str, read_url: str) -> None:
    """Refuse a replica the primary's backend cannot have: another kind of database, or SQLite."""
    primary = by_scheme(urlsplit(primary_url).scheme)
    replica = by_scheme(urlsplit(read_url).scheme)
    if primary is not None and primary.name == "sqlite":
        raise ConfigurationError("read_url: SQLite has no read replicas (one file, one process writing): "
                                 "remove read_url (ERRANDS_READ_URL, ?read_url=) or use PostgreSQL or MySQL")
    if replica is None or (primary is not None and replica.name != primary.name):
        raise ConfigurationError(f"read_url {mask_url(read_url)!r} must be a replica of the same kind of "
                                 f"database as {mask_url(primary_url)!r}")


def configured_read_url(database_url: str, read_url: str | None) -> str | None:
    """The read replica's URL: ``?read_url=`` in the database URL, else the ``read_url`` option; checked
    (:func:`check_replica_url`), None when neither is given."""
    chosen = url_option(database_url, "read_url") or read_url or None
    if chosen is not None:
        check_replica_url(database_url, chosen)
    return chosen


class ReadRouter:
    """Chooses the store of the stale-tolerant reads (see the module docstring)."""

    def __init__(self, primary: Store, replica_url: str | None, max_lag: float, *,
                 clock: Callable[[], float] = time.monotonic,
                 open_replica: Callable[[str], Store] | None = None) -> None:
        self.primary = primary
        self.replica_url = replica_url
        self.max_lag = float(max_lag)
        self._clock = clock
        self._open = open_replica or (lambda url: _open_replica(url, primary.prefix))
        self._replica: Store | None = None
        self._masked = None if replica_url is None else mask_url(replica_url)
        self._state = ReadSource(NONE if replica_url is None else PENDING, bound=self.max_lag,
                                 replica_url=self._masked)
        self._next_check = 0.0
        self._backoff = DOWN_BACKOFF_FIRST
        self._checking = threading.Lock()
        self._opening = threading.Lock()
        if replica_url is not None:
            check_replica_url(primary.url, replica_url)

    @contextmanager
    def own_writes(self) -> Iterator[None]:
        """Send the reads of this block (this request, and the threads it hands work to: a context
        variable) to the primary: the caller changed something moments ago and must see it."""
        token = _OWN_WRITES.set(True)
        try:
            yield
        finally:
            _OWN_WRITES.reset(token)

    def store(self) -> Store:
        """The store for a read that may be a little old: the replica's when it is up and close enough."""
        source = self.source()
        if source.replica and self._replica is not None:
            return self._replica
        return self.primary

    def source(self) -> ReadSource:
        """Where those reads go now; looks at the replica first when the last look is old enough (only
        one thread looks: the others use the last answer meanwhile)."""
        if self.replica_url is not None and _OWN_WRITES.get():
            return ReadSource(AFTER_CHANGE, self._state.lag, self.max_lag, replica_url=self._masked)
        if self.replica_url is not None and self._clock() >= self._next_check \
                and self._checking.acquire(blocking=False):
            try:
                self._look()
            finally:
                self._checking.release()
        return self._state

    def refresh(self) -> ReadSource:
        """Look at the replica now, whatever the last look said (``errands doctor``, tests)."""
        if self.replica_url is None:
            return self._state
        with self._checking:
            self._look()
        return self._state

    def replica_store(self) -> Store | None:
        """The replica's store (opened on first use, no connection yet); None without a replica."""
        if self.replica_url is None:
            return None
        with self._opening:
            if self._replica is None:
                replica = self._open(self.replica_url)
                replica.db.on_unavailable = self._lost
                replica.db.fallback = self.primary.db
                self._replica = replica
        return self._replica

    def _look(self) -> None:
        replica = self.replica_store()
        assert replica is not None
        try:  # on the replica itself, never its fallback: the schema it holds, then its state
            replica.db.ensure_schema()
            state = replica.db.run_unchecked(replica.dialect.replica_state)
        except StoreError as exc:
            self._down(safe_text(exc, 300))
            return
        self._backoff = DOWN_BACKOFF_FIRST
        self._next_check = self._clock() + CHECK_EVERY
        if state.lag is None:
            verdict = UNKNOWN
        elif state.lag > self.max_lag:
            verdict = LAGGING
        else:
            verdict = UP
        self._state = ReadSource(verdict, state.lag, self.max_lag, replica_url=self._masked)

    def _down(self, detail: str) -> None:
        self._state = ReadSource(DOWN, None, self.max_lag, detail, self._masked)
        self._next_check = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, DOWN_BACKOFF_MOST)

    def _lost(self) -> None:
        """A read on the replica found it unreachable: the next reads go to the primary at once (the
        back-off grows only from the looks)."""
        if self._state.state == UP:
            self._state = ReadSource(DOWN, None, self.max_lag, "lost in the middle of a read", self._masked)
            self._next_check = self._clock() + self._backoff

    def close(self) -> None:
        if self._replica is not None:
            self._replica.close()


def _open_replica(url: str, prefix: str) -> Store:
    return open_store(url, prefix=prefix, read_only=True)


__all__ = ["ReadRouter", "ReadSource", "check_replica_url", "configured_read_url"]
