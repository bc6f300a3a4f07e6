"""What every peer script shares: paths, worker environment, generic drain/latency runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

PEERS = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(PEERS)
for p in (BENCH, PEERS):
    if p not in sys.path:
        sys.path.insert(0, p)

import common  # noqa: E402

BIN = os.path.dirname(sys.executable)


def worker_env(collector: common.Collector, **extra: str) -> dict[str, str]:
    env = collector.env
    env["PYTHONPATH"] = os.pathsep.join([PEERS, BENCH, os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def run_drain(args: Any, cmd: list[str], env: dict[str, str], prefill: Callable[[int], Any],
              collector: common.Collector, cwd: str | None = None) -> dict[str, Any]:
    """Pre-fill ``args.jobs`` jobs, start the workers, time first to last handled job, stop them."""
    import time

    t0 = time.perf_counter()
    prefill(args.jobs)
    fill = time.perf_counter() - t0
    log = os.path.join(args.workdir, "worker.log")
    proc = common.start_workers(cmd, env, log, cwd=cwd)
    try:
        result = common.measure_drain(collector, proc, args.jobs, args.timeout, log)
    finally:
        common.stop_workers(proc)
        collector.close()
    result["prefill_seconds"] = round(fill, 3)
    return result


def run_latency(args: Any, cmd: list[str], env: dict[str, str], enqueue_stamped: Callable[[float], Any],
                collector: common.Collector, cwd: str | None = None) -> dict[str, Any]:
    log = os.path.join(args.workdir, "worker.log")
    proc = common.start_workers(cmd, env, log, cwd=cwd)
    try:
        return common.measure_latency(collector, proc, enqueue_stamped, args.samples, args.interval, log)
    finally:
        common.stop_workers(proc)
        collector.close()


def versions(*names: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = "not installed"
    return out
