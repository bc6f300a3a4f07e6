"""Prometheus metrics recorded by the processes that run and enqueue jobs, through errands' hooks.

``instrument(app)`` counts, in the process it runs in:

* ``errands_runs_total{job, queue, outcome}``: finished runs; outcome ``succeeded``, ``failed``
  (the handler raised: a retry or the dead letter follows) or ``cancelled``;
* ``errands_run_duration_seconds{job, queue}``: a histogram of run durations (hooks included);
* ``errands_retries_total{job, queue}`` and ``errands_dead_total{job, queue}``: failed runs
  given back for another attempt, and runs moved to the dead letter (counted once committed);
* ``errands_expired_total{job, queue}``: jobs ended as expired, unstarted (``expires_in``), counted by
  the process whose maintenance pass ended them;
* ``errands_enqueued_total{job, queue}``: jobs this process stored.

They complement :class:`errands.metrics.ErrandsCollector`, which reads queue depths from the
database: counters are per process, so a worker process either serves its own registry or,
with several worker processes (``errands worker --processes N``), writes them to files in
``PROMETHEUS_MULTIPROC_DIR`` for one exporter to sum (prometheus_client's multiprocess mode;
``errands metrics`` does it when that variable is set).  See docs/observability.md.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.extras import MissingExtra

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
except ImportError as exc:
    raise MissingExtra("errands.contrib.prometheus", "metrics", exc) from exc

from ..core.errors import ConfigurationError, JobCancelled
from ..core.hooks import Enqueue

if TYPE_CHECKING:
    from ..app import Errands
    from ..core.context import JobContext
    from ..core.rows import FailedJob

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
                    float("inf"))
"""Seconds: from a no-op job to a half-hour export."""

_clock = time.perf_counter


@dataclass(frozen=True)
class RunMetrics:
    """The metric objects of one registry (shared by every app instrumented into it)."""

    runs: Counter
    duration: Histogram
    retries: Counter
    dead: Counter
    enqueued: Counter
    expired: Counter


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, RunMetrics] = weakref.WeakKeyDictionary()
_instrumented: weakref.WeakSet[Any] = weakref.WeakSet()


def metrics_for(registry: CollectorRegistry = REGISTRY,
                buckets: Sequence[float] = DURATION_BUCKETS) -> RunMetrics:
    """The metrics in ``registry``, created on first use (a second app in the process reuses them)."""
    found = _by_registry.get(registry)
    if found is None:
        found = RunMetrics(
            runs=Counter("errands_runs", "Finished job runs by job, queue and outcome.", ["job", "queue", "outcome"],
                         registry=registry),
            duration=Histogram("errands_run_duration_seconds", "How long job runs took.", ["job", "queue"],
                               buckets=tuple(buckets), registry=registry),
            retries=Counter("errands_retries", "Failed runs given back for another attempt.", ["job", "queue"],
                            registry=registry),
            dead=Counter("errands_dead", "Runs moved to the dead letter.", ["job", "queue"], registry=registry),
            enqueued=Counter("errands_enqueued", "Jobs stored by this process.", ["job", "queue"],
                             registry=registry),
            expired=Counter("errands_expired", "Jobs ended as expired: not started by their expiry.",
                            ["job", "queue"], registry=registry))
        _by_registry[registry] = found
    return found


def instrument(app: Errands, registry: CollectorRegistry = REGISTRY,
               buckets: Sequence[float] = DURATION_BUCKETS) -> RunMetrics:
    """Count ``app``'s runs and enqueues into ``registry`` (default the global one).

    Call it where the app is defined, so that worker processes, which import that module,
    count too.  Returns the metric objects."""
    if app in _instrumented:
        raise ConfigurationError(f"{app!r} is already instrumented for Prometheus")
    m = metrics_for(registry, buckets)

    def timed(ctx: JobContext) -> Iterator[None]:
        started = _clock()
        outcome = "failed"
        try:
            yield
            outcome = "succeeded"
        except JobCancelled:
            outcome = "cancelled"
            raise
        finally:
            m.duration.labels(ctx.name, ctx.queue).observe(_clock() - started)
            m.runs.labels(ctx.name, ctx.queue, outcome).inc()

    def retried(ctx: JobContext, error_type: str, error_message: str, delay: float) -> None:
        m.retries.labels(ctx.name, ctx.queue).inc()

    def dead(ctx: JobContext, error_type: str, error_message: str) -> None:
        m.dead.labels(ctx.name, ctx.queue).inc()

    def expired(job: FailedJob) -> None:
        m.expired.labels(job.name, job.queue).inc()

    def counted(call: Enqueue) -> Iterator[None]:
        yield
        if len(call.ids) == len(call.jobs):  # stored (a failed insert raises through the yield instead)
            tally: dict[tuple[str, str], int] = {}
            for job in call.jobs:
                tally[job.name, job.queue] = tally.get((job.name, job.queue), 0) + 1
            for (name, queue), n in tally.items():
                m.enqueued.labels(name, queue).inc(n)

    app.around_job(timed)
    app.on_retry(retried)
    app.on_dead(dead)
    app.hooks.on_expired(expired)
    app.around_enqueue(counted)
    _instrumented.add(app)
    return m


__all__ = ["DURATION_BUCKETS", "RunMetrics", "instrument", "metrics_for"]
