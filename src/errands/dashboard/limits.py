"""Request limits on the JSON API: enqueueing, actions and reads each have their own, per principal
(the signed-in user, or the host's) and per client address, so that a runaway script can flood
neither the queue nor the database.  A refused request is answered 429 with ``Retry-After``.

Limits are written as job rate limits are (``"120/minute"``, ``"5/s"``, ``"1000/hour"``:
:func:`errands.core.limits.parse_rate_limit`, the one spelling of "N per period" in errands) and
enforced as token buckets: a client may spend the whole count at once, then one request per
``period / count`` seconds.  The buckets live in the dashboard process's memory: counting in the
database (as failed logins are, for every process to see) would cost a write per request, the very
load these limits keep away.  With several dashboard processes behind a balancer, each has its own
buckets, so the fleet accepts up to that many times a limit.  The per-address limit is checked
before the request is authenticated (so refused requests cost no session lookup), the principal's
right after.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, fields

from ..core.errors import ConfigurationError
from ..core.limits import RateLimit, parse_rate_limit

KINDS = ("enqueue", "actions", "reads")
"""``POST /api/enqueue``; every other ``POST /api/...`` (retry, cancel, pause, recover, run now);
every ``GET /api/...`` and ``/metrics``."""
MAX_BUCKETS = 50_000
"""Buckets one process keeps; past that, full (idle) ones are forgotten first: a client spraying
addresses costs bounded memory."""


@dataclass(frozen=True)
class ApiLimits:
    """The JSON API's request limits (None: no limit).  The defaults let a person, a dashboard tab
    refreshing every few seconds and a well-behaved script through, and stop a loop that runs away."""

    enqueue: str | RateLimit | None = "120/minute"
    """Enqueue requests per principal (each may carry up to 100 copies of a job)."""
    enqueue_per_address: str | RateLimit | None = "240/minute"
    actions: str | RateLimit | None = "120/minute"
    """Other state-changing requests per principal: retry, forget, cancel, pause, resume, recover, run now."""
    actions_per_address: str | RateLimit | None = "240/minute"
    reads: str | RateLimit | None = "1200/minute"
    """Reads per principal: lists, details, the overview, /metrics."""
    reads_per_address: str | RateLimit | None = "2400/minute"

    def parsed(self) -> dict[tuple[str, str], RateLimit]:
        """((kind, "principal" | "address") -> limit) of the limits set, each checked."""
        out: dict[tuple[str, str], RateLimit] = {}
        for f in fields(self):
            spec = getattr(self, f.name)
            if spec is None:
                continue
            kind, _, per = f.name.partition("_per_")
            try:
                out[(kind, per or "principal")] = parse_rate_limit(spec)
            except ConfigurationError as exc:
                raise ConfigurationError(f"api limit {f.name}: {exc}") from None
        return out

    @classmethod
    def from_text(cls, text: str | None) -> ApiLimits:
        """The CLI's and ``ERRANDS_DASHBOARD_API_LIMITS``' form: ``enqueue=30/minute,reads_per_address=none``
        (unnamed limits keep their defaults)."""
        if not text or not text.strip():
            return cls()
        names = {f.name for f in fields(cls)}
        given: dict[str, str | None] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            name, sep, spec = (s.strip() for s in part.partition("="))
            if not sep or name not in names:
                raise ConfigurationError(f"api limits: {part.strip()!r} is not NAME=N/period; names: "
                                         f"{', '.join(sorted(names))}")
            given[name] = None if spec.lower() in ("none", "off", "") else spec
        limits = cls(**given)  # type: ignore[arg-type]
        limits.parsed()
        return limits


class RequestLimiter:
    """Token buckets per (kind, principal) and (kind, address), in this process's memory."""

    def __init__(self, limits: ApiLimits, clock: object = time.monotonic) -> None:
        self.limits = limits.parsed()
        self.clock = clock
        self._buckets: dict[tuple[str, str, str], list[float]] = {}
        self._lock = threading.Lock()

    def check(self, kind: str, per: str, key: str) -> float | None:
        """Spend one request of ``key``'s bucket for ``kind`` (``per``: "principal" or "address");
        None when allowed, else the seconds until the next request would be."""
        limit = self.limits.get((kind, per))
        if limit is None:
            return None
        rate = limit.count / limit.period
        now = self.clock()  # type: ignore[operator]
        with self._lock:
            bucket = self._buckets.get((kind, per, key))
            if bucket is None:
                if len(self._buckets) >= MAX_BUCKETS:
                    self._forget_idle(now)
                bucket = self._buckets[(kind, per, key)] = [float(limit.count), now]
            tokens = min(float(limit.count), bucket[0] + (now - bucket[1]) * rate)
            bucket[1] = now
            if tokens >= 1.0:
                bucket[0] = tokens - 1.0
                return None
            bucket[0] = tokens
            return (1.0 - tokens) / rate

    def _forget_idle(self, now: float) -> None:
        """Drop the buckets that have refilled (their client has been quiet for a whole period), then,
        if that was not enough, the oldest half."""
        for key, (tokens, last) in list(self._buckets.items()):
            limit = self.limits[(key[0], key[1])]
            if tokens + (now - last) * limit.count / limit.period >= limit.count:
                del self._buckets[key]
        if len(self._buckets) >= MAX_BUCKETS:
            for key, _ in sorted(self._buckets.items(), key=lambda kv: kv[1][1])[:len(self._buckets) // 2]:
                del self._buckets[key]

    def describe(self, kind: str, per: str) -> str:
        limit = self.limits[(kind, per)]
        what = {"enqueue": "enqueue requests", "actions": "actions", "reads": "reads"}[kind]
        return f"at most {limit.count} {what} per {limit.period:g} s from one {'user' if per == 'principal' else per}"


def retry_after(seconds: float) -> str:
    """``Retry-After``'s whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
