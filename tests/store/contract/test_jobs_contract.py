"""``store.jobs``: enqueue, claim, release, leases, the dead letter and reading jobs, on every backend."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

from helpers import scaled, wait_for_db_clock

from errands.core.columns import DEAD, JOBS, Fill
from errands.core.endings import Buried, RetryAt
from errands.core.rows import FLAG_RESULT, ClaimedJob, JobState, QueueCounts
from errands.store import Store, open_store

from .support import OTHER, OWNER, claim, claim_ids, count, enqueue, job, near, raw, within


# ---------------------------------------------------------------------------------- enqueue
def test_enqueue_returns_ids_in_order_and_stores_each_field(store: Store) -> None:
    big = json.dumps({"args": ["\u00e9\U0001f600" * 40_000], "kwargs": {}}, ensure_ascii=False)  # 240 KB in UTF-8
    jobs = [job("first", "default", payload='{"args":[1],"kwargs":{}}', priority=2**31 - 1, max_attempts=7,
                timeout=1.5),
            job("second", "other", payload='{"args":["\u00e9\U0001f600\'%\\\\"],"kwargs":{"k":2}}',
                priority=-2**31),
            job("third", payload=big)]
    before = store.now()
    ids = store.jobs.enqueue(jobs)
    after = store.now()
    assert len(set(ids)) == 3 and ids == sorted(ids)
    for job_id, new in zip(ids, jobs, strict=True):
        row = store.jobs.get_job(job_id)
        assert row is not None
        assert (row.id, row.queue, row.name, row.payload, row.priority, row.max_attempts, row.timeout) == (
            job_id, new.queue, new.name, new.payload, new.priority, new.max_attempts, new.timeout)
        assert (row.attempts, row.snoozes, row.flags) == (0, 0, 0)
        assert (row.reserved_by, row.reserved_at, row.reserved_until, row.last_error, row.blocked_by) == (
            None, None, None, None, None)
        assert within(row.created_at, before, after) and near(row.available_at, row.created_at)
        assert row.state(after) is JobState.READY


def test_enqueue_counts_a_delay_from_the_database_clock(store: Store) -> None:
    before = store.now()
    [job_id] = enqueue(store, delay=120.0)
    after = store.now()
    row = store.jobs.get_job(job_id)
    assert row is not None
    assert within(row.available_at, before + timedelta(seconds=120), after + timedelta(seconds=120))
    assert row.state(after) is JobState.DELAYED


def test_enqueue_stores_run_at_as_given_and_a_past_one_is_ready(store: Store) -> None:
    now = store.now()
    later, earlier = now + timedelta(hours=1, microseconds=123_457), now - timedelta(minutes=5)
    ids = store.jobs.enqueue([job(run_at=later, delay=30.0), job(run_at=earlier)])
    rows = [store.jobs.get_job(job_id) for job_id in ids]
    assert near(rows[0].available_at, later) and near(rows[1].available_at, earlier)  # type: ignore[union-attr]
    assert claim_ids(store) == [ids[1]]


def test_enqueue_a_batch_across_insert_chunks_keeps_order_and_values(store: Store) -> None:
    """1,001 jobs: two full chunks of 500 and a trailing single row (and PostgreSQL's COPY path)."""
    now = store.now()
    jobs = [job(f"bulk{i % 7}", "default" if i % 3 else "other", payload=json.dumps({"args": [i], "kwargs": {}}),
                priority=i % 5, max_attempts=1 + i % 4, delay=float(i % 2) * 60,
                run_at=now + timedelta(seconds=i) if i % 11 == 0 else None) for i in range(1001)]
    ids = store.jobs.enqueue(jobs)
    assert len(set(ids)) == 1001 and ids == sorted(ids)
    by_id = {r.id: r for r in store.jobs.list_jobs(limit=2000)}
    assert sorted(by_id) == ids
    for job_id, new in zip(ids, jobs, strict=True):
        row = by_id[job_id]
        assert (row.name, row.queue, row.payload, row.priority, row.max_attempts) == (
            new.name, new.queue, new.payload, new.priority, new.max_attempts)
        if new.run_at is not None:
            assert near(row.available_at, new.run_at)
        else:
            assert (row.available_at > row.created_at + timedelta(seconds=59)) == bool(new.delay)


def test_enqueue_writes_every_feature_column(store: Store) -> None:
    [job_id] = store.jobs.enqueue([job(unique_key="feature-key", concurrency_key="group-a", flags=FLAG_RESULT,
                                       batch_id=None, label="a label", cost=3)])
    row = store.jobs.get_job(job_id)
    assert row is not None
    assert (row.unique_key, row.concurrency_key, row.flags, row.label, row.cost) == (
        "feature-key", "group-a", FLAG_RESULT, "a label", 3)


def test_enqueue_on_the_callers_transaction_commits_and_rolls_back_with_it(store: Store) -> None:
    conn = store.dialect.connect()
    try:
        for keep in (False, True):
            store.dialect.begin(conn)
            cur = conn.cursor()
            [job_id] = store.jobs.enqueue([job(label=f"kept={keep}")], cursor=cur)
            cur.close()
            conn.commit() if keep else conn.rollback()
            assert (store.jobs.get_job(job_id) is not None) is keep
    finally:
        conn.close()


def test_the_listener_wakes_on_every_insert_path_and_only_then(store: Store, other_store: Store) -> None:
    """``store.listener()``: an idle wait ends at its timeout; an enqueue by another process (one
    row, a bulk insert, a job with a feature, an insert on the caller's transaction) wakes it."""
    def on_cursor() -> None:
        conn = other_store.dialect.connect()
        try:
            other_store.dialect.begin(conn)
            other_store.jobs.enqueue([job()], cursor=conn.cursor())
            conn.commit()
        finally:
            conn.close()

    paths = {"one row": lambda: enqueue(other_store), "bulk": lambda: enqueue(other_store, 250),
             "feature": lambda: enqueue(other_store, unique_key="wake"), "caller's transaction": on_cursor}
    for path, insert in {"nothing": None, **paths}.items():
        listener = store.listener()  # a fresh one each: no signal left over from the path before
        assert listener is not None
        try:
            if insert is None:
                assert listener.wait(0.05) is False
            else:
                insert()
                assert listener.wait(scaled(5)) is True, path
        finally:
            listener.close()


# ---------------------------------------------------------------------------------- claim
def test_claim_returns_the_claimed_columns_and_reserves_each_row(store: Store) -> None:
    [job_id] = store.jobs.enqueue([job("claimed", priority=2, max_attempts=4, timeout=9.5, concurrency_key="g",
                                       label="l")])
    before = store.now()
    [claimed] = claim(store, lease=45.0)
    after = store.now()
    assert isinstance(claimed, ClaimedJob)
    assert claimed == ClaimedJob(job_id, "default", "claimed", job().payload, 2, 1, 4, 9.5, OWNER, None, "g", 0, 0)
    row = store.jobs.get_job(job_id)
    assert row is not None and row.reserved_by == OWNER and row.attempts == 1
    assert within(row.reserved_at, before, after)
    assert near(row.reserved_until, row.reserved_at + timedelta(seconds=45))  # type: ignore[operator]


def test_claim_takes_the_highest_priority_first_then_the_lowest_id(store: Store) -> None:
    priorities = [0, 5, 0, 5, -1, 10, 0]
    ids = store.jobs.enqueue([job(priority=p) for p in priorities])
    expected = [job_id for _, job_id in sorted(zip(priorities, ids, strict=True), key=lambda t: (-t[0], t[1]))]
    first = claim_ids(store, limit=4)
    assert first == expected[:4]
    assert claim_ids(store, OTHER, limit=10) == expected[4:]


def test_claim_fills_the_limit_from_the_queues_in_the_given_order(store: Store) -> None:
    low = enqueue(store, 2, queue="low")
    high = enqueue(store, 3, queue="high")
    assert claim_ids(store, queues=("high", "low"), limit=4) == [*high, low[0]]


def test_claim_counts_the_attempt_when_it_claims(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=5)
    for attempt in (1, 2, 3):
        [claimed] = claim(store)
        assert claimed.attempts == attempt and store.jobs.get_job(job_id).attempts == attempt  # type: ignore[union-attr]
        assert store.jobs.release(OWNER, [job_id], refund=False) == 1


def test_claim_skips_delayed_blocked_and_reserved_jobs(store: Store) -> None:
    [ready, delayed, parent] = store.jobs.enqueue([job(), job(delay=300.0), job()])
    [held] = claim_ids(store, OTHER, limit=1)
    assert held == ready
    [blocked] = store.jobs.enqueue([job(after=(parent,))])
    assert store.jobs.get_job(blocked).blocked_by == 1  # type: ignore[union-attr]
    assert claim_ids(store) == [parent]
    assert claim_ids(store) == []
    assert {delayed, blocked} <= {r.id for r in store.jobs.list_jobs() if r.reserved_by is None}


def test_a_job_is_claimable_exactly_from_its_due_time_by_the_database_clock(store: Store) -> None:
    [job_id] = enqueue(store, delay=0.3)
    due = store.jobs.get_job(job_id).available_at  # type: ignore[union-attr]
    while True:
        before = store.now()
        got = claim_ids(store)
        after = store.now()
        if got:
            assert got == [job_id] and due <= after
            return
        assert before < due, "a due job was not claimed"
        wait_for_db_clock(store, before)


def test_a_claim_never_hands_one_row_to_two_owners(store: Store) -> None:
    ids = enqueue(store, 200)
    stores = [open_store(store.url) for _ in range(4)]
    start = threading.Barrier(len(stores))
    taken: dict[str, list[int]] = {}

    def claimer(index: int, own: Store) -> None:
        owner = f"racer-{index}"
        mine = taken.setdefault(owner, [])
        start.wait(timeout=scaled(10))
        while got := claim_ids(own, owner, limit=3):
            mine.extend(got)

    threads = [threading.Thread(target=claimer, args=(i, s)) for i, s in enumerate(stores)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(60))
    finally:
        for s in stores:
            s.close()
    everything = [job_id for mine in taken.values() for job_id in mine]
    assert sorted(everything) == ids  # each row once, none lost
    for owner, mine in taken.items():
        assert store.jobs.reserved_by(owner) == sorted(mine)


# ---------------------------------------------------------------------------------- leases
def test_release_gives_jobs_back_and_refunds_the_attempt(store: Store) -> None:
    a, b, c = enqueue(store, 3)
    claim(store)
    assert store.jobs.release(OWNER, [a, b]) == 2
    assert store.jobs.release(OWNER, [c], refund=False) == 1
    rows = {job_id: store.jobs.get_job(job_id) for job_id in (a, b, c)}
    assert [(r.reserved_by, r.reserved_at, r.reserved_until) for r in rows.values()] == [(None, None, None)] * 3
    assert [rows[a].attempts, rows[b].attempts, rows[c].attempts] == [0, 0, 1]  # type: ignore[union-attr]
    assert claim_ids(store) == [a, b, c]


def test_release_by_another_owner_changes_nothing(store: Store) -> None:
    [job_id] = enqueue(store)
    claim(store)
    before = raw(store, "jobs", JOBS, job_id)
    assert store.jobs.release(OTHER, [job_id]) == 0
    assert store.jobs.release(OWNER, []) == 0
    assert raw(store, "jobs", JOBS, job_id) == before


def test_extend_leases_pushes_the_owners_leases_from_the_database_clock(store: Store) -> None:
    mine = enqueue(store, 2)
    [theirs] = enqueue(store)
    claim(store, limit=2, lease=1.0)
    claim(store, OTHER, lease=1.0)
    kept = raw(store, "jobs", JOBS, theirs)
    before = store.now()
    assert store.jobs.extend_leases(OWNER, [*mine, theirs], 300.0) == 2
    after = store.now()
    for job_id in mine:
        until = store.jobs.get_job(job_id).reserved_until  # type: ignore[union-attr]
        assert within(until, before + timedelta(seconds=300), after + timedelta(seconds=300))
    assert raw(store, "jobs", JOBS, theirs) == kept
    assert store.jobs.extend_leases(OWNER, [], 300.0) == 0


def test_reserved_by_lists_the_jobs_an_owner_holds(store: Store) -> None:
    ids = enqueue(store, 4)
    claim(store, limit=3)
    claim(store, OTHER)
    assert store.jobs.reserved_by(OWNER) == ids[:3]
    assert store.jobs.reserved_by(OTHER) == ids[3:]
    assert store.jobs.reserved_by("nobody") == []


def test_lease_verbs_take_more_than_a_thousand_ids_at_once(store: Store) -> None:
    ids = enqueue(store, 1200)
    assert claim_ids(store, limit=1200) == ids
    assert store.jobs.extend_leases(OWNER, ids, 300.0) == 1200
    assert store.jobs.release(OWNER, ids[::2]) == 600
    assert store.jobs.reserved_by(OWNER) == ids[1::2]
    assert store.endings.complete(OWNER, ids) == 600
    assert count(store, "jobs") == 600 and claim_ids(store, OTHER, limit=1200) == ids[::2]


# ---------------------------------------------------------------------------------- reading
def test_get_job_and_list_jobs_read_rows_in_id_order(store: Store) -> None:
    ids = enqueue(store, 3, queue="a") + enqueue(store, 2, queue="b")
    assert store.jobs.get_job(max(ids) + 1000) is None
    assert [r.id for r in store.jobs.list_jobs()] == ids
    assert [r.id for r in store.jobs.list_jobs(queue="b")] == ids[3:]
    assert [r.id for r in store.jobs.list_jobs(limit=2)] == ids[:2]
    assert list(vars(store.jobs.get_job(ids[0]))) == [c.name for c in JOBS]  # every declared column, by name


def test_counts_tell_each_state_by_the_database_clock(store: Store) -> None:
    [stale, _, _, _, parent] = enqueue(store, 5)
    enqueue(store, delay=300.0)
    store.jobs.enqueue([job(after=(parent,))])
    [dead] = enqueue(store, queue="graveyard")
    claim(store, OTHER, limit=1, lease=0.05)
    claim(store, limit=1, lease=300.0)
    assert store.endings.bury(None, dead, "E", "dead") is True
    wait_for_db_clock(store, store.jobs.get_job(stale).reserved_until)  # type: ignore[arg-type, union-attr]
    assert store.jobs.counts() == {"default": QueueCounts(ready=3, delayed=1, running=1, stale=1, failed=0, blocked=1),
                                   "graveyard": QueueCounts(failed=1)}


def test_highest_job_id_counts_ids_whose_rows_are_gone(store: Store) -> None:
    bulk = enqueue(store, 250)
    assert store.jobs.highest_job_id() >= max(bulk)  # type: ignore[operator]
    [job_id] = enqueue(store, queue="last")
    assert store.jobs.highest_job_id() == job_id
    claim(store, queues=("last",))
    assert store.endings.complete(OWNER, [job_id]) == 1
    assert store.jobs.get_job(job_id) is None
    assert store.jobs.highest_job_id() == job_id


def test_explain_claim_returns_the_plan_of_the_pick(store: Store) -> None:
    enqueue(store, 20)
    plan = store.jobs.explain_claim("default", 10)
    assert plan.strip() and store.dialect.t_jobs in plan


# ---------------------------------------------------------------------------------- dead letter
def _bury(store: Store, ids: list[int], message: str = "gone") -> None:
    for job_id in ids:
        assert store.endings.bury(None, job_id, "errands.Test", f"{message} {job_id}") is True


def test_list_failed_is_newest_first_with_queue_limit_and_offset(store: Store) -> None:
    a, b = enqueue(store, 2)
    [c] = enqueue(store, queue="other")
    _bury(store, [a, b, c])
    assert [f.id for f in store.jobs.list_failed()] == [c, b, a]
    assert [f.id for f in store.jobs.list_failed(queue="default")] == [b, a]
    assert [f.id for f in store.jobs.list_failed(limit=1, offset=1)] == [b]
    entries = store.jobs.list_failed()
    assert [e.failed_at for e in entries] == sorted((e.failed_at for e in entries), reverse=True)


def test_get_failed_reads_one_entry(store: Store) -> None:
    [job_id] = enqueue(store, label="findable")
    before = store.now()
    _bury(store, [job_id])
    after = store.now()
    entry = store.jobs.get_failed(job_id)
    assert entry is not None and (entry.id, entry.label, entry.error_type, entry.error_message) == (
        job_id, "findable", "errands.Test", f"gone {job_id}")
    assert within(entry.failed_at, before, after)
    assert store.jobs.get_failed(job_id + 1000) is None


def test_retry_failed_moves_an_entry_back_in_one_piece_with_fresh_attempts(store: Store) -> None:
    [job_id] = store.jobs.enqueue([job("dead", "q", priority=4, max_attempts=2, timeout=3.0, unique_key="rk",
                                       concurrency_key="cg", flags=FLAG_RESULT, label="lab", cost=2)])
    claim(store, queues=("q",))
    assert store.endings.apply(OWNER, [Buried(job_id, 1, "E", "the error")])
    dead = raw(store, "failed", DEAD, job_id)
    before = store.now()
    assert store.jobs.retry_failed([job_id]) == [job_id]
    after = store.now()
    fresh = {c.name for c in DEAD if c.fill is Fill.ZERO}  # attempts: counted afresh
    assert dead is not None and dead["attempts"] == 1
    assert raw(store, "jobs", DEAD, job_id) == {name: 0 if name in fresh else value for name, value in dead.items()}
    row = store.jobs.get_job(job_id)
    assert row is not None and row.reserved_by is None and row.last_error == "the error"
    assert within(row.available_at, before, after)
    assert store.jobs.get_failed(job_id) is None
    assert store.jobs.enqueue([job(unique_key="rk")]) == [job_id]  # the key is the retried job's again


def test_retry_failed_by_queue_all_and_none(store: Store) -> None:
    a, b = enqueue(store, 2, queue="one")
    [c] = enqueue(store, queue="two")
    _bury(store, [a, b, c])
    assert store.jobs.retry_failed([]) == []
    assert store.jobs.retry_failed(queue="two") == [c]
    assert store.jobs.retry_failed([c + 1000]) == []
    assert sorted(store.jobs.retry_failed()) == [a, b]
    assert count(store, "failed") == 0 and count(store, "jobs") == 3


def test_forget_failed_deletes_entries_and_their_error_history(store: Store) -> None:
    a, b = enqueue(store, 2)
    [c] = enqueue(store, queue="other")
    _bury(store, [a, b, c])
    assert store.jobs.errors(a) != []
    assert store.jobs.forget_failed([]) == 0
    assert store.jobs.forget_failed([a]) == 1
    assert store.jobs.errors(a) == [] and store.jobs.get_failed(a) is None
    assert store.jobs.forget_failed(queue="other") == 1
    assert store.jobs.forget_failed() == 1
    assert count(store, "failed") == 0 and count(store, "job_errors") == 0


def test_errors_keep_one_entry_per_failed_attempt_oldest_first(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=3)
    for attempt in (1, 2):
        claim(store)
        assert store.endings.apply(OWNER, [RetryAt(job_id, attempt, 0.0, "ValueError", f"try {attempt}")])
    claim(store)
    assert store.endings.apply(OWNER, [Buried(job_id, 3, "ValueError", "try 3", "Traceback: here")])
    history = store.jobs.errors(job_id)
    assert [(e.job_id, e.attempt, e.error_type, e.error_message) for e in history] == [
        (job_id, n, "ValueError", f"try {n}") for n in (1, 2, 3)]
    assert [e.traceback for e in history] == [None, None, "Traceback: here"]
    assert history[0].failed_at <= history[1].failed_at <= history[2].failed_at
    assert store.jobs.errors(job_id + 1000) == []

