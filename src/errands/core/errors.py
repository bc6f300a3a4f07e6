"""Every exception errands raises on purpose descends from :class:`ErrandsError`.

Catching that one class is enough for "anything errands refused"; the tree below
lets callers be precise where they care::

    ErrandsError
    ├── ConfigurationError        bad URL, old SQLite, app that cannot be loaded
    │   ├── MissingExtra          an errands[extra] is not installed (errands.core.extras; also an ImportError)
    │   └── InvalidWorkerQueue    a worker was given an invalid queue name (also an InvalidQueueName)
    ├── EnqueueError              the job was NOT stored; nothing was written
    │   ├── UnknownJob            name not registered in this app
    │   ├── InvalidQueueName      not a short identifier
    │   ├── InvalidOption         priority/delay/attempts out of range, arguments that do not fit
    │   │   └── ArgumentTypeError an argument of another type than its int/float/str/bool annotation
    │   │                         (also a TypeError)
    │   ├── PayloadNotSerializable  arguments JSON cannot encode
    │   └── PayloadTooLarge       encoded arguments over the configured cap
    ├── StoreError                the database said no
    │   ├── StoreUnavailable      cannot reach the database (retry later)
    │   ├── StoreConflict         lost to concurrent transactions as often as errands retried (retry later)
    │   └── SchemaError           tables missing or newer than this code
    ├── JobNotFound               no job / dead-letter entry with that id
    ├── BadPayload                a stored payload or result cannot be decoded (also a ValueError)
    ├── JobTimeout                a run exceeded its timeout (recorded as its error)
    ├── JobCancelled              the job was cancelled (raised in its handler, or by result())
    ├── CheckpointTooLarge        checkpoint(value): the encoded value is over the cap (also a ValueError)
    ├── JobFailed                 result(): the job ended in the dead letter
    │   └── JobExpired            result(): the job expired before it started (``expires_in``)
    ├── DeadlineExceeded          the error a job is buried with when its ``deadline`` passed
    ├── Retry                     raised by a handler: retry after a delay it chooses
    ├── Snooze                    raised by a handler: run again later, without spending an attempt
    ├── Interrupted               raised by checkpoint() (or a handler) while its worker stops: resume later
    └── Discard                   raised by a handler: skip the remaining attempts

Driver exceptions are mapped at the store boundary (``raise StoreUnavailable(...)
from exc``) so that no caller needs to import psycopg or PyMySQL to handle them.
"""

from __future__ import annotations


class ErrandsError(Exception):
    """Root of every error errands raises deliberately."""


class ConfigurationError(ErrandsError):
    """The application, URL or environment is not usable as configured."""


class EnqueueError(ErrandsError):
    """A job was refused at enqueue time; nothing was written to the database."""


class UnknownJob(EnqueueError):
    """The job name is not registered in this app (only registered jobs run)."""


class InvalidQueueName(EnqueueError):
    """Queue names are short identifiers: letters, digits, '-', '_' and '.'."""


class InvalidWorkerQueue(ConfigurationError, InvalidQueueName):
    """A worker option names an invalid queue.  A ConfigurationError, as every refused worker option
    is; also an InvalidQueueName, which the in-process worker raised for it before."""


class InvalidOption(EnqueueError):
    """An enqueue option (priority, delay, attempts, timeout, ...) is out of range."""


class ArgumentTypeError(InvalidOption, TypeError):
    """An argument's type is not the one its parameter is annotated with (``order_id: int`` given
    ``"one"``); checked at enqueue for plain ``int``, ``float``, ``str``, ``bool`` and their unions
    with None.  A TypeError too, as calling the function with it would be in a typed language."""


class PayloadNotSerializable(EnqueueError):
    """Arguments must be JSON-encodable; errands never pickles."""


class PayloadTooLarge(EnqueueError):
    """Encoded arguments exceed the app's payload cap (default 64 KiB)."""


class StoreError(ErrandsError):
    """The database refused an operation."""


class StoreUnavailable(StoreError):
    """The database cannot be reached; the operation may succeed later."""


class StoreConflict(StoreError):
    """The database refused an operation for a conflict with concurrent ones (a deadlock, a lock wait
    timeout, a Galera certification failure) each time errands retried it; it may succeed later."""


class SchemaError(StoreError):
    """errands' tables are missing or were created by a newer version."""


class JobNotFound(ErrandsError):
    """No job or dead-letter entry has the given id."""


class BadPayload(ErrandsError, ValueError):
    """What a row holds cannot be decoded (not JSON, not UTF-8, nested too deeply, the wrong shape).

    The worker sends such a job to the dead letter with this error; a ValueError too, so that
    code written against the decoder's old ValueError keeps working."""


class JobTimeout(ErrandsError):
    """A job run exceeded its timeout and was stopped."""


class JobCancelled(ErrandsError):
    """The job was cancelled: raised at a handler's checkpoint, or by ``handle.result()``."""


class CheckpointTooLarge(ErrandsError, ValueError):
    """``current_job().checkpoint(value)``: the value's JSON is over the cap (``CHECKPOINT_LIMIT``,
    64 KiB); nothing was stored.  Keep a cursor in a checkpoint (an id, an offset), not the data."""


class JobFailed(ErrandsError):
    """``handle.result()``: the job ended in the dead letter (its error is in the message)."""

    def __init__(self, message: str, error_type: str = "", error_message: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error_message = error_message


class JobExpired(JobFailed):
    """``handle.result()``: the job was not started by its expiry (``expires_in`` / ``expires_at``); it
    ended as expired (the dead letter, error type ``errands.JobExpired``)."""


class DeadlineExceeded(ErrandsError):
    """The job's ``deadline`` passed before it succeeded: no further attempt is made.  Recorded as the
    error of a job buried for it (error type ``errands.DeadlineExceeded``); never raised in a handler
    (a running attempt is not stopped at the deadline: its ``timeout`` does that)."""


class Retry(ErrandsError):  # noqa: N818 - a request, not an error: ``raise Retry(delay=60)``
    """Raised by a handler: fail this attempt and retry after ``delay`` seconds (when attempts are left)."""

    def __init__(self, delay: float, reason: str = "") -> None:
        super().__init__(reason or f"retry requested in {delay:g}s")
        self.delay = max(0.0, float(delay))


class Snooze(ErrandsError):  # noqa: N818 - a request, not an error: ``raise Snooze(60)``
    """Raised by a handler: not now; run this job again after ``seconds`` without spending an attempt.

    Oban's snooze: for work that waits on something outside (a file not there yet, a partner's
    API asking to come back later).  A job may snooze ``max_snoozes`` times (the job's, else the
    app's; 100 by default); the next snooze sends it to the dead letter as ``errands.SnoozeLimit``."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"Snooze needs a number of seconds >= 0, got {seconds!r}")
        super().__init__(reason or f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class Interrupted(ErrandsError):  # noqa: N818 - a request, not an error: the worker is stopping
    """Raised by ``current_job().checkpoint(value)`` once the value is stored, when the run's worker is
    stopping (SIGTERM, a graceful shutdown) or its lease is about to be lost; a handler may raise it
    itself after a checkpoint when it sees ``current_job().stopping``.  The job is given back at
    once with its attempt refunded, and its next attempt resumes from the checkpoint
    (``current_job().checkpoint_value``); past the job's ``max_resumptions`` the stop spends an
    attempt like a failure.  Let it propagate: a handler that swallows it keeps running."""


class Discard(ErrandsError):  # noqa: N818 - a request, not an error: ``raise Discard("no phone number")``
    """Raised by a handler: this job can never succeed; skip the remaining attempts (dead letter now)."""
