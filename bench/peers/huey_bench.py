"""Huey (SQLite storage) under benchmark; run by bench/.venv-peers/bin/python.  One JSON line out."""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _peer  # noqa: E402
import common  # noqa: E402

SETTINGS = {
    "storage": "SqliteHuey(results=False, fsync=False): WAL, PRAGMA synchronous=OFF",
    "worker": "huey_consumer huey_app.huey -k process -w P -n -q (process workers; -n: no periodic tasks); "
              "polling -d 0.1 -b 1.15 -m 10 (defaults)",
    "enqueue": "noop(stamp): one INSERT + commit per job",
    "bulk": "n/a: huey has no bulk enqueue",
}


def _path(url: str) -> str:
    path = urlsplit(url).path
    return path[1:] if path.startswith("//") else path


def _huey(url: str) -> Any:
    os.environ["BENCH_DB_PATH"] = _path(url)
    from huey_app import huey, noop

    return huey, noop


def _cmd(processes: int) -> list[str]:
    return [os.path.join(_peer.BIN, "huey_consumer"), "huey_app.huey", "-k", "process", "-w", str(processes),
            "-n", "-q"]


def enqueue(args: Any) -> dict[str, Any]:
    _, noop = _huey(args.db_url)
    return common.timed_enqueue(lambda: noop(0.0), args.jobs)


def drain(args: Any) -> dict[str, Any]:
    _, noop = _huey(args.db_url)

    def prefill(n: int) -> None:
        for _ in range(n):
            noop(0.0)

    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_DB_PATH=_path(args.db_url))
    return _peer.run_drain(args, _cmd(args.processes), env, prefill, collector)


def latency(args: Any) -> dict[str, Any]:
    _, noop = _huey(args.db_url)
    collector = common.Collector(args.workdir)
    env = _peer.worker_env(collector, BENCH_DB_PATH=_path(args.db_url))
    return _peer.run_latency(args, _cmd(args.processes), env, lambda stamp: noop(stamp), collector)


def info(args: Any) -> dict[str, Any]:
    import sqlite3

    versions = _peer.versions("huey")
    versions["sqlite_library"] = sqlite3.sqlite_version
    return {"settings": SETTINGS, "versions": versions}


if __name__ == "__main__":
    common.run_main("huey", {"enqueue": enqueue, "drain": drain, "latency": latency, "info": info}, __doc__ or "")
