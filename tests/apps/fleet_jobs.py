"""Jobs for the tests of worker commands (quiet, resume, stop) and ``--max-memory`` (tests/worker/
test_worker_commands.py), run by real ``errands worker`` processes; the app reads ERRANDS_DATABASE_URL."""

from __future__ import annotations

import os
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
def gated(path: str) -> None:
    """Run until the file ``path`` exists (the test opens the gate once the worker is told to stop)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
