"""Unique jobs, dependencies and chains, on every backend (in-process workers)."""

from __future__ import annotations

import pytest
from helpers import drain

from errands import InvalidOption, JobState


def test_unique_key_returns_the_waiting_job(app):
    @app.job(name="mail")
    def mail(to): ...

    first = mail.using(unique_key="welcome:42").enqueue("a@example.com")
    again = mail.using(unique_key="welcome:42").enqueue("b@example.com")
    other = mail.using(unique_key="welcome:43").enqueue("c@example.com")
    assert again.id == first.id and other.id != first.id
    assert len(app.store.jobs.list_jobs()) == 2
    drain(app)
    later = mail.using(unique_key="welcome:42").enqueue("d@example.com")  # the key is free once it finished
    assert later.id not in (first.id, other.id)


def test_unique_flag_derives_the_key_from_the_arguments(app):
    @app.job(name="sync", unique=True)
    def sync(customer): ...

    a, b, c = sync.enqueue(1), sync.enqueue(1), sync.enqueue(2)
    assert a.id == b.id != c.id


def test_unique_inside_enqueue_many(app):
    @app.job(name="sync", unique=True)
    def sync(customer): ...

    existing = sync.enqueue(7)
    handles = app.enqueue_many([sync.prepare(7), sync.prepare(8), sync.prepare(8), sync.prepare(9)])
    ids = [h.id for h in handles]
    assert ids[0] == existing.id and ids[1] == ids[2] and len(set(ids)) == 3
    assert len(app.store.jobs.list_jobs()) == 3


def test_dead_letter_frees_the_key_and_a_retry_does_not_collide(app):
    @app.job(name="flaky", max_attempts=1, unique=True)
    def flaky(n):
        raise RuntimeError("no")

    dead = flaky.enqueue(1)
    drain(app)
    assert dead.status() is JobState.FAILED
    fresh = flaky.enqueue(1)  # the key is free while the first one is in the dead letter
    assert fresh.id != dead.id
    assert app.retry_failed(dead.id) == [dead.id]  # retried without its key, not refused
    assert {r.id for r in app.store.jobs.list_jobs()} == {dead.id, fresh.id}


def test_bad_unique_key_is_refused(app):
    @app.job(name="x")
    def x(): ...

    with pytest.raises(InvalidOption):
        x.using(unique_key="").enqueue()
    with pytest.raises(InvalidOption):
        x.using(unique_key="k" * 300).enqueue()
    assert app.store.jobs.list_jobs() == []


def test_a_dependant_waits_until_its_dependency_succeeds(app):
    order = []

    @app.job(name="step")
    def step(name):
        order.append(name)

    parent = step.using(delay=3600).enqueue("parent")
    child = step.using(after=parent).enqueue("child")
    assert child.status() is JobState.BLOCKED
    assert app.counts()["default"].blocked == 1
    assert drain(app) == 0  # parent is delayed, child blocked
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q("UPDATE {jobs} SET available_at = {now} WHERE id = {p}"),  # noqa: E501
                                          (parent.id,)))
    drain(app)
    assert order == ["parent", "child"]


def test_a_dependency_that_already_succeeded_does_not_block(app):
    @app.job(name="step")
    def step(): ...

    parent = step.enqueue()
    drain(app)
    child = step.using(after=parent.id).enqueue()
    assert child.status() is JobState.READY


def test_chain_runs_in_order_and_its_catch_runs_when_a_link_dies(app):
    log = []

    @app.job(name="link", max_attempts=1)
    def link(name):
        log.append(name)
        if name == "b":
            raise ValueError("b breaks")

    @app.job(name="catch")
    def catch(why):
        log.append(f"catch:{why}")

    chain = app.chain(link.prepare("a"), link.prepare("b"), link.prepare("c"), on_failure=catch.prepare("chain"))
    a, b, c = chain.jobs
    assert [h.status() for h in chain.jobs] == [JobState.READY, JobState.BLOCKED, JobState.BLOCKED]
    drain(app)
    assert log == ["a", "b", "catch:chain"]
    assert b.status() is JobState.FAILED and c.status() is JobState.BLOCKED  # visible, not lost
    status = chain.status()
    assert (status.total, status.done, status.failed, status.finished) == (3, 1, 1, False)
    app.retry_failed(b.id)  # fixing b resumes the chain... and b fails again here, so c still waits
    drain(app)
    assert c.status() is JobState.BLOCKED


def test_a_chain_resumes_when_its_dead_link_is_retried_and_succeeds(app):
    log = []
    broken = {"b": True}

    @app.job(name="link", max_attempts=1)
    def link(name):
        if broken.get(name):
            raise RuntimeError("not yet")
        log.append(name)

    chain = app.chain(link.prepare("a"), link.prepare("b"), link.prepare("c"))
    drain(app)
    assert log == ["a"]
    assert (chain.status().done, chain.status().failed) == (1, 1)
    broken.clear()
    app.retry_failed(chain.jobs[1].id)
    assert (chain.status().failed, chain.status().pending) == (0, 2)  # b is pending again
    drain(app)
    assert log == ["a", "b", "c"]
    status = chain.status()
    assert (status.done, status.failed, status.percent, status.finished) == (3, 0, 100.0, True)


def test_sweep_unblocks_dependants_of_a_dependency_that_vanished(app):
    """A worker that died between deleting a finished job and unblocking its dependants."""

    @app.job(name="step")
    def step(): ...

    parent = step.using(delay=3600).enqueue()
    child = step.using(after=parent).enqueue()
    app.store.db.run(lambda cur: cur.execute(app.store.dialect.q("DELETE FROM {jobs} WHERE id = {p}"), (parent.id,)))
    assert child.status() is JobState.BLOCKED
    assert app.store.features.sweep_blocked() == 1
    assert child.status() is JobState.READY
