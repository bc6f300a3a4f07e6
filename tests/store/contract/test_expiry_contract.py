"""Expiry and deadlines as the store keeps them (issue 25, points 1 and 6): the claim refuses a job past
either by the database's clock, the maintenance pass ends such waiting jobs (expired, or
DeadlineExceeded) into the dead letter, and the times survive every insert path."""

from __future__ import annotations

from datetime import timedelta

from errands.core.rows import FLAG_DEADLINE
from errands.store import Store

from .support import claim_ids, enqueue, near


def test_the_claim_refuses_jobs_past_their_expiry_or_deadline_and_the_pass_ends_them(store: Store) -> None:
    now = store.now()  # the database's clock: the claim compares with it, never with this host's
    past, future = now - timedelta(seconds=5), now + timedelta(hours=1)
    [gone] = enqueue(store, expires_at=past)
    [late] = enqueue(store, deadline_at=past, flags=FLAG_DEADLINE)
    [fresh] = enqueue(store, expires_at=future, deadline_at=future, flags=FLAG_DEADLINE)
    [plain] = enqueue(store)
    assert sorted(claim_ids(store)) == sorted([fresh, plain])
    assert claim_ids(store) == [], "no later claim takes them either"
    left = store.endings.deadlines([fresh, plain])
    assert list(left) == [fresh] and 3590 < left[fresh] <= 3600
    ended = store.endings.end_overdue()
    assert sorted((row.id, s.error_type) for row, s in ended) == sorted(
        [(gone, "errands.JobExpired"), (late, "errands.DeadlineExceeded")])
    assert store.jobs.get_job(gone) is None and store.jobs.get_failed(gone).error_type == "errands.JobExpired"
    assert store.jobs.get_failed(late).error_type == "errands.DeadlineExceeded"
    assert store.jobs.get_job(fresh) is not None, "a running job is no business of the pass"
    assert store.endings.end_overdue() == []


def test_expiry_and_deadline_times_survive_every_insert_path(store: Store) -> None:
    moment = store.now() + timedelta(minutes=5)
    for count in (1, 3, 250):  # one row, multi-row, and PostgreSQL's COPY / MySQL's rendered rows
        ids = enqueue(store, count, expires_at=moment, deadline_at=moment, flags=FLAG_DEADLINE)
        for job_id in (ids[0], ids[-1]):
            row = store.jobs.get_job(job_id)
            assert row is not None and near(row.expires_at, moment) and near(row.deadline_at, moment), count
