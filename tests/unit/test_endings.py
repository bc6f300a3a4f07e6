"""The one decision of how an attempt ends (errands.core.endings.decide): pure, so tested without a database."""

from __future__ import annotations

from errands.core.endings import Buried, CancelledRun, Completed, Result, RetryAt, RunOutcome, Snoozed, decide
from errands.core.errors import Discard, JobTimeout, Retry, Snooze
from errands.core.retry import DEFAULT_POLICY, JobPolicy, RetryPolicy
from errands.core.rows import FLAG_RESULT, FLAG_WORKFLOW, ClaimedJob

POLICY = JobPolicy(lambda attempt: 10.0 * attempt, DEFAULT_POLICY, 60.0, 30.0, False)


def row(attempts: int = 1, max_attempts: int = 3, flags: int = 0, snoozes: int = 0) -> ClaimedJob:
    return ClaimedJob(7, "q", "job", '{"args":[],"kwargs":{}}', 0, attempts, max_attempts, None, "w",
                      flags=flags, snoozes=snoozes)


def failed(r: ClaimedJob, exc: BaseException | None = None, result: Result = Result.ERROR, **kw: object) -> RunOutcome:
    return RunOutcome(r, result, 0.0, type(exc).__name__ if exc else "E", str(exc) if exc else "boom", exc, **kw)


def test_a_success_completes_and_keeps_its_result_only_when_asked():
    assert decide(RunOutcome(row(), Result.OK, 0.0, value={"a": 1}), POLICY) == Completed(7, 0, None, None, 60.0)
    kept = decide(RunOutcome(row(flags=FLAG_RESULT), Result.OK, 0.0, value={"a": 1}), POLICY)
    assert isinstance(kept, Completed) and kept.result == '{"a":1}' and kept.result_ttl == 60.0


def test_a_result_json_cannot_hold_is_kept_as_null_but_buries_a_workflow_step():
    kept = decide(RunOutcome(row(flags=FLAG_RESULT), Result.OK, 0.0, value=object()), POLICY)
    assert isinstance(kept, Completed) and kept.result is None and kept.unstorable
    step = decide(RunOutcome(row(flags=FLAG_RESULT | FLAG_WORKFLOW), Result.OK, 0.0, value=object()), POLICY)
    assert isinstance(step, Buried) and step.error_type == "errands.ResultNotJSON"


def test_a_failure_retries_after_the_backoff_while_attempts_are_left_then_is_buried():
    assert decide(failed(row(1)), POLICY) == RetryAt(7, 1, 10.0, "E", "boom")
    assert decide(failed(row(2)), POLICY).delay == 20.0
    assert decide(failed(row(3)), POLICY) == Buried(7, 3, "E", "boom")


def test_the_handlers_requested_delay_and_the_jobs_retry_rules_win():
    assert decide(failed(row(), Retry(delay=2), retry_delay=2.0), POLICY).delay == 2.0
    assert isinstance(decide(failed(row(), Discard("never")), POLICY), Buried)
    strict = JobPolicy(None, RetryPolicy(retry_on=(ConnectionError,)), 60.0, 30.0, False)
    assert isinstance(decide(failed(row(), ValueError("x")), strict), Buried)
    assert isinstance(decide(failed(row(), JobTimeout("slow")), strict), Buried)
    assert decide(failed(row(), ConnectionError("x")), strict).delay == 0.0


def test_a_fatal_run_is_buried_on_its_first_attempt():
    assert isinstance(decide(failed(row(1), result=Result.FATAL), POLICY), Buried)


def test_a_lost_run_comes_back_at_once_then_is_buried_with_its_dead_message():
    lost = RunOutcome(row(1), Result.LOST, 0.0, "errands.LeaseExpired", "lapsed", dead_message="lapsed, none left")
    assert decide(lost, POLICY) == RetryAt(7, 1, 0.0, "errands.LeaseExpired", "lapsed")
    assert decide(lost._replace(row=row(3)), POLICY) == Buried(7, 3, "errands.LeaseExpired", "lapsed, none left")


def test_a_snooze_gives_its_attempt_back_until_the_policy_says_no_more():
    snooze = RunOutcome(row(3, snoozes=0), Result.SNOOZED, 0.0, "errands.Snooze", "later", Snooze(30))
    assert decide(snooze, POLICY) == Snoozed(7, 30.0)
    limited = JobPolicy(None, RetryPolicy(max_snoozes=1), 60.0, 30.0, False)
    buried = decide(snooze._replace(row=row(3, snoozes=1)), limited)
    assert isinstance(buried, Buried) and buried.error_type == "errands.SnoozeLimit"


def test_a_cancelled_run_is_recorded_for_the_apps_record_ttl():
    assert decide(failed(row(), result=Result.CANCELLED), POLICY) == CancelledRun(7, "boom", 30.0)


def test_kept_tracebacks_ride_the_settlement():
    try:
        raise ValueError("with a traceback")
    except ValueError as exc:
        error = exc
    keeping = JobPolicy(None, DEFAULT_POLICY, 60.0, 30.0, True)
    settled = decide(failed(row(), error), keeping)
    assert isinstance(settled, RetryAt) and settled.traceback and "with a traceback" in settled.traceback


def test_a_backoff_that_raises_buries_the_job_instead_of_failing_the_caller():
    broken = JobPolicy(lambda attempt: 1 / 0, DEFAULT_POLICY, 60.0, 30.0, False)
    settled = decide(failed(row(1)), broken)
    assert isinstance(settled, Buried) and settled.error_type == "errands.SettleError"
    assert "ZeroDivisionError" in settled.error_message and "E: boom" in settled.error_message


def test_a_snooze_count_that_is_no_number_buries_the_job_instead_of_failing_the_caller():
    snooze = RunOutcome(row(1)._replace(snoozes="many"), Result.SNOOZED, 0.0, "errands.Snooze", "x", Snooze(1))
    assert decide(snooze, POLICY).error_type == "errands.SettleError"


# ---------------------------------------------------------------------------------- a refused success
def test_a_refused_success_is_offered_whole_then_without_its_result_then_plain() -> None:
    from errands.core.endings import SUCCESS_RECORD_TRIES, Completed, after_refusals

    whole = Completed(7, 1, None, '{"n": 1}', 60.0)
    for refusals in range(1, SUCCESS_RECORD_TRIES):
        assert after_refusals(whole, refusals) == (whole, True)
    assert after_refusals(whole, SUCCESS_RECORD_TRIES) == (whole._replace(result=None), False)
    for refusals in (SUCCESS_RECORD_TRIES + 1, SUCCESS_RECORD_TRIES + 50):
        assert after_refusals(whole, refusals) == (None, False)  # a plain success: the row deleted, never buried
    assert after_refusals(None, 1) == (None, True)  # a plain success has nothing less to offer


def test_a_refused_success_is_offered_again_after_growing_pauses() -> None:
    from errands.core.endings import RECORD_AGAIN_CAP, record_again_in

    pauses = [record_again_in(n) for n in range(1, 12)]
    assert pauses[0] == 0.5 and pauses == sorted(pauses) and pauses[-1] == RECORD_AGAIN_CAP
    assert record_again_in(10_000) == RECORD_AGAIN_CAP
