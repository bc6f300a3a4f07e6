"""``store.features`` (unique keys, dependencies, batches, results, cancel, progress, pause, queue
limits, periodic slots, admission, prune), ``store.workers`` and ``store.workflows``, on every backend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from helpers import wait_for_db_clock

from errands.core.endings import Completed
from errands.core.limits import RateLimit, rate_window
from errands.core.payload import encode_result
from errands.core.rows import FLAG_RESULT, FLAG_UNIQUE_PERIOD, JobState, Limit, QueueLimits
from errands.store import Store
from errands.store.features import CONCURRENCY_RETRY

from .support import OTHER, OWNER, claim, claim_ids, count, enqueue, job, near, rows, within, xfail_on

MARIADB = ("mariadb", "mariadb-update")
PAD_SPACE = ("MariaDB compares VARCHAR keys with PAD SPACE even under utf8mb4_bin (the tables' collation): "
             "'k' and 'k ' are one key, so a unique key or concurrency group with trailing spaces is taken "
             "for the one without")
ROWCOUNT = ("MySQL's rowcount counts changed rows, not matched ones (PyMySQL connects without "
            "CLIENT.FOUND_ROWS): an UPDATE ... WHERE reserved_by = owner that writes the values the row "
            "already has reports 0, and the verb answers 'not yours'")


def _succeed(store: Store, owner: str, ids: list[int]) -> None:
    """End held runs as successes the way a worker does (through ``apply``, with their claimed flags)."""
    held = {r.id: r for r in store.jobs.list_jobs(limit=1000) if r.id in ids}
    settled = [Completed(i, held[i].flags, held[i].batch_id, encode_result(i), 60.0) for i in ids]
    assert store.endings.apply(owner, settled) == settled


# ---------------------------------------------------------------------------------- unique keys
def test_a_unique_key_returns_the_job_that_holds_it_while_it_waits_or_runs(store: Store) -> None:
    [first] = enqueue(store, unique_key="report")
    assert enqueue(store, unique_key="report") == [first]
    pair = store.jobs.enqueue([job(unique_key="pair"), job(unique_key="pair")])
    assert pair[0] == pair[1] and count(store, "jobs", "unique_key = {p}", ["pair"]) == 1
    claim(store)
    assert enqueue(store, unique_key="report") == [first]
    assert count(store, "jobs", "unique_key = {p}", ["report"]) == 1


def test_a_unique_key_is_free_once_its_job_ended(store: Store) -> None:
    [first] = enqueue(store, unique_key="k")
    claim(store)
    assert store.endings.complete(OWNER, [first]) == 1
    [second] = enqueue(store, unique_key="k")
    assert second != first and store.jobs.get_job(second).unique_key == "k"  # type: ignore[union-attr]


def test_a_unique_period_keeps_the_key_taken_after_the_job_ended(store: Store) -> None:
    [first] = enqueue(store, unique_key="daily", unique_for=3600.0, flags=FLAG_UNIQUE_PERIOD)
    claim(store)
    _succeed(store, OWNER, [first])
    assert store.jobs.get_job(first) is None
    assert enqueue(store, unique_key="daily", unique_for=3600.0, flags=FLAG_UNIQUE_PERIOD) == [first]


def test_a_retried_dead_job_leaves_its_unique_key_to_a_job_that_took_it(store: Store) -> None:
    [dead] = enqueue(store, unique_key="shared")
    assert store.endings.bury(None, dead, "E", "dead")
    [taker] = enqueue(store, unique_key="shared")
    assert taker != dead
    assert store.jobs.retry_failed([dead]) == [dead]
    assert store.jobs.get_job(dead).unique_key is None  # type: ignore[union-attr]
    assert enqueue(store, unique_key="shared") == [taker]


def test_unique_keys_are_compared_exactly_as_given(store: Store, backend: str, request: pytest.FixtureRequest) -> None:
    """Keys differing only in case or in trailing spaces are different keys (``core.jobs``: keys are
    stored and compared as given on every backend)."""
    xfail_on(request, backend, MARIADB, PAD_SPACE)
    ids = store.jobs.enqueue([job(unique_key=key) for key in ("key", "Key", "key ", "key  ")])
    assert len(set(ids)) == 4
    assert sorted(r.unique_key for r in store.jobs.list_jobs()) == ["Key", "key", "key ", "key  "]  # type: ignore[type-var]


# ---------------------------------------------------------------------------------- dependencies
def test_a_dependant_waits_blocked_until_its_dependency_succeeds(store: Store) -> None:
    [parent] = enqueue(store)
    [child] = store.jobs.enqueue([job("child", after=(parent,))])
    assert store.jobs.get_job(child).blocked_by == 1  # type: ignore[union-attr]
    assert claim_ids(store) == [parent]
    assert claim_ids(store) == []
    _succeed(store, OWNER, [parent])
    assert store.jobs.get_job(child).blocked_by is None  # type: ignore[union-attr]
    assert claim_ids(store) == [child]


def test_a_dependant_of_a_buried_job_stays_blocked(store: Store) -> None:
    [parent] = enqueue(store)
    [child] = store.jobs.enqueue([job(after=(parent,))])
    assert store.endings.bury(None, parent, "E", "dead")
    assert store.features.sweep_blocked() == 0
    assert store.jobs.get_job(child).blocked_by == 1  # type: ignore[union-attr]
    assert store.insights.dependencies_of(child) == [("failed", parent)]
    assert store.jobs.retry_failed([parent]) == [parent]
    claim(store)
    _succeed(store, OWNER, [parent])
    assert store.jobs.get_job(child).blocked_by is None  # type: ignore[union-attr]


def test_sweep_blocked_releases_a_dependant_whose_dependency_is_gone(store: Store) -> None:
    [parent] = enqueue(store)
    [child] = store.jobs.enqueue([job(after=(parent,))])
    claim(store)
    assert store.endings.complete(OWNER, [parent]) == 1  # the plain delete: no dependant counted off
    assert store.jobs.get_job(child).blocked_by == 1  # type: ignore[union-attr]
    assert store.features.sweep_blocked() == 1
    assert store.jobs.get_job(child).blocked_by is None  # type: ignore[union-attr]
    assert count(store, "dependencies") == 0


# ---------------------------------------------------------------------------------- batches
def test_a_batch_counts_its_members_and_enqueues_its_callback_once(store: Store) -> None:
    batch_id, members = store.features.create_batch("batch", [job("m"), job("m")], job("all-done"), job("a-failure"),
                                                    name="nightly")
    batch = store.features.get_batch(batch_id)
    assert batch is not None and (batch.kind, batch.name, batch.total, batch.done, batch.failed) == (
        "batch", "nightly", 2, 0, 0)
    assert [store.jobs.get_job(m).batch_id for m in members] == [batch_id, batch_id]  # type: ignore[union-attr]
    claim(store)
    for member in members:
        _succeed(store, OWNER, [member])
    batch = store.features.get_batch(batch_id)
    assert batch is not None and (batch.done, batch.failed, batch.finished) == (2, 0, True)
    assert batch.completed_at is not None and batch.failure_fired_at is None
    assert [(r.name, r.batch_id) for r in store.jobs.list_jobs()] == [("all-done", batch_id)]


def test_a_buried_batch_member_enqueues_the_failure_callback_once(store: Store) -> None:
    batch_id, members = store.features.create_batch("batch", [job("m"), job("m")], job("all-done"), job("a-failure"))
    for member in members:
        assert store.endings.bury(None, member, "E", "dead")
    batch = store.features.get_batch(batch_id)
    assert batch is not None and (batch.done, batch.failed) == (0, 2)
    assert batch.failure_fired_at is not None and batch.completed_at is not None
    assert sorted(r.name for r in store.jobs.list_jobs()) == ["a-failure", "all-done"]
    assert store.jobs.retry_failed([members[0]]) == [members[0]]  # pending again; the callbacks stay fired
    assert store.features.get_batch(batch_id).failed == 1  # type: ignore[union-attr]
    claim_ids(store, limit=10)
    _succeed(store, OWNER, [members[0]])
    batch = store.features.get_batch(batch_id)
    assert batch is not None and (batch.done, batch.failed) == (1, 1)
    assert sorted(r.name for r in store.jobs.list_jobs()) == ["a-failure", "all-done"]


# ---------------------------------------------------------------------------------- results and prune
def test_a_kept_result_expires_by_the_database_clock_and_prune_forgets_it(store: Store) -> None:
    [job_id] = enqueue(store, flags=FLAG_RESULT)
    claim(store)
    assert store.endings.apply(OWNER, [Completed(job_id, FLAG_RESULT, None, encode_result("v"), 0.05)])
    result = store.features.get_result(job_id)
    assert result is not None and result.result == "v"
    wait_for_db_clock(store, result.expires_at)
    assert store.features.prune(None)["results"] == 1
    assert store.features.get_result(job_id) is None


def test_prune_forgets_dead_letter_entries_older_than_the_ttl_with_their_history(store: Store) -> None:
    [old] = enqueue(store)
    assert store.endings.bury(None, old, "E", "old")
    wait_for_db_clock(store, store.jobs.get_failed(old).failed_at + timedelta(seconds=0.2))  # type: ignore[union-attr]
    [new] = enqueue(store)
    assert store.endings.bury(None, new, "E", "new")
    assert store.features.prune(0.1)["failed"] == 1
    assert [f.id for f in store.jobs.list_failed()] == [new]
    assert store.jobs.errors(old) == [] and len(store.jobs.errors(new)) == 1
    assert "failed" not in store.features.prune(None)


# ---------------------------------------------------------------------------------- cancel, progress
def test_cancel_ends_a_waiting_job_and_records_it(store: Store) -> None:
    [job_id] = enqueue(store)
    assert store.features.cancel(job_id, 60.0, message="no longer needed") == "cancelled"
    assert store.jobs.get_job(job_id) is None
    result = store.features.get_result(job_id)
    assert result is not None and (result.state, result.message) == (JobState.CANCELLED, "no longer needed")
    assert store.features.cancel(job_id, 60.0) == "gone"


def test_cancel_of_a_running_job_is_a_request_its_owner_reads(store: Store) -> None:
    [job_id] = enqueue(store)
    claim(store)
    assert store.features.cancel(job_id, 60.0, waiting_only=True) == "running"
    assert store.features.cancel_requested(job_id) is False
    assert store.features.cancel(job_id, 60.0) == "requested"
    assert store.features.cancel_requested(job_id) is True
    assert store.features.cancel_requests(OWNER) == [job_id] and store.features.cancel_requests(OTHER) == []
    row = store.jobs.get_job(job_id)
    assert row is not None and row.reserved_by == OWNER and row.cancel_requested_at is not None


def test_progress_is_written_only_by_the_owner(store: Store) -> None:
    [job_id] = enqueue(store)
    claim(store)
    assert store.features.set_progress(OTHER, job_id, 0.9, "not mine") is False
    assert store.features.set_progress(OWNER, job_id, 0.25, "x" * 300) is True
    row = store.jobs.get_job(job_id)
    assert row is not None and (row.progress, row.progress_message) == (0.25, "x" * 255)


def test_progress_written_again_unchanged_still_reports_the_owners_write(store: Store, backend: str,
                                                                         request: pytest.FixtureRequest) -> None:
    xfail_on(request, backend, MARIADB, ROWCOUNT)
    [job_id] = enqueue(store)
    claim(store)
    assert store.features.set_progress(OWNER, job_id, 0.5, "half") is True
    assert store.features.set_progress(OWNER, job_id, 0.5, "half") is True  # still held by its owner


# ---------------------------------------------------------------------------------- checkpoints
def test_a_checkpoint_is_written_only_by_the_runs_owner_and_returned_by_the_next_claim(store: Store) -> None:
    [job_id] = enqueue(store)
    [first] = claim(store)
    assert first.checkpoint is None and first.resumptions == 0
    assert store.features.set_checkpoint(OWNER, job_id, '{"after":1}') is True
    assert store.features.set_checkpoint(OWNER, job_id, '{"after":1}') is True  # unchanged: still the owner's
    assert store.features.set_checkpoint(OTHER, job_id, '{"after":2}') is False
    assert store.jobs.release(OWNER, [job_id]) == 1
    assert store.features.set_checkpoint(OWNER, job_id, '{"after":3}') is False  # no longer held
    [again] = claim(store)
    assert again.checkpoint == '{"after":1}'


# ---------------------------------------------------------------------------------- queues
def test_a_paused_queue_is_not_claimed_until_it_is_resumed(store: Store) -> None:
    [held] = enqueue(store)
    [elsewhere] = enqueue(store, queue="other")
    store.features.set_paused("default", True)
    assert store.features.paused_queues() == ["default"]
    assert claim_ids(store, queues=("default", "other")) == [elsewhere]
    store.features.set_paused("default", False)
    assert store.features.paused_queues() == []
    assert claim_ids(store) == [held]


def test_queue_limits_are_stored_and_removed(store: Store) -> None:
    store.features.set_queue_limits("q", QueueLimits(3, 10, 60.0))
    store.features.set_queue_limits("r", QueueLimits(None, 5, 1.5))
    assert store.features.queue_limits() == {"q": QueueLimits(3, 10, 60.0), "r": QueueLimits(None, 5, 1.5)}
    store.features.set_queue_limits("q", QueueLimits(None, None, None))
    assert store.features.queue_limits() == {"r": QueueLimits(None, 5, 1.5)}


def test_a_periodic_slot_is_enqueued_once_and_never_an_earlier_one(store: Store) -> None:
    now = store.now().replace(microsecond=0)
    first, second = now - timedelta(minutes=1), now
    assert store.features.claim_periodic_slot("every-minute", first, job("tick")) is None  # seen: starts next
    job_id = store.features.claim_periodic_slot("every-minute", second, job("tick"))
    assert job_id is not None and store.jobs.get_job(job_id).name == "tick"  # type: ignore[union-attr]
    assert store.features.claim_periodic_slot("every-minute", second, job("tick")) is None
    assert store.features.claim_periodic_slot("every-minute", first, job("tick")) is None
    assert near(store.features.periodic_slots()["every-minute"], second)
    assert count(store, "jobs") == 1


# ---------------------------------------------------------------------------------- admission
def test_admission_grants_a_concurrency_limit_and_gives_the_rest_back(store: Store) -> None:
    a, b = enqueue(store, 2, concurrency_key="g")
    claim(store)
    limit = [Limit("concurrency", "g", 1)]
    before = store.now()
    decision = store.features.admission(OWNER, [(a, limit), (b, limit)])
    after = store.now()
    assert decision.admitted == [a] and list(decision.waits) == [b]
    assert store.insights.group_running("g") == 1
    admitted, refused = store.jobs.get_job(a), store.jobs.get_job(b)
    assert admitted.reserved_by == OWNER and admitted.admitted_at is not None  # type: ignore[union-attr]
    assert (refused.reserved_by, refused.attempts, refused.admitted_at) == (None, 0, None)  # type: ignore[union-attr]
    retry = timedelta(seconds=CONCURRENCY_RETRY)
    assert within(refused.available_at, before + retry, after + retry)  # type: ignore[union-attr]
    assert store.features.wake_group_waiters({"g": 1}) == 1
    assert store.jobs.get_job(b).available_at <= store.now()  # type: ignore[union-attr]
    assert store.features.wake_group_waiters({}) == 0


def test_admission_holds_a_rate_limit_over_its_window(store: Store) -> None:
    ids = enqueue(store, 3)
    claim(store)
    limit = [Limit("rate", "r", 2, 60.0)]
    before = store.now()
    decision = store.features.admission(OWNER, [(i, limit) for i in ids])
    after = store.now()
    assert decision.admitted == ids[:2] and list(decision.waits) == [ids[2]]
    assert store.insights.rate_starts("r", 60.0) == 2
    refused = store.jobs.get_job(ids[2])
    assert refused is not None and (refused.reserved_by, refused.attempts) == (None, 0)
    window = timedelta(seconds=60)
    assert within(refused.available_at, before + window, after + window, slack=timedelta(milliseconds=50))
    assert store.features.admission(OWNER, []).admitted == []


def test_each_rate_key_has_its_own_window_and_cost_counts_in_it(store: Store) -> None:
    # 3 units a minute per key: key "a" fits a cost-2 and a cost-1 run, key "b" only its first cost-2
    # run (a shared window would have refused the "b" runs); a run without a key counts in the job's
    # own window, untouched by both.
    rate = RateLimit(3, 60.0)
    ids = store.jobs.enqueue([job(rate_key="a", cost=2), job(rate_key="b", cost=2), job(rate_key="a"),
                              job(rate_key="b", cost=2), job()])
    claimed = claim(store)
    assert [(c.id, c.rate_key) for c in claimed] == list(zip(ids, ["a", "b", "a", "b", None], strict=True))
    decision = store.features.admission(OWNER, [(c.id, [Limit.rate(c.name, c.rate_key, rate)]) for c in claimed])
    assert decision.admitted == [ids[0], ids[1], ids[2], ids[4]] and list(decision.waits) == [ids[3]]
    windows = {key: rate_window("contract.job", key) for key in ("a", "b", None)}
    assert windows[None] == "contract.job" and len(set(windows.values())) == 3
    assert [store.insights.rate_starts(windows[k], 60.0) for k in ("a", "b", None)] == [2, 1, 1]  # rows
    units = rows(store, "SELECT name, SUM(COALESCE(units, 1)) AS n FROM {rate_starts} GROUP BY name")
    assert {r["name"]: int(r["n"]) for r in units} == {windows["a"]: 3, windows["b"]: 2, windows[None]: 1}
    # The refused run waits for its key's window; its key stays with it, through the dead letter too.
    assert store.jobs.get_job(ids[3]).rate_key == "b"  # type: ignore[union-attr]
    assert store.endings.bury(OWNER, ids[1], "E", "gone")
    assert store.jobs.get_failed(ids[1]).rate_key == "b"  # type: ignore[union-attr]
    assert store.jobs.retry_failed([ids[1]]) and store.jobs.get_job(ids[1]).rate_key == "b"  # type: ignore[union-attr]


def test_prune_forgets_the_starts_of_passed_windows_and_keeps_the_live_ones(store: Store) -> None:
    # Keys that fall idle leave the rate table: a start is deleted once its window has passed.
    short, long = RateLimit(5, 0.2), RateLimit(5, 60.0)
    ids = store.jobs.enqueue([job(rate_key=f"customer-{n}") for n in range(3)] + [job(rate_key="live")])
    claimed = claim(store)
    limits = [Limit.rate(c.name, c.rate_key, long if c.rate_key == "live" else short) for c in claimed]
    assert store.features.admission(OWNER, [(c.id, [lim]) for c, lim in zip(claimed, limits, strict=True)]
                                    ).admitted == ids
    assert count(store, "rate_starts") == 4
    wait_for_db_clock(store, store.now() + timedelta(seconds=0.25))
    assert store.features.prune(None)["rate_starts"] == 0  # kept a while after their window passed
    assert store.features.prune(None, rate_keep=0)["rate_starts"] == 3
    assert [r["name"] for r in rows(store, "SELECT name FROM {rate_starts}")] == [limits[3].name]
    assert store.features.prune(None, rate_keep=0)["rate_starts"] == 0


def test_concurrency_groups_are_compared_exactly_as_given(store: Store, backend: str,
                                                          request: pytest.FixtureRequest) -> None:
    """Groups whose keys differ only in trailing spaces are different groups, each with its own limit."""
    xfail_on(request, backend, MARIADB, PAD_SPACE)
    keys = ["grp", "grp "]
    ids = store.jobs.enqueue([job(concurrency_key=key) for key in keys])
    claim(store)
    for job_id, key in zip(ids, keys, strict=True):  # one after the other: the first runs when the second asks
        decision = store.features.admission(OWNER, [(job_id, [Limit("concurrency", key, 1)])])
        assert decision.admitted == [job_id] and decision.waits == {}
    assert [store.insights.group_running(key) for key in keys] == [1, 1]


# ---------------------------------------------------------------------------------- workers
def test_a_worker_registers_heartbeats_and_unregisters(store: Store) -> None:
    before = store.now()
    store.workers.register("w1", "host", 123, ["a", "b"], 4, lease=30.0, heartbeat_every=10.0)
    after = store.now()
    [row] = store.workers.list_workers()
    assert (row.id, row.hostname, row.pid, row.queues, row.concurrency, row.jobs_done, row.lease,
            row.heartbeat_every) == ("w1", "host", 123, "a,b", 4, 0, 30.0, 10.0)
    assert within(row.started_at, before, after) and near(row.heartbeat_at, row.started_at)
    wait_for_db_clock(store, row.heartbeat_at)
    store.workers.heartbeat("w1", 17)
    [beat] = store.workers.list_workers()
    assert beat.jobs_done == 17 and beat.heartbeat_at > row.heartbeat_at and beat.started_at == row.started_at
    store.workers.unregister("w1")
    assert store.workers.list_workers() == []


def test_prune_forgets_workers_whose_heartbeat_is_too_old(store: Store) -> None:
    store.workers.register("old", "host", 1, ["default"], 1)
    [old] = store.workers.list_workers()
    wait_for_db_clock(store, old.heartbeat_at + timedelta(seconds=0.5))
    store.workers.register("new", "host", 2, ["default"], 1)
    assert store.workers.prune(0.4) == 1
    assert [w.id for w in store.workers.list_workers()] == ["new"]


# ---------------------------------------------------------------------------------- workflows
def test_a_workflow_reads_each_steps_state_where_its_job_is_and_cancels_the_waiting_ones(store: Store) -> None:
    batch_id, (running, dead, waiting) = store.features.create_batch(
        "batch", [job("one"), job("two"), job("three")], None, None)
    assert claim_ids(store, limit=1) == [running]
    assert store.endings.bury(None, dead, "E", "broke")
    flow = store.workflows.get(batch_id)
    assert flow is not None and flow.batch.id == batch_id
    assert [(s.job_id, s.label, s.state) for s in flow.steps] == [
        (running, "one", JobState.RUNNING), (dead, "two", JobState.FAILED), (waiting, "three", JobState.READY)]
    assert flow.steps[1].error == "E: broke"
    assert store.workflows.batch_of(dead).id == batch_id  # type: ignore[union-attr]
    assert store.workflows.with_dead_steps([batch_id, batch_id + 1]) == {batch_id}
    assert [b.id for b in store.workflows.recent()] == [batch_id]
    assert store.workflows.cancel(batch_id, 60.0) == 1
    assert [s.state for s in store.workflows.get(batch_id).steps] == [  # type: ignore[union-attr]
        JobState.RUNNING, JobState.FAILED, JobState.CANCELLED]
    assert store.workflows.get(batch_id + 1) is None
