"""Storage: a composed :class:`Store` over one database dialect, picked from the URL."""

from __future__ import annotations

from typing import Any

from ..core.config import mask_url
from ..core.endings import RecoveryReport
from ..core.errors import ConfigurationError
from ..core.rows import ClaimedJob, FailedJobRow, JobRow, JobState, NewJob, QueueCounts, WorkerRow
from .composed import Store
from .registry import by_scheme, dialect_class

__all__ = ["Store", "open_store", "ClaimedJob", "FailedJobRow", "JobRow", "JobState", "NewJob", "QueueCounts",
           "RecoveryReport", "WorkerRow"]


def open_store(url: str, *, prefix: str = "errands_", **options: Any) -> Store:
    """Pick the dialect from the URL scheme; drivers are imported only when used.

    ``options`` go to the dialect (MySQL: ``claim=``)."""
    scheme = url.partition(":")[0].lower() if ":" in url else ""  # (urlsplit could refuse the rest)
    backend = by_scheme(scheme)
    if backend is None:
        raise ConfigurationError(f"unsupported database URL scheme {scheme!r} in {mask_url(url)!r}; use "
                                 "sqlite:///file.db, postgresql://host/db or mysql://user@host/db")
    return Store(dialect_class(backend)(url, prefix=prefix, **options))
