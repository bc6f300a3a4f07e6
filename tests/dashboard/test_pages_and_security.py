"""The dashboard through HTTP on every backend: pages, API, actions, and each security promise."""

from __future__ import annotations

import re

import pytest
from conftest import ADMIN, PASSWORD, VIEWER, csrf, login
from helpers import drain
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from errands.dashboard import create_dashboard


def test_pages_need_a_login_and_show_the_overview(web, dash_app):
    assert web.get("/", follow_redirects=False).status_code == 303
    assert web.get("/api/overview").status_code == 401
    assert login(web).status_code == 303
    page = web.get("/")
    assert page.status_code == 200 and "Overview" in page.text
    for path in ("/jobs", "/dead", "/stale", "/workers", "/queues", "/periodic", "/enqueue", "/audit", "/users"):
        assert web.get(path).status_code == 200, path


def test_security_headers_on_every_response(web):
    for response in (web.get("/login"), web.get("/static/app.css"), web.get("/api/overview")):
        h = response.headers
        policy = h["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert h["x-frame-options"] == "DENY" and h["x-content-type-options"] == "nosniff"
        assert h["referrer-policy"] == "same-origin"


def test_no_inline_script_anywhere(web):
    login(web)
    for path in ("/", "/jobs", "/dead", "/login"):
        html = web.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), path  # every script tag loads a file
        assert not re.search(r"<[^>]+\son[a-z]+=", html), path  # no inline event handlers
        assert not re.search(r"\sstyle=", html), path  # no inline styles either (CSP style-src 'self')


def test_cookies_are_secure_httponly_samesite(web):
    response = login(web, remember=True)
    cookies = response.headers.get_list("set-cookie")
    assert len(cookies) == 2
    for cookie in cookies:
        lowered = cookie.lower()
        assert "secure" in lowered and "httponly" in lowered and "samesite=lax" in lowered


def test_wrong_password_and_rate_limit_per_account(web):
    assert login(web, password="wrong password!").status_code == 401
    for _ in range(3):
        login(web, password="wrong password!")
    refused = login(web)  # the right password, but the account is locked for a while
    assert refused.status_code == 401 and "Too many failed attempts" in refused.text
    assert login(web, VIEWER).status_code == 303  # another account is not affected


def test_rate_limit_per_address(web):
    for i in range(6):
        login(web, f"nobody{i}", "wrong password!")
    assert "Too many failed attempts" in login(web, VIEWER).text


def test_csrf_is_required_on_every_state_change(web, dash_app):
    login(web)
    dash_app.pause_queue("mails")
    assert web.post("/queues/mails/resume", data={}).status_code == 403
    assert web.post("/queues/mails/resume", data={"csrf": "forged"}).status_code == 403
    assert web.post("/api/queues/mails/resume", headers={"X-CSRF-Token": "forged"}).status_code == 403
    assert dash_app.paused_queues() == ["mails"]
    token = csrf(web)
    assert web.post("/queues/mails/resume", data={"csrf": token}, follow_redirects=False).status_code == 303
    assert dash_app.paused_queues() == []


def test_viewers_read_but_cannot_act(web, dash_app):
    login(web, VIEWER)
    token = csrf(web)
    assert web.get("/dead").status_code == 200
    assert web.post("/api/queues/mails/pause", headers={"X-CSRF-Token": token}).status_code == 403
    assert web.get("/users").status_code == 403 and web.get("/api/users").status_code == 403
    assert dash_app.paused_queues() == []


def test_untrusted_text_is_escaped(web, dash_app):
    bad = dash_app.registry["boom"].enqueue(1)
    dash_app.registry["mail"].enqueue("<img src=x onerror=alert(1)>")
    drain(dash_app)
    login(web)
    for path in ("/dead", f"/jobs/{bad.id}", "/jobs?queue=mails"):
        html = web.get(path).text
        assert "<script>alert" not in html and "<img src=x" not in html, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in web.get(f"/jobs/{bad.id}").text


def test_no_traceback_in_responses(web):
    login(web)
    response = web.get("/jobs?before=not-a-number")
    assert response.status_code == 400 and "Traceback" not in response.text
    assert web.get("/api/jobs?limit=-5").status_code == 400
    assert web.get("/jobs/999999").status_code == 404


def test_dead_letter_retry_needs_a_confirmation_that_states_the_count(web, dash_app):
    boom = dash_app.registry["boom"]
    for n in range(3):
        boom.enqueue(n)
    drain(dash_app)
    login(web)
    token = csrf(web)
    asked = web.post("/dead/retry", data={"csrf": token, "scope": "all"})
    assert asked.status_code == 200 and "Retry 3 dead-letter entries?" in asked.text
    assert len(dash_app.failed()) == 3
    done = web.post("/dead/retry", data={"csrf": token, "scope": "all", "confirm": "3"}, follow_redirects=False)
    assert done.status_code == 303 and dash_app.failed() == []
    api = web.post("/api/dead/forget", json={"ids": [1, 2]}, headers={"X-CSRF-Token": token}).json()
    assert api == {"needs_confirmation": True, "count": 2, "hint": "send confirm=2 to forget 2 entries"}
    assert any(e["action"] == "retry" and e["actor"] == ADMIN for e in web.get("/api/audit").json()["entries"])


def test_deep_links_and_why_a_job_waits(web, dash_app):
    dash_app.pause_queue("mails")
    job = dash_app.registry["mail"].using(delay=3600).enqueue("x@example.com")
    login(web)
    detail = web.get(f"/api/jobs/{job.id}").json()
    reasons = " ".join(detail["why"])
    assert "scheduled for later" in reasons and "queue mails is paused" in reasons and "no live worker" in reasons
    page = web.get(f"/jobs/{job.id}")
    assert "Why isn't this job running?" in page.text
    listing = web.get("/jobs?queue=mails&state=delayed")
    assert f"/jobs/{job.id}" in listing.text


def test_enqueue_form_validates_and_caps(web, dash_app):
    login(web)
    token = csrf(web)
    ok = web.post("/api/enqueue", json={"job": "mail", "args": ["a@b.c"], "copies": 2}, headers={"X-CSRF-Token": token})
    assert ok.status_code == 200 and len(ok.json()["ids"]) == 2
    for bad in ({"job": "nope"}, {"job": "mail", "args": []}, {"job": "mail", "args": ["a"], "copies": 1000},
                {"job": "mail", "args": "not a list"}):
        assert web.post("/api/enqueue", json=bad, headers={"X-CSRF-Token": token}).status_code == 400, bad
    form = web.post("/enqueue", data={"csrf": token, "job": "mail", "args": "[1,", "kwargs": "{}"})
    assert form.status_code == 400 and "Expecting" in form.text
    assert len(dash_app.store.jobs.list_jobs()) == 2


def test_remember_me_rotates_and_a_reused_token_ends_everything(web, dash_app):
    login(web, remember=True)
    remembered = web.cookies.get("errands_remember")
    web.cookies.delete("errands_session")
    assert web.get("/api/me").status_code == 200  # signed in again by the remember-me token...
    rotated = web.cookies.get("errands_remember")
    assert rotated and rotated != remembered  # ...which was replaced
    web.cookies.clear()
    web.cookies.set("errands_remember", remembered, domain="testserver.local")
    assert web.get("/api/me").status_code == 401  # the old one no longer works


def test_users_page_filter_works_without_javascript(web):
    login(web)
    page = web.get("/users?q=vi")
    assert VIEWER in page.text and f">{ADMIN}<" not in page.text


def test_metrics_and_health(web, dash_app):
    dash_app.registry["mail"].enqueue("a")
    assert web.get("/healthz").json() == {"status": "ok"}
    assert web.get("/metrics").status_code == 401
    login(web)
    text = web.get("/metrics").text
    assert 'errands_jobs{queue="mails",state="ready"} 1' in text and "# TYPE errands_workers gauge" in text


def test_openapi_describes_the_api(web):
    doc = web.get("/api/openapi.json").json()
    assert doc["openapi"].startswith("3.") and "/api/jobs" in doc["paths"] and "/api/dead/{action}" in doc["paths"]


def test_openapi_schema_names_outlive_a_renamed_read_model():
    """``services.models.ScheduleView`` and ``EnqueuedJobs`` were ``Schedule`` and ``Enqueued`` (names
    ``errands.Schedule`` and ``errands.testing.Enqueued`` hold): clients generated from the document
    keep their names."""
    from errands.dashboard.openapi import openapi_document

    schemas = openapi_document()["components"]["schemas"]
    assert {"Schedule", "Enqueued", "WorkerView"} <= set(schemas)
    assert not {"ScheduleView", "EnqueuedJobs", "RegisteredWorker"} & set(schemas)
    assert schemas["ScheduleList"]["properties"]["schedules"]["items"] == {"$ref": "#/components/schemas/Schedule"}


def test_logging_out_ends_the_session(web):
    login(web)
    token = csrf(web)
    assert web.post("/logout", data={"csrf": token}, follow_redirects=False).status_code == 303
    assert web.get("/api/me").status_code == 401


def test_refuses_to_start_without_users(app):
    import pytest

    from errands import ConfigurationError
    from errands.dashboard import create_dashboard

    with pytest.raises(ConfigurationError, match="errands users create"):
        create_dashboard(app)
    assert create_dashboard(app, open_access=True) is not None
    assert PASSWORD


def test_signing_in_prunes_old_login_attempts_and_the_worker_does_not(dash_app, web, monkeypatch):
    """The dashboard's tables are emptied by the dashboard (now and then, on sign-in), not by workers."""
    from errands.services import sessions

    store = dash_app.store
    store.accounts.record_login("someone", "10.0.0.1", False)
    store.db.run(lambda cur: cur.execute(store.dialect.q(
        "UPDATE {login_attempts} SET at = {now_plus} WHERE username = {p}"), (-2 * 86400.0, "someone")), write=True)

    def attempts() -> int:
        return store.db.run(lambda cur: (cur.execute(store.dialect.q(
            "SELECT COUNT(*) FROM {login_attempts} WHERE username = {p}"), ("someone",)), cur.fetchone()[0])[1])

    assert attempts() == 1
    monkeypatch.setattr(sessions, "_next_prune", 0.0)
    assert login(web).status_code == 303
    assert attempts() == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_icon_is_linked_and_served_at_the_root_and_under_a_prefix(web, dash_app):
    # Issue 26: /favicon.ico answered 404, a console error on every page.
    icon = web.get("/favicon.ico")  # no login: the login page asks for it too
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00" and "max-age" in icon.headers["cache-control"]
    assert icon.headers["content-security-policy"]  # the security headers still apply
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in web.get("/login").text
    svg = web.get("/static/favicon.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    host = Starlette(routes=[Mount("/ops", create_dashboard(dash_app))])
    with TestClient(host, base_url="https://testserver") as client:
        assert client.get("/ops/favicon.ico").content == icon.content
        assert '<link rel="icon" href="/ops/static/favicon.svg"' in client.get("/ops/login").text
        assert client.get("/ops/static/favicon.svg").content == svg.content
