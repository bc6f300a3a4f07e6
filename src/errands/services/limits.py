"""Limits per queue that operators set while workers run: at most N of a queue's jobs running at
once over every worker, at most N starts per period.  They are stored (``errands_queue_limits``)
and every worker reads them again within a few seconds (``worker.admission``), on top of the limits
each job's definition carries in code.  Setting them is audited."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..core.config import check_queue_name
from ..core.errors import ConfigurationError, InvalidOption, InvalidQueueName
from ..core.limits import parse_rate_limit
from ..core.rows import QueueLimits
from .models import QueueLimitsView

if TYPE_CHECKING:
    from ..app import Errands

MAX_CONCURRENCY = 100_000
MAX_RATE = 1_000_000


def parse_limits(concurrency: Any, rate: Any) -> QueueLimits:
    """Limits as typed in the queues page or sent to the API: ``concurrency`` a whole number from
    1 (empty: none), ``rate`` as ``"10/minute"``, ``"5/s"`` or ``"100/30s"`` (empty: none)."""
    count: int | None = None
    if concurrency not in (None, ""):
        text = str(concurrency).strip() if not isinstance(concurrency, bool) else "x"
        if isinstance(concurrency, float) or not re.fullmatch(r"[0-9]{1,7}", text) \
                or not 1 <= int(text) <= MAX_CONCURRENCY:
            raise InvalidOption(f"concurrency must be a whole number from 1 to {MAX_CONCURRENCY:,} (empty: no limit; "
                                "to stop a queue, pause it)")
        count = int(text)
    if rate in (None, ""):
        return QueueLimits(count, None, None)
    if not isinstance(rate, str) or len(rate) > 40:
        raise InvalidOption("rate must be text such as 10/minute, 5/s or 100/30s (empty: no limit)")
    try:
        parsed = parse_rate_limit(rate)
    except ConfigurationError as exc:
        raise InvalidOption(str(exc)) from None
    if parsed.count > MAX_RATE or parsed.period > 86400 * 7:
        raise InvalidOption(f"rate: at most {MAX_RATE:,} starts, over at most 7 days")
    return QueueLimits(count, parsed.count, parsed.period)


def describe(limits: QueueLimits) -> str:
    parts = []
    if limits.concurrency is not None:
        parts.append(f"at most {limits.concurrency} running")
    if limits.rate_count is not None and limits.rate_period:
        parts.append(f"at most {limits.rate_count} starts per {limits.rate_period:g}s")
    return ", ".join(parts) or "no limit"


def view(queue: str, limits: QueueLimits | None) -> QueueLimitsView:
    limits = limits or QueueLimits(None, None, None)
    rate = None if limits.rate_count is None else f"{limits.rate_count}/{limits.rate_period:g}s"
    return QueueLimitsView(queue, limits.concurrency, rate, describe(limits))


def stored_limits(app: Errands) -> dict[str, QueueLimitsView]:
    """Every queue's stored limits (one small read)."""
    return {name: view(name, limits) for name, limits in app.store.features.queue_limits().items()}


def set_queue_limits(app: Errands, actor: str, queue: str, limits: QueueLimits) -> QueueLimitsView:
    """Store ``queue``'s limits (replacing what it had; none at all removes them), audited."""
    try:
        check_queue_name(queue)
    except InvalidQueueName as exc:
        raise InvalidOption(str(exc)) from None
    app.store.features.set_queue_limits(queue, limits)
    app.store.accounts.audit(actor, "limits", f"queue {queue}", describe(limits))
    return view(queue, limits)


__all__ = ["describe", "parse_limits", "set_queue_limits", "stored_limits", "view"]
