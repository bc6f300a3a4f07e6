"""Job semantics through the store and the worker, on every backend: app-wide defaults, retry_on,
snooze (with batches and dependencies), the argument codec, and failure hooks' records."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pytest
from helpers import drain

from errands import Errands, FailedJob, JobState, JobTimeout, Snooze, current_job
from errands.core.endings import Result, RunOutcome


@pytest.fixture
def tuned(db_url: str) -> Iterator[Errands]:
    """An app whose jobs inherit app-wide defaults."""
    app = Errands(db_url, lease=5, default_queue="bulk", max_attempts=4, timeout=30, backoff=0, max_snoozes=2)
    app.migrate()
    yield app
    app.store.close()


def column(app: Errands, job_id: int, name: str) -> Any:
    def read(cur: Any) -> Any:
        cur.execute(app.store.dialect.q("SELECT " + name + " FROM {jobs} WHERE id = {p}"), (job_id,))
        return cur.fetchone()[0]

    return app.store.db.run(read)


# ------------------------------------------------------------------------------ app-wide defaults
def test_stored_rows_carry_the_app_then_job_then_call_values(tuned):
    @tuned.job(name="inherits")
    def inherits() -> None: ...

    @tuned.job(name="own", queue="mail", max_attempts=1, timeout=math.inf)
    def own() -> None: ...

    rows = [tuned.store.jobs.get_job(h.id) for h in (
        inherits.enqueue(), own.enqueue(), inherits.using(queue="now", max_attempts=9, timeout=2).enqueue())]
    assert [(r.queue, r.max_attempts, r.timeout) for r in rows] == [
        ("bulk", 4, 30.0), ("mail", 1, None), ("now", 9, 2.0)]


# ------------------------------------------------------------------------------ retry_on
def test_retry_on_retries_listed_errors_and_buries_the_rest_at_once(tuned):
    runs: dict[str, int] = {}

    @tuned.job(name="fetch", retry_on=(ConnectionError,), discard_on=(ConnectionAbortedError,))
    def fetch(kind: str) -> None:
        runs[kind] = runs.get(kind, 0) + 1
        raise {"refused": ConnectionRefusedError, "bug": ValueError, "aborted": ConnectionAbortedError}[kind](kind)

    handles = {kind: fetch.enqueue(kind) for kind in ("refused", "bug", "aborted")}
    drain(tuned, ["bulk"])
    assert runs == {"refused": 4, "bug": 1, "aborted": 1}  # a subclass of ConnectionError retries to the end
    dead = {e.id: e for e in tuned.failed()}
    assert {(dead[h.id].attempts, dead[h.id].error_type, dead[h.id].error_message) for h in handles.values()} == {
        (4, "ConnectionRefusedError", "refused"), (1, "ValueError", "bug"), (1, "ConnectionAbortedError", "aborted")}


def test_a_hard_timeout_counts_as_jobtimeout_for_retry_on(tuned):
    @tuned.job(name="slow", retry_on=(ConnectionError,))
    def slow() -> None: ...

    @tuned.job(name="patient", retry_on=(ConnectionError, JobTimeout))
    def patient() -> None: ...

    a, b = slow.enqueue(), patient.enqueue()
    claimed = tuned.store.jobs.claim("w:1:x", ["bulk"], 10, 30)
    assert sorted(r.id for r in claimed) == sorted([a.id, b.id])
    def timed_out(row):  # what the supervisor says of a run it killed over its timeout
        return RunOutcome(row, Result.ERROR, 0.0, "errands.JobTimeout", "too slow", JobTimeout("too slow"))

    tuned.store.endings.end_held("w:1:x", [a.id, b.id], timed_out, tuned.policies)
    assert a.status() is JobState.FAILED and b.status() is JobState.READY


# ------------------------------------------------------------------------------ snooze
def test_snooze_reschedules_without_spending_an_attempt(tuned):
    seen: list[int] = []

    @tuned.job(name="poll", max_attempts=1)
    def poll() -> str:
        seen.append(current_job().attempt)
        if len(seen) < 3:
            raise Snooze(0)
        return "ready"

    handle = poll.using(keep_result=True).enqueue()
    drain(tuned, ["bulk"])
    assert seen == [1, 1, 1] and handle.result(timeout=5) == "ready"
    assert tuned.failed() == []


def test_a_snoozed_job_waits_its_delay_and_is_still_pending(tuned):
    @tuned.job(name="later")
    def later() -> None:
        raise Snooze(3600, "the file is not there yet")

    handle = later.enqueue()
    drain(tuned, ["bulk"])
    assert handle.status() is JobState.DELAYED
    row = tuned.store.jobs.get_job(handle.id)
    assert row.attempts == 0 and row.reserved_by is None and column(tuned, handle.id, "snoozes") == 1
    assert row.available_at > tuned.store.now() + timedelta(minutes=59)


def test_past_the_cap_a_snoozing_job_goes_to_the_dead_letter_saying_why(tuned):
    records: list[FailedJob] = []

    @tuned.job(name="forever")
    def forever(n: int) -> None:
        raise Snooze(0)

    forever.on_dead(records.append)
    handle = forever.enqueue(5)
    drain(tuned, ["bulk"])
    [entry] = tuned.failed()
    assert entry.id == handle.id and entry.error_type == "errands.SnoozeLimit"
    assert "snoozed 2 times" in entry.error_message and "max_snoozes" in entry.error_message
    assert [(r.id, r.args, r.error_type) for r in records] == [(handle.id, (5,), "errands.SnoozeLimit")]
    assert tuned.retry_failed(handle.id) == [handle.id]  # from the dead letter: fresh snoozes too
    assert column(tuned, handle.id, "snoozes") == 0


def test_snooze_inside_a_batch_and_before_a_dependant(tuned):
    order: list[str] = []

    @tuned.job(name="step")
    def step(name: str) -> None:
        if name == "a" and "a-snoozed" not in order:
            order.append("a-snoozed")
            raise Snooze(3600)
        order.append(name)

    batch = tuned.batch([step.prepare("a"), step.prepare("b")], on_complete=step.prepare("done"))
    child = step.using(after=batch.jobs[0]).enqueue("child")
    drain(tuned, ["bulk"])
    assert order == ["a-snoozed", "b"]  # the snoozed member is still pending: nothing after it ran
    assert batch.status().pending == 1 and not batch.status().finished
    assert batch.jobs[0].status() is JobState.DELAYED and child.status() is JobState.BLOCKED

    def due_now(cur: Any) -> None:
        cur.execute(tuned.store.dialect.q("UPDATE {jobs} SET available_at = {now} WHERE id = {p}"),
                    (batch.jobs[0].id,))

    tuned.store.db.run(due_now)
    drain(tuned, ["bulk"])
    assert order[2] == "a" and sorted(order[3:]) == ["child", "done"]
    status = batch.status()
    assert (status.done, status.failed, status.finished) == (2, 0, True)


# ------------------------------------------------------------------------------ arguments
class Colour(str, enum.Enum):
    RED = "red"


def test_typed_arguments_reach_the_handler_exactly(tuned):
    got: list[Any] = []

    @tuned.job(name="typed")
    def typed(when: datetime, day: date, ref: UUID, amount: Decimal, colour: Colour, nested: dict) -> None:
        got.append((when, day, ref, amount, colour, nested))

    sent = (datetime(2030, 10, 27, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Berlin")), date(2030, 1, 2),
            UUID(int=42), Decimal("0.10"), Colour.RED,
            {"at": datetime(2030, 1, 1, 9, tzinfo=timezone(timedelta(hours=-3))), "naive": datetime(2030, 1, 1),
             "__type__": "mine"})
    typed.enqueue(*sent)
    drain(tuned, ["bulk"])
    [received] = got
    assert [type(v) for v in received] == [type(v) for v in sent]
    assert received[:4] == sent[:4] and str(received[3]) == "0.10" and received[4] is Colour.RED
    when = received[0]
    assert (when.tzinfo, when.fold, when.utcoffset()) == (ZoneInfo("Europe/Berlin"), 1, timedelta(hours=1))
    assert received[5] == sent[5] and received[5]["naive"].tzinfo is None
    assert received[5]["at"].utcoffset() == timedelta(hours=-3)


def test_a_payload_written_before_the_codec_still_runs(tuned):
    got: list[Any] = []

    @tuned.job(name="legacy")
    def legacy(*args: Any, **kwargs: Any) -> None:
        got.append((args, kwargs))

    def insert(cur: Any) -> None:
        cur.execute(tuned.store.dialect.q(
            "INSERT INTO {jobs} (queue, name, payload, priority, attempts, max_attempts, available_at, created_at) "
            "VALUES ('bulk', 'legacy', {p}, 0, 0, 3, {now}, {now})"),
            ('{"args":[{"__type__":"date","__value__":"2030-01-01"}],"kwargs":{"n":1}}',))

    tuned.store.db.run(insert)
    drain(tuned, ["bulk"])
    assert got == [(({"__type__": "date", "__value__": "2030-01-01"},), {"n": 1})]


# ------------------------------------------------------------------------------ failure hooks
def test_failure_hooks_receive_the_record_new_and_old_style(tuned):
    calls: list[Any] = []

    @tuned.job(name="charge", max_attempts=2, retry_on=(ConnectionError,))
    def charge(order: int, *, amount: Decimal) -> None:
        raise ConnectionError(f"gateway down for {order}")

    tuned.on_retry(lambda job: calls.append(("app-retry", job)))
    tuned.on_dead(lambda job: calls.append(("app-dead", job)))
    charge.on_dead(lambda ctx, error_type, error_message: calls.append(("job-dead-old", ctx.id, error_type,
                                                                        error_message)))
    handle = charge.enqueue(42, amount=Decimal("9.90"))
    drain(tuned, ["bulk"])
    kinds = [c[0] for c in calls]
    assert kinds == ["app-retry", "job-dead-old", "app-dead"]  # job hooks before app hooks, as ever
    retry, dead = calls[0][1], calls[2][1]
    assert isinstance(retry, FailedJob) and retry.retry_in == 0.0 and retry.attempts == 1
    assert (dead.id, dead.name, dead.queue, dead.args, dead.kwargs) == (
        handle.id, "charge", "bulk", (42,), {"amount": Decimal("9.90")})
    assert (dead.error_type, dead.error_message, dead.attempts, dead.max_attempts, dead.retry_in) == (
        "ConnectionError", "gateway down for 42", 2, 2, None)
    assert calls[1] == ("job-dead-old", handle.id, "ConnectionError", "gateway down for 42")
