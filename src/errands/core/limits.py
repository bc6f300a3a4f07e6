"""Limits on what a job may ask for: how far ahead it may be scheduled, and how often it may
start (rate-limit specifications: ``"10/minute"``, ``"5/s"``, ``"100/30s"``, ``"3/day"``)."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass

from .errors import ConfigurationError

MAX_DELAY = 10 * 365 * 86400.0
"""The furthest ahead a job may be scheduled, in seconds (ten years): a delay, a ``run_at`` or a
retry's backoff.  Far enough for any real schedule, near enough that every database and every
date type stores the time it leads to."""


ID_MAX = 2**63 - 1
"""The largest job id any backend can hold (BIGINT); a bigger number names no job."""
INT_MAX = 2**31 - 1
"""Priorities and attempt counts are 32-bit integers in every backend."""


def clamp_delay(seconds: object) -> float:
    """A delay a handler, a backoff function or a caller computed, made storable: 0..MAX_DELAY
    (NaN and anything that is no number count as 0)."""
    try:
        value = float(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return 0.0
    if math.isnan(value) or value < 0:
        return 0.0
    return min(value, MAX_DELAY)


_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
          "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([a-z]+?)s?\s*$")


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any ``period`` seconds, across every worker."""

    count: int
    period: float

    def __str__(self) -> str:
        return f"{self.count}/{self.period:g}s"


def parse_rate_limit(spec: str | RateLimit) -> RateLimit:
    if isinstance(spec, RateLimit):
        return spec
    match = _SPEC.match(str(spec).lower())
    if not match or match.group(3) not in _UNITS:
        raise ConfigurationError(f"rate limit {spec!r}: use N/unit, e.g. '10/minute', '5/s' or '100/30s' "
                                 f"(units: {', '.join(sorted(set(_UNITS)))})")
    count, multiple, unit = int(match.group(1)), match.group(2), match.group(3)
    period = (float(multiple) if multiple else 1.0) * _UNITS[unit]
    if count < 1 or period <= 0:
        raise ConfigurationError(f"rate limit {spec!r}: the count and the period must be positive")
    return RateLimit(count, period)


RATE_KEY_LOCKS = 64
"""How many lock rows the per-key rate windows share (``rate-key:00`` to ``rate-key:63``): a key's
admission serialises on its bucket's row, so the locks table does not grow with the keys ever
seen, and 64 buckets leave two admissions of different keys rarely waiting for each other."""
RATE_WINDOW_PREFIX = "key:"
"""How a per-key window's name starts in ``errands_rate_starts`` (a job's own window is its name)."""


def rate_window(name: str, key: str | None) -> str:
    """The window a run of job ``name`` counts in: the job's own (its name) when it has no rate
    key, else one per (job, key), named by a digest so that any job name and any key of up to
    255 characters fit the column and no two pairs share a window."""
    if key is None:
        return name
    # (surrogatepass: a key read back from a row written by hand may hold lone surrogates.)
    digest = hashlib.sha256(f"{name}\x00{key}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return RATE_WINDOW_PREFIX + digest


def rate_window_lock(window: str) -> str:
    """The lock row a per-key window's admission takes: one of RATE_KEY_LOCKS buckets."""
    bucket = int(hashlib.sha256(window.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16) % RATE_KEY_LOCKS
    return f"rate-key:{bucket:02d}"
