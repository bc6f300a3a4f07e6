"""When a worker counts as alive, and when its registry row may go: the worker's own policy.

Workers apply it (the heartbeat thread prunes rows of workers silent for too long), and the
status report, the operator's views and ``errands doctor`` read it; it lives here, with the
heartbeat that it is about, so that the worker depends on nothing above it.
"""

from __future__ import annotations

ALIVE_AFTER_LEASES = 2.0
"""A worker is alive if it sent a heartbeat within this many lease periods."""
FORGET_AFTER_LEASES = 4.0
FORGET_AFTER_AT_LEAST = 120.0


def forget_worker_after(lease: float) -> float:
    """Seconds without a heartbeat after which live workers delete a worker's registry row
    (``prune_workers``): twice as long as it takes to count as dead, and never under two
    minutes, so a stale row stays visible in ``errands status`` for a while before it goes."""
    return max(lease * FORGET_AFTER_LEASES, FORGET_AFTER_AT_LEAST)
