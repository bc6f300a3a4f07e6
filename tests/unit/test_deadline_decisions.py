"""Deadlines across retries decided by the one owner of endings (issue 25, point 6): pure, no database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from errands.core.endings import Buried, Completed, Result, RetryAt, RunOutcome, Snoozed, decide, expired, overdue
from errands.core.errors import ConfigurationError, InvalidOption, Snooze
from errands.core.jobs import JobOptions, JobSpec
from errands.core.retry import DEFAULT_POLICY, JobPolicy
from errands.core.rows import FLAG_DEADLINE, ClaimedJob, JobState, dead_state

POLICY = JobPolicy(lambda attempt: 10.0 * attempt, DEFAULT_POLICY, 60.0, 30.0, False)
MOMENT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def row(attempts: int = 1) -> ClaimedJob:
    return ClaimedJob(7, "q", "job", '{"args":[],"kwargs":{}}', 0, attempts, 5, None, "w", flags=FLAG_DEADLINE)


def ended(result: Result, left: float | None, attempts: int = 1, delay: float | None = None) -> RunOutcome:
    exc = Snooze(delay or 0) if result is Result.SNOOZED else None
    return RunOutcome(row(attempts), result, 0.0, "ValueError", "boom", exc, retry_delay=delay, deadline_in=left)


def test_a_retry_that_would_start_after_the_deadline_is_buried_as_deadline_exceeded():
    assert decide(ended(Result.ERROR, 11.0), POLICY) == RetryAt(7, 1, 10.0, "ValueError", "boom")
    buried = decide(ended(Result.ERROR, 9.0), POLICY)
    assert isinstance(buried, Buried) and buried.error_type == "errands.DeadlineExceeded"
    assert "next attempt would start in 10.0s" in buried.error_message and "ValueError: boom" in buried.error_message
    late = decide(ended(Result.ERROR, -3.0, attempts=2), POLICY)
    assert isinstance(late, Buried) and "deadline has passed" in late.error_message and late.attempt == 2


def test_the_deadline_bounds_a_requested_retry_a_snooze_and_a_lost_run_but_not_a_success():
    assert isinstance(decide(ended(Result.ERROR, 100.0, delay=500.0), POLICY), Buried)
    assert decide(ended(Result.SNOOZED, 100.0, delay=50.0), POLICY) == Snoozed(7, 50.0)
    assert decide(ended(Result.SNOOZED, 100.0, delay=150.0), POLICY).error_type == "errands.DeadlineExceeded"
    assert decide(ended(Result.LOST, 5.0), POLICY).delay == 0.0
    assert decide(ended(Result.LOST, 0.0), POLICY).error_type == "errands.DeadlineExceeded"
    assert isinstance(decide(ended(Result.OK, -1.0), POLICY), Completed)
    assert decide(ended(Result.ERROR, None), POLICY) == RetryAt(7, 1, 10.0, "ValueError", "boom"), "no deadline"


def test_the_last_attempt_is_buried_with_its_own_error_whatever_the_deadline():
    assert decide(ended(Result.ERROR, 1.0, attempts=5), POLICY).error_type == "ValueError"


def test_waiting_jobs_past_their_expiry_or_deadline_end_with_their_reason():
    gone = expired(row(0), MOMENT)
    assert gone.error_type == "errands.JobExpired" and "2030-01-02 03:04:05 UTC" in gone.error_message
    assert dead_state(gone.error_type, gone.error_message) is JobState.EXPIRED
    # A handler that let another job's JobExpired (from its result()) escape failed; it did not expire.
    assert dead_state("errands.JobExpired", "job 5 (quote) expired before it started: ...") is JobState.FAILED
    late = overdue(row(1), MOMENT, "ValueError: boom")
    assert late.error_type == "errands.DeadlineExceeded" and late.error_message.endswith("ValueError: boom")


def test_expiry_and_deadline_options_are_checked_and_resolved_at_enqueue():
    options = JobOptions(expires_in=60.0, deadline=3600, delay=10.0).validated()
    assert options.expiry_and_deadline() == (70.0, 3600.0), "seconds after the insert, by the database's clock"
    assert JobOptions(expires_in=5, run_at=MOMENT).expiry_and_deadline()[0] == MOMENT + timedelta(seconds=5)
    assert JobOptions(expires_at=MOMENT, deadline=MOMENT).validated().expiry_and_deadline() == (MOMENT, MOMENT)
    for bad in ({"expires_in": 0}, {"expires_in": True}, {"expires_at": datetime(2030, 1, 1)}, {"deadline": -1},
                {"deadline": "soon"}):
        with pytest.raises(InvalidOption):
            JobOptions(**bad).validated()  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        JobSpec(deadline=0)
