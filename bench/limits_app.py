"""The application the limits benchmark runs (bench/limits.py): a concurrency-limited job and a
rate-limited one.

Workers load it with ``errands --app limits_app:app`` (bench/ on PYTHONPATH).  Each run appends
one line ``kind group start end`` (wall-clock seconds) to the file named by ``BENCH_LIMITS_LOG``;
lines are shorter than PIPE_BUF and the file is opened with O_APPEND, so the lines of many worker
processes never mix.
"""

from __future__ import annotations

import os
import time

from errands import Errands

app = Errands("sqlite:///errands-bench-unset.db")

GROUP_LIMIT = 2
RATE = "20/s"
SLOW_RATE = "5/1s"


def _log(kind: str, group: str, started: float) -> None:
    line = f"{kind} {group} {started!r} {time.time()!r}\n".encode()
    fd = os.open(os.environ["BENCH_LIMITS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.job(name="bench.grouped", concurrency_limit=GROUP_LIMIT, concurrency_key=lambda group, seconds: group)
def grouped(group: str, seconds: float) -> None:
    """Holds one of its group's slots for ``seconds`` (as a call to a rate-capped API would)."""
    started = time.time()
    time.sleep(seconds)
    _log("group", group, started)


@app.job(name="bench.rated", rate_limit=RATE)
def rated(n: int) -> None:
    """A no-op that may start at most 20 times a second, across every worker."""
    _log("rate", "-", time.time())


@app.job(name="bench.rated5", rate_limit=SLOW_RATE)
def rated5(n: int) -> None:
    """A no-op that may start at most 5 times in any second, across every worker."""
    _log("rate5", "-", time.time())
