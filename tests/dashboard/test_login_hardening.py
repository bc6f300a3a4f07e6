"""Issue 15, points 1-8: the holes a pentest found in signing in and in showing untrusted text,
each driven through HTTP (and point 3 through a real `errands dashboard` server)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2 as httpx
import pytest
from conftest import ADMIN, PASSWORD, csrf, login
from helpers import cli_env, drain, free_port, scaled, wait_for
from starlette.testclient import TestClient

from errands import Errands
from errands.dashboard import AuthSettings, create_dashboard


def _client(app: Errands, address: str = "testclient", root_path: str = "", **settings: float) -> TestClient:
    policy = AuthSettings(max_failures_per_account=3, max_failures_per_address=6)
    for name, value in settings.items():
        setattr(policy, name, value)
    return TestClient(create_dashboard(app, settings=policy), base_url="https://testserver",
                      raise_server_exceptions=False, client=(address, 50000), root_path=root_path)


@pytest.fixture
def strict(dash_app: Errands) -> Iterator[TestClient]:
    """A dashboard that treats every second use of a rotated remember-me token as theft (no grace)."""
    with _client(dash_app, remember_reuse_grace=0.0) as client:
        yield client


# ---------------------------------------------------------------- 1. remember-me reuse
def test_reusing_a_rotated_remember_token_ends_every_token_and_session_and_is_audited(strict, dash_app):
    login(strict, remember=True)  # the victim's browser
    stolen = strict.cookies.get("errands_remember")
    with _client(dash_app, remember_reuse_grace=0.0) as thief, _client(dash_app) as laptop:
        login(laptop)  # the victim also has a plain session elsewhere
        assert laptop.get("/api/me").status_code == 200
        thief.cookies.set("errands_remember", stolen, domain="testserver.local")
        assert thief.get("/api/me").status_code == 200  # the thief uses the stolen token first: rotated
        assert thief.cookies.get("errands_session") and thief.cookies.get("errands_remember") != stolen
        strict.cookies.delete("errands_session")  # the victim's session ends; the browser presents the old token
        assert strict.get("/api/me").status_code == 401
        # Reuse detected: the thief's session and new token end, and so does every other session.
        assert thief.get("/api/me").status_code == 401
        thief.cookies.delete("errands_session")
        assert thief.get("/api/me").status_code == 401
        assert laptop.get("/api/me").status_code == 401
    entries = dash_app.store.accounts.audit_log()
    assert any(e.action == "remember-reuse" and ADMIN in e.target for e in entries), entries


def test_a_second_use_within_the_grace_period_signs_nobody_in_but_ends_nothing(dash_app):
    """Two tabs restored at once present the same token: the second is not taken for a theft."""
    with _client(dash_app, remember_reuse_grace=3600.0) as first:
        login(first, remember=True)
        token = first.cookies.get("errands_remember")
        first.cookies.delete("errands_session")
        assert first.get("/api/me").status_code == 200
        with _client(dash_app) as second:
            second.cookies.set("errands_remember", token, domain="testserver.local")
            assert second.get("/api/me").status_code == 401
        assert first.get("/api/me").status_code == 200
    assert not any(e.action == "remember-reuse" for e in dash_app.store.accounts.audit_log())


# ---------------------------------------------------------------- 2. the token on an error response
def test_a_remember_login_answered_with_an_error_still_sends_the_new_token(web):
    login(web, remember=True)
    web.cookies.delete("errands_session")
    refused = web.get("/jobs?state=bogus")
    assert refused.status_code == 400
    names = {c.split("=", 1)[0] for c in refused.headers.get_list("set-cookie")}
    assert {"errands_session", "errands_remember"} <= names
    assert web.get("/api/me").status_code == 200  # the browser holds a working session and token
    web.cookies.delete("errands_session")
    assert web.get("/api/me").status_code == 200


# ---------------------------------------------------------------- 3. X-Forwarded-For
def _serve(db: Path, tmp: Path, *options: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = cli_env(f"sqlite:///{db}")
    with open(tmp / f"dashboard-{port}.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "errands", "dashboard", "--port", str(port), *options],
                                env=env, stdout=out, stderr=subprocess.STDOUT)

    def listening() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=scaled(0.5)):
                return True
        except OSError:
            return proc.poll() is not None  # died: stop waiting, the assertion below says so

    wait_for(listening, timeout=scaled(30), message="the dashboard to listen")
    assert proc.poll() is None, (tmp / f"dashboard-{port}.log").read_text()
    return proc, f"http://127.0.0.1:{port}"


def _sign_in_as_someone_else(url: str) -> None:
    with httpx.Client(base_url=url) as client:
        for n in range(2):
            client.post("/login", data={"username": ADMIN, "password": f"wrong password {n}"},
                        headers={"X-Forwarded-For": f"203.0.113.{n}"})
        r = client.post("/login", data={"username": ADMIN, "password": PASSWORD},
                        headers={"X-Forwarded-For": "198.51.100.7"}, follow_redirects=False)
        assert r.status_code == 303


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_forwarded_addresses_are_trusted_only_from_the_proxies_named(dash_app, tmp_path, backend):
    db = Path(dash_app.database_url.removeprefix("sqlite:///"))
    proc, url = _serve(db, tmp_path)
    try:
        _sign_in_as_someone_else(url)
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))
    accounts = dash_app.store.accounts
    assert accounts.failed_logins(ip="127.0.0.1", window=3600) == 2  # the client's real address counts
    assert accounts.failed_logins(ip="203.0.113.0", window=3600) == 0
    assert "from 127.0.0.1" in accounts.audit_log()[0].target + (accounts.audit_log()[0].detail or "")
    proc, url = _serve(db, tmp_path, "--forwarded-allow-ips", "127.0.0.1")  # the operator names its proxy
    try:
        _sign_in_as_someone_else(url)
    finally:
        proc.terminate()
        proc.wait(timeout=scaled(30))
    assert accounts.failed_logins(ip="203.0.113.0", window=3600) == 1
    assert "from 198.51.100.7" in accounts.audit_log()[0].target + (accounts.audit_log()[0].detail or "")


# ---------------------------------------------------------------- 4. lockout as denial of service
def test_an_attacker_cannot_keep_the_real_user_locked_out(dash_app):
    with _client(dash_app, address="192.0.2.66") as attacker:
        for n in range(3):
            assert login(attacker, password=f"guess number {n}").status_code == 401
        for n in range(5):  # refused during the lock, even the right password: none of it extends the lock
            refused = login(attacker, password=PASSWORD if n == 4 else f"another guess {n}")
            assert refused.status_code == 401 and "Too many failed attempts" in refused.text
    assert dash_app.store.accounts.failed_logins(username=ADMIN, window=3600) == 3
    with _client(dash_app, address="198.51.100.20") as owner:  # an address with no recent failure
        assert login(owner).status_code == 303
        assert owner.get("/api/me").json()["username"] == ADMIN


# ---------------------------------------------------------------- 5. deep links through login
def _login_from(client: TestClient, location: str) -> httpx.Response:
    next_ = parse_qs(urlsplit(location).query)["next"][0]
    return client.post(urlsplit(location).path, data={"username": ADMIN, "password": PASSWORD, "next": next_},
                       follow_redirects=False)


def test_a_deep_link_keeps_its_query_through_login(web):
    asked = web.get("/jobs?queue=mails&state=failed", follow_redirects=False)
    assert asked.status_code == 303
    signed_in = _login_from(web, asked.headers["location"])
    assert signed_in.headers["location"] == "/jobs?queue=mails&state=failed"


def test_a_deep_link_under_a_root_path_gets_its_prefix_once(dash_app):
    with _client(dash_app, root_path="/errands") as client:  # as uvicorn --root-path /errands sends it
        asked = client.get("/errands/jobs?queue=mails", follow_redirects=False)
        assert asked.status_code == 303 and asked.headers["location"].startswith("/errands/login?")
        signed_in = _login_from(client, asked.headers["location"])
        assert signed_in.headers["location"] == "/errands/jobs?queue=mails"
        assert client.get(signed_in.headers["location"]).status_code == 200


# ---------------------------------------------------------------- 6. login CSRF
def test_a_cross_site_login_is_refused(web):
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"Origin": "null"}, {"Sec-Fetch-Site": "same-site", "Origin": "https://sub.testserver"}):
        r = web.post("/login", data={"username": ADMIN, "password": PASSWORD}, headers=headers,
                     follow_redirects=False)
        assert r.status_code == 403, headers
        assert not r.headers.get_list("set-cookie"), headers
    same = web.post("/login", data={"username": ADMIN, "password": PASSWORD}, follow_redirects=False,
                    headers={"Origin": "https://testserver", "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 303


# ---------------------------------------------------------------- 7. least privilege on the users page
def _selected_option(html: str, name: str) -> str:
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, html
    options = re.findall(r"<option([^>]*)>([^<]*)</option>", select.group(1))
    chosen = [text for attrs, text in options if re.search(r"\bselected\b", attrs)]
    return (chosen or [options[0][1]])[0]  # a browser picks the first option when none is selected


def test_the_users_page_offers_viewer_for_a_new_user(web):
    login(web)
    assert _selected_option(web.get("/users").text, "role") == "viewer"


# ---------------------------------------------------------------- 8. bidi and invisible characters
TRICKS = "\u202egnp.exe", "a\u200bd\u2066a\u2069", "x\ufeff\u00ady\u200e\u061c"


def test_bidi_and_invisible_characters_show_visibly_escaped(web, dash_app):
    job = dash_app.registry["mail"].enqueue(TRICKS[0], subject=TRICKS[1])
    bad = dash_app.registry["boom"].enqueue(TRICKS[0])  # its error message holds the trick too
    dash_app.store.accounts.create_user("mal\u202eory", dash_app.store.accounts.get_user(ADMIN).password_hash,
                                        "viewer")
    drain(dash_app)
    login(web)
    token = csrf(web)
    web.post("/enqueue", data={"csrf": token, "job": "mail", "args": json.dumps([TRICKS[2]]), "kwargs": "{}"})
    pages = {path: web.get(path).text for path in ("/jobs?queue=mails", f"/jobs/{job.id}", "/users", "/dead",
                                                   f"/jobs/{bad.id}", "/audit")}
    for path, html in pages.items():
        assert not re.search("[\u202a-\u202e\u2066-\u2069\u200b-\u200f\u061c\ufeff\u00ad]", html), path
    assert "\\u202egnp.exe" in pages["/jobs?queue=mails"] and "\\u202egnp.exe" in pages[f"/jobs/{job.id}"]
    assert "mal\\u202eory" in pages["/users"]
    assert "a\\u200bd\\u2066a\\u2069" in pages[f"/jobs/{job.id}"]
