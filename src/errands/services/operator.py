"""What an operator sees and does: the read models and actions behind the dashboard (and the CLI).

Pages and API endpoints call these functions and nothing else; these call the store's
verbs and nothing else.  Every action that changes something writes one line to the
audit log with who did it.

These functions are the audited door, and the only one.  ``Errands.retry_failed``,
``forget_failed``, ``pause_queue``, ``resume_queue``, ``cancel`` and ``recover_stale`` (and
``handle.cancel()``, ``app.workflows.cancel()``) are the library API and write no audit line, as
Oban's ``Oban.cancel_job`` or Sidekiq's ``RetrySet#retry_all`` write none: a call from code has no
person behind it to name, code may call them in bulk or in a hot path (a job cancelling its
siblings; a line each would bury the people's actions and add a write to every call), and these
functions call them, so auditing there would write every line twice.  Code whose actions belong in
the log (a deploy script, an admin command of the host application) calls the function here with an
actor of its own: ``set_paused(app, "deploy", "mails", True)``.  docs/dashboard.md, "The audit log".
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..core.config import check_queue_name
from ..core.errors import ConfigurationError, EnqueueError, InvalidOption, JobNotFound
from ..core.limits import ID_MAX, rate_window
from ..core.payload import MAX_DEPTH, for_display, safe_text, too_deep
from ..core.rows import JobState, dead_state
from ..core.schedules import StoredSchedule
from ..store.insights import (
    COUNT_CAP,
    DEAD_SEARCH_WINDOW,
    GROUPED_NEWEST,
    SEARCH_WINDOW,
    STATES,
    Backlog,
    StateCounts,
    group_failures,
)
from ..store.pool import connection_label
from ..worker.control import describe
from ..worker.liveness import alive_within
from .limits import view as limits_view
from .models import (
    AttemptLogs,
    AuditEntry,
    DeadEntry,
    DeadJob,
    DeadLetterPage,
    EnqueueableJob,
    ErrorEntry,
    FailureGroupView,
    FinishedJob,
    JobDetail,
    JobPage,
    JobSummary,
    LiveJob,
    LogEntry,
    Overview,
    Parameter,
    QueueRow,
    QueueView,
    ReadModel,
    ReadsView,
    Recovered,
    RegisteredWorker,
    ScheduleView,
    Searched,
    Throughput,
    WorkerView,
)
from .schedules import schedules_view
from .workflows import workflow_of

if TYPE_CHECKING:
    from ..app import Errands

ENQUEUE_CAP = 100
"""Most copies of a job one submission of the enqueue form may create."""
WINDOWS = {"1h": (3600, 60), "24h": (86400, 1200), "7d": (7 * 86400, 7200)}
"""Throughput windows: (seconds shown, seconds per bucket)."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _is_job_id(job_id: Any) -> bool:
    """Whether ``job_id`` can name a job in any backend (an int in 1..ID_MAX): anything else
    names none, and a bigger number fails the driver (SQLite: OverflowError)."""
    return type(job_id) is int and 0 < job_id <= ID_MAX


def _check_ids(ids: list[int]) -> None:
    bad = next((i for i in ids if not _is_job_id(i)), None)
    if bad is not None:
        raise InvalidOption(f"job ids are integers from 1 to {ID_MAX}, got {bad!r}")


def _finite(value: float | None) -> float | None:
    """A number for people and JSON: None for NaN and the infinities (a row written by hand may hold them)."""
    return value if value is None or math.isfinite(value) else None


def _storable(text: Any) -> bool:
    """Whether ``text`` read from a row can be sent back to the database as a parameter (SQLite
    hands back bytes that are no UTF-8 as lone surrogates, which no driver can send)."""
    return isinstance(text, str) and safe_text(text) == text


# ---------------------------------------------------------------------------------- overview
def overview(app: Errands, window: str = "1h") -> Overview:
    """The overview page and ``/api/overview`` (and each ``/metrics`` scrape): totals per state over
    every queue, the queues, the workers alive and stale, and the throughput over ``window``.  Read from
    ``app.reads`` (the read replica when there is one and it is close enough), as every list and figure
    a person or a scraper looks at; what an action needs, and the job page, read the primary."""
    reads = reads_view(app)
    now = app.reads.now()
    workers = worker_registry(app, now)
    queues = queue_rows(app, now, workers)
    totals = dict.fromkeys(COUNTED, 0)
    for q in queues:
        for k in totals:
            totals[k] += q[k]
    capped = {k: any(q.capped[k] for q in queues) for k in totals}
    alive = sum(1 for w in workers if w.alive)
    return Overview(now.isoformat(), totals, capped, COUNT_CAP, queues, alive, len(workers) - alive, not alive,
                    throughput(app, window, now), reads)


def reads_view(app: Errands) -> ReadsView | None:
    """Where the lists and figures are read from now (None: no read replica configured)."""
    source = app.read_router.source()
    if source.replica_url is None:
        return None
    return ReadsView(**source.to_json())


def backlog(app: Errands, queues: Iterable[str]) -> dict[str, Backlog]:
    """The autoscaling figures of ``queues`` (``/metrics``' ``errands_backlog_*`` gauges): per queue,
    the jobs a new worker could claim now and how long the oldest has waited (docs/autoscaling.md)."""
    return app.reads.insights.backlog([name for name in queues if _storable(name)])


COUNTED = ("ready", "delayed", "blocked", "running", "stale", "failed")
"""The states a queue's counts hold."""


def queue_rows(app: Errands, now: datetime, workers: list[RegisteredWorker]) -> list[QueueRow]:
    """Every queue that matters (registered, paused, holding jobs, recently busy, served by a worker),
    with its counts per state, which of them are lower bounds, and its oldest ready job's age."""
    store = app.reads
    paused = set(store.features.paused_queues())
    names = sorted(set(app.default_queues()) | paused | set(store.insights.active_queues())
                   | {q for w in workers for q in w.queues})
    # A queue name that is no valid text (SQLite keeps any bytes) cannot be asked about: listed, not counted.
    counts = store.insights.capped_counts([n for n in names if _storable(n)])
    # The counts saw every waiting job of a small queue, and so its oldest ready one.
    oldest = {n: c.oldest_due for n, c in counts.items() if c.oldest_due is not None}
    oldest.update(store.insights.oldest_ready([n for n in names if n in counts and "ready" in counts[n].at_least]))
    unknown = StateCounts(dict.fromkeys(COUNTED, 0), frozenset())
    queues: list[QueueRow] = []
    for name in names:
        c = counts.get(name, unknown)
        age = (now - oldest[name]).total_seconds() if name in oldest else None
        # "capped": the number is a lower bound (shown with a "+"): the count stopped at its cap.
        queues.append(QueueRow(name, **{k: c.counts[k] for k in COUNTED}, capped={k: k in c.at_least for k in c.counts},
                               paused=name in paused, oldest_ready_seconds=age))
    return queues


def bucket_window(window: str, now: datetime) -> tuple[datetime, int, int]:
    """``(start, seconds per bucket, buckets)`` of ``window`` (one of WINDOWS), the last bucket holding
    ``now``.  Buckets begin at whole multiples of their length (whole minutes, 20 minutes, 2 hours, in
    UTC), as the stats rows do (one per whole minute): begun at ``now``'s second, a bucket held the minute
    before its label, which drops the seconds (issue 26: jobs run at 18:40:32 were drawn as "18:39").
    The first bucket reaches back up to one bucket more than the window's span."""
    if window not in WINDOWS:
        raise InvalidOption(f"window must be one of {', '.join(WINDOWS)}")
    span, step = WINDOWS[window]
    end = (math.floor(now.timestamp() / step) + 1) * step
    return datetime.fromtimestamp(end - span, timezone.utc), step, span // step


def throughput(app: Errands, window: str, now: datetime | None = None) -> Throughput:
    """Jobs succeeded and failed per bucket over ``window`` (one of WINDOWS), oldest bucket first."""
    store = app.reads
    start, step, buckets = bucket_window(window, now or store.now())
    succeeded, failed = [0] * buckets, [0] * buckets
    for index, ok, bad in store.insights.throughput_buckets(start, step):
        if 0 <= index < buckets:
            succeeded[index] += ok
            failed[index] += bad
    return Throughput(window, step, start.isoformat(), succeeded, failed, sum(succeeded), sum(failed))


def worker_registry(app: Errands, now: datetime | None = None) -> list[RegisteredWorker]:
    """The workers table as the pages show it, and whether each one is alive (one small read): by its
    own lease, recorded when it registered, never by this app's (``errands.worker.liveness``)."""
    store = app.reads
    now = now or store.now()
    out = []
    for w in store.workers.list_workers():
        age = (now - w.heartbeat_at).total_seconds()
        # Judged by its own lease, as its claims are: alive exactly as long as its jobs are not stale.
        within = alive_within(_finite(w.lease), app.lease)
        out.append(RegisteredWorker(w.id, w.hostname, w.pid, w.queues.split(","), w.concurrency, _iso(w.started_at),
                             _iso(w.heartbeat_at), round(age, 1), w.jobs_done, age <= within,
                             _finite(w.lease), _finite(w.heartbeat_every), within, w.command, w.status,
                             describe(w.command, w.status)))
    return out


def connection_bound(app: Errands) -> int:
    """The most connections one worker process holds: its claim-and-settle loop's, its heartbeat's,
    its listener's, and the shared pool's bound (``?pool_size=``) for everything else."""
    return app.store.db.pool_size + 3


def worker_connections(app: Errands) -> dict[str, int]:
    """Connections the server counts per client name: per errands process (``connection_label``)
    where the server tells names apart (PostgreSQL's ``application_name``); empty for SQLite.  Always
    the primary's: a server counts its own sessions, and the workers' are on the primary."""
    counts = app.store.insights.connections()
    return dict(counts.by_name) if counts else {}


def workers_view(app: Errands, now: datetime | None = None) -> list[WorkerView]:
    """The registry with the jobs each worker holds: a read of up to 10,000 leases, so only the pages
    that list those jobs (workers, doctor) pay for it, not every overview refresh."""
    held = app.reads.insights.held_jobs()
    connections, bound = worker_connections(app), connection_bound(app)
    return [WorkerView(**vars(w), current_jobs=held.get(w.id, []), connection_bound=bound,
                       connections=connections.get(connection_label(w.pid, w.hostname)))
            for w in worker_registry(app, now)]


def queues_view(app: Errands) -> list[QueueView]:
    """Every queue (as the overview lists them) with the limits in force and the jobs it serves."""
    store = app.reads
    now = store.now()
    base = {q.name: q for q in queue_rows(app, now, worker_registry(app, now))}
    limits: dict[str, list[str]] = {}
    for d in app.registry.values():
        b = d.behaviour
        text = []
        if b.rate_limit:
            text.append(f"{d.name}: at most {b.rate_limit.count} starts per {b.rate_limit.period:g}s")
        if b.concurrency_limit:
            text.append(f"{d.name}: at most {b.concurrency_limit} running per group")
        if text:
            limits.setdefault(d.options.queue, []).extend(text)
    stored = store.features.queue_limits()
    return [QueueView(**vars(q), limits=limits.get(q.name, []),
                      jobs=sorted(d.name for d in app.registry.values() if d.options.queue == q.name),
                      stored_limits=limits_view(q.name, stored[q.name]) if q.name in stored else None)
            for _, q in sorted(base.items())]


# ---------------------------------------------------------------------------------- jobs
@dataclass
class JobFilter:
    queue: str | None = None
    state: str | None = None
    name: str | None = None
    text: str | None = None

    def check(self) -> JobFilter:
        if self.state and self.state not in STATES:
            raise InvalidOption(f"state must be one of {', '.join(STATES)}")
        for value in (self.queue, self.name, self.text):
            if value is not None and len(value) > 200:
                raise InvalidOption("filters are at most 200 characters")
        return self

    def args(self) -> dict[str, Any]:
        return {"queue": self.queue or None, "state": self.state or None, "name": self.name or None,
                "text": self.text or None}


def _summary_fields(row: Any, now: datetime) -> dict[str, Any]:
    return {"id": row.id, "name": row.name, "queue": row.queue, "state": row.state(now).value,
            "attempts": row.attempts, "max_attempts": row.max_attempts, "priority": row.priority,
            "created_at": _iso(row.created_at), "available_at": _iso(row.available_at),
            "arguments": display_arguments(row.payload), "last_error": row.last_error,
            "progress": _finite(row.progress), "label": row.label}


def job_summary(row: Any, now: datetime) -> JobSummary:
    """A jobs-table row as the lists show it."""
    return JobSummary(**_summary_fields(row, now))


DISPLAY_DEPTH = 4 * MAX_DEPTH
"""Nesting levels of a stored payload the pages and the API show decoded (errands writes at most
MAX_DEPTH + 2): a deeper one, written by hand, is shown as its text, since decoding it, encoding it
again as JSON and rendering it each recurse as deep."""


def display_arguments(payload: Any) -> Any:
    """A stored payload for people (pages, API, CLI): its JSON value, or its text (made safe to
    show) when it is no JSON, no UTF-8 or nested deeper than anyone writes (the worker buries such
    a job as BadPayload).  See :func:`errands.core.payload.for_display`."""
    if isinstance(payload, str) and too_deep(payload, DISPLAY_DEPTH):
        return safe_text(payload, 10_000)
    return for_display(payload)


CHECKPOINT_SHOWN = 500
"""Characters of a job's checkpoint (its JSON) the job page, the API and ``errands job show`` show."""


def display_checkpoint(text: Any) -> str | None:
    """A stored checkpoint for people: its JSON text, made safe to show, cut to CHECKPOINT_SHOWN
    characters (then ending in "…"); None when the job has none."""
    if text is None:
        return None
    shown = safe_text(text, CHECKPOINT_SHOWN + 1)
    return shown if len(shown) <= CHECKPOINT_SHOWN else shown[:CHECKPOINT_SHOWN - 1] + "…"


def displayable(value: Any) -> Any:
    """``value`` (decoded JSON, a read model) ready for any JSON encoder and any output: every
    string through :func:`errands.core.payload.safe_text` (lone surrogates and NUL become U+FFFD),
    every float JSON cannot hold (NaN, the infinities) spelled as text, tuples as lists."""
    if isinstance(value, ReadModel):
        return displayable(value.to_json())
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: displayable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [displayable(v) for v in value]
    return value


SORTS = ("newest", "oldest")
"""Job list orders: by id, so every page is a keyset page whatever the order."""


def list_jobs(app: Errands, flt: JobFilter, before_id: int | None = None, limit: int = 50, sort: str = "newest",
              after_id: int | None = None) -> JobPage:
    """One page of jobs: newest first pages down with ``before_id``, oldest first up with ``after_id``.

    A search by text or job name (``LIKE '%...%'``, which no index serves) looks at the
    ``SEARCH_WINDOW`` jobs (half as many on MySQL: ``search_window_share``) from where the page
    starts, not the whole table: ``searched`` says which, its count is the matches in that
    window, and the next page goes on past the window even when this one found fewer than
    ``limit`` jobs.
    """
    flt.check()
    if sort not in SORTS:
        raise InvalidOption(f"sort must be one of {', '.join(SORTS)}")
    store = app.reads
    now = store.now()
    oldest = sort == "oldest"
    before, after = (None, after_id) if oldest else (before_id, None)
    searching = bool(flt.text or flt.name)
    window = store.insights.window(SEARCH_WINDOW)
    edge = (store.insights.scan_edge("jobs", before_id=before, after_id=after, rows=window, oldest_first=oldest)
            if searching else None)
    rows = store.insights.search_jobs(**flt.args(), before_id=before, after_id=after, oldest_first=oldest, limit=limit,
                             edge_id=edge)
    full = len(rows) == limit
    if not full and (searching or (before is None and after is None)):
        total = len(rows)  # the page holds every match (of the window): no second pass
    elif searching:
        total = store.insights.count_jobs(**flt.args(), before_id=before, after_id=after, edge_id=edge,
                                          oldest_first=oldest)
    else:
        total = store.insights.count_jobs(**flt.args())
    more = rows[-1].id if full else edge
    return JobPage([job_summary(r, now) for r in rows], min(total, COUNT_CAP), sort, total > COUNT_CAP,
                   None if oldest else more, more if oldest else None, _searched(searching, edge, window))


def _searched(searching: bool, edge: int | None, window: int) -> Searched | None:
    """What a text or name search looked at: ``window`` rows down (or up) to id ``edge_id``;
    ``complete`` when that reached the end of the table."""
    if not searching:
        return None
    return Searched(window, edge, edge is None)


def error_history(app: Errands, job_id: int, *, tracebacks: bool = True) -> tuple[list[ErrorEntry], bool]:
    """A job's error history for people, oldest first, and whether kept tracebacks were left out
    (``tracebacks=False``: the viewer may not see them)."""
    rows = app.store.jobs.errors(job_id)
    hidden = not tracebacks and any(r.traceback is not None for r in rows)
    return [ErrorEntry(r.attempt, _iso(r.failed_at), r.error_type, r.error_message,
                       r.traceback if tracebacks else None) for r in rows], hidden


def run_logs(app: Errands, job_id: int, *, tracebacks: bool = True) -> tuple[list[AttemptLogs], bool]:
    """What each attempt of a job logged, oldest attempt first, and whether records' tracebacks were
    left out (``tracebacks=False``: the viewer may not see them)."""
    attempts = app.store.jobs.run_logs(job_id)
    hidden = not tracebacks and any(line.traceback is not None for a in attempts for line in a.lines)
    return [AttemptLogs(a.attempt, a.worker, _iso(a.logged_at), a.dropped,
                        [LogEntry(_epoch_iso(line.at), line.level, line.logger, line.message,
                                  line.traceback if tracebacks else None) for line in a.lines])
            for a in attempts], hidden


def _epoch_iso(seconds: float) -> str | None:
    """A record's time (epoch seconds of the worker host's clock) as ISO text, None when it is none."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def job_detail(app: Errands, job_id: int, *, tracebacks: bool = True) -> JobDetail:
    """One job wherever it is (jobs, dead letter, results), with why it waits if it does and its
    error history (``tracebacks=False``: without the kept tracebacks, for viewers who may not see them).
    Always read from the primary, never the read replica: this is the page an operator acts on (cancel,
    retry, forget) and comes back to, and a job a replica has not replayed yet would read as missing."""
    if not _is_job_id(job_id):
        raise JobNotFound(f"no job has the id {job_id!r}: job ids are integers from 1 to {ID_MAX}")
    store = app.store
    row = store.jobs.get_job(job_id)
    if row is not None:
        now = store.now()
        errors, hidden = error_history(app, job_id, tracebacks=tracebacks) if row.attempts else ([], False)
        logs, logs_hidden = run_logs(app, job_id, tracebacks=tracebacks) if row.attempts else ([], False)
        return LiveJob(**_summary_fields(row, now), where="jobs", owner=row.reserved_by,
                       reserved_at=_iso(row.reserved_at), lease_until=_iso(row.reserved_until),
                       timeout=_finite(row.timeout), unique_key=row.unique_key, expires_at=_iso(row.expires_at),
                       deadline_at=_iso(row.deadline_at),
                       waits_for=[parent for _, parent in store.insights.dependencies_of(row.id)]
                       if row.blocked_by is not None else [],
                       batch_id=row.batch_id, concurrency_key=row.concurrency_key, rate_key=row.rate_key,
                       progress_message=row.progress_message, cancel_requested=row.cancel_requested_at is not None,
                       checkpoint=display_checkpoint(row.checkpoint), resumptions=row.resumptions,
                       why=why_waiting(app, row, now), errors=errors, tracebacks_hidden=hidden or logs_hidden,
                       workflow=None if row.batch_id is None else workflow_of(app, row.id, row.batch_id), logs=logs)
    dead = store.jobs.get_failed(job_id)
    if dead is not None:
        errors, hidden = error_history(app, job_id, tracebacks=tracebacks)
        logs, logs_hidden = run_logs(app, job_id, tracebacks=tracebacks)
        state = dead_state(dead.error_type, dead.error_message).value
        return DeadJob(dead.id, dead.name, dead.queue, state, "failed", dead.attempts, dead.max_attempts,
                       dead.priority, _iso(dead.created_at), _iso(dead.failed_at),
                       display_arguments(dead.payload), dead.error_type, dead.error_message, [], dead.label,
                       errors, hidden or logs_hidden, workflow=workflow_of(app, dead.id),
                       checkpoint=display_checkpoint(dead.checkpoint), logs=logs)
    result = store.features.get_result(job_id)
    if result is not None:
        errors, hidden = error_history(app, job_id, tracebacks=tracebacks)
        logs, logs_hidden = run_logs(app, job_id, tracebacks=tracebacks)
        return FinishedJob(result.id, result.name, result.queue, result.state.value, "results", result.attempts,
                           _iso(result.finished_at), result.result, result.message, result.batch_id, [],
                           result.label, errors, hidden or logs_hidden,
                           workflow=None if result.batch_id is None else workflow_of(app, result.id, result.batch_id),
                           logs=logs)
    raise JobNotFound(f"job {job_id} is in no table: it finished without a kept result, or never existed")


def why_waiting(app: Errands, row: Any, now: datetime) -> list[str]:
    """Every reason a waiting job is not running right now, in words (empty: it should run soon).

    Each kind of reason is asked in turn (its schedule or dependency, its queue, the workers, its
    definition's limits), so the job page can list them all rather than the first one found."""
    state = row.state(now)
    if state is JobState.RUNNING:
        return []
    if state is JobState.STALE:
        return [_stale_reason(app, row, now)]
    if state is JobState.EXPIRED:
        return [f"it expired at {_iso(row.expires_at)} before a worker started it: no worker will; the next "
                "maintenance pass (within a minute) moves it to the dead letter as errands.JobExpired"]
    if row.deadline_at is not None and row.deadline_at <= now and row.reserved_by is None:
        return [f"its deadline passed at {_iso(row.deadline_at)}: no worker will start it; the next maintenance "
                "pass (within a minute) moves it to the dead letter as errands.DeadlineExceeded"]
    reasons = _state_reasons(app, row, state, now) + _queue_reasons(app, row, now) + _limit_reasons(app, row)
    if not reasons and state is JobState.READY:
        reasons.append("nothing holds it back: a worker should claim it at its next poll")
    return reasons


def _stale_reason(app: Errands, row: Any, now: datetime) -> str:
    """Why a stale job is stale, in the words the workers page uses for its worker (the same rule:
    a worker is alive while its last heartbeat is younger than its own lease, which is its claims')."""
    ended = (now - row.reserved_until).total_seconds()
    worker = next((w for w in worker_registry(app, now) if w.id == row.reserved_by), None)
    if worker is None:
        whose = f"worker {row.reserved_by}, which stopped heart-beating and is no longer registered"
    else:
        lease = f"its lease of {worker.alive_within:g} s" if worker.lease is not None else \
            f"{worker.alive_within:g} s (it recorded no lease)"
        whose = (f"worker {row.reserved_by}, which stopped heart-beating {worker.seconds_since_heartbeat:,.0f} s "
                 f"ago ({'still counted alive' if worker.alive else 'not alive: that is more than ' + lease})")
    return (f"its lease ran out {ended:,.0f} s ago: it is held by {whose}; any worker's recovery "
            "(or \"recover now\") gives it back")


_DEPENDENCY_REASONS = {
    "jobs": "it waits for job {parent} to succeed",
    "failed": "it waits for job {parent}, which is in the dead letter (retry it to go on)",
    "cancelled": "it waits for job {parent}, which was cancelled",
    "gone": "it waited for job {parent}, which has finished: the next sweep releases it",
}


def _state_reasons(app: Errands, row: Any, state: JobState, now: datetime) -> list[str]:
    """Its own state holds it back: scheduled for later, or waiting for the job it depends on."""
    if state is JobState.DELAYED:
        wait = (row.available_at - now).total_seconds()
        return [f"it is scheduled for later: due in {wait:,.0f}s ({row.available_at.isoformat()})"]
    if state is JobState.BLOCKED:
        waits = app.store.insights.dependencies_of(row.id)
        reasons = [_DEPENDENCY_REASONS.get(where, "it is blocked").format(parent=parent) for where, parent in waits]
        if row.blocked_by is not None and row.blocked_by > len(waits):
            reasons.append(f"and {row.blocked_by - len(waits)} more job(s)")
        return reasons or ["it is blocked"]
    return []


def _queue_reasons(app: Errands, row: Any, now: datetime) -> list[str]:
    """Its queue holds it back: paused, or no live worker listens to it."""
    reasons = []
    if row.queue in app.store.features.paused_queues():
        reasons.append(f"queue {row.queue} is paused")
    if not any(w.alive and row.queue in w.queues for w in worker_registry(app, now)):
        reasons.append(f"no live worker listens to queue {row.queue}")
    return reasons


def _limit_reasons(app: Errands, row: Any) -> list[str]:
    """Its definition holds it back: unknown to this app, a full concurrency group, a used-up rate limit."""
    definition = app.registry.get(row.name)
    if definition is None:
        return [f"no job named {row.name!r} is registered in this app (workers of another app may know it)"]
    reasons = []
    b = definition.behaviour
    if b.concurrency_limit and row.concurrency_key and _storable(row.concurrency_key):
        running = app.store.insights.group_running(row.concurrency_key)
        if running >= b.concurrency_limit:
            reasons.append(f"its concurrency group {row.concurrency_key!r} is full "
                           f"({running} of {b.concurrency_limit} running)")
    if b.rate_limit:
        key = row.rate_key
        starts = app.store.insights.rate_starts(rate_window(row.name, key), b.rate_limit.period)
        if starts >= b.rate_limit.count:
            whose = "its rate limit" if key is None else f"its rate limit for key {key!r}"
            reasons.append(f"{whose} is used up ({starts} of {b.rate_limit.count} starts in the last "
                           f"{b.rate_limit.period:g}s)")
    return reasons


# ---------------------------------------------------------------------------------- dead letter
def dead_letter(app: Errands, flt: JobFilter, before_id: int | None = None, limit: int = 50) -> DeadLetterPage:
    """One keyset page of the dead letter (newest first) and its entries grouped by job and error."""
    store = app.reads
    args: dict[str, Any] = {"queue": flt.queue or None, "name": flt.name or None, "text": flt.text or None}
    # A text or name search looks at DEAD_SEARCH_WINDOW entries from the page's start (see list_jobs);
    # its groups at as many from the newest.
    searching = bool(flt.text or flt.name)
    window = store.insights.window(DEAD_SEARCH_WINDOW)
    edge = store.insights.scan_edge("failed", before_id=before_id, rows=window) if searching else None
    rows = store.insights.search_failed(**args, before_id=before_id, limit=limit, edge_id=edge)
    full = len(rows) == limit
    if not full and (searching or before_id is None):
        total = len(rows)
    else:
        total = store.insights.count_failed(**args, before_id=before_id if searching else None, edge_id=edge)
    if not full and before_id is None:  # the page holds every entry the groups would read: no second pass
        groups = group_failures(rows)
    else:
        top_edge = edge if before_id is None or not searching \
            else store.insights.scan_edge("failed", rows=window)
        groups = store.insights.failure_groups(**args, edge_id=top_edge, newest=store.insights.window(GROUPED_NEWEST))
    return DeadLetterPage(
        [DeadEntry(r.id, r.name, r.queue, r.attempts, _iso(r.failed_at), r.error_type, r.error_message,
                   display_arguments(r.payload), r.label) for r in rows],
        [FailureGroupView(g.name, g.error_type, g.message, g.entries, _iso(g.last_failed_at), g.example_id)
         for g in groups],
        min(total, COUNT_CAP), total > COUNT_CAP, rows[-1].id if full else edge,
        _searched(searching, edge, window))


def matching_failed(app: Errands, flt: JobFilter, limit: int = 100_000) -> list[int]:
    return app.store.insights.failed_ids(queue=flt.queue or None, name=flt.name or None, text=flt.text or None,
                                         limit=limit)


BULK_CHUNK = 1000
"""Dead-letter entries moved per transaction by a bulk retry or forget: short transactions (no lock
held on 100,000 rows), and progress that moves.  An entry someone else moved meanwhile is skipped,
so an interrupted bulk action can simply be started again."""


def _in_chunks(ids: list[int], act: Callable[[list[int]], Any],
               progress: Callable[[int], None] | None) -> Iterator[Any]:
    for start in range(0, len(ids), BULK_CHUNK):
        chunk = ids[start:start + BULK_CHUNK]
        yield act(chunk)
        if progress is not None:
            progress(len(chunk))


def retry_failed(app: Errands, actor: str, ids: list[int], progress: Callable[[int], None] | None = None) -> int:
    _check_ids(ids)
    moved = [i for part in _in_chunks(ids, app.store.jobs.retry_failed, progress) for i in part]
    if moved:
        app.store.accounts.audit(actor, "retry", _targets(moved), f"{len(moved)} dead-letter entries retried")
    return len(moved)


def forget_failed(app: Errands, actor: str, ids: list[int], progress: Callable[[int], None] | None = None) -> int:
    _check_ids(ids)
    count: int = sum(_in_chunks(ids, app.store.jobs.forget_failed, progress))
    if count:
        app.store.accounts.audit(actor, "forget", _targets(ids), f"{count} dead-letter entries forgotten")
    return count


def _targets(ids: list[int]) -> str:
    text = ",".join(str(i) for i in ids[:20])
    return f"jobs {text}" + (f" and {len(ids) - 20} more" if len(ids) > 20 else "")


# ---------------------------------------------------------------------------------- other actions
def recover_now(app: Errands, actor: str) -> Recovered:
    """Release the jobs whose lease expired now (workers also do it on their own), audited."""
    report = app.recover_stale()  # (the on_retry / on_dead hooks of what it ends run here)
    app.store.accounts.audit(actor, "recover", f"{len(report.released)} released, {len(report.buried)} buried")
    return Recovered(report.released, report.buried)


def waiting_in(app: Errands, queue: str) -> list[int]:
    """The ids of a queue's unreserved jobs, oldest first, read a keyset page at a time."""
    check_queue_name(queue)
    return [r.id for r in _waiting_rows(app.store, queue)]


def _waiting_rows(store: Any, name: str) -> Iterator[Any]:
    after = 0
    while True:
        rows = store.insights.search_jobs(queue=name, after_id=after, oldest_first=True, limit=1000)
        if not rows:
            return
        yield from (r for r in rows if r.reserved_by is None)
        after = rows[-1].id


def purge_queue(app: Errands, actor: str, queue: str, ids: list[int],
                progress: Callable[[int], None] | None = None) -> int:
    """Cancel the waiting jobs ``ids`` of ``queue`` (see :func:`waiting_in`), audited; returns how
    many ended cancelled.  Each ends as ``errands job cancel`` would end it (its batch counts it, its
    result says "purged from its queue"); a job a worker claims meanwhile is left to run."""
    cancelled = 0
    for job_id in ids:
        cancelled += app.store.features.cancel(job_id, app.result_ttl, waiting_only=True,
                                      message="purged from its queue") == "cancelled"
        if progress is not None:
            progress(1)
    app.store.accounts.audit(actor, "purge", f"queue {queue}", f"{cancelled} waiting jobs cancelled")
    return cancelled


def set_paused(app: Errands, actor: str, queue: str, paused: bool) -> None:
    """Pause or resume a queue (workers stop or start claiming from it), audited."""
    (app.pause_queue if paused else app.resume_queue)(queue)
    app.store.accounts.audit(actor, "pause" if paused else "resume", f"queue {queue}")


def cancel_job(app: Errands, actor: str, job_id: int) -> str:
    """Cancel a job (see ``Errands.cancel`` for the outcomes), audited."""
    _check_ids([job_id])
    outcome = app.cancel(job_id)
    app.store.accounts.audit(actor, "cancel", f"job {job_id}", outcome)
    return outcome


def enqueue_form(app: Errands) -> list[EnqueueableJob]:
    """The registered jobs the enqueue form offers, with their parameters."""
    out = []
    for name, d in sorted(app.registry.items()):
        params = [Parameter(p.name, p.default is inspect.Parameter.empty and
                            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD),
                            None if p.default is inspect.Parameter.empty else repr(p.default))
                  for p in d._signature.parameters.values()]
        out.append(EnqueueableJob(name, d.options.queue, params,
                                  (d.__doc__ or "").strip().splitlines()[0] if d.__doc__ else ""))
    return out


def enqueue(app: Errands, actor: str, name: str, args: Any, kwargs: Any, *, queue: str | None = None,
            delay: float | None = None, copies: int = 1) -> list[int]:
    """Enqueue a registered job from the panel: arguments checked against its signature, a hard cap."""
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise InvalidOption("arguments must be a JSON array and keyword arguments a JSON object")
    if isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= ENQUEUE_CAP:
        raise InvalidOption(f"copies must be between 1 and {ENQUEUE_CAP}")
    definition = app.get_job(name)
    options: dict[str, Any] = {k: v for k, v in (("queue", queue), ("delay", delay)) if v not in (None, "")}
    job = definition.using(**options) if options else definition
    prepared = [job.prepare(*args, **kwargs) for _ in range(copies)]
    handles = app.enqueue_many(prepared)
    ids = [h.id for h in handles]
    app.store.accounts.audit(actor, "enqueue", _targets(ids), f"{name} x{copies}")
    return ids


def enqueue_one(app: Errands, actor: str, name: str, args: list[Any], kwargs: dict[str, Any],
                **options: Any) -> int:
    """Enqueue registered job ``name`` once with ``Errands.enqueue``'s options (``errands enqueue``),
    audited as the panel's enqueue is; returns its id."""
    handle = app.enqueue(name, args, kwargs, **options)
    app.store.accounts.audit(actor, "enqueue", _targets([handle.id]), f"{name} x1")
    return handle.id


def periodic_view(app: Errands) -> list[ScheduleView]:
    """Every schedule (the code's and the stored ones): cron, time zone, the last slot run and the next three."""
    return schedules_view(app)


def run_periodic_now(app: Errands, actor: str, name: str) -> int:
    """Enqueue a schedule's job now (with its arguments, queue and priority), audited."""
    schedule = app.schedules.get(name)
    if schedule is None:
        row = app.store.schedules.get(name)
        if row is None:
            raise EnqueueError(f"no periodic job named {name!r}")
        try:
            stored = StoredSchedule(row, app.registry.get)
        except ConfigurationError as exc:
            raise EnqueueError(str(exc)) from None
        handle = stored.job.enqueue(*stored.args, **stored.kwargs)
        app.store.accounts.audit(actor, "run-now", f"job {handle.id}", f"schedule {name}")
        return handle.id
    handle = schedule.job.enqueue(*schedule.args, **schedule.kwargs)
    app.store.accounts.audit(actor, "run-now", f"job {handle.id}", f"periodic {name}")
    return handle.id


def audit_view(app: Errands, before_id: int | None = None, limit: int = 100) -> list[AuditEntry]:
    """Who did what, newest first (a keyset page below ``before_id``)."""
    return [AuditEntry(a.id, _iso(a.at), a.actor, a.action, a.target, a.detail)
            for a in app.store.accounts.audit_log(limit, before_id)]


__all__ = ["ENQUEUE_CAP", "SORTS", "STATES", "JobFilter", "audit_view", "bucket_window", "cancel_job", "dead_letter",
           "display_arguments", "displayable", "enqueue", "enqueue_form",
           "forget_failed", "job_detail", "list_jobs", "matching_failed", "overview", "periodic_view",
           "purge_queue", "queue_rows", "queues_view", "recover_now", "retry_failed", "run_periodic_now", "set_paused",
           "enqueue_one", "waiting_in",
           "throughput", "why_waiting", "worker_registry", "workers_view"]
