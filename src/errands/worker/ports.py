"""What a worker needs of a store, as Protocols: the ports its parts are written against.

The worker never names the concrete :class:`~errands.store.Store`: the claim loop, settling,
admission, maintenance, the scheduler, the supervisor and alert evaluation call only the verbs
below, with the values of :mod:`errands.core.rows` and :mod:`errands.core.endings`.  The composed
store satisfies them structurally (mypy checks it where the app hands its store to a worker), and
anything else that does (an in-memory store for an experiment, a store that records calls) can
drive a worker too.  Each port is one part of the store (``store.jobs``, ``store.endings``, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from ..core.endings import Ended, PolicyLookup, RecoveryReport, RunOutcome, Settlement
from ..core.host import CoreFeatures, CoreJobs, CoreStore
from ..core.rows import Admitted, AlertState, ClaimedJob, Limit, NewJob, QueueLimits
from ..core.runlogs import RunLog
from ..core.schedules import ScheduleRow


class ClaimPort(CoreJobs, Protocol):
    """Claiming and holding jobs (``store.jobs``); what job handles call too."""

    def claim(self, owner: str, queues: Sequence[str], limit: int, lease: float) -> list[ClaimedJob]: ...

    def release(self, owner: str, ids: Sequence[int], *, refund: bool = True) -> int: ...

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int: ...

    def reserved_by(self, owner: str) -> list[int]: ...


class EndingPort(Protocol):
    """Ending attempts (``store.endings``): every terminal write."""

    def complete(self, owner: str, ids: Sequence[int]) -> int: ...

    def apply(self, owner: str | None, settlements: Sequence[Settlement],
              logs: Sequence[RunLog] = ...) -> list[Settlement]: ...

    def end_held(self, owner: str, ids: Sequence[int], outcome_of: Callable[[ClaimedJob], RunOutcome],
                 policies: PolicyLookup) -> list[Ended]: ...

    def recover_stale(self, policies: PolicyLookup, job_ids: Sequence[int] | None = None) -> RecoveryReport: ...

    def deadlines(self, ids: Sequence[int]) -> dict[int, float]: ...

    def end_overdue(self, limit: int = ...) -> list[Ended]: ...


class RegistryPort(Protocol):
    """The workers table (``store.workers``)."""

    def register(self, worker_id: str, hostname: str, pid: int, queues: Sequence[str], concurrency: int,
                 lease: float | None = None, heartbeat_every: float | None = None) -> None: ...

    def heartbeat(self, worker_id: str, jobs_done: int, status: str | None = None) -> str | None:
        """Report alive (and ``status``: "quiet", "stopping", None); the command an operator left for
        this worker ("quiet", "stop"; None: run), as the database holds it: untrusted."""

    def unregister(self, worker_id: str) -> None: ...

    def prune(self, older_than: float, per_lease: float | None = None, at_least: float = 0.0) -> int: ...


class FeaturePort(CoreFeatures, Protocol):
    """The job features a worker drives (``store.features``); what running jobs call too."""

    def admission(self, owner: str, runs: Sequence[tuple[int, Sequence[Limit]]],
                  concurrency_retry: float = ..., ahead: float = 0.0, slots: int | None = None,
                  lead: float = 0.0, spacing: float = 0.0) -> Admitted: ...

    def wake_group_waiters(self, freed: Mapping[str, int]) -> int: ...

    def forget_starts(self, starts: Sequence[tuple[str, Any, int]]) -> int: ...

    def queue_limits(self) -> dict[str, QueueLimits]: ...

    def claim_periodic_slot(self, name: str, slot: datetime, job: NewJob) -> int | None: ...

    def cancel_requests(self, owner: str) -> list[int]: ...

    def sweep_blocked(self, limit: int = 1000) -> int: ...

    def age_waiting(self, limit: int = ...) -> int: ...

    def prune(self, failed_ttl: float | None) -> dict[str, int]: ...


class SchedulePort(Protocol):
    """The schedules stored in the database and the claim of every schedule's slots (``store.schedules``)."""

    def rows(self) -> list[ScheduleRow]: ...

    def last_slot(self, name: str) -> datetime | None: ...

    def claim_slots(self, name: str, runs: Sequence[tuple[datetime, NewJob | None]],
                    version: int | None = None) -> list[int] | None: ...


class StatsPort(Protocol):
    """The throughput figures workers feed (``store.insights``)."""

    def add_stats(self, counts: dict[tuple[str, bool], int]) -> None: ...

    def prune_stats(self, keep: float = ...) -> None: ...


class AlertPort(Protocol):
    """The alert thresholds' state and the bounded reads they compare with (``store.alerts``)."""

    def states(self) -> list[AlertState]: ...

    def take_turn(self, every: float) -> bool: ...

    def cross(self, kind: str, subject: str, value: float, threshold: float, at: datetime) -> bool: ...

    def clear(self, kind: str, subject: str, value: float | None, at: datetime) -> bool: ...

    def still_crossed(self, rows: Sequence[tuple[str, str, float, float]], at: datetime) -> None: ...

    def dead_letter_count(self, cap: int) -> int: ...

    def heartbeat_ages(self) -> list[tuple[float, float | None]]: ...

    def oldest_ready(self, queues: Sequence[str] | None) -> tuple[datetime, dict[str, datetime]]: ...


class Wakeup(Protocol):
    """A way to sleep until jobs may have arrived (PostgreSQL's LISTEN, a poll of a cheap value)."""

    def wait(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


class StorePort(CoreStore, Protocol):
    """The store as a worker sees it: its parts, the database clock, and the thread's connection."""

    @property
    def jobs(self) -> ClaimPort: ...

    @property
    def endings(self) -> EndingPort: ...

    @property
    def workers(self) -> RegistryPort: ...

    @property
    def features(self) -> FeaturePort: ...

    @property
    def insights(self) -> StatsPort: ...

    @property
    def schedules(self) -> SchedulePort: ...

    @property
    def alerts(self) -> AlertPort: ...

    def now(self) -> datetime:
        """The database's clock."""

    def listener(self) -> Wakeup | None: ...

    def dedicate_thread(self, dedicated: bool = True) -> None: ...

    def release_thread_connection(self) -> None: ...

    def close(self) -> None: ...
