"""The dashboard as an ASGI application (Starlette), standalone or mounted in a host app.

``create_dashboard(errands_app)`` gives pages for people and a JSON API for programs, both
drawn from :mod:`errands.services.operator` only.  Every state-changing request needs a
CSRF token (a form field or the ``X-CSRF-Token`` header) compared in constant time, and
an admin; viewers read.  Responses carry a strict CSP (scripts from our own origin only,
no inline script), ``X-Frame-Options: DENY`` and friends; errors never show a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jinja2.filters import do_urlencode
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.responses import JSONResponse as _StarletteJSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..core.config import check_queue_name
from ..core.errors import (
    ConfigurationError,
    EnqueueError,
    ErrandsError,
    InvalidQueueName,
    JobNotFound,
    StoreUnavailable,
)
from ..core.limits import ID_MAX, INT_MAX, MAX_DELAY
from ..core.payload import MAX_DEPTH, parse_json, safe_text, too_deep
from ..services import accounts
from ..services import operator as ops
from ..services.accounts import ROLES
from .auth import THEMES, Authenticator, AuthSettings, HostAuth, Principal
from .openapi import openapi_document
from .security import SecurityHeaders, local_path, new_token, same

if TYPE_CHECKING:
    from ..app import Errands

log = logging.getLogger("errands.dashboard")
HERE = Path(__file__).parent
PAGE_SIZE = 50
HOST_SIGN_IN = ("Sign in required: sign in to the application that hosts this dashboard first, then come back "
                "to this page.")
BULK_CAP = 100_000
BODY_DEPTH = MAX_DEPTH + 2
"""Nesting levels a JSON API body may use: the body object, the args list (or kwargs object) and a
job's arguments' own MAX_DEPTH levels (what ``payload.encode_payload`` accepts)."""


class JSONResponse(_StarletteJSONResponse):
    """Every JSON response of the dashboard: whatever a row held (text that is no UTF-8, a NaN),
    the answer is valid JSON in UTF-8.  The usual rendering first; only when it fails, again with
    every string passed through :func:`safe_text` and every non-finite float spelled as text."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:  # UnicodeEncodeError (lone surrogates), or NaN / infinity
            return super().render(ops.displayable(content))


def _finalize(value: Any) -> Any:
    """What every ``{{ ... }}`` of a template prints: text made safe to encode as UTF-8 (markup,
    already escaped, stays markup)."""
    if isinstance(value, str):
        clean = safe_text(value)
        return Markup(clean) if isinstance(value, Markup) else clean
    return value


def _urlencode(value: Any) -> str:
    """Jinja's ``urlencode``, for text that may hold lone surrogates (which it cannot encode)."""
    return do_urlencode(ops.displayable(value))


def _segment(value: Any) -> str:
    """``value`` quoted as one segment of a URL path: "/" and "?" included."""
    return quote(safe_text(value), safe="")


def _valid_queue_name(name: Any) -> bool:
    try:
        check_queue_name(name)
    except InvalidQueueName:
        return False
    return True


class Dashboard:
    def __init__(self, app: Errands, auth: Authenticator) -> None:
        self.app = app
        self.auth = auth
        self.env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                               trim_blocks=True, lstrip_blocks=True, finalize=_finalize)
        self.env.filters["urlencode"] = _urlencode
        self.env.filters["segment"] = _segment
        self.env.tests["queue_name"] = _valid_queue_name
        self.env.globals["max_delay"] = int(MAX_DELAY)
        self.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
        self.env.filters["number"] = lambda v: f"{v:,}" if isinstance(v, int) else v
        self.env.filters["duration"] = _duration

    # ------------------------------------------------------------------ plumbing
    async def who(self, request: Request) -> tuple[Principal | None, list[Any]]:
        return await self.auth.principal(request)

    def render(self, request: Request, template: str, principal: Principal | None, status: int = 200,
               cookies: list[Any] | None = None, **context: Any) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        html = self.env.get_template(template).render(
            request=request, user=principal, root=root, path=request.url.path[len(root):] or "/",
            csrf=principal.csrf if principal else "", query=dict(request.query_params), **context)
        response = HTMLResponse(html, status_code=status)
        if cookies:
            self.auth.set_cookies(response, cookies)
        return response

    def url(self, request: Request, path: str, **params: Any) -> str:
        clean = {k: v for k, v in params.items() if v not in (None, "")}
        return request.scope.get("root_path", "") + path + (("?" + urlencode(clean)) if clean else "")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


_INTEGER = re.compile(r"[+-]?[0-9]{1,40}")


def _int(value: Any, name: str, low: int = 1, high: int = ID_MAX) -> int | None:
    """An integer from a URL or a form, checked against the range of what it names (by default a
    job id, 1..ID_MAX: a bigger number is no id any backend holds, and fails the driver); None
    when absent; a 400 for anything else."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    if not _INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise HTTPException(400, f"{name} must be an integer from {low} to {high}")
    return int(text)


def _job_id(request: Request) -> int:
    return _int(request.path_params["job_id"], "job id") or 0


def _delay_field(value: str) -> float | None:
    """The enqueue form's delay: empty, or 0 to MAX_DELAY seconds (ValueError otherwise)."""
    if not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_DELAY:  # NaN and the infinities fail this too
        raise ValueError(f"delay must be a number of seconds from 0 to {MAX_DELAY:.0f} (ten years), got {value!r}")
    return seconds


def _checked_queue(name: str) -> str:
    """A queue name from a URL path, refused with a 400 unless it is one (see config.check_queue_name)."""
    try:
        return check_queue_name(name)
    except InvalidQueueName as exc:
        raise HTTPException(400, str(exc)) from None


def _filter(params: Any) -> ops.JobFilter:
    def text(*keys: str) -> str | None:
        for key in keys:
            value = params.get(key)
            if value:
                if not isinstance(value, str):  # a file in a form, a number in a JSON body
                    raise HTTPException(400, f"{key} must be text")
                return safe_text(value)  # a NUL (which PostgreSQL refuses) matches nothing, like any text
        return None

    try:
        return ops.JobFilter(text("queue"), text("state"), text("name"), text("q", "text")).check()
    except ErrandsError as exc:
        raise HTTPException(400, str(exc)) from None


def _sort(params: Any) -> str:
    sort = params.get("sort") or "newest"
    if sort not in ops.SORTS:
        raise HTTPException(400, f"sort must be one of {', '.join(ops.SORTS)}")
    return str(sort)


def create_dashboard(app: Errands, *, host_auth: HostAuth | None = None, open_access: bool = False,
                     settings: AuthSettings | None = None) -> Starlette:
    """The dashboard for ``app``.

    Without ``host_auth`` it has its own logins (``errands users create``) and refuses to run
    with no user at all; ``host_auth(request) -> Principal | None`` lets the host application's
    authentication decide instead; ``open_access=True`` turns authentication off, for a
    dashboard that sits behind the host's own access control (say so explicitly).
    """
    if host_auth is not None and open_access:
        raise ConfigurationError("give host_auth or open_access, not both")
    settings = settings or AuthSettings()
    auth = Authenticator(app, settings, host_auth, open_access)
    d = Dashboard(app, auth)
    if auth.own_logins and app.store.accounts.count_users() == 0:
        raise ConfigurationError("the dashboard has no user: create the first admin with `errands users create "
                                 "NAME --role admin`, or pass open_access=True (--behind-host-auth) when the host "
                                 "already guards it")

    def guarded(handler: Callable[..., Any], *, admin: bool = False, api: bool = False) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            principal, cookies = await d.who(request)
            if principal is None:
                if api:
                    return JSONResponse({"error": "authentication required"}, status_code=401)
                if not auth.own_logins:  # the host signs people in; its own login page is not ours to know
                    return d.render(request, "error.html", None, status=401, message=HOST_SIGN_IN)
                return RedirectResponse(d.url(request, "/login", next=request.url.path), status_code=303)
            minted = ""
            if principal.host and not principal.csrf and request.method in ("GET", "HEAD"):
                # Host-authenticated: a double-submit token, minted before the page renders its forms
                # (and before /api/me answers), sent back as a cookie with this response.
                minted = new_token()
                principal = dataclasses.replace(principal, csrf=minted)
            if request.method not in ("GET", "HEAD"):
                sent = request.headers.get("x-csrf-token")
                if sent is None and not api:
                    form = await request.form()
                    sent = str(form.get("csrf") or "")
                expected = principal.csrf or request.cookies.get("errands_csrf", "")
                if not same(sent, expected):
                    return _refuse(request, api, 403, "invalid or missing CSRF token")
                if admin and not principal.is_admin:
                    return _refuse(request, api, 403, "this needs the admin role")
            response = await handler(request, principal)
            if cookies:
                auth.set_cookies(response, cookies)
            if minted:
                auth.set_csrf_cookie(response, minted)
            return response

        return endpoint

    def _refuse(request: Request, api: bool, status: int, text: str) -> Response:
        if api:
            return JSONResponse({"error": text}, status_code=status)
        return d.render(request, "error.html", None, status=status, message=text)

    # ------------------------------------------------------------------ login
    async def login_page(request: Request) -> Response:
        if not auth.own_logins:
            return RedirectResponse(d.url(request, "/"), status_code=303)
        return d.render(request, "login.html", None, next=request.query_params.get("next", ""))

    async def login(request: Request) -> Response:
        if not auth.own_logins:  # no password of ours is a way in when the host signs people in
            return d.render(request, "error.html", None, status=401, message=HOST_SIGN_IN)
        form = await request.form()
        username, password = str(form.get("username", ""))[:100], str(form.get("password", ""))
        address = request.client.host if request.client else "unknown"
        principal, cookies, message = await run_in_threadpool(auth.login, username, password, address,
                                                              bool(form.get("remember")))
        if principal is None:
            return d.render(request, "login.html", None, status=401, error=message, username=username,
                            next=str(form.get("next", "")))
        response = RedirectResponse(d.url(request, local_path(str(form.get("next") or "/"))), status_code=303)
        auth.set_cookies(response, cookies)
        return response

    async def logout(request: Request, user: Principal) -> Response:
        response = RedirectResponse(d.url(request, "/login" if auth.own_logins else "/"), status_code=303)
        await run_in_threadpool(auth.logout, request, response)
        return response

    # ------------------------------------------------------------------ pages
    async def overview_page(request: Request, user: Principal) -> Response:
        window = request.query_params.get("window", "1h")
        if window not in ops.WINDOWS:
            window = "1h"
        data = await run_in_threadpool(ops.overview, app, window)
        return d.render(request, "overview.html", user, data=data, window=window, windows=list(ops.WINDOWS))

    async def jobs_page(request: Request, user: Principal, stale: bool = False) -> Response:
        flt = _filter(request.query_params)
        if stale:
            flt.state = "stale"
        data = await run_in_threadpool(ops.list_jobs, app, flt, _int(request.query_params.get("before"), "before"),
                                       PAGE_SIZE, _sort(request.query_params),
                                       _int(request.query_params.get("after"), "after"))
        return d.render(request, "jobs.html", user, data=data, flt=flt, stale=stale, states=ops.STATES, sorts=ops.SORTS,
                        queues=await run_in_threadpool(app.default_queues))

    async def stale_page(request: Request, user: Principal) -> Response:
        return await jobs_page(request, user, stale=True)

    async def job_page(request: Request, user: Principal) -> Response:
        job_id = _job_id(request)
        try:
            job = await run_in_threadpool(ops.job_detail, app, job_id)
        except JobNotFound as exc:
            return d.render(request, "error.html", user, status=404, message=str(exc))
        return d.render(request, "job.html", user, job=job)

    async def dead_page(request: Request, user: Principal) -> Response:
        flt = _filter(request.query_params)
        data = await run_in_threadpool(ops.dead_letter, app, flt, _int(request.query_params.get("before"), "before"),
                                       PAGE_SIZE)
        return d.render(request, "dead.html", user, data=data, flt=flt)

    async def dead_action(request: Request, user: Principal) -> Response:
        form = await request.form()
        action = request.path_params["action"]
        if action not in ("retry", "forget"):
            raise HTTPException(404)
        flt = _filter(form)
        given = [_int(i, "id") for i in form.getlist("id")]
        ids = [i for i in given if i is not None]
        if form.get("scope") == "all":
            ids = (await run_in_threadpool(ops.matching_failed, app, flt))[:BULK_CAP]
        elif len(ids) != len(given):
            ids = []
        if not ids:
            return d.render(request, "error.html", user, status=400, message="nothing selected")
        confirmed = _int(form.get("confirm"), "confirm", 0)
        if confirmed != len(ids):  # say how many first; act only when the same count comes back
            return d.render(request, "confirm.html", user, action=action, ids=ids, count=len(ids), flt=flt,
                            scope=form.get("scope", ""))
        done = await run_in_threadpool(ops.retry_failed if action == "retry" else ops.forget_failed, app, user.username,
                                      ids)
        back = d.url(request, "/dead", queue=flt.queue, name=flt.name, q=flt.text, done=f"{action}:{done}")
        return RedirectResponse(back, status_code=303)

    async def recover_action(request: Request, user: Principal) -> Response:
        report = await run_in_threadpool(ops.recover_now, app, user.username)
        return RedirectResponse(d.url(request, "/stale", done=f"recovered:{len(report['released'])}:"
                                                                f"{len(report['buried'])}"), status_code=303)

    async def workers_page(request: Request, user: Principal) -> Response:
        return d.render(request, "workers.html", user, workers=await run_in_threadpool(ops.workers_view, app))

    async def queues_page(request: Request, user: Principal) -> Response:
        return d.render(request, "queues.html", user, queues=await run_in_threadpool(ops.queues_view, app))

    async def queue_action(request: Request, user: Principal) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        if action not in ("pause", "resume"):
            raise HTTPException(404)
        name = _checked_queue(name)
        await run_in_threadpool(ops.set_paused, app, user.username, name, action == "pause")
        return RedirectResponse(d.url(request, "/queues", done=f"{action}:{name}"), status_code=303)

    async def periodic_page(request: Request, user: Principal) -> Response:
        return d.render(request, "periodic.html", user, schedules=await run_in_threadpool(ops.periodic_view, app))

    async def periodic_run(request: Request, user: Principal) -> Response:
        job_id = await run_in_threadpool(ops.run_periodic_now, app, user.username, request.path_params["name"])
        return RedirectResponse(d.url(request, f"/jobs/{job_id}"), status_code=303)

    async def cancel_action(request: Request, user: Principal) -> Response:
        job_id = _job_id(request)
        await run_in_threadpool(ops.cancel_job, app, user.username, job_id)
        return RedirectResponse(d.url(request, f"/jobs/{job_id}"), status_code=303)

    async def enqueue_page(request: Request, user: Principal) -> Response:
        return d.render(request, "enqueue.html", user, jobs=await run_in_threadpool(ops.enqueue_form, app),
                        cap=ops.ENQUEUE_CAP, selected=request.query_params.get("job", ""))

    async def enqueue_action(request: Request, user: Principal) -> Response:
        form = await request.form()
        values = {k: str(form.get(k, "")) for k in ("job", "args", "kwargs", "queue", "delay", "copies")}
        try:
            args = parse_json(values["args"] or "[]", "arguments")
            kwargs = parse_json(values["kwargs"] or "{}", "keyword arguments")
            delay = _delay_field(values["delay"])
            if not _INTEGER.fullmatch(values["copies"].strip() or "1") \
                    or not 1 <= int(values["copies"] or 1) <= ops.ENQUEUE_CAP:
                raise ValueError(f"copies must be a whole number from 1 to {ops.ENQUEUE_CAP}")
            ids = await run_in_threadpool(ops.enqueue, app, user.username, values["job"], args, kwargs,
                                          queue=values["queue"] or None, delay=delay,
                                          copies=int(values["copies"] or 1))
        except (ValueError, EnqueueError) as exc:
            jobs = await run_in_threadpool(ops.enqueue_form, app)
            return d.render(request, "enqueue.html", user, status=400, jobs=jobs,
                            cap=ops.ENQUEUE_CAP, selected=values["job"], error=str(exc), values=values)
        target = f"/jobs/{ids[0]}" if len(ids) == 1 else "/jobs"
        return RedirectResponse(d.url(request, target, done=f"enqueued:{len(ids)}"), status_code=303)

    async def audit_page(request: Request, user: Principal) -> Response:
        entries = await run_in_threadpool(ops.audit_view, app, _int(request.query_params.get("before"), "before"))
        return d.render(request, "audit.html", user, entries=entries)

    async def users_page(request: Request, user: Principal) -> Response:
        if not user.is_admin:
            return d.render(request, "error.html", user, status=403, message="this needs the admin role")
        search = safe_text(request.query_params.get("q", ""), 100)
        users = [] if not auth.own_logins else await run_in_threadpool(app.store.accounts.list_users, search or None)
        return d.render(request, "users.html", user, users=users, search=search, roles=ROLES,
                        own_logins=auth.own_logins)

    async def users_action(request: Request, user: Principal) -> Response:
        form = await request.form()
        action = request.path_params.get("action", "create")
        username = str(form.get("username", "")).strip()[:100]
        try:
            if action not in accounts.ACTIONS:
                raise HTTPException(404)
            await run_in_threadpool(accounts.change_user, app, user.username, action, username,
                                    role=str(form.get("role", "viewer")), password=str(form.get("password", "")))
        except (ValueError, ErrandsError) as exc:
            users = await run_in_threadpool(app.store.accounts.list_users)
            return d.render(request, "users.html", user, status=400, users=users, search="",
                            roles=ROLES, own_logins=auth.own_logins, error=str(exc))
        return RedirectResponse(d.url(request, "/users", done=f"{action}:{username}"), status_code=303)

    async def theme_action(request: Request, user: Principal) -> Response:
        form = await request.form()
        theme = str(form.get("theme", "auto"))
        if theme not in THEMES:
            raise HTTPException(400, "unknown theme")
        if not user.host:
            await run_in_threadpool(app.store.accounts.update_user, user.username, theme=theme)
        return RedirectResponse(d.url(request, local_path(str(form.get("back") or "/"))), status_code=303)

    # ------------------------------------------------------------------ JSON API
    def api(fn: Callable[..., Any]) -> Callable[..., Any]:
        async def handler(request: Request, user: Principal) -> Response:
            body: dict[str, Any] = {}
            if request.method == "POST":
                try:
                    text = (await request.body()).decode("utf-8") or "{}"
                    if too_deep(text, BODY_DEPTH):  # before the decoder, which recurses
                        return JSONResponse({"error": f"the body nests lists and objects more than {BODY_DEPTH} "
                                                      f"levels deep (a job's arguments may nest {MAX_DEPTH})"},
                                            status_code=400)
                    body = json.loads(text)
                except (ValueError, RecursionError):
                    return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
                if not isinstance(body, dict):
                    return JSONResponse({"error": "the body must be a JSON object"}, status_code=400)
            try:
                result = await run_in_threadpool(fn, request, user, body)
            except HTTPException as exc:
                return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
            except JobNotFound as exc:
                return JSONResponse({"error": str(exc)}, status_code=404)
            except (EnqueueError, ValueError, TypeError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            return JSONResponse(result)

        return handler

    def api_overview(request: Request, user: Principal, body: Any) -> Any:
        window = request.query_params.get("window", "1h")
        if window not in ops.WINDOWS:
            raise HTTPException(400, f"window must be one of {', '.join(ops.WINDOWS)}")
        return ops.overview(app, window)

    def api_jobs(request: Request, user: Principal, body: Any) -> Any:
        limit = min(_int(request.query_params.get("limit"), "limit", 1, INT_MAX) or PAGE_SIZE, 500)
        return ops.list_jobs(app, _filter(request.query_params), _int(request.query_params.get("before"), "before"),
                             limit, _sort(request.query_params), _int(request.query_params.get("after"), "after"))

    def api_job(request: Request, user: Principal, body: Any) -> Any:
        return ops.job_detail(app, _job_id(request))

    def api_dead(request: Request, user: Principal, body: Any) -> Any:
        limit = min(_int(request.query_params.get("limit"), "limit", 1, INT_MAX) or PAGE_SIZE, 500)
        return ops.dead_letter(app, _filter(request.query_params), _int(request.query_params.get("before"), "before"),
                               limit)

    def api_dead_action(request: Request, user: Principal, body: dict[str, Any]) -> Any:
        action = request.path_params["action"]
        if action not in ("retry", "forget"):
            raise HTTPException(404, "no such action")
        ids = body.get("ids")
        if ids is None:
            flt = _filter({k: body.get(k) for k in ("queue", "name", "text")})
            ids = ops.matching_failed(app, flt)[:BULK_CAP]
        if not isinstance(ids, list) or not all(type(i) is int and 1 <= i <= ID_MAX for i in ids):
            raise HTTPException(400, f"ids must be a list of job ids (integers from 1 to {ID_MAX})")
        confirm = body.get("confirm")
        if confirm is not None and (type(confirm) is not int or not 0 <= confirm <= ID_MAX):
            raise HTTPException(400, "confirm must be the count the previous call reported (an integer)")
        if confirm != len(ids):
            return {"needs_confirmation": True, "count": len(ids),
                    "hint": f"send confirm={len(ids)} to {action} {len(ids)} entries"}
        done = (ops.retry_failed if action == "retry" else ops.forget_failed)(app, user.username, ids)
        return {"done": done}

    def api_recover(request: Request, user: Principal, body: Any) -> Any:
        return ops.recover_now(app, user.username)

    def api_workers(request: Request, user: Principal, body: Any) -> Any:
        return {"workers": ops.workers_view(app)}

    def api_queues(request: Request, user: Principal, body: Any) -> Any:
        return {"queues": ops.queues_view(app)}

    def api_queue_action(request: Request, user: Principal, body: Any) -> Any:
        action = request.path_params["action"]
        if action not in ("pause", "resume"):
            raise HTTPException(404, "no such action")
        name = _checked_queue(request.path_params["name"])
        ops.set_paused(app, user.username, name, action == "pause")
        return {"queue": name, "paused": action == "pause"}

    def api_periodic(request: Request, user: Principal, body: Any) -> Any:
        return {"schedules": ops.periodic_view(app)}

    def api_periodic_run(request: Request, user: Principal, body: Any) -> Any:
        return {"job_id": ops.run_periodic_now(app, user.username, request.path_params["name"])}

    def api_cancel(request: Request, user: Principal, body: Any) -> Any:
        return {"outcome": ops.cancel_job(app, user.username, _job_id(request))}

    def api_enqueue(request: Request, user: Principal, body: dict[str, Any]) -> Any:
        delay = body.get("delay")
        if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float))
                                  or not 0 <= delay <= MAX_DELAY):  # NaN and the infinities fail this too
            raise HTTPException(400, f"delay must be a number of seconds from 0 to {MAX_DELAY:.0f} (ten years)")
        queue = body.get("queue")
        if queue is not None and not isinstance(queue, str):
            raise HTTPException(400, "queue must be a string")
        name = body.get("job")
        if not isinstance(name, str):
            raise HTTPException(400, "job must be the name of a registered job")
        return {"ids": ops.enqueue(app, user.username, name, body.get("args", []), body.get("kwargs", {}),
                                   queue=queue, delay=delay, copies=body.get("copies", 1))}

    def api_jobs_form(request: Request, user: Principal, body: Any) -> Any:
        return {"jobs": ops.enqueue_form(app)}

    def api_audit(request: Request, user: Principal, body: Any) -> Any:
        return {"entries": ops.audit_view(app, _int(request.query_params.get("before"), "before"))}

    def api_users(request: Request, user: Principal, body: Any) -> Any:
        if not user.is_admin:
            raise HTTPException(403, "this needs the admin role")
        search = request.query_params.get("q")
        if search is not None and len(search) > 100:
            raise HTTPException(400, "q is at most 100 characters")
        search = None if search is None else safe_text(search)
        return {"users": [{"username": u.username, "role": u.role, "disabled": u.disabled,
                           "last_login_at": u.last_login_at.isoformat() if u.last_login_at else None}
                          for u in (app.store.accounts.list_users(search or None) if auth.own_logins else [])]}

    def api_me(request: Request, user: Principal, body: Any) -> Any:
        return {"username": user.username, "role": user.role, "theme": user.theme, "csrf": user.csrf}

    async def openapi(request: Request) -> Response:
        return JSONResponse(openapi_document(request.scope.get("root_path", "")))

    async def metrics(request: Request, user: Principal) -> Response:
        from ..metrics import render

        body, content_type = await run_in_threadpool(render, app, request.headers.get("accept"))
        return Response(body, media_type=content_type)

    async def healthz(request: Request) -> Response:
        try:
            await run_in_threadpool(app.store.now)
        except StoreUnavailable:
            return JSONResponse({"status": "unavailable", "database": "unreachable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    def get(path: str, fn: Callable[..., Any], **kw: Any) -> Route:
        return Route(path, guarded(fn, **kw), methods=["GET"])

    def post(path: str, fn: Callable[..., Any], **kw: Any) -> Route:
        return Route(path, guarded(fn, admin=True, **kw), methods=["POST"])

    routes = [
        Route("/login", login_page, methods=["GET"]), Route("/login", login, methods=["POST"]),
        Route("/logout", guarded(logout), methods=["POST"]),
        get("/", overview_page), get("/jobs", jobs_page), get("/jobs/{job_id}", job_page),
        post("/jobs/{job_id}/cancel", cancel_action), get("/dead", dead_page), post("/dead/{action}", dead_action),
        get("/stale", stale_page), post("/stale/recover", recover_action), get("/workers", workers_page),
        get("/queues", queues_page), post("/queues/{name}/{action}", queue_action),
        get("/periodic", periodic_page), post("/periodic/{name}/run", periodic_run),
        get("/enqueue", enqueue_page), post("/enqueue", enqueue_action), get("/audit", audit_page),
        get("/users", users_page), post("/users", users_action), post("/users/{action}", users_action),
        Route("/account/theme", guarded(theme_action), methods=["POST"]),
        get("/api/overview", api(api_overview), api=True), get("/api/jobs", api(api_jobs), api=True),
        get("/api/jobs/{job_id}", api(api_job), api=True),
        post("/api/jobs/{job_id}/cancel", api(api_cancel), api=True),
        get("/api/dead", api(api_dead), api=True), post("/api/dead/{action}", api(api_dead_action), api=True),
        post("/api/stale/recover", api(api_recover), api=True), get("/api/workers", api(api_workers), api=True),
        get("/api/queues", api(api_queues), api=True),
        post("/api/queues/{name}/{action}", api(api_queue_action), api=True),
        get("/api/periodic", api(api_periodic), api=True),
        post("/api/periodic/{name}/run", api(api_periodic_run), api=True),
        get("/api/enqueue", api(api_jobs_form), api=True), post("/api/enqueue", api(api_enqueue), api=True),
        get("/api/audit", api(api_audit), api=True), get("/api/users", api(api_users), api=True),
        get("/api/me", api(api_me), api=True),
        Route("/api/openapi.json", openapi, methods=["GET"]), get("/metrics", metrics, api=True),
        Route("/healthz", healthz, methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(request, 404, "not found")

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(request, exc.status_code, str(exc.detail))

    async def refused(request: Request, exc: Exception) -> Response:
        return _error(request, 400, str(exc))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("dashboard error on %s %s", request.method, request.url.path)
        if isinstance(exc, StoreUnavailable):
            return _error(request, 503, "the database is unavailable; try again in a moment")
        return _error(request, 500, "something went wrong on our side; the details are in the server's log")

    def _error(request: Request, status: int, text: str) -> Response:
        if "/api/" in request.url.path or request.url.path.endswith("/metrics"):
            return JSONResponse({"error": text}, status_code=status)
        return HTMLResponse(d.env.get_template("error.html").render(user=None, message=text, root=request.scope.get(
            "root_path", ""), path="", csrf="", query={}), status_code=status)

    handlers: dict[Any, Any] = {404: not_found, HTTPException: http_error, ErrandsError: refused,
                                Exception: server_error, StoreUnavailable: server_error}
    starlette = Starlette(routes=routes, exception_handlers=handlers)
    starlette.add_middleware(SecurityHeaders)
    return starlette
