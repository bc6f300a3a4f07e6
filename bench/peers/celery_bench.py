"""Celery prefork (Redis broker) under benchmark; run by bench/.venv-peers/bin/python.  One JSON line out."""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peer  # noqa: E402
import common  # noqa: E402

SETTINGS = {
    "broker": "Redis (kombu), results ignored (task_ignore_result=True)",
    "worker": "celery -A celery_app worker -P prefork -c P --loglevel WARNING --without-gossip --without-mingle "
              "--without-heartbeat",
    "config": "worker_prefetch_multiplier=64 (Celery's 'Optimizing' guide for many short tasks), "
              "worker_disable_rate_limits=True, task_acks_late=False (default)",
    "enqueue": "noop.delay(stamp): one Redis round trip per job",
    "bulk": "n/a: Celery has no bulk enqueue (group() publishes one message per task)",
}


def _task(url: str) -> Any:
    os.environ["BENCH_REDIS_URL"] = url
    from celery_app import noop

    return noop


def _cmd(processes: int) -> list[str]:
    return [os.path.join(_peer.BIN, "celery"), "-A", "celery_app", "worker", "-P", "prefork", "-c", str(processes),
            "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"]


def enqueue(args: Any) -> dict[str, Any]:
    noop = _task(args.db_url)
    return common.timed_enqueue(lambda: noop.delay(0.0), args.jobs)


def drain(args: Any) -> dict[str, Any]:
    noop = _task(args.db_url)
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_REDIS_URL=args.db_url)
    return _peer.run_drain(args, _cmd(args.processes), env, lambda n: [noop.delay(0.0) for _ in range(n)],
                           collector, cwd=args.workdir)


def latency(args: Any) -> dict[str, Any]:
    noop = _task(args.db_url)
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_REDIS_URL=args.db_url)
    return _peer.run_latency(args, _cmd(args.processes), env, lambda stamp: noop.delay(stamp), collector,
                             cwd=args.workdir)


def info(args: Any) -> dict[str, Any]:
    return {"settings": SETTINGS, "versions": _peer.versions("celery", "kombu", "billiard", "redis")}


if __name__ == "__main__":
    common.run_main("celery", {"enqueue": enqueue, "drain": drain, "latency": latency, "info": info}, __doc__ or "")
