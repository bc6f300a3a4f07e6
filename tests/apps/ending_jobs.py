"""Jobs whose attempts end every way there is, with hooks that write down each ending
(tests/features/test_ending_hooks.py).

``on_retry`` and ``on_dead`` append one JSON line per call to the file named by
``ERRANDS_TEST_HOOK_LOG``, with the process that called them: the tests read which hook ran
where, how often, and with which record.
"""

from __future__ import annotations

import json
import os
import time

from errands import Errands, FailedJob

app = Errands(lease=float(os.environ.get("ERRANDS_TEST_LEASE", "30")))


def _write(kind: str, job: FailedJob) -> None:
    line = {"hook": kind, "pid": os.getpid(), "id": job.id, "name": job.name, "queue": job.queue,
            "args": list(job.args), "kwargs": job.kwargs, "error_type": job.error_type,
            "error_message": job.error_message, "attempts": job.attempts, "max_attempts": job.max_attempts,
            "retry_in": job.retry_in}
    with open(os.environ["ERRANDS_TEST_HOOK_LOG"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@app.on_retry
def heard_retry(job: FailedJob) -> None:
    _write("retry", job)


@app.on_dead
def heard_dead(job: FailedJob) -> None:
    _write("dead", job)


@app.job(name="fails", queue="endings", max_attempts=2, backoff=0)
def fails(order: int, *, why: str = "bad input") -> None:
    raise ValueError(f"{why} {order}")


@app.job(name="overruns", queue="endings", timeout=1, max_attempts=1)
def overruns(seconds: float) -> None:
    time.sleep(seconds)  # blocked in C: only the supervisor's kill stops it


@app.job(name="dies", queue="endings", max_attempts=1)
def dies(code: int) -> None:
    os._exit(code)


def _broken_backoff(attempt: int) -> float:
    raise ZeroDivisionError("a backoff with a bug")


@app.job(name="badly_backed_off", queue="endings", max_attempts=3, backoff=_broken_backoff)
def badly_backed_off() -> None:
    raise ValueError("first failure")


@app.job(name="held", queue="held", max_attempts=1)
def held(order: int) -> None:
    """Claimed by the tests as a worker that then dies (its lease lapses); never run."""
