"""The application of the fairness benchmark (bench/fairness.py): one job with a fairness key, one without.

Each run appends its tenant to the file named by ``BENCH_FAIR_LOG`` as it starts (one small
``O_APPEND`` write: lines of concurrent runs never mix), so the file is the start order.
Workers load it with ``errands --app fairness_app:app`` (bench/ on PYTHONPATH).
"""

from __future__ import annotations

import os

from errands import Errands

app = Errands("sqlite:///errands-bench-unset.db")
_fd: int | None = None


def _started(tenant: str) -> None:
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["BENCH_FAIR_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{tenant}\n".encode())


@app.job(name="bench.fair", fairness_key=lambda tenant: tenant)
def fair(tenant: str) -> None:
    """A tenant's job; the claim takes turns between tenants."""
    _started(tenant)


@app.job(name="bench.unfair")
def unfair(tenant: str) -> None:
    """The same job without a fairness key: the claim's order is priority, then id."""
    _started(tenant)
