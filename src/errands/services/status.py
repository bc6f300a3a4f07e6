"""The status report: per-queue counts and the worker registry, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The liveness policy is the worker's (its heartbeat prunes by it); re-exported for this module's readers.
from ..worker.liveness import ALIVE_AFTER_LEASES as ALIVE_AFTER_LEASES
from ..worker.liveness import FORGET_AFTER_AT_LEAST as FORGET_AFTER_AT_LEAST
from ..worker.liveness import FORGET_AFTER_LEASES as FORGET_AFTER_LEASES
from ..worker.liveness import forget_worker_after as forget_worker_after

if TYPE_CHECKING:
    from ..app import Errands


def status_report(app: Errands) -> dict[str, Any]:
    store = app.store
    counts = store.counts()
    now = store.now()
    workers = []
    for w in store.list_workers():
        age = (now - w.heartbeat_at).total_seconds()
        workers.append({"id": w.id, "hostname": w.hostname, "pid": w.pid, "queues": w.queues.split(","),
                        "concurrency": w.concurrency, "started_at": w.started_at.isoformat(),
                        "last_heartbeat_at": w.heartbeat_at.isoformat(), "seconds_since_heartbeat": age,
                        "jobs_done": w.jobs_done, "alive": age <= app.lease * ALIVE_AFTER_LEASES})
    return {"queues": {name: c.as_dict() for name, c in counts.items()}, "workers": workers,
            "paused": store.paused_queues()}
