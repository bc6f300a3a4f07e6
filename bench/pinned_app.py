"""The application bench/pinned_snapshot.py's worker runs: errands_app's no-op job, with every claim timed.

PostgreSQL here has no pg_stat_statements (it must be preloaded, which needs a server restart), so the
worker times its own claims: ``JobStore.claim`` (one statement per queue, its round trip included) is
wrapped, and each process that claims writes its totals every second to ``<PINNED_CLAIM_STATS>.<pid>`` as
one line ``claims seconds max_seconds slow`` (cumulative, except the max: the longest claim since the last
write; ``slow``: claims over SLOW seconds).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from errands_app import app, noop  # noqa: F401 - the worker loads ``pinned_app:app``; noop is its job

from errands.store.jobs import JobStore

STATS_ENV = "PINNED_CLAIM_STATS"
SLOW = 0.002


class ClaimClock:
    """Totals of the claims this process made, written out once a second by a daemon thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.count = 0
        self.seconds = 0.0
        self.longest = 0.0
        self.slow = 0
        self.lock = threading.Lock()
        self.writer_pid = 0

    def add(self, seconds: float) -> None:
        if self.writer_pid != os.getpid():  # started in the process that claims (a fork has no threads)
            self.writer_pid = os.getpid()
            threading.Thread(target=self._write_loop, name="claim-stats", daemon=True).start()
        with self.lock:
            self.count += 1
            self.seconds += seconds
            self.longest = max(self.longest, seconds)
            self.slow += seconds > SLOW

    def _write_loop(self) -> None:
        while True:
            time.sleep(1.0)
            with self.lock:
                line = f"{self.count} {self.seconds!r} {self.longest!r} {self.slow}\n"
                self.longest = 0.0
            path = f"{self.path}.{os.getpid()}"
            with open(path + ".tmp", "w") as f:
                f.write(line)
            os.replace(path + ".tmp", path)


def _timed(clock: ClaimClock) -> Any:
    plain = JobStore.claim

    def claim(self: JobStore, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return plain(self, *args, **kwargs)
        finally:
            clock.add(time.perf_counter() - t0)

    return claim


if os.environ.get(STATS_ENV):
    JobStore.claim = _timed(ClaimClock(os.environ[STATS_ENV]))  # type: ignore[method-assign]
