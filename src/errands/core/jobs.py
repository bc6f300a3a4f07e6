"""Job definitions, per-enqueue options and the handles enqueue returns.

A definition is what ``@app.job`` makes of a function: a name (``module.function``
by default), the function, and its defaults.  ``.using(...)`` returns a copy with
some options changed for one enqueue, so ``send.using(queue="urgent").enqueue(...)``
reads like a call.  Everything a caller can get wrong is checked here, before
anything touches the database, and raises an :class:`~errands.core.errors.EnqueueError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypedDict, TypeVar

from .config import check_queue_name
from .errors import (
    BadPayload,
    ConfigurationError,
    EnqueueError,
    InvalidOption,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
)
from .hooks import Enqueue, Hooks, enqueuing
from .limits import ID_MAX, INT_MAX, MAX_DELAY, RateLimit, parse_rate_limit
from .payload import decode_arguments, encode_payload, safe_text
from .retry import DEFAULT_MAX_RESUMPTIONS, DEFAULT_MAX_SNOOZES, Backoff, BackoffSpec, RetryPolicy, make_backoff
from .rows import FLAG_DEADLINE, FLAG_RESULT, FLAG_UNIQUE_PERIOD, KEEP, JobState, NewJob, UniqueRule
from .signatures import EnumParameters, ScalarParameters, check_handler

if TYPE_CHECKING:
    from .host import AppHost

P = ParamSpec("P")
R = TypeVar("R")

PRIORITY_RANGE = (-INT_MAX - 1, INT_MAX)
UNIQUE_KEY_MAX = 255
LABEL_MAX = 255
"""The longest display label (``using(label=...)``), in characters."""
MAX_AFTER = 1000
OnConflict = Literal["keep", "replace"]
"""What an enqueue does while a waiting job holds its unique key: return it unchanged, or give it the
new arguments, priority and run time (docs/features/unique.md)."""
UniqueState = Literal["waiting", "running"]
"""A state of the job holding a unique key that makes an enqueue conflict with it."""
ON_CONFLICT: tuple[OnConflict, ...] = ("keep", "replace")
UNIQUE_STATES: tuple[UniqueState, ...] = ("waiting", "running")


@dataclass(frozen=True)
class JobOptions:
    """Options that may differ from one enqueue to the next."""

    queue: str = "default"
    priority: int = 0
    max_attempts: int = 3
    timeout: float | None = None
    delay: float = 0.0
    run_at: datetime | None = None
    unique_key: str | None = None
    """While a job with this key waits or runs, enqueueing another returns the existing job."""
    after: tuple[int, ...] = ()
    """Ids of the jobs that must all succeed first."""
    keep_result: bool = False
    label: str | None = None
    """A display label (e.g. "Invoice #42"), shown and searchable in the CLI and the dashboard."""
    cost: int | None = None
    """Units of the job's rate limit one run uses (None: the job's default, else 1)."""
    unique_for: float | None = None
    """Seconds the unique key stays taken after the job ended (None: the job's default, else 0)."""
    on_conflict: OnConflict | None = None
    """What this enqueue does while a waiting job holds its key (None: the job's ``on_conflict``)."""
    unique_states: tuple[UniqueState, ...] | None = None
    """Which holders of the key conflict with this enqueue (None: the job's ``unique_states``)."""
    debounce: float | None = None
    """Seconds of quiet before the burst's one run (None: the job's ``debounce``)."""
    max_wait: float | None = None
    """With debounce: seconds after the burst's first enqueue by which it runs (None: the job's)."""
    expires_in: float | None = None
    """Seconds after the job is due (enqueue, or its delay or ``run_at``) by which it must have started;
    later it never starts and ends as expired (docs/features/expiry.md)."""
    expires_at: datetime | None = None
    """The same as a moment (aware); wins over ``expires_in``."""
    deadline: float | datetime | None = None
    """Seconds from the enqueue, or a moment, after which no attempt starts: a failure whose retry would
    start later goes to the dead letter as ``errands.DeadlineExceeded``."""

    @property
    def is_plain(self) -> bool:
        """Whether every option after ``run_at`` is at its default: those are what a plain job does not
        store (a unique key, a dependency, a kept result, a label, a cost...).  The one guard of the
        enqueue's fast path, over the fields themselves, so a new option cannot slip past it and be
        dropped for plain jobs (:attr:`errands.core.rows.NewJob.is_plain` is the store's twin)."""
        return all(getattr(self, f.name) == f.default for f in _FEATURE_OPTIONS)

    def validated(self) -> JobOptions:
        check_queue_name(self.queue)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) \
                or not PRIORITY_RANGE[0] <= self.priority <= PRIORITY_RANGE[1]:
            raise InvalidOption(f"priority must be a 32-bit integer, got {self.priority!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not 1 <= self.max_attempts <= INT_MAX:
            raise InvalidOption(f"max_attempts must be an integer from 1 to {INT_MAX}, got {self.max_attempts!r}")
        if self.timeout is not None and (not isinstance(self.timeout, (int, float)) or isinstance(self.timeout, bool)
                                         or not 0 < self.timeout <= MAX_DELAY):
            raise InvalidOption(f"timeout must be a positive number of seconds up to {MAX_DELAY:.0f} (ten years) "
                                f"or None, got {self.timeout!r}")
        if not isinstance(self.delay, (int, float)) or isinstance(self.delay, bool) \
                or not 0 <= self.delay <= MAX_DELAY:
            raise InvalidOption(f"delay must be 0 to {MAX_DELAY:.0f} seconds (ten years), got {self.delay!r}")
        if self.run_at is not None:
            if not isinstance(self.run_at, datetime) or self.run_at.tzinfo is None:
                raise InvalidOption("run_at must be an aware datetime, e.g. datetime.now(timezone.utc)")
            try:
                ahead = (self.run_at - datetime.now(timezone.utc)) / timedelta(seconds=1)
            except OverflowError:
                ahead = math.inf
            if not -MAX_DELAY <= ahead <= MAX_DELAY:
                raise InvalidOption(f"run_at must be within ten years of now, got {self.run_at.isoformat()}")
        if self.unique_key is not None and not _storable_key(self.unique_key):
            raise InvalidOption(f"unique_key must be a non-empty string of at most {UNIQUE_KEY_MAX} characters "
                                "(valid Unicode, no NUL)")
        _check_after(self.after)
        self._check_display_and_limits()
        return self

    def _check_display_and_limits(self) -> None:
        """``label``, ``cost`` and ``unique_for``."""
        if self.label is not None and not _storable_label(self.label):
            raise InvalidOption(f"label must be a string of at most {LABEL_MAX} characters (valid Unicode, no NUL), "
                                f"got {_shown(self.label)}")
        if self.cost is not None:
            check_cost(self.cost)
        if self.unique_for is not None:
            check_unique_for(self.unique_for)
        if self.on_conflict is not None:
            check_on_conflict(self.on_conflict)
        if self.unique_states is not None:
            check_unique_states(self.unique_states)
        for what, seconds in (("debounce", self.debounce), ("max_wait", self.max_wait)):
            if seconds is not None:
                check_seconds(what, seconds)
        if self.expires_in is not None:
            check_seconds("expires_in", self.expires_in)
        if self.expires_at is not None:
            check_moment("expires_at", self.expires_at)
        if self.deadline is not None:
            if isinstance(self.deadline, datetime):
                check_moment("deadline", self.deadline)
            else:
                check_seconds("deadline", self.deadline)

    def expiry_and_deadline(self) -> tuple[datetime | float | None, datetime | float | None]:
        """(``expires_at``, ``deadline_at``) of this enqueue as :class:`NewJob` carries them: a moment
        (aware UTC), or seconds after the insert by the database's clock, which the store adds when it
        writes the row (``expires_in`` counts from when the job is due: after its ``delay``, or from
        its ``run_at``).  So a host whose clock is off, or a test's frozen database clock, agrees with
        the claim that judges them."""
        expires: datetime | float | None = self.expires_at
        deadline = self.deadline
        if expires is None and self.expires_in is not None:
            expires = (self.run_at + timedelta(seconds=self.expires_in) if self.run_at is not None
                       else float(self.delay + self.expires_in))
        if isinstance(expires, datetime):
            expires = expires.astimezone(timezone.utc)
        if isinstance(deadline, datetime):
            deadline = deadline.astimezone(timezone.utc)
        elif deadline is not None:
            deadline = float(deadline)
        return expires, deadline


_FEATURE_OPTIONS = fields(JobOptions)[[f.name for f in fields(JobOptions)].index("run_at") + 1:]
"""The options a plain job leaves at their defaults (every field after ``run_at``)."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _storable_label(label: object) -> bool:
    return isinstance(label, str) and len(label) <= LABEL_MAX and safe_text(label) == label


def check_cost(cost: object) -> int:
    """A rate-limit cost: a positive 32-bit integer."""
    if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= INT_MAX:
        raise InvalidOption(f"cost must be a positive integer, got {_shown(cost)}")
    return cost


def check_unique_for(seconds: object) -> float:
    """A unique period: 0 to ten years of seconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= MAX_DELAY:
        raise InvalidOption(f"unique_for must be 0 to {MAX_DELAY:.0f} seconds (ten years), got {_shown(seconds)}")
    return float(seconds)


def check_on_conflict(value: object) -> OnConflict:
    """``on_conflict``: one of :data:`ON_CONFLICT`."""
    for mode in ON_CONFLICT:
        if value == mode and isinstance(value, str):
            return mode
    raise InvalidOption(f"on_conflict must be 'keep' or 'replace', got {_shown(value)}")


def check_unique_states(value: object) -> tuple[UniqueState, ...]:
    """``unique_states``: the holder states that conflict, "waiting" always among them (a key only
    "running" held would let any number wait), in :data:`UNIQUE_STATES` order."""
    states: tuple[object, ...] = ((value,) if isinstance(value, str) else
                                  tuple(value) if isinstance(value, (list, tuple, set, frozenset)) else ())
    if not states or "waiting" not in states or not set(states) <= set(UNIQUE_STATES):
        raise InvalidOption("unique_states must be ('waiting',) (one waiting plus one running job per key) or "
                            f"('waiting', 'running') (one waiting or running job), got {_shown(value)}")
    return tuple(state for state in UNIQUE_STATES if state in states)


DEFAULT_AGE_LIMIT = 10
"""How many steps of priority aging adds at most when a job says ``age_after`` alone."""
AGE_LIMIT_MAX = 1_000_000


def check_aging(age_after: object, age_limit: object) -> None:
    """``age_after`` (positive seconds) and ``age_limit`` (a positive number of steps, only with it)."""
    if age_after is not None:
        check_seconds("age_after", age_after)
    if age_limit is not None:
        if age_after is None:
            raise InvalidOption("age_limit needs age_after (the seconds of waiting that earn one step)")
        if isinstance(age_limit, bool) or not isinstance(age_limit, int) or not 1 <= age_limit <= AGE_LIMIT_MAX:
            raise InvalidOption(f"age_limit must be an integer from 1 to {AGE_LIMIT_MAX}, got {_shown(age_limit)}")


def check_moment(what: str, moment: object) -> datetime:
    """An aware datetime within ten years of now (``expires_at``, ``deadline``)."""
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise InvalidOption(f"{what} must be an aware datetime, e.g. datetime.now(timezone.utc), got {_shown(moment)}")
    try:
        ahead = (moment - datetime.now(timezone.utc)) / timedelta(seconds=1)
    except OverflowError:
        ahead = math.inf
    if not -MAX_DELAY <= ahead <= MAX_DELAY:
        raise InvalidOption(f"{what} must be within ten years of now, got {moment.isoformat()}")
    return moment


def check_seconds(what: str, seconds: object) -> float:
    """A positive number of seconds up to ten years (``debounce``, ``max_wait``)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_DELAY:
        raise InvalidOption(f"{what} must be a positive number of seconds up to {MAX_DELAY:.0f} (ten years), "
                            f"got {_shown(seconds)}")
    return float(seconds)


def unique_rule(on_conflict: OnConflict | None, states: tuple[UniqueState, ...] | None, debounce: float | None,
                max_wait: float | None, *, delay: float = 0.0,
                run_at: datetime | None = None) -> tuple[UniqueRule | None, float | None]:
    """The rule a unique key's enqueue follows (None: :data:`~errands.core.rows.KEEP`) and the debounce
    delay (None: no debounce), from the values of the call, else the job (each checked alone already).

    ``on_conflict`` defaults to "keep", or "replace" under debounce (a burst runs with its last
    arguments); ``states`` to both states under "keep" and to "waiting" under "replace" (a running job
    cannot take new arguments, so the new ones are stored to run after it).  Raises InvalidOption for
    a combination no enqueue could follow."""
    if max_wait is not None and debounce is None:
        raise InvalidOption("max_wait bounds a debounce: give debounce=seconds too")
    if debounce is not None:
        if max_wait is not None and max_wait < debounce:
            raise InvalidOption(f"max_wait ({max_wait:g} s) must be at least debounce ({debounce:g} s)")
        if on_conflict == "keep":
            raise InvalidOption("debounce runs a burst once with its last arguments, which replace the waiting "
                                "job's: it cannot be combined with on_conflict='keep'")
        if delay or run_at is not None:
            raise InvalidOption("debounce sets the run time (debounce seconds after the burst's last enqueue): "
                                "leave out delay and run_at")
    replace = (on_conflict or ("replace" if debounce is not None else "keep")) == "replace"
    running = "running" in (states or (("waiting",) if replace else UNIQUE_STATES))
    rule = UniqueRule(replace, running, max_wait if debounce is not None else None)
    return (None if rule == KEEP else rule), debounce


NO_TIMEOUT = math.inf
"""``timeout=math.inf`` on a job or a call: no time limit, whatever the app's default (``None``
there means "not set here": the next level's value applies)."""


@dataclass(frozen=True)
class JobSpec:
    """Every option of ``@app.job(...)``, declared once: its type, its default and what it means.

    ``app.job(**options)`` builds one, so an option is added here and nowhere else (``JobSpecArgs``
    below is its typing mirror, held equal by a test).  The checks that need nothing but the
    option run here, when the decorator is made; the ones that need the app's defaults (queue,
    priority, attempts, timeout, backoff, retry rules) run in :meth:`JobDefaults.for_job`.  ``None``
    means "not set on the job": the app's default applies (:class:`JobDefaults` gives the order)."""

    name: str | None = None
    """The job's name (None: ``module.qualname`` of the function)."""
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    backoff: BackoffSpec = None
    jitter: float = 0.0
    """A random share of each backoff delay added or taken (0.1: up to 10%)."""
    timeout: float | None = None
    """Seconds a run may take (``math.inf``: no limit even if the app sets one)."""
    unique: bool = False
    """While a run with the same arguments waits or runs, enqueueing returns it."""
    keep_result: bool = False
    """Keep the return value (``handle.result()``) for ``result_ttl`` seconds."""
    result_ttl: float | None = None
    """Seconds its kept result stays (None: the app's ``result_ttl``)."""
    rate_limit: str | RateLimit | None = None
    """At most N starts per period across every worker, e.g. ``"10/minute"`` (parsed here)."""
    concurrency_limit: int | None = None
    """At most N runs at once per group."""
    concurrency_key: str | Callable[..., Any] | None = None
    """The group: a string or a function of the job's arguments (None: the job's name)."""
    rate_limit_key: str | Callable[..., Any] | None = None
    """With ``rate_limit``: the window a run counts in, a string or a function of the job's arguments
    computed once at enqueue (each key its own window; None: one window for the whole job)."""
    retry_on: Sequence[type[BaseException]] | type[BaseException] | None = None
    """Only exceptions of these types (and subclasses) retry; any other goes to the dead letter at
    once (None: every exception retries while attempts are left)."""
    discard_on: Sequence[type[BaseException]] | type[BaseException] = ()
    """Exception types that skip the remaining attempts."""
    max_snoozes: int | None = None
    """How many times a run may ``raise Snooze(...)`` before the dead letter."""
    unique_for: float | None = None
    """Seconds a unique key stays taken after its job ended (Oban's unique period)."""
    cost: int | None = None
    """Units of ``rate_limit`` one run uses (None: 1; ``using(cost=...)`` per call)."""
    keep_traceback: bool | None = None
    """Keep failed attempts' tracebacks (None: the app's ``keep_traceback``)."""
    run_logs: bool | None = None
    """Keep what its runs log (False: never, for a job that logs what nobody should read later; None:
    the app's ``run_logs``; True cannot turn them on where the app has them off)."""
    unique_key: str | Callable[..., Any] | None = None
    """Every enqueue's unique key: a string, or a function of the job's arguments as for
    ``concurrency_key`` (``using(unique_key=...)`` wins; None: ``unique``'s hash, or no key)."""
    on_conflict: OnConflict | None = None
    """While a waiting job holds the key: ``"keep"`` returns it unchanged, ``"replace"`` gives it the new
    arguments, priority and run time (None: keep, or replace under ``debounce``)."""
    unique_states: Sequence[UniqueState] | None = None
    """Which holders of the key conflict: ``("waiting", "running")``, or ``("waiting",)`` for one waiting
    plus one running job per key (None: both under keep, waiting under replace)."""
    debounce: float | None = None
    """Seconds of quiet after a burst of enqueues (one key) before its one run, with the last arguments."""
    max_wait: float | None = None
    """With ``debounce``: the run is due at most this many seconds after the burst's first enqueue."""
    age_after: float | None = None
    """Priority aging: each ``age_after`` seconds a run waits past its due time earn it one step of
    priority, up to ``age_limit`` steps (a maintenance pass raises it, docs/features/aging.md)."""
    age_limit: int | None = None
    """With ``age_after``: the most steps aging adds to a run's priority (None: 10)."""
    expires_in: float | None = None
    """Seconds after it is due by which a run must have started, else it ends as expired and never runs
    (``using(expires_in=..., expires_at=...)`` per call)."""
    deadline: float | None = None
    """Seconds from each enqueue after which no attempt starts (Temporal's schedule-to-close): a failure
    whose retry would start later is buried with ``errands.DeadlineExceeded`` (``using(deadline=...)``:
    seconds or a moment, per call).  A running attempt is not stopped at the deadline (``timeout`` does)."""
    fairness_key: str | Callable[..., Any] | None = None
    """The key (a tenant...) the claim takes turns between: a string or a function of the job's arguments
    as for ``concurrency_key``, computed once at enqueue (None: no turns, today's order)."""
    max_resumptions: int = DEFAULT_MAX_RESUMPTIONS
    """How many times a stopping worker may give the job back from a checkpoint (``Interrupted``) without
    spending an attempt; the next stop spends one (docs/features/checkpoints.md)."""

    def __post_init__(self) -> None:
        limit = self.concurrency_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigurationError(f"concurrency_limit must be a positive integer, got {limit!r}")
        if self.result_ttl is not None and self.result_ttl <= 0:
            raise ConfigurationError("result_ttl must be a positive number of seconds")
        rate = None if self.rate_limit is None else parse_rate_limit(self.rate_limit)
        try:
            period = None if self.unique_for is None else check_unique_for(self.unique_for)
            if self.cost is not None:
                check_cost(self.cost)
            for what, seconds in (("expires_in", self.expires_in), ("deadline", self.deadline)):
                if seconds is not None:
                    check_seconds(what, seconds)
        except InvalidOption as exc:
            raise ConfigurationError(str(exc)) from None
        key = self.rate_limit_key
        if key is not None and rate is None:
            raise ConfigurationError("rate_limit_key needs a rate_limit: it says which window of that limit a "
                                     "run counts in")
        if key is not None and not callable(key) and not _storable_key(key):
            raise ConfigurationError(f"rate_limit_key must be a function of the job's arguments or a non-empty "
                                     f"string of at most {UNIQUE_KEY_MAX} characters (valid Unicode, no NUL)")
        if self.cost is not None and rate is not None and self.cost > rate.count:
            raise ConfigurationError(f"cost {self.cost} is more than the rate limit {rate} allows in a window: "
                                     "such a run could never start")
        object.__setattr__(self, "rate_limit", rate)  # as the worker reads them: parsed once, here
        object.__setattr__(self, "unique_for", period)
        self._check_unique_modes()
        try:
            check_aging(self.age_after, self.age_limit)
        except InvalidOption as exc:
            raise ConfigurationError(str(exc)) from None

    def _check_unique_modes(self) -> None:
        """``unique_key``, ``on_conflict``, ``unique_states``, ``debounce`` and ``max_wait``, alone and
        together (``unique_states`` kept as a tuple in its canonical order)."""
        key = self.unique_key
        fair = self.fairness_key
        if fair is not None and not callable(fair) and not _storable_key(fair):
            raise ConfigurationError(f"fairness_key must be a function of the job's arguments or a non-empty string "
                                     f"of at most {UNIQUE_KEY_MAX} characters (valid Unicode, no NUL)")
        try:
            if key is not None and not callable(key) and not _storable_key(key):
                raise InvalidOption(f"unique_key must be a function of the job's arguments or a non-empty string "
                                    f"of at most {UNIQUE_KEY_MAX} characters (valid Unicode, no NUL)")
            options = JobOptions(on_conflict=self.on_conflict, debounce=self.debounce, max_wait=self.max_wait,
                                 unique_states=None if self.unique_states is None
                                 else check_unique_states(self.unique_states))
            options._check_display_and_limits()
            unique_rule(options.on_conflict, options.unique_states, options.debounce, options.max_wait)
        except InvalidOption as exc:
            raise ConfigurationError(str(exc)) from None
        object.__setattr__(self, "unique_states", options.unique_states)


class JobSpecArgs(TypedDict, total=False):
    """:class:`JobSpec`'s fields as keyword arguments: ``app.job(**options: Unpack[JobSpecArgs])``,
    so mypy checks each option's name and type as it checked the old spelled-out signature (the
    names and annotations must equal JobSpec's: tests/unit/test_option_declarations.py)."""

    name: str | None
    queue: str | None
    priority: int
    max_attempts: int | None
    backoff: BackoffSpec
    jitter: float
    timeout: float | None
    unique: bool
    keep_result: bool
    result_ttl: float | None
    rate_limit: str | RateLimit | None
    concurrency_limit: int | None
    concurrency_key: str | Callable[..., Any] | None
    rate_limit_key: str | Callable[..., Any] | None
    retry_on: Sequence[type[BaseException]] | type[BaseException] | None
    discard_on: Sequence[type[BaseException]] | type[BaseException]
    max_snoozes: int | None
    unique_for: float | None
    cost: int | None
    keep_traceback: bool | None
    run_logs: bool | None
    unique_key: str | Callable[..., Any] | None
    on_conflict: OnConflict | None
    unique_states: Sequence[UniqueState] | None
    debounce: float | None
    max_wait: float | None
    age_after: float | None
    age_limit: int | None
    expires_in: float | None
    deadline: float | None
    fairness_key: str | Callable[..., Any] | None
    max_resumptions: int


@dataclass(frozen=True)
class JobDefaults:
    """The app's defaults for its jobs, and the one place that decides which value a job gets.

    Strongest first:

    1. the call: ``job.using(queue=..., max_attempts=..., timeout=...)`` (for one enqueue);
    2. the job: ``@app.job(queue=..., max_attempts=..., backoff=..., timeout=..., max_snoozes=...)``;
    3. the app: ``Errands(default_queue=..., max_attempts=..., backoff=..., timeout=..., max_snoozes=...)``,
       or ``Errands.from_settings`` (keyword overrides, the settings object, ``ERRANDS_*``
       variables, ``[tool.errands]``, in that order);
    4. :data:`errands.core.settings.DEFAULTS`.

    ``None`` at a level means "not set here".  Levels 2-4 are resolved when the job is registered
    (nothing is looked up per enqueue); ``using`` replaces what it names.  Backoff and
    ``max_snoozes`` have no per-call level: the worker reads them from the job's definition."""

    queue: str = "default"
    max_attempts: int = 3
    backoff: BackoffSpec = "exponential"
    timeout: float | None = None
    max_snoozes: int = DEFAULT_MAX_SNOOZES

    def __post_init__(self) -> None:
        try:
            check_queue_name(self.queue)
            self.job_options().validated()
            RetryPolicy(max_snoozes=self.max_snoozes)
            make_backoff(self.backoff)
        except EnqueueError as exc:
            raise ConfigurationError(f"app-wide job default: {exc}") from None

    def job_options(self, *, queue: str | None = None, priority: int = 0, max_attempts: int | None = None,
                    timeout: float | None = None, keep_result: bool = False) -> JobOptions:
        """A job's options: what ``@app.job`` gave, else these defaults."""
        limit = self.timeout if timeout is None else timeout
        return JobOptions(queue=queue or self.queue, priority=priority,
                          max_attempts=self.max_attempts if max_attempts is None else max_attempts,
                          timeout=None if limit == NO_TIMEOUT else limit, keep_result=keep_result)

    def for_job(self, spec: JobSpec) -> tuple[JobOptions, Backoff, JobBehaviour]:
        """What ``@app.job(...)`` makes of a job: its options, backoff and behaviour, each value the
        job's own where ``spec`` sets one, else these defaults.  Raises as the decorator does:
        ``ConfigurationError`` for the retry rules and the backoff, ``InvalidOption`` for a queue,
        priority, attempts or timeout no enqueue could use."""
        policy = RetryPolicy(retry_on=None if spec.retry_on is None else _exception_types(spec.retry_on, "retry_on"),
                             discard_on=_exception_types(spec.discard_on, "discard_on"),
                             max_snoozes=self.max_snoozes if spec.max_snoozes is None else spec.max_snoozes,
                             max_resumptions=spec.max_resumptions)
        rate = spec.rate_limit if isinstance(spec.rate_limit, RateLimit) else None  # JobSpec parsed it
        behaviour = JobBehaviour(unique=spec.unique, rate_limit=rate, concurrency_limit=spec.concurrency_limit,
                                 concurrency_key=spec.concurrency_key, rate_limit_key=spec.rate_limit_key,
                                 result_ttl=spec.result_ttl, policy=policy,
                                 unique_for=spec.unique_for, cost=spec.cost, keep_traceback=spec.keep_traceback,
                                 run_logs=spec.run_logs,
                                 unique_key=spec.unique_key, on_conflict=spec.on_conflict,
                                 unique_states=None if spec.unique_states is None else tuple(spec.unique_states),
                                 debounce=spec.debounce, max_wait=spec.max_wait,
                                 aging=None if spec.age_after is None
                                 else (float(spec.age_after), DEFAULT_AGE_LIMIT if spec.age_limit is None
                                       else spec.age_limit),
                                 fairness_key=spec.fairness_key)
        options = self.job_options(queue=spec.queue, priority=spec.priority, max_attempts=spec.max_attempts,
                                   timeout=spec.timeout, keep_result=spec.keep_result)
        if spec.expires_in is not None or spec.deadline is not None:
            options = replace(options, expires_in=spec.expires_in, deadline=spec.deadline)
        options = options.validated()
        backoff = make_backoff(self.backoff if spec.backoff is None else spec.backoff, jitter=spec.jitter)
        return options, backoff, behaviour


CELERY_SPELLINGS = {
    "delay": "job.enqueue(*args, **kwargs)",
    "apply_async": "job.using(delay=..., queue=..., priority=...).enqueue(*args, **kwargs)",
    "apply": "job.enqueue(...) (or call the job, job(...), to run it here and now)",
    "send": "job.enqueue(*args, **kwargs)",
    "defer": "job.enqueue(*args, **kwargs)",
}
"""What other job queues call enqueueing (Celery, dramatiq, procrastinate), and errands' spelling."""


def default_job_name(func: Callable[..., Any]) -> str:
    """``module.function``, the name a job gets when ``@app.job`` gives none: a worker must find it
    again in its own registry.  A script run as ``python shop.py`` (or ``python -m shop``) defines its
    functions in ``__main__``, a module no worker imports under that name: there the name uses the
    module the worker does import, ``shop`` (what ``errands --app shop:app worker`` registers), so the
    jobs a script enqueues are the worker's.

    Refused (``ConfigurationError``, with the fix) where no worker could ever find the job under the
    name it would get: a function of an interactive session (``__main__`` with no file: the REPL,
    ``python -c``, a notebook) and one defined inside another function (``<locals>``).  A worker that
    claims such a job holds it back as unknown and, after ``unknown_job_grace``, buries it; refusing
    here says so while the fix is one keyword away."""
    module = getattr(func, "__module__", None)
    qualname = str(getattr(func, "__qualname__", func))
    if module == "__main__":
        module = _main_module_name()
        if module is None:
            raise ConfigurationError(
                f"job {qualname!r} is defined in an interactive session (module __main__), which no worker "
                f"imports: give it a name, @app.job(name=\"shop.{qualname}\"), or define it in a module the "
                "worker imports (errands --app that_module:app worker)")
    if "<locals>" in qualname:
        raise ConfigurationError(
            f"job {module}.{qualname} is defined inside a function, so no worker can import it by that name: "
            f"give it a name, @app.job(name=\"{module}.{qualname.rsplit('.', 1)[-1]}\"), or define it at "
            "module level")
    return f"{module}.{qualname}"


def _main_module_name() -> str | None:
    """The name under which the program running as ``__main__`` is imported by others: its package
    path when run with ``-m``, else its file's stem; None for an interactive session."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and getattr(spec, "name", None) and spec.name != "__main__":
        return str(spec.name)
    path = getattr(main, "__file__", None)
    if isinstance(path, str) and path.endswith(".py"):
        return os.path.splitext(os.path.basename(path))[0]
    return None


def _exception_types(value: Any, what: str) -> tuple[Any, ...]:
    """``retry_on`` / ``discard_on`` as a tuple (one class alone is accepted); RetryPolicy checks the items."""
    if isinstance(value, type):
        return (value,)
    try:
        return tuple(value)
    except TypeError:
        raise ConfigurationError(f"{what} must be exception classes, got {value!r}") from None


def _check_after(after: tuple[int, ...]) -> None:
    for parent in after:
        if isinstance(parent, bool) or not isinstance(parent, int) or not 0 < parent <= ID_MAX:
            raise InvalidOption(f"after must be jobs, job handles or job ids, got {parent!r}")
    if len(after) > MAX_AFTER:
        raise InvalidOption(f"a job may wait for at most {MAX_AFTER} jobs (a workflow may hold more)")


def _short_repr(value: object) -> str:
    """``repr(value)``, at most 60 characters (an error message quotes what it refused)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _storable_key(key: object) -> bool:
    """A unique or concurrency key every backend stores and compares as given."""
    return isinstance(key, str) and 0 < len(key) <= UNIQUE_KEY_MAX and safe_text(key) == key


@dataclass(frozen=True)
class JobBehaviour:
    """What a job does beyond running its function: fixed when it is registered."""

    unique: bool = False
    """Derive a unique key from the job's name and arguments for every enqueue."""
    rate_limit: RateLimit | None = None
    concurrency_limit: int | None = None
    concurrency_key: str | Callable[..., Any] | None = None
    """The group (a string, or a function of the job's arguments); the job's name when None."""
    rate_limit_key: str | Callable[..., Any] | None = None
    """The rate-limit window (a string, or a function of the job's arguments); the job's own when None."""
    result_ttl: float | None = None
    """Seconds a kept result stays; the app's ``result_ttl`` when None."""
    unique_for: float | None = None
    """Seconds a unique key stays taken after its job ended (Oban's unique period)."""
    cost: int | None = None
    """Units of ``rate_limit`` one run uses unless ``using(cost=...)`` says otherwise."""
    keep_traceback: bool | None = None
    """Keep each failed attempt's traceback in the error history (None: the app's ``keep_traceback``)."""
    run_logs: bool | None = None
    """False: its runs' log records are not kept (None: the app's ``run_logs`` decides)."""
    unique_key: str | Callable[..., Any] | None = None
    """Every enqueue's unique key (a string, or a function of the arguments); None: none, or ``unique``'s."""
    on_conflict: OnConflict | None = None
    unique_states: tuple[UniqueState, ...] | None = None
    debounce: float | None = None
    max_wait: float | None = None
    aging: tuple[float, int] | None = None
    """(``age_after``, ``age_limit``): seconds of waiting per step of priority, and the most steps."""
    fairness_key: str | Callable[..., Any] | None = None
    """The key the claim takes turns between (a string, or a function of the arguments); None: none."""
    hooks: Hooks | None = field(default=None, compare=False)
    policy: RetryPolicy = RetryPolicy()
    """``retry_on``, ``discard_on`` and ``max_snoozes``: what the retry decision reads of this job."""


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


def _job_ids(after: Any) -> tuple[int, ...]:
    """``after=`` as job ids: one job, or a list or tuple of them (duplicates kept once)."""
    if isinstance(after, (list, tuple, set, frozenset)):
        return tuple(dict.fromkeys(job_id_of(job) for job in after))
    return (job_id_of(after),)


def job_id_of(job: Any) -> int:
    """A job id from a handle, an enqueued definition's handle or an int."""
    if isinstance(job, JobHandle):
        return job.id
    if isinstance(job, int) and not isinstance(job, bool):
        return job
    raise InvalidOption(f"expected a job handle or a job id, got {job!r}")


class JobHandle:
    """What enqueue returns: the job's id and a way to ask about it later, from any process."""

    __slots__ = ("id", "name", "_app")

    def __init__(self, app: AppHost, job_id: int, name: str) -> None:
        self.id = job_id
        self.name = name
        self._app = app

    def status(self) -> JobState:
        """Where the job is now: waiting, running, in the dead letter, done (while its result
        is kept), cancelled, finished (gone), or unknown (no job ever had this id).

        Raises :class:`JobNotFound` when the job stored under this id has another name."""
        return self._app.job_state(self.id, self.name)

    def cancel(self) -> str:
        """Cancel the job; see :meth:`Errands.cancel`."""
        return self._app.cancel(self.id)

    def result(self, timeout: float | None = None, *, poll: float = 0.05) -> Any:
        """Wait for the job to end and return its return value (``keep_result`` must be on).

        Raises :class:`JobFailed` if it ended in the dead letter, :class:`JobCancelled` if it
        was cancelled, :class:`JobNotFound` if no such job was ever enqueued (or the id holds a job
        of another name), and ``TimeoutError`` after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = poll
        while True:
            done, value = self._outcome()
            if done:
                return value
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} did not finish within {timeout:g}s")
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 1.5, 1.0)

    async def aresult(self, timeout: float | None = None, *, poll: float = 0.05) -> Any:
        """``result`` for async callers: the database is asked in a worker thread."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pause = poll
        while True:
            done, value = await asyncio.to_thread(self._outcome)
            if done:
                return value
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"job {self.id} did not finish within {timeout:g}s")
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 1.0)

    def _outcome(self) -> tuple[bool, Any]:
        """(ended, return value), raising for the ways a job can end without a value."""
        app = self._app
        result = app.store.features.get_result(self.id) if 0 < self.id <= ID_MAX else None
        if result is not None:
            if result.name != self.name:
                raise JobNotFound(f"job {self.id} is a {result.name!r} job, not {self.name!r}")
            if result.undecodable:
                raise BadPayload(f"job {self.id} ({self.name}) succeeded, but its stored result is not valid JSON")
            if result.state is JobState.CANCELLED:
                raise JobCancelled(f"job {self.id} ({self.name}) was cancelled: {result.message or ''}".rstrip(": "))
            return True, result.result
        state = app.job_state(self.id, self.name)
        if state is JobState.UNKNOWN:
            raise JobNotFound(f"no job with id {self.id} was ever enqueued in this database")
        if state is JobState.FAILED or state is JobState.EXPIRED:
            entry = app.store.jobs.get_failed(self.id)
            kind, text = (entry.error_type, entry.error_message) if entry else ("", "")
            if state is JobState.EXPIRED:
                raise JobExpired(f"job {self.id} ({self.name}) expired before it started: {text}", kind, text)
            raise JobFailed(f"job {self.id} ({self.name}) ended in the dead letter: {kind}: {text}", kind, text)
        if state is JobState.FINISHED:
            return True, None  # succeeded without a kept result (or its record expired)
        return False, None

    def __repr__(self) -> str:
        return f"<JobHandle id={self.id} name={self.name!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


class JobDefinition(Generic[P, R]):
    """A registered job.  Calling it runs the function directly; ``enqueue`` defers it."""

    def __init__(self, app: AppHost, func: Callable[P, R], name: str, options: JobOptions,
                 backoff: Backoff, behaviour: JobBehaviour | None = None) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.options = options
        self.backoff = backoff
        self.behaviour = behaviour or JobBehaviour()
        b = self.behaviour
        self._plain = not (b.unique or b.unique_key is not None or b.debounce is not None
                           or b.concurrency_limit is not None or b.aging is not None
                           or b.rate_limit_key is not None or b.fairness_key is not None
                           or (b.cost is not None and b.cost != 1 and b.rate_limit is not None))
        """No feature of the definition itself changes what an enqueue stores (the fast path)."""
        self._unique = self._unique_rule()
        """The rule a unique key of this job's enqueues follows, and the debounce delay (both None: keep)."""
        self.is_async = inspect.iscoroutinefunction(func)
        self._signature = check_handler(func)
        self._positional = _positional_range(self._signature)
        enums = EnumParameters(name, func, self._signature)
        self.enums: EnumParameters | None = enums if enums else None
        """The parameters annotated with an Enum class (None for most jobs, so the worker's check per
        run is a plain test): their members travel as their values and come back as members."""
        scalars = ScalarParameters(name, func, self._signature)
        self.scalars: ScalarParameters | None = scalars if scalars else None
        """The parameters annotated int, float, str or bool (or X | None): their arguments' types are
        checked at enqueue (ArgumentTypeError), where a wrong one is a typo, not at every attempt."""
        self._fast = self._fast_path()
        self._cursor: Any = None
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name} queue={self.options.queue!r}>"

    if not TYPE_CHECKING:  # hidden from type checkers, which keep flagging job.delay(...) and typos

        def __getattr__(self, name: str) -> Any:
            """Only for names a job does not have: Celery's ``delay`` and ``apply_async`` get the
            errands spelling.  (No ``delay`` alias: in errands ``delay`` is an option, seconds to wait,
            ``job.using(delay=60)``, so ``job.delay(60)`` would read both ways.)"""
            hint = CELERY_SPELLINGS.get(name)
            if hint is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            raise AttributeError(f"a job has no .{name}(): errands enqueues with {hint}")

    @property
    def hooks(self) -> Hooks:
        """Per-job hooks (``@job.before``, ``@job.after``, ``@job.around``, ``@job.on_retry``, ``@job.on_dead``)."""
        if self.behaviour.hooks is None:
            object.__setattr__(self.behaviour, "hooks", Hooks(scope="job"))
        assert self.behaviour.hooks is not None
        return self.behaviour.hooks

    def before(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self.hooks.before(fn)

    def after(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self.hooks.after(fn)

    def around(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self.hooks.around(fn)

    def on_retry(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``fn(job)``, called with the failed job's record (:class:`~errands.core.rows.FailedJob`)
        when a failed run will be retried; the older ``fn(ctx, error_type, error_message, delay)`` works too."""
        return self.hooks.on_retry(fn)

    def on_dead(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``fn(job)``, called with the failed job's record when a run lands in the dead letter;
        the older ``fn(ctx, error_type, error_message)`` works too."""
        return self.hooks.on_dead(fn)

    def on_expired(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register ``fn(job)``, called once with the job's record when a run of this job ended as
        expired, unstarted (``expires_in`` / ``expires_at``)."""
        return self.hooks.on_expired(fn)

    def decode(self, payload: Any) -> tuple[list[Any], dict[str, Any]]:
        """A stored payload's arguments as the handler gets them (BadPayload when they cannot be)."""
        args, kwargs = decode_arguments(payload)
        return self.enums.to_members(args, kwargs) if self.enums else (args, kwargs)

    @property
    def parameters(self) -> tuple[str, ...]:
        """The handler's parameter names (a failure callback with a ``failure`` one receives the
        failed job's record there)."""
        return tuple(self._signature.parameters)

    def using(self, *, queue: str | None = None, priority: int | None = None, delay: float | None = None,
              run_at: datetime | None = None, max_attempts: int | None = None, timeout: float | None = None,
              unique_key: str | None = None, after: Any = None, keep_result: bool | None = None,
              label: str | None = None, cost: int | None = None, unique_for: float | None = None,
              on_conflict: OnConflict | None = None, unique_states: Sequence[UniqueState] | None = None,
              debounce: float | None = None, max_wait: float | None = None,
              expires_in: float | None = None, expires_at: datetime | None = None,
              deadline: float | datetime | None = None, cursor: Any = None) -> JobDefinition[P, R]:
        """A copy with options changed for the next enqueue; the registered job is untouched.

        ``after``: a job handle or id, or a list of them, that must all succeed before this run
        may start.
        ``label``: a display label shown in the CLI and the dashboard (at most 255 characters).
        ``cost``: units of the job's rate limit this run uses (at most the limit's count).
        ``unique_for``: seconds the unique key stays taken after the job ended.
        ``on_conflict``, ``unique_states``, ``debounce``, ``max_wait``: what this enqueue does when its
        unique key is held (the job's options of the same names, for this call).
        ``cursor``: a DB-API cursor of your own transaction; the job exists only if it commits.
        ``timeout=math.inf``: no time limit for this run (None leaves the job's own).
        ``expires_in`` (seconds after it is due) or ``expires_at`` (a moment): not started by then, it
        never starts and ends as expired; either replaces the job's own expiry.
        ``deadline``: seconds from now, or a moment, after which no attempt starts.
        """
        changes: dict[str, Any] = {k: v for k, v in dict(
            queue=queue, priority=priority, delay=delay, run_at=run_at, max_attempts=max_attempts,
            timeout=timeout, unique_key=unique_key, keep_result=keep_result, label=label, cost=cost,
            unique_for=unique_for, after=None if after is None else _job_ids(after), on_conflict=on_conflict,
            unique_states=None if unique_states is None else check_unique_states(unique_states),
            debounce=debounce, max_wait=max_wait, expires_in=expires_in, expires_at=expires_at,
            deadline=deadline).items() if v is not None}
        if expires_at is not None:
            changes["expires_in"] = None  # the call's moment replaces the job's own expiry
        elif expires_in is not None:
            changes["expires_at"] = None
        if timeout == NO_TIMEOUT:
            changes["timeout"] = None
        clone: JobDefinition[P, R] = object.__new__(JobDefinition)
        clone.__dict__.update(self.__dict__)
        clone.options = replace(self.options, **changes).validated()
        clone._unique = clone._unique_rule()
        clone._fast = clone._fast_path()
        if cursor is not None:
            clone._cursor = cursor
        return clone

    def s(self, *args: Any, **kwargs: Any) -> NewJob:  # noqa: D401 - Celery's name for a call not yet made
        """A call for a workflow step that receives results: like :meth:`prepare`, but the
        result it receives comes first, so the arguments are checked, with it, when the
        workflow (or chain, or batch) is enqueued.  ``total.s()`` for ``def total(values)``."""
        return self._encode(args, kwargs)

    def check_arguments(self, args: Sequence[Any], kwargs: dict[str, Any], *, receives: bool = False) -> None:
        """Raise InvalidOption unless the handler takes these arguments (``receives``: after a
        result put first)."""
        try:
            self._signature.bind(*((None,) if receives else ()), *args, **kwargs)
        except TypeError as exc:
            what = " (after the result it receives)" if receives else ""
            raise InvalidOption(f"arguments{what} do not match job {self.name!r}{self._signature}: {exc}") from None

    def _unique_rule(self) -> tuple[UniqueRule | None, float | None]:
        """:func:`unique_rule` of the call's options, else the job's (InvalidOption for a combination
        no enqueue could follow, e.g. ``using(delay=...)`` on a debounced job)."""
        o, b = self.options, self.behaviour
        return unique_rule(o.on_conflict or b.on_conflict, o.unique_states or b.unique_states,
                           b.debounce if o.debounce is None else o.debounce,
                           b.max_wait if o.max_wait is None else o.max_wait, delay=o.delay, run_at=o.run_at)

    def _key(self, payload: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str | None:
        """This enqueue's unique key: the call's, else the job's (a string, or its function of the
        arguments), else ``unique``'s hash of the arguments, else under debounce the job's name."""
        key = self.options.unique_key
        if key is not None:
            return key
        b = self.behaviour
        if b.unique_key is not None:
            return self._key_of("unique key", b.unique_key, args, kwargs)
        if b.unique:
            return f"{self.name}:{hashlib.sha256(payload.encode()).hexdigest()[:40]}"
        return self.name if self._unique[1] is not None else None

    def _fast_path(self) -> bool:
        """Whether neither the definition nor its options change what an enqueue stores beyond the
        payload (no unique key, dependency, result, label, cost, Enum parameter): most jobs, whose
        enqueue then skips every feature's checks (``app.keep_results`` is read per call)."""
        return self._plain and not self.enums and self.options.is_plain

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """Validate and encode one call without storing it (for ``app.enqueue_many``)."""
        accepts = self._positional
        if kwargs or accepts is None or not accepts[0] <= len(args) <= accepts[1]:
            self.check_arguments(args, kwargs)
        if self._fast and not self.app.keep_results:
            o = self.options
            new = NewJob(self.name, o.queue, encode_payload(self.name, args, kwargs, self.app.payload_limit),
                         o.priority, o.max_attempts, o.timeout, float(o.delay), o.run_at)
            if self.scalars is not None:
                self.scalars.check(args, kwargs)
            return new
        return self._encode(args, kwargs, check_types=True)

    def _encode(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any], *,
                check_types: bool = False) -> NewJob:
        """The row of one call.  ``check_types``: the annotated types (after the payload's own refusals:
        too big, too deep, not JSON), before a key function sees the arguments."""
        o = self.options
        if self.enums:
            stored, named = self.enums.to_values(args, kwargs)
            payload = encode_payload(self.name, stored, named, self.app.payload_limit)
        else:
            payload = encode_payload(self.name, args, kwargs, self.app.payload_limit)
        if check_types and self.scalars is not None:
            self.scalars.check(args, kwargs)
        if self._plain and o.is_plain and not self.app.keep_results:
            return NewJob(self.name, o.queue, payload, o.priority, o.max_attempts, o.timeout, float(o.delay), o.run_at)
        b = self.behaviour
        unique_key = self._key(payload, args, kwargs)
        rule, debounce = self._unique if unique_key is not None else (None, None)
        group = None
        if b.concurrency_limit is not None:
            key = b.concurrency_key
            group = self.name if key is None else self._key_of("concurrency key", key, args, kwargs)
        fair = None if b.fairness_key is None else self._key_of("fairness key", b.fairness_key, args, kwargs)
        flags = FLAG_RESULT if (o.keep_result or self.app.keep_results) else 0
        cost = self._cost(o)
        unique_for = None
        if unique_key is not None:
            unique_for = (o.unique_for if o.unique_for is not None else b.unique_for) or None
            if unique_for:
                flags |= FLAG_UNIQUE_PERIOD
        delay = float(o.delay if debounce is None else debounce)
        age_after, age_cap = None, None
        if b.aging is not None and o.priority < PRIORITY_RANGE[1]:
            age_after, age_cap = b.aging[0], min(o.priority + b.aging[1], PRIORITY_RANGE[1])
        expires_at, deadline_at = o.expiry_and_deadline()
        if deadline_at is not None:
            flags |= FLAG_DEADLINE
        return NewJob(self.name, o.queue, payload, o.priority, o.max_attempts, o.timeout, delay, o.run_at,
                      unique_key, o.after, group, flags, None, o.label, cost, unique_for, unique_rule=rule,
                      expires_at=expires_at, deadline_at=deadline_at,
                      rate_key=None if b.rate_limit_key is None else self._rate_key(b.rate_limit_key, args, kwargs),
                      age_after=age_after, age_base=None if age_after is None else o.priority, age_cap=age_cap,
                      fairness_key=fair)

    def _key_of(self, what: str, key: str | Callable[..., Any], args: tuple[Any, ...] | list[Any],
                kwargs: dict[str, Any]) -> str:
        """A key of this call (unique, concurrency, fairness): the job's string, or what its function
        makes of the arguments, as text; refused here, at enqueue, when no backend could store it."""
        value = key if isinstance(key, str) else str(key(*args, **kwargs))
        if not _storable_key(value):
            raise InvalidOption(f"{what} of job {self.name!r} must be 1-{UNIQUE_KEY_MAX} characters "
                                "(valid Unicode, no NUL)")
        return value

    def _rate_key(self, key: str | Callable[..., Any], args: tuple[Any, ...] | list[Any],
                  kwargs: dict[str, Any]) -> str:
        """This call's rate-limit key: the job's string, or what its function makes of the arguments
        (a string or an integer; anything else is refused here, at enqueue, rather than counted in a
        window nobody meant)."""
        if isinstance(key, str):
            return key
        value = key(*args, **kwargs)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise InvalidOption(f"rate_limit_key of job {self.name!r} must return a string or an integer, "
                                f"got {type(value).__name__} {_short_repr(value)}")
        if not _storable_key(value):
            raise InvalidOption(f"rate limit key of job {self.name!r} must be 1-{UNIQUE_KEY_MAX} characters "
                                f"(valid Unicode, no NUL), got {_short_repr(value)}")
        return value

    def _cost(self, o: JobOptions) -> int | None:
        """The units of its rate limit a run uses (None: 1, or the job has no rate limit)."""
        limit = self.behaviour.rate_limit
        if limit is None:
            return None
        cost = o.cost if o.cost is not None else self.behaviour.cost
        if cost is not None and cost > limit.count:
            raise InvalidOption(f"cost {cost} of job {self.name!r} is more than its rate limit allows in a "
                                f"window ({limit}): such a run could never start")
        return None if cost == 1 else cost

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Store one run of this job; returns as soon as the row is committed."""
        app = self.app
        if app.hooks.enqueuing and not app.eager_mode:
            with enqueuing(app.hooks, Enqueue("enqueue", name=self.name, queue=self.options.queue)) as call:
                call.ids = app.store.jobs.enqueue(call.stamp([self.prepare(*args, **kwargs)]), cursor=self._cursor)
            return JobHandle(app, call.ids[0], self.name)
        new = self.prepare(*args, **kwargs)
        if app.eager_mode:
            handle: JobHandle = app.run_eagerly(self, new, args, kwargs)
            return handle
        # prepare() already checked everything enqueue_many would (this definition is registered).
        [job_id] = app.store.jobs.enqueue((new,), cursor=self._cursor)
        return JobHandle(app, job_id, self.name)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """``enqueue`` for async callers: the blocking insert runs in a worker thread.

        With ``using(cursor=...)`` the insert runs inline: it joins the caller's own transaction on
        the caller's connection, which belongs to the caller's thread (SQLite refuses any other)."""
        app = self.app
        if self._cursor is not None:
            return self.enqueue(*args, **kwargs)
        if app.hooks.enqueuing and not app.eager_mode:
            with enqueuing(app.hooks, Enqueue("enqueue", name=self.name, queue=self.options.queue)) as call:
                jobs = call.stamp([self.prepare(*args, **kwargs)])
                call.ids = await asyncio.to_thread(app.store.jobs.enqueue, jobs, self._cursor)
            return JobHandle(app, call.ids[0], self.name)
        new = self.prepare(*args, **kwargs)
        if self.app.eager_mode:
            handle: JobHandle = self.app.run_eagerly(self, new, args, kwargs)
            return handle
        [job_id] = await asyncio.to_thread(self.app.store.jobs.enqueue, (new,), self._cursor)
        return JobHandle(self.app, job_id, self.name)

