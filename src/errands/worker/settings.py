"""The options of one worker, each declared once: its default, its bounds, its flag and variable, its help.

Every way to start a worker (``errands worker``, ``manage.py errands_worker``, ``app.run_worker``,
the in-process worker of a web process, its ASGI lifespan and Flask's ``start_worker``) builds a
:class:`WorkerSettings`, whose ``__post_init__`` is the only check of the values, so each entry
point accepts the same values and refuses the others with the same message.  The command lines
generate their flags from the :class:`OptionSpec` of each field (``OPTIONS``), and the Python entry
points take the same keywords (:class:`WorkerOptions`).  Before, the options were spelled out in
nine signatures with three sets of bounds and three exception types (click's ranges,
``ConfigurationError``, ``ValueError``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar

from ..core.config import check_queue_name
from ..core.errors import ConfigurationError, InvalidQueueName, InvalidWorkerQueue
from ..core.settings import DEFAULTS

if TYPE_CHECKING:
    from typing_extensions import Unpack

CONCURRENCY = 1
"""Jobs run at once per worker process."""
SLEEP = 1.0
"""Longest wait in seconds between polls when idle."""
SHUTDOWN_TIMEOUT = 30.0
"""Seconds running jobs get to finish after a stop (``errands worker``, ``manage.py errands_worker``,
``app.run_worker``): a worker service is usually given this long by its service manager."""
EMBEDDED_SHUTDOWN_TIMEOUT = 10.0
"""The same for a worker embedded in a web process (``start_worker``, ``errands_lifespan``).  Shorter
because the web server's own shutdown waits for it, and web servers and their platforms allow a
short shutdown (gunicorn's graceful timeout and many PaaS stop within 30 s in all, requests
included); what does not finish in time goes back to the queue with its attempt refunded."""

T = TypeVar("T")

SPEC = "errands.option"
"""The key of a :class:`WorkerSettings` field's metadata that holds its :class:`OptionSpec`."""


@dataclass(frozen=True)
class OptionSpec:
    """How one worker option is checked and offered on the command lines.

    ``kind`` is int, float (seconds), bool, or str (queue names).  ``low`` and ``high`` bound a
    number; ``optional`` lets None through (another part decides: the app's lease, an adaptive
    prefetch, no limit).  ``flags`` are the command lines' (``--no-...`` for a bool that turns the
    option off), ``envvar`` the variable they also read.  ``name`` and ``default`` are the
    dataclass field's, filled in below, so neither is written twice."""

    kind: type
    flags: tuple[str, ...]
    envvar: str
    help: str
    low: float | None = None
    high: float | None = None
    optional: bool = False
    name: str = ""
    default: Any = None

    @property
    def negated(self) -> bool:
        """The flag turns the option off (``--no-scheduler`` sets ``scheduler=False``)."""
        return self.flags[-1].startswith("--no-")

    @property
    def metavar(self) -> str:
        if self.kind is str:
            return "NAME[,NAME]"
        if self.kind is float:
            return "SECONDS"
        return f"{self.low:g}-{self.high:g}" if self.high is not None else "N"

    def refusal(self, value: object) -> str:
        """The one message for a refused value of this option, wherever it came from."""
        if self.kind is bool:
            wanted = "a boolean"
        elif self.kind is float:
            wanted = f"a number of seconds of at least {self.low:g}"
        elif self.high is not None:
            wanted = f"an integer from {self.low:g} to {self.high:g}"
        else:
            wanted = f"an integer of at least {self.low:g}"
        return f"{self.name} must be {wanted}, got {value!r}"

    def check(self, value: object) -> Any:
        """``value`` as the settings hold it (seconds as a float), or ConfigurationError."""
        if value is None and self.optional:
            return None
        if self.kind is str:
            return _queue_names(value)
        if self.kind is bool:
            if isinstance(value, bool):
                return value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                and (self.kind is float or isinstance(value, int)) \
                and (self.low is None or value >= self.low) and (self.high is None or value <= self.high):
            return float(value) if self.kind is float else value
        raise ConfigurationError(self.refusal(value))


def _queue_names(value: object) -> tuple[str, ...]:
    """One queue name or several, checked, in order, once each."""
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, Iterable):
        raise InvalidWorkerQueue(f"queues must be a queue name or a list of them, got {value!r}")
    try:
        return tuple(dict.fromkeys(check_queue_name(name) for name in names))
    except InvalidQueueName as exc:
        raise InvalidWorkerQueue(str(exc)) from None


def _option(default: T, kind: type, flags: tuple[str, ...], envvar: str, help: str, **bounds: Any) -> T:
    """A :class:`WorkerSettings` field: its default, and its spec in the field's metadata."""
    return field(default=default, metadata={SPEC: OptionSpec(kind, flags, envvar, help, **bounds)})


@dataclass(frozen=True)
class WorkerSettings:
    """How one worker process claims and runs jobs; immutable, so the supervisor hands the same
    settings to every process it forks and none can change them for the others.

    Every value is checked here, once, whichever entry point built it: a refused one raises
    :class:`~errands.core.errors.ConfigurationError` naming the option and its bounds."""

    queues: tuple[str, ...] = field(metadata={SPEC: OptionSpec(
        str, ("-q", "--queue"), "ERRANDS_QUEUES",
        "Queues to take jobs from, most important first (repeatable or comma list; default: every queue a "
        "registered job names).")})
    """Most important first (one name is taken as a list of one); empty only while an entry point
    has yet to fill in the app's queues (``app.default_queues()``)."""
    concurrency: int = _option(
        CONCURRENCY, int, ("-c", "--concurrency"), "ERRANDS_CONCURRENCY",
        "Jobs run at once per worker process (threads; async jobs share one event loop).", low=1, high=1000)
    burst: bool = _option(
        False, bool, ("--burst",), "ERRANDS_BURST",
        "Exit when no job is ready (delayed jobs are not waited for).")
    max_jobs: int | None = _option(
        None, int, ("--max",), "ERRANDS_MAX_JOBS", "Exit after this many jobs (per process).", low=1, optional=True)
    max_memory: int | None = _option(
        None, int, ("--max-memory",), "ERRANDS_MAX_MEMORY",
        "Recycle a worker process after a job leaves it above this many MB of resident memory: it finishes "
        "its running jobs and exits, and the supervisor starts a fresh one.", low=1, optional=True)
    sleep: float = _option(
        SLEEP, float, ("--sleep",), "ERRANDS_SLEEP",
        "Longest wait in seconds between polls when idle (with a wake-up signal: between safety polls).",
        low=0.01)
    shutdown_timeout: float = _option(
        SHUTDOWN_TIMEOUT, float, ("--shutdown-timeout",), "ERRANDS_SHUTDOWN_TIMEOUT",
        f"Seconds running jobs get to finish after a stop (SIGTERM); the rest go back to the queue "
        f"(a worker embedded in a web process: {EMBEDDED_SHUTDOWN_TIMEOUT:g} by default).", low=0)
    lease: float | None = _option(
        None, float, ("--lease",), "ERRANDS_LEASE",
        f"Seconds a claim is held without a heartbeat (default: the app's lease, {DEFAULTS['lease']:g} "
        f"unless set).", low=1, optional=True)
    min_sleep: float = _option(
        0.02, float, ("--min-sleep",), "ERRANDS_MIN_SLEEP",
        "First wait in seconds after a poll found nothing; it doubles while idle, up to --sleep.", low=0.001)
    prefetch: int | None = _option(
        None, int, ("--prefetch",), "ERRANDS_PREFETCH",
        "Jobs held beyond the running ones (default: adapts to job duration, about 50 ms of work).",
        low=0, high=1000, optional=True)
    listen: bool = _option(
        True, bool, ("--no-listen",), "ERRANDS_NO_LISTEN",
        "Do not wait for the database's wake-up signal (NOTIFY, data_version, new ids) when idle: poll only.")
    scheduler: bool = _option(
        True, bool, ("--no-scheduler",), "ERRANDS_NO_SCHEDULER",
        "Do not enqueue the app's periodic jobs from this worker (another one does); never in burst mode.")

    def __post_init__(self) -> None:
        for name, spec in OPTIONS.items():
            object.__setattr__(self, name, spec.check(getattr(self, name)))

    @classmethod
    def of(cls, queues: str | Iterable[str] | None = None, /, **options: Unpack[WorkerOptions]) -> WorkerSettings:
        """From an entry point's arguments: ``queues`` None or empty for "not given" (the entry
        point then fills in the app's queues), the options checked."""
        names = () if queues is None else (queues,) if isinstance(queues, str) else tuple(queues)
        return cls(queues=names, **options)


class WorkerOptions(TypedDict, total=False):
    """The keywords every Python entry point takes (``**options: Unpack[WorkerOptions]``): the
    fields of :class:`WorkerSettings` but ``queues``, which each one takes as its own (positional)
    argument.  A test holds the two equal."""

    concurrency: int
    burst: bool
    max_jobs: int | None
    max_memory: int | None
    sleep: float
    shutdown_timeout: float
    lease: float | None
    min_sleep: float
    prefetch: int | None
    listen: bool
    scheduler: bool


OPTIONS: Final[Mapping[str, OptionSpec]] = {
    f.name: replace(f.metadata[SPEC], name=f.name, default=None if f.default is MISSING else f.default)
    for f in fields(WorkerSettings)}
"""Each option's spec, by field name, in the order of the fields."""

PROCESSES: Final = OptionSpec(int, ("-p", "--processes"), "ERRANDS_PROCESSES",
                              "Worker processes under this supervisor (each runs --concurrency jobs at once).",
                              low=1, high=256, name="processes", default=1)
"""Worker processes under one supervisor: an option of the commands that fork (``errands worker``,
``manage.py errands_worker``) and of :class:`~errands.worker.supervisor.Supervisor`, not of a
worker process (so not a field of :class:`WorkerSettings`, which every process gets)."""
