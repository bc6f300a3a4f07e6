"""Signing in and out, and the user's own theme."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ...services import accounts
from ..auth import THEMES, Principal
from ..guards import HOST_SIGN_IN
from ..rendering import Dashboard
from ..security import cross_site, local_path

CROSS_SITE = ("This login came from another site, which may not sign you in (login CSRF). Open the dashboard's "
              "own login page and sign in there.")


async def login_page(d: Dashboard, request: Request) -> Response:
    """The login form (or the overview, when the host signs people in)."""
    if not d.auth.own_logins:
        return RedirectResponse(d.url(request, "/"), status_code=303)
    return d.render(request, "login.html", None, next=request.query_params.get("next", ""))


async def login(d: Dashboard, request: Request) -> Response:
    """Check a password; on success a session (and cookies) and a redirect to where the user was going."""
    if not d.auth.own_logins:  # no password of ours is a way in when the host signs people in
        return d.render(request, "error.html", None, status=401, message=HOST_SIGN_IN)
    if cross_site(request.headers):  # another site's form would sign this browser into its author's account
        return d.render(request, "error.html", None, status=403, message=CROSS_SITE)
    form = await request.form()
    username, password = str(form.get("username", ""))[:100], str(form.get("password", ""))
    address = request.client.host if request.client else "unknown"
    principal, cookies, message = await run_in_threadpool(d.auth.login, username, password, address,
                                                          bool(form.get("remember")))
    if principal is None:
        return d.render(request, "login.html", None, status=401, error=message, username=username,
                        next=str(form.get("next", "")))
    response = RedirectResponse(d.url(request, local_path(str(form.get("next") or "/"))), status_code=303)
    d.auth.set_cookies(response, cookies)
    return response


async def logout(d: Dashboard, request: Request, user: Principal) -> Response:
    """End the session and its remember-me token."""
    response = RedirectResponse(d.url(request, "/login" if d.auth.own_logins else "/"), status_code=303)
    await run_in_threadpool(d.auth.logout, request, response)
    return response


async def theme_action(d: Dashboard, request: Request, user: Principal) -> Response:
    """Keep the user's theme (host-authenticated users have no account to keep it in)."""
    form = await request.form()
    theme = str(form.get("theme", "auto"))
    if theme not in THEMES:
        raise HTTPException(400, "unknown theme")
    if not user.host:
        await run_in_threadpool(accounts.set_theme, d.app, user.username, theme)
    return RedirectResponse(d.url(request, local_path(str(form.get("back") or "/"))), status_code=303)
