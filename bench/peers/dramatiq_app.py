"""dramatiq with the Redis broker for ``dramatiq dramatiq_app`` (broker URL from BENCH_REDIS_URL)."""

from __future__ import annotations

import os

import dramatiq
from common import mark
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", max_retries=0)
def noop(stamp: float) -> None:
    mark(stamp)
