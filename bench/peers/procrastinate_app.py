"""procrastinate app for ``procrastinate --app procrastinate_app.app worker`` (database from BENCH_DB_URL)."""

from __future__ import annotations

import os

from common import mark

import procrastinate

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_DB_URL", "")))


@app.task(name="noop")
async def noop(stamp: float) -> None:
    mark(stamp)
