"""Error reporting through hooks: every failed attempt, each retry, each dead job once, failed enqueues."""

from __future__ import annotations

from typing import Any

import pytest
from obs_helpers import THREE, drain

from errands import ConfigurationError, Discard, Errands, InvalidOption, PayloadNotSerializable
from errands.core.hooks import Enqueue, job_headers


class Reporter:
    """Collects what a Sentry-like client would be sent."""

    def __init__(self) -> None:
        self.exceptions: list[tuple[BaseException, dict[str, Any]]] = []
        self.retries: list[tuple[int, str, float]] = []
        self.dead: list[tuple[int, str, str, str]] = []
        self.enqueue_errors: list[tuple[BaseException, Enqueue]] = []

    def install(self, app: Errands) -> None:
        @app.after_job
        def every_failed_attempt(ctx: Any, error: BaseException | None) -> None:
            if error is not None:
                self.exceptions.append((error, {"id": ctx.id, "name": ctx.name, "queue": ctx.queue,
                                                "attempt": ctx.attempt, "last": ctx.is_last_attempt}))

        @app.on_retry
        def retried(ctx: Any, error_type: str, error_message: str, delay: float) -> None:
            self.retries.append((ctx.id, error_type, delay))

        @app.on_dead
        def final_failure(ctx: Any, error_type: str, error_message: str) -> None:
            self.dead.append((ctx.id, ctx.name, error_type, error_message))

        @app.around_enqueue
        def failed_enqueues(call: Enqueue) -> Any:
            try:
                yield
            except Exception as exc:
                self.enqueue_errors.append((exc, call))
                raise


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_a_reporter_sees_each_failed_attempt_each_retry_and_each_dead_job_once(app: Errands) -> None:
    reporter = Reporter()
    reporter.install(app)
    attempts: dict[int, int] = {}

    @app.job(name="flaky", max_attempts=3, backoff=0)
    def flaky(key: int) -> str:
        attempts[key] = attempts.get(key, 0) + 1
        if attempts[key] < 2:
            raise ConnectionError("timed out")
        return "ok"

    @app.job(name="doomed", max_attempts=2, backoff=0, queue="q2")
    def doomed() -> None:
        raise ValueError("no such customer")

    @app.job(name="hopeless", max_attempts=5)
    def hopeless() -> None:
        raise Discard("bad phone number")

    fine = flaky.enqueue(1)
    dead = doomed.enqueue()
    discarded = hopeless.enqueue()
    drain(app)

    seen = [(type(e).__name__, c["id"], c["name"], c["attempt"], c["last"]) for e, c in reporter.exceptions]
    assert sorted(seen) == sorted([
        ("ConnectionError", fine.id, "flaky", 1, False),
        ("ValueError", dead.id, "doomed", 1, False), ("ValueError", dead.id, "doomed", 2, True),
        ("Discard", discarded.id, "hopeless", 1, False)])
    assert all(e.__traceback__ is not None for e, _ in reporter.exceptions)  # what capture_exception needs
    assert sorted(reporter.retries) == sorted([(fine.id, "ConnectionError", 0.0), (dead.id, "ValueError", 0.0)])
    assert sorted(reporter.dead) == sorted([(dead.id, "doomed", "ValueError", "no such customer"),
                                           (discarded.id, "hopeless", "errands.Discard", "bad phone number")])
    assert reporter.enqueue_errors == []


def test_a_reporter_sees_enqueues_that_fail(app: Errands) -> None:
    reporter = Reporter()
    reporter.install(app)

    @app.job(name="takes")
    def takes(value: object) -> None: ...

    with pytest.raises(PayloadNotSerializable):
        takes.enqueue({1, 2})
    with pytest.raises(PayloadNotSerializable):
        takes.using(queue="x").enqueue(object())
    [(first, call), (second, other)] = reporter.enqueue_errors
    assert isinstance(first, PayloadNotSerializable) and call.kind == "enqueue" and call.name == "takes"
    assert call.queue == "default" and call.ids == [] and other.queue == "x"
    assert _stored(app) == 0


def test_enqueue_hooks_see_the_call_and_may_attach_headers(app: Errands) -> None:
    calls: list[Enqueue] = []

    @app.around_enqueue
    def tag(call: Enqueue) -> Any:
        call.headers["tenant"] = "acme"
        yield
        calls.append(call)

    seen = []

    @app.job(name="work")
    def work(n: int) -> None:
        seen.append((n, job_headers()))

    one = work.enqueue(1)
    many = app.enqueue_many([work.prepare(2), work.prepare(3)])
    assert [(c.kind, c.name, c.queue, c.ids) for c in calls] == [
        ("enqueue", "work", "default", [one.id]), ("enqueue_many", "work", "default", [h.id for h in many])]
    assert len(calls[1].jobs) == 2 and calls[1].queues == ["default"]
    drain(app)
    assert sorted(seen) == [(1, {"tenant": "acme"}), (2, {"tenant": "acme"}), (3, {"tenant": "acme"})]
    assert job_headers() == {}  # outside a run


def test_enqueue_hooks_are_refused_on_a_job_and_bad_headers_are_refused(app: Errands) -> None:
    @app.job(name="work")
    def work(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="app.around_enqueue"):
        work.hooks.around_enqueue(lambda call: None)

    @app.around_enqueue
    def bad(call: Enqueue) -> Any:
        call.headers["size"] = "x" * 5000
        yield

    with pytest.raises(InvalidOption, match="over the limit"):
        work.enqueue(1)
    assert _stored(app) == 0


def _stored(app: Errands) -> int:
    return sum(sum(c.as_dict().values()) for c in app.counts().values())


def test_hooks_cost_nothing_until_registered() -> None:
    app = Errands("sqlite:///:memory:")
    assert not app.hooks.any and not app.hooks.enqueuing

    @app.around_enqueue
    def noop(call: Enqueue) -> Any:
        yield

    assert app.hooks.enqueuing and not app.hooks.any  # an enqueue hook does not slow runs down
    app.on_retry(lambda *a: None)
    assert app.hooks.any
