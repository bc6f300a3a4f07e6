"""The application the errands benchmark runs: one no-op job.

Workers load it with ``errands --app errands_app:app`` (bench/ on PYTHONPATH);
the database comes from ``--database-url``.
"""

from __future__ import annotations

from common import mark

from errands import Errands

app = Errands("sqlite:///errands-bench-unset.db")


import time  # noqa: E402


@app.job(name="bench.sleepy")
def sleepy(stamp: float) -> None:
    """An I/O-bound job: waits 10 ms (as on a network call), then reports like noop."""
    time.sleep(0.01)
    mark(stamp)


@app.job(name="bench.noop")
def noop(stamp: float) -> None:
    """Report "handled" (and the pickup latency when stamped) to the benchmark; nothing else."""
    mark(stamp)
