"""Issue 15, point 12: the job-id search and bulk actions on waiting jobs, on every backend, through
HTTP (pages and the JSON API): viewers refused, CSRF required, audited, running jobs never touched."""

from __future__ import annotations

import pytest
from conftest import ADMIN, VIEWER, csrf, login
from helpers import drain

from errands.services import operations as opx
from errands.services.operator import JobFilter
from errands.store import operations as store_ops


# ---------------------------------------------------------------------------------- a. find a job by id
def test_an_id_goes_straight_to_the_job_wherever_it_is(web, dash_app):
    waiting = dash_app.get_job("mail").enqueue("a@example.com")
    dead = dash_app.get_job("boom").enqueue(1)
    drain(dash_app)
    login(web, VIEWER)
    for typed, job_id in ((str(waiting.id), waiting.id), (f" #{dead.id} ", dead.id)):
        r = web.get("/find", params={"id": typed}, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs/{job_id}")
    assert web.get("/api/find", params={"id": str(dead.id)}).json() == {
        "id": dead.id, "where": "dead", "state": "failed", "url": f"/jobs/{dead.id}"}
    assert web.get("/api/find", params={"id": str(waiting.id)}).json()["where"] == "jobs"


def test_a_kept_result_is_found_too(web, dash_app):
    @dash_app.job(name="kept", keep_result=True)
    def kept() -> int:
        return 1

    handle = kept.enqueue()
    drain(dash_app)
    login(web, VIEWER)
    assert web.get("/api/find", params={"id": str(handle.id)}).json()["where"] == "results"


def test_no_such_job_and_invalid_input_are_clear_never_a_500(web, dash_app):
    login(web, VIEWER)
    missing = web.get("/find", params={"id": "987654"})
    assert missing.status_code == 404 and "No job 987654" in missing.text and 'name="id"' in missing.text
    assert web.get("/api/find", params={"id": "987654"}).status_code == 404
    for bad in ("abc", "-1", "0", "1.5", "9" * 30, "<script>", "", "12abc", "\u202e1"):
        page = web.get("/find", params={"id": bad})
        assert page.status_code == 400, bad
        assert "no job id" in page.text or "type a job id" in page.text
        assert "<script>" not in page.text
        api = web.get("/api/find", params={"id": bad})
        assert api.status_code == 400 and "error" in api.json()
    assert web.get("/find").status_code == 200  # the bare form


def test_the_search_box_is_on_the_jobs_and_dead_letter_pages(web):
    login(web, VIEWER)
    for page in ("/jobs", "/dead"):
        assert 'action="/find"' in web.get(page).text


def test_parse_job_id_accepts_what_people_type():
    assert opx.parse_job_id("1,234") == 1234
    assert opx.parse_job_id("#42") == 42
    with pytest.raises(Exception, match="no job id"):
        opx.parse_job_id("4 2 x")


# ---------------------------------------------------------------------------------- b. bulk actions
def _enqueue(app, count, queue="mails"):  # type: ignore[no-untyped-def]
    mail = app.get_job("mail")
    return [mail.using(queue=queue).enqueue(f"{i}@example.com").id for i in range(count)]


def _bulk(web, token, **form):  # type: ignore[no-untyped-def]
    return web.post("/jobs/bulk", data={"csrf": token, **form}, follow_redirects=False)


def test_bulk_cancel_counts_first_then_acts_and_audits(web, dash_app):
    ids = _enqueue(dash_app, 7)
    other = _enqueue(dash_app, 2, queue="other")
    login(web, ADMIN)
    token = csrf(web)
    assert "Bulk action on the waiting jobs" in web.get("/jobs", params={"queue": "mails"}).text
    page = _bulk(web, token, action="cancel", queue="mails")
    assert page.status_code == 200 and "This will cancel" in page.text
    assert 'data-bulk-count>7<' in page.text
    assert all(dash_app.store.jobs.get_job(i) is not None for i in ids)  # nothing changed yet
    upto = max(ids + other)
    done = _bulk(web, token, action="cancel", queue="mails", confirm="7", upto=str(upto))
    assert done.status_code == 303 and "cancelled+7+of+7" in done.headers["location"]
    assert all(dash_app.store.jobs.get_job(i) is None for i in ids)
    assert all(dash_app.store.features.get_result(i).state.value == "cancelled" for i in ids)
    assert all(dash_app.store.jobs.get_job(i) is not None for i in other)
    entry = web.get("/api/audit").json()["entries"][0]
    assert entry["actor"] == ADMIN and entry["action"] == "bulk-cancel" and "queue=mails" in entry["target"]
    assert entry["detail"].startswith("7 waiting jobs cancelled")


def test_a_set_that_changed_meanwhile_is_acted_on_as_it_is_now(web, dash_app):
    ids = _enqueue(dash_app, 5)
    login(web, ADMIN)
    token = csrf(web)
    plan = web.post("/api/jobs/bulk", json={"action": "cancel", "queue": "mails"}, headers={"X-CSRF-Token": token})
    assert plan.json()["count"] == 5 and plan.json()["needs_confirmation"] is True
    dash_app.cancel(ids[0])                                          # ended meanwhile
    dash_app.store.jobs.claim("someone", ["mails"], 1, 60)           # a worker took one meanwhile
    late = _enqueue(dash_app, 1)[0]                                  # enqueued after the count
    done = web.post("/api/jobs/bulk", json={"action": "cancel", "queue": "mails", "confirm": 5,
                                            "upto": plan.json()["upto"]}, headers={"X-CSRF-Token": token})
    assert done.json() == {"action": "cancel", "done": 3, "counted": 5}
    assert dash_app.store.jobs.get_job(late) is not None
    running = [j for j in dash_app.store.jobs.list_jobs("mails") if j.reserved_by]
    assert len(running) == 1  # the reserved job was left alone


def test_bulk_move_and_priority_follow_the_filter(web, dash_app):
    ids = _enqueue(dash_app, 4)
    delayed = dash_app.get_job("mail").using(delay=3600).enqueue("later@example.com").id
    login(web, ADMIN)
    token = csrf(web)
    headers = {"X-CSRF-Token": token}
    plan = web.post("/api/jobs/bulk", json={"action": "move", "to_queue": "slow", "queue": "mails",
                                            "state": "ready"}, headers=headers).json()
    assert plan["count"] == 4
    done = web.post("/api/jobs/bulk", json={"action": "move", "to_queue": "slow", "queue": "mails",
                                            "state": "ready", "confirm": 4, "upto": plan["upto"]}, headers=headers)
    assert done.json()["done"] == 4
    assert {dash_app.store.jobs.get_job(i).queue for i in ids} == {"slow"}
    assert dash_app.store.jobs.get_job(delayed).queue == "mails"
    form = _bulk(web, token, action="priority", priority="7", queue="slow")
    assert "to priority <code>7</code>" in form.text
    done = _bulk(web, token, action="priority", priority="7", queue="slow", confirm="4", upto=str(plan["upto"]))
    assert done.status_code == 303
    assert {dash_app.store.jobs.get_job(i).priority for i in ids} == {7}
    assert web.get("/api/audit").json()["entries"][0]["action"] == "bulk-priority"


def test_bulk_actions_refuse_viewers_missing_csrf_and_bad_input(web, dash_app):
    ids = _enqueue(dash_app, 2)
    login(web, VIEWER)
    token = csrf(web)
    assert "Bulk action" not in web.get("/jobs").text
    assert _bulk(web, token, action="cancel", confirm="2", upto=str(max(ids))).status_code == 403
    assert web.post("/api/jobs/bulk", json={"action": "cancel"}, headers={"X-CSRF-Token": token}).status_code == 403
    web.post("/logout", data={"csrf": token})
    login(web, ADMIN)
    assert web.post("/jobs/bulk", data={"action": "cancel", "confirm": "2", "upto": str(max(ids))}).status_code == 403
    token = csrf(web)
    for form in ({"action": "explode"}, {"action": "move", "to_queue": "no/such"}, {"action": "move"},
                 {"action": "priority", "priority": "high"}, {"action": "priority", "priority": str(2**40)},
                 {"action": "cancel", "state": "running"}, {"action": "cancel", "confirm": "x", "upto": "1"},
                 {"action": "cancel", "upto": "-1", "confirm": "1"}):
        assert _bulk(web, token, **form).status_code == 400, form
    headers = {"X-CSRF-Token": token}
    for body in ({"action": "cancel", "confirm": "2", "upto": 1}, {"action": "cancel", "confirm": True, "upto": 1},
                 {"action": "move", "to_queue": 5}, {"action": "cancel", "queue": 5}, {"action": None}):
        assert web.post("/api/jobs/bulk", json=body, headers=headers).status_code == 400, body
    assert all(dash_app.store.jobs.get_job(i) is not None for i in ids)


def test_bulk_walks_the_table_in_windows_and_chunks(dash_app, monkeypatch):
    """Many windows and chunks (made small here): every match is changed once, jobs of a batch are
    counted in their batch, and nothing outside the filter moves."""
    monkeypatch.setattr(store_ops, "WINDOW", 7)
    monkeypatch.setattr(opx, "CHUNK", 3)
    ops = dash_app.store.operations
    monkeypatch.setattr(ops, "window_edge", lambda after, upto, rows=7, f=ops.window_edge: f(after, upto, rows))
    ids = _enqueue(dash_app, 30)
    others = _enqueue(dash_app, 10, queue="keep")
    batch = dash_app.batch([dash_app.get_job("mail").using(queue="mails").prepare(f"b{i}") for i in range(3)])
    plan = opx.plan_bulk(dash_app, "cancel", JobFilter(queue="mails"))
    assert plan.count == 33
    done = opx.run_bulk(dash_app, ADMIN, "cancel", JobFilter(queue="mails"), plan.upto, plan.count)
    assert done.done == 33
    assert all(dash_app.store.jobs.get_job(i) is None for i in ids)
    assert all(dash_app.store.jobs.get_job(i) is not None for i in others)
    row = dash_app.store.features.get_batch(batch.id)
    assert row.failed == 3


# ---------------------------------------------------------------------------------- c. live lists (markup)
def test_the_jobs_dead_letter_and_workers_pages_carry_a_live_switch_and_a_region(web):
    """The script refreshes [data-refresh-region] and leaves the filter forms alone (outside it);
    tests/browser/test_live_lists_in_chromium.py watches it happen."""
    login(web, VIEWER)
    for path in ("/jobs", "/dead", "/workers"):
        page = web.get(path).text
        assert 'id="live-refresh"' in page and "data-refresh-region=" in page, path
        region = page.index("data-refresh-region=")
        assert 'role="search"' not in page[region:], path  # the filter form comes before the region


def test_a_name_or_text_filter_covers_the_newest_search_window(dash_app, monkeypatch):
    monkeypatch.setattr(opx, "SEARCH_WINDOW", 5)
    ids = _enqueue(dash_app, 8)
    plan = opx.plan_bulk(dash_app, "cancel", JobFilter(name="mail"))
    assert plan.since == ids[3] and plan.count == 5
    done = opx.run_bulk(dash_app, ADMIN, "cancel", JobFilter(name="mail"), plan.upto, plan.count, since=plan.since)
    assert done.done == 5 and [i for i in ids if dash_app.store.jobs.get_job(i)] == ids[:3]
    assert opx.plan_bulk(dash_app, "cancel", JobFilter(queue="mails")).since == 0


def test_the_count_stops_at_its_cap_and_an_action_at_its_own(web, dash_app, monkeypatch):
    monkeypatch.setattr(opx, "BULK_COUNT_CAP", 3)
    monkeypatch.setattr(opx, "BULK_JOBS_CAP", 6)
    ids = _enqueue(dash_app, 8)
    login(web, ADMIN)
    token = csrf(web)
    page = _bulk(web, token, action="cancel", queue="mails")
    assert "More than 3 match" in page.text and "changes at most 6" in page.text
    plan = opx.plan_bulk(dash_app, "cancel", JobFilter(queue="mails"))
    assert plan.capped and plan.count == 3
    done = opx.run_bulk(dash_app, ADMIN, "cancel", JobFilter(queue="mails"), plan.upto, plan.count)
    assert done.done == 6 and [i for i in ids if dash_app.store.jobs.get_job(i)] == ids[6:]  # oldest first
