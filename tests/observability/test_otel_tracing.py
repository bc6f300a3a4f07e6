"""OpenTelemetry: a producer span per enqueue, a consumer span per run, one trace across the database."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import scaled
from obs_helpers import THREE, Spans, drain
from opentelemetry.trace import SpanKind, StatusCode

from errands import ConfigurationError, Errands, PayloadNotSerializable, StoreUnavailable, current_job
from errands.contrib.opentelemetry import instrument
from errands.core.hooks import job_headers
from errands.core.jobs import encode_payload

HERE = Path(__file__).parent
SRC = HERE.parent.parent / "src"


def _one(items):  # type: ignore[no-untyped-def]
    assert len(items) == 1, items
    return items[0]


def _assert_child_of(consumer, producer) -> None:  # type: ignore[no-untyped-def]
    """Same trace, parented by the producer span, and linked to it."""
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_a_run_is_a_child_of_its_enqueue(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)
    seen = []

    @app.job(name="mail.send", queue="mails")
    def send(to: str, subject: str = "hi") -> None:
        seen.append(((to,), {"subject": subject}, job_headers()))

    handle = send.enqueue("ada@example.org", subject="welcome")
    assert drain(app) == 1

    producer = _one(spans.producers)
    assert producer.name == "send mails"
    assert dict(producer.attributes) == {
        "messaging.system": "errands", "messaging.operation.type": "send", "messaging.operation.name": "enqueue",
        "messaging.destination.name": "mails", "errands.job.name": "mail.send",
        "messaging.message.id": str(handle.id)}
    consumer = _one(spans.consumers)
    assert consumer.name == "process mails"
    attributes = dict(consumer.attributes)
    assert attributes.pop("messaging.client.id").count(":") == 2  # the worker's id, host:pid:random
    assert attributes == {
        "messaging.system": "errands", "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": "mails", "messaging.message.id": str(handle.id),
        "errands.job.name": "mail.send", "errands.job.attempt": 1, "errands.job.max_attempts": 3,
        "errands.job.outcome": "succeeded"}
    assert consumer.status.status_code is StatusCode.UNSET
    _assert_child_of(consumer, producer)
    # The handler got its arguments and nothing else; the trace context is readable beside them.
    [(args, kwargs, headers)] = seen
    assert args == ("ada@example.org",) and kwargs == {"subject": "welcome"}
    assert headers["traceparent"].split("-")[2] == format(producer.context.span_id, "016x")


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_a_failing_run_records_the_exception_on_every_attempt(app: Errands, spans: Spans,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    instrument(app, tracer_provider=spans.provider)
    caplog.set_level(logging.WARNING, logger="errands.worker")

    @app.job(name="flaky", max_attempts=2, backoff=0)
    def flaky(n: int) -> None:
        raise ValueError(f"bad input {n}")

    flaky.enqueue(7)
    drain(app)
    producer = _one(spans.producers)
    runs = sorted(spans.consumers, key=lambda s: s.attributes["errands.job.attempt"])
    assert [s.attributes["errands.job.attempt"] for s in runs] == [1, 2]
    for run in runs:
        _assert_child_of(run, producer)
        assert run.status.status_code is StatusCode.ERROR
        assert run.status.description == "ValueError: bad input 7"
        assert run.attributes["errands.job.outcome"] == "failed"
        [event] = run.events
        assert event.name == "exception" and event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == "bad input 7"
    assert app.store.jobs.get_failed(int(runs[0].attributes["messaging.message.id"])) is not None
    failed_lines = [r.getMessage() for r in caplog.records if "failed after" in r.getMessage()]
    assert len(failed_lines) == 2 and all('flaky({"args":[7],"kwargs":{}})' in m for m in failed_lines)


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_many_batch_and_chain_each_make_one_producer_span(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)
    ran = []

    @app.job(name="step")
    def step(n: int) -> None:
        ran.append(n)

    @app.job(name="other", queue="elsewhere")
    def other(n: int) -> None:
        ran.append(-n)

    many = app.enqueue_many([step.prepare(1), step.prepare(2), other.prepare(3)])
    batch = app.batch([step.prepare(4), step.prepare(5)], on_complete=step.prepare(6))
    chain = app.chain(step.prepare(7), step.prepare(8))
    while drain(app):
        pass
    assert sorted(ran) == [-3, 1, 2, 4, 5, 6, 7, 8]

    by_kind = {p.attributes["messaging.operation.name"]: p for p in spans.producers}
    assert sorted(by_kind) == ["batch", "chain", "enqueue_many"]
    mixed = by_kind["enqueue_many"]
    assert mixed.name == "send" and "messaging.destination.name" not in mixed.attributes
    assert list(mixed.attributes["errands.queues"]) == ["default", "elsewhere"]
    assert mixed.attributes["messaging.batch.message_count"] == 3
    assert list(mixed.attributes["errands.job.ids"]) == [h.id for h in many]
    assert by_kind["batch"].attributes["errands.batch.id"] == batch.id
    assert by_kind["batch"].attributes["messaging.destination.name"] == "default"
    assert list(by_kind["chain"].attributes["errands.job.ids"]) == [h.id for h in chain.jobs]

    producer_of = {int(i): p for p in spans.producers for i in p.attributes["errands.job.ids"]}
    runs = spans.consumers
    assert len(runs) == 8
    for run in runs:
        job_id = int(run.attributes["messaging.message.id"])
        if job_id in producer_of:
            _assert_child_of(run, producer_of[job_id])
        else:  # the batch's callback, enqueued by the worker that finished the batch: the batch's trace
            _assert_child_of(run, by_kind["batch"])


def test_a_refused_enqueue_is_an_error_span(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)

    @app.job(name="takes_anything")
    def takes_anything(value: object) -> None: ...

    with pytest.raises(PayloadNotSerializable):
        takes_anything.enqueue(object())
    producer = _one(spans.producers)
    assert producer.status.status_code is StatusCode.ERROR
    assert producer.events[0].attributes["exception.type"] == "errands.core.errors.PayloadNotSerializable"
    assert "messaging.message.id" not in producer.attributes

    down = Errands("postgresql://errands@127.0.0.1:1/nothing_listens_here")
    instrument(down, tracer_provider=spans.provider)
    down.job(name="takes_anything")(lambda value: None)
    with pytest.raises(StoreUnavailable):
        down.enqueue("takes_anything", [1])
    failed = spans.producers[-1]
    assert failed.status.status_code is StatusCode.ERROR and "StoreUnavailable" in failed.status.description


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_without_instrumentation_nothing_changes(app: Errands, db_url: str, spans: Spans) -> None:
    """An app that is not instrumented stores the payload it always did, byte for byte; its jobs run
    under an instrumented worker as root spans; an instrumented enqueue runs fine on a plain worker."""
    plain = app
    traced = Errands(db_url)
    instrument(traced, tracer_provider=spans.provider)
    got = []
    for each in (plain, traced):
        each.job(name="echo")(lambda *args, **kwargs: got.append((args, kwargs)))

    untraced = plain.enqueue("echo", ["x", 1], {"k": [1, 2]})
    assert plain.store.jobs.get_job(untraced.id).payload == encode_payload("echo", ["x", 1], {"k": [1, 2]}, 1 << 20) \
        == '{"args":["x",1],"kwargs":{"k":[1,2]}}'
    assert spans.all() == []
    drain(traced)
    root = _one(spans.consumers)
    assert root.parent is None and not root.links and got == [(("x", 1), {"k": [1, 2]})]

    stamped = traced.enqueue("echo", ["y"])
    payload = json.loads(traced.store.jobs.get_job(stamped.id).payload)
    assert sorted(payload) == ["args", "headers", "kwargs"] and set(payload["headers"]) == {"traceparent"}
    drain(plain)
    assert got[-1] == (("y",), {})
    traced.store.close()


def test_a_unique_job_keeps_its_key_when_traced(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)

    @app.job(name="only_once", unique=True)
    def only_once(n: int) -> None: ...

    first, second = only_once.enqueue(1), only_once.enqueue(1)
    assert first.id == second.id  # the key comes from the arguments, not from the headers


def test_async_jobs_nest_the_handlers_spans(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)
    tracer = spans.provider.get_tracer("handler")

    @app.job(name="fetch")
    async def fetch(url: str) -> None:
        with tracer.start_as_current_span("inner"):
            await asyncio.sleep(0)

    asyncio.run(fetch.aenqueue("https://example.org"))
    drain(app)
    producer = _one(spans.producers)
    consumer = _one(spans.consumers)
    inner = _one([s for s in spans.all() if s.name == "inner"])
    _assert_child_of(consumer, producer)
    assert inner.parent is not None and inner.parent.span_id == consumer.context.span_id


def test_eager_mode_runs_under_the_callers_span(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)
    tracer = spans.provider.get_tracer("test")

    @app.job(name="inline")
    def inline() -> int:
        return current_job().attempt

    with app.eager(), tracer.start_as_current_span("request") as request:
        inline.enqueue()
    assert spans.producers == []  # nothing was stored
    consumer = _one(spans.consumers)
    assert consumer.parent is not None and consumer.parent.span_id == request.get_span_context().span_id


def test_instrumenting_twice_is_refused(app: Errands, spans: Spans) -> None:
    instrument(app, tracer_provider=spans.provider)
    with pytest.raises(ConfigurationError, match="already instrumented"):
        instrument(app, tracer_provider=spans.provider)


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_the_trace_crosses_into_a_worker_process(app: Errands, db_url: str, spans: Spans, tmp_path: Path) -> None:
    """Enqueued here, run by `errands worker` in another process that exports its spans to a file."""
    instrument(app, tracer_provider=spans.provider)
    app.job(name="traced.work", queue="reports")(lambda n, label="": n)
    app.job(name="traced.fail", queue="reports", max_attempts=2)(lambda n: None)
    ok = app.enqueue("traced.work", [1], {"label": "x"})
    bad = app.enqueue("traced.fail", [2])
    out = tmp_path / "spans.jsonl"
    env = {"ERRANDS_DATABASE_URL": db_url, "ERRANDS_APP": "traced_jobs:app", "ERRANDS_TEST_SPANS": str(out),
           "PYTHONPATH": f"{HERE / 'apps'}:{SRC}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "errands", "worker", "--burst", "-q", "reports"], env=env,
                          capture_output=True, text=True, timeout=scaled(120))
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in out.read_text().splitlines()]
    by_job: dict[int, list[dict]] = {}  # type: ignore[type-arg]
    for span in exported:
        assert span["kind"] == str(SpanKind.CONSUMER)
        by_job.setdefault(int(span["attributes"]["messaging.message.id"]), []).append(span)
    producers = {int(p.attributes["messaging.message.id"]): p for p in spans.producers}
    assert sorted(by_job) == sorted(producers) == sorted([ok.id, bad.id])
    assert len(by_job[bad.id]) == 2  # two attempts, both in the enqueue's trace
    for job_id, runs in by_job.items():
        for run in runs:
            assert int(run["context"]["trace_id"], 16) == producers[job_id].context.trace_id
            assert int(run["parent_id"], 16) == producers[job_id].context.span_id
    assert {r["status"]["status_code"] for r in by_job[bad.id]} == {"ERROR"}
    assert by_job[ok.id][0]["attributes"]["errands.job.outcome"] == "succeeded"


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_a_large_enqueue_carries_the_context_in_every_row(app: Errands, spans: Spans) -> None:
    """250 jobs take PostgreSQL's COPY path and MySQL's multi-row INSERT: each row still carries it."""
    instrument(app, tracer_provider=spans.provider)
    total = []

    @app.job(name="add")
    def add(n: int) -> None:
        total.append(n)

    handles = app.enqueue_many(add.prepare(n) for n in range(250))
    producer = _one(spans.producers)
    assert producer.attributes["messaging.batch.message_count"] == 250
    assert "errands.job.ids" not in producer.attributes  # too many to list
    payloads = [json.loads(app.store.jobs.get_job(h.id).payload) for h in (handles[0], handles[199], handles[-1])]
    assert {p["headers"]["traceparent"] for p in payloads} == {job_headers_of(producer)}
    drain(app)
    assert sorted(total) == list(range(250))
    assert len(spans.consumers) == 250
    for run in spans.consumers:
        _assert_child_of(run, producer)


def job_headers_of(producer) -> str:  # type: ignore[no-untyped-def]
    ctx = producer.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
