"""Resumable long jobs, without a database: how a stop at a checkpoint ends (decide), what a checkpoint may
hold (the payload codec) and what a job context says of it (current_job)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from errands import CheckpointTooLarge, ConfigurationError, Errands, Interrupted
from errands.core.context import context_of
from errands.core.endings import Buried, Result, Resumed, RetryAt, RunOutcome, decide
from errands.core.errors import BadPayload
from errands.core.payload import CHECKPOINT_LIMIT, decode_checkpoint, encode_checkpoint
from errands.core.retry import DEFAULT_MAX_RESUMPTIONS, DEFAULT_POLICY, JobPolicy, RetryPolicy
from errands.core.rows import ClaimedJob

POLICY = JobPolicy(lambda attempt: 10.0 * attempt, DEFAULT_POLICY, 60.0, 30.0, False)


def row(attempts: int = 1, max_attempts: int = 3, resumptions: int = 0, checkpoint: str | None = None) -> ClaimedJob:
    return ClaimedJob(7, "q", "job", '{"args":[],"kwargs":{}}', 0, attempts, max_attempts, None, "w",
                      resumptions=resumptions, checkpoint=checkpoint)


def stopped(r: ClaimedJob) -> RunOutcome:
    return RunOutcome(r, Result.INTERRUPTED, 0.0, "errands.Interrupted", "stopping", Interrupted("stopping"))


def test_a_stop_gives_the_run_back_until_max_resumptions_then_spends_an_attempt_without_backoff():
    assert DEFAULT_MAX_RESUMPTIONS == 100
    assert decide(stopped(row(3, resumptions=99)), POLICY) == Resumed(7)
    assert decide(stopped(row(1, resumptions=100)), POLICY) == RetryAt(7, 1, 0.0, "errands.Interrupted", "stopping")
    assert decide(stopped(row(3, resumptions=100)), POLICY) == Buried(7, 3, "errands.Interrupted", "stopping")
    strict = JobPolicy(None, RetryPolicy(retry_on=(ConnectionError,), max_resumptions=0), 60.0, 30.0, False)
    assert isinstance(decide(stopped(row(1)), strict), RetryAt)  # a stop is no error retry_on would refuse


def test_a_stop_after_the_deadline_is_buried():
    assert decide(stopped(row())._replace(deadline_in=-1.0), POLICY).error_type == "errands.DeadlineExceeded"


def test_max_resumptions_is_checked_when_the_job_is_declared():
    app = Errands("sqlite:///:memory:")
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigurationError, match="max_resumptions"):
            app.job(name=f"bad{bad}", max_resumptions=bad)(lambda: None)  # type: ignore[arg-type]


def test_a_checkpoint_goes_through_the_payload_codec_and_is_size_limited():
    value = {"after": 12, "day": date(2026, 3, 1), "sum": Decimal("1.10")}
    assert decode_checkpoint(encode_checkpoint(value)) == value
    assert decode_checkpoint(None) is None
    assert len(encode_checkpoint("é" * 100)) == 102
    with pytest.raises(CheckpointTooLarge, match="takes 65538 bytes"):
        encode_checkpoint("x" * CHECKPOINT_LIMIT)
    with pytest.raises(CheckpointTooLarge):
        encode_checkpoint("é" * (CHECKPOINT_LIMIT // 2))  # bytes of UTF-8 count, not characters
    with pytest.raises(TypeError, match="JSON"):
        encode_checkpoint({"a": object()})
    with pytest.raises(BadPayload, match="checkpoint"):
        decode_checkpoint("{not json")


def test_a_context_reads_the_claimed_checkpoint_and_the_workers_stop_flag():
    flag = [False]
    ctx = context_of(row(checkpoint='{"after":5}', resumptions=2), None, lambda: flag[0])
    assert ctx.checkpoint_value == {"after": 5} and ctx.resumptions == 2 and not ctx.stopping
    ctx.checkpoint({"after": 6})  # no app: nothing stored, and not stopping: no Interrupted
    flag[0] = True
    with pytest.raises(Interrupted):
        ctx.checkpoint({"after": 7})
    assert not context_of(row(), None).stopping  # eager runs and tools: never stopping
