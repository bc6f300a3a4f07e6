"""Job lists sort both ways and page by id in either direction (no OFFSET, no gaps, no repeats)."""

from __future__ import annotations

import re

import pytest
from conftest import login


def test_jobs_sort_newest_or_oldest_first_and_page_through_every_job(web, dash_app):
    mail = dash_app.registry["mail"]
    ids = [mail.enqueue(f"u{i}@example.com").id for i in range(5)]
    login(web)
    newest = web.get("/api/jobs?limit=2").json()
    assert [j["id"] for j in newest["jobs"]] == ids[:-3:-1] and newest["next_after_id"] is None
    seen: list[int] = []
    page = web.get("/api/jobs?sort=oldest&limit=2").json()
    while True:
        seen += [j["id"] for j in page["jobs"]]
        if page["next_after_id"] is None:
            break
        page = web.get(f"/api/jobs?sort=oldest&limit=2&after={page['next_after_id']}").json()
    assert seen == ids
    html = web.get("/jobs?sort=oldest").text
    assert html.index(f"/jobs/{ids[0]}") < html.index(f"/jobs/{ids[-1]}")
    assert '<option value="oldest" selected>' in html


def test_an_unknown_sort_is_refused_clearly(web):
    login(web)
    response = web.get("/api/jobs?sort=sideways")
    assert response.status_code == 400 and "sort must be one of newest, oldest" in response.json()["error"]
    assert web.get("/jobs?sort=sideways").status_code == 400


def test_a_text_search_says_how_far_it_looked(web, dash_app):
    mail = dash_app.registry["mail"]
    mail.enqueue("needle@example.com")
    login(web)
    share = dash_app.store.dialect.search_window_share  # MySQL reads half as many rows a page
    page = web.get("/jobs?q=needle").text
    assert (f"Text and name searches read {int(100_000 * share):,} jobs at a time, newest first; this search "
            "reached the end") in page
    assert web.get("/api/jobs?q=needle").json()["searched"] == {"window": int(100_000 * share), "edge_id": None,
                                                                "complete": True}
    assert "searches read" not in web.get("/jobs").text  # no search, no note
    assert f"Text and name searches read {int(50_000 * share):,} entries at a time" in web.get("/dead?q=needle").text


def test_queue_counts_on_the_overview_and_queues_pages(web, dash_app):
    dash_app.registry["mail"].enqueue("a@example.com")
    login(web)
    overview = web.get("/").text
    assert 'data-queue="mails" data-state="ready">1<' in overview
    assert 'data-queue="default" data-state="ready">0<' in overview
    assert web.get("/queues").status_code == 200


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_queue_past_the_sample_shows_lower_bounds_with_a_plus(web, dash_app):
    from errands.store.insights import WAITING_SAMPLE

    mail = dash_app.registry["mail"]
    dash_app.enqueue_many([mail.prepare(f"u{i}@example.com") for i in range(WAITING_SAMPLE + 10)])
    login(web)
    data = web.get("/api/overview").json()
    [mails] = [q for q in data["queues"] if q["name"] == "mails"]
    assert mails["capped"]["ready"] and mails["ready"] >= WAITING_SAMPLE
    cell = re.search(r'data-queue="mails" data-state="ready">([^<]+)<', web.get("/").text)
    assert cell and cell.group(1).endswith("+"), cell
