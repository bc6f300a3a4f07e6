"""The application the errands benchmark runs: one no-op job.

Workers load it with ``errands --app errands_app:app`` (bench/ on PYTHONPATH);
the database comes from ``--database-url``.
"""

from __future__ import annotations

from common import mark

from errands import Errands

app = Errands("sqlite:///errands-bench-unset.db")


@app.job(name="bench.noop")
def noop(stamp: float) -> None:
    """Report "handled" (and the pickup latency when stamped) to the benchmark; nothing else."""
    mark(stamp)
