"""The overview finds every queue that holds something, even one no worker or job definition names."""

from __future__ import annotations

from errands.services import operator as ops


def test_queues_with_jobs_or_dead_entries_show_up_without_any_definition(app):
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    @app.job(name="fail", queue="doomed", max_attempts=1)
    def fail() -> None:
        raise RuntimeError("no")

    mail.using(queue="adhoc").enqueue("a@example.com")          # waiting, in a queue nothing else names
    mail.using(queue="later", delay=3600).enqueue("b@example.com")
    parent = mail.using(queue="first").enqueue("c@example.com")
    mail.using(queue="blocked-q", after=parent).enqueue("d@example.com")
    held = mail.using(queue="held").enqueue("e@example.com")
    assert [c.id for c in app.store.jobs.claim("someone:1:x", ["held"], 1, 60.0)] == [held.id]
    fail.enqueue()
    app.run_worker(["doomed"], burst=True)
    del app.registry["fail"]  # the dead letter outlives the code that filled it
    found = set(app.store.insights.active_queues())
    assert {"adhoc", "later", "first", "blocked-q", "held", "doomed"} <= found
    names = {q["name"] for q in ops.overview(app)["queues"]}
    assert {"adhoc", "later", "blocked-q", "held", "doomed"} <= names
    assert app.store.insights.active_queues() == sorted(found)
