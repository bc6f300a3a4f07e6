"""Immutable values that cross the store boundary: what goes in, what comes out."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from .columns import CLAIMED, FAILED, JOBS, Column, Kind
from .errors import BadPayload
from .limits import RateLimit, rate_window, rate_window_lock
from .payload import decode_arguments

ToDatetime = Callable[[Any], datetime]
"""A dialect's reading of a stored time (``Dialect.to_datetime``)."""

FAR_PAST = datetime.min.replace(tzinfo=timezone.utc)
FAR_FUTURE = datetime.max.replace(tzinfo=timezone.utc)
"""What a stored time outside Python's dates (years 1-9999) reads as: written by hand, or by an
older errands that accepted a delay of 1e12 seconds.  Every page still renders such a row, and a
job due in the year 33,000 still counts as delayed."""


def as_int(value: Any, default: int = 0) -> int:
    """An integer column as int, or ``default`` when the row holds something else (SQLite keeps
    any value in any column): a listing shows the row rather than failing."""
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return default


def as_float(value: Any) -> float | None:
    """A nullable number column as float, or None when it holds no number."""
    if value is None or type(value) is float:
        return value
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def epoch_to_datetime(value: Any) -> datetime:
    """Seconds since 1970 (how SQLite stores times) as an aware UTC datetime, clamped to
    FAR_PAST..FAR_FUTURE; a value that is no number at all (SQLite keeps any) reads as FAR_PAST."""
    try:
        seconds = float(value)
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        try:
            return FAR_FUTURE if float(value) > 0 else FAR_PAST
        except (TypeError, ValueError, OverflowError):
            return FAR_PAST


class JobState(str, enum.Enum):
    """States a user sees; derived from columns and the database clock, never stored."""

    READY = "ready"
    DELAYED = "delayed"
    RUNNING = "running"
    STALE = "stale"
    BLOCKED = "blocked"
    """Waiting for the jobs it depends on (``using(after=...)``, a workflow) to succeed."""
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    """Ran successfully; known while its result is kept (``keep_result``)."""
    CANCELLED = "cancelled"
    """Cancelled before or while it ran; recorded with the results."""
    FINISHED = "finished"
    """No longer in any table: it ran successfully (or was forgotten, or its record expired)."""
    UNKNOWN = "unknown"
    """No job with this id was ever enqueued in this database (the id is beyond every id issued)."""
    EXPIRED = "expired"
    """Not started by its expiry (``expires_in`` / ``expires_at``): it never runs.  Kept in the dead
    letter (error type ``errands.JobExpired``), where an operator can retry or forget it."""


EXPIRED_ERROR = "errands.JobExpired"
"""The error type of a job that expired unstarted, in the dead letter (its state reads EXPIRED)."""
DEADLINE_ERROR = "errands.DeadlineExceeded"
"""The error type of a job buried because its deadline passed (no further attempt)."""


EXPIRED_MESSAGE = "not started"
"""How the message of an expired job's entry begins (the maintenance pass writes it): a handler that let
an ``errands.JobExpired`` of another job's ``result()`` escape failed with that type too, not expired."""


def dead_state(error_type: object, error_message: object) -> JobState:
    """The state of a dead-letter entry: EXPIRED for a job that expired unstarted, else FAILED."""
    expired = error_type == EXPIRED_ERROR and isinstance(error_message, str) and error_message.startswith(
        EXPIRED_MESSAGE)
    return JobState.EXPIRED if expired else JobState.FAILED


# Bits of the ``flags`` column: what must happen when a job ends, beyond deleting its row.
FLAG_RESULT = 1
"""Keep the outcome (return value or cancellation) in the results table."""
FLAG_BATCH = 2
"""Counts towards its batch (or chain): the batch's counters and callbacks."""
FLAG_DEPENDENTS = 4
"""Other jobs wait for this one (set when such a job is enqueued): unblock them on success."""
FLAG_UNIQUE_PERIOD = 256
"""Its unique key stays taken for a while after it ends (``unique_for``): stamp the key's expiry then."""
FLAG_DEADLINE = 1024
"""It has a ``deadline_at``: a failed attempt reads it before deciding whether another may start
(the claim returns no times, so only these jobs pay that read)."""
FLAG_WORKFLOW = 8
"""A step of a workflow: its outcome is kept until the workflow ends (plus the retention period),
because later steps may receive it and the workflow page shows it."""
FLAG_INPUTS = 16
"""Receives results of the jobs it waits for: the transaction that releases it writes them into
its arguments (``errands_steps.inputs`` says which and in what shape)."""


class UniqueRule(NamedTuple):
    """What an enqueue does when its unique key is held by a job still in the jobs table
    (``NewJob.unique_rule``; None there: :data:`KEEP`, today's rule).  Made by the job's options
    (``on_conflict``, ``unique_states``, ``debounce``) and followed by the store, under the key's row
    lock, in the transaction that would insert the job."""

    replace: bool = False
    """A waiting holder takes the new job's arguments, priority and run time (``on_conflict="replace"``);
    False: it is returned unchanged (``"keep"``)."""
    running: bool = True
    """A running holder takes the key too, and is returned (``"running"`` in ``unique_states``); False:
    the new job is stored beside it and takes the key over (one waiting plus one running per key)."""
    max_wait: float | None = None
    """Debounce: a replaced holder's run time is at most its ``created_at`` plus this many seconds."""


KEEP = UniqueRule()
"""The rule of a unique key when the job says nothing: a waiting or running holder is returned as it is."""


class NewJob(NamedTuple):
    """A validated job ready to be inserted (payload already encoded and size-checked).

    A named tuple: one is built per enqueue, and tuples build in C.
    """

    name: str
    queue: str
    payload: str
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    delay: float = 0.0
    run_at: datetime | None = None
    """Absolute time (aware UTC) that wins over ``delay`` when set."""
    unique_key: str | None = None
    """While a job with this key waits or runs, enqueueing another returns the existing one."""
    after: tuple[int, ...] = ()
    """Ids of jobs that must all succeed before this one may run; a negative number points at an
    earlier job of the same insert (-1: the one just before)."""
    concurrency_key: str | None = None
    """The concurrency group this run belongs to (``concurrency_limit``)."""
    flags: int = 0
    batch_id: int | None = None
    label: str | None = None
    """A display label for people (CLI, dashboard); searchable."""
    cost: int | None = None
    """Units of its rate limit a run uses (None: 1)."""
    unique_for: float | None = None
    """Seconds ``unique_key`` stays taken after the job ended (None: free at once)."""
    inputs: Any = None
    """Which results of the jobs in ``after`` this job receives, as its first argument: a job
    reference (one value) or a nested list of references (a list of values).  References follow
    ``after``'s numbering.  None: no results."""
    step: tuple[int, str] | None = None
    """(position, label) of a workflow step, for the workflow's graph."""
    blocked_by: int | None = None
    """Set by the store from ``after``: how many of those jobs have not succeeded yet (a value
    given here is replaced)."""
    unique_rule: UniqueRule | None = None
    """What an enqueue does when ``unique_key`` is held (None: :data:`KEEP`)."""
    expires_at: datetime | float | None = None
    """Aware UTC, or seconds after the insert by the database's clock: a job not started by then never
    starts (it ends as expired)."""
    deadline_at: datetime | float | None = None
    """Aware UTC, or seconds after the insert by the database's clock: after it, no further attempt
    (the job is buried with ``DeadlineExceeded``)."""
    rate_key: str | None = None
    """The rate-limit window this job's runs count in, as enqueue computed it (None: the job's own)."""
    age_after: float | None = None
    """Aging: seconds of waiting that earn the job one step of priority (None: it does not age)."""
    age_base: int | None = None
    """Aging: the priority it was enqueued with (the steps earned are ``priority - age_base``)."""
    age_cap: int | None = None
    """Aging: the highest priority waiting can give it (None once reached, or no aging)."""
    fairness_key: str | None = None
    """The tenant (or any key) the claim takes turns between (``fairness_key``), as enqueue computed it."""
    fair_turn: int = 0
    """Set by the store from ``fairness_key`` (a value given here is replaced): the key's turn, which
    the claim orders by after priority (0: no key, today's order)."""

    @property
    def is_plain(self) -> bool:
        """Whether this job uses no feature: every field after ``run_at`` at its default.  Such jobs
        take each dialect's fast insert, which writes only the columns every job has; any other
        value (a unique key, a dependency, a label, a new option) takes the path that writes it."""
        return self[8:] == _PLAIN_TAIL


_PLAIN_TAIL = NewJob("", "", "")[8:]


def all_plain(jobs: Sequence[NewJob]) -> bool:
    """Whether every job of a batch is plain (:attr:`NewJob.is_plain`), asked once per enqueue:
    the same comparison, made in a generator rather than through the property (a bulk enqueue
    asks it of every job)."""
    return all(j[8:] == _PLAIN_TAIL for j in jobs)


class ClaimedJob(NamedTuple):
    """What a claim hands a worker: only the columns needed to run and settle the job.

    Leaving timestamps out keeps a claim of hundreds of rows cheap to transfer and
    decode; the full row is one ``store.jobs.get_job(id)`` away.  A named tuple rather
    than a frozen dataclass: a claim builds hundreds at once, and tuples build in C.
    """

    id: int
    queue: str
    name: str
    payload: str
    priority: int
    attempts: int
    """Including this run: attempts are counted when a job is claimed."""
    max_attempts: int
    timeout: float | None
    reserved_by: str
    batch_id: int | None = None
    concurrency_key: str | None = None
    """The concurrency group, as enqueue computed it from the job's arguments (None: no group
    was stored; a job enqueued before its definition got a concurrency limit runs in the
    job's own group).  The worker reads it and never recomputes it."""
    flags: int = 0
    snoozes: int = 0
    """How often the job snoozed before this run (``raise Snooze``), against its ``max_snoozes``."""
    rate_key: str | None = None
    """The rate-limit key, as enqueue computed it from the job's arguments (None: the job's own
    window).  The worker reads it and never recomputes it."""
    fair_turn: int = 0
    """Its turn among the keyed jobs of its queue and priority (0: no fairness key): a claimed batch
    starts in claim order, priority, then turn, then id."""
    checkpoint: str | None = None
    """The JSON its handler last stored with ``current_job().checkpoint(value)`` (None: none yet): where
    this attempt resumes (``current_job().checkpoint_value``)."""
    resumptions: int = 0
    """How often a stopping worker gave the job back from a checkpoint (``Interrupted``), its attempt
    refunded, against its ``max_resumptions``."""

    @classmethod
    def read(cls, row: Sequence[Any]) -> ClaimedJob:
        """A row of ``CLAIM_COLUMNS`` read off the claim's hot path (recovery, the supervisor): its
        numbers made numbers, so that a row another program wrote cannot fail the statement that
        ends it.  (A claim builds its rows with ``tuple.__new__``: a worker checks them before a run.)"""
        return cls(**read_row(CLAIMED, row, _no_times))

    @property
    def arguments(self) -> tuple[list[Any], dict[str, Any]]:
        return decode_arguments(self.payload)


def _no_times(value: Any) -> datetime:
    raise TypeError("a claimed row holds no times")


@dataclass(frozen=True)
class JobRow:
    """One row of the jobs table as the worker and the tools see it."""

    id: int
    queue: str
    name: str
    payload: str
    priority: int
    attempts: int
    max_attempts: int
    timeout: float | None
    available_at: datetime
    created_at: datetime
    reserved_by: str | None
    reserved_at: datetime | None
    reserved_until: datetime | None
    last_error: str | None
    unique_key: str | None = None
    blocked_by: int | None = None
    """How many of the jobs it waits for have not succeeded yet (None: it waits for none)."""
    batch_id: int | None = None
    concurrency_key: str | None = None
    flags: int = 0
    cancel_requested_at: datetime | None = None
    progress: float | None = None
    progress_message: str | None = None
    label: str | None = None
    cost: int | None = None
    """Units of its rate limit a run uses (None: 1)."""
    admitted_at: datetime | None = None
    snoozes: int = 0
    expires_at: datetime | None = None
    deadline_at: datetime | None = None
    rate_key: str | None = None
    age_after: float | None = None
    age_base: int | None = None
    age_cap: int | None = None
    fairness_key: str | None = None
    fair_turn: int = 0
    """Its turn among the jobs of its queue and priority (0: no fairness key); see docs/features/fairness.md."""
    checkpoint: str | None = None
    """The JSON its handler last stored with ``current_job().checkpoint(value)``; see docs/features/checkpoints.md."""
    resumptions: int = 0
    """How often a stopping worker gave it back from a checkpoint, its attempt refunded."""

    @classmethod
    def from_row(cls, row: Sequence[Any], to_datetime: ToDatetime) -> JobRow:
        """A row read with ``columns.names(JOBS)``, for people (listings, ``get_job``): numbers that
        are no numbers read as 0 or None, times outside Python's dates as FAR_PAST/FAR_FUTURE, so
        that any row can be shown."""
        return cls(**read_row(JOBS, row, to_datetime))

    @property
    def arguments(self) -> tuple[list[Any], dict[str, Any]]:
        return decode_arguments(self.payload)

    def state(self, now: datetime) -> JobState:
        if self.expires_at is not None and self.reserved_by is None and self.expires_at <= now:
            return JobState.EXPIRED  # refused by every claim; the next maintenance pass moves it to the dead letter
        return state_in_table(self.reserved_by, self.blocked_by, self.available_at, self.reserved_until, now)


def state_in_table(reserved_by: str | None, blocked_by: int | None, available_at: datetime,
                   reserved_until: datetime | None, now: datetime) -> JobState:
    """The state of a job still in the jobs table, from its lease and schedule columns: the one
    place that decides it (job rows, workflow steps and every listing agree)."""
    if reserved_by is None:
        if blocked_by is not None:
            return JobState.BLOCKED
        return JobState.READY if available_at <= now else JobState.DELAYED
    if reserved_until is not None and reserved_until < now:
        return JobState.STALE
    return JobState.RUNNING


@dataclass(frozen=True)
class FailedJobRow:
    """One entry of the dead letter (``failed_jobs``)."""

    id: int
    queue: str
    name: str
    payload: str
    priority: int
    attempts: int
    max_attempts: int
    timeout: float | None
    created_at: datetime
    failed_at: datetime
    error_type: str
    error_message: str
    label: str | None = None
    cost: int | None = None
    unique_key: str | None = None
    batch_id: int | None = None
    concurrency_key: str | None = None
    flags: int = 0
    rate_key: str | None = None
    fairness_key: str | None = None
    checkpoint: str | None = None
    """The last checkpoint, kept so that a retry from the dead letter resumes from it."""

    @classmethod
    def from_row(cls, row: Sequence[Any], to_datetime: ToDatetime) -> FailedJobRow:
        """A row read with ``columns.names(FAILED)`` (see :meth:`JobRow.from_row`)."""
        return cls(**read_row(FAILED, row, to_datetime))


def read_row(columns: tuple[Column, ...], row: Sequence[Any], to_datetime: ToDatetime) -> dict[str, Any]:
    """The one decoder of job rows: ``row`` holds ``columns`` in their order, each read by its kind
    so that whatever another program wrote there reads as a value of the right type."""
    return {c.name: _read(c, value, to_datetime) for c, value in zip(columns, row, strict=True)}


_NUMBERS = (Kind.ID, Kind.BIGINT, Kind.INT)


def _read(column: Column, value: Any, to_datetime: ToDatetime) -> Any:
    if value is None and column.nullable:
        return None
    kind = column.kind
    if kind in _NUMBERS:
        return as_int(value, column.unreadable)
    if kind is Kind.FLOAT:
        return as_float(value)
    if kind is Kind.TIME:
        return to_datetime(value)
    return value


CLAIMED_FIELDS = tuple(c.name for c in CLAIMED)
"""A claimed row's columns, in ClaimedJob's field order (a test holds the two together)."""


@dataclass(frozen=True)
class FailedJob:
    """A run that failed, as ``on_retry`` and ``on_dead`` hooks receive it (one-argument hooks).

    ``args`` and ``kwargs`` are the arguments as the handler got them (both empty when the
    stored payload cannot be decoded: its error says so); ``attempts`` counts this run;
    ``retry_in`` is the seconds until the next attempt (None: the job went to the dead letter)."""

    id: int
    name: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    error_type: str
    error_message: str
    attempts: int
    max_attempts: int
    retry_in: float | None = None
    batch_id: int | None = None

    @property
    def dead(self) -> bool:
        """Whether the job went to the dead letter (no retry)."""
        return self.retry_in is None

    @property
    def error(self) -> str:
        """``"ErrorType: message"``, as logs and the dashboard show it."""
        return f"{self.error_type}: {self.error_message}"

    @classmethod
    def of(cls, row: ClaimedJob, error_type: str, error_message: str, retry_in: float | None = None,
           arguments: tuple[list[Any], dict[str, Any]] | None = None) -> FailedJob:
        """The record of claimed ``row``'s run; ``arguments`` as the handler got them, when known."""
        if arguments is None:
            try:
                arguments = decode_arguments(row.payload)
            except BadPayload:
                arguments = ([], {})
        args, kwargs = arguments
        return cls(row.id, row.name, row.queue, tuple(args), dict(kwargs), error_type, error_message,
                   row.attempts, row.max_attempts, retry_in, row.batch_id)


@dataclass(frozen=True)
class WorkerRow:
    """A worker's registry entry; ``heartbeat_at``, with its own ``lease``, says whether it is alive."""

    id: str
    hostname: str
    pid: int
    queues: str
    concurrency: int
    started_at: datetime
    heartbeat_at: datetime
    jobs_done: int
    lease: float | None = None
    """Seconds its claims stay its own without a heartbeat (None: registered by an errands before schema 7)."""
    heartbeat_every: float | None = None
    """Seconds between its heartbeats (None: as ``lease``)."""
    command: str | None = None
    """What an operator asked of it, read with its next heartbeat: ``"quiet"`` (claim nothing more) or
    ``"stop"`` (finish and exit); None: run (schema version 11)."""
    status: str | None = None
    """What it reported doing at its last heartbeat: ``"quiet"``, ``"stopping"``, or None: running."""


@dataclass(frozen=True)
class QueueCounts:
    ready: int = 0
    delayed: int = 0
    running: int = 0
    stale: int = 0
    failed: int = 0
    blocked: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"ready": self.ready, "delayed": self.delayed, "running": self.running,
                "stale": self.stale, "failed": self.failed, "blocked": self.blocked}


@dataclass(frozen=True)
class ResultRow:
    """How a job ended, kept for a while after its row left the jobs table (``keep_result``)."""

    id: int
    queue: str
    name: str
    state: JobState
    """SUCCEEDED or CANCELLED."""
    result: Any
    """The handler's return value (decoded JSON); None for cancelled runs."""
    attempts: int
    batch_id: int | None
    finished_at: datetime
    expires_at: datetime
    message: str | None = None
    undecodable: bool = False
    """The stored result is not JSON (written by hand): ``result`` holds its text, for people to
    read; ``handle.result()`` raises BadPayload instead of returning it."""
    label: str | None = None


@dataclass(frozen=True)
class ErrorRow:
    """One failed attempt of a job, from its error history (``errands_job_errors``)."""

    job_id: int
    attempt: int
    failed_at: datetime
    error_type: str
    error_message: str
    traceback: str | None = None
    """Kept only when the app or the job opts in (``keep_traceback``)."""


@dataclass(frozen=True)
class BatchRow:
    """A batch (or chain) of jobs and how far it got."""

    id: int
    kind: str
    """"batch", "chain" or "workflow"."""
    total: int
    done: int
    failed: int
    created_at: datetime
    completed_at: datetime | None
    failure_fired_at: datetime | None
    name: str | None = None
    policy: str | None = None
    """A workflow's failure policy: "block" (dependants of a dead step wait) or "cancel"."""

    @property
    def pending(self) -> int:
        return self.total - self.done - self.failed

    @property
    def percent(self) -> float:
        return 100.0 if not self.total else round(100.0 * (self.done + self.failed) / self.total, 1)

    @property
    def finished(self) -> bool:
        return self.done + self.failed >= self.total


@dataclass(frozen=True)
class StepRow:
    """One step of a workflow and where it stands."""

    job_id: int
    position: int
    label: str
    """The step's job name (or the label it was given)."""
    parents: tuple[int, ...]
    """Job ids of the steps it waits for."""
    state: JobState
    error: str | None = None
    """Why it failed or was cancelled."""


@dataclass(frozen=True)
class WorkflowRow:
    """A workflow (or chain, or batch), its steps and its progress."""

    batch: BatchRow
    steps: tuple[StepRow, ...]

    @property
    def cancelled(self) -> int:
        """Steps cancelled (by a cancel, or under ``policy="cancel"`` after a dead step): the batch's
        ``failed`` counter counts them too, as ended without success; here they are told apart."""
        return sum(1 for s in self.steps if s.state is JobState.CANCELLED)

    @property
    def failed(self) -> int:
        """Steps that ended in the dead letter (failed or expired), cancelled ones not counted."""
        return max(self.batch.failed - self.cancelled, 0)

    @property
    def state(self) -> str:
        """"running", "blocked" (a dead or cancelled step holds the rest: no step can run and some
        wait), "succeeded", "failed" or "cancelled"."""
        states = [s.state for s in self.steps]
        if not self.batch.finished:
            return "blocked" if any(s in (JobState.FAILED, JobState.EXPIRED, JobState.CANCELLED) for s in states) \
                and not any(s in (JobState.RUNNING, JobState.READY, JobState.DELAYED, JobState.STALE)
                            for s in states) else "running"
        if self.batch.failed == 0:
            return "succeeded"
        return "cancelled" if all(s in (JobState.CANCELLED, JobState.SUCCEEDED, JobState.FINISHED)
                                  for s in states) and JobState.FAILED not in states \
            and JobState.EXPIRED not in states else "failed"


class Limit(NamedTuple):
    """One constraint a claimed run must pass before it may start."""

    kind: str
    """"rate" (at most ``limit`` starts per ``period`` seconds), "concurrency" (at most ``limit`` running
    of a group) or "queue" (at most ``limit`` running of the queue ``name``, set by an operator)."""
    name: str
    """The counter key: the rate window (the job's name, or its per-key window, ``rate_window``),
    the group key for concurrency."""
    limit: int
    period: float = 0.0
    lock: str = ""
    """The lock row admission takes for it ("": ``kind:name``; a per-key rate window: its bucket's)."""

    @property
    def lock_name(self) -> str:
        return self.lock or f"{self.kind}:{self.name}"

    @classmethod
    def rate(cls, name: str, key: str | None, limit: RateLimit) -> Limit:
        """Job ``name``'s rate limit for a run stored with rate key ``key``: the job's own window
        under its own lock row, or the key's window under its bucket's lock row."""
        if key is None:
            return cls("rate", name, limit.count, limit.period)
        window = rate_window(name, key)
        return cls("rate", window, limit.count, limit.period, rate_window_lock(window))


class QueueLimits(NamedTuple):
    """The limits an operator stored for a queue (None: no such limit)."""

    concurrency: int | None
    """At most this many of the queue's jobs run at once, over every worker."""
    rate_count: int | None
    rate_period: float | None
    """At most ``rate_count`` of the queue's jobs start in any ``rate_period`` seconds."""


QUEUE_RATE_PREFIX = "queue:"
"""The rate-limit key of a queue's stored rate (its starts are counted apart from any job's)."""


class Admitted(NamedTuple):
    """What admission decided for a batch of claimed runs."""

    admitted: list[int]
    waits: dict[int, float]
    """Each refused run and the seconds after which it is due again."""
    later: dict[int, float] = {}
    """Admitted runs granted a rate-limit start ahead (``admission(ahead=..., lead=...)``): the
    seconds (of the database's clock, from the decision) before which each must not start."""
    starts: dict[int, list[tuple[str, Any, int]]] = {}
    """Each run granted a rate-limited start: its starts as stored (window, started_at, units), which
    ``forget_starts`` takes back if the run never started."""
    decided_at: float | None = None
    """The decision's moment by this process's ``time.monotonic()`` (the ``later`` seconds count
    from it); None when no rate limit was decided."""


class Failure(NamedTuple):
    """One failed attempt on its way to the error history."""

    job_id: int
    attempt: int
    error_type: str
    error_message: str
    traceback: str | None = None
    trim: bool = False
    """Trim the history to ``HISTORY_CAP`` now (done at least when a job is buried)."""


class AlertState(NamedTuple):
    """One alert threshold's crossing state, as the alerts table holds it."""

    kind: str
    subject: str
    """The queue of a per-queue alert; "" otherwise."""
    crossed: bool
    value: float | None
    threshold: float | None
    changed_at: datetime | None
    checked_at: datetime | None
