"""Cron expressions, time-zone aware, in the standard library only.

``Cron("*/5 * * * *", "Europe/Istanbul")`` understands the five classic fields
(minute, hour, day of month, month, day of week) or six with seconds first; ``*``,
numbers, ``a-b`` ranges, ``/n`` steps, ``,`` lists, month and weekday names, and the
``@hourly``/``@daily``/``@weekly``/``@monthly``/``@yearly`` shorthands.  As in cron,
when both day fields are restricted a day matches if either does.

Slots are computed on the wall clock of the schedule's time zone and returned in UTC.
On a daylight-saving change, a wall time that does not exist that day is skipped.  A wall
time that exists twice (clocks set back) runs once, at its first occurrence, when the hour
field names hours ("30 1 * * *": once that day, as a person means it); when the hour field
is ``*`` or a step of it ("*/15 * * * *", "@hourly"), at both, as Vixie cron does: such a
schedule means "every so often", and skipping the repeated hour would leave an hour of real
time without a run.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ConfigurationError

_MONTHS = {m: i for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                       "nov", "dec"], start=1)}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_SEARCH_DAYS = 366 * 5  # long enough for "29 February on a Monday"


def _field(text: str, low: int, high: int, names: dict[str, int] | None, what: str) -> frozenset[int]:
    values: set[int] = set()
    for part in text.lower().split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) < 1:
                raise ConfigurationError(f"cron {what}: bad step {step_text!r}")
            step = int(step_text)
        if part in ("*", ""):
            start, end = low, high
        elif "-" in part:
            a, b = part.split("-", 1)
            start, end = _value(a, names, what), _value(b, names, what)
        else:
            start = _value(part, names, what)
            end = high if step > 1 else start
        if not (low <= start <= high and low <= end <= high) or start > end:
            raise ConfigurationError(f"cron {what}: {part!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _value(text: str, names: dict[str, int] | None, what: str) -> int:
    if names and text in names:
        return names[text]
    if not text.isdigit():
        raise ConfigurationError(f"cron {what}: {text!r} is not a number" + (" or a name" if names else ""))
    return int(text)


class Cron:
    """A parsed cron expression bound to a time zone."""

    def __init__(self, expression: str, tz: str | None = None) -> None:
        self.expression = expression.strip()
        text = _MACROS.get(self.expression.lower(), self.expression)
        fields = text.split()
        if len(fields) == 5:
            fields = ["0", *fields]
        if len(fields) != 6:
            raise ConfigurationError(f"cron expression {expression!r} needs 5 fields (or 6 with seconds first)")
        self.seconds = _field(fields[0], 0, 59, None, "second")
        self.minutes = _field(fields[1], 0, 59, None, "minute")
        self.hours = _field(fields[2], 0, 23, None, "hour")
        self.days = _field(fields[3], 1, 31, None, "day of month")
        self.months = _field(fields[4], 1, 12, _MONTHS, "month")
        weekdays = _field(fields[5], 0, 7, _DAYS, "day of week")
        self.weekdays = frozenset(7 if d == 0 else d for d in weekdays)  # ISO: Monday 1 .. Sunday 7
        self._every_hour = fields[2].startswith("*")
        """The hour field is ``*`` or ``*/n``: a repeated wall time runs at both occurrences."""
        self._any_day = fields[3] == "*"
        self._any_weekday = fields[5] == "*"
        try:
            self.tz = ZoneInfo(tz) if tz else timezone.utc
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigurationError(f"unknown time zone {tz!r}") from exc
        self._times = sorted(time(h, m, s) for h in self.hours for m in self.minutes for s in self.seconds)
        self._repeated_days: OrderedDict[date, list[datetime]] = OrderedDict()
        """The sorted slots of the last few days whose clocks were set back (see :meth:`_folded`)."""

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, {getattr(self.tz, 'key', 'UTC')!r})"

    def _day_matches(self, d: date) -> bool:
        if d.month not in self.months:
            return False
        by_day, by_weekday = d.day in self.days, d.isoweekday() in self.weekdays
        if self._any_day:
            return by_weekday
        if self._any_weekday:
            return by_day
        return by_day or by_weekday

    def _utc(self, d: date, t: time) -> datetime | None:
        """The UTC instant of local wall time ``d t``; None if that wall time does not exist."""
        local = datetime.combine(d, t, tzinfo=self.tz)
        instant = local.astimezone(timezone.utc)
        if instant.astimezone(self.tz).replace(tzinfo=None) != local.replace(tzinfo=None):
            return None  # skipped by a daylight-saving change
        return instant

    def _sets_back(self, d: date) -> bool:
        """Whether ``d``'s clocks are set back (some wall times exist twice) and this schedule runs
        at both occurrences (its hour field is ``*`` or ``*/n``)."""
        if not self._every_hour or self.tz is timezone.utc:
            return False
        start = datetime.combine(d, time(0), tzinfo=self.tz).utcoffset()
        end = datetime.combine(d + timedelta(days=1), time(0), tzinfo=self.tz).utcoffset()
        return start is not None and end is not None and start > end

    def _folded(self, d: date) -> list[datetime]:
        """Every slot of a day whose clocks are set back, both occurrences of a repeated wall time
        included, in UTC order (which is not the wall clock's order that day).  Kept for a few days:
        a scheduler asks at every tick, and a per-second schedule has 86,400 wall times."""
        slots = self._repeated_days.get(d)
        if slots is None:
            slots = []
            for t in self._times:
                first = self._utc(d, t)
                if first is not None:
                    second = datetime.combine(d, t, tzinfo=self.tz).replace(fold=1).astimezone(timezone.utc)
                    slots += [first] if second == first else [first, second]
            slots.sort()
            self._repeated_days[d] = slots
            if len(self._repeated_days) > 4:
                self._repeated_days.popitem(last=False)
        return slots

    def _days(self, start: date, step: int) -> Iterator[date]:
        d = start
        for _ in range(_SEARCH_DAYS):
            if self._day_matches(d):
                yield d
            d += timedelta(days=step)

    def next_after(self, moment: datetime) -> datetime:
        """The first slot strictly after ``moment`` (an aware datetime), in UTC."""
        local = moment.astimezone(self.tz)
        today = local.date()
        for d in self._days(today, 1):
            if self._sets_back(d):
                folded = self._folded(d)
                at = bisect.bisect_right(folded, moment)
                if at < len(folded):
                    return folded[at]
                continue
            # On the first day, start near the moment (a time zone change can shift it by hours).
            start = max(0, bisect.bisect_left(self._times, local.time().replace(microsecond=0)) - 1) \
                if d == today else 0
            for t in self._times[start:]:
                instant = self._utc(d, t)
                if instant is not None and instant > moment:
                    return instant
        raise ConfigurationError(f"cron {self.expression!r} never fires")

    def last_at_or_before(self, moment: datetime) -> datetime:
        """The latest slot at or before ``moment``, in UTC."""
        local = moment.astimezone(self.tz)
        today = local.date()
        for d in self._days(today, -1):
            if self._sets_back(d):
                folded = self._folded(d)
                at = bisect.bisect_right(folded, moment)
                if at > 0:
                    return folded[at - 1]
                continue
            end = min(len(self._times), bisect.bisect_right(self._times, local.time()) + 1) \
                if d == today else len(self._times)
            for t in reversed(self._times[:end]):
                instant = self._utc(d, t)
                if instant is not None and instant <= moment:
                    return instant
        raise ConfigurationError(f"cron {self.expression!r} never fired in the last {_SEARCH_DAYS} days")
