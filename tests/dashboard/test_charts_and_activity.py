"""Issue 15, point 12: the throughput chart (SVG with time and value axes and a title per bucket),
per-queue charts on the queues page, and the worker activity feed, on every backend."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from conftest import VIEWER, login
from helpers import drain

from errands.dashboard.charts import nice_step, throughput_chart
from errands.services import activity
from errands.services import operator as ops
from errands.services.models import Throughput


def test_nice_steps_and_a_chart_with_axes_and_hover_values():
    assert [nice_step(p) for p in (0, 3, 4, 9, 40, 41, 999, 12_345)] == [1, 1, 1, 5, 10, 20, 500, 5000]
    start = datetime(2025, 3, 4, 13, 0, tzinfo=timezone.utc)
    t = Throughput("1h", 60, start.isoformat(), [0] * 58 + [120, 7], [0] * 58 + [3, 0], 127, 3)
    chart = throughput_chart(t)
    assert len(chart.bars) == 60
    assert chart.bars[58].title == "2025-03-04 13:58–13:59 UTC: 120 succeeded, 3 failed"
    assert chart.bars[58].ok_height > 0 and chart.bars[58].bad_height > 0 and chart.bars[0].ok_height == 0
    assert [t.label for t in chart.value_ticks] == ["0", "50", "100", "150"]
    assert chart.time_ticks[0].label == "13:00" and len(chart.time_ticks) == 6
    # the tallest bar fits the plot; bars never leave it
    assert all(chart.top <= b.bad_y and b.ok_y + b.ok_height <= chart.bottom + 0.01 for b in chart.bars)
    week = Throughput("7d", 7200, start.isoformat(), [1] * 84, [0] * 84, 84, 0)
    assert throughput_chart(week).time_ticks[0].label == "Tue 13:00"


def _stats(app, queue, ok, bad):  # type: ignore[no-untyped-def]
    app.store.insights.add_stats({(queue, True): ok, (queue, False): bad})


def test_the_overview_draws_the_chart_as_svg_with_titles(web, dash_app):
    _stats(dash_app, "default", 12, 2)
    login(web, VIEWER)
    page = web.get("/").text
    assert '<svg class="tp-chart"' in page and "data-throughput" in page
    assert re.search(r"<title>[^<]*UTC: 12 succeeded, 2 failed</title>", page)
    assert 'class="tp-ok"' in page and 'class="tp-bad"' in page and "style=" not in page.split("<main")[1]
    fragment = web.get("/charts/throughput", params={"window": "24h"})
    assert fragment.status_code == 200 and fragment.text.startswith("<svg")
    assert "12 succeeded, 2 failed" in fragment.text


def test_per_queue_charts_on_the_queues_page(web, dash_app):
    _stats(dash_app, "mails", 5, 1)
    _stats(dash_app, "default", 9, 0)
    login(web, VIEWER)
    page = web.get("/queues").text
    assert "Throughput per queue" in page
    assert "5 succeeded, 1 failed</title>" in page and "9 succeeded, 0 failed</title>" in page
    series = activity.queue_throughput(dash_app, "1h")
    assert series["mails"].total_succeeded == 5 and series["mails"].total_failed == 1
    assert set(series) == {"mails", "default"}
    one = web.get("/charts/throughput", params={"queue": "mails", "window": "7d"})
    assert "5 succeeded, 1 failed" in one.text and "9 succeeded" not in one.text
    quiet = activity.queue_throughput(dash_app, "1h", "quiet")
    assert quiet["quiet"].total_succeeded == 0 and len(quiet["quiet"].succeeded) == 60
    assert "24h" in web.get("/queues", params={"window": "24h"}).text


def test_chart_input_is_checked(web, dash_app):
    assert web.get("/charts/throughput", follow_redirects=False).status_code == 303  # login first
    login(web, VIEWER)
    assert web.get("/charts/throughput", params={"window": "1y"}).status_code == 400
    assert web.get("/charts/throughput", params={"queue": "no/such"}).status_code == 400
    assert web.get("/queues", params={"window": "forever"}).status_code == 400


def test_buckets_land_in_the_right_place(dash_app):
    now = dash_app.store.now()
    _stats(dash_app, "mails", 3, 0)
    later = activity.queue_throughput(dash_app, "1h", now=now + timedelta(minutes=30))["mails"]
    assert later.succeeded[29] + later.succeeded[30] == 3


def test_the_workers_own_runs_reach_the_chart(web, dash_app):
    for n in range(3):
        dash_app.get_job("mail").enqueue(f"{n}@example.com")
    drain(dash_app, queues=("mails",))
    login(web, VIEWER)
    assert activity.queue_throughput(dash_app, "1h")["mails"].total_succeeded == 3


# ---------------------------------------------------------------------------------- f. worker activity feed
def test_the_activity_feed_shows_running_jobs_failures_and_outcomes(web, dash_app):
    @dash_app.job(name="kept", keep_result=True)
    def kept() -> int:
        return 1

    kept.enqueue()
    dead = dash_app.get_job("boom").enqueue(3)
    drain(dash_app)
    held = dash_app.get_job("mail").enqueue("x@example.com")
    store = dash_app.store
    store.workers.register("w-1", "host-a", 123, ["mails"], 4)
    store.jobs.claim("w-1", ["mails"], 10, 60)
    store.jobs.claim("w-gone", ["mails"], 10, 60)  # nothing left: no orphan
    login(web, VIEWER)
    feed = web.get("/api/activity").json()
    worker = next(w for w in feed["workers"] if w["id"] == "w-1")
    assert [(j["id"], j["name"], j["queue"]) for j in worker["running"]] == [(held.id, "mail", "mails")]
    assert worker["running"][0]["since"] and worker["running"][0]["seconds"] >= 0 and not worker["running"][0]["stale"]
    assert feed["failures"][0]["job_id"] == dead.id and feed["failures"][0]["name"] == "boom"
    assert feed["failures"][0]["error_type"] == "RuntimeError"
    assert [o["name"] for o in feed["outcomes"]] == ["kept"] and feed["outcomes"][0]["state"] == "succeeded"
    page = web.get("/workers").text
    assert "Running now" in page and f'href="/jobs/{held.id}">#{held.id}</a> mail' in page
    assert "Recent failed attempts" in page and "&lt;script&gt;alert(3)&lt;/script&gt;" in page
    assert "<script>alert(3)" not in page


def test_jobs_held_by_an_unregistered_worker_are_listed_apart(web, dash_app):
    held = dash_app.get_job("mail").enqueue("y@example.com")
    dash_app.store.jobs.claim("ghost", ["mails"], 10, 60)
    login(web, VIEWER)
    feed = web.get("/api/activity").json()
    assert [j["id"] for j in feed["orphans"]] == [held.id]
    assert "no longer registered" in web.get("/workers").text


def _stats_at(app, minute, queue, ok, bad):  # type: ignore[no-untyped-def]
    """A stats row for a known minute (workers write the database's current minute: no clock to set on a server)."""
    store = app.store
    store.db.run(lambda cur: cur.execute(store.dialect.q(
        "INSERT INTO {stats} (minute, queue, succeeded, failed) VALUES ({p}, {p}, {p}, {p})"),
        (store.dialect.from_datetime(minute), queue, ok, bad)), write=True)


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)
def test_a_bar_is_labelled_with_the_minute_its_jobs_ran_in(dash_app):
    # Issue 26: jobs that ran 18:40:32-52 were drawn under "18:39–18:40" (buckets began at the query's second).
    ran = datetime(2026, 1, 5, 18, 40, tzinfo=timezone.utc)
    _stats_at(dash_app, ran, "mails", 5, 1)
    _stats_at(dash_app, ran - timedelta(minutes=58), "mails", 2, 0)  # 17:42, the oldest minute the hour shows
    now = ran + timedelta(seconds=70)  # 18:41:10, a second that is no whole minute
    for t in (ops.throughput(dash_app, "1h", now), activity.queue_throughput(dash_app, "1h", now=now)["mails"]):
        chart = throughput_chart(t)
        titles = [b.title for b in chart.bars if b.succeeded]
        assert titles == ["2026-01-05 17:42–17:43 UTC: 2 succeeded, 0 failed",
                          "2026-01-05 18:40–18:41 UTC: 5 succeeded, 1 failed"]
        assert chart.bars[-1].title.startswith("2026-01-05 18:41–18:42 UTC")  # the last bar holds now
        assert chart.time_ticks[0].label == "17:42"
    day = throughput_chart(ops.throughput(dash_app, "24h", now))
    assert [b.title for b in day.bars if b.succeeded] == ["2026-01-05 17:40–18:00 UTC: 2 succeeded, 0 failed",
                                                          "2026-01-05 18:40–19:00 UTC: 5 succeeded, 1 failed"]
    week = throughput_chart(ops.throughput(dash_app, "7d", now))
    assert [b.title for b in week.bars if b.succeeded] == ["2026-01-05 16:00–18:00 UTC: 2 succeeded, 0 failed",
                                                           "2026-01-05 18:00–20:00 UTC: 5 succeeded, 1 failed"]
