"""OpenTelemetry tracing: a PRODUCER span for every enqueue, a CONSUMER span for every run, in one trace.

``instrument(app)`` registers two hooks and nothing else:

* an ``around_enqueue`` hook opens ``send <queue>`` (kind PRODUCER) around ``job.enqueue``,
  ``job.aenqueue``, ``app.enqueue_many``, ``app.batch`` and ``app.chain``, and writes the span's
  W3C trace context (``traceparent``, ``tracestate``) into the enqueue's headers, which errands
  stores inside each job's JSON payload (``"headers"``, next to ``args`` and ``kwargs``);
* an ``around`` hook opens ``process <queue>`` (kind CONSUMER) around each run, as a child of
  that context and with a link to it, so one trace shows the request that enqueued the job and
  every attempt that ran it, whichever host the worker is on.

Attributes follow the OpenTelemetry messaging conventions (``messaging.system`` is ``errands``,
the destination is the queue, the message id is the job id) plus ``errands.*`` ones for what
messaging has no word for (job name, attempt, outcome).  A run that raises records the
exception and sets the span's status to ERROR; a cancelled run records it but keeps the status
unset.  Jobs enqueued by an app that is not instrumented carry no headers and are stored
byte for byte as before; their runs get a span without a parent.

Needs ``opentelemetry-api`` (``pip install errands[otel]``); the SDK and exporters are the
application's choice, as with any instrumentation library.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.extras import MissingExtra

try:
    from opentelemetry import trace
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:
    raise MissingExtra("errands.contrib.opentelemetry", "otel", exc) from exc

from ..__version__ import __version__
from ..core.errors import ConfigurationError, JobCancelled
from ..core.hooks import Enqueue, job_headers

if TYPE_CHECKING:
    from ..app import Errands
    from ..core.context import JobContext

SYSTEM = "errands"
MAX_IDS = 100
"""An enqueue of more jobs records their count, not their ids (span attributes are not free)."""

_instrumented: weakref.WeakSet[Any] = weakref.WeakSet()


def instrument(app: Errands, tracer_provider: trace.TracerProvider | None = None,
               propagator: TextMapPropagator | None = None) -> None:
    """Trace ``app``'s enqueues and runs.

    ``tracer_provider``: default the global one (``trace.set_tracer_provider``).
    ``propagator``: how the context travels with the job; default W3C trace context only,
    so a job carries about 85 bytes more and never a whole baggage.  Call it where the app
    is defined, so both the processes that enqueue and the workers trace.
    """
    if app in _instrumented:
        raise ConfigurationError(f"{app!r} is already instrumented for OpenTelemetry")
    tracer = trace.get_tracer(__name__, __version__, tracer_provider)
    carrier_format = propagator or TraceContextTextMapPropagator()

    def producer(call: Enqueue) -> Iterator[None]:
        name = f"send {call.queue}" if call.queue is not None else "send"
        with tracer.start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=_send_attributes(call)) as span:
            carrier_format.inject(call.headers)  # the current context is this span's
            yield
            if span.is_recording():
                _describe_enqueue(span, call)

    def consumer(ctx: JobContext) -> Iterator[None]:
        parent, links = _enqueued_under(carrier_format)
        with tracer.start_as_current_span(f"process {ctx.queue}", context=parent, kind=SpanKind.CONSUMER,
                                          links=links, attributes=_process_attributes(ctx), record_exception=False,
                                          set_status_on_exception=False) as span:
            try:
                yield
            except JobCancelled as exc:
                span.set_attribute("errands.job.outcome", "cancelled")
                span.record_exception(exc)
                raise
            except BaseException as exc:
                span.set_attribute("errands.job.outcome", "failed")
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:500]))
                raise
            span.set_attribute("errands.job.outcome", "succeeded")

    app.around_enqueue(producer)
    app.around_job(consumer)
    _instrumented.add(app)


def _send_attributes(call: Enqueue) -> dict[str, Any]:
    attributes: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                                  "messaging.operation.name": call.kind}
    if call.queue is not None:
        attributes["messaging.destination.name"] = call.queue
    if call.name is not None:
        attributes["errands.job.name"] = call.name
    return attributes


def _enqueued_under(carrier_format: TextMapPropagator) -> tuple[Any, list[Link]]:
    """The context the job was enqueued in (the run's parent), and a link to it; (None, [])
    when the job carries no valid context."""
    headers = job_headers()
    parent = carrier_format.extract(headers) if headers else None
    if parent is None:
        return None, []
    origin = trace.get_current_span(parent).get_span_context()
    return (parent, [Link(origin)]) if origin.is_valid else (None, [])


def _process_attributes(ctx: JobContext) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process", "messaging.operation.name": "process",
        "messaging.destination.name": ctx.queue, "messaging.message.id": str(ctx.id),
        "messaging.client.id": ctx.worker_id, "errands.job.name": ctx.name, "errands.job.attempt": ctx.attempt,
        "errands.job.max_attempts": ctx.max_attempts}
    if ctx.batch_id is not None:
        attributes["errands.batch.id"] = ctx.batch_id
    return attributes


def _describe_enqueue(span: trace.Span, call: Enqueue) -> None:
    """What is known only once the rows are stored: how many, their ids, the batch."""
    count = len(call.jobs)
    if call.queue is None and call.jobs:
        span.set_attribute("errands.queues", call.queues)
    if call.kind != "enqueue":
        span.set_attribute("messaging.batch.message_count", count)
    if len(call.ids) == 1:
        span.set_attribute("messaging.message.id", str(call.ids[0]))
    elif 1 < len(call.ids) <= MAX_IDS:
        span.set_attribute("errands.job.ids", call.ids)
    if call.batch_id is not None:
        span.set_attribute("errands.batch.id", call.batch_id)


__all__ = ["instrument"]
