"""Prometheus figures read from the database: queue depths, ages, pauses, throughput, workers.

Every worker and the dashboard write to the same tables, so any process that can reach the
database can report the whole system: the dashboard's ``/metrics``, ``errands metrics``
(a standalone exporter) and your own application's registry all serve this collector::

    from prometheus_client import REGISTRY
    REGISTRY.register(ErrandsCollector(app))

It reads the figures when scraped (one ``services.operator.overview`` per scrape, the same
numbers the dashboard's overview shows), never in the background, and reports
``errands_database_up 0`` instead of failing the scrape when the database cannot be read.
Counts of a state above the dashboard's count cap are reported as the cap (a lower bound).
Per-run counters and durations come from the workers themselves:
:mod:`errands.contrib.prometheus`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .core.extras import MissingExtra

try:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector
except ImportError as exc:
    raise MissingExtra("errands.metrics", "metrics", exc) from exc

from .core.errors import StoreError
from .services.operator import backlog, overview

if TYPE_CHECKING:
    from .app import Errands

log = logging.getLogger("errands.metrics")

STATES = ("ready", "delayed", "blocked", "running", "stale", "failed")


class ErrandsCollector(Collector):
    """The database's view of errands as Prometheus gauges (a custom collector: read at scrape time)."""

    def __init__(self, app: Errands) -> None:
        self.app = app

    def describe(self) -> Iterator[Metric]:
        """The metric names without reading anything: registering must not query the database."""
        yield from _families(None)

    def collect(self) -> Iterator[Metric]:
        try:
            data = overview(self.app, "1h").to_json()  # the read model as the plain data _families reads
            data["backlog"] = backlog(self.app, [q["name"] for q in data["queues"]])
        except StoreError as exc:
            log.warning("errands metrics: cannot read the database (%s)", exc)
            yield _up(0.0)
            return
        data["oldest_transaction"] = self._oldest_transaction()
        yield from _families(data)

    def _oldest_transaction(self) -> float | None:
        """The oldest open transaction's age, or None (left out of the scrape) where the database has
        none to report (SQLite) or refuses the read (a user without the right to see other sessions)."""
        try:
            return self.app.store.insights.oldest_transaction()
        except StoreError as exc:
            log.debug("errands metrics: cannot read the oldest open transaction (%s)", exc)
            return None


def _up(value: float | None) -> Metric:
    up = GaugeMetricFamily("errands_database_up", "1 when the figures could be read from the database.")
    if value is not None:
        up.add_metric([], value)
    return up


def _families(data: dict[str, Any] | None) -> Iterator[Metric]:
    """Every family; without ``data``, their names and help only (for ``describe``)."""
    jobs = GaugeMetricFamily("errands_jobs", "Jobs by queue and state.", labels=["queue", "state"])
    oldest = GaugeMetricFamily("errands_oldest_ready_seconds", "Age of the oldest ready job per queue.",
                               labels=["queue"])
    paused = GaugeMetricFamily("errands_queue_paused", "1 when the queue is paused.", labels=["queue"])
    succeeded = GaugeMetricFamily("errands_succeeded_last_hour", "Runs that succeeded in the last hour.")
    failed = GaugeMetricFamily("errands_failed_last_hour", "Runs that failed (any attempt) in the last hour.")
    workers = GaugeMetricFamily("errands_workers", "Registered worker processes by liveness.", labels=["alive"])
    backlog_jobs = GaugeMetricFamily(
        "errands_backlog_jobs", "Jobs a worker could claim now (ready, queue not paused), counted up to 10,000: "
        "the autoscaling metric (docs/autoscaling.md).", labels=["queue"])
    backlog_age = GaugeMetricFamily(
        "errands_backlog_age_seconds", "Whole seconds the oldest of the next jobs to run has been due (0: none).",
        labels=["queue"])
    replica = GaugeMetricFamily("errands_reads_from_replica", "1 when these figures were read from the read "
                                "replica, 0 from the primary (only with read_url: docs/read-replicas.md).")
    replica_lag = GaugeMetricFamily("errands_read_replica_lag_seconds", "The read replica's lag when last looked "
                                    "at (only with read_url, while it answers and can tell).")
    transaction = GaugeMetricFamily(
        "errands_oldest_transaction_seconds", "Age of the oldest open transaction in errands' database besides "
        "errands' own (0: none); one held open keeps dead job rows from being cleaned up (PostgreSQL, MySQL).")
    reads = None if data is None else data.get("reads")
    if reads:
        replica.add_metric([], 1.0 if reads["source"] == "replica" else 0.0)
        if reads["lag_seconds"] is not None:
            replica_lag.add_metric([], reads["lag_seconds"])
    if data is not None:
        for q in data["queues"]:
            for state in STATES:
                jobs.add_metric([q["name"], state], q[state])
            oldest.add_metric([q["name"]], q["oldest_ready_seconds"] or 0.0)
            paused.add_metric([q["name"]], 1.0 if q["paused"] else 0.0)
        succeeded.add_metric([], data["throughput"]["total_succeeded"])
        failed.add_metric([], data["throughput"]["total_failed"])
        workers.add_metric(["true"], data["workers_alive"])
        workers.add_metric(["false"], data["workers_stale"])
        for name, figures in data["backlog"].items():
            backlog_jobs.add_metric([name], figures.jobs)
            backlog_age.add_metric([name], figures.age_seconds)
    yield from (jobs, oldest, paused, succeeded, failed, workers, backlog_jobs, backlog_age)
    if reads:  # only where a read replica is configured (so not among the families ``describe`` names)
        yield from (replica, replica_lag)
    if data is not None and data.get("oldest_transaction") is not None:  # not on SQLite, nor when refused
        transaction.add_metric([], data["oldest_transaction"])
        yield transaction
    yield _up(None if data is None else 1.0)


def registry_for(app: Errands) -> CollectorRegistry:
    """A registry holding only this app's collector (what the dashboard and ``errands metrics`` serve)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ErrandsCollector(app))
    return registry


def render(app: Errands, accept: str | None = None) -> tuple[bytes, str]:
    """The collector's figures as an HTTP body and content type, in the format ``accept`` asks for
    (the Prometheus text format by default, OpenMetrics when the scraper prefers it)."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry_for(app)), content_type


__all__ = ["ErrandsCollector", "registry_for", "render"]
