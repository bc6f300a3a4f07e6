"""Storage backends: one verb-level interface, one module per database dialect."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..core.errors import ConfigurationError
from ..core.rows import ClaimedJob, FailedJobRow, JobRow, JobState, NewJob, QueueCounts, RecoveryReport, WorkerRow
from .base import SQLStore

__all__ = ["SQLStore", "open_store", "ClaimedJob", "FailedJobRow", "JobRow", "JobState", "NewJob", "QueueCounts",
           "RecoveryReport", "WorkerRow"]

SCHEMES = {
    "sqlite": "sqlite",
    "postgres": "postgres", "postgresql": "postgres", "postgresql+psycopg": "postgres",
    "mysql": "mysql", "mariadb": "mysql", "mysql+pymysql": "mysql",
}


def open_store(url: str, *, prefix: str = "errands_") -> SQLStore:
    """Pick the dialect from the URL scheme; drivers are imported only when used."""
    scheme = urlsplit(url).scheme.lower()
    kind = SCHEMES.get(scheme)
    if kind == "sqlite":
        from .sqlite import SQLiteStore

        return SQLiteStore(url, prefix=prefix)
    if kind == "postgres":
        from .postgres import PostgresStore

        return PostgresStore(url, prefix=prefix)
    if kind == "mysql":
        from .mysql import MySQLStore

        return MySQLStore(url, prefix=prefix)
    raise ConfigurationError(f"unsupported database URL scheme {scheme!r} in {url!r}; use sqlite:///file.db, "
                             "postgresql://host/db or mysql://user@host/db")
