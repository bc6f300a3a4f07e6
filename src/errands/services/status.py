"""When a worker counts as alive, and when its registry row goes: numbers the worker's heartbeat and
every report share.  This module imports nothing of errands (the worker imports it), so no import
chain, not even a type-only one, leads from here back up to the app."""

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
