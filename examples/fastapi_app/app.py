"""A FastAPI app that runs its background jobs with errands, in its own process.

- one registered job (``count_words``, which keeps its result),
- ``POST /jobs`` enqueues a registered job by name and ``GET /jobs/{id}`` tells how it went (signed-in users),
- an in-process worker started and stopped by the app's lifespan,
- the errands dashboard at ``/errands``, behind the app's own session login: ``ada`` is an admin
  there, ``vic`` a viewer.

Run it (see README.md)::

    ERRANDS_DATABASE_URL=sqlite:////tmp/errands-fastapi.db uvicorn app:create_app --factory

The passwords come from ``EXAMPLE_ADMIN_PASSWORD`` / ``EXAMPLE_VIEWER_PASSWORD``; without them the
app makes random ones and logs them at start-up.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html import escape
from typing import Any

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, Field
from starlette.middleware.sessions import SessionMiddleware

from errands import Errands, JobState
from errands.contrib.asgi import Principal, add_exception_handlers, errands_lifespan, mount_dashboard
from errands.dashboard import AuthSettings

log = logging.getLogger("example")


class EnqueueRequest(BaseModel):
    job: str = Field(description="the registered name of the job")
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


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
               secret_key: str | None = None, secure_cookies: bool | None = None, concurrency: int = 2,
               shutdown_timeout: float = 10.0) -> FastAPI:
    """The application.  ``secure_cookies`` defaults to on unless ``EXAMPLE_INSECURE_COOKIES=1``
    (for plain http://localhost during development)."""
    errands = Errands(database_url)
    register_jobs(errands)
    users = users if users is not None else default_users()
    if secure_cookies is None:
        secure_cookies = os.environ.get("EXAMPLE_INSECURE_COOKIES") != "1"

    @asynccontextmanager
    async def prepare(api: FastAPI) -> AsyncIterator[None]:
        # Creating the tables at start-up keeps the example one command; a real deployment runs
        # `errands migrate` in its release step instead.
        await asyncio.to_thread(errands.migrate)
        yield

    lifespan = errands_lifespan(errands, concurrency=concurrency, shutdown_timeout=shutdown_timeout,
                                lifespan=prepare)
    api = FastAPI(title="errands example", lifespan=lifespan)
    api.state.errands = errands
    api.state.lifespan = lifespan
    api.add_middleware(SessionMiddleware, secret_key=secret_key or os.environ.get("EXAMPLE_SECRET_KEY")
                       or secrets.token_urlsafe(32), https_only=secure_cookies, same_site="lax")
    add_exception_handlers(api)

    def signed_in(request: Request) -> tuple[str, str] | None:
        name = request.session.get("user")
        if name in users:
            return name, users[name][0]
        return None

    def dashboard_user(request: Request) -> Principal | None:
        """The dashboard asks the app who is signed in, and as what."""
        user = signed_in(request)
        return None if user is None else Principal(username=user[0], role=user[1])

    mount_dashboard(api, errands, "/errands", auth=dashboard_user, login_url="/login",
                    settings=AuthSettings(secure_cookies=secure_cookies))

    @api.post("/jobs", status_code=202)
    async def enqueue(body: EnqueueRequest, request: Request) -> dict[str, Any]:
        if signed_in(request) is None:
            raise HTTPException(401, "sign in first")
        job = errands.get_job(body.job)  # UnknownJob -> 400, through add_exception_handlers
        handle = await job.aenqueue(*body.args, **body.kwargs)  # the insert runs in a worker thread
        return {"id": handle.id, "job": handle.name}

    @api.get("/jobs/{job_id}")
    async def job_status(job_id: int, request: Request) -> dict[str, Any]:
        if signed_in(request) is None:
            raise HTTPException(401, "sign in first")

        def look() -> dict[str, Any]:
            state = errands.job_state(job_id)
            found = errands.store.features.get_result(job_id) if state is JobState.SUCCEEDED else None
            return {"id": job_id, "state": state.value, "result": found.result if found else None}

        return await asyncio.to_thread(look)

    @api.get("/login", response_class=HTMLResponse)
    async def login_form(next: str = "/") -> str:
        return (f"<!doctype html><title>Sign in</title><form method=post action=/login>"
                f"<input type=hidden name=next value=\"{escape(next)}\">"
                f"<label>User <input name=username></label> <label>Password <input type=password name=password>"
                f"</label> <button>Sign in</button></form>")

    @api.post("/login")
    async def login(request: Request, username: str = Form(""), password: str = Form(""),
                    next: str = Form("/")) -> RedirectResponse:
        known = users.get(username)
        if known is None or not hmac.compare_digest(known[1].encode(), password.encode()):
            raise HTTPException(401, "wrong user name or password")
        request.session["user"] = username
        off_site = not next.startswith("/") or next.startswith("//") or "\\" in next  # "/\evil.com" too
        target = "/" if off_site else next  # never off-site
        return RedirectResponse(target, status_code=303)

    @api.post("/logout")
    async def logout(request: Request) -> RedirectResponse:
        request.session.clear()
        return RedirectResponse("/", status_code=303)

    @api.get("/", response_class=HTMLResponse)
    async def home(request: Request) -> str:
        user = signed_in(request)
        who = f"Signed in as {escape(user[0])}." if user else "<a href=/login>Sign in</a>."
        return f"<!doctype html><title>errands example</title><p>{who} <a href=/errands/>Jobs dashboard</a></p>"

    return api
