"""The options of one worker, and their defaults, in one place.

Every way to start a worker (``errands worker``, ``manage.py errands_worker``, ``app.run_worker``,
the in-process worker of a web process and its ASGI lifespan) builds a :class:`WorkerSettings`,
and every one of their signatures reads its defaults from the names below: before, the same
options were spelled out in eight signatures and their defaults could drift apart unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass

CONCURRENCY = 1
"""Jobs run at once per worker process."""
SLEEP = 1.0
"""Longest wait in seconds between polls when idle."""
SHUTDOWN_TIMEOUT = 30.0
"""Seconds running jobs get to finish after a stop (``errands worker``, ``manage.py errands_worker``,
``app.run_worker``): a worker service is usually given this long by its service manager."""
EMBEDDED_SHUTDOWN_TIMEOUT = 10.0
"""The same for a worker embedded in a web process (``start_worker``, ``errands_lifespan``).  Shorter
because the web server's own shutdown waits for it, and web servers and their platforms allow a
short shutdown (gunicorn's graceful timeout and many PaaS stop within 30 s in all, requests
included); what does not finish in time goes back to the queue with its attempt refunded."""


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker process claims and runs jobs; immutable, so the supervisor hands the same
    settings to every process it forks and none can change them for the others."""

    queues: tuple[str, ...]
    concurrency: int = CONCURRENCY
    burst: bool = False
    """Exit once nothing is ready (delayed jobs are not waited for)."""
    max_jobs: int | None = None
    sleep: float = SLEEP
    """Longest wait between polls when idle (with a listener: between safety polls)."""
    shutdown_timeout: float = SHUTDOWN_TIMEOUT
    lease: float | None = None
    """Seconds a claim stays ours without a heartbeat; the app's setting when None."""
    min_sleep: float = 0.02
    prefetch: int | None = None
    """Jobs held beyond the running ones; None adapts to job duration (0..100)."""
    listen: bool = True
    """Use the database's wake-up signal (NOTIFY, data_version, new ids) when idle."""
    scheduler: bool = True
    """Enqueue the app's periodic jobs (never in burst mode)."""
