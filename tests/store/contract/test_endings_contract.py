"""``store.endings``: how attempts end (complete, the five settlements, bury, end_held, recover_stale),
on every backend.  Every ending is conditional on the run still being its worker's."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from helpers import scaled, wait_for_db_clock

from errands.core.columns import DEAD, JOBS
from errands.core.endings import (
    Buried,
    CancelledRun,
    Completed,
    Result,
    Resumed,
    RetryAt,
    RunOutcome,
    Settlement,
    Snoozed,
)
from errands.core.payload import encode_result
from errands.core.rows import FLAG_RESULT, ClaimedJob, JobState
from errands.store import Store, open_store
from errands.store.endings import LOST_DEAD_MESSAGE, LOST_MESSAGE

from .support import OTHER, OWNER, Policies, claim, claim_ids, count, enqueue, job, near, raw, within


def _expire(store: Store, ids: list[int]) -> None:
    """Wait until the leases of ``ids`` have lapsed by the database's clock."""
    ends = [store.jobs.get_job(job_id).reserved_until for job_id in ids]  # type: ignore[union-attr]
    wait_for_db_clock(store, max(ends))  # type: ignore[type-var]


def _leftovers(store: Store) -> tuple[int, int, int]:
    """Rows in the dead letter, the results and the error history."""
    return count(store, "failed"), count(store, "results"), count(store, "job_errors")


# ---------------------------------------------------------------------------------- complete
def test_complete_deletes_only_the_runs_the_owner_holds(store: Store) -> None:
    a, b, c = enqueue(store, 3)
    claim(store, limit=2)
    claim(store, OTHER)
    assert store.endings.complete(OWNER, [a, b, c]) == 2
    assert store.jobs.get_job(a) is None and store.jobs.get_job(b) is None
    assert store.jobs.get_job(c).reserved_by == OTHER  # type: ignore[union-attr]
    assert store.endings.complete(OWNER, []) == 0
    assert _leftovers(store) == (0, 0, 0)


# ---------------------------------------------------------------------------------- a non-owner
SETTLEMENTS = {
    "completed": lambda job_id: Completed(job_id, FLAG_RESULT, None, encode_result(1), 60.0),
    "retry_at": lambda job_id: RetryAt(job_id, 1, 0.0, "E", "failed"),
    "snoozed": lambda job_id: Snoozed(job_id, 0.0),
    "buried": lambda job_id: Buried(job_id, 1, "E", "dead"),
    "cancelled": lambda job_id: CancelledRun(job_id, "stopped", 60.0),
}


@pytest.mark.parametrize("kind", list(SETTLEMENTS))
def test_a_settlement_by_another_owner_changes_nothing(store: Store, kind: str) -> None:
    [job_id] = enqueue(store, flags=FLAG_RESULT)
    claim(store)
    before = raw(store, "jobs", JOBS, job_id)
    assert store.endings.apply(OTHER, [SETTLEMENTS[kind](job_id)]) == []
    assert raw(store, "jobs", JOBS, job_id) == before
    assert _leftovers(store) == (0, 0, 0)


def test_a_run_whose_lease_lapsed_and_was_claimed_again_is_not_its_old_owners(store: Store) -> None:
    [job_id] = enqueue(store)
    claim(store, lease=0.05)
    _expire(store, [job_id])
    assert store.endings.recover_stale(Policies()).released == [job_id]
    assert claim_ids(store, OTHER) == [job_id]
    assert store.endings.complete(OWNER, [job_id]) == 0
    assert store.endings.apply(OWNER, [Buried(job_id, 1, "E", "late")]) == []
    assert store.jobs.get_job(job_id).reserved_by == OTHER  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- each settlement
def test_completed_deletes_the_run_and_keeps_its_result_when_asked(store: Store) -> None:
    plain, kept = store.jobs.enqueue([job(), job("kept", flags=FLAG_RESULT, label="lbl")])
    claim(store)
    settled = [Completed(plain, 0, None, None, 60.0), Completed(kept, FLAG_RESULT, None, encode_result({"x": [1]}),
                                                                  90.0)]
    before = store.now()
    assert store.endings.apply(OWNER, settled) == settled
    after = store.now()
    assert store.jobs.get_job(plain) is None and store.jobs.get_job(kept) is None
    assert store.features.get_result(plain) is None
    result = store.features.get_result(kept)
    assert result is not None
    assert (result.id, result.name, result.state, result.result, result.attempts, result.label) == (
        kept, "kept", JobState.SUCCEEDED, {"x": [1]}, 1, "lbl")
    assert within(result.finished_at, before, after)
    assert near(result.expires_at, result.finished_at + timedelta(seconds=90))


def test_retry_at_puts_the_run_back_after_its_delay_by_the_database_clock(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=3)
    claim(store)
    before = store.now()
    assert store.endings.apply(OWNER, [RetryAt(job_id, 1, 120.0, "ValueError", "bad", "tb")])
    after = store.now()
    row = store.jobs.get_job(job_id)
    assert row is not None
    assert (row.reserved_by, row.reserved_at, row.reserved_until, row.attempts) == (None, None, None, 1)
    assert row.last_error == "ValueError: bad"
    assert within(row.available_at, before + timedelta(seconds=120), after + timedelta(seconds=120))
    [entry] = store.jobs.errors(job_id)
    assert (entry.attempt, entry.error_type, entry.error_message, entry.traceback) == (1, "ValueError", "bad", "tb")


def test_snoozed_gives_the_attempt_back_and_counts_a_snooze(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=1)
    [claimed] = claim(store)
    assert (claimed.attempts, claimed.snoozes) == (1, 0)
    before = store.now()
    assert store.endings.apply(OWNER, [Snoozed(job_id, 60.0)])
    after = store.now()
    row = store.jobs.get_job(job_id)
    assert row is not None
    assert (row.reserved_by, row.attempts, row.snoozes, row.last_error) == (None, 0, 1, None)
    assert within(row.available_at, before + timedelta(seconds=60), after + timedelta(seconds=60))
    assert store.jobs.errors(job_id) == []


def test_resumed_gives_the_attempt_back_counts_a_resumption_and_keeps_the_checkpoint(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=1)
    claim(store)
    assert store.features.set_checkpoint(OWNER, job_id, '{"after":7}')
    before = store.now()
    assert store.endings.apply(OTHER, [Resumed(job_id)]) == []  # not OTHER's run: nothing changes
    assert store.endings.apply(OWNER, [Resumed(job_id)]) == [Resumed(job_id)]
    row = store.jobs.get_job(job_id)
    assert row is not None and row.available_at <= store.now()
    assert (row.reserved_by, row.attempts, row.resumptions, row.checkpoint) == (None, 0, 1, '{"after":7}')
    assert row.available_at >= before - timedelta(seconds=1) and store.jobs.errors(job_id) == []
    [again] = claim(store)
    assert (again.attempts, again.resumptions, again.checkpoint) == (1, 1, '{"after":7}')


def test_buried_moves_the_run_to_the_dead_letter_in_one_piece(store: Store) -> None:
    [job_id] = store.jobs.enqueue([job("doomed", "q", payload='{"args":["x"],"kwargs":{}}', priority=7,
                                       max_attempts=1, timeout=2.5, unique_key="bk", concurrency_key="cg",
                                       flags=FLAG_RESULT, label="lab", cost=4)])
    claim(store, queues=("q",))
    kept = raw(store, "jobs", DEAD, job_id)
    before = store.now()
    assert store.endings.apply(OWNER, [Buried(job_id, 1, "errands.Boom", "it broke", "Traceback ...")])
    after = store.now()
    assert store.jobs.get_job(job_id) is None
    assert raw(store, "failed", DEAD, job_id) == kept
    entry = store.jobs.get_failed(job_id)
    assert entry is not None and (entry.error_type, entry.error_message) == ("errands.Boom", "it broke")
    assert within(entry.failed_at, before, after)
    [history] = store.jobs.errors(job_id)
    assert (history.attempt, history.traceback) == (1, "Traceback ...")


def test_cancelled_deletes_the_run_and_records_the_cancellation(store: Store) -> None:
    [job_id] = enqueue(store)
    claim(store)
    assert store.endings.apply(OWNER, [CancelledRun(job_id, "stopped by request", 60.0)])
    assert store.jobs.get_job(job_id) is None and store.jobs.get_failed(job_id) is None
    result = store.features.get_result(job_id)
    assert result is not None and (result.state, result.message, result.result) == (
        JobState.CANCELLED, "stopped by request", None)


def test_apply_returns_the_settlements_that_applied_in_one_call(store: Store) -> None:
    mine_a, mine_b, theirs = enqueue(store, 3, max_attempts=3)
    claim(store, limit=2)
    claim(store, OTHER)
    settlements: list[Settlement] = [Completed(mine_a, 0, None, None, 60.0), RetryAt(theirs, 1, 0.0, "E", "x"),
                                     RetryAt(mine_b, 1, 0.0, "E", "y")]
    assert store.endings.apply(OWNER, settlements) == [settlements[0], settlements[2]]
    assert store.endings.apply(OWNER, []) == []
    assert store.jobs.get_job(theirs).reserved_by == OTHER  # type: ignore[union-attr]


def test_error_texts_are_made_storable_and_capped_alike(store: Store) -> None:
    """NUL and lone surrogates become U+FFFD, messages keep 2,000 characters (multi-byte ones too) and
    error types 255, whatever the database."""
    message = "\x00nul \ud800 lone " + "\u00e9" * 5000
    stored = ("\ufffdnul \ufffd lone " + "\u00e9" * 5000)[:2000]
    retried, buried = enqueue(store, 2, max_attempts=3)
    claim(store)
    assert len(store.endings.apply(OWNER, [RetryAt(retried, 1, 0.0, "Retry", message),
                                           Buried(buried, 1, "Ty\x00pe" + "x" * 300, message)])) == 2
    assert store.jobs.get_job(retried).last_error == ("Retry: " + stored)[:2000]  # type: ignore[union-attr]
    entry = store.jobs.get_failed(buried)
    assert entry is not None and (entry.error_type, entry.error_message) == (("Ty\ufffdpe" + "x" * 300)[:255], stored)
    for job_id in (retried, buried):
        [history] = store.jobs.errors(job_id)
        assert history.error_message == stored and "\x00" not in history.error_type


# ---------------------------------------------------------------------------------- bury
def test_bury_takes_a_held_job_and_with_no_owner_a_waiting_one(store: Store) -> None:
    held, theirs, waiting = enqueue(store, 3)
    claim(store, limit=1)
    claim(store, OTHER, limit=1)
    assert store.endings.bury(OWNER, held, "E", "held") is True
    assert store.endings.bury(OWNER, theirs, "E", "not mine") is False
    assert store.endings.bury(OWNER, waiting, "E", "not held") is False
    assert store.endings.bury(None, waiting, "E", "waiting") is True
    assert store.endings.bury(None, held + 1000, "E", "unknown") is False
    assert [f.id for f in store.jobs.list_failed()] == [waiting, held]
    assert store.jobs.get_job(theirs).reserved_by == OTHER  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- end_held
def _worker_died(row: ClaimedJob) -> RunOutcome:
    return RunOutcome(row, Result.ERROR, 0.0, "errands.WorkerDied", "its process died")


def test_end_held_decides_and_applies_each_held_run_by_its_policy(store: Store) -> None:
    [retried] = enqueue(store, max_attempts=3)
    [exhausted] = enqueue(store, max_attempts=1)
    [theirs] = enqueue(store, max_attempts=1)
    claim(store, limit=2)
    claim(store, OTHER)
    ended = store.endings.end_held(OWNER, [retried, exhausted, theirs], _worker_died, Policies())
    decided = {row.id: settlement for row, settlement in ended}
    assert sorted(decided) == [retried, exhausted]
    assert isinstance(decided[retried], RetryAt) and isinstance(decided[exhausted], Buried)
    row = store.jobs.get_job(retried)
    assert row is not None and (row.reserved_by, row.attempts) == (None, 1)
    assert row.last_error == "errands.WorkerDied: its process died"
    assert store.jobs.get_failed(exhausted).error_type == "errands.WorkerDied"  # type: ignore[union-attr]
    assert store.jobs.get_job(theirs).reserved_by == OTHER  # type: ignore[union-attr]
    assert store.endings.end_held(OWNER, [], _worker_died, Policies()) == []


# ---------------------------------------------------------------------------------- recover_stale
def test_recover_stale_releases_expired_leases_and_buries_exhausted_ones(store: Store) -> None:
    [released] = enqueue(store, max_attempts=3)
    [buried] = enqueue(store, max_attempts=1)
    [alive] = enqueue(store, max_attempts=1)
    claim(store, limit=2, lease=0.05)
    claim(store, OTHER, lease=300.0)
    _expire(store, [released, buried])
    report = store.endings.recover_stale(Policies())
    now = store.now()
    assert (report.released, report.buried) == ([released], [buried])
    assert sorted(row.id for row, _ in report.ended) == [released, buried]
    row = store.jobs.get_job(released)
    assert row is not None and (row.reserved_by, row.reserved_until, row.attempts) == (None, None, 1)
    assert row.last_error == f"errands.LeaseExpired: {LOST_MESSAGE}" and row.available_at <= now
    entry = store.jobs.get_failed(buried)
    assert entry is not None and (entry.error_type, entry.error_message, entry.attempts) == (
        "errands.LeaseExpired", LOST_DEAD_MESSAGE, 1)
    assert store.jobs.get_job(alive).reserved_by == OTHER  # type: ignore[union-attr]
    assert store.endings.recover_stale(Policies()).ended == []


def test_recover_stale_ends_only_the_given_jobs(store: Store) -> None:
    a, b = enqueue(store, 2)
    claim(store, lease=0.05)
    _expire(store, [a, b])
    assert store.endings.recover_stale(Policies(), []).ended == []
    assert store.endings.recover_stale(Policies(), [a]).released == [a]
    assert store.jobs.get_job(b).reserved_by == OWNER  # type: ignore[union-attr]


def test_attempts_counted_at_claim_bring_a_job_whose_worker_always_dies_to_the_dead_letter(store: Store) -> None:
    [job_id] = enqueue(store, max_attempts=2)
    for attempt in (1, 2):
        [claimed] = claim(store, lease=0.05)
        assert claimed.attempts == attempt
        _expire(store, [job_id])
        report = store.endings.recover_stale(Policies())
        assert (report.released, report.buried) == (([job_id], []) if attempt == 1 else ([], [job_id]))
    assert store.jobs.get_job(job_id) is None
    assert store.jobs.get_failed(job_id).attempts == 2  # type: ignore[union-attr]
    assert [e.attempt for e in store.jobs.errors(job_id)] == [1, 2]


def test_recoveries_running_at_once_end_each_stale_run_once(store: Store) -> None:
    ids = enqueue(store, 30, max_attempts=1)
    claim(store, lease=0.05)
    _expire(store, ids)
    stores = [open_store(store.url) for _ in range(3)]
    start = threading.Barrier(len(stores))
    buried: list[list[int]] = []

    def recover(own: Store) -> None:
        start.wait(timeout=scaled(10))
        buried.append(own.endings.recover_stale(Policies()).buried)

    threads = [threading.Thread(target=recover, args=(s,)) for s in stores]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(scaled(60))
    finally:
        for s in stores:
            s.close()
    assert sorted(job_id for each in buried for job_id in each) == ids  # each once, by one of them
    assert count(store, "jobs") == 0 and count(store, "failed") == 30 and count(store, "job_errors") == 30
