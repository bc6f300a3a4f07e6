"""PgQueuer (PostgreSQL) under benchmark; run by bench/.venv-peers/bin/python.  One JSON line out."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peer  # noqa: E402
import common  # noqa: E402

BATCH_SIZE = 10
SETTINGS = {
    "driver": "asyncpg (AsyncpgDriver) on uvloop, as `pgq run` does",
    "worker": f"pgqueuer.run(factory, batch_size={BATCH_SIZE}, mode=drain|continuous) on uvloop, log level "
              "WARNING: the code of `pgq run` (whose CLI fails in 1.6.0 with the current typer), one per process",
    "entrypoint": "async def, concurrency_limit 0 (unlimited)",
    "tables": "installed with Queries.install(), default durability (logged tables)",
    "wake-up": "LISTEN/NOTIFY (default), dequeue_timeout 30 s fallback",
    "enqueue": "Queries.enqueue('noop', payload): one statement per job",
    "bulk": f"Queries.enqueue([...] x {common.BULK_BATCH}, ...): one statement per batch",
}


async def _queries(url: str) -> Any:
    import asyncpg

    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(url)
    return conn, Queries(AsyncpgDriver(conn))


async def _install(url: str) -> None:
    conn, q = await _queries(url)
    await q.install()
    await conn.close()


def _cmd(processes: int, drain: bool) -> list[str]:
    cmd = [sys.executable, os.path.join(_peer.PEERS, "pgqueuer_worker.py"), str(BATCH_SIZE),
           "drain" if drain else "continuous"]
    return [sys.executable, os.path.join(_peer.PEERS, "multi.py"), str(processes), *cmd]


def enqueue(args: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        await _install(args.db_url)
        conn, q = await _queries(args.db_url)
        started = common.enqueue_clocks()
        for _ in range(args.jobs):
            await q.enqueue("noop", b"0")
        result = common.enqueue_result(args.jobs, started)
        await conn.close()
        return result

    return asyncio.run(go())


async def _bulk(q: Any, n: int) -> None:
    done = 0
    while done < n:
        k = min(common.BULK_BATCH, n - done)
        await q.enqueue(["noop"] * k, [b"0"] * k, [0] * k)
        done += k


def bulk(args: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        await _install(args.db_url)
        conn, q = await _queries(args.db_url)
        started = common.enqueue_clocks()
        await _bulk(q, args.jobs)
        result = common.enqueue_result(args.jobs, started, batch=common.BULK_BATCH)
        await conn.close()
        return result

    return asyncio.run(go())


def drain(args: Any) -> dict[str, Any]:
    asyncio.run(_install(args.db_url))

    def prefill(n: int) -> None:
        async def go() -> None:
            conn, q = await _queries(args.db_url)
            await _bulk(q, n)
            await conn.close()

        asyncio.run(go())

    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_DB_URL=args.db_url)
    return _peer.run_drain(args, _cmd(args.processes, drain=True), env, prefill, collector)


def latency(args: Any) -> dict[str, Any]:
    asyncio.run(_install(args.db_url))
    loop = asyncio.new_event_loop()
    conn, q = loop.run_until_complete(_queries(args.db_url))
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_DB_URL=args.db_url)
    try:
        return _peer.run_latency(args, _cmd(args.processes, drain=False), env,
                                 lambda stamp: loop.run_until_complete(q.enqueue("noop", repr(stamp).encode())),
                                 collector)
    finally:
        loop.run_until_complete(conn.close())
        loop.close()


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS, "versions": _peer.versions("pgqueuer", "asyncpg", "uvloop")}


if __name__ == "__main__":
    common.run_main("pgqueuer", {"enqueue": enqueue, "bulk": bulk, "drain": drain, "latency": latency,
                                 "info": info}, __doc__ or "")
