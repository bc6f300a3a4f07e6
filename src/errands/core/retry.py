"""Backoff strategies: pure functions from an attempt number to a delay in seconds.

They take no clock and touch no database, so they are tested as plain functions
and the store adds the delay to the *database's* clock when it reschedules a job.
``attempt`` is 1 for the delay after the first failed run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .errors import ConfigurationError, Discard, Retry, Snooze
from .limits import INT_MAX, clamp_delay

DelayFunction = Callable[[int], float]


@dataclass(frozen=True)
class Backoff:
    """A strategy plus optional jitter; call it with the attempt number."""

    strategy: DelayFunction
    jitter: float = 0.0
    """Fraction of the delay added or removed at random (0.1 = ±10 %) so that
    many jobs failing together do not all come back in the same second."""
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __call__(self, attempt: int) -> float:
        delay = max(0.0, float(self.strategy(max(1, attempt))))
        if self.jitter:
            delay *= 1 + self.rng.uniform(-self.jitter, self.jitter)
        return max(0.0, delay)


def exponential(base: float = 10.0, factor: float = 2.0, cap: float = 3600.0) -> DelayFunction:
    """10 s, 20 s, 40 s, ... capped at one hour: the seeds' default."""

    def delay(attempt: int) -> float:
        # Cap the exponent so huge attempt numbers do not overflow before the cap applies.
        return min(cap, base * factor ** min(attempt - 1, 64))

    return delay


def linear(step: float = 10.0, cap: float = 3600.0) -> DelayFunction:
    """10 s, 20 s, 30 s, ... capped."""
    return lambda attempt: min(cap, step * attempt)


def fixed(seconds: float = 10.0) -> DelayFunction:
    """The same delay after every failure."""
    return lambda attempt: seconds


def explicit(delays: Sequence[float]) -> DelayFunction:
    """Delays listed by hand; the last one repeats once the list runs out."""
    if not delays:
        raise ConfigurationError("an explicit backoff needs at least one delay")
    values = [float(d) for d in delays]
    return lambda attempt: values[min(attempt, len(values)) - 1]


BackoffSpec = str | float | int | Sequence[float] | DelayFunction | Backoff | None

_NAMED: dict[str, Callable[[], DelayFunction]] = {
    "exponential": exponential,
    "linear": linear,
    "fixed": fixed,
}


def make_backoff(spec: BackoffSpec, *, jitter: float = 0.0) -> Backoff:
    """Turn what a user wrote in ``@app.job(backoff=...)`` into a :class:`Backoff`.

    Accepted: a name (``"exponential"``, ``"linear"``, ``"fixed"``), a number of
    seconds (fixed), a list of delays, any ``callable(attempt) -> seconds``, or a
    ready :class:`Backoff`. ``None`` means the default, exponential.
    """
    if not 0 <= jitter < 1:
        raise ConfigurationError(f"jitter must be a fraction in [0, 1), got {jitter!r}")
    if isinstance(spec, Backoff):
        return spec if not jitter else Backoff(spec.strategy, jitter)
    if spec is None:
        return Backoff(exponential(), jitter)
    if isinstance(spec, str):
        try:
            return Backoff(_NAMED[spec](), jitter)
        except KeyError:
            known = ", ".join(sorted(_NAMED))
            raise ConfigurationError(f"unknown backoff {spec!r}; use one of {known}, "
                                     "a number, a list of delays or a callable") from None
    if isinstance(spec, bool):
        raise ConfigurationError("backoff must not be a boolean")
    if isinstance(spec, (int, float)):
        return Backoff(fixed(float(spec)), jitter)
    if callable(spec):
        return Backoff(spec, jitter)
    if isinstance(spec, Sequence):
        return Backoff(explicit([float(d) for d in spec]), jitter)
    raise ConfigurationError(f"cannot use {spec!r} as a backoff")


DEFAULT_MAX_SNOOZES = 100
"""How many times a job may snooze (``raise Snooze(...)``) when neither it nor its app says."""

DEFAULT_MAX_RESUMPTIONS = 100
"""How many times a job may be given back from a checkpoint by a stopping worker (``Interrupted``) without
spending an attempt, when the job does not say (``max_resumptions``)."""

ExceptionTypes = tuple[type[BaseException], ...]


@dataclass(frozen=True)
class RetryPolicy:
    """What a job's exceptions come to, beyond its attempts and backoff (``@app.job(...)``)."""

    retry_on: ExceptionTypes | None = None
    """Only these exception types (and subclasses) retry; None: every exception does."""
    discard_on: ExceptionTypes = ()
    """These exception types skip the remaining attempts (straight to the dead letter)."""
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    """Snoozes allowed over the job's life; the next one sends it to the dead letter."""
    max_resumptions: int = DEFAULT_MAX_RESUMPTIONS
    """Stops at a checkpoint (``Interrupted``) given back with the attempt refunded over the job's life;
    the next one spends an attempt."""

    def __post_init__(self) -> None:
        for field_name in ("retry_on", "discard_on"):
            types = getattr(self, field_name)
            if types is not None and not (isinstance(types, tuple) and all(
                    isinstance(t, type) and issubclass(t, BaseException) for t in types)):
                raise ConfigurationError(f"{field_name} must be a tuple of exception classes, got {types!r}")
        if isinstance(self.max_snoozes, bool) or not isinstance(self.max_snoozes, int) \
                or not 0 <= self.max_snoozes <= INT_MAX:
            raise ConfigurationError(f"max_snoozes must be an integer from 0 to {INT_MAX}, got {self.max_snoozes!r}")
        if isinstance(self.max_resumptions, bool) or not isinstance(self.max_resumptions, int) \
                or not 0 <= self.max_resumptions <= INT_MAX:
            raise ConfigurationError(f"max_resumptions must be an integer from 0 to {INT_MAX}, got "
                                     f"{self.max_resumptions!r}")

    def retries(self, error: BaseException) -> bool:
        """Whether ``error``, raised by a run, may be retried (attempts permitting).

        ``Retry`` always may (the handler asked), ``Discard`` never; then ``discard_on`` wins over
        ``retry_on``, so a type listed in both is discarded."""
        if isinstance(error, Retry):
            return True
        if isinstance(error, Discard) or (self.discard_on and isinstance(error, self.discard_on)):
            return False
        return self.retry_on is None or isinstance(error, self.retry_on)


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True)
class JobPolicy:
    """Everything that decides how one job's attempts end, resolved once from the job and its app
    (``app.policies``): :func:`errands.core.endings.decide` reads nothing else."""

    backoff: DelayFunction | None
    """Seconds before the next attempt after a failed one (None: at once)."""
    retry: RetryPolicy
    result_ttl: float
    """Seconds a kept result stays (the job's ``result_ttl``, else the app's)."""
    record_ttl: float
    """Seconds a cancellation is kept with the results (the app's ``result_ttl``)."""
    keep_traceback: bool
    """Keep failed attempts' tracebacks in the error history (the job's choice, else the app's)."""
    known: bool = True
    """False for a name no job of the app has (the app's fallback policy)."""
    unknown_grace: float = 0.0
    """Seconds after its enqueue a job of a name no job of the app has is held back rather than buried
    (the app's ``unknown_job_grace``; it reads only in the fallback policy)."""


def retry_delay(attempts: int, max_attempts: int, backoff: DelayFunction | None, *, retryable: bool = True,
                requested_delay: float | None = None, error: BaseException | None = None,
                policy: RetryPolicy = DEFAULT_POLICY, snoozes: int = 0) -> float | None:
    """The retry rule: seconds until the next attempt, or None for the dead letter.

    :func:`errands.core.endings.decide` asks it for every failed or snoozed attempt, whichever path
    ended it, so no two paths can disagree.  ``attempts`` were counted at claim time; ``backoff``
    is the job's (None: come back at once, as after a lost lease); ``retryable`` is False for a failure that must not
    retry (an unknown job); a delay the handler asked for (``Retry(delay=...)``) wins over the
    backoff.  ``error`` is the exception that ended the run, when there is one: the job's
    ``policy`` says whether its type retries (``retry_on``, ``discard_on``).  A
    :class:`~errands.core.errors.Snooze` spends no attempt: its delay, while the job has snoozed
    (``snoozes``, before this one) fewer than ``policy.max_snoozes`` times.
    """
    if error is not None:
        if isinstance(error, Snooze):
            return clamp_delay(error.seconds) if snoozes < policy.max_snoozes else None
        if not policy.retries(error):
            return None
        if isinstance(error, Retry) and requested_delay is None:
            requested_delay = error.delay
    if not retryable or attempts >= max_attempts:
        return None
    if requested_delay is not None:
        return clamp_delay(requested_delay)
    return clamp_delay(backoff(attempts)) if backoff is not None else 0.0
