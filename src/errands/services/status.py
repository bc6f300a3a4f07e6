"""The status report: per-queue counts and the worker registry, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..app import Errands

ALIVE_AFTER_LEASES = 2.0
"""A worker is alive if it sent a heartbeat within this many lease periods."""
FORGET_AFTER_LEASES = 4.0
FORGET_AFTER_AT_LEAST = 120.0


def forget_worker_after(lease: float) -> float:
    """Seconds without a heartbeat after which live workers delete a worker's registry row
    (``prune_workers``): twice as long as it takes to count as dead, and never under two
    minutes, so a stale row stays visible in ``errands status`` for a while before it goes."""
    return max(lease * FORGET_AFTER_LEASES, FORGET_AFTER_AT_LEAST)


def status_report(app: Errands) -> dict[str, Any]:
    store = app.store
    counts = store.jobs.counts()
    now = store.now()
    workers = []
    for w in store.workers.list_workers():
        age = (now - w.heartbeat_at).total_seconds()
        workers.append({"id": w.id, "hostname": w.hostname, "pid": w.pid, "queues": w.queues.split(","),
                        "concurrency": w.concurrency, "started_at": w.started_at.isoformat(),
                        "last_heartbeat_at": w.heartbeat_at.isoformat(), "seconds_since_heartbeat": age,
                        "jobs_done": w.jobs_done, "alive": age <= app.lease * ALIVE_AFTER_LEASES})
    return {"queues": {name: c.as_dict() for name, c in counts.items()}, "workers": workers,
            "paused": store.features.paused_queues()}
