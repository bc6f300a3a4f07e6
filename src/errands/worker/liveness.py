"""When a worker counts as alive, and when its registry row may go: the worker's own policy.

Workers apply it (the heartbeat thread prunes rows of workers silent for too long), and the
status report, the operator's views and ``errands doctor`` read it; it lives here, with the
heartbeat that it is about, so that the worker depends on nothing above it.

Each worker records its own lease and heartbeat interval in its registry row, and is judged by
them, never by the settings of whoever reads the row: a worker started with ``--lease 5`` that
stops heart-beating is dead after 5 s, the moment its claims turn stale, even when the dashboard
reading it runs with the default lease of 60 s.
"""

from __future__ import annotations

ALIVE_AFTER_LEASES = 1.0
"""A worker is alive while its last heartbeat is younger than this many of its own leases: one,
because that is when the jobs it holds count as stale (their leases end with its heartbeats)."""
UNRECORDED_ALIVE_AFTER_LEASES = 2.0
"""For a row that recorded no lease (written by an errands before schema version 7): this many of
the reader's lease, the rule of those versions."""
FORGET_AFTER_LEASES = 4.0
FORGET_AFTER_AT_LEAST = 120.0
BEATS_PER_LEASE = 3.0
"""Heartbeats per lease: a worker's claims survive two missed beats."""
MIN_HEARTBEAT_EVERY = 0.2


def heartbeat_every(lease: float) -> float:
    """Seconds between two heartbeats of a worker whose lease is ``lease``."""
    return max(MIN_HEARTBEAT_EVERY, lease / BEATS_PER_LEASE)


def alive_within(lease: float | None, reader_lease: float) -> float:
    """Seconds after its last heartbeat during which a worker counts as alive: its own ``lease``
    (recorded at registration), or, for a row that recorded none, twice ``reader_lease``."""
    if lease is None or not lease > 0:
        return reader_lease * UNRECORDED_ALIVE_AFTER_LEASES
    return lease * ALIVE_AFTER_LEASES


def forget_worker_after(lease: float) -> float:
    """Seconds without a heartbeat after which live workers delete a worker's registry row
    (``prune_workers``): four times as long as it takes to count as dead, and never under two
    minutes, so a stale row stays visible in ``errands status`` for a while before it goes."""
    return max(lease * FORGET_AFTER_LEASES, FORGET_AFTER_AT_LEAST)
