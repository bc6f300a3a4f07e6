"""Workflows on every backend (in-process workers): several dependencies, result passing
(chains, chords, groups of chains, workflows inside workflows), failure policies, the failure
record, status and cancellation.  The many-process promises are in test_many_processes.py."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from helpers import drain

from errands import InvalidOption, InvalidQueueName, JobState, chain, current_job, group


@pytest.fixture
def jobs(app: Any) -> Any:
    class Jobs:
        log: list[Any] = []
        broken: set[int] = set()

    @app.job(name="square")
    def square(n: int) -> int:
        Jobs.log.append(("square", n))
        return n * n

    @app.job(name="add")
    def add(a: int, b: int = 0) -> int:
        Jobs.log.append(("add", a, b))
        return a + b

    @app.job(name="total")
    def total(values: list[Any]) -> Any:
        Jobs.log.append(("total", values))
        return sum(v for v in values if v is not None) if all(not isinstance(v, list) for v in values) else values

    @app.job(name="fragile", max_attempts=1)
    def fragile(n: int) -> int:
        Jobs.log.append(("fragile", n))
        if n in Jobs.broken:
            raise ValueError(f"fragile {n} broke")
        return n

    @app.job(name="alert")
    def alert(what: str, failure: dict[str, Any] | None = None) -> None:
        Jobs.log.append(("alert", what, failure, current_job().batch_id))

    @app.job(name="finished")
    def finished(what: str) -> None:
        Jobs.log.append(("finished", what))

    Jobs.log = []
    Jobs.broken = set()
    Jobs.square, Jobs.add, Jobs.total, Jobs.fragile, Jobs.alert, Jobs.finished = (  # type: ignore[attr-defined]
        square, add, total, fragile, alert, finished)
    return Jobs


def test_a_job_after_several_waits_for_all_of_them(app, jobs):
    a = jobs.square.using(queue="qa").enqueue(1)
    b = jobs.square.using(queue="qb").enqueue(2)
    c = jobs.add.using(after=[a, b.id]).enqueue(1, 2)
    assert c.status() is JobState.BLOCKED
    drain(app, ["qa"])
    assert a.status() is JobState.FINISHED and c.status() is JobState.BLOCKED  # b has not run
    drain(app, ["qb"])
    assert c.status() is JobState.READY
    drain(app)
    assert jobs.log[-1] == ("add", 1, 2)


def test_after_jobs_that_already_succeeded_does_not_block(app, jobs):
    a = jobs.square.enqueue(1)
    drain(app)
    assert jobs.add.using(after=[a]).enqueue(1).status() is JobState.READY


def test_a_chain_passes_each_result_to_the_next_link(app, jobs):
    handle = app.chain(jobs.square.prepare(3), jobs.add.s(1), jobs.add.s(10), pass_results=True)
    drain(app)
    assert [h.result(timeout=0) for h in handle.jobs] == [9, 10, 20]
    assert jobs.log == [("square", 3), ("add", 9, 1), ("add", 10, 10)]


def test_a_chord_callback_receives_its_members_results_in_member_order(app, jobs):
    wf = app.workflow("chord")
    members = wf.add(group(*[jobs.square.prepare(n) for n in (5, 1, 4, 2, 3)]))
    total = wf.add(jobs.total.s(), after=[members], results=True)
    wf.enqueue()
    drain(app)
    assert ("total", [25, 1, 16, 4, 9]) in jobs.log
    assert total.job.result(timeout=0) == 55


def test_a_chain_of_groups_and_a_group_of_chains(app, jobs):
    handle = app.chain(group(jobs.square.prepare(1), jobs.square.prepare(2)), jobs.total.s(),
                       group(jobs.add.s(100), jobs.add.s(200)), jobs.total.s(), pass_results=True)
    drain(app)
    assert handle.jobs[-1].result(timeout=0) == 5 + 100 + 5 + 200
    wf = app.workflow()
    both = wf.add(group(chain(jobs.square.prepare(3), jobs.add.s(1), pass_results=True),
                        chain(jobs.square.prepare(4), jobs.add.s(2), pass_results=True)))
    end = wf.add(jobs.total.s(), after=[both], results=True)
    wf.enqueue()
    drain(app)
    assert end.job.result(timeout=0) == (9 + 1) + (16 + 2)


def test_a_workflow_inside_a_workflow(app, jobs):
    inner = app.workflow()
    first = inner.add(jobs.square.prepare(2))
    inner.add(jobs.add.s(1), after=[first], results=True)
    outer = app.workflow("outer")
    start = outer.add(jobs.square.prepare(3))
    middle = outer.add(inner, after=[start])
    end = outer.add(jobs.total.s(), after=[start, middle], results=True)
    handle = outer.enqueue()
    drain(app)
    assert end.job.result(timeout=0) == 9 + 5
    status = app.workflows.status(handle.id)
    assert status.state == "succeeded" and len(status.steps) == 4
    assert [s.parents for s in status.steps][1] == (handle.jobs[0].id,)


def test_block_policy_keeps_dependants_blocked_and_a_retry_resumes(app, jobs):
    jobs.broken.add(2)
    wf = app.workflow("resumable", on_failure=jobs.alert.prepare("wf"))
    parts = wf.add(group(jobs.fragile.prepare(1), jobs.fragile.prepare(2), jobs.fragile.prepare(3)))
    end = wf.add(jobs.total.s(), after=[parts], results=True)
    handle = wf.enqueue()
    drain(app)
    assert end.job.status() is JobState.BLOCKED
    status = app.workflows.status(handle.id)
    assert status.state == "blocked" and status.batch.failed == 1
    [record] = [entry[2] for entry in jobs.log if entry[0] == "alert"]
    assert record["name"] == "fragile" and record["args"] == [2] and record["attempts"] == 1
    assert record["error_type"] == "ValueError" and record["error_message"] == "fragile 2 broke"
    assert record["id"] == parts.jobs[1].id and record["queue"] == "default"
    jobs.broken.clear()
    app.retry_failed(parts.jobs[1].id)
    drain(app)
    assert end.job.result(timeout=0) == 6
    assert app.workflows.status(handle.id).state == "succeeded"


def test_cancel_policy_cancels_every_step_after_a_dead_one(app, jobs):
    jobs.broken.add(1)
    wf = app.workflow(policy="cancel", on_complete=jobs.finished.prepare("wf"))
    first = wf.add(jobs.fragile.prepare(1))
    side = wf.add(jobs.square.prepare(7))
    then = wf.add(chain(jobs.add.s(1), jobs.add.s(2), pass_results=True), after=[first], results=True)
    last = wf.add(jobs.total.s(), after=[then, side], results=True)
    handle = wf.enqueue()
    drain(app)
    assert [h.status() for h in then.jobs + last.jobs] == [JobState.CANCELLED] * 3
    assert side.job.result(timeout=0) == 49
    status = app.workflows.status(handle.id)
    assert status.state == "failed" and status.batch.finished and (status.batch.done, status.batch.failed) == (1, 4)
    assert (status.failed, status.cancelled) == (1, 3)  # the dead step, and the three cancelled after it (issue 26)
    assert ("finished", "wf") in jobs.log
    assert "a step it waits for failed" in (status.steps[2].error or "")


def test_cancelling_a_workflow_cancels_what_has_not_run(app, jobs):
    wf = app.workflow()
    first = wf.add(jobs.square.using(queue="first").prepare(2))
    rest = wf.add(chain(jobs.add.s(1), jobs.add.s(1), pass_results=True), after=[first], results=True)
    handle = wf.enqueue()
    drain(app, ["first"])
    assert handle.cancel() == 2
    assert [h.status() for h in rest.jobs] == [JobState.CANCELLED, JobState.CANCELLED]
    status = app.workflows.status(handle.id)
    assert status.state == "cancelled" and status.batch.finished
    assert app.workflows.cancel(handle.id) == 0


def test_results_are_kept_until_the_workflow_ends_then_for_the_retention_period(app, jobs):
    wf = app.workflow()
    first = wf.add(jobs.square.prepare(2))
    wf.add(jobs.add.using(queue="later").s(1), after=[first], results=True)
    wf.enqueue()
    drain(app, ["default"])
    held = app.store.features.get_result(first.job.id)
    assert held.expires_at - held.finished_at > timedelta(days=365)  # held while the workflow runs
    drain(app, ["later"])
    kept = app.store.features.get_result(first.job.id)
    assert kept.expires_at - app.store.now() <= timedelta(seconds=app.result_ttl + 60)


def test_a_batch_callback_receives_the_members_results(app, jobs):
    jobs.broken.add(2)
    batch = app.batch([jobs.fragile.prepare(n) for n in (3, 2, 1)], on_complete=jobs.total.s(), pass_results=True)
    drain(app)
    assert ("total", [3, None, 1]) in jobs.log
    assert batch.status().finished


def test_queue_and_priority_apply_to_every_member_and_callback(app, jobs):
    handle = app.chain(jobs.square.prepare(1), jobs.square.prepare(2), on_complete=jobs.finished.prepare("c"),
                       queue="reports", priority=5)
    assert {j.queue for j in app.store.jobs.list_jobs()} == {"reports"}
    drain(app, ["default"])
    assert jobs.log == []
    drain(app, ["reports"])
    assert ("finished", "c") in jobs.log and handle.status().finished
    batch = app.batch([jobs.square.prepare(3)], queue="reports", priority=-3)
    assert app.store.jobs.get_job(batch.jobs[0].id).priority == -3
    with pytest.raises(InvalidQueueName):
        app.batch([jobs.square.prepare(3)], queue="bad queue!")


def test_a_step_s_arguments_are_checked_counting_the_result_it_receives(app, jobs):
    with pytest.raises(InvalidOption, match="missing a required argument"):
        jobs.total.prepare()  # prepare() checks now; a step that receives its first argument uses .s()
    wf = app.workflow()
    first = wf.add(jobs.square.prepare(1))
    wf.add(jobs.add.s(1, 2), after=[first], results=True)  # add(result, 1, 2): one too many
    with pytest.raises(InvalidOption, match="after the result it receives"):
        wf.enqueue()
    with pytest.raises(InvalidOption, match="after the result"):
        app.batch([jobs.square.prepare(1)], on_complete=jobs.square.s(1), pass_results=True)
    assert app.store.jobs.list_jobs() == []


def test_status_lists_each_step_with_its_state_and_parents(app, jobs):
    jobs.broken.add(5)
    wf = app.workflow("states")
    ok = wf.add(jobs.square.prepare(1))
    bad = wf.add(jobs.fragile.prepare(5))
    waiting = wf.add(jobs.add.s(), after=[ok, bad], results=True)
    handle = wf.enqueue()
    before = app.workflows.status(handle.id)
    assert [s.state for s in before.steps] == [JobState.READY, JobState.READY, JobState.BLOCKED]
    assert before.batch.name == "states" and before.batch.policy == "block" and before.batch.kind == "workflow"
    drain(app)
    after = app.workflows.status(handle.id)
    assert [s.state for s in after.steps] == [JobState.SUCCEEDED, JobState.FAILED, JobState.BLOCKED]
    assert after.steps[2].parents == (ok.job.id, bad.job.id)
    assert after.steps[1].error == "ValueError: fragile 5 broke"
    assert waiting.job.status() is JobState.BLOCKED
    assert app.workflows.status(10**9) is None


def test_a_step_whose_input_is_gone_goes_to_the_dead_letter_saying_why(app, jobs):
    jobs.broken.add(4)
    wf = app.workflow()
    bad = wf.add(jobs.fragile.prepare(4))
    after = wf.add(jobs.add.s(), after=[bad], results=True)
    wf.enqueue()
    drain(app)
    app.forget_failed(bad.job.id)  # forgotten: its dependants run, but there is no result to give them
    app.store.features.sweep_blocked()
    assert after.job.status() is JobState.FAILED
    entry = app.store.jobs.get_failed(after.job.id)
    assert entry.error_type == "errands.WorkflowInputMissing" and str(bad.job.id) in entry.error_message


def test_eager_mode_runs_a_workflow_in_order_with_its_results(app, jobs):
    with app.eager():
        wf = app.workflow()
        parts = wf.add(group(jobs.square.prepare(2), jobs.square.prepare(3)))
        end = wf.add(jobs.total.s(), after=[parts], results=True)
        wf.enqueue()
        assert end.job.result(timeout=0) == 13
        handle = app.chain(jobs.square.prepare(2), jobs.add.s(1), pass_results=True)
        assert handle.jobs[-1].result(timeout=0) == 5


def test_a_version_3_blocked_job_still_waits_after_the_upgrade(app, jobs):
    """Before workflows, ``blocked_by`` held the one dependency's id; the upgrade makes it a count."""
    parent = jobs.square.using(queue="parent").enqueue(2)
    child = jobs.add.using(after=parent).enqueue(1)
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q("UPDATE {jobs} SET blocked_by = {p} WHERE id = {p}"),
                                             (parent.id, child.id)))
    [(_, steps)] = [m for m in app.store.dialect.migrations() if m[0] == 5]
    app.store.db.run(lambda cur: cur.execute(steps[0] if isinstance(steps[0], str) else steps[0].sql))
    assert app.store.jobs.get_job(child.id).blocked_by == 1
    drain(app, ["parent"])
    assert child.status() is JobState.READY


def test_two_dependants_of_one_job_both_wait_for_it(app, jobs):
    """The second dependant marks a job that is marked already (MySQL reports that UPDATE as
    changing no row: the dependant must wait all the same)."""
    parent = jobs.square.using(queue="parent").enqueue(2)
    first = jobs.add.using(after=parent).enqueue(1)
    second = jobs.add.using(after=[parent]).enqueue(2)
    assert first.status() is JobState.BLOCKED and second.status() is JobState.BLOCKED
    drain(app)
    assert jobs.log == []
    drain(app, ["parent"])
    drain(app)
    assert sorted(jobs.log[1:]) == [("add", 1, 0), ("add", 2, 0)]


def test_results_pass_on_unchanged_whatever_json_they_hold(app, jobs):
    """A result that looks like one of the argument codec's tags (a dict with a "__type__" key)
    reaches the next step as the same dict, beside a datetime argument of the step's own."""
    from datetime import datetime, timezone

    @app.job(name="tricky")
    def tricky() -> dict[str, Any]:
        return {"__type__": "datetime", "__value__": "not a date", "n": [1, {"__type__": "x"}]}

    seen = []

    @app.job(name="receiver")
    def receiver(value: dict[str, Any], when: datetime) -> None:
        seen.append((value, when))

    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    app.chain(tricky.prepare(), receiver.s(when), pass_results=True)
    drain(app)
    assert seen == [({"__type__": "datetime", "__value__": "not a date", "n": [1, {"__type__": "x"}]}, when)]


def test_a_batch_of_five_thousand_jobs_is_stored_in_chunks(app, jobs):
    """Members of a batch take the insert of jobs with features (15 parameters a row): 5,000 of
    them in one statement would pass PostgreSQL's limit of 65,535 parameters."""
    batch = app.batch([jobs.square.prepare(n) for n in range(5000)])
    assert len(batch.jobs) == 5000 and len({h.id for h in batch.jobs}) == 5000
    assert batch.status().total == 5000
    assert [h.id for h in batch.jobs] == sorted(h.id for h in batch.jobs)  # ids in member order


def test_a_step_receives_a_datetime_or_decimal_result_as_one(app):
    """Results travel through the argument codec: the next step gets the datetime and the Decimal
    its parent returned, not their JSON text (before, the parent went to the dead letter)."""
    import datetime as dt
    from decimal import Decimal

    seen = []

    @app.job(name="stamp")
    def stamp():
        return [dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc), Decimal("2.50")]

    @app.job(name="use")
    def use(values):
        seen.append(values)

    wf = app.workflow()
    first = wf.add(stamp.prepare())
    wf.add(use.s(), after=[first], results=True)
    wf.enqueue()
    drain(app)
    assert seen == [[dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc), Decimal("2.50")]]
    assert type(seen[0][1]) is Decimal


def test_a_step_returning_what_json_cannot_hold_goes_to_the_dead_letter(app, jobs):
    """Its dependants would otherwise receive null in its place, silently."""

    @app.job(name="unstorable")
    def unstorable() -> object:
        return object()

    wf = app.workflow()
    bad = wf.add(unstorable.prepare())
    after = wf.add(jobs.total.s(), after=[bad], results=True)
    wf.enqueue()
    drain(app)
    entry = app.store.jobs.get_failed(bad.job.id)
    assert entry is not None and entry.error_type == "errands.ResultNotJSON"
    assert after.job.status() is JobState.BLOCKED and not any(e[0] == "total" for e in jobs.log)
