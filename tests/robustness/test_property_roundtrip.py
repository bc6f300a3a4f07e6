"""Property: any value either is refused at enqueue with a clear error, or comes back intact.

Hypothesis feeds JSON values (strings with lone surrogates, NUL and other control characters,
extreme integers and floats, deep and wide nesting) and values JSON cannot hold (bytes, sets,
objects, NaN, integers too long to print) through the whole life of a job on SQLite: enqueue,
claim, run (the first run fails with the value in its error message), settle, dead letter,
retry from the dead letter, run again, result kept, result read back.  One worker serves every
example; its runner threads must all be alive at the end, and no thread may die of an exception.

Arguments are JSON: a tuple arrives as a list and a dict key that is no string as a string
(documented in docs/jobs.md), so the values generated here use lists and string keys.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import scaled, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from errands import EnqueueError, Errands, current_job
from errands.worker.runner import Worker, WorkerSettings

ANY_CHAR = st.characters(exclude_categories=())  # surrogates (Cs) and control characters (Cc) included
TEXT = st.text(ANY_CHAR, max_size=30)
EXTREME_INTS = st.sampled_from([0, -1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**300, -(10**4000)])
SCALARS = (st.none() | st.booleans() | st.integers() | EXTREME_INTS | TEXT
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from([1e308, -1e308, 5e-324, -0.0, 2.0**53 + 1]))
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(TEXT, inner, max_size=4), max_leaves=25)
NOT_JSON = (st.binary(max_size=5) | st.sets(st.integers(), max_size=3) | st.builds(object) | st.complex_numbers()
            | st.sampled_from([math.nan, math.inf, -math.inf, Ellipsis]) | st.datetimes()
            | st.builds(lambda: 10**5000))  # too long to print as a JSON number (built: too long to repr too)
MIXED = st.recursive(SCALARS | NOT_JSON, lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12)
DEEP = st.integers(min_value=1, max_value=200).map(lambda depth: _nest(depth))


def _nest(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


class Probe:
    """The worker serving every example, and what its handler saw."""

    def __init__(self, app: Errands, worker: Worker) -> None:
        self.app = app
        self.worker = worker
        self.seen: dict[int, list[Any]] = {}
        self.lock = threading.Lock()


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probe]:
    path: Path = tmp_path_factory.mktemp("property") / "errands.db"
    app = Errands(f"sqlite:///{path}", lease=30)
    died: list[BaseException | None] = []
    previous_hook = threading.excepthook
    threading.excepthook = lambda args: died.append(args.exc_value)

    @app.job(name="probe", max_attempts=1, keep_result=True)
    def handler(value: Any) -> Any:
        job_id = current_job().id
        with holder.lock:
            runs = holder.seen.setdefault(job_id, [])
            runs.append(value)
            first = len(runs) == 1
        if first:  # the error text carries the value, surrogates and all: it must still be stored
            raise ValueError(f"first run of {value!r}")
        return value

    worker = Worker(app, WorkerSettings(queues=("default",), concurrency=2, sleep=0.05))
    holder = Probe(app, worker)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        yield holder
        assert all(t.is_alive() for t in worker._threads), "a runner thread died"
        assert thread.is_alive(), "the worker's main loop ended"
    finally:
        worker.request_stop()
        thread.join(scaled(30))
        threading.excepthook = previous_hook
        app.close()
    assert died == [], died


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON types all the way down (True is no 1, 1.0 is no 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


def through_a_job(probe: Probe, value: Any) -> EnqueueError | None:
    """The value's whole trip; the refusal when enqueue refused it."""
    app = probe.app
    try:
        handle = app.get_job("probe").enqueue(value)
    except EnqueueError as exc:
        assert str(exc), "a refusal says why"
        return exc
    wait_for(lambda: app.store.jobs.get_failed(handle.id), timeout=20, interval=0.01,
             message="the first run to reach the dead letter")
    entry = app.store.jobs.get_failed(handle.id)
    assert entry is not None and entry.error_type == "ValueError"
    entry.error_message.encode("utf-8")  # stored as valid text, whatever the value held
    assert app.retry_failed(handle.id) == [handle.id]
    result = handle.result(timeout=scaled(20))
    runs = probe.seen[handle.id]
    assert len(runs) == 2
    for received in (*runs, result):
        assert same(received, value), (received, value)
    assert all(t.is_alive() for t in probe.worker._threads)
    return None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_json_values_come_back_intact(probe: Probe, value: Any) -> None:
    refused = through_a_job(probe, value)
    # A JSON value is refused only for its size, an integer too long to print, or its depth.
    assert refused is None or any(why in str(refused) for why in ("bytes as JSON", "digits", "levels deep"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(MIXED | DEEP)
def test_any_value_is_refused_clearly_or_comes_back_intact(probe: Probe, value: Any) -> None:
    through_a_job(probe, value)
