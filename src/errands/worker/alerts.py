"""Evaluating the alert thresholds, and handing each crossing to the app's ``on_alert`` hooks, once.

Who evaluates: every worker's heartbeat thread (at most every ``alert_every`` seconds) and every
dashboard process (a thread of ``errands dashboard``; a mounted dashboard while it serves
requests), since a fleet whose every worker died has only its dashboards left to say so.  They
take turns through the database (:meth:`AlertStore.take_turn`): one evaluation per ``alert_every``
seconds for the whole fleet, however many processes try.

Once per crossing: the state lives in the alerts table, and only the process whose conditional
``UPDATE`` changed a row delivers that change; staying crossed changes nothing, clearing and
crossing again deliver again.  A process that dies between its ``UPDATE`` and its hooks loses that
delivery (the banner still shows): at most once, never twice.

A hook never costs the worker anything: hooks run on a thread of their own, their exceptions are
logged, a hook still running after :data:`HOOK_TIMEOUT` seconds is reported in the log, and at most
:data:`MAX_HOOK_THREADS` hung deliveries are waited for before further ones are dropped (logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from ..core.alerts import DEAD_LETTER, NO_WORKER, OLDEST_READY, Alert, AlertThresholds
from ..core.errors import StoreError
from .liveness import alive_within
from .state import jitter

if TYPE_CHECKING:
    from ..core.hooks import Hooks
    from .ports import StorePort

log = logging.getLogger("errands.alerts")

HOOK_TIMEOUT = 10.0
"""Seconds after which a hook still running is reported as hung (it is never killed: Python cannot)."""
MAX_HOOK_THREADS = 4
"""Deliveries whose hooks may run at once in one process; past that, new ones are dropped and logged."""
DEAD_LETTER_COUNT_CAP = 10_000
"""The dead letter is counted up to this (or the threshold, if higher), plus one: bounded work."""
ORPHAN_ROUNDS = 10
"""A crossed alert that no evaluator configures any more clears after this many rounds unrefreshed."""
ALL_QUEUES = ""
"""The subject of an alert about every queue (and of ``dead_letter`` and ``no_worker``)."""


class AlertHost(Protocol):
    """What evaluating needs of the app (``Errands`` is one)."""

    @property
    def store(self) -> StorePort: ...

    @property
    def lease(self) -> float: ...

    @property
    def alert_thresholds(self) -> AlertThresholds: ...

    @property
    def hooks(self) -> Hooks: ...


class Measured:
    """One evaluation's measurements: (kind, subject) -> (value, threshold, crossed, worst queue)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[float, float, bool, str | None]] = {}

    def add(self, kind: str, subject: str, value: float, threshold: float, crossed: bool,
            worst: str | None = None) -> None:
        self.rows[(kind, subject)] = (value, threshold, crossed, worst)


def measure(app: AlertHost) -> tuple[datetime, Measured]:
    """Read what each configured threshold is compared with (bounded reads, see :class:`AlertStore`)."""
    t, store = app.alert_thresholds, app.store
    out = Measured()
    queues = sorted(t.oldest_ready_per_queue)
    now, due = store.alerts.oldest_ready(None if t.oldest_ready else queues) \
        if (t.oldest_ready or queues) else (store.now(), {})
    if t.oldest_ready is not None:
        ages = {q: max(0.0, (now - at).total_seconds()) for q, at in due.items()}
        worst = max(ages, key=lambda q: ages[q]) if ages else None
        value = ages[worst] if worst is not None else 0.0
        out.add(OLDEST_READY, ALL_QUEUES, value, t.oldest_ready, value >= t.oldest_ready, worst)
    for queue in queues:
        threshold = t.oldest_ready_per_queue[queue]
        value = max(0.0, (now - due[queue]).total_seconds()) if queue in due else 0.0
        out.add(OLDEST_READY, queue, value, threshold, value >= threshold)
    if t.dead_letter is not None:
        count = store.alerts.dead_letter_count(max(t.dead_letter, DEAD_LETTER_COUNT_CAP))
        out.add(DEAD_LETTER, ALL_QUEUES, count, t.dead_letter, count >= t.dead_letter)
    if t.no_worker:
        alive = sum(1 for age, lease in store.alerts.heartbeat_ages() if age <= alive_within(lease, app.lease))
        out.add(NO_WORKER, ALL_QUEUES, alive, 1, alive == 0)
    return now, out


def evaluate(app: AlertHost, *, take_turn: bool = True, deliver: Callable[[Sequence[Alert]], None] | None = None
             ) -> list[Alert] | None:
    """One evaluation, if it is this process's turn (``take_turn=False``: now, whoever else does);
    returns the changes this process made and delivered (None: not its turn).

    Every alert the app configures is compared with its threshold; a crossed alert that no evaluator
    has refreshed for :data:`ORPHAN_ROUNDS` rounds (its threshold was removed) clears.  Each change
    goes through a conditional ``UPDATE``, and only the changes this process made are handed to the
    hooks (``deliver``, default :func:`deliver_alerts` on the app's hooks)."""
    store = app.store
    if take_turn and not store.alerts.take_turn(app.alert_thresholds.every):
        return None
    now, measured = measure(app)
    states = {(s.kind, s.subject): s for s in store.alerts.states()}
    changes: list[Alert] = []
    refresh: list[tuple[str, str, float, float]] = []
    for (kind, subject), (value, threshold, crossed, worst) in measured.rows.items():
        state = states.get((kind, subject))
        was = state is not None and state.crossed
        queue = subject or None
        if crossed and not was:
            if store.alerts.cross(kind, subject, value, threshold, now):
                changes.append(Alert(kind, value, threshold, True, now, queue, worst))
        elif crossed:
            refresh.append((kind, subject, value, threshold))
        elif was and store.alerts.clear(kind, subject, value, now):
            changes.append(Alert(kind, value, threshold, False, now, queue, worst))
    forgotten = now - timedelta(seconds=ORPHAN_ROUNDS * app.alert_thresholds.every)
    for (kind, subject), state in states.items():
        # Crossed, yet this app does not configure it: another process of the fleet may (configured
        # otherwise: a mistake, but not one to flap over), so it is cleared only once nobody has
        # refreshed it for ORPHAN_ROUNDS rounds (the threshold was removed, the queue renamed).
        if (state.crossed and (kind, subject) not in measured.rows
                and (state.checked_at is None or state.checked_at < forgotten)
                and store.alerts.clear(kind, subject, None, now)):
            changes.append(Alert(kind, state.value or 0.0, state.threshold or 0.0, False, now, subject or None))
    store.alerts.still_crossed(refresh, now)
    for change in changes:
        (log.warning if change.crossed else log.info)("alert: %s", change.describe())
    if changes:
        (deliver or (lambda alerts: deliver_alerts(app.hooks.alert, alerts)))(changes)
    return changes


# ---------------------------------------------------------------------------------- delivery
_in_flight: dict[threading.Thread, float] = {}
_in_flight_lock = threading.Lock()


def deliver_alerts(hooks: Sequence[Callable[..., Any]], alerts: Sequence[Alert]) -> threading.Thread | None:
    """Call every hook with every alert, in order, on a thread of its own (returned; None when
    there is nothing to call or too many deliveries hang already)."""
    if not hooks or not alerts:
        return None
    with _in_flight_lock:
        now = time.monotonic()
        for thread, started in list(_in_flight.items()):
            if not thread.is_alive():
                del _in_flight[thread]
            elif now - started > HOOK_TIMEOUT:
                log.error("an on_alert hook has been running for %.0f s (%s): it is left to finish on its own",
                          now - started, thread.name)
        if len(_in_flight) >= MAX_HOOK_THREADS:
            log.error("dropped %d alert(s) for the on_alert hooks: %d deliveries are still running (hung hooks?): %s",
                      len(alerts), len(_in_flight), "; ".join(a.describe() for a in alerts))
            return None
        thread = threading.Thread(target=_call_hooks, args=(list(hooks), list(alerts)), daemon=True,
                                  name=f"errands-alert-hooks-{alerts[0].kind}")
        _in_flight[thread] = now
    thread.start()
    return thread


def delivering() -> list[threading.Thread]:
    """The deliveries of this process whose hooks still run (``errands alerts`` waits for them)."""
    with _in_flight_lock:
        return [t for t in _in_flight if t.is_alive()]


def _call_hooks(hooks: list[Callable[..., Any]], alerts: list[Alert]) -> None:
    for alert in alerts:
        for fn in hooks:
            started = time.monotonic()
            try:
                fn(alert)
            except Exception:  # reported, never fatal
                log.exception("on_alert hook %r failed on %s", fn, alert.describe())
            took = time.monotonic() - started
            if took > HOOK_TIMEOUT:
                log.warning("on_alert hook %r took %.1f s (over %.0f s)", fn, took, HOOK_TIMEOUT)


# ---------------------------------------------------------------------------------- who evaluates
class AlertClock:
    """When this process next tries to take its turn (jittered, so a fleet does not try in step)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.next = time.monotonic() + jitter.uniform(0, min(every, 5.0))

    def due(self) -> bool:
        if time.monotonic() < self.next:
            return False
        self.next = time.monotonic() + self.every * jitter.uniform(0.9, 1.0)
        return True


def evaluate_quietly(app: AlertHost) -> None:
    """:func:`evaluate`, with any failure logged and swallowed (the callers are heartbeats and pages)."""
    try:
        evaluate(app)
    except StoreError as exc:
        log.warning("alert evaluation failed: %s", exc)
    except Exception:
        log.exception("alert evaluation failed")


class AlertLoop(threading.Thread):
    """A thread that takes its turn every ``alert_every`` seconds until stopped (``errands dashboard``)."""

    def __init__(self, app: AlertHost) -> None:
        super().__init__(daemon=True, name="errands-alerts")
        self.app = app
        self.stopping = threading.Event()

    def run(self) -> None:
        clock = AlertClock(self.app.alert_thresholds.every)
        try:
            while not self.stopping.wait(max(0.0, clock.next - time.monotonic())):
                if clock.due():
                    evaluate_quietly(self.app)
        finally:
            self.app.store.release_thread_connection()

    def stop(self) -> None:
        self.stopping.set()
