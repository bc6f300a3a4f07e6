"""A database clock that a test can stop and move: delays, retries' backoff and cron slots on demand.

errands compares every time in SQL against the database's own clock (``{now}`` in the store's
statements), never the host's.  On the temporary SQLite database of :mod:`errands.testing` that
clock is a :class:`DatabaseClock`: each connection registers it as the SQL function that ``{now}``
calls (``SQLiteDialect(clock=...)``), so freezing it freezes what every statement of that store
sees, the worker's claims and the scheduler's slots included, and nothing else in the process.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

__all__ = ["DatabaseClock"]


class DatabaseClock:
    """The time errands' SQL sees: the real time until :meth:`freeze`, moved only by :meth:`advance`.

    ``advance`` works on a running clock too (it then runs on, that far ahead).  Naive datetimes
    are read as UTC.  Safe to read from worker threads while the test moves it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frozen_at: float | None = None
        self._offset = 0.0

    def epoch(self) -> float:
        """Seconds since 1970, UTC: what ``{now}`` returns (called by SQLite for every statement)."""
        frozen = self._frozen_at
        return frozen if frozen is not None else time.time() + self._offset

    def now(self) -> datetime:
        """The clock's time as an aware UTC datetime."""
        return datetime.fromtimestamp(self.epoch(), timezone.utc)

    @property
    def frozen(self) -> bool:
        return self._frozen_at is not None

    def freeze(self, at: datetime | str | None = None) -> datetime:
        """Stop the clock, at ``at`` (a datetime or an ISO 8601 string) or where it stands; returns the time."""
        with self._lock:
            self._frozen_at = self.epoch() if at is None else _epoch(at)
        return self.now()

    def advance(self, by: float | timedelta) -> datetime:
        """Move the clock forward by ``by`` seconds (or a timedelta); returns the new time."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if not seconds >= 0:
            raise ValueError(f"a database clock only moves forward, got {by!r}")
        with self._lock:
            if self._frozen_at is not None:
                self._frozen_at += seconds
            else:
                self._offset += seconds
        return self.now()

    def unfreeze(self) -> None:
        """Let the clock run again from where it stands (it stays ahead of the real time by as much)."""
        with self._lock:
            if self._frozen_at is not None:
                self._offset = self._frozen_at - time.time()
                self._frozen_at = None

    def __repr__(self) -> str:
        return f"<DatabaseClock {'frozen at' if self.frozen else 'running,'} {self.now().isoformat()}>"


def _epoch(at: datetime | str) -> float:
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    if not isinstance(when, datetime):
        raise TypeError(f"freeze() takes a datetime or an ISO 8601 string, got {at!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()
