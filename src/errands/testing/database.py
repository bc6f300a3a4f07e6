"""An app on a temporary SQLite database with a clock of its own, for the length of a test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..app import Errands
from ..store import open_store
from .clock import DatabaseClock

__all__ = ["temporary_database"]


@contextmanager
def temporary_database(app: Errands, directory: str | os.PathLike[str]) -> Iterator[DatabaseClock]:
    """Point ``app`` (your own ``Errands`` object, jobs and all) at a new SQLite file in ``directory``
    for the block, with a :class:`DatabaseClock` as its database's clock; afterwards it points where
    it did before, with a fresh connection.

    The object is rebound rather than copied because your code enqueues through the app its job
    definitions belong to (``send_welcome.enqueue(...)``).  The file is real SQLite: the same SQL,
    transactions and constraints as production on SQLite, created by errands' own migrations."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path, n = folder / "errands.db", 1
    while path.exists():
        n += 1
        path = folder / f"errands-{n}.db"
    url = f"sqlite:///{path.resolve()}"
    clock = DatabaseClock()
    original, read_url = app.database_url, app.read_url
    app.close()
    store = open_store(url, prefix=app.table_prefix, clock=clock.epoch)
    app.read_url = None  # (a production replica, e.g. from ERRANDS_READ_URL, is no replica of this file)
    app.use_database(url, store=store)
    try:
        yield clock
    finally:
        store.close()
        app.read_url = read_url
        app.use_database(original)
