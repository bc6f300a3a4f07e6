"""Huey with SQLite storage for ``huey_consumer huey_app.huey`` (file from BENCH_DB_PATH)."""

from __future__ import annotations

import os

from common import mark

from huey import SqliteHuey

# results=False: a no-op returns nothing worth storing.  fsync=False: huey's documented default and its
# throughput setting (PRAGMA synchronous=OFF); errands runs SQLite with synchronous=NORMAL.
huey = SqliteHuey("bench", filename=os.environ.get("BENCH_DB_PATH", "huey-bench.db"), results=False, fsync=False)


@huey.task()
def noop(stamp: float) -> None:
    mark(stamp)
