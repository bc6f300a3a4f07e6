"""The dashboard as an ASGI application (Starlette), standalone or mounted in a host app.

``create_dashboard(errands_app)`` gives pages for people (:mod:`.pages`) and a JSON API for
programs (:mod:`.api`), both drawn from :mod:`errands.services` only.  Every state-changing request
needs a CSRF token and an admin; viewers read (:mod:`.guards`).  Responses carry a strict CSP
(scripts from our own origin only, no inline script), ``X-Frame-Options: DENY`` and friends; errors
never show a traceback.  This module only assembles those parts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..core.errors import ConfigurationError, ErrandsError, StoreUnavailable
from ..services import accounts
from . import api
from .auth import Authenticator, AuthSettings, HostAuth
from .guards import guarded, unguarded
from .limits import ApiLimits, RequestLimiter
from .openapi import openapi_document
from .pages import (
    audit,
    charts,
    enqueue,
    failed,
    jobs,
    login,
    operations,
    overview,
    queues,
    schedules,
    users,
    workers,
    workflows,
)
from .readcache import DEFAULT_TTL
from .rendering import HERE, Dashboard, Handler, JSONResponse
from .security import SecurityHeaders

if TYPE_CHECKING:
    from ..app import Errands

log = logging.getLogger("errands.dashboard")
NO_USER = ("the dashboard has no user: create the first admin with `errands users create NAME --role admin`, or "
           "pass open_access=True (--behind-host-auth) when the host already guards it")

PAGES: tuple[tuple[str, Handler], ...] = (
    ("/", overview.overview_page), ("/jobs", jobs.jobs_page), ("/jobs/{job_id}", jobs.job_page),
    ("/dead", failed.dead_page), ("/stale", jobs.stale_page), ("/workers", workers.workers_page),
    ("/queues", queues.queues_page), ("/periodic", schedules.periodic_page), ("/enqueue", enqueue.enqueue_page),
    ("/audit", audit.audit_page), ("/users", users.users_page), ("/workflows", workflows.workflows_page),
    ("/workflows/{workflow_id}", workflows.workflow_page),
    ("/find", operations.find_page), ("/charts/throughput", charts.throughput_fragment),
)
"""Pages anyone signed in may read."""
ACTIONS: tuple[tuple[str, Handler], ...] = (
    ("/jobs/{job_id}/cancel", jobs.cancel_action), ("/dead/{action}", failed.dead_action),
    ("/stale/recover", jobs.recover_action), ("/queues/{name}/limits", operations.queue_limits_action),
    ("/queues/{name}/{action}", queues.queue_action), ("/workers/{action}", workers.worker_action),
    ("/periodic/add", schedules.schedule_save), ("/periodic/{name}/run", schedules.periodic_run),
    ("/periodic/{name}/edit", schedules.schedule_save), ("/periodic/{name}/{action}", schedules.schedule_action),
    ("/enqueue", enqueue.enqueue_action),
    ("/users", users.users_action), ("/users/{action}", users.users_action),
    ("/workflows/{workflow_id}/cancel", workflows.cancel_action),
    ("/jobs/bulk", operations.bulk_action),
)
"""Forms that change something: admins only."""


TRACEBACK_AUDIENCES = ("admins", "everyone")


def create_dashboard(app: Errands, *, host_auth: HostAuth | None = None, open_access: bool = False,
                     settings: AuthSettings | None = None, tracebacks_for: str = "admins",
                     api_limits: ApiLimits | None = None, cache_seconds: float = DEFAULT_TTL) -> Starlette:
    """The dashboard for ``app``.

    Without ``host_auth`` it has its own logins (``errands users create``) and refuses to run
    with no user at all; ``host_auth(request) -> Principal | None`` lets the host application's
    authentication decide instead; ``open_access=True`` turns authentication off, for a
    dashboard that sits behind the host's own access control (say so explicitly).
    ``tracebacks_for``: who sees the tracebacks kept in error histories (``keep_traceback``),
    on the pages and in the API: ``"admins"`` (the default) or ``"everyone"`` signed in.
    ``api_limits``: the JSON API's request limits per principal and per address, for enqueueing,
    actions and reads (:class:`~errands.dashboard.limits.ApiLimits`; its defaults when None).
    ``cache_seconds``: how long the overview's and the jobs list's read models serve everyone
    signed in before they are read again (:mod:`~errands.dashboard.readcache`; 0 turns that off).
    """
    if host_auth is not None and open_access:
        raise ConfigurationError("give host_auth or open_access, not both")
    if tracebacks_for not in TRACEBACK_AUDIENCES:
        raise ConfigurationError(f"tracebacks_for must be one of {', '.join(TRACEBACK_AUDIENCES)}, "
                                 f"got {tracebacks_for!r}")
    if not cache_seconds >= 0:
        raise ConfigurationError(f"cache_seconds must be 0 or more, got {cache_seconds!r}")
    auth = Authenticator(app, settings or AuthSettings(), host_auth, open_access)
    d = Dashboard(app, auth, tracebacks_for, cache_seconds)
    d.limiter = RequestLimiter(api_limits or ApiLimits())
    if auth.own_logins and accounts.count_users(app) == 0:
        raise ConfigurationError(NO_USER)
    starlette = Starlette(routes=routes(d), exception_handlers=exception_handlers(d))
    starlette.add_middleware(SecurityHeaders)
    return starlette


def routes(d: Dashboard) -> list[BaseRoute]:
    """Every route: login, pages, actions, the API, the documents, health and static files."""
    found: list[BaseRoute] = [
        Route("/login", unguarded(d, login.login_page), methods=["GET"]),
        Route("/login", unguarded(d, login.login), methods=["POST"]),
        Route("/logout", guarded(d, login.logout), methods=["POST"]),
        Route("/account/theme", guarded(d, login.theme_action), methods=["POST"]),
    ]
    found += [Route(path, guarded(d, handler), methods=["GET"]) for path, handler in PAGES]
    found += [Route(path, guarded(d, handler, admin=True), methods=["POST"]) for path, handler in ACTIONS]
    found += [Route(e.path, guarded(d, api.api(e.call), admin=e.method == "POST", api=True, limit=e.limit),
                    methods=[e.method]) for e in api.ENDPOINTS]
    found += [
        Route("/api/openapi.json", unguarded(d, _openapi), methods=["GET"]),
        Route("/metrics", guarded(d, api.metrics, api=True, limit="reads"), methods=["GET"]),
        Route("/healthz", unguarded(d, api.healthz), methods=["GET"]),
        Route("/favicon.ico", _favicon, methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return found


async def _favicon(request: Request) -> Response:
    """``/favicon.ico``, which browsers ask for on their own where no page said where the icon is (a
    JSON document opened in a tab, the host's root when mounted at it); pages link
    ``static/favicon.svg``.  Without it every such visit logged a 404 in the console (issue 26)."""
    return FileResponse(HERE / "static" / "favicon.ico", media_type="image/x-icon",
                        headers={"cache-control": "public, max-age=86400"})


async def _openapi(d: Dashboard, request: Request) -> Response:
    return JSONResponse(openapi_document(request.scope.get("root_path", "")))


def exception_handlers(d: Dashboard) -> dict[Any, Any]:
    """What an error becomes: JSON for the API, the error page for people; never a traceback."""
    async def not_found(request: Request, exc: Exception) -> Response:
        return d.error(request, 404, "not found")

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return d.error(request, exc.status_code, str(exc.detail))

    async def refused(request: Request, exc: Exception) -> Response:
        return d.error(request, 400, str(exc))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("dashboard error on %s %s", request.method, request.url.path)
        if isinstance(exc, StoreUnavailable):
            return d.error(request, 503, "the database is unavailable; try again in a moment")
        return d.error(request, 500, "something went wrong on our side; the details are in the server's log")

    return {404: not_found, HTTPException: http_error, ErrandsError: refused, Exception: server_error,
            StoreUnavailable: server_error}
