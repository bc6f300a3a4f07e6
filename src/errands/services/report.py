"""The status report of ``errands status``: per-queue counts and the worker registry, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..store.pool import connection_label
from ..worker.liveness import ALIVE_AFTER_LEASES
from .operator import connection_bound, worker_connections

if TYPE_CHECKING:
    from ..app import Errands


def status_report(app: Errands) -> dict[str, Any]:
    """Counts per queue and state, the workers and whether each is alive, the paused queues (JSON-ready)."""
    store = app.store
    counts = store.jobs.counts()
    now = store.now()
    held, bound = worker_connections(app), connection_bound(app)
    workers = []
    for w in store.workers.list_workers():
        age = (now - w.heartbeat_at).total_seconds()
        workers.append({"id": w.id, "hostname": w.hostname, "pid": w.pid, "queues": w.queues.split(","),
                        "concurrency": w.concurrency, "started_at": w.started_at.isoformat(),
                        "last_heartbeat_at": w.heartbeat_at.isoformat(), "seconds_since_heartbeat": age,
                        "jobs_done": w.jobs_done, "alive": age <= app.lease * ALIVE_AFTER_LEASES,
                        "connections": held.get(connection_label(w.pid, w.hostname)), "connection_bound": bound})
    return {"queues": {name: c.as_dict() for name, c in counts.items()}, "workers": workers,
            "paused": store.features.paused_queues()}
