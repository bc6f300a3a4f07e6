"""Unique modes as the store follows them (``NewJob.unique_rule``, issue 25 point 2): a waiting holder
replaced, a running one left alone with the new job waiting beside it, a debounced run time pushed
back but capped, and the races that must still leave one job per key: two enqueuers replacing one key,
and replacements against a worker's claims."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

from errands.core.rows import FLAG_UNIQUE_PERIOD, UniqueRule
from errands.store import Store

from .support import claim, claim_ids, count, enqueue, job, near, within

REPLACE = UniqueRule(replace=True, running=False)
"""``on_conflict="replace"`` with its default states: a running holder is left alone."""
WAITING_ONLY = UniqueRule(replace=False, running=False)
"""``unique_states=("waiting",)`` under keep: one waiting plus one running job per key."""


def _args(n: int) -> str:
    return json.dumps({"args": [n], "kwargs": {}}, separators=(",", ":"))


def _shift_back(store: Store, job_id: int, seconds: float) -> None:
    """Move a job's enqueue and due times ``seconds`` into the past: that long has passed since its enqueue."""
    row = store.jobs.get_job(job_id)
    assert row is not None
    d, back = store.dialect, timedelta(seconds=seconds)

    def update(cur: Any) -> None:
        cur.execute(d.q("UPDATE {jobs} SET created_at = {p}, available_at = {p} WHERE id = {p}"),
                    (d.from_datetime(row.created_at - back), d.from_datetime(row.available_at - back), job_id))

    store.db.run(update, write=True)


def test_replace_gives_a_waiting_holder_the_new_arguments_priority_and_run_time(store: Store) -> None:
    [first] = enqueue(store, unique_key="k", unique_rule=REPLACE, payload=_args(1), delay=3600.0)
    before = store.jobs.get_job(first)
    assert before is not None
    assert enqueue(store, unique_key="k", unique_rule=REPLACE, payload=_args(2), priority=7) == [first]
    row = store.jobs.get_job(first)
    assert row is not None and (row.payload, row.priority) == (_args(2), 7)
    assert row.available_at <= store.now() < before.available_at  # due now, no longer in an hour
    assert row.created_at == before.created_at and count(store, "jobs") == 1
    # Keep (no rule) returns the holder as it is.
    assert enqueue(store, unique_key="k", payload=_args(3), priority=1) == [first]
    assert store.jobs.get_job(first).payload == _args(2)  # type: ignore[union-attr]


def test_a_running_holder_is_left_alone_and_the_new_job_waits_beside_it(store: Store) -> None:
    [first] = enqueue(store, unique_key="k", unique_rule=REPLACE, payload=_args(1))
    assert claim_ids(store) == [first]
    [second] = enqueue(store, unique_key="k", unique_rule=REPLACE, payload=_args(2))
    assert second != first and enqueue(store, unique_key="k", unique_rule=REPLACE, payload=_args(3)) == [second]
    assert store.jobs.get_job(first).payload == _args(1)  # type: ignore[union-attr]  # as its worker claimed it
    assert store.jobs.get_job(second).payload == _args(3)  # type: ignore[union-attr]
    # A rule that counts running holders returns the running job unchanged.
    [running] = enqueue(store, unique_key="r", payload=_args(1))
    assert claim_ids(store) == [second, running]
    assert enqueue(store, unique_key="r", unique_rule=UniqueRule(replace=True), payload=_args(2)) == [running]
    assert store.jobs.get_job(running).payload == _args(1)  # type: ignore[union-attr]


def test_waiting_only_keeps_one_waiting_job_beside_the_running_one(store: Store) -> None:
    [first] = enqueue(store, unique_key="k", unique_rule=WAITING_ONLY, payload=_args(1))
    assert enqueue(store, unique_key="k", unique_rule=WAITING_ONLY, payload=_args(2)) == [first]
    assert claim_ids(store) == [first]
    [second] = enqueue(store, unique_key="k", unique_rule=WAITING_ONLY, payload=_args(3),
                       unique_for=3600.0, flags=FLAG_UNIQUE_PERIOD)
    assert second != first
    assert enqueue(store, unique_key="k", unique_rule=WAITING_ONLY, payload=_args(4)) == [second]
    # The running job ends: the key stays with the waiting one (its period starts only when it ends).
    assert store.endings.complete("contract-host:1:aaaaaa", [first]) == 1
    assert enqueue(store, unique_key="k", payload=_args(5)) == [second]
    assert [r.payload for r in store.jobs.list_jobs()] == [_args(3)]


def test_a_debounced_run_time_moves_back_but_never_past_max_wait_after_the_first_enqueue(store: Store) -> None:
    capped = UniqueRule(replace=True, running=False, max_wait=150.0)
    [held] = enqueue(store, unique_key="d", unique_rule=capped, delay=100.0, payload=_args(1))
    row = store.jobs.get_job(held)
    assert row is not None and near(row.available_at, row.created_at + timedelta(seconds=100))
    _shift_back(store, held, 90.0)  # 90 s into the burst: now + 100 would be 190 s after its start
    assert enqueue(store, unique_key="d", unique_rule=capped, delay=100.0, payload=_args(2)) == [held]
    row = store.jobs.get_job(held)
    assert row is not None and row.payload == _args(2)
    assert near(row.available_at, row.created_at + timedelta(seconds=150))
    # A wider max_wait, or none, puts the run off to the quiet period after this enqueue.
    for rule in (capped._replace(max_wait=1000.0), REPLACE):
        low = store.now()
        assert enqueue(store, unique_key="d", unique_rule=rule, delay=100.0, payload=_args(3)) == [held]
        row = store.jobs.get_job(held)
        assert row is not None and within(row.available_at, low + timedelta(seconds=100),
                                           store.now() + timedelta(seconds=100))


def test_two_enqueuers_racing_to_replace_one_key_leave_one_job_with_one_of_their_calls(
        store: Store, other_store: Store) -> None:
    rounds = 15
    gate = threading.Barrier(2)
    got: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def enqueuer(side: int, s: Store) -> None:
        try:
            gate.wait(timeout=30)
            for i in range(rounds):
                got[side] += s.jobs.enqueue([job(unique_key="race", unique_rule=REPLACE, payload=_args(100 * side + i),
                                                 priority=side)])
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=enqueuer, args=(side, s)) for side, s in ((0, store), (1, other_store))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    [row] = store.jobs.list_jobs()
    assert set(got[0]) | set(got[1]) == {row.id}
    # Whoever committed last wrote its last call, arguments and priority together.
    assert (row.payload, row.priority) in ((_args(rounds - 1), 0), (_args(100 + rounds - 1), 1))


def test_replacements_racing_a_claim_never_change_what_a_worker_claimed(store: Store, other_store: Store) -> None:
    rounds = 30
    claimed: dict[int, str] = {}
    done = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            while not done.is_set():
                claimed.update((c.id, c.payload) for c in claim(other_store, limit=1))
                done.wait(0.002)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for i in range(rounds):
            store.jobs.enqueue([job(unique_key="busy", unique_rule=REPLACE, payload=_args(i))])
    finally:
        done.set()
        thread.join()
    assert errors == []
    claimed.update((c.id, c.payload) for c in claim(other_store))  # the last one, if it still waited
    rows = {r.id: r.payload for r in store.jobs.list_jobs()}
    assert rows == claimed  # every job was claimed once, and still holds the arguments it was claimed with
    assert _args(rounds - 1) in claimed.values()  # the newest call was not lost
