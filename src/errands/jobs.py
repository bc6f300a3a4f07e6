"""Job definitions, per-enqueue options and the handles enqueue returns.

A definition is what ``@app.job`` makes of a function: a name (``module.function``
by default), the function, and its defaults.  ``.using(...)`` returns a copy with
some options changed for one enqueue, so ``send.using(queue="urgent").enqueue(...)``
reads like a call.  Everything a caller can get wrong is checked here, before
anything touches the database, and raises an :class:`~errands.errors.EnqueueError`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from .config import check_queue_name
from .errors import InvalidOption, PayloadNotSerializable, PayloadTooLarge
from .retry import Backoff
from .store.rows import JobState, NewJob

if TYPE_CHECKING:
    from .app import Errands

P = ParamSpec("P")
R = TypeVar("R")

PRIORITY_RANGE = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class JobOptions:
    """Options that may differ from one enqueue to the next."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    delay: float = 0.0
    run_at: datetime | None = None

    def validated(self) -> JobOptions:
        check_queue_name(self.queue)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) \
                or not PRIORITY_RANGE[0] <= self.priority <= PRIORITY_RANGE[1]:
            raise InvalidOption(f"priority must be a 32-bit integer, got {self.priority!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise InvalidOption(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if self.timeout is not None and (not isinstance(self.timeout, (int, float)) or isinstance(self.timeout, bool)
                                         or not math.isfinite(self.timeout) or self.timeout <= 0):
            raise InvalidOption(f"timeout must be a positive number of seconds or None, got {self.timeout!r}")
        if not isinstance(self.delay, (int, float)) or isinstance(self.delay, bool) \
                or not math.isfinite(self.delay) or self.delay < 0:
            raise InvalidOption(f"delay must be a non-negative number of seconds, got {self.delay!r}")
        if self.run_at is not None and (not isinstance(self.run_at, datetime) or self.run_at.tzinfo is None):
            raise InvalidOption("run_at must be an aware datetime, e.g. datetime.now(timezone.utc)")
        return self


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""Made once: ``json.dumps`` with options builds a new encoder on every call."""


def encode_payload(name: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any], limit: int) -> str:
    """Arguments as compact JSON; refuse what JSON cannot carry and what is too big."""
    try:
        payload = _encoder.encode({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError, RecursionError) as exc:
        raise PayloadNotSerializable(f"arguments of job {name!r} cannot be stored as JSON: {exc}") from exc
    size = len(payload) if payload.isascii() else len(payload.encode("utf-8"))
    if size > limit:
        raise PayloadTooLarge(f"arguments of job {name!r} take {size} bytes as JSON, over the limit of "
                              f"{limit} bytes; store large data elsewhere and pass a reference")
    return payload


def _positional_range(signature: inspect.Signature) -> tuple[int, int] | None:
    """(fewest, most) positional arguments a call may pass alone, when the signature is plain.

    For parameters that are all positional-or-keyword, a call with positional arguments only
    binds exactly when their count is in this range; ``prepare`` then skips
    ``Signature.bind``, which costs more than encoding the arguments.  None: always bind.
    """
    params = list(signature.parameters.values())
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        return None
    return sum(1 for p in params if p.default is inspect.Parameter.empty), len(params)


class JobHandle:
    """What enqueue returns: the job's id and a way to ask about it later."""

    __slots__ = ("id", "name", "_app")

    def __init__(self, app: Errands, job_id: int, name: str) -> None:
        self.id = job_id
        self.name = name
        self._app = app

    def status(self) -> JobState:
        """Where the job is now: waiting, running, in the dead letter, or finished (gone)."""
        return self._app.job_state(self.id)

    def __repr__(self) -> str:
        return f"<JobHandle id={self.id} name={self.name!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


class JobDefinition(Generic[P, R]):
    """A registered job.  Calling it runs the function directly; ``enqueue`` defers it."""

    def __init__(self, app: Errands, func: Callable[P, R], name: str, options: JobOptions,
                 backoff: Backoff) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.options = options
        self.backoff = backoff
        self.is_async = inspect.iscoroutinefunction(func)
        self._signature = inspect.signature(func)
        self._positional = _positional_range(self._signature)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name} queue={self.options.queue!r}>"

    def using(self, *, queue: str | None = None, priority: int | None = None, delay: float | None = None,
              run_at: datetime | None = None, max_attempts: int | None = None,
              timeout: float | None = None) -> JobDefinition[P, R]:
        """A copy with options changed for the next enqueue; the registered job is untouched."""
        changes: dict[str, Any] = {k: v for k, v in dict(queue=queue, priority=priority, delay=delay, run_at=run_at,
                                         max_attempts=max_attempts, timeout=timeout).items() if v is not None}
        clone: JobDefinition[P, R] = object.__new__(JobDefinition)
        clone.__dict__.update(self.__dict__)
        clone.options = replace(self.options, **changes).validated()
        return clone

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """Validate and encode one call without storing it (for ``app.enqueue_many``)."""
        accepts = self._positional
        if kwargs or accepts is None or not accepts[0] <= len(args) <= accepts[1]:
            try:
                self._signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise InvalidOption(f"arguments do not match job {self.name!r}{self._signature}: {exc}") from None
        o = self.options
        payload = encode_payload(self.name, args, kwargs, self.app.payload_limit)
        return NewJob(self.name, o.queue, payload, o.priority, o.max_attempts, o.timeout, float(o.delay), o.run_at)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Store one run of this job; returns as soon as the row is committed."""
        # prepare() already checked everything enqueue_many would (this definition is registered).
        [job_id] = self.app.store.enqueue((self.prepare(*args, **kwargs),))
        return JobHandle(self.app, job_id, self.name)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """``enqueue`` for async callers: the blocking insert runs in a worker thread."""
        new = self.prepare(*args, **kwargs)
        handles = await asyncio.to_thread(self.app.enqueue_many, [new])
        return handles[0]
