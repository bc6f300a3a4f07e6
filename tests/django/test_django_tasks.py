"""Django's Tasks API on errands: enqueue, a worker runs it, get_result tells how it ended."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from conftest import drain
from django.db import connections, transaction
from helpers import scaled, wait_for

from errands import PayloadNotSerializable
from errands.contrib.django.compat import InvalidTask, TaskResultDoesNotExist, TaskResultStatus, task_backends


def tasks() -> Any:
    from shop import tasks as module

    return module


def errands_row(backend: Any, result_id: str) -> Any:
    return backend.errands.store.jobs.get_job(int(result_id))


def test_enqueue_run_and_successful_result(tasks_backend: Any) -> None:
    result = tasks().add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.backend == "default"
    assert result.args == [2, 3] and result.kwargs == {}
    waiting = tasks().add.get_result(result.id)
    assert waiting.status == TaskResultStatus.READY and waiting.enqueued_at is not None
    assert waiting.args == [2, 3] and waiting.attempts == 0

    assert drain(tasks_backend) == 1
    done = tasks().add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == 5
    assert done.finished_at is not None and done.attempts == 1 and done.errors == []
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


def test_failing_task_is_failed_with_its_error(tasks_backend: Any) -> None:
    result = tasks().fail.enqueue("the printer is on fire")
    drain(tasks_backend)
    failed = tasks_backend.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    [error] = failed.errors
    assert error.exception_class is ValueError
    assert error.exception_class_path == "builtins.ValueError"
    assert "the printer is on fire" in error.traceback
    assert failed.args == ["the printer is on fire"] and failed.attempts == 1
    with pytest.raises(ValueError, match="failed"):
        failed.return_value  # noqa: B018 - Django's API raises here


def test_return_value_that_is_not_json_fails_the_task(tasks_backend: Any) -> None:
    result = tasks().returns_a_set.enqueue()
    drain(tasks_backend)
    failed = tasks_backend.get_result(result.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class is TypeError


def test_orm_work_in_the_worker_and_context(tasks_backend: Any) -> None:
    from shop.models import Order

    order = Order.objects.create(total=10)
    marked = tasks().mark_order.enqueue(order.pk, "shipped")
    me = tasks().who_am_i.enqueue("ctx")
    assert drain(tasks_backend) == 2
    order.refresh_from_db()
    assert order.note == "shipped"
    assert tasks().mark_order.get_result(marked.id).return_value == f"order {order.pk}: shipped"
    assert tasks().who_am_i.get_result(me.id).return_value == {"label": "ctx", "id": me.id, "attempt": 1,
                                                                 "status": "RUNNING"}


def test_aenqueue_and_async_task(tasks_backend: Any) -> None:
    async def enqueue_both() -> tuple[Any, Any]:
        try:
            return await tasks().add_async.aenqueue(20, 22), await tasks().add.aenqueue(1, 1)
        finally:  # aenqueue ran on asgiref's thread: close Django's connection there, as a request's end would
            await sync_to_async(connections.close_all)()

    first, second = asyncio.run(enqueue_both())
    assert drain(tasks_backend) == 2

    async def results() -> list[Any]:
        return [await tasks().add_async.aget_result(first.id), await tasks().add.aget_result(second.id)]

    assert [r.return_value for r in asyncio.run(results())] == [42, 2]


def test_priority_queue_and_run_after_map_to_errands(tasks_backend: Any) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    urgent = tasks().add.using(priority=100).enqueue(1, 2)
    mail = tasks().send_mail.enqueue("ada@example.com")
    deferred = tasks().add.using(run_after=later, priority=-100).enqueue(3, 4)
    rows = {name: errands_row(tasks_backend, r.id) for name, r in
            (("urgent", urgent), ("mail", mail), ("deferred", deferred))}
    assert (rows["urgent"].priority, rows["urgent"].queue) == (100, "default")
    assert (rows["mail"].priority, rows["mail"].queue) == (10, "emails")
    assert rows["deferred"].priority == -100
    assert abs((rows["deferred"].available_at - later).total_seconds()) < 1
    deferred_result = tasks_backend.get_result(deferred.id)
    assert deferred_result.status == TaskResultStatus.READY
    assert deferred_result.task.priority == -100 and deferred_result.task.queue_name == "default"
    assert tasks_backend.get_result(mail.id).task.queue_name == "emails"

    assert drain(tasks_backend, ("default",)) == 1  # the deferred one waits; emails is not taken
    assert tasks_backend.get_result(urgent.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks_backend.get_result(mail.id).status == TaskResultStatus.READY
    assert drain(tasks_backend) == 1  # the worker's default queues: QUEUES (default, emails)
    assert tasks_backend.get_result(mail.id).return_value == "sent to ada@example.com"


def test_higher_priority_runs_first(tasks_backend: Any) -> None:
    low = tasks().add.using(priority=-5).enqueue(0, 1)
    high = tasks().add.using(priority=50).enqueue(0, 2)
    drain(tasks_backend)
    assert tasks_backend.get_result(high.id).finished_at <= tasks_backend.get_result(low.id).finished_at


def test_enqueue_joins_the_callers_transaction(tasks_backend: Any) -> None:
    from shop.models import Order

    with pytest.raises(RuntimeError):
        with transaction.atomic():
            order = Order.objects.create(total=1)
            rolled_back = tasks().mark_order.enqueue(order.pk, "never")
            assert errands_row(tasks_backend, rolled_back.id) is None  # not visible outside yet
            raise RuntimeError("roll back")
    assert Order.objects.count() == 0
    assert sum(c.ready + c.delayed for c in tasks_backend.errands.counts().values()) == 0
    with pytest.raises(TaskResultDoesNotExist):
        tasks_backend.get_result(rolled_back.id)

    with transaction.atomic():
        order = Order.objects.create(total=2)
        committed = tasks().mark_order.enqueue(order.pk, "paid")
    assert errands_row(tasks_backend, committed.id) is not None
    assert drain(tasks_backend) == 1
    order.refresh_from_db()
    assert order.note == "paid"


def test_savepoint_rollback_inside_a_transaction_drops_the_job(tasks_backend: Any) -> None:
    with transaction.atomic():
        kept = tasks().add.enqueue(1, 1)
        try:
            with transaction.atomic():
                dropped = tasks().add.enqueue(2, 2)
                raise RuntimeError("inner block fails")
        except RuntimeError:
            pass
    assert errands_row(tasks_backend, kept.id) is not None
    assert errands_row(tasks_backend, dropped.id) is None


def test_enqueue_over_http_view_commits_or_rolls_back(tasks_backend: Any) -> None:
    from django.test import Client
    from shop.models import Order

    client = Client()
    declined = client.post("/orders/", {"total": "5", "fail": "1"})
    assert declined.status_code == 402
    placed = client.post("/orders/", {"total": "7"}).json()
    assert Order.objects.count() == 1
    assert drain(tasks_backend) == 1
    assert tasks_backend.get_result(placed["task"]).return_value == f"order {placed['order']}: paid"


def test_clear_errors_for_bad_input(tasks_backend: Any) -> None:
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks().add.using(queue_name="nope")
    with pytest.raises(PayloadNotSerializable, match="must be JSON values"):
        tasks().add.enqueue(datetime.now(timezone.utc), 1)
    with pytest.raises(InvalidTask, match="priority"):
        tasks().add.using(priority=101)
    from errands import InvalidOption

    with pytest.raises(InvalidOption, match="arguments do not match"):
        tasks().add.enqueue(1, 2, 3)
    for bad in ("abc", "-1", "999999"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks_backend.get_result(bad)
    assert tasks_backend.errands.store.jobs.get_job(1) is None  # nothing was written by the refused calls


def test_retries_with_max_attempts(project_db: str) -> None:
    from shop.retrying import flaky

    retrying = task_backends["retrying"]
    once = flaky.enqueue(1)
    twice = flaky.enqueue(5)
    drain(retrying)
    drain(retrying)
    ok = retrying.get_result(once.id)
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 2 and ok.attempts == 2
    dead = retrying.get_result(twice.id)
    assert dead.status == TaskResultStatus.FAILED and dead.attempts == 2
    assert dead.errors[0].exception_class is RuntimeError and "attempt 2 fails" in dead.errors[0].traceback
    # The two backends keep separate tables (table_prefix): the default one knows nothing of these.
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(once.id)


def test_enqueue_uses_djangos_connection(tasks_backend: Any) -> None:
    """No errands connection is opened to enqueue: the row goes through Django's."""
    tasks_backend.close()
    before = len(tasks_backend.errands.store.db._open)
    with transaction.atomic():
        tasks().add.enqueue(1, 2)
        assert connections["default"].in_atomic_block
    assert len(tasks_backend.errands.store.db._open) == before


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_enqueue_wakes_idle_workers_at_commit(tasks_backend: Any) -> None:
    """PostgreSQL workers sleep on LISTEN: a task enqueued in a transaction must notify them when
    it commits (not leave them to their next poll), and a rolled-back one must not."""
    listener = tasks_backend.errands.store.listener()
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            tasks().add.enqueue(1, 1)
            raise RuntimeError("roll back")
        assert listener.wait(0.5) is False
        with transaction.atomic():
            tasks().add.enqueue(2, 2)
            assert listener.wait(0.2) is False  # not before the commit
        assert listener.wait(scaled(10)) is True
    finally:
        listener.close()


def finished_signals() -> Any:
    """A receiver of Django's task_finished recording (task id, status, error class path) of each call."""
    from errands.contrib.django.compat import task_finished

    seen: list[tuple[str, str, list[str]]] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((task_result.id, str(task_result.status), [e.exception_class_path for e in task_result.errors]))

    task_finished.connect(receiver, weak=False)
    return seen, lambda: task_finished.disconnect(receiver)


def test_a_cancelled_task_is_signalled_failed_as_get_result_says(project_db: str) -> None:
    """JobCancelled raised by a task ends it for good (no retry, attempts left or not); task_finished
    must say FAILED, as get_result does, not READY."""
    from shop.retrying import withdrawn

    retrying = task_backends["retrying"]
    seen, disconnect = finished_signals()
    try:
        result = withdrawn.enqueue()
        drain(retrying)
    finally:
        disconnect()
    assert seen == [(result.id, "FAILED", ["errands.JobCancelled"])]
    ended = retrying.get_result(result.id)
    assert ended.status == TaskResultStatus.FAILED and ended.attempts == 1
    assert ended.errors[0].exception_class_path == "errands.JobCancelled"
    assert "withdrawn" in ended.errors[0].traceback


def test_an_async_task_cancelled_on_request_still_signals_its_end(project_db: str) -> None:
    """The worker cancels an async task whose cancellation was requested: CancelledError is no
    Exception, yet task_finished must be sent (FAILED: a cancellation is never retried)."""
    from shop.retrying import waits

    retrying = task_backends["retrying"]
    seen, disconnect = finished_signals()
    result = waits.enqueue()
    worker = threading.Thread(target=drain, args=(retrying,))
    worker.start()
    try:
        wait_for(lambda: retrying.get_result(result.id).status == TaskResultStatus.RUNNING, message="the task to run")
        assert retrying.errands.cancel(int(result.id)) == "requested"
    finally:
        worker.join(scaled(90))
        disconnect()
    assert not worker.is_alive()
    assert seen == [(result.id, "FAILED", ["errands.JobCancelled"])]
    ended = retrying.get_result(result.id)
    assert ended.status == TaskResultStatus.FAILED and ended.attempts == 1
    assert ended.errors[0].exception_class_path == "errands.JobCancelled"
