"""The bounds that keep the dashboard fast on big tables (bench/dashboard_pages.py measures them):
per-queue counts that stop at a cap and say when a number is only a lower bound, throughput
summed per bucket in the database, and text searches that look at a window of rows and page on
past it.  Small caps and windows here stand for the real ones."""

from __future__ import annotations

from datetime import timedelta

import pytest

from errands import Errands
from errands.services import operator as ops
from errands.store.insights import StateCounts


@pytest.fixture
def jobs(app: Errands) -> Errands:
    @app.job(name="mail", queue="mails")
    def mail(to: str) -> None: ...

    return app


def test_counts_exact_under_the_cap_and_lower_bounds_over_it(jobs: Errands) -> None:
    mail = jobs.get_job("mail")
    jobs.enqueue_many([mail.prepare(f"r{i}@example.com") for i in range(3)]
                      + [mail.using(delay=3600).prepare(f"d{i}@example.com") for i in range(2)])
    exact = jobs.store.insights.capped_counts(["mails", "default"], cap=10, sample=10)
    assert exact["mails"][:2] == StateCounts({"ready": 3, "delayed": 2, "blocked": 0, "running": 0, "stale": 0,
                                              "failed": 0}, frozenset())[:2]
    # Every waiting job was seen, so the oldest ready one is known; the sampled count does not know it.
    assert exact["mails"].oldest_due is not None and exact["mails"].oldest_due <= jobs.store.now()
    assert exact["default"].counts["ready"] == 0 and not exact["default"].at_least

    bounded = jobs.store.insights.capped_counts(["mails"], cap=10, sample=3)["mails"]
    # Four of the five waiting jobs were looked at: neither number is known, each is at least what was seen.
    assert bounded.counts["ready"] + bounded.counts["delayed"] == 4
    assert bounded.counts["ready"] <= 3 and bounded.counts["delayed"] <= 2
    assert bounded.at_least == {"ready", "delayed"} and bounded.oldest_due is None
    assert set(jobs.store.insights.oldest_ready(["mails"])) == {"mails"}

    data = ops.overview(jobs)
    mails = next(q for q in data["queues"] if q["name"] == "mails")
    assert (mails["ready"], mails["delayed"], mails["capped"]["ready"]) == (3, 2, False)
    assert mails["oldest_ready_seconds"] is not None and mails["oldest_ready_seconds"] >= 0


def test_held_jobs_are_read_for_every_worker_at_once(jobs: Errands) -> None:
    mail = jobs.get_job("mail")
    jobs.enqueue_many([mail.prepare(f"r{i}@example.com") for i in range(4)])
    store = jobs.store
    first = [c.id for c in store.jobs.claim("w1", ["mails"], 2, 30)]
    second = [c.id for c in store.jobs.claim("w2", ["mails"], 1, 30)]
    assert store.insights.held_jobs() == {"w1": sorted(first), "w2": second}
    assert sum(len(v) for v in store.insights.held_jobs(limit=2).values()) == 2


def test_throughput_buckets_sum_what_the_minutes_hold(jobs: Errands) -> None:
    store = jobs.store
    store.insights.add_stats({("mails", True): 5, ("mails", False): 2, ("default", True): 1})
    now = store.now()
    start = now - timedelta(hours=1)
    buckets = store.insights.throughput_buckets(start, 60)
    assert sum(ok for _, ok, _ in buckets) == 6 and sum(bad for _, _, bad in buckets) == 2
    # The same bucket as the minute rows give in Python.
    rows = store.db.run(lambda cur: (cur.execute(store.dialect.q("SELECT minute FROM {stats}")), cur.fetchall())[1])
    minutes = [store.dialect.to_datetime(r[0]) for r in rows]
    assert {int((m - start).total_seconds() // 60) for m in minutes} == {b for b, _, _ in buckets}
    t = ops.throughput(jobs, "1h")
    assert (t["total_succeeded"], t["total_failed"]) == (6, 2)


def test_text_search_looks_at_a_window_and_pages_on_past_it(jobs: Errands, monkeypatch: pytest.MonkeyPatch) -> None:
    mail = jobs.get_job("mail")
    ids = [h.id for h in jobs.enqueue_many([mail.prepare("needle@example.com")]
                                           + [mail.prepare(f"hay{i}@example.com") for i in range(9)])]
    store = jobs.store
    assert store.insights.scan_edge("jobs", rows=4) == ids[-4]
    assert store.insights.scan_edge("jobs", rows=10) == ids[0]
    assert store.insights.scan_edge("jobs", rows=11) is None
    assert store.insights.scan_edge("jobs", after_id=ids[0], rows=2) == ids[2]
    with pytest.raises(ValueError):
        store.insights.scan_edge("users", rows=4)

    monkeypatch.setattr(ops, "SEARCH_WINDOW", 4)
    monkeypatch.setattr(store.dialect, "search_window_share", 1.0)  # MySQL reads half as many (tested below)
    first = ops.list_jobs(jobs, ops.JobFilter(text="needle"))
    # The newest four jobs hold no match; the page says so and where the next window starts.
    assert first["jobs"] == [] and first["count"] == 0
    assert first["searched"] == {"window": 4, "edge_id": ids[-4], "complete": False}
    assert first["next_before_id"] == ids[-4]
    page = first
    while not page["jobs"]:
        page = ops.list_jobs(jobs, ops.JobFilter(text="needle"), before_id=page["next_before_id"])
    assert [j["id"] for j in page["jobs"]] == [ids[0]]
    assert page["searched"]["complete"] and page["next_before_id"] is None
    # Oldest first finds it in the first window.
    oldest = ops.list_jobs(jobs, ops.JobFilter(text="needle"), sort="oldest")
    assert [j["id"] for j in oldest["jobs"]] == [ids[0]] and oldest["next_after_id"] == ids[3]
    # Without text or name nothing is windowed.
    assert ops.list_jobs(jobs, ops.JobFilter())["searched"] is None
    assert ops.list_jobs(jobs, ops.JobFilter())["count"] == 10


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_buckets_need_no_math_functions(jobs: Errands) -> None:
    """SQLite has FLOOR only when compiled with its math functions (CPython's Windows build is not)."""
    store = jobs.store
    sql = store.dialect.floor_sql("x")
    assert "FLOOR" not in sql.upper()
    assert store.db.run(lambda cur: (cur.execute(f"SELECT {store.dialect.floor_sql('7.9')}"), cur.fetchone()[0])[1]) == 7  # noqa: E501
