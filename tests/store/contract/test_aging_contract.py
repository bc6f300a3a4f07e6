"""Priority aging as the store does it (``age_after=``, issue 25 point 5): a bounded maintenance UPDATE
gives a waiting job one step of priority per ``age_after`` seconds it has waited (every step it earned
at once), never past its cap, and only to jobs that wait; the claim then serves it before fresher work
of the priority it rose above."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from errands.store import Store

from .support import claim_ids, enqueue


def _waited(store: Store, job_id: int, seconds: float) -> None:
    """Move a job's due time ``seconds`` into the past: it has waited that long."""
    row = store.jobs.get_job(job_id)
    assert row is not None
    d = store.dialect

    def update(cur: Any) -> None:
        cur.execute(d.q("UPDATE {jobs} SET available_at = {p} WHERE id = {p}"),
                    (d.from_datetime(row.available_at - timedelta(seconds=seconds)), job_id))

    store.db.run(update, write=True)


def _priority(store: Store, job_id: int) -> int:
    row = store.jobs.get_job(job_id)
    assert row is not None
    return row.priority


def test_a_waiting_job_gains_one_step_per_period_up_to_its_cap(store: Store) -> None:
    [old] = enqueue(store, priority=0, age_after=60.0, age_base=0, age_cap=3)
    [fresh] = enqueue(store, priority=0, age_after=60.0, age_base=0, age_cap=3)
    [plain] = enqueue(store, priority=0)
    assert store.features.age_waiting() == 0  # nobody waited a period yet
    _waited(store, old, 130.0)  # two periods and some
    assert store.features.age_waiting() == 1 and _priority(store, old) == 2  # both steps in one pass
    assert store.features.age_waiting() == 0 and _priority(store, old) == 2  # the third period is not over
    _waited(store, old, 3600.0)
    assert store.features.age_waiting() == 1 and _priority(store, old) == 3
    assert store.features.age_waiting() == 0 and _priority(store, old) == 3  # the cap holds
    row = store.jobs.get_job(old)
    assert row is not None and row.age_cap is None  # it left the aging index
    assert (_priority(store, fresh), _priority(store, plain)) == (0, 0)


def test_an_aged_job_is_claimed_before_fresher_work_it_rose_above(store: Store) -> None:
    [low] = enqueue(store, priority=0, age_after=10.0, age_base=0, age_cap=5)
    high = enqueue(store, priority=2, count=3)
    _waited(store, low, 10_000.0)
    assert store.features.age_waiting() == 1 and _priority(store, low) == 5
    assert claim_ids(store, limit=1) == [low]
    assert claim_ids(store, limit=5) == high


def test_a_running_job_does_not_age_and_a_pass_is_bounded(store: Store) -> None:
    ids = enqueue(store, priority=0, age_after=1.0, age_base=0, age_cap=9, count=5)
    for job_id in ids:
        _waited(store, job_id, 100.0)
    [running] = claim_ids(store, limit=1)
    assert store.features.age_waiting(limit=2) == 2
    assert store.features.age_waiting(limit=100) == 2  # the two left; not the running one
    assert store.features.age_waiting(limit=100) == 0
    assert _priority(store, running) == 0 and {_priority(store, i) for i in ids if i != running} == {9}
