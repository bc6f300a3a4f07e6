"""The dashboard mounted at /errands of the FastAPI and the Flask example, behind the app's own login.

Strangers are refused, spoofed identities too; viewers read, admins act only with the CSRF
token; every link and redirect keeps the mount prefix; every response has the security headers.
"""

from __future__ import annotations

from typing import Any

import pytest
from contrib_helpers import BASE, USERS, Web, form_csrf, links, load_example
from starlette.testclient import TestClient

from errands.core.payload import encode_payload
from errands.services.passwords import hash_password

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

PAGES = ["/errands/", "/errands/jobs", "/errands/queues", "/errands/dead", "/errands/workers", "/errands/enqueue",
         "/errands/audit", "/errands/periodic", "/errands/stale"]
SPOOF_HEADERS = {
    "X-Forwarded-User": "ada", "X-Remote-User": "ada", "Remote-User": "ada", "X-Auth-Request-User": "ada",
    "X-Errands-User": "ada", "X-Errands-Role": "admin", "Errands-Principal": "ada:admin",
    "Errands.Principal": "ada", "Errands_Principal": "ada", "Errands.Login-Url": "/", "Wsgi-Environ": "x",
    "Authorization": "Bearer admin", "X-Forwarded-For": "127.0.0.1", "X-Real-IP": "127.0.0.1",
    "X-CSRF-Token": "same-token",
}
SPOOF_COOKIES = {"errands_session": "forged", "errands_remember": "sel:val", "errands_csrf": "same-token",
                 "user": "ada", "role": "admin", "session": "eyJ1c2VyIjogImFkYSJ9"}  # unsigned {"user": "ada"}


def assert_security_headers(reply: Any) -> None:
    h = reply.headers
    assert "script-src 'self'" in h["content-security-policy"]
    assert "frame-ancestors 'none'" in h["content-security-policy"]
    assert h["x-frame-options"] == "DENY"
    assert h["x-content-type-options"] == "nosniff"
    assert h["referrer-policy"] == "same-origin"
    assert h["cache-control"] == "no-store"


def assert_refused(web: Web) -> None:
    """Every kind of request a stranger could make is refused, and nothing changes."""
    for page in ("/errands/", "/errands/jobs?state=ready", "/errands/users"):
        r = web.get(page)
        assert r.status == 303, (page, r.status)
        assert r.location is not None and r.location.startswith("/login?next=%2Ferrands%2F")
        assert_security_headers(r)
    assert web.get("/errands/jobs?state=ready").location == "/login?next=%2Ferrands%2Fjobs%3Fstate%3Dready"
    for api in ("/errands/api/overview", "/errands/api/me", "/errands/api/jobs", "/errands/metrics"):
        r = web.get(api)
        assert r.status == 401, (api, r.status)
        assert r.json() == {"error": "authentication required"}
        assert_security_headers(r)
    r = web.post("/errands/api/queues/default/pause", headers={"X-CSRF-Token": "same-token"})
    assert r.status == 401
    r = web.post("/errands/queues/default/pause", data={"csrf": "same-token"})
    assert r.status == 401 and "Sign in" in r.text
    assert_security_headers(r)


def test_strangers_are_sent_to_the_host_login_or_get_401(web_factory: Any) -> None:
    web = web_factory()
    assert_refused(web)
    # The dashboard's own login page is not a way in, nor a redirect loop: the host's login is.
    r = web.get("/errands/login")
    assert r.status == 303 and r.location == "/login?next=%2Ferrands%2Flogin"
    assert web.post("/errands/login", data={"username": "ada", "password": USERS["ada"][1]}).status == 401
    # What shows no job data stays public.
    assert web.get("/errands/healthz").json() == {"status": "ok"}
    assert web.get("/errands/static/app.css").status == 200
    assert web_factory.errands.paused_queues() == []


def test_spoofed_headers_and_cookies_grant_nothing(web_factory: Any) -> None:
    web = web_factory()
    for name, value in SPOOF_COOKIES.items():
        web.set_cookie(name, value)
    web.default_headers.update(SPOOF_HEADERS)
    assert_refused(web)
    # An account of the dashboard's own logins is no way around the host's authentication either.
    web_factory.errands.store.accounts.create_user("ada", hash_password(USERS["ada"][1]), "admin")
    assert web.post("/errands/login", data={"username": "ada", "password": USERS["ada"][1]}).status == 401
    assert web.get("/errands/api/me").status == 401
    assert web_factory.errands.paused_queues() == []


def test_a_session_cookie_signed_by_another_deployment_grants_nothing(web_factory: Any, framework: str,
                                                                     db_url: str) -> None:
    forged = foreign_session(framework, db_url)
    web = web_factory()
    web.set_cookie("session", forged)
    assert_refused(web)


def foreign_session(framework: str, db_url: str) -> str:
    """A real session cookie of the same example, signed with another secret key, for user ada."""
    if framework == "fastapi":
        other = load_example("fastapi_app").create_app(db_url, users=USERS, secret_key="another-key-" * 4)
        web = Web(TestClient(other, base_url=BASE), flask=False)
        try:
            assert web.login("ada").status == 303
            assert web.get("/errands/api/me").json()["username"] == "ada"  # it does sign in over there
            cookie = web.cookie("session")
        finally:
            other.state.errands.store.close()
    else:
        other = load_example("flask_app").create_app(db_url, users=USERS, secret_key="another-key-" * 4,
                                                     run_worker=False)
        web = Web(other.test_client(), flask=True)
        try:
            assert web.login("ada").status == 303
            assert web.get("/errands/api/me").json()["username"] == "ada"
            cookie = web.cookie("session")
        finally:
            other.extensions["errands"]["dashboard"].close()
            other.extensions["errands"]["errands"].store.close()
    assert cookie
    return cookie


def test_the_examples_login_never_sends_a_browser_off_site(web_factory: Any) -> None:
    for target in ("https://evil.example/", "//evil.example/", "/\\evil.example/"):
        assert web_factory().login("vic", next=target).location == "/", target


def test_viewer_reads_but_cannot_act(web_factory: Any) -> None:
    web = web_factory()
    assert web.login("vic", next="/errands/queues").location == "/errands/queues"
    for page in PAGES:
        r = web.get(page)
        assert r.status == 200, (page, r.status)
        assert "vic" in r.text and "(viewer)" in r.text
    assert web.get("/errands/users").status == 403
    me = web.get("/errands/api/me").json()
    assert (me["username"], me["role"]) == ("vic", "viewer")
    token = web.csrf()
    r = web.post("/errands/api/queues/default/pause", headers={"X-CSRF-Token": token, "X-Errands-Role": "admin"})
    assert r.status == 403 and "admin" in r.json()["error"]
    r = web.post("/errands/queues/default/pause", data={"csrf": token})
    assert r.status == 403
    r = web.post("/errands/api/enqueue", json={"job": "count_words", "args": ["a b"]},
                 headers={"X-CSRF-Token": token})
    assert r.status == 403
    assert web_factory.errands.paused_queues() == []
    assert not any(c.ready for c in web_factory.errands.counts().values())


def test_admin_acts_only_with_the_csrf_token(web_factory: Any) -> None:
    web = web_factory()
    web.login("ada")
    # The very first dashboard page already carries a working token in its forms.
    page = web.get("/errands/queues")
    token = form_csrf(page.text)
    assert token and web.cookie("errands_csrf") == token
    r = web.post("/errands/queues/default/pause", data={"csrf": token})
    assert r.status == 303 and r.location == "/errands/queues?done=pause%3Adefault"
    assert web_factory.errands.paused_queues() == ["default"]
    # Without the token, or with another one, nothing happens.
    assert web.post("/errands/queues/default/resume").status == 403
    assert web.post("/errands/queues/default/resume", data={"csrf": "guess"}).status == 403
    assert web.post("/errands/api/queues/default/resume").status == 403
    assert web.post("/errands/api/queues/default/resume", headers={"X-CSRF-Token": "guess"}).status == 403
    assert web_factory.errands.paused_queues() == ["default"]
    # The token must match the cookie: a fresh browser of the same admin has another one.
    other = web_factory()
    other.login("ada")
    assert other.csrf() != token
    assert other.post("/errands/api/queues/default/resume", headers={"X-CSRF-Token": token}).status == 403
    r = web.post("/errands/api/queues/default/resume", headers={"X-CSRF-Token": token})
    assert r.status == 200 and r.json() == {"queue": "default", "paused": False}
    assert web_factory.errands.paused_queues() == []
    # Enqueue through the dashboard's form: the redirect keeps the prefix.
    r = web.post("/errands/enqueue", data={"csrf": token, "job": "count_words", "args": '["one two"]'})
    assert r.status == 303 and r.location is not None and r.location.startswith("/errands/jobs/")
    audit = web.get("/errands/api/audit").json()["entries"]
    assert {e["actor"] for e in audit} == {"ada"}


def test_links_keep_the_mount_prefix_and_pages_carry_the_security_headers(web_factory: Any) -> None:
    web = web_factory()
    web.login("ada")
    job = web.post("/jobs", json={"job": "count_words", "args": ["x"]}).json()["id"]
    # A run that fails (None has no split()): stored as another program would store it, since enqueue
    # refuses None for text: str.
    failing = web_factory.errands.get_job("count_words").using(max_attempts=1).prepare("x")
    failing = failing._replace(payload=encode_payload(failing.name, [None], {}, 65536))
    [dead] = web_factory.errands.enqueue_many([failing])
    seen = 0
    for page in [*PAGES, "/errands/users", f"/errands/jobs/{job}", f"/errands/jobs/{dead.id}"]:
        r = web.get(page)
        assert r.status == 200, (page, r.status)
        assert_security_headers(r)
        assert r.headers["content-type"].startswith("text/html")
        for link in links(r.text):
            seen += 1
            assert link.startswith("/errands/") or link.startswith("#") or link.startswith("?"), (page, link)
    assert seen > 100
    assert web.get("/errands/api/overview").headers["x-frame-options"] == "DENY"
    r = web.get("/errands/jobs")
    assert 'data-root="/errands"' in r.text
    # A form post answers with a redirect under the prefix; so does the theme switch.
    r = web.post("/errands/account/theme", data={"csrf": web.csrf(), "theme": "dark", "back": "/jobs"})
    assert r.status == 303 and r.location == "/errands/jobs"
