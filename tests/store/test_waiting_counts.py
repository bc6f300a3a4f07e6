"""Issue 15 (page times on MariaDB): the SQL added for them, and the query it spares, checked for
correctness on every backend.

* Counting a waiting state over every queue one queue at a time (``count_waiting_per_queue``, the
  MySQL dialect's way: its claim index leads with the queue and MariaDB has no skip scan) gives the
  same numbers, capped the same way, as the one-statement count; forced on here for every backend.
* MySQL's claim index ends with the due time (schema version 9), so the overview's sample, the
  ready/delayed counts and the claim read the index alone; the claim still walks it in order.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from errands import Errands


@pytest.fixture
def filled(app: Errands) -> Errands:
    @app.job(name="mail", queue="mails")
    def mail(n: int) -> None: ...

    @app.job(name="report", queue="reports")
    def report(n: int) -> None: ...

    mail_, report_ = app.get_job("mail"), app.get_job("report")
    now = app.store.now()
    parents = [h.id for h in app.enqueue_many([mail_.using(delay=3600).prepare(i) for i in range(4)])]
    app.enqueue_many([mail_.prepare(i) for i in range(5)] + [report_.prepare(i) for i in range(3)]
                     + [report_.using(run_at=now + timedelta(hours=2)).prepare(9)])
    for parent in parents[:3]:
        mail_.using(after=parent).enqueue(100)
    report_.using(after=parents[3]).enqueue(101)
    return app


EXPECTED = {"ready": 8, "delayed": 5, "blocked": 4}


@pytest.mark.parametrize("per_queue", [False, True], ids=["one statement", "per queue"])
def test_waiting_counts_over_every_queue(filled: Errands, per_queue: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filled.store.dialect, "count_waiting_per_queue", per_queue)
    insights = filled.store.insights
    for state, expected in EXPECTED.items():
        assert insights.count_jobs(state=state) == expected, state
        assert insights.count_jobs(state=state, cap=2) == 3, state  # capped: cap + 1 means "more than 2"
        assert insights.count_jobs(state=state, queue="reports") == {"ready": 3, "delayed": 1, "blocked": 1}[state]
    # Filters that are not a waiting state, and the page bounds, count as before.
    assert insights.count_jobs(state="running") == 0
    assert insights.count_jobs() == sum(EXPECTED.values())
    newest = max(j.id for j in insights.search_jobs(limit=100))
    assert insights.count_jobs(state="blocked", before_id=newest) == 3


def test_the_mysql_claim_index_holds_the_due_time_and_the_claim_still_uses_it(app: Errands, backend: str) -> None:
    if not backend.startswith("mariadb"):
        pytest.skip("MySQL's claim index only (the others have partial indexes)")
    d = app.store.dialect

    def columns(cur: object) -> list[str]:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "  # type: ignore[attr-defined]
                    f"AND TABLE_NAME = '{d.t_jobs}' AND INDEX_NAME = '{d.t_jobs}_claim' ORDER BY SEQ_IN_INDEX")
        return [r[0] for r in cur.fetchall()]  # type: ignore[attr-defined]

    assert app.store.db.run(columns) == ["queue", "reserved_by", "blocked_by", "priority", "fair_turn", "id",
                                         "available_at"]

    @app.job(name="mail", queue="mails")
    def mail(n: int) -> None: ...

    app.enqueue_many([mail.prepare(i) for i in range(20)] + [mail.using(delay=60).prepare(i) for i in range(5)])
    claimed = app.store.jobs.claim("w", ["mails"], 30, 30)
    assert len(claimed) == 20  # the delayed ones stay


def test_failure_groups_made_from_a_page_match_the_databases(app: Errands) -> None:
    """The dead letter's page, when it holds every entry, groups them itself instead of reading the
    search window twice: the same groups, in the same order, as the database makes."""
    from errands.services import operator as ops
    from errands.store.insights import group_failures

    @app.job(name="flaky", max_attempts=1)
    def flaky(n: int) -> None:
        raise (ValueError if n % 3 else KeyError)("x" * 250 + str(n % 2) if n % 5 else f"short {n % 2}")

    app.enqueue_many([flaky.prepare(n) for n in range(40)])
    app.run_until_empty()
    rows = app.store.insights.search_failed(limit=100)
    assert len(rows) == 40
    assert group_failures(rows) == app.store.insights.failure_groups()
    assert group_failures(rows, limit=2) == app.store.insights.failure_groups(limit=2)
    page = ops.dead_letter(app, ops.JobFilter(text="short"))
    assert [(g.message, g.count) for g in page.groups] == [
        (g.message, g.entries) for g in app.store.insights.failure_groups(text="short")]


def test_mysql_searches_read_half_the_window(app: Errands, backend: str) -> None:
    from errands.services import operator as ops

    app.store.jobs.enqueue([])  # nothing to find: the answer still says how far a page looks
    share = 0.5 if backend.startswith("mariadb") else 1.0
    assert ops.list_jobs(app, ops.JobFilter(text="x"))["searched"]["window"] == int(ops.SEARCH_WINDOW * share)
    assert ops.dead_letter(app, ops.JobFilter(text="x"))["searched"]["window"] == int(ops.DEAD_SEARCH_WINDOW * share)
