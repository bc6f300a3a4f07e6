"""What the worker needs from the app, as a Protocol of its own.

The worker sits below the app: ``Errands`` imports the worker to offer ``app.run_worker()`` and
eager mode, so the worker must not import the app back, not even for its type hints (that was
the import loop app -> worker -> app).  :class:`RunHost` names exactly what the worker, the
supervisor, the scheduler and eager runs read from the app; ``Errands`` satisfies it
structurally, and a test may hand the worker anything else that does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..core.host import AppHost

if TYPE_CHECKING:
    from ..core.alerts import AlertThresholds
    from ..core.cron import Cron
    from ..core.endings import PolicyLookup
    from ..core.hooks import Hooks
    from ..core.jobs import JobDefinition
    from ..core.rows import NewJob
    from ..core.runlogs import RunLogLimits
    from ..core.schedules import CatchUp
    from .ports import StorePort


class PeriodicJob(Protocol):
    """One of the app's schedules, as the scheduler thread uses it (``errands.app.Schedule`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def cron(self) -> Cron: ...

    @property
    def catch_up(self) -> CatchUp:
        """What runs of the slots missed while no scheduler ran."""

    def prepare(self, slot_key: str) -> NewJob:
        """The run for one slot (its unique key names the slot, so it is enqueued at most once)."""


class RunHost(AppHost, Protocol):
    """The app as a worker sees it.

    Everything here is read, never set: the properties let an app hold narrower types (its
    ``dict`` of schedules) than the Mapping the worker needs.  The job contexts and hooks of a
    run receive this object as their :class:`~errands.core.host.AppHost`."""

    @property
    def store(self) -> StorePort: ...

    @property
    def registry(self) -> Mapping[str, JobDefinition[Any, Any]]:
        """Job definitions by name: the handlers a worker runs and their behaviour (limits, hooks, TTL)."""

    @property
    def schedules(self) -> Mapping[str, PeriodicJob]:
        """The periodic jobs the scheduler thread enqueues."""

    @property
    def lease(self) -> float:
        """Seconds a claim is ours without a heartbeat (a worker's ``--lease`` overrides it)."""

    @property
    def result_ttl(self) -> float:
        """Seconds results and cancellation records are kept, unless a job says otherwise."""

    @property
    def keep_traceback(self) -> bool:
        """Keep failed attempts' tracebacks in the error history (a job's ``keep_traceback`` wins)."""

    @property
    def run_logs(self) -> RunLogLimits | None:
        """How much of each attempt's logging to keep with it (None: run logs are off)."""

    @property
    def failed_ttl(self) -> float | None:
        """Seconds dead-letter entries are kept (None: for ever); the heartbeat prunes older ones."""

    @property
    def policies(self) -> PolicyLookup:
        """How each job ends its attempts (its backoff, retry rules, record lifetimes); the app's
        fallback for a name no job of it has."""

    @property
    def hooks(self) -> Hooks:
        """The app's hooks (runs, retries, the dead letter, alerts)."""

    @property
    def alert_thresholds(self) -> AlertThresholds:
        """What the app alerts on; the heartbeat thread evaluates it (:mod:`errands.worker.alerts`)."""
