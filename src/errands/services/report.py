"""The status report of ``errands status``: per-queue counts and the worker registry, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..store.pool import connection_label
from .operator import connection_bound, worker_connections, worker_registry

if TYPE_CHECKING:
    from ..app import Errands


def status_report(app: Errands) -> dict[str, Any]:
    """Counts per queue and state, the workers and whether each is alive, the paused queues (JSON-ready).
    Liveness is the dashboard's (:func:`~errands.services.operator.worker_registry`): each worker by its own lease.
    Read from ``app.reads`` (the read replica when there is one and it is close enough); ``reads`` says
    where from (:class:`~errands.store.replicas.ReadSource`)."""
    source = app.read_router.source()
    store = app.reads
    counts = store.jobs.counts()
    now = store.now()
    held, bound = worker_connections(app), connection_bound(app)
    workers = []
    for w in worker_registry(app, now):
        row = w.to_json()
        row["connections"] = held.get(connection_label(w.pid, w.hostname))
        row["connection_bound"] = bound
        workers.append(row)
    return {"queues": {name: c.as_dict() for name, c in counts.items()}, "workers": workers,
            "paused": store.features.paused_queues(), "reads": source.to_json()}
