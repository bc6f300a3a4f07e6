"""Schedules: which slots a scheduler claims (the catch-up policy) and the schedules stored in the
database beside the code's ``@app.periodic`` ones.

Pure code: the scheduler thread (:mod:`errands.worker.scheduler`) asks :func:`slots_due` which slots
to claim at a moment, and builds a :class:`StoredSchedule` from each row of ``errands_schedules``.

Catch-up, per schedule, says what happens to slots that passed while no scheduler ran (a deploy,
an outage):

* ``"latest"`` (the default, errands' behaviour before the setting existed): the latest missed slot
  runs once, older ones are skipped;
* ``"none"``: missed slots are skipped; a slot runs only when a scheduler claims it within
  :data:`MISSED_AFTER` seconds of its time;
* ``"all"``: every missed slot runs, oldest first, at most ``catch_up_limit`` of them (the most
  recent ones).

A schedule the database has never seen starts with its next slot, whatever its catch-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .cron import Cron
from .errors import ConfigurationError
from .jobs import PRIORITY_RANGE, JobDefinition
from .payload import decode_arguments
from .rows import NewJob

CATCH_UP_MODES = ("none", "latest", "all")
DEFAULT_CATCH_UP = "latest"
DEFAULT_CATCH_UP_LIMIT = 100
"""With ``catch_up="all"``: the most missed slots run after downtime unless the schedule says otherwise."""
MAX_CATCH_UP_LIMIT = 10_000
MISSED_AFTER = 60.0
"""Seconds after its time a slot counts as missed (``catch_up="none"`` skips it).  A scheduler wakes
at each slot and at least every 5 s, and backs off up to 30 s while the database is unreachable:
a minute leaves room for both."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
"""What a stored schedule may be called: letters, digits and ``_ . -`` (it appears in URLs, and in its runs'
unique keys ``periodic:<name>:<slot>``, which stay split at their first two colons)."""


@dataclass(frozen=True)
class CatchUp:
    """A schedule's catch-up policy (see the module's docstring)."""

    mode: str = DEFAULT_CATCH_UP
    limit: int = DEFAULT_CATCH_UP_LIMIT

    def __post_init__(self) -> None:
        if self.mode not in CATCH_UP_MODES:
            raise ConfigurationError(f"catch_up must be one of {', '.join(CATCH_UP_MODES)}, got {self.mode!r}")
        if type(self.limit) is not int or not 1 <= self.limit <= MAX_CATCH_UP_LIMIT:
            raise ConfigurationError(f"catch_up_limit must be a whole number from 1 to {MAX_CATCH_UP_LIMIT:,}")


def slots_due(cron: Cron, catch_up: CatchUp, now: datetime, last_slot: datetime | None) -> list[tuple[datetime, bool]]:
    """The slots to claim at ``now``, oldest first, each with whether its run is enqueued (False: the
    slot is only marked as passed).  ``last_slot``: the latest slot the database recorded (read only
    for ``"all"``; None: unknown or never seen)."""
    latest = cron.last_at_or_before(now)
    if catch_up.mode == "none":
        return [(latest, (now - latest).total_seconds() <= MISSED_AFTER)]
    if catch_up.mode == "latest" or last_slot is None:
        return [(latest, True)]
    slots = [latest]
    while len(slots) < catch_up.limit:
        try:
            earlier = cron.last_at_or_before(slots[-1] - timedelta(microseconds=1))
        except ConfigurationError:  # no earlier slot in the years the search covers
            break
        if earlier <= last_slot:
            break
        slots.append(earlier)
    return [(slot, True) for slot in reversed(slots)]


@dataclass(frozen=True)
class ScheduleRow:
    """A row of ``errands_schedules`` as stored (values not yet checked: another program may write it)."""

    name: str
    job: str
    cron: str
    timezone: str | None
    payload: str
    queue: str | None
    priority: int | None
    catch_up: str
    catch_up_limit: int | None
    paused: bool
    version: int
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def definition(self) -> tuple[Any, ...]:
        """What a scheduler builds a schedule from (the times left out): unchanged, nothing to rebuild."""
        return (self.name, self.job, self.cron, self.timezone, self.payload, self.queue, self.priority,
                self.catch_up, self.catch_up_limit, self.paused, self.version)


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ConfigurationError("a schedule's name is 1-200 letters, digits and _ . - (got "
                                 f"{str(name)[:60]!r})")
    return name


def check_priority(priority: Any) -> int | None:
    if priority is None:
        return None
    if type(priority) is not int or not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        raise ConfigurationError("priority must be a whole number (32-bit)")
    return priority


class StoredSchedule:
    """A schedule read from the database, as the scheduler uses it (like ``errands.app.Schedule``)."""

    def __init__(self, row: ScheduleRow, lookup: Callable[[str], JobDefinition[Any, Any] | None]) -> None:
        """Raises ConfigurationError when the row cannot be a schedule (unknown job, bad cron, time
        zone, arguments, queue or catch-up): the scheduler logs it and skips the row."""
        definition = lookup(row.job)
        if definition is None:
            raise ConfigurationError(f"schedule {row.name!r}: no job named {row.job!r} is registered")
        self.row = row
        self.cron = Cron(row.cron, row.timezone)
        self.catch_up = CatchUp(row.catch_up, DEFAULT_CATCH_UP_LIMIT if row.catch_up_limit is None
                                else row.catch_up_limit)
        try:
            self.args, self.kwargs = decode_arguments(row.payload)
        except ValueError as exc:
            raise ConfigurationError(f"schedule {row.name!r}: its arguments cannot be read ({exc})") from None
        options: dict[str, Any] = {"queue": row.queue, "priority": check_priority(row.priority)}
        self.job = definition.using(**{k: v for k, v in options.items() if v is not None})
        self.job_name = definition.name

    @property
    def name(self) -> str:
        return self.row.name

    @property
    def version(self) -> int:
        return self.row.version

    def prepare(self, slot_key: str) -> NewJob:
        """The run for one slot: its unique key names the schedule and the slot."""
        return self.job.using(unique_key=f"periodic:{self.name}:{slot_key}"[:255]).prepare(*self.args, **self.kwargs)
