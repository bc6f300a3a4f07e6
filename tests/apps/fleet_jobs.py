"""Jobs for the tests of worker commands (quiet, resume, stop) and ``--max-memory`` (tests/worker/
test_worker_commands.py), run by real ``errands worker`` processes; the app reads ERRANDS_DATABASE_URL."""

from __future__ import annotations

import time

from errands import Errands

app = Errands()

HOARD: list[bytes] = []
"""What ``hoard`` keeps: memory a job leaves behind in its process (a cache that only grows)."""


@app.job(queue="default")
def quick() -> None:
    """Ends at once (a plain success deletes its row)."""


@app.job(queue="default")
def hoard(mb: int) -> None:
    """Keep ``mb`` MB in this process for good (written, so resident)."""
    HOARD.append(b"\x01" * (mb * 2**20))


@app.job(queue="default")
def linger(seconds: float) -> None:
    time.sleep(seconds)
