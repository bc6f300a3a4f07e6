"""dramatiq (Redis broker) under benchmark; run by bench/.venv-peers/bin/python.  One JSON line out."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peer  # noqa: E402
import common  # noqa: E402

THREADS = 8
SETTINGS = {
    "broker": "RedisBroker (default middleware)",
    "worker": f"dramatiq dramatiq_app -p P -t {THREADS} (the documented defaults: 8 threads per process)",
    "actor": "max_retries=0",
    "enqueue": "noop.send(stamp): one Redis round trip per job",
    "bulk": "n/a: dramatiq has no bulk enqueue (group() sends one message at a time)",
}


def _actor(url: str) -> Any:
    os.environ["BENCH_REDIS_URL"] = url
    from dramatiq_app import noop

    return noop


def _cmd(processes: int) -> list[str]:
    return [os.path.join(_peer.BIN, "dramatiq"), "dramatiq_app", "-p", str(processes), "-t", str(THREADS)]


def enqueue(args: Any) -> dict[str, Any]:
    noop = _actor(args.db_url)
    return common.timed_enqueue(lambda: noop.send(0.0), args.jobs)


def drain(args: Any) -> dict[str, Any]:
    noop = _actor(args.db_url)
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_REDIS_URL=args.db_url)
    return _peer.run_drain(args, _cmd(args.processes), env, lambda n: [noop.send(0.0) for _ in range(n)],
                           collector)


def latency(args: Any) -> dict[str, Any]:
    noop = _actor(args.db_url)
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_REDIS_URL=args.db_url)
    return _peer.run_latency(args, _cmd(args.processes), env, lambda stamp: noop.send(stamp), collector)


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS, "versions": _peer.versions("dramatiq", "redis")}


if __name__ == "__main__":
    common.run_main("dramatiq", {"enqueue": enqueue, "drain": drain, "latency": latency, "info": info},
                    __doc__ or "")
