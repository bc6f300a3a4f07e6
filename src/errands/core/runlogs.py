"""Per-run logs: the ``logging`` records a job emits while it runs, kept with its attempt.

The worker's execution sets :data:`capturing` to a :class:`Capture` in each runner thread, and in
the asyncio task of each ``async def`` run, and starts it around each run; so a record is kept
only when it is made by the run's own thread or task: the job's logger, the libraries it
calls, errands' own lines logged from inside the run.  Lines of other threads (the worker's main
loop, its heartbeat, threads the job starts itself) and of other jobs' tasks on the same event loop
see another value of the variable, or none.

Records are caught where they are made, by a wrapper of the log record factory
(:func:`record_factory`, installed once per process by the worker), not by a handler on the root
logger: a handler would see only records that propagate to the root, and its mere presence would
silence Python's last-resort output in a process that configured no logging.  So what is kept is
what the logging configuration lets through the logger's level (under ``errands worker``, INFO
and up by default).

A run's buffer is bounded (the last ``records`` records, at most ``max_bytes`` bytes of text): older
records are dropped first and counted.  Every record is untrusted: a message whose formatting
raises is kept as the ``repr`` of its format and arguments, a huge one is cut, and nothing a record
does can raise into the job or the thread.  Settling writes the buffer with the attempt's ending
(``store.endings.apply``), in the same transaction.

No I/O here: encoding to the stored JSON and back (:func:`encode_lines`, :func:`decode_lines`).
"""

from __future__ import annotations

import collections
import contextvars
import json
import logging
import math
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from .errors import ConfigurationError
from .payload import safe_text

RECORD_CAP = 8000
"""Characters one record keeps (its message, and its traceback when it carries one)."""
LINE_OVERHEAD = 32
"""Bytes a record costs besides its message and logger name (time, level, JSON punctuation)."""
MAX_RECORDS = 100_000
MAX_BYTES = 16 * 1024 * 1024
"""The largest bounds an app may set (a run log is one row, read whole by the job page)."""


@dataclass(frozen=True)
class RunLogLimits:
    """How much of each attempt's logging is kept: the last ``records`` records, at most
    ``max_bytes`` bytes of text (the app's ``run_log_records`` and ``run_log_bytes``)."""

    records: int = 200
    max_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for name, value, top in (("run_log_records", self.records, MAX_RECORDS),
                                 ("run_log_bytes", self.max_bytes, MAX_BYTES)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ConfigurationError(f"{name} must be an integer from 1 to {top}, got {value!r}")


class LogLine(NamedTuple):
    """One kept record: when (the worker host's clock, epoch seconds, as the record has it), its
    level's name, its logger's name, its message and its traceback (``log.exception``, ``exc_info``,
    ``stack_info``), shown only to whom may see tracebacks."""

    at: float
    level: str
    logger: str
    message: str
    traceback: str | None = None


class RunLog:
    """The records of one run, bounded (see the module's docstring).  Filled by the run's own
    thread or task only; read by settling once the run is over."""

    __slots__ = ("job_id", "attempt", "lines", "size", "dropped", "_limit", "_max_bytes", "_busy")

    def __init__(self, job_id: int, attempt: int, limits: RunLogLimits) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.lines: collections.deque[tuple[LogLine, int]] = collections.deque()
        self.size = 0
        self.dropped = 0
        """Records not kept: the oldest, pushed out by the bounds, and any that could not be read."""
        self._limit = limits.records
        self._max_bytes = limits.max_bytes
        self._busy = False

    def add(self, record: logging.LogRecord) -> None:
        """Keep ``record`` (never raises; a record whose formatting logs is not kept twice)."""
        if self._busy:
            return
        self._busy = True
        try:
            message, trace = _message(record)
            line = LogLine(float(record.created), safe_text(record.levelname, 40), safe_text(record.name, 200),
                           message, trace)
            size = len(line.logger) + LINE_OVERHEAD + _size(message) + (0 if trace is None else _size(trace))
            lines = self.lines
            lines.append((line, size))
            self.size += size
            while len(lines) > self._limit or (self.size > self._max_bytes and len(lines) > 1):
                self.size -= lines.popleft()[1]
                self.dropped += 1
            if self.size > self._max_bytes:  # one record larger than the whole bound: cut it (4 bytes a
                only, _ = lines.pop()         # character at most, and its traceback goes)
                room = max(0, self._max_bytes - LINE_OVERHEAD - len(only.logger) - 40) // 4
                lines.append((only._replace(message=_cut(only.message, room), traceback=None), self._max_bytes))
                self.size = self._max_bytes
        except Exception:  # noqa: BLE001 - a record that cannot be kept costs itself, never the run
            self.dropped += 1
        finally:
            self._busy = False

    def __bool__(self) -> bool:
        return bool(self.lines) or self.dropped > 0

    def encoded(self) -> str:
        """The kept records as the stored JSON text."""
        return encode_lines([line for line, _ in self.lines])


def _message(record: logging.LogRecord) -> tuple[str, str | None]:
    """The record's message and traceback (or stack), storable and at most RECORD_CAP characters each."""
    try:
        text = record.getMessage()
    except Exception:  # noqa: BLE001 - formatting raised (bad arguments, a __str__ that raises)
        text = f"{_repr(record.msg)} % {_repr(record.args)} (the message could not be formatted)"
    if type(text) is not str:  # a str subclass from a msg object's __str__
        text = safe_text(text)
    trace: str | None = None
    if record.exc_info and record.exc_info[1] is not None:
        try:
            trace = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        except Exception:  # noqa: BLE001 - an exception that cannot be formatted: its message is kept
            trace = None
    elif record.stack_info:
        trace = safe_text(record.stack_info, RECORD_CAP * 2)
    return safe_text(_cut(text, RECORD_CAP)), None if trace is None else safe_text(_cut(trace, RECORD_CAP))


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _repr(value: Any) -> str:
    try:
        return safe_text(repr(value), 1000)
    except Exception:  # noqa: BLE001 - a __repr__ that raises
        return f"<{type(value).__name__}>"


def _cut(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"… ({len(text) - cap:,} more characters)"


class Capture:
    """Where the records of the run in progress go: one per runner thread (set in its context once,
    reused run after run) and one per async run (set in its task's context).  Between runs it keeps
    nothing, and a run that logs nothing costs three attribute writes: its :class:`RunLog` is made
    at its first record."""

    __slots__ = ("limits", "job_id", "attempt", "on", "log")

    def __init__(self, limits: RunLogLimits) -> None:
        self.limits = limits
        self.job_id = self.attempt = 0
        self.on = False
        self.log: RunLog | None = None

    def start(self, job_id: int, attempt: int) -> None:
        self.job_id, self.attempt, self.on = job_id, attempt, True

    def add(self, record: logging.LogRecord) -> None:
        if self.on:
            log = self.log
            if log is None:
                log = self.log = RunLog(self.job_id, self.attempt, self.limits)
            log.add(record)

    def finish(self) -> RunLog | None:
        """The run's records (None: it logged nothing); the capture keeps nothing until the next start."""
        log, self.log, self.on = self.log, None, False
        return log


capturing: contextvars.ContextVar[Capture | None] = contextvars.ContextVar("errands_run_log", default=None)
"""Where the current thread's or task's records go (None: no worker runner, or run logs off)."""

def record_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    """A log record factory that makes records with ``previous`` and adds each to the capture of the
    thread or task that made it, if any: records made outside a run cost one context-variable read.
    The worker installs it once per process (:func:`errands.worker.execution.install_capture`)."""

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        capture = capturing.get()
        if capture is not None:
            capture.add(record)
        return record

    return factory


# ---------------------------------------------------------------------------------- stored form
def encode_lines(lines: list[LogLine]) -> str:
    """``[[at, level, logger, message], ...]`` (a fifth item: the traceback), compact JSON."""
    return json.dumps([list(line) if line.traceback is not None else list(line[:4]) for line in lines],
                      ensure_ascii=False, separators=(",", ":"))


def decode_lines(text: Any) -> list[LogLine]:
    """The stored records read back; whatever a row holds reads as lines (untrusted: another program
    may have written it), an entry that is not one shown as its text."""
    try:
        items = json.loads(text) if isinstance(text, (str, bytes)) else None
    except (ValueError, RecursionError):
        return [LogLine(0.0, "?", "?", safe_text(text, RECORD_CAP))]
    if not isinstance(items, list):
        return [] if items is None else [LogLine(0.0, "?", "?", safe_text(text, RECORD_CAP))]
    out: list[LogLine] = []
    for item in items:
        if isinstance(item, list) and len(item) in (4, 5) and isinstance(item[0], (int, float)) \
                and not isinstance(item[0], bool) and math.isfinite(item[0]):
            trace = item[4] if len(item) == 5 and item[4] is not None else None
            out.append(LogLine(float(item[0]), safe_text(item[1], 40), safe_text(item[2], 200),
                               safe_text(item[3], RECORD_CAP * 2),
                               None if trace is None else safe_text(trace, RECORD_CAP * 2)))
        else:
            out.append(LogLine(0.0, "?", "?", safe_text(json.dumps(item, default=str), RECORD_CAP)))
    return out


class AttemptLog(NamedTuple):
    """The stored log of one attempt (``errands_run_logs``)."""

    job_id: int
    attempt: int
    worker: str | None
    logged_at: datetime
    """When the attempt's ending was written (the database's clock)."""
    dropped: int
    """Records of the attempt not kept (the bounds kept the latest)."""
    lines: list[LogLine]
