"""Celery with the Redis broker for ``celery -A celery_app worker`` (broker URL from BENCH_REDIS_URL)."""

from __future__ import annotations

import os

from celery import Celery
from common import mark

app = Celery("bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_ignore_result=True,           # no result backend traffic for a no-op
    worker_prefetch_multiplier=64,     # "Optimizing": many short tasks -> a large multiplier (64 or 128)
    worker_disable_rate_limits=True,   # no rate limits used
    task_acks_late=False,              # the default: ack on receipt
    broker_connection_retry_on_startup=True,
    task_default_queue="bench",
)


@app.task(name="noop")
def noop(stamp: float) -> None:
    mark(stamp)
