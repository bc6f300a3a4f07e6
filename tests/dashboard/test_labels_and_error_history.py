"""Labels and the error history on the dashboard and its API (issue 14): lists, job pages,
the search, and tracebacks hidden from viewers unless the app says otherwise."""

from __future__ import annotations

import logging

import pytest
from conftest import ADMIN, VIEWER, login
from helpers import drain
from starlette.testclient import TestClient

from errands.dashboard import create_dashboard


def _failing_job(dash_app):  # type: ignore[no-untyped-def]
    @dash_app.job(name="invoice", max_attempts=2, backoff=0, keep_traceback=True)
    def invoice(n: int) -> None:
        raise ValueError(f"invoice {n} <b>bad</b>")

    return invoice


def test_labels_show_in_lists_and_pages_and_the_search_finds_them(web, dash_app):
    dash_app.get_job("mail").using(label="Invoice #42 <i>").enqueue("a@example.com")
    dash_app.get_job("mail").enqueue("b@example.com")
    dead = dash_app.get_job("boom").using(label="Refund #7").enqueue(1)
    drain(dash_app)
    login(web, ADMIN)
    page = web.get("/jobs")
    assert "Invoice #42 &lt;i&gt;" in page.text and "<i>" not in page.text
    found = web.get("/api/jobs", params={"text": "Invoice #42"}).json()
    assert [j["label"] for j in found["jobs"]] == ["Invoice #42 <i>"]
    assert "Refund #7" in web.get("/dead").text
    assert [e["id"] for e in web.get("/api/dead", params={"text": "Refund"}).json()["entries"]] == [dead.id]
    assert web.get(f"/api/jobs/{dead.id}").json()["label"] == "Refund #7"
    assert "Refund #7" in web.get(f"/jobs/{dead.id}").text


def test_the_dead_letter_page_shows_the_whole_history_and_admins_the_tracebacks(web, dash_app):
    handle = _failing_job(dash_app).enqueue(5)
    drain(dash_app)
    login(web, ADMIN)
    detail = web.get(f"/api/jobs/{handle.id}").json()
    assert [(e["attempt"], e["error_type"]) for e in detail["errors"]] == [(1, "ValueError"), (2, "ValueError")]
    assert all("Traceback" in e["traceback"] for e in detail["errors"]) and not detail["tracebacks_hidden"]
    page = web.get(f"/jobs/{handle.id}").text
    assert "Error history" in page and "Traceback (most recent call last)" in page
    assert "&lt;b&gt;bad&lt;/b&gt;" in page and "<b>bad</b>" not in page


def test_viewers_see_the_history_without_tracebacks_by_default(web, dash_app):
    handle = _failing_job(dash_app).enqueue(6)
    drain(dash_app)
    login(web, VIEWER)
    detail = web.get(f"/api/jobs/{handle.id}").json()
    assert len(detail["errors"]) == 2 and all(e["traceback"] is None for e in detail["errors"])
    assert detail["tracebacks_hidden"] is True
    page = web.get(f"/jobs/{handle.id}").text
    assert "Error history" in page and "Traceback (most recent" not in page and "only admins see them" in page


def test_the_app_may_show_tracebacks_to_every_viewer(dash_app):
    handle = _failing_job(dash_app).enqueue(7)
    drain(dash_app)
    with TestClient(create_dashboard(dash_app, tracebacks_for="everyone"), base_url="https://testserver") as client:
        login(client, VIEWER)
        detail = client.get(f"/api/jobs/{handle.id}").json()
        assert all("Traceback" in e["traceback"] for e in detail["errors"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_job_page_and_the_api_show_each_attempts_logs_escaped(web, dash_app):
    """Per-run logs (issue 27, point 4): one section per attempt on the job page, its text escaped,
    and the same records in the API's job read model (a record's traceback for admins only)."""
    log = logging.getLogger("tests.dashboard.run_logs")
    log.setLevel(logging.INFO)

    @dash_app.job(name="noisy", max_attempts=2, backoff=0)
    def noisy() -> None:
        log.info("fetching <script>alert(1)</script> %s", "page")
        try:
            raise LookupError("gone")
        except LookupError:
            log.exception("lookup failed")
        raise RuntimeError("no luck")

    handle = noisy.enqueue()
    drain(dash_app)
    login(web, ADMIN)
    detail = web.get(f"/api/jobs/{handle.id}").json()
    assert [a["attempt"] for a in detail["logs"]] == [1, 2]
    first = detail["logs"][0]["records"]
    assert [(r["level"], r["logger"], r["message"]) for r in first] == [
        ("INFO", log.name, "fetching <script>alert(1)</script> page"), ("ERROR", log.name, "lookup failed")]
    assert "LookupError: gone" in first[1]["traceback"]
    page = web.get(f"/jobs/{handle.id}").text
    assert "Attempt 2 · 2 records" in page and "&lt;script&gt;alert(1)&lt;/script&gt; page" in page
    assert "<script>alert(1)" not in page and "LookupError: gone" in page
    web.post("/logout", data={"csrf": web.get("/api/me").json()["csrf"]})
    login(web, VIEWER)
    seen = web.get(f"/api/jobs/{handle.id}").json()
    assert seen["logs"][0]["records"][1]["traceback"] is None and seen["tracebacks_hidden"] is True
    assert "LookupError: gone" not in web.get(f"/jobs/{handle.id}").text
    # A row another program wrote (SQLite keeps anything anywhere): the page still shows the job.
    dash_app.store.db.run(lambda cur: cur.execute(dash_app.store.dialect.q(
        "INSERT INTO {run_logs} (job_id, attempt, worker, logged_at, dropped, records) VALUES "
        "({p}, 'x', 7, 'soon', 'many', {p})"), (handle.id, '[[1e999, 2, null, {"a": 1}], "text", 5]')), write=True)
    page = web.get(f"/jobs/{handle.id}")
    assert page.status_code == 200 and "Attempt 0" in page.text
    assert web.get(f"/api/jobs/{handle.id}").json()["logs"][-1]["attempt"] == 0
