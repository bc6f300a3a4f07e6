"""create_dashboard(host_auth=...): the host says who is asking; CSRF is a double-submit cookie."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from errands.dashboard import Principal, create_dashboard

TOKENS = {"t-admin": Principal("ada", "admin"), "t-viewer": Principal("vic", "viewer")}


@pytest.fixture
def hosted(dash_app):  # type: ignore[no-untyped-def]
    def by_token(conn):  # type: ignore[no-untyped-def]
        return TOKENS.get(conn.headers.get("authorization", "").removeprefix("Bearer "))

    with TestClient(create_dashboard(dash_app, host_auth=by_token), base_url="https://testserver",
                    raise_server_exceptions=False) as client:
        yield client


def test_the_first_page_carries_a_usable_csrf_token(hosted, dash_app):
    hosted.headers["authorization"] = "Bearer t-admin"
    page = hosted.get("/queues")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token, "forms of the first page must carry a token"
    assert hosted.cookies.get("errands_csrf") == token.group(1)
    assert "Log out" not in page.text  # the host owns sign-in and sign-out
    dash_app.pause_queue("mails")
    done = hosted.post("/queues/mails/resume", data={"csrf": token.group(1)}, follow_redirects=False)
    assert done.status_code == 303 and dash_app.paused_queues() == []


def test_api_clients_get_their_token_from_api_me(hosted, dash_app):
    hosted.headers["authorization"] = "Bearer t-admin"
    me = hosted.get("/api/me").json()
    assert me["username"] == "ada" and me["csrf"]
    assert hosted.post("/api/queues/mails/pause", headers={"X-CSRF-Token": "wrong"}).status_code == 403
    ok = hosted.post("/api/queues/mails/pause", headers={"X-CSRF-Token": me["csrf"]})
    assert ok.status_code == 200 and dash_app.paused_queues() == ["mails"]


def test_viewers_from_the_host_cannot_act(hosted, dash_app):
    hosted.headers["authorization"] = "Bearer t-viewer"
    token = hosted.get("/api/me").json()["csrf"]
    assert hosted.post("/api/queues/mails/pause", headers={"X-CSRF-Token": token}).status_code == 403
    assert dash_app.paused_queues() == []


def test_strangers_get_a_401_page_not_a_redirect_loop(hosted):
    page = hosted.get("/jobs", follow_redirects=False)
    assert page.status_code == 401 and "sign in to the application that hosts this dashboard" in page.text
    assert hosted.get("/login", follow_redirects=False).status_code == 303  # no login form of its own...
    assert hosted.get("/", follow_redirects=False).status_code == 401  # ...and no loop back to it
    assert hosted.get("/api/jobs").status_code == 401
    hosted.headers["authorization"] = "Bearer forged"
    assert hosted.get("/api/me").status_code == 401
