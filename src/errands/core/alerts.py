"""Alert thresholds and the record an ``@app.on_alert`` hook receives (no I/O here).

An app names the thresholds it cares about (``Errands(alert_dead_letter=100, ...)``, ``ERRANDS_ALERT_*``
variables, Django settings: :mod:`errands.core.settings` holds the defaults, all off):

* ``alert_dead_letter``: the dead letter holds at least this many entries;
* ``alert_oldest_ready``: some queue's oldest ready job has waited at least this many seconds since it
  became due (one alert for all queues together);
* ``alert_oldest_ready_per_queue``: the same per named queue, each with its own number of seconds;
* ``alert_no_worker``: no worker has sent a heartbeat lately.

Someone evaluates them at most once per ``alert_every`` seconds across the whole fleet (see
:mod:`errands.worker.alerts`), keeps whether each one is crossed in the database, and hands each
change, once, to the app's hooks as an :class:`Alert`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .config import check_queue_name
from .errors import ConfigurationError, InvalidQueueName

DEAD_LETTER = "dead_letter"
OLDEST_READY = "oldest_ready"
NO_WORKER = "no_worker"
KINDS = (DEAD_LETTER, OLDEST_READY, NO_WORKER)


@dataclass(frozen=True)
class Alert:
    """One change of an alert, as ``@app.on_alert`` hooks receive it.

    ``kind``: "dead_letter", "oldest_ready" or "no_worker".  ``value``: what was measured (entries in
    the dead letter, seconds the oldest ready job has waited, workers alive).  ``threshold``: the
    configured number it was compared with (``no_worker``: 1, a worker alive).  ``crossed``: True when
    the alert starts, False when it clears.  ``at``: the database's time of the change.  ``queue``:
    the queue of a per-queue ``oldest_ready`` alert, None for the others (for the all-queues
    ``oldest_ready`` it is None, and ``worst_queue`` names the queue that waits longest)."""

    kind: str
    value: float
    threshold: float
    crossed: bool
    at: datetime
    queue: str | None = None
    worst_queue: str | None = None

    @property
    def cleared(self) -> bool:
        return not self.crossed

    def describe(self) -> str:
        """One line for people (banners, logs, a chat message)."""
        where = f" in queue {self.queue}" if self.queue else ""
        if not self.queue and self.worst_queue:
            where = f" (queue {self.worst_queue})"
        if self.kind == DEAD_LETTER:
            text = f"the dead letter holds {self.value:,.0f} entries (threshold {self.threshold:,.0f})"
        elif self.kind == OLDEST_READY:
            text = (f"the oldest ready job{where} has waited {_seconds(self.value)} "
                    f"(threshold {_seconds(self.threshold)})")
        else:
            text = "no worker is alive: none sent a heartbeat lately"
        return text if self.crossed else f"cleared: {text}"


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} s"


@dataclass(frozen=True)
class AlertThresholds:
    """What an app alerts on (None or False: that alert is off), and how often the fleet looks."""

    dead_letter: int | None = None
    oldest_ready: float | None = None
    oldest_ready_per_queue: Mapping[str, float] = field(default_factory=dict)
    no_worker: bool = False
    every: float = 30.0

    def __post_init__(self) -> None:
        if self.dead_letter is not None and (isinstance(self.dead_letter, bool) or not isinstance(self.dead_letter, int)
                                             or self.dead_letter < 1):
            raise ConfigurationError(f"alert_dead_letter must be a positive whole number, got {self.dead_letter!r}")
        if self.oldest_ready is not None:
            _positive_seconds(self.oldest_ready, "alert_oldest_ready")
        for queue, seconds in self.oldest_ready_per_queue.items():
            try:
                check_queue_name(queue)
            except InvalidQueueName as exc:
                raise ConfigurationError(f"alert_oldest_ready_per_queue: {exc}") from None
            _positive_seconds(seconds, f"alert_oldest_ready_per_queue[{queue!r}]")
        _positive_seconds(self.every, "alert_every")
        if self.every < 1:
            raise ConfigurationError(f"alert_every must be at least 1 second, got {self.every!r}")

    @property
    def any(self) -> bool:
        """Whether any alert is configured (else nobody evaluates anything)."""
        return bool(self.dead_letter or self.oldest_ready or self.oldest_ready_per_queue or self.no_worker)


def _positive_seconds(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")


def parse_per_queue(value: Any) -> dict[str, float]:
    """``{"mails": 60}`` as it is, or the text form of a variable or a file: ``"mails=60,reports=600"``."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items()}
    if not isinstance(value, str):
        raise ValueError("expected queue=seconds pairs, e.g. 'mails=60,reports=600'")
    out: dict[str, float] = {}
    for part in value.split(","):
        if not part.strip():
            continue
        queue, sep, seconds = part.partition("=")
        if not sep or not queue.strip():
            raise ValueError(f"expected queue=seconds, got {part.strip()!r}")
        out[queue.strip()] = float(seconds)
    return out
