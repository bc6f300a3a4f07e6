"""The app a worker process runs in the observability tests: traced, and counted.

ERRANDS_TEST_SPANS names a file that receives one JSON span per line (OpenTelemetry SDK);
PROMETHEUS_MULTIPROC_DIR, when set, makes the run counters land in files there.
"""

from __future__ import annotations

import os

from errands import Errands

app = Errands()


@app.job(name="traced.work", queue="reports")
def work(n: int, label: str = "") -> int:
    return n


@app.job(name="traced.fail", queue="reports", max_attempts=2, backoff=0)
def fail(n: int) -> None:
    raise ValueError(f"no good: {n}")


if os.environ.get("ERRANDS_TEST_SPANS"):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    from errands.contrib.opentelemetry import instrument

    _out = open(os.environ["ERRANDS_TEST_SPANS"], "a")  # noqa: SIM115 - open for the process's life
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
        out=_out, formatter=lambda span: span.to_json(indent=None) + "\n")))
    instrument(app, tracer_provider=provider)

if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    from errands.contrib import prometheus

    prometheus.instrument(app)
