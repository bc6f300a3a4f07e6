"""``errands doctor``'s connection count: how much of the server's ``max_connections`` the fleet holds.

Each worker process holds at most ``pool_size + 3`` connections (claim and settle, heartbeat,
listener, shared pool).  The server's own count is read from ``pg_stat_activity`` (PostgreSQL:
errands' processes by ``application_name``) or ``information_schema.processlist`` (MySQL: every
session on this database); SQLite has no server to run out of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..services.operator import connection_bound, worker_registry
from .model import Check, Status

if TYPE_CHECKING:
    from .context import DoctorContext

SHARE_WARN = 0.8
"""Warn when the live fleet could take this share of the server's connections."""


def connections(ctx: DoctorContext) -> Check:
    counts = ctx.store.insights.connections()
    if counts is None:
        return Check("connections", Status.INFO, "SQLite: no server connections to count")
    alive = [w for w in worker_registry(ctx.app) if w.alive]
    bound = connection_bound(ctx.app)
    ours = sum(n for name, n in counts.by_name.items() if name.startswith("errands "))
    held = ours if ctx.store.dialect.name == "postgresql" else counts.total
    whose = ("errands' processes" if ctx.store.dialect.name == "postgresql" else "sessions on this database") + \
        ", this check's own included"
    could = len(alive) * bound
    data = {"held": held, "server_max": counts.server_max, "workers_alive": len(alive),
            "per_worker_bound": bound, "fleet_bound": could}
    detail = (f"this fleet holds {held} of the server's {counts.server_max} connections ({whose}); "
              f"{len(alive)} live worker process(es) may hold up to {bound} each ({could})")
    if could > counts.server_max * SHARE_WARN:
        return Check("connections", Status.WARN, detail, data=data,
                     fix="lower ?pool_size= (or ERRANDS_POOL_SIZE), run fewer worker processes with more threads "
                         "each, or raise the server's max_connections")
    return Check("connections", Status.OK, detail, data=data)
