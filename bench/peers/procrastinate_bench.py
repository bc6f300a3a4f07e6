"""procrastinate (PostgreSQL) under benchmark; run by bench/.venv-peers/bin/python.  One JSON line out."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peer  # noqa: E402
import common  # noqa: E402

CONCURRENCY = 10
SETTINGS = {
    "connector": "PsycopgConnector (psycopg 3 async pool)",
    "worker": f"procrastinate --app procrastinate_app.app --log-level warning worker --concurrency {CONCURRENCY} "
              "(PROCRASTINATE_WORKER_WAIT=0 for drains: exit once caught up), one process per copy",
    "task": "async def",
    "listen_notify": "on (default)",
    "delete_jobs": "never (default: finished jobs stay with status 'succeeded')",
    "enqueue": "noop.defer_async(stamp=...): one job per call",
    "bulk": f"noop.batch_defer_async(*[{{...}}] x {common.BULK_BATCH}): one call per batch",
}


def _app(url: str) -> Any:
    os.environ["BENCH_DB_URL"] = url
    from procrastinate_app import app, noop

    return app, noop


async def _install(app: Any) -> None:
    await app.schema_manager.apply_schema_async()


def _cmd(processes: int, url: str) -> list[str]:
    cmd = [os.path.join(_peer.BIN, "procrastinate"), "--app", "procrastinate_app.app", "--log-level", "warning",
           "worker", "--concurrency", str(CONCURRENCY)]
    return [sys.executable, os.path.join(_peer.PEERS, "multi.py"), str(processes), *cmd]


async def _bulk(noop: Any, n: int) -> None:
    done = 0
    while done < n:
        k = min(common.BULK_BATCH, n - done)
        await noop.batch_defer_async(*[{"stamp": 0.0} for _ in range(k)])
        done += k


def enqueue(args: Any) -> dict[str, Any]:
    app, noop = _app(args.db_url)

    async def go() -> dict[str, Any]:
        async with app.open_async():
            await _install(app)
            started = common.enqueue_clocks()
            for _ in range(args.jobs):
                await noop.defer_async(stamp=0.0)
            return common.enqueue_result(args.jobs, started)

    return asyncio.run(go())


def bulk(args: Any) -> dict[str, Any]:
    app, noop = _app(args.db_url)

    async def go() -> dict[str, Any]:
        async with app.open_async():
            await _install(app)
            started = common.enqueue_clocks()
            await _bulk(noop, args.jobs)
            return common.enqueue_result(args.jobs, started, batch=common.BULK_BATCH)

    return asyncio.run(go())


def drain(args: Any) -> dict[str, Any]:
    app, noop = _app(args.db_url)

    def prefill(n: int) -> None:
        async def go() -> None:
            async with app.open_async():
                await _install(app)
                await _bulk(noop, n)

        asyncio.run(go())

    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_DB_URL=args.db_url, PROCRASTINATE_WORKER_WAIT="0")
    return _peer.run_drain(args, _cmd(args.processes, args.db_url), env, prefill, collector)


def latency(args: Any) -> dict[str, Any]:
    app, noop = _app(args.db_url)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(app.open_async())
    try:
        loop.run_until_complete(_install(app))
        collector = common.Collector(args.workdir)
        env = _peer.worker_env(collector, BENCH_DB_URL=args.db_url)
        return _peer.run_latency(args, _cmd(args.processes, args.db_url), env,
                                 lambda stamp: loop.run_until_complete(noop.defer_async(stamp=stamp)), collector)
    finally:
        loop.run_until_complete(app.close_async())
        loop.close()


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS, "versions": _peer.versions("procrastinate", "psycopg", "psycopg-pool")}


if __name__ == "__main__":
    common.run_main("procrastinate", {"enqueue": enqueue, "bulk": bulk, "drain": drain, "latency": latency,
                                      "info": info}, __doc__ or "")
