"""Alert thresholds (issue 15, point 13): measured, kept crossed in the database, delivered once per
crossing fleet-wide, with hooks that cannot hurt the worker; on every backend."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from helpers import scaled, wait_for

from errands import Alert, Errands
from errands.core.alerts import AlertThresholds
from errands.core.errors import ConfigurationError
from errands.core.settings import AppSettings
from errands.worker import alerts as alerting
from errands.worker.alerts import evaluate
from errands.worker.runner import Worker
from errands.worker.settings import WorkerSettings


def _app(db_url: str, **thresholds: object) -> Errands:
    app = Errands(db_url, lease=5, **thresholds)  # type: ignore[arg-type]

    @app.job(name="boom", max_attempts=1)
    def boom() -> None:
        raise RuntimeError("boom")

    @app.job(name="mail", queue="mails")
    def mail() -> None: ...

    @app.job(name="report", queue="reports")
    def report() -> None: ...

    return app


@pytest.fixture
def alert_app(db_url: str) -> Iterator[Errands]:
    app = _app(db_url, alert_dead_letter=2, alert_no_worker=False)
    app.migrate()
    yield app
    app.store.close()


def _dead(app: Errands, n: int) -> None:
    for _ in range(n):
        app.get_job("boom").enqueue()
    app.run_until_empty(["default"])


class Collector:
    def __init__(self) -> None:
        self.got: list[Alert] = []
        self.lock = threading.Lock()

    def __call__(self, alerts: object) -> None:
        with self.lock:
            self.got.extend(alerts)  # type: ignore[arg-type]


def test_crossing_delivers_once_staying_does_not_repeat_clearing_and_recrossing_deliver_again(
        alert_app: Errands) -> None:
    got = Collector()
    assert evaluate(alert_app, take_turn=False, deliver=got) == []  # empty dead letter: nothing crossed
    _dead(alert_app, 1)
    evaluate(alert_app, take_turn=False, deliver=got)
    assert got.got == []  # 1 < 2
    _dead(alert_app, 1)
    evaluate(alert_app, take_turn=False, deliver=got)
    assert [(a.kind, a.crossed, a.value, a.threshold, a.queue) for a in got.got] == [("dead_letter", True, 2, 2, None)]
    # Staying crossed: nothing more, however often it is evaluated (the banner's value follows).
    _dead(alert_app, 1)
    for _ in range(3):
        evaluate(alert_app, take_turn=False, deliver=got)
    assert len(got.got) == 1
    [state] = alert_app.store.alerts.crossed()
    assert (state.kind, state.value, state.threshold) == ("dead_letter", 3, 2)
    # Clearing delivers once.
    alert_app.forget_failed()
    evaluate(alert_app, take_turn=False, deliver=got)
    evaluate(alert_app, take_turn=False, deliver=got)
    assert [(a.kind, a.crossed, a.value) for a in got.got[1:]] == [("dead_letter", False, 0)]
    assert alert_app.store.alerts.crossed() == []
    # Crossing again delivers again.
    _dead(alert_app, 2)
    evaluate(alert_app, take_turn=False, deliver=got)
    assert [a.crossed for a in got.got] == [True, False, True]
    assert got.got[0].at <= got.got[1].at <= got.got[2].at


def test_two_evaluators_race_and_only_one_delivers(alert_app: Errands, db_url: str) -> None:
    """Two processes' worth of evaluators (each with its own connections) evaluate at the same moment,
    round after round: each crossing and each clearing is delivered by exactly one of them."""
    others = [_app(db_url, alert_dead_letter=2) for _ in range(2)]
    got = Collector()
    try:
        for round_ in range(4):
            if round_ % 2 == 0:
                _dead(alert_app, 2)
            else:
                alert_app.forget_failed()
            barrier = threading.Barrier(len(others))
            errors: list[BaseException] = []

            def race(app: Errands, barrier: threading.Barrier = barrier, errors: list[BaseException] = errors) -> None:
                try:
                    barrier.wait(scaled(10))
                    evaluate(app, take_turn=False, deliver=got)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            threads = [threading.Thread(target=race, args=(a,)) for a in others]
            for t in threads:
                t.start()
            for t in threads:
                t.join(scaled(30))
            assert not errors, errors
            assert [a.crossed for a in got.got] == [True, False, True, False][:round_ + 1], got.got
    finally:
        for a in others:
            a.store.close()


def test_only_one_process_takes_each_turn(alert_app: Errands, db_url: str) -> None:
    others = [_app(db_url, alert_dead_letter=2) for _ in range(3)]
    try:
        barrier = threading.Barrier(len(others))
        won: list[bool] = []

        def take(app: Errands) -> None:
            barrier.wait(scaled(10))
            won.append(app.store.alerts.take_turn(60))

        threads = [threading.Thread(target=take, args=(a,)) for a in others]
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(30))
        assert sorted(won) == [False, False, True]
        assert alert_app.store.alerts.take_turn(60) is False  # the turn is taken for the next 54 s
        assert evaluate(alert_app) is None  # not this process's turn: nothing measured, nothing delivered
        # A turn that is due again: 90 % of alert_every after the last one.
        assert alert_app.store.alerts.take_turn(0.001) is True
    finally:
        for a in others:
            a.store.close()


def test_oldest_ready_per_queue_and_overall(db_url: str) -> None:
    app = _app(db_url, alert_oldest_ready=600, alert_oldest_ready_per_queue={"mails": 60, "reports": 60})
    app.migrate()
    try:
        got = Collector()
        now = app.store.now()
        app.get_job("mail").using(run_at=now - timedelta(seconds=120)).enqueue()
        app.get_job("report").using(run_at=now + timedelta(hours=1)).enqueue()  # delayed: not ready, not late
        evaluate(app, take_turn=False, deliver=got)
        assert [(a.kind, a.queue, a.crossed, a.threshold) for a in got.got] == [("oldest_ready", "mails", True, 60)]
        assert got.got[0].value >= 119
        assert "in queue mails" in got.got[0].describe()
        # Ten minutes late in some queue: the overall alert names the worst queue.
        app.get_job("report").using(run_at=now - timedelta(seconds=900)).enqueue()
        evaluate(app, take_turn=False, deliver=got)
        crossed = {(a.queue, a.worst_queue) for a in got.got[1:] if a.crossed}
        assert crossed == {(None, "reports"), ("reports", None)}
        # A paused queue waits on purpose: it counts for no alert.
        app.pause_queue("reports")
        evaluate(app, take_turn=False, deliver=got)
        assert {(a.queue, a.crossed) for a in got.got[3:]} == {(None, False), ("reports", False)}
        # Draining the queues clears the per-queue alerts.
        app.run_until_empty(["mails"])
        evaluate(app, take_turn=False, deliver=got)
        assert [(a.queue, a.crossed) for a in got.got[5:]] == [("mails", False)]
    finally:
        app.store.close()


def test_no_worker_alive(db_url: str) -> None:
    app = _app(db_url, alert_no_worker=True)
    app.migrate()
    try:
        got = Collector()
        evaluate(app, take_turn=False, deliver=got)
        assert [(a.kind, a.crossed, a.value) for a in got.got] == [("no_worker", True, 0)]
        app.store.workers.register("w1", "host", 1, ["default"], 1)
        evaluate(app, take_turn=False, deliver=got)
        assert [(a.kind, a.crossed, a.value) for a in got.got[1:]] == [("no_worker", False, 1)]
    finally:
        app.store.close()


def test_a_threshold_no_evaluator_configures_any_more_clears_only_once_forgotten(alert_app: Errands,
                                                                                  db_url: str) -> None:
    _dead(alert_app, 2)
    evaluate(alert_app, take_turn=False, deliver=Collector())
    other = _app(db_url, alert_no_worker=True)  # configured otherwise: it must not flap the dead-letter alert
    try:
        got = Collector()
        evaluate(other, take_turn=False, deliver=got)
        assert [(a.kind, a.crossed) for a in got.got] == [("no_worker", True)]
        assert {s.kind for s in alert_app.store.alerts.crossed()} == {"dead_letter", "no_worker"}
        # Nobody refreshed it for ORPHAN_ROUNDS rounds: the threshold was removed, so it clears.
        alert_app.store.db.run(lambda cur: cur.execute(alert_app.store.dialect.q(
            "UPDATE {alerts} SET checked_at = {now_plus} WHERE kind = 'dead_letter'"), (-3600.0,)), write=True)
        evaluate(other, take_turn=False, deliver=got)
        assert [(a.kind, a.crossed) for a in got.got[1:]] == [("dead_letter", False)]
    finally:
        other.store.close()


def test_hooks_that_raise_or_hang_cost_the_evaluator_nothing(alert_app: Errands,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    seen: list[Alert] = []

    @alert_app.on_alert
    def hangs(alert: Alert) -> None:
        release.wait(scaled(30))

    @alert_app.on_alert
    def raises(alert: Alert) -> None:
        raise RuntimeError("the pager is down")

    @alert_app.on_alert
    def records(alert: Alert) -> None:
        seen.append(alert)

    _dead(alert_app, 2)
    try:
        with caplog.at_level(logging.ERROR, logger="errands.alerts"):
            started = time.monotonic()
            changes = evaluate(alert_app, take_turn=False)
            assert time.monotonic() - started < scaled(5)  # the hung hook is not waited for
            assert changes and changes[0].crossed
            assert seen == []  # the hooks run in order, on their own thread: the first one still hangs
            release.set()
            wait_for(lambda: len(seen) == 1, message="the third hook, after the hung and the failing ones")
            assert seen[0].kind == "dead_letter"
            wait_for(lambda: "the pager is down" in caplog.text, message="the failing hook's log line")
    finally:
        release.set()


def test_hung_deliveries_are_bounded(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    monkeypatch.setattr(alerting, "MAX_HOOK_THREADS", 2)
    monkeypatch.setattr(alerting, "HOOK_TIMEOUT", 0.0)
    alert = Alert("no_worker", 0, 1, True, None)  # type: ignore[arg-type]
    try:
        first = [alerting.deliver_alerts([lambda a: release.wait(scaled(30))], [alert]) for _ in range(2)]
        assert all(t is not None for t in first)
        with caplog.at_level(logging.ERROR, logger="errands.alerts"):
            assert alerting.deliver_alerts([lambda a: None], [alert]) is None
        assert "dropped 1 alert(s)" in caplog.text and "has been running for" in caplog.text
    finally:
        release.set()
        for t in first:
            assert t is not None
            t.join(scaled(10))


def test_the_workers_heartbeat_evaluates_and_the_hook_hears_it(db_url: str) -> None:
    app = _app(db_url, alert_dead_letter=1, alert_every=1)
    app.migrate()
    heard: list[Alert] = []
    app.on_alert(heard.append)
    _dead(app, 1)
    worker = Worker(app, WorkerSettings(queues=("default",), concurrency=1, sleep=0.05, listen=False))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: heard, timeout=20, message="the worker's heartbeat to deliver the dead-letter alert")
        assert [(a.kind, a.crossed) for a in heard] == [("dead_letter", True)]
    finally:
        worker.request_stop()
        thread.join(scaled(30))
        app.store.close()


# ---------------------------------------------------------------------------------- settings
def test_thresholds_come_from_settings_like_every_other_setting() -> None:
    env = {"ERRANDS_ALERT_DEAD_LETTER": "50", "ERRANDS_ALERT_OLDEST_READY_PER_QUEUE": "mails=60, reports=600",
           "ERRANDS_ALERT_NO_WORKER": "yes", "ERRANDS_ALERT_EVERY": "15"}
    settings = AppSettings.load(None, environ=env, pyproject=False)
    assert (settings.alert_dead_letter, settings.alert_oldest_ready_per_queue, settings.alert_no_worker,
            settings.alert_every, settings.alert_oldest_ready) == (50, {"mails": 60.0, "reports": 600.0}, True,
                                                                   15.0, None)

    class DjangoSettings:
        ERRANDS_ALERT_OLDEST_READY = 300
        ERRANDS_ALERT_DEAD_LETTER = None

    settings = AppSettings.load(DjangoSettings(), environ=env, pyproject=False)
    assert settings.alert_oldest_ready == 300.0 and settings.alert_dead_letter is None
    app = Errands("sqlite:///:memory:", **settings.as_kwargs())
    assert app.alert_thresholds == AlertThresholds(None, 300.0, {"mails": 60.0, "reports": 600.0}, True, 15.0)
    assert Errands("sqlite:///:memory:").alert_thresholds.any is False  # every alert is off by default


@pytest.mark.parametrize("kwargs", [{"alert_dead_letter": 0}, {"alert_oldest_ready": -1},
                                    {"alert_oldest_ready_per_queue": {"bad queue!": 5}},
                                    {"alert_oldest_ready_per_queue": {"mails": float("nan")}},
                                    {"alert_every": 0.5}])
def test_bad_thresholds_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Errands("sqlite:///:memory:", **kwargs)  # type: ignore[arg-type]


def test_bad_threshold_text_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="ERRANDS_ALERT_OLDEST_READY_PER_QUEUE"):
        AppSettings.load(None, environ={"ERRANDS_ALERT_OLDEST_READY_PER_QUEUE": "mails"}, pyproject=False)
