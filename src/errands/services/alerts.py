"""The alert thresholds as an operator sees them: the alerts crossed now (the dashboard's banners and
``GET /api/alerts``) and an evaluation on demand (``errands alerts --evaluate``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..core.alerts import Alert
from ..core.rows import AlertState
from ..worker.alerts import HOOK_TIMEOUT, AlertClock, AlertLoop, delivering, evaluate, evaluate_quietly
from .models import AlertList, AlertView

if TYPE_CHECKING:
    from ..app import Errands


def _view(state: AlertState) -> AlertView:
    at = state.changed_at
    text = Alert(state.kind, state.value or 0.0, state.threshold or 0.0, True, at,  # type: ignore[arg-type]
                 state.subject or None).describe()
    return AlertView(state.kind, state.subject or None, state.value, state.threshold,
                     None if at is None else at.isoformat(),
                     None if state.checked_at is None else state.checked_at.isoformat(), text)


def crossed_alerts(app: Errands) -> list[AlertView]:
    """The alerts crossed now, as the last evaluation (by any process of the fleet) left them."""
    return [_view(s) for s in app.store.alerts.crossed()]


def thresholds(app: Errands) -> dict[str, Any]:
    t = app.alert_thresholds
    return {"dead_letter": t.dead_letter, "oldest_ready": t.oldest_ready,
            "oldest_ready_per_queue": dict(t.oldest_ready_per_queue), "no_worker": t.no_worker, "every": t.every}


def alert_list(app: Errands) -> AlertList:
    return AlertList(crossed_alerts(app), thresholds(app))


def evaluate_now(app: Errands) -> list[Alert]:
    """Evaluate at once, whoever evaluated last (changes still go through the conditional
    ``UPDATE``s, so nothing is delivered twice); the changes this call made, delivered to the hooks."""
    return evaluate(app, take_turn=False) or []


def evaluate_in_background(app: Errands) -> threading.Thread:
    """Take this process's turn at evaluating (see :func:`errands.worker.alerts.evaluate`) on a thread
    of its own, so that the request that noticed the turn had come does not wait for it."""
    thread = threading.Thread(target=evaluate_quietly, args=(app,), daemon=True, name="errands-alerts")
    thread.start()
    return thread


__all__ = ["HOOK_TIMEOUT", "AlertClock", "AlertLoop", "alert_list", "crossed_alerts", "delivering",
           "evaluate_in_background", "evaluate_now", "thresholds"]
