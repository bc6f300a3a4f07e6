"""PgQueuer worker factory ``pgqueuer_app:create`` (database from BENCH_DB_URL).

pgqueuer 1.6.0 wants the factory to be an async context manager.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from common import mark

from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["BENCH_DB_URL"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        mark(float(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await connection.close()
