"""A Flask app that runs its background jobs with errands, in its own process.

- one registered job (``count_words``, which keeps its result),
- ``POST /jobs`` enqueues a registered job by name and ``GET /jobs/<id>`` tells how it went (signed-in users),
- an in-process worker on a background thread, started by the factory, stopped at exit,
- the errands dashboard at ``/errands``, behind the app's own session login (``flask.session``):
  ``ada`` is an admin there, ``vic`` a viewer.

Run it (see README.md)::

    ERRANDS_DATABASE_URL=sqlite:////tmp/errands-flask.db flask --app app run --no-reload

The passwords come from ``EXAMPLE_ADMIN_PASSWORD`` / ``EXAMPLE_VIEWER_PASSWORD``; without them the
app makes random ones and logs them at start-up.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from html import escape
from typing import Any

from flask import Flask, abort, redirect, request, session

from errands import Errands, JobState
from errands.contrib.flask import Principal, mount_dashboard, register_error_handlers, start_worker
from errands.dashboard import AuthSettings

log = logging.getLogger("example")


def register_jobs(errands: Errands) -> None:
    @errands.job(name="count_words", keep_result=True)
    def count_words(text: str) -> int:
        """Count the words of a text (stands in for real work: a PDF, a mail, an API call)."""
        return len(text.split())


def default_users() -> dict[str, tuple[str, str]]:
    """user name -> (dashboard role, password)."""
    users = {}
    for name, role, variable in (("ada", "admin", "EXAMPLE_ADMIN_PASSWORD"),
                                 ("vic", "viewer", "EXAMPLE_VIEWER_PASSWORD")):
        password = os.environ.get(variable) or secrets.token_urlsafe(12)
        if variable not in os.environ:
            log.warning("%s's password for this run: %s (set %s to choose one)", name, password, variable)
        users[name] = (role, password)
    return users


def create_app(database_url: str | None = None, *, users: dict[str, tuple[str, str]] | None = None,
               secret_key: str | None = None, secure_cookies: bool | None = None, run_worker: bool = True,
               concurrency: int = 2) -> Flask:
    """The application.  ``secure_cookies`` defaults to on unless ``EXAMPLE_INSECURE_COOKIES=1``
    (for plain http://localhost during development).  ``app.extensions["errands"]`` holds the
    Errands app, the in-process worker (or None) and the mounted dashboard."""
    errands = Errands(database_url)
    register_jobs(errands)
    # Creating the tables at start-up keeps the example one command; a real deployment runs
    # `errands migrate` in its release step instead.
    errands.migrate()
    users = users if users is not None else default_users()
    if secure_cookies is None:
        secure_cookies = os.environ.get("EXAMPLE_INSECURE_COOKIES") != "1"

    app = Flask(__name__)
    app.config.update(SECRET_KEY=secret_key or os.environ.get("EXAMPLE_SECRET_KEY") or secrets.token_urlsafe(32),
                      SESSION_COOKIE_SECURE=secure_cookies, SESSION_COOKIE_SAMESITE="Lax")
    register_error_handlers(app)

    def signed_in() -> tuple[str, str] | None:
        name = session.get("user")
        if name in users:
            return name, users[name][0]
        return None

    def dashboard_user() -> Principal | None:
        """Runs inside a Flask request context: ``session`` is this request's session."""
        user = signed_in()
        return None if user is None else Principal(username=user[0], role=user[1])

    dashboard = mount_dashboard(app, errands, "/errands", auth=dashboard_user, login_url="/login",
                                settings=AuthSettings(secure_cookies=secure_cookies))
    # One worker per web process, on a thread; stopped gracefully when the process exits.
    worker = start_worker(errands, concurrency=concurrency) if run_worker else None
    app.extensions["errands"] = {"errands": errands, "worker": worker, "dashboard": dashboard}

    @app.post("/jobs")
    def enqueue() -> Any:
        if signed_in() is None:
            return {"error": "sign in first"}, 401
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or not isinstance(body.get("job"), str):
            return {"error": 'send a JSON object: {"job": name, "args": [...], "kwargs": {...}}'}, 400
        args, kwargs = body.get("args", []), body.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return {"error": "args must be a JSON array and kwargs a JSON object"}, 400
        job = errands.get_job(body["job"])  # UnknownJob -> 400, through register_error_handlers
        handle = job.enqueue(*args, **kwargs)
        return {"id": handle.id, "job": handle.name}, 202

    @app.get("/jobs/<int:job_id>")
    def job_status(job_id: int) -> Any:
        if signed_in() is None:
            return {"error": "sign in first"}, 401
        state = errands.job_state(job_id)
        found = errands.store.features.get_result(job_id) if state is JobState.SUCCEEDED else None
        return {"id": job_id, "state": state.value, "result": found.result if found else None}

    @app.get("/login")
    def login_form() -> str:
        nxt = escape(request.args.get("next", "/"))
        return (f"<!doctype html><title>Sign in</title><form method=post action=/login>"
                f"<input type=hidden name=next value=\"{nxt}\">"
                f"<label>User <input name=username></label> <label>Password <input type=password name=password>"
                f"</label> <button>Sign in</button></form>")

    @app.post("/login")
    def login() -> Any:
        username, password = request.form.get("username", ""), request.form.get("password", "")
        known = users.get(username)
        if known is None or not hmac.compare_digest(known[1].encode(), password.encode()):
            abort(401)
        session["user"] = username
        target = request.form.get("next", "/")
        off_site = not target.startswith("/") or target.startswith("//") or "\\" in target  # "/\evil.com" too
        return redirect("/" if off_site else target, code=303)

    @app.post("/logout")
    def logout() -> Any:
        session.clear()
        return redirect("/", code=303)

    @app.get("/")
    def home() -> str:
        user = signed_in()
        who = f"Signed in as {escape(user[0])}." if user else "<a href=/login>Sign in</a>."
        return f"<!doctype html><title>errands example</title><p>{who} <a href=/errands/>Jobs dashboard</a></p>"

    return app


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    # No reloader: it would run this file twice, and start a second worker in the watching process.
    create_app().run(use_reloader=False)
