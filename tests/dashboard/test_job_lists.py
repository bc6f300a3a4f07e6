"""Job lists sort both ways and page by id in either direction (no OFFSET, no gaps, no repeats)."""

from __future__ import annotations

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
