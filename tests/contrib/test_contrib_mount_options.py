"""mount_dashboard's options and edges, on small host apps of each framework (SQLite)."""

from __future__ import annotations

from typing import Any

import pytest
from contrib_helpers import BASE, links
from flask import Flask, request, session, url_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.testclient import TestClient

from errands import ConfigurationError, Errands
from errands.contrib import asgi as contrib_asgi
from errands.contrib import flask as contrib_flask
from errands.dashboard import AuthSettings, Principal

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def test_starlette_without_login_url_answers_401_pages_and_takes_async_auth(app: Errands) -> None:
    seen: list[str] = []

    async def auth(req: Request) -> Principal | None:
        seen.append(req.url.path)
        token = req.headers.get("authorization", "")
        return Principal("robot", "viewer") if token == "Bearer viewer-token" else None

    host = Starlette()
    contrib_asgi.mount_dashboard(host, app, "/ops/jobs", auth=auth)
    with TestClient(host, base_url=BASE) as client:
        r = client.get("/ops/jobs/queues", follow_redirects=False)
        assert r.status_code == 401 and "Sign in required" in r.text
        assert r.headers["x-frame-options"] == "DENY"
        r = client.get("/ops/jobs/queues", headers={"Authorization": "Bearer viewer-token"})
        assert r.status_code == 200 and "robot" in r.text
        assert [x for x in links(r.text) if not x.startswith(("/ops/jobs/", "#", "?"))] == []
    assert seen == ["/ops/jobs/queues", "/ops/jobs/queues"]


def test_starlette_under_a_root_path_keeps_it_in_links_and_login_redirects(app: Errands) -> None:
    user: dict[str, Principal | None] = {"who": None}
    host = Starlette()
    contrib_asgi.mount_dashboard(host, app, auth=lambda req: user["who"],
                                 login_url=lambda req: f"/app/sso?from={req.url.path}")
    # As uvicorn --root-path /app (behind a proxy) sends it: the path keeps the root path.
    with TestClient(host, base_url=BASE, root_path="/app") as client:
        r = client.get("/app/errands/jobs", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/app/sso?from=/app/errands/jobs"
        user["who"] = Principal("ada", "admin")
        r = client.get("/app/errands/jobs")
        assert r.status_code == 200
        assert [x for x in links(r.text) if not x.startswith(("/app/errands/", "#", "?"))] == []


@pytest.mark.parametrize("bad", ["ada", {"username": "ada", "role": "admin"}, Principal("ada", "root")])
def test_an_auth_function_answering_something_else_is_refused_loudly(app: Errands, bad: Any) -> None:
    host = Starlette()
    contrib_asgi.mount_dashboard(host, app, auth=lambda req: bad)
    with TestClient(host, base_url=BASE) as client, pytest.raises(ConfigurationError):
        client.get("/errands/")
    flask_app = Flask("bad_auth")
    dashboard = contrib_flask.mount_dashboard(flask_app, app, auth=lambda: bad)
    try:
        with pytest.raises(ConfigurationError):
            flask_app.test_client().get("/errands/", base_url=BASE)
    finally:
        dashboard.close()


def test_mount_paths_are_checked(app: Errands) -> None:
    for path in ("errands", "/errands/", ""):
        with pytest.raises(ConfigurationError):
            contrib_asgi.mount_dashboard(Starlette(), app, path, auth=lambda req: None)
        with pytest.raises(ConfigurationError):
            contrib_flask.mount_dashboard(Flask("paths"), app, path, auth=lambda: None)


def test_flask_auth_runs_in_the_hosts_request_context(app: Errands) -> None:
    flask_app = Flask("context")
    flask_app.config.update(SECRET_KEY="k" * 32, SESSION_COOKIE_SECURE=True)
    seen: list[tuple[str, str, str | None]] = []

    @flask_app.post("/sign-in")
    def sign_in() -> str:
        session["name"] = request.form["name"]
        return "ok"

    @flask_app.get("/sso")
    def sso() -> str:
        return "the host's login page"

    def auth() -> Principal | None:
        seen.append((request.script_root, request.path, session.get("name")))
        name = session.get("name")
        return Principal(name, "admin") if name else None

    dashboard = contrib_flask.mount_dashboard(flask_app, app, "/errands", auth=auth,
                                              login_url=lambda: url_for("sso", next=request.full_path),
                                              settings=AuthSettings(secure_cookies=True))
    try:
        client = flask_app.test_client()
        base = BASE + "/shop"  # the whole app lives under SCRIPT_NAME /shop
        r = client.get("/errands/jobs?state=ready", base_url=base)
        assert r.status_code == 303 and r.headers["location"] == "/shop/sso?next=/errands/jobs?state%3Dready"
        assert client.get("/sso", base_url=base).get_data(as_text=True) == "the host's login page"
        client.post("/sign-in", data={"name": "grace"}, base_url=base)
        r = client.get("/errands/jobs", base_url=base)
        assert r.status_code == 200 and "grace" in r.get_data(as_text=True)
        assert [x for x in links(r.get_data(as_text=True)) if not x.startswith(("/shop/errands/", "#", "?"))] == []
        assert seen == [("/shop", "/errands/jobs", None), ("/shop", "/errands/jobs", "grace")]
        # Paths that merely start with the prefix are the host's.
        assert client.get("/errandsx", base_url=base).status_code == 404
        assert len(seen) == 2
    finally:
        dashboard.close()


def test_flask_mount_refuses_an_a2wsgi_that_drops_the_environ(app: Errands, monkeypatch: pytest.MonkeyPatch) -> None:
    def without_environ(environ: Any) -> dict[str, Any]:
        return {"type": "http"}

    monkeypatch.setattr(contrib_flask, "build_scope", without_environ)
    with pytest.raises(ConfigurationError, match="wsgi_environ"):
        contrib_flask.mount_dashboard(Flask("old_a2wsgi"), app, auth=lambda: None)


def test_flask_proxy_fix_wrapped_after_the_mount_reaches_the_dashboard(app: Errands) -> None:
    from werkzeug.middleware.proxy_fix import ProxyFix

    flask_app = Flask("proxied")
    dashboard = contrib_flask.mount_dashboard(flask_app, app, auth=lambda: Principal("ada", "viewer"))
    flask_app.wsgi_app = ProxyFix(flask_app.wsgi_app, x_proto=1, x_prefix=1)  # type: ignore[method-assign]
    try:
        r = flask_app.test_client().get("/errands/jobs", base_url="http://testserver",
                                        headers={"X-Forwarded-Proto": "https", "X-Forwarded-Prefix": "/shop"})
        assert r.status_code == 200
        html = r.get_data(as_text=True)
        assert [x for x in links(html) if not x.startswith(("/shop/errands/", "#", "?"))] == []
    finally:
        dashboard.close()
