"""How an attempt ends: described once, decided in one place, announced to the hooks in one place.

Every path that ends an attempt goes through here: the worker settling what its runs came to, the
supervisor settling the jobs of a process it killed (hard timeout) or lost, lease recovery of the
jobs of a worker that died, and an operator's recovery.  Each describes the end as a
:class:`RunOutcome` (what happened, before any policy), :func:`decide` turns it into one
:class:`Settlement` from the job's :class:`~errands.core.retry.JobPolicy` (completed, retry at,
snoozed, buried, cancelled), the store's endings part applies it (``store.endings``), and
:func:`announce` calls the ``on_retry`` / ``on_dead`` hooks for the endings that committed, in the
process that decided them.  So a hook that alerts on dead jobs hears of every dead job, whichever
path buried it.

Nothing here does I/O: the decision is a pure function of the run, the job's policy and the
attempts counted at claim time.
"""

from __future__ import annotations

import enum
import traceback as tb
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from .context import context_of
from .errors import BadPayload
from .hooks import call_on_dead, call_on_expired, call_on_retry, chain_of
from .host import AppHost
from .payload import ERROR_TEXT_CAP, encode_result, safe_text
from .retry import JobPolicy, retry_delay
from .rows import DEADLINE_ERROR, EXPIRED_ERROR, EXPIRED_MESSAGE, FLAG_RESULT, FLAG_WORKFLOW, ClaimedJob, FailedJob
from .runlogs import RunLog


class Result(str, enum.Enum):
    """What an attempt came to, as the path that saw it end says (before any policy)."""

    OK = "ok"
    ERROR = "error"
    """The handler raised (or its process died, or it overran its timeout): retry if the policy and
    the attempts allow."""
    FATAL = "fatal"
    """The job can never run (unknown name, undecodable payload, ``Discard``): bury at once."""
    CANCELLED = "cancelled"
    """It stopped because its cancellation was requested: record it, never retry."""
    SNOOZED = "snoozed"
    """The handler raised ``Snooze``: run it again later without spending an attempt."""
    INTERRUPTED = "interrupted"
    """The handler raised ``Interrupted`` (its worker is stopping; it stored a checkpoint): given back at
    once without spending an attempt while its ``max_resumptions`` last, then an attempt like a lost one."""
    LOST = "lost"
    """Its worker stopped heart-beating and the lease expired: back at once while attempts are left."""
    UNKNOWN = "unknown"
    """No job of this worker's app has the stored name (a rolling deploy's new job, or a name enqueued
    by other code): held back, its attempt refunded, for a worker that knows it, while the app's grace
    lasts; then the dead letter."""


class RunOutcome(NamedTuple):
    """One attempt's end as the worker (or the supervisor, or recovery) describes it."""

    row: ClaimedJob
    result: Result
    duration: float
    error_type: str = ""
    error_message: str = ""
    exc: BaseException | None = None
    value: Any = None
    """The handler's return value (OK runs)."""
    retry_delay: float | None = None
    """Seconds the handler asked to wait before the next attempt (``raise Retry(delay)``) or run
    (``raise Snooze(seconds)``)."""
    dead_message: str | None = None
    """The message to keep if the attempt sends the job to the dead letter (None: ``error_message``)."""
    deadline_in: float | None = None
    """Seconds left (by the database's clock) before the job's ``deadline`` (None: it has none): no
    attempt may start after it.  Read for jobs flagged ``FLAG_DEADLINE`` only."""
    logs: RunLog | None = None
    """The ``logging`` records the run emitted (when the app keeps run logs and it logged):
    settling writes them with the ending (:mod:`errands.core.runlogs`)."""

    @property
    def error_text(self) -> str:
        return f"{self.error_type}: {self.error_message}"


# ---------------------------------------------------------------------------------- settlements
class Completed(NamedTuple):
    """A successful run: its row is deleted; a kept result, a batch, dependants are recorded with it."""

    job_id: int
    flags: int
    batch_id: int | None
    result: str | None
    """The return value as JSON (when ``FLAG_RESULT``)."""
    result_ttl: float
    unstorable: str | None = None
    """Why the return value could not be kept (it is kept as null), for the worker's log."""


class RetryAt(NamedTuple):
    """A failed attempt with attempts left: back in line after ``delay`` seconds of database time."""

    job_id: int
    attempt: int
    delay: float
    error_type: str
    error_message: str
    traceback: str | None = None


class Snoozed(NamedTuple):
    """``raise Snooze``: back in line after ``delay`` seconds with its attempt given back."""

    job_id: int
    delay: float


class Resumed(NamedTuple):
    """A run stopped at a checkpoint because its worker is stopping (``Interrupted``): back in line at
    once with its attempt given back and one more resumption; its checkpoint stays in the row."""

    job_id: int
    delay: float = 0.0


class Buried(NamedTuple):
    """To the dead letter, with the error kept (and the traceback, when the job keeps them)."""

    job_id: int
    attempt: int
    error_type: str
    error_message: str
    traceback: str | None = None


class Expired(NamedTuple):
    """A waiting job not started by its expiry (the maintenance pass's, never a run's): to the dead
    letter as ``errands.JobExpired``, and the ``on_expired`` hooks, not ``on_dead``, hear of it."""

    job_id: int
    attempt: int
    error_type: str
    error_message: str
    traceback: str | None = None


class HeldBack(NamedTuple):
    """A run this worker cannot start (its job's name is unknown here): back in line after ``delay``
    with its attempt refunded, while the job is younger than ``grace`` seconds (the database's clock
    judges); once older, the store writes it as :class:`Buried` instead."""

    job_id: int
    delay: float
    grace: float
    error_type: str
    error_message: str


class CancelledRun(NamedTuple):
    """Stopped by a cancellation request: recorded with the results for ``record_ttl`` seconds."""

    job_id: int
    message: str
    record_ttl: float


Settlement = Completed | RetryAt | Snoozed | Resumed | Buried | CancelledRun | HeldBack | Expired


Ended = tuple[ClaimedJob, Settlement]
"""An ending that committed, with the job's facts (for the hooks and the log)."""


@dataclass(frozen=True)
class RecoveryReport:
    """What one pass of stale-lease recovery did."""

    released: list[int]
    """Jobs back in line (their worker died; attempts were left)."""
    buried: list[int]
    """Jobs moved to the dead letter (their last attempt's worker died)."""
    ended: list[Ended] = field(default_factory=list)
    """Each ending, for :func:`announce` (the process that recovered calls the hooks)."""


class PolicyLookup(Protocol):
    """Where a job's policy comes from (the app: its registry, with the app's defaults)."""

    def policy_of(self, name: str) -> JobPolicy:
        """The policy of the job called ``name``; an unknown name gets the app's fallback."""


# ---------------------------------------------------------------------------------- the decision
def decide(outcome: RunOutcome, policy: JobPolicy) -> Settlement:
    """The one decision of how an attempt ends.

    ``outcome.row`` carries the attempts counted at claim time and the snoozes so far, so this is
    a pure function; the store applies what it returns, conditional on the run still being its
    worker's.  It never raises: a job's own code it calls (its backoff, the encoding of what its
    handler returned) may, and then the job goes to the dead letter saying why (errands.SettleError),
    rather than the worker, the supervisor or a recovery failing on it."""
    try:
        return _decide(outcome, policy)
    except Exception as exc:  # a job's backoff or return value raised: that costs the job, never its caller
        row = outcome.row
        return Buried(row.id, row.attempts, "errands.SettleError", safe_text(
            f"deciding how this attempt ends failed ({type(exc).__name__}: {exc}); the attempt ended with "
            f"{outcome.error_text if outcome.error_type else 'success'}", ERROR_TEXT_CAP))


def _decide(outcome: RunOutcome, policy: JobPolicy) -> Settlement:
    settlement = _ending(outcome, policy)
    left = outcome.deadline_in
    if left is not None and isinstance(settlement, (RetryAt, Snoozed, Resumed)) and settlement.delay >= left:
        return past_deadline(outcome, settlement.delay, left,
                             settlement.traceback if isinstance(settlement, RetryAt) else None)
    return settlement


def past_deadline(outcome: RunOutcome, delay: float, left: float, traceback: str | None = None) -> Buried:
    """A run whose next attempt would start after the job's deadline: the dead letter, as
    ``errands.DeadlineExceeded``, with the error of the attempt that ended."""
    row = outcome.row
    when = (f"its deadline is {left:.1f}s away and its next attempt would start in {delay:.1f}s" if left > 0
            else "its deadline has passed")
    cause = outcome.error_text if outcome.error_type else outcome.result.value
    return Buried(row.id, row.attempts, DEADLINE_ERROR, safe_text(
        f"no further attempt: {when}. The last attempt ended with {cause}", ERROR_TEXT_CAP), traceback)


def expired(row: ClaimedJob, expires_at: datetime) -> Expired:
    """How a waiting job that was not started by its expiry ends: expired (it never runs), kept in the
    dead letter as ``errands.JobExpired`` so that an operator can see, retry or forget it."""
    return Expired(row.id, row.attempts, EXPIRED_ERROR,
                   f"{EXPIRED_MESSAGE} by its expiry ({_moment(expires_at)}); it never ran" if row.attempts == 0 else
                   f"{EXPIRED_MESSAGE} again by its expiry ({_moment(expires_at)}) after {row.attempts} attempt(s)")


def overdue(row: ClaimedJob, deadline_at: datetime, last_error: str | None) -> Buried:
    """How a waiting job (a retry, or a first run) whose deadline passed ends: no further attempt,
    ``errands.DeadlineExceeded``, with the last attempt's error when it had one."""
    tail = f"; the last attempt ended with {last_error}" if last_error else ""
    return Buried(row.id, row.attempts, DEADLINE_ERROR, safe_text(
        f"no further attempt: its deadline ({_moment(deadline_at)}) passed while it waited{tail}", ERROR_TEXT_CAP))


def _moment(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _ending(outcome: RunOutcome, policy: JobPolicy) -> Settlement:
    row, result = outcome.row, outcome.result
    if result is Result.OK:
        return _completed(row, outcome.value, policy)
    if result is Result.CANCELLED:
        return CancelledRun(row.id, outcome.error_message, policy.record_ttl)
    if result is Result.SNOOZED:
        return _snoozed(outcome, policy)
    if result is Result.INTERRUPTED and row.resumptions < policy.retry.max_resumptions:
        return Resumed(row.id)
    if result is Result.UNKNOWN and policy.unknown_grace > 0:
        return HeldBack(row.id, held_back_for(policy.unknown_grace), policy.unknown_grace, outcome.error_type,
                        outcome.error_message)
    # A lost lease, or a stop past max_resumptions, is no fault of the job's: its next attempt comes at once.
    delay = retry_delay(row.attempts, row.max_attempts,
                        None if result in (Result.LOST, Result.INTERRUPTED) else policy.backoff,
                        retryable=result not in (Result.FATAL, Result.UNKNOWN), requested_delay=outcome.retry_delay,
                        error=None if result is Result.INTERRUPTED else outcome.exc, policy=policy.retry)
    trace = _traceback(outcome.exc) if policy.keep_traceback else None
    if delay is not None:
        return RetryAt(row.id, row.attempts, delay, outcome.error_type, outcome.error_message, trace)
    return Buried(row.id, row.attempts, outcome.error_type, outcome.dead_message or outcome.error_message, trace)


# ---------------------------------------------------------------------------------- a refused success
SUCCESS_RECORD_TRIES = 6
"""How many times the whole record of a success (its result, its batch's count, its dependants released,
its run logs) is offered to a database that refuses it, before less of it is: with the pauses of
:func:`record_again_in`, some 30 s of offers, then a minute before only a plain success is left."""
RECORD_AGAIN_FIRST = 0.5
"""Seconds before a refused success is offered again the first time; the pause doubles after each refusal."""
RECORD_AGAIN_CAP = 30.0
"""The longest pause between two offers of a refused success."""


def after_refusals(settlement: Completed | None, refusals: int) -> tuple[Completed | None, bool]:
    """What to write of a success whose recording the database refused ``refusals`` times for a reason
    that is no outage (an outage pauses the worker, which offers the same record again when it is back),
    and whether that is all of its record.

    A success never goes to the dead letter, and is never given back to run again while its worker
    lives: the job ran and succeeded, and its handler's effects are done.  So the whole record is
    offered :data:`SUCCESS_RECORD_TRIES` times; then once without its result and run logs (a null result
    is kept, its batch counts it, its dependants are released: a refusal of the value itself, or of its
    size, passes); then, and from then on, as a plain success (the row deleted and nothing else: a batch
    does not count it and its dependants wait for the worker's sweep).  The result lost is better than
    the job dead or run twice.  ``settlement`` None is a plain success already."""
    if settlement is None or refusals > SUCCESS_RECORD_TRIES:
        return None, settlement is None
    if refusals < SUCCESS_RECORD_TRIES:
        return settlement, True
    return settlement._replace(result=None, unstorable=None), False


def record_again_in(refusals: int) -> float:
    """Seconds before a success refused ``refusals`` times is offered again (before jitter): 0.5 s,
    1 s, 2 s, ... up to :data:`RECORD_AGAIN_CAP`."""
    return float(min(RECORD_AGAIN_CAP, RECORD_AGAIN_FIRST * 2 ** min(max(refusals, 1) - 1, 16)))


def held_back_for(grace: float) -> float:
    """Seconds a held-back job waits before a worker tries it again: a twentieth of the grace, between
    1 s and a minute (a worker that knows the job takes it meanwhile; one that does not finds it again
    some twenty times before the grace ends)."""
    return min(60.0, max(1.0, grace / 20))


def _completed(row: ClaimedJob, value: Any, policy: JobPolicy) -> Completed | Buried:
    """A success; a workflow step whose return value JSON cannot hold goes to the dead letter (the
    steps after it would otherwise receive null in its place, silently)."""
    if not row.flags & (FLAG_RESULT | FLAG_WORKFLOW):
        return Completed(row.id, row.flags, row.batch_id, None, policy.result_ttl)
    try:
        result = encode_result(value)
    except (TypeError, ValueError) as exc:
        if row.flags & FLAG_WORKFLOW:
            return Buried(row.id, row.attempts, "errands.ResultNotJSON", safe_text(
                "a workflow step must return what errands can store (JSON values, datetime, date, UUID, "
                f"Decimal): {exc}", 500))
        return Completed(row.id, row.flags, row.batch_id, None, policy.result_ttl, safe_text(exc, 300))
    return Completed(row.id, row.flags, row.batch_id, result if row.flags & FLAG_RESULT else None,
                     policy.result_ttl)


def _snoozed(outcome: RunOutcome, policy: JobPolicy) -> Snoozed | Buried:
    """Back in line after the asked seconds, unless the job has snoozed as often as its policy allows."""
    row = outcome.row
    delay = retry_delay(row.attempts, row.max_attempts, None, error=outcome.exc, policy=policy.retry,
                         snoozes=row.snoozes)
    if delay is not None:
        return Snoozed(row.id, delay)
    return Buried(row.id, row.attempts, "errands.SnoozeLimit",
                  f"the job snoozed {policy.retry.max_snoozes} times, the most it may (max_snoozes), and asked "
                  f"to snooze again: {outcome.error_message}")


def _traceback(exc: BaseException | None) -> str | None:
    """The failure's traceback (the store trims it); None when there is none to format."""
    if exc is None:
        return None
    try:
        return "".join(tb.format_exception(exc))
    except Exception:  # an exception that cannot be formatted keeps its type and message only
        return None


# ---------------------------------------------------------------------------------- the hooks
class HookHost(AppHost, Protocol):
    """What announcing an ending reads of the app (``Errands`` is one)."""

    @property
    def hooks(self) -> Any:
        """The app's :class:`~errands.core.hooks.Hooks` (read only here)."""

    @property
    def registry(self) -> Mapping[str, Any]:
        """Job definitions by name (their own hooks, and how they decode arguments)."""


def announce(app: HookHost, row: ClaimedJob, settlement: Settlement) -> None:
    """Call the ``on_retry``, ``on_dead`` or ``on_expired`` hooks of an ending that committed (app hooks
    and the job's).

    Runs in the process that decided the ending: a worker for its own runs, the supervisor for the
    jobs of a process it killed or lost, whichever process recovered an expired lease (any worker's
    heartbeat thread, ``errands recover``, the dashboard's Recover button).  A hook's failure is
    logged, never raised."""
    if not isinstance(settlement, (RetryAt, Buried, Expired)):  # (a HeldBack is no failure: it waits for a deploy)
        return
    definition = app.registry.get(row.name) if type(row.name) is str else None
    chain = chain_of(app.hooks, definition.behaviour.hooks if definition is not None else None)
    if not chain:
        return
    arguments = None
    if definition is not None:
        try:
            arguments = definition.decode(row.payload)
        except BadPayload:
            arguments = ([], {})
    retry_in = settlement.delay if isinstance(settlement, RetryAt) else None
    record = FailedJob.of(row, settlement.error_type, settlement.error_message, retry_in, arguments)
    if isinstance(settlement, Expired):
        call_on_expired(chain, record)
    elif isinstance(settlement, RetryAt):
        call_on_retry(chain, context_of(row, app), record)
    else:
        call_on_dead(chain, context_of(row, app), record)
