"""The guards in front of every handler: who is asking, a CSRF token on every state-changing
request (a form field or the ``X-CSRF-Token`` header, compared in constant time), the admin role
for actions, and the JSON API's request limits (:mod:`.limits`).  Refusals are JSON for the API and
an error page for people."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..services.models import AlertView
from ..services.tokens import new_token, same
from .auth import Principal
from .limits import retry_after
from .rendering import Dashboard, Endpoint, Handler, JSONResponse, Open

HOST_SIGN_IN = ("Sign in required: sign in to the application that hosts this dashboard first, then come back "
                "to this page.")
READS = ("GET", "HEAD")


def refuse(d: Dashboard, request: Request, api: bool, status: int, text: str) -> Response:
    """A refusal: ``{"error": text}`` for the API, the error page for people."""
    if api:
        return JSONResponse({"error": text}, status_code=status)
    return d.render(request, "error.html", None, status=status, message=text)


def _unauthenticated(d: Dashboard, request: Request, api: bool) -> Response:
    """Nobody signed in: 401 for the API; the login page, or the host's word when it signs people in."""
    if api:
        return JSONResponse({"error": "authentication required"}, status_code=401)
    if not d.auth.own_logins:  # the host signs people in; its own login page is not ours to know
        return d.render(request, "error.html", None, status=401, message=HOST_SIGN_IN)
    return RedirectResponse(d.url(request, "/login", next=here(request)), status_code=303)


def here(request: Request) -> str:
    """Where a request went, as a path of this dashboard with its query (``/jobs?state=failed``): the
    login sends the user back there, under the root path it adds itself (so not twice)."""
    root, path = request.scope.get("root_path", ""), request.url.path
    if root and path.startswith(root):
        path = path[len(root):] or "/"
    return path + ("?" + request.url.query if request.url.query else "")


async def _refused_write(d: Dashboard, request: Request, principal: Principal, *, admin: bool, api: bool
                         ) -> Response | None:
    """Why a state-changing request may not go on (a wrong CSRF token, a viewer), or None."""
    sent = request.headers.get("x-csrf-token")
    if sent is None and not api:
        form = await request.form()
        sent = str(form.get("csrf") or "")
    expected = principal.csrf or request.cookies.get("errands_csrf", "")
    if not same(sent, expected):
        return refuse(d, request, api, 403, "invalid or missing CSRF token")
    if admin and not principal.is_admin:
        return refuse(d, request, api, 403, "this needs the admin role")
    return None


def too_many(d: Dashboard, kind: str, per: str, wait: float) -> Response:
    """429 with ``Retry-After``: a request limit of the API (:mod:`.limits`) is used up."""
    seconds = retry_after(wait)
    return JSONResponse({"error": f"too many requests: {d.limiter.describe(kind, per)}; retry in {seconds} s",
                         "retry_after": int(seconds)}, status_code=429, headers={"Retry-After": seconds})


async def _who(d: Dashboard, request: Request, page: bool) -> tuple[Principal | None, list[Any], list[AlertView]]:
    """Who is asking, the cookies a new session sets and, for a page, the alerts crossed now: with the
    dashboard's own logins one trip to a worker thread for both reads (each trip costs the event
    loop a hand-off, which 64 operators' requests a second notice)."""
    if page and d.auth.own_logins:
        def both() -> tuple[Principal | None, list[Any], list[AlertView]]:
            principal, cookies = d.auth.own_principal(request)
            return principal, cookies, d.alerts_for_page() if principal is not None else []

        return await run_in_threadpool(both)
    principal, cookies = await d.auth.principal(request)
    alerts = await run_in_threadpool(d.alerts_for_page) if page and principal is not None else []
    return principal, cookies, alerts


def guarded(d: Dashboard, handler: Handler, *, admin: bool = False, api: bool = False,
            limit: str | None = None) -> Endpoint:
    """``handler`` behind the guards, as a Starlette endpoint; ``limit``: the API's request limits
    of that kind ("enqueue", "actions", "reads") apply, per address and then per principal."""
    async def endpoint(request: Request) -> Response:
        address = request.client.host if request.client else "unknown"
        wait = None if limit is None else d.limiter.check(limit, "address", address)
        if wait is not None:
            return too_many(d, str(limit), "address", wait)
        page = not api and request.method in READS
        principal, cookies, alerts = await _who(d, request, page)
        # A new session (a remember-me token used up and replaced) goes out with whatever answers:
        # the handler's response, a refusal below, or the error page an exception becomes.
        request.state.new_cookies = cookies
        if principal is None:
            return _unauthenticated(d, request, api)
        wait = None if limit is None else d.limiter.check(limit, "principal", principal.username)
        if wait is not None:
            limited = too_many(d, str(limit), "principal", wait)
            d.auth.set_cookies(limited, cookies)
            return limited
        minted = ""
        if principal.host and not principal.csrf and request.method in READS:
            # Host-authenticated: a double-submit token, minted before the page renders its forms
            # (and before /api/me answers), sent back as a cookie with this response.
            minted = new_token()
            principal = dataclasses.replace(principal, csrf=minted)
        if request.method not in READS:
            refused = await _refused_write(d, request, principal, admin=admin, api=api)
            if refused is not None:
                d.auth.set_cookies(refused, cookies)
                return refused
        if page:  # its banners show the alerts crossed now
            request.state.alerts = alerts
        response = await _handled(d, handler, request, principal, api=api)
        if cookies:
            d.auth.set_cookies(response, cookies)
        if minted:
            d.auth.set_csrf_cookie(response, minted)
        return response

    return endpoint


WROTE_COOKIE = "errands_wrote"
"""Set by a change made through the dashboard, for as long as a read may still predate it: a read
replica's ``read_max_lag`` and the shared read models' lifetime (:mod:`.readcache`, which another
process of the dashboard may hold).  Meanwhile the same browser's pages read the primary and past
the cache, so a page shown after an action shows it."""


def _stale_for(d: Dashboard) -> float:
    """Seconds a read served to others may predate a change: 0 when nothing can (no replica, no cache)."""
    router = d.app.read_router
    return max(router.max_lag if router.replica_url is not None else 0.0,
               d.read_cache.horizon if d.read_cache.enabled else 0.0)


async def _handled(d: Dashboard, handler: Handler, request: Request, principal: Principal, *, api: bool
                   ) -> Response:
    """``handler``'s answer.  A change empties this process's shared read models and, while a read
    may predate it (a replica within its lag bound has replayed every change older than the bound;
    a cached model expires), marks the browser: its reads meanwhile go to the primary, past the cache."""
    router = d.app.read_router
    if request.method not in READS:
        response = await handler(d, request, principal)
        stale_for = _stale_for(d)
        if response.status_code < 400 and stale_for > 0:
            d.read_cache.clear()
            response.set_cookie(WROTE_COOKIE, "1", max_age=max(1, math.ceil(stale_for)), httponly=True,
                                samesite="lax", path=request.scope.get("root_path", "") or "/")
        return response
    if request.cookies.get(WROTE_COOKIE):
        request.state.own_writes = True
        if router.replica_url is None:
            return await handler(d, request, principal)
        with router.own_writes():
            if not api:
                request.state.reads = await run_in_threadpool(d.reads_for_page)
            return await handler(d, request, principal)
    if router.replica_url is not None and not api:
        request.state.reads = await run_in_threadpool(d.reads_for_page)
    return await handler(d, request, principal)


def unguarded(d: Dashboard, handler: Open) -> Endpoint:
    """``handler`` for anyone (login, health, the OpenAPI document), as a Starlette endpoint."""
    async def endpoint(request: Request) -> Response:
        return await handler(d, request)

    return endpoint
