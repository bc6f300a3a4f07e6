"""Shared by the observability tests: spans collected in memory, the three backends, draining."""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

from helpers import scaled
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

THREE = ["sqlite", "postgres", "mariadb"]


class Spans:
    """A tracer provider whose finished spans land in a list, with ways to find them."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    @property
    def producers(self) -> list[ReadableSpan]:
        return [s for s in self.all() if s.kind is SpanKind.PRODUCER]

    @property
    def consumers(self) -> list[ReadableSpan]:
        return [s for s in self.all() if s.kind is SpanKind.CONSUMER]


def drain(app: Any) -> int:
    """Run every ready job in this process (retries with no delay included), then return."""
    return int(app.run_worker(burst=True, sleep=0.05))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> str | None:
    """The body of ``url``, or None while nothing answers there yet."""
    try:
        with urllib.request.urlopen(url, timeout=scaled(5)) as response:
            return str(response.read().decode())
    except OSError:
        return None
