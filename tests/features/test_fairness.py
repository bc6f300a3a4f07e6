"""Fairness between keys (issue 25, point 4), on every backend: keyed jobs take turns in the claim,
a key back from idle starts level with the keys being served, concurrent enqueuers of one key never
share a turn, idle counters are forgotten, and two worker processes keep the turns."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from helpers import scaled, wait_for

from errands import Errands
from errands.store import fairness


def _claim_one_by_one(app: Errands, queue: str, most: int = 1000) -> list[tuple[Any, ...]]:
    """Claim ready jobs of ``queue`` (every one, or ``most``), one claim a job, as each job's arguments
    (in claim order)."""
    order: list[tuple[Any, ...]] = []
    while len(order) < most and (got := app.store.jobs.claim("w", [queue], 1, 30)):
        args, _ = got[0].arguments
        order.append(tuple(args))
    return order


def _turns(app: Errands, handles: list[Any]) -> list[int]:
    rows = [app.store.jobs.get_job(h.id) for h in handles]
    return [row.fair_turn for row in rows if row is not None]


def test_keys_take_turns_and_a_returning_key_starts_where_the_queue_is(app: Errands) -> None:
    @app.job(name="work", queue="fair", fairness_key=lambda tenant, n: tenant)
    def work(tenant: str, n: int) -> None: ...

    @app.job(name="plain", queue="fair")
    def plain(tenant: None, n: int) -> None: ...

    app.enqueue_many([work.prepare("big", n) for n in range(5)])
    work.enqueue("a", 0), work.enqueue("b", 0), work.enqueue("a", 1)
    plain.enqueue(None, 0)
    # One claim of them all: a worker starts a claimed batch (its prefetch) in the order it is returned.
    assert [tuple(j.arguments[0]) for j in app.store.jobs.claim("w", ["fair"], 100, 30)] == [
        (None, 0),  # no key: turn 0, today's order (before the keyed jobs of its priority)
        ("big", 0), ("a", 0), ("b", 0), ("big", 1), ("a", 1), ("big", 2), ("big", 3), ("big", 4)]

    # Nothing waits: a key starts at the highest turn handed out (big's 5th), not at its own 3rd.
    back = [work.enqueue("a", 2), work.enqueue("new", 0), work.enqueue("big", 5)]
    assert _turns(app, back) == [5, 5, 6]
    # Keyed jobs wait (serving turn 5): a key idle so far starts there, not 1,000 turns ahead or behind.
    app.enqueue_many([work.prepare("big", n) for n in range(6, 20)])  # big: turns 7-20
    assert _claim_one_by_one(app, "fair", 3) == [("a", 2), ("new", 0), ("big", 5)]
    app.enqueue_many([work.prepare("big", n) for n in range(20, 22)])  # big's counter goes on: 21, 22
    late = [work.enqueue("late", 0), work.enqueue("late", 1)]
    assert _turns(app, late) == [7, 8]  # level with big's next (serving turn 7), not after big's 22
    order = _claim_one_by_one(app, "fair")
    assert order.index(("late", 0)) == 1 and order.index(("late", 1)) == 3, order  # after big's 7th and 8th

    # Idle counters are forgotten by the maintenance pass, each queue's highest (big's) kept.
    store = app.store
    store.db.run(lambda cur: cur.execute(store.dialect.q("UPDATE {fair_keys} SET used_at = {now_plus}"),
                                         (-2 * fairness.IDLE_SECONDS,)), write=True)
    assert store.features.prune(None)["fair_keys"] == 4  # a, b, new, late

    def keys(cur: Any) -> list[str]:
        cur.execute(store.dialect.q("SELECT name FROM {fair_keys}"))
        return sorted(r[0] for r in cur.fetchall())

    assert store.db.run(keys) == ["big"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)  # the claim comes after
def test_concurrent_enqueuers_of_one_key_never_share_a_turn(app: Errands) -> None:
    @app.job(name="work", queue="fair", fairness_key="one")
    def work(n: int) -> None: ...

    ids: list[int] = []
    errors: list[BaseException] = []

    def enqueue(t: int) -> None:
        try:
            for n in range(8):
                ids.append(work.enqueue(t * 100 + n).id)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=enqueue, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(scaled(60))
    assert not errors, errors
    turns = sorted(row.fair_turn for row in app.store.jobs.list_jobs(limit=100))
    assert turns == list(range(1, 33))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
def test_fairness_holds_with_two_worker_processes(fapp: Errands, spawn: Any) -> None:
    """A big tenant's 300 jobs enqueued before five small tenants' five each: the small tenants' last
    job starts before big's 100th (by turns: after big's 5th, plus what each worker prefetched in
    its batches), where the claim by id alone would start it after all 300 of big's."""
    import feature_jobs

    fapp.enqueue_many([feature_jobs.tenant_work.prepare("big", n) for n in range(300)])
    fapp.enqueue_many([feature_jobs.tenant_work.prepare(f"small{t}", n) for t in range(5) for n in range(5)])
    spawn("-p", "2", "-c", "1", "--queue", "fair")

    def starts() -> list[tuple[int, str]]:
        def read(cur: Any) -> list[tuple[int, str]]:
            cur.execute("SELECT pid, grp FROM feature_events WHERE name = 'tenant_work' ORDER BY started_at, job_id")
            return [(int(r[0]), r[1]) for r in cur.fetchall()]
        return fapp.store.db.run(read)

    runs = wait_for(lambda: (lambda o: o if sum(g != "big" for _, g in o) == 25 else None)(starts()), timeout=120,
                    message="the small tenants' 25 jobs to start")
    # Each process (one runner) starts what it claimed in claim order, so its own sequence shows the
    # claim's turns whatever the machine's load; across the two processes the start times also show
    # how far one got while the other waited for a core (106 bigs once, on a loaded machine).
    for pid in {pid for pid, g in runs if g != "big"}:
        order = [g for p, g in runs if p == pid]
        last_small = max(i for i, g in enumerate(order) if g != "big")
        bigs_before = sum(g == "big" for g in order[:last_small])
        assert bigs_before < 100, (pid, bigs_before, order[:120])
